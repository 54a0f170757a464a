//! DataVolumes (CDI's cdi.kubevirt.io/v1beta1) through the real binary: imports from a
//! loopback HTTP server in each format (raw, qcow2, xz, gzip), with basic auth, retried
//! after 503s, failing on a 404, a truncated image and a claim too small; a clone of
//! another claim; a blank disk; progress seen moving in a watch; a delete mid-import
//! that stops the transfer; and VMs whose `dataVolumeTemplates` (or a DataVolume they
//! name) must be ready before their VMI starts. Nodes are simulated; the claim files the
//! server fills are read back and compared with the image.

mod cdi;
mod images;
mod lifecycle;
mod support;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use images::{raw_image, Images, PASSWORD, RAW_SIZE, USER};
use lifecycle::{vm, Cluster};
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::{condition, printable};

const NS: &str = "images";
const WAIT: Duration = Duration::from_secs(60);
const DVS: &str = "/apis/cdi.kubevirt.io/v1beta1/namespaces/images/datavolumes";

fn http(url: String) -> Value {
    json!({"http": {"url": url}})
}

async fn start() -> Option<(Cluster, Images)> {
    let images = images::serve().await?;
    let cluster = Cluster::start(1, &[]).await;
    cluster.namespace(NS).await;
    Some((cluster, images))
}

/// The claim of a DataVolume, and the file behind it.
/// Waits until DataVolume `name` has an event `reason` whose message contains `says`.
async fn data_volume_event(c: &Cluster, name: &str, reason: &str, says: &str) {
    let path = format!(
        "/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.kind%3DDataVolume,involvedObject.name%3D{name},reason%3D{reason}"
    );
    c.api
        .eventually(&path, Duration::from_secs(30), |r| {
            r.body["items"].as_array().is_some_and(|items| {
                items
                    .iter()
                    .any(|e| e["message"].as_str().unwrap_or("").contains(says))
            })
        })
        .await;
}

async fn claim_of(c: &Cluster, name: &str) -> (Value, PathBuf) {
    let claim = c
        .api
        .get(&format!(
            "/api/v1/namespaces/{NS}/persistentvolumeclaims/{name}"
        ))
        .await;
    assert_eq!(claim.status, StatusCode::OK, "{}", claim.body);
    let path = claim.body["metadata"]["annotations"]["virtplane.io/volume-path"]
        .as_str()
        .expect("volume path")
        .into();
    (claim.body, path)
}

/// The claim's file holds the raw image at its start and is as long as the claim.
async fn holds_the_image(c: &Cluster, name: &str, claim_bytes: u64) {
    let (claim, path) = claim_of(c, name).await;
    let owner = &claim["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["name"].as_str(),
            owner["controller"].as_bool()
        ),
        (Some("DataVolume"), Some(name), Some(true))
    );
    let data = std::fs::read(&path).expect("claim file");
    assert_eq!(
        data.len() as u64,
        claim_bytes,
        "{} is sized to the claim",
        path.display()
    );
    assert!(
        data[..RAW_SIZE] == raw_image()[..],
        "{name}: the image is at the start of {}",
        path.display()
    );
    assert!(
        data[RAW_SIZE..].iter().all(|b| *b == 0),
        "{name}: zeros after the image"
    );
}

#[tokio::test]
async fn every_format_imports_into_a_claim_of_the_data_volumes_name() {
    let Some((c, images)) = start().await else {
        return;
    };
    let cases = [
        ("raw", "disk.raw"),
        ("qcow2", "disk.qcow2"),
        ("xz", "disk.qcow2.xz"),
        ("gz", "disk.raw.gz"),
    ];
    for (name, file) in cases {
        cdi::create(
            &c.api,
            NS,
            &cdi::data_volume(name, http(format!("{}/images/{file}", images.url)), "16Mi"),
        )
        .await;
    }
    for (name, _) in cases {
        let dv = cdi::wait_phase(&c.api, NS, name, "Succeeded").await;
        assert_eq!(dv["status"]["progress"], "100.0%");
        assert_eq!(dv["status"]["claimName"], name);
        assert_eq!(
            condition(&dv, "Ready").map(|r| r["status"].clone()),
            Some(json!("True"))
        );
        assert_eq!(
            condition(&dv, "Bound").map(|r| r["message"].clone()),
            Some(json!(format!("PVC {name} Bound")))
        );
        assert_eq!(cdi::running_message(&dv), "Import Complete");
        holds_the_image(&c, name, 16 << 20).await;
    }
    let table = c
        .api
        .send(
            reqwest::Method::GET,
            DVS,
            &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
            None,
        )
        .await;
    let columns: Vec<&str> = table.body["columnDefinitions"]
        .as_array()
        .expect("table")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "Phase", "Progress", "Restarts", "Age"]);
    assert!(!images.dir.path().join("nothing").exists());
}

#[tokio::test]
async fn bad_sources_fail_with_the_servers_answer_and_transient_errors_are_retried() {
    let Some((c, images)) = start().await else {
        return;
    };
    let url = &images.url;
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("missing", http(format!("{url}/images/nothing.img")), "16Mi"),
    )
    .await;
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume(
            "truncated",
            http(format!("{url}/images/truncated.qcow2")),
            "16Mi",
        ),
    )
    .await;
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("too-small", http(format!("{url}/images/disk.qcow2")), "2Mi"),
    )
    .await;
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("flaky", http(format!("{url}/flaky/disk.raw")), "16Mi"),
    )
    .await;
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume(
            "no-credentials",
            http(format!("{url}/auth/disk.raw")),
            "16Mi",
        ),
    )
    .await;

    let missing = cdi::wait_phase(&c.api, NS, "missing", "Failed").await;
    assert!(
        cdi::running_message(&missing).contains("404"),
        "{}",
        missing["status"]
    );
    let truncated = cdi::wait_phase(&c.api, NS, "truncated", "Failed").await;
    assert!(
        !cdi::running_message(&truncated).is_empty(),
        "{}",
        truncated["status"]
    );
    let small = cdi::wait_phase(&c.api, NS, "too-small", "Failed").await;
    assert!(
        cdi::running_message(&small).contains("A larger PVC is required"),
        "{}",
        small["status"]
    );
    let unauthorized = cdi::wait_phase(&c.api, NS, "no-credentials", "Failed").await;
    assert!(
        cdi::running_message(&unauthorized).contains("401"),
        "{}",
        unauthorized["status"]
    );

    // CDI's events: the failure's words as a Warning, and a retried import's success.
    data_volume_event(&c, "missing", "ImportFailed", "404").await;
    let flaky = cdi::wait_phase(&c.api, NS, "flaky", "Succeeded").await;
    for (reason, says) in [
        ("ImportScheduled", "Import into flaky scheduled"),
        ("ImportInProgress", "Import into flaky in progress"),
        ("ImportSucceeded", "Successfully imported into PVC flaky"),
    ] {
        data_volume_event(&c, "flaky", reason, says).await;
    }
    assert!(
        flaky["status"]["restartCount"]
            .as_i64()
            .is_some_and(|n| n >= 1),
        "{}",
        flaky["status"]
    );
    assert!(images.flaky_requests.load(Ordering::SeqCst) >= 3);
    holds_the_image(&c, "flaky", 16 << 20).await;

    // With the Secret of secretRef, the same URL imports.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "image-creds"},
                        "stringData": {"accessKeyId": USER, "secretKey": PASSWORD}});
    let r = c
        .api
        .post(&format!("/api/v1/namespaces/{NS}/secrets"), &secret)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let mut with_credentials = cdi::data_volume(
        "with-credentials",
        http(format!("{url}/auth/disk.raw")),
        "16Mi",
    );
    with_credentials["spec"]["source"]["http"]["secretRef"] = json!("image-creds");
    cdi::create(&c.api, NS, &with_credentials).await;
    cdi::wait_phase(&c.api, NS, "with-credentials", "Succeeded").await;
    holds_the_image(&c, "with-credentials", 16 << 20).await;
}

#[tokio::test]
async fn clones_blanks_and_data_sources() {
    let Some((c, images)) = start().await else {
        return;
    };
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume(
            "golden",
            http(format!("{}/images/disk.qcow2", images.url)),
            "16Mi",
        ),
    )
    .await;
    cdi::wait_phase(&c.api, NS, "golden", "Succeeded").await;
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume(
            "copy",
            json!({"pvc": {"namespace": NS, "name": "golden"}}),
            "32Mi",
        ),
    )
    .await;
    // No size: the clone takes the source's.
    let mut same_size = cdi::data_volume(
        "same-size",
        json!({"pvc": {"namespace": NS, "name": "golden"}}),
        "1Mi",
    );
    same_size["spec"]["storage"] = json!({});
    cdi::create(&c.api, NS, &same_size).await;
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("blank", json!({"blank": {}}), "8Mi"),
    )
    .await;
    let copy = cdi::wait_phase(&c.api, NS, "copy", "Succeeded").await;
    assert_eq!(cdi::running_message(&copy), "Clone Complete");
    holds_the_image(&c, "copy", 32 << 20).await;
    cdi::wait_phase(&c.api, NS, "same-size", "Succeeded").await;
    holds_the_image(&c, "same-size", 16 << 20).await;
    cdi::wait_phase(&c.api, NS, "blank", "Succeeded").await;
    let (_, blank) = claim_of(&c, "blank").await;
    let zeros = std::fs::read(blank).expect("blank claim");
    assert!(zeros.len() == 8 << 20 && zeros.iter().all(|b| *b == 0));

    // A DataSource names the golden claim; sourceRef clones it.
    let source = json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource", "metadata": {"name": "os"},
                        "spec": {"source": {"pvc": {"namespace": NS, "name": "golden"}}}});
    let r = c
        .api
        .post(
            &format!("/apis/cdi.kubevirt.io/v1beta1/namespaces/{NS}/datasources"),
            &source,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let ready = c
        .api
        .eventually(
            &format!("/apis/cdi.kubevirt.io/v1beta1/namespaces/{NS}/datasources/os"),
            WAIT,
            |r| condition(&r.body, "Ready").is_some_and(|c| c["status"] == "True"),
        )
        .await
        .body;
    assert_eq!(
        ready["status"]["source"]["pvc"]["name"], "golden",
        "{}",
        ready["status"]
    );
    let dangling = json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource", "metadata": {"name": "dangling"},
                          "spec": {"source": {"pvc": {"namespace": NS, "name": "nothing"}}}});
    let r = c
        .api
        .post(
            &format!("/apis/cdi.kubevirt.io/v1beta1/namespaces/{NS}/datasources"),
            &dangling,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    c.api
        .eventually(
            &format!("/apis/cdi.kubevirt.io/v1beta1/namespaces/{NS}/datasources/dangling"),
            WAIT,
            |r| {
                condition(&r.body, "Ready")
                    .is_some_and(|c| c["status"] == "False" && c["message"] == "PVC not found")
            },
        )
        .await;
    let by_ref = json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": "from-source"},
                        "spec": {"sourceRef": {"kind": "DataSource", "name": "os"}, "storage": {}}});
    cdi::create(&c.api, NS, &by_ref).await;
    cdi::wait_phase(&c.api, NS, "from-source", "Succeeded").await;
    holds_the_image(&c, "from-source", 16 << 20).await;

    // spec.storage takes its modes from the StorageProfile of the class; an
    // administrator's claimPropertySets come first.
    let profile_path = "/apis/cdi.kubevirt.io/v1beta1/storageprofiles/local";
    let profile = c.api.get(profile_path).await.body;
    assert_eq!(
        profile["status"]["claimPropertySets"],
        json!([{"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}]),
        "{profile}"
    );
    let (claim, _) = claim_of(&c, "blank").await;
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(claim["spec"]["storageClassName"], "local");
    let shared = json!({"spec": {"claimPropertySets": [{"accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem"}]}});
    assert!(c.api.merge(profile_path, &shared).await.status.is_success());
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("shared", json!({"blank": {}}), "8Mi"),
    )
    .await;
    cdi::wait_phase(&c.api, NS, "shared", "Succeeded").await;
    let (claim, _) = claim_of(&c, "shared").await;
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteMany"]));

    // CDI's admission: a claim of the name that no DataVolume owns is refused.
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "taken"},
                       "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}});
    assert_eq!(
        c.api
            .post(
                &format!("/api/v1/namespaces/{NS}/persistentvolumeclaims"),
                &claim
            )
            .await
            .status,
        StatusCode::CREATED
    );
    let r = c
        .api
        .post(DVS, &cdi::data_volume("taken", json!({"blank": {}}), "8Mi"))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("Destination PVC images/taken already exists"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn progress_moves_and_a_delete_mid_import_stops_it() {
    let Some((c, images)) = start().await else {
        return;
    };
    let mut watch = c.api.watch(&format!("{DVS}?watch=true")).await;
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume(
            "slow",
            http(format!("{}/slow/disk.raw", images.url)),
            "16Mi",
        ),
    )
    .await;
    let mut seen = Vec::new();
    let deadline = Instant::now() + WAIT;
    while seen.len() < 2 {
        assert!(Instant::now() < deadline, "progress never moved: {seen:?}");
        let event = watch.next().await;
        let progress = event["object"]["status"]["progress"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if progress.ends_with('%') && progress != "100.0%" && !seen.contains(&progress) {
            assert_eq!(event["object"]["status"]["phase"], "ImportInProgress");
            seen.push(progress);
        }
    }
    let r = c.api.delete(&format!("{DVS}/slow"), None).await;
    assert!(r.status.is_success(), "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !images.slow_abandoned.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "the import went on after its DataVolume was deleted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.api
        .eventually(
            &format!("/api/v1/namespaces/{NS}/persistentvolumeclaims/slow"),
            WAIT,
            |r| r.status == StatusCode::NOT_FOUND,
        )
        .await;
    let scratch = c.server.data_dir().join("import-scratch");
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "scratch files left: {left:?}");
}

fn vm_with_data_volume(name: &str, data_volume: &str) -> Value {
    let mut vm = vm(name, Some("Always"), json!({}));
    let spec = &mut vm["spec"]["template"]["spec"];
    spec["domain"]["devices"]["disks"] = json!([{"name": "root", "disk": {"bus": "virtio"}}]);
    spec["volumes"] = json!([{"name": "root", "dataVolume": {"name": data_volume}}]);
    vm
}

#[tokio::test]
async fn a_vm_starts_once_its_data_volumes_are_ready() {
    let Some((c, images)) = start().await else {
        return;
    };
    // dataVolumeTemplates: created with the VM, owned by it; the VMI waits for the import.
    let mut vm = vm_with_data_volume("templated", "templated-root");
    vm["spec"]["dataVolumeTemplates"] = json!([{
        "metadata": {"name": "templated-root"},
        "spec": {"source": {"http": {"url": format!("{}/slow/disk.raw", images.url)}},
                 "storage": {"resources": {"requests": {"storage": "16Mi"}}}}}]);
    c.create_vm(NS, &vm).await;
    let vm_path = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/templated");
    c.api
        .eventually(&vm_path, WAIT, |r| printable(&r.body) == "Provisioning")
        .await;
    assert_eq!(
        c.get_vmi(NS, "templated").await.status,
        StatusCode::NOT_FOUND,
        "no VMI while importing"
    );
    let dv = c.api.get(&format!("{DVS}/templated-root")).await.body;
    assert_eq!(
        dv["metadata"]["ownerReferences"][0]["kind"],
        "VirtualMachine"
    );
    assert_eq!(dv["metadata"]["ownerReferences"][0]["name"], "templated");
    cdi::wait_phase(&c.api, NS, "templated-root", "Succeeded").await;
    c.wait_vmi_phase(NS, "templated", "Running").await;

    // Stopping the VM keeps its DataVolume; deleting the VM takes it along.
    let r = c
        .sub(NS, "virtualmachines", "templated", "stop", &json!({}))
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    c.api
        .eventually(&vm_path, WAIT, |r| printable(&r.body) == "Stopped")
        .await;
    assert_eq!(
        c.api.get(&format!("{DVS}/templated-root")).await.status,
        StatusCode::OK
    );
    assert!(c.api.delete(&vm_path, None).await.status.is_success());
    c.api
        .eventually(&format!("{DVS}/templated-root"), WAIT, |r| {
            r.status == StatusCode::NOT_FOUND
        })
        .await;

    // A volume naming a DataVolume that does not exist: the VM says so, and starts once
    // the DataVolume is created and filled.
    c.create_vm(NS, &vm_with_data_volume("waiting", "later"))
        .await;
    let path = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/waiting");
    let waiting = c
        .api
        .eventually(&path, WAIT, |r| {
            condition(&r.body, "DataVolumesReady").is_some()
        })
        .await
        .body;
    let ready = condition(&waiting, "DataVolumesReady").unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("NotAllDVsReady"))
    );
    assert_eq!(ready["message"], "DataVolume images/later does not exist");
    assert_eq!(printable(&waiting), "WaitingForVolumeBinding");
    assert_eq!(c.get_vmi(NS, "waiting").await.status, StatusCode::NOT_FOUND);
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("later", json!({"blank": {}}), "8Mi"),
    )
    .await;
    c.wait_vmi_phase(NS, "waiting", "Running").await;
    let started = c.api.get(&path).await.body;
    assert!(
        condition(&started, "DataVolumesReady").is_none(),
        "{}",
        started["status"]
    );

    // A failed import shows as DataVolumeError.
    let mut failing = vm_with_data_volume("broken", "broken-root");
    failing["spec"]["dataVolumeTemplates"] = json!([{
        "metadata": {"name": "broken-root"},
        "spec": {"source": {"http": {"url": format!("{}/images/nothing.img", images.url)}},
                 "storage": {"resources": {"requests": {"storage": "16Mi"}}}}}]);
    c.create_vm(NS, &failing).await;
    c.api
        .eventually(
            &format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/broken"),
            WAIT,
            |r| printable(&r.body) == "DataVolumeError",
        )
        .await;
}

/// The server dies (`kill -9`) mid-import: after the restart the import starts again
/// (counted as a restart) and finishes with the whole image, never Succeeded half-filled.
#[tokio::test]
async fn an_import_cut_by_a_server_crash_starts_again() {
    let Some((mut c, images)) = start().await else {
        return;
    };
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume(
            "interrupted",
            http(format!("{}/slow/disk.raw", images.url)),
            "16Mi",
        ),
    )
    .await;
    let path = format!("{DVS}/interrupted");
    c.api
        .eventually(&path, WAIT, |r| {
            r.body["status"]["progress"]
                .as_str()
                .is_some_and(|p| p.ends_with('%') && p != "100.0%")
        })
        .await;
    c.server.kill9();
    c.server.restart().await;
    c.api = support::api_for(&c.server);
    let done = cdi::wait_phase(&c.api, NS, "interrupted", "Succeeded").await;
    assert!(
        done["status"]["restartCount"]
            .as_i64()
            .is_some_and(|n| n >= 1),
        "{}",
        done["status"]
    );
    holds_the_image(&c, "interrupted", 16 << 20).await;
}
