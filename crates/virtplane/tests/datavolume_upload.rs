//! Uploads into DataVolumes through the real binary: `virtplane image-upload dv` with a
//! qcow2, an xz and a gzip image into new DataVolumes; the HTTP flow virtctl follows (an
//! UploadTokenRequest, a HEAD probe, then POST /v1beta1/upload-async with the token), the
//! synchronous and form endpoints; refusals as CDI's upload proxy gives them (no token,
//! a wrong one, no DataVolume, one that is not an upload, one already filled); an image
//! too large for its claim (the DataVolume fails and the CLI says why), a body larger
//! than the claim can hold and one cut short (nothing is left behind). The claim files
//! are read back and compared with the image; `DIR/uploads` ends empty.

mod cdi;
mod images;
mod lifecycle;
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use images::{raw_image, Images, RAW_SIZE};
use lifecycle::Cluster;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use support::{binary, Reply};

const NS: &str = "uploads";
const DVS: &str = "/apis/cdi.kubevirt.io/v1beta1/namespaces/uploads/datavolumes";
const TOKENS: &str = "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/uploads/uploadtokenrequests";
const CLAIM_BYTES: u64 = 16 << 20;

async fn start() -> Option<(Cluster, Images)> {
    let images = images::serve().await?;
    let cluster = Cluster::start(1, &[]).await;
    cluster.namespace(NS).await;
    Some((cluster, images))
}

fn image(images: &Images, name: &str) -> PathBuf {
    images.dir.path().join(name)
}

/// The claim's file holds the raw image at its start and is as long as the claim.
async fn holds_the_image(c: &Cluster, name: &str) {
    let claim = c
        .api
        .get(&format!(
            "/api/v1/namespaces/{NS}/persistentvolumeclaims/{name}"
        ))
        .await;
    assert_eq!(claim.status, StatusCode::OK, "{}", claim.text);
    let owner = &claim.body["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("DataVolume"), Some(name))
    );
    let path: PathBuf = claim.body["metadata"]["annotations"]["virtplane.io/volume-path"]
        .as_str()
        .expect("volume path")
        .into();
    let data = std::fs::read(&path).expect("claim file");
    assert_eq!(
        data.len() as u64,
        CLAIM_BYTES,
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

/// What a `virtplane` command printed and how it ended.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

async fn virtplane(c: &Cluster, args: &[&str]) -> Run {
    let kubeconfig = c.server.data_dir().join("admin.kubeconfig");
    let out = tokio::process::Command::new(binary())
        .args(args)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("run virtplane");
    Run {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn image_upload(c: &Cluster, name: &str, image: &Path, size: &str) -> Run {
    let image = image.to_str().expect("image path");
    let size = format!("--size={size}");
    let path = format!("--image-path={image}");
    virtplane(c, &["image-upload", "dv", name, "-n", NS, &size, &path]).await
}

/// A token from an UploadTokenRequest, as virtctl asks for it.
async fn token(c: &Cluster, claim: &str) -> String {
    let request = json!({"apiVersion": "upload.cdi.kubevirt.io/v1beta1", "kind": "UploadTokenRequest",
                         "metadata": {"generateName": "token-for-virtctl-"}, "spec": {"pvcName": claim}});
    let r = c.api.post(TOKENS, &request).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.body["kind"], "UploadTokenRequest");
    assert_eq!(r.body["metadata"]["namespace"], NS);
    assert_eq!(r.body["spec"]["pvcName"], claim);
    r.body["status"]["token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .expect("status.token")
        .to_string()
}

/// A request to the upload proxy, authenticated by `token` only (no client certificate).
async fn proxy(
    c: &Cluster,
    method: Method,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<reqwest::Body>,
) -> Reply {
    let mut request = c
        .api
        .anonymous
        .request(method, format!("{}{path}", c.api.url));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    Reply::read(request.send().await.expect("upload request")).await
}

async fn post_file(c: &Cluster, path: &str, token: &str, file: &Path) -> Reply {
    let bytes = std::fs::read(file).expect("image");
    proxy(
        c,
        Method::POST,
        path,
        Some(token),
        &[("content-type", "application/octet-stream")],
        Some(bytes.into()),
    )
    .await
}

fn uploads_left(c: &Cluster) -> Vec<PathBuf> {
    std::fs::read_dir(c.server.data_dir().join("uploads"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Waits (a few seconds) for `DIR/uploads` to be empty.
async fn no_uploads_left(c: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !uploads_left(c).is_empty() {
        assert!(
            Instant::now() < deadline,
            "files left in DIR/uploads: {:?}",
            uploads_left(c)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn annotation(dv: &Value) -> Option<&Value> {
    dv["metadata"]["annotations"].get("virtplane.io/uploaded-image")
}

#[tokio::test]
async fn image_upload_fills_new_data_volumes_from_qcow2_xz_and_gzip_images() {
    let Some((c, images)) = start().await else {
        return;
    };
    for (name, file) in [
        ("from-qcow2", "disk.qcow2"),
        ("from-xz", "disk.qcow2.xz"),
        ("from-gz", "disk.raw.gz"),
    ] {
        let path = image(&images, file);
        let run = image_upload(&c, name, &path, "16Mi").await;
        assert!(run.success, "{name}: {}\n{}", run.stdout, run.stderr);
        for line in [
            format!("DataVolume {NS}/{name} created"),
            format!("Uploading data to {}", c.api.url),
            "Uploading data completed successfully, waiting for processing to complete, you can hit ctrl-c without interrupting the progress".to_string(),
            "Processing completed successfully".to_string(),
            format!("Uploading {} completed successfully", path.display()),
        ] {
            assert!(
                run.stdout.lines().any(|l| l == line),
                "{name}: {line:?} not printed:\n{}",
                run.stdout
            );
        }
        let dv = c.api.get(&format!("{DVS}/{name}")).await.body;
        assert_eq!(dv["status"]["phase"], "Succeeded", "{}", dv["status"]);
        assert!(dv["spec"]["source"]["upload"].is_object(), "{}", dv["spec"]);
        assert_eq!(
            dv["spec"]["storage"]["resources"]["requests"]["storage"],
            "16Mi"
        );
        assert_eq!(cdi::running_message(&dv), "Upload Complete");
        holds_the_image(&c, name).await;
    }
    no_uploads_left(&c).await;

    // Into an existing upload DataVolume with --no-create; a filled one is refused.
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("existing", json!({"upload": {}}), "16Mi"),
    )
    .await;
    let qcow2 = image(&images, "disk.qcow2");
    let qcow2 = qcow2.to_str().unwrap();
    let run = virtplane(
        &c,
        &[
            "image-upload",
            "dv",
            "existing",
            "-n",
            NS,
            "--no-create",
            "--image-path",
            qcow2,
        ],
    )
    .await;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    assert!(run
        .stdout
        .contains(&format!("Using existing DataVolume {NS}/existing")));
    holds_the_image(&c, "existing").await;
    let again = virtplane(
        &c,
        &[
            "image-upload",
            "dv",
            "existing",
            "-n",
            NS,
            "--no-create",
            "--image-path",
            qcow2,
        ],
    )
    .await;
    assert!(!again.success);
    assert!(
        again.stderr.contains("already successfully imported"),
        "{}",
        again.stderr
    );
    let missing = virtplane(
        &c,
        &[
            "image-upload",
            "dv",
            "nothing",
            "-n",
            NS,
            "--no-create",
            "--image-path",
            qcow2,
        ],
    )
    .await;
    assert!(!missing.success);
    assert!(missing.stderr.contains("not found"), "{}", missing.stderr);
    let sizeless = virtplane(
        &c,
        &[
            "image-upload",
            "dv",
            "sizeless",
            "-n",
            NS,
            "--image-path",
            qcow2,
        ],
    )
    .await;
    assert!(!sizeless.success);
    assert!(
        sizeless
            .stderr
            .contains("when creating a resource, the size must be specified"),
        "{}",
        sizeless.stderr
    );
}

#[tokio::test]
async fn the_http_flow_virtctl_follows_fills_the_claim() {
    let Some((c, images)) = start().await else {
        return;
    };
    let qcow2 = image(&images, "disk.qcow2");

    // Async: the answer comes once the image is received; the import follows.
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("async", json!({"upload": {}}), "16Mi"),
    )
    .await;
    cdi::wait_phase(&c.api, NS, "async", "UploadReady").await;
    let t = token(&c, "async").await;
    let probe = proxy(
        &c,
        Method::HEAD,
        "/v1beta1/upload-async",
        Some(&t),
        &[],
        None,
    )
    .await;
    assert_eq!(probe.status, StatusCode::OK, "{}", probe.text);
    let r = post_file(&c, "/v1beta1/upload-async", &t, &qcow2).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let dv = cdi::wait_phase(&c.api, NS, "async", "Succeeded").await;
    assert_eq!(cdi::running_message(&dv), "Upload Complete");
    holds_the_image(&c, "async").await;
    // virtctl knows an upload claim, and waits for its end, by CDI's claim annotations.
    let claim = c
        .api
        .get(&format!(
            "/api/v1/namespaces/{NS}/persistentvolumeclaims/async"
        ))
        .await
        .body;
    let annotations = &claim["metadata"]["annotations"];
    assert_eq!(
        annotations["cdi.kubevirt.io/storage.upload.target"], "",
        "{annotations}"
    );
    assert_eq!(
        annotations["cdi.kubevirt.io/storage.pod.phase"], "Succeeded",
        "{annotations}"
    );

    // Sync: the answer comes once the DataVolume is Succeeded.
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("sync", json!({"upload": {}}), "16Mi"),
    )
    .await;
    cdi::wait_phase(&c.api, NS, "sync", "UploadReady").await;
    let t = token(&c, "sync").await;
    let r = post_file(&c, "/v1beta1/upload", &t, &image(&images, "disk.raw")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let dv = c.api.get(&format!("{DVS}/sync")).await.body;
    assert_eq!(dv["status"]["phase"], "Succeeded", "{}", dv["status"]);
    holds_the_image(&c, "sync").await;

    // A form, as a browser posts it (the proxy waits for the claim to be bound).
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("form", json!({"upload": {}}), "16Mi"),
    )
    .await;
    let t = token(&c, "form").await;
    let mut body = b"--XyZ\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"disk.qcow2\"\r\nContent-Type: application/octet-stream\r\n\r\n".to_vec();
    body.extend(std::fs::read(&qcow2).unwrap());
    body.extend_from_slice(b"\r\n--XyZ--\r\n");
    let r = proxy(
        &c,
        Method::POST,
        "/v1beta1/upload-form-async",
        Some(&t),
        &[("content-type", "multipart/form-data; boundary=XyZ")],
        Some(body.into()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    cdi::wait_phase(&c.api, NS, "form", "Succeeded").await;
    holds_the_image(&c, "form").await;

    // CDIConfig says where the proxy is, for virtctl.
    let config = c
        .api
        .get("/apis/cdi.kubevirt.io/v1beta1/cdiconfigs/config")
        .await;
    assert_eq!(config.status, StatusCode::OK, "{}", config.text);
    assert_eq!(config.body["status"]["uploadProxyURL"], c.api.url.as_str());
    // Discovery lists the token requests.
    let group = c.api.get("/apis/upload.cdi.kubevirt.io/v1beta1").await;
    assert_eq!(group.status, StatusCode::OK, "{}", group.text);
    let resource = &group.body["resources"][0];
    assert_eq!(
        (
            resource["name"].as_str(),
            resource["kind"].as_str(),
            resource["namespaced"].as_bool()
        ),
        (
            Some("uploadtokenrequests"),
            Some("UploadTokenRequest"),
            Some(true)
        )
    );
    assert_eq!(resource["verbs"], json!(["create"]));
    no_uploads_left(&c).await;
}

#[tokio::test]
async fn uploads_are_refused_as_cdis_upload_proxy_refuses_them() {
    let Some((c, images)) = start().await else {
        return;
    };
    let qcow2 = image(&images, "disk.qcow2");
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("target", json!({"upload": {}}), "16Mi"),
    )
    .await;
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("blank", json!({"blank": {}}), "16Mi"),
    )
    .await;
    cdi::wait_phase(&c.api, NS, "target", "UploadReady").await;
    cdi::wait_phase(&c.api, NS, "blank", "Succeeded").await;

    // The token request is an API request: strangers get 401.
    let stranger = c
        .api
        .anonymous
        .post(format!("{}{TOKENS}", c.api.url))
        .json(&json!({"spec": {"pvcName": "target"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), StatusCode::UNAUTHORIZED);
    let nameless = c.api.post(TOKENS, &json!({"spec": {}})).await;
    assert_eq!(
        nameless.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        nameless.text
    );

    // The proxy takes the upload token only: none is 400, a wrong one 401, and API
    // credentials do not stand in for it.
    let none = proxy(
        &c,
        Method::POST,
        "/v1beta1/upload-async",
        None,
        &[],
        Some("x".into()),
    )
    .await;
    assert_eq!(none.status, StatusCode::BAD_REQUEST, "{}", none.text);
    let garbage = proxy(
        &c,
        Method::POST,
        "/v1beta1/upload-async",
        Some("not.a.token"),
        &[],
        Some("x".into()),
    )
    .await;
    assert_eq!(garbage.status, StatusCode::UNAUTHORIZED, "{}", garbage.text);
    let admin = c
        .api
        .client
        .post(format!("{}/v1beta1/upload-async", c.api.url))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), StatusCode::BAD_REQUEST);
    // One claim's signature on another claim's payload.
    let mine = token(&c, "target").await;
    let other = token(&c, "blank").await;
    let parts: Vec<&str> = mine.split('.').collect();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        other.split('.').nth(1).unwrap(),
        parts[2]
    );
    let r = post_file(&c, "/v1beta1/upload-async", &forged, &qcow2).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);

    // A DataVolume that is not an upload, one that does not exist, one already filled.
    let r = post_file(&c, "/v1beta1/upload-async", &other, &qcow2).await;
    assert_eq!(
        (r.status, r.text.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "PVC blank is not an upload target"
        )
    );
    let r = post_file(
        &c,
        "/v1beta1/upload-async",
        &token(&c, "nowhere").await,
        &qcow2,
    )
    .await;
    assert_eq!(
        (r.status, r.text.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "rejecting Upload Request for PVC nowhere that doesn't exist"
        )
    );
    let r = post_file(&c, "/v1beta1/upload", &mine, &qcow2).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = post_file(&c, "/v1beta1/upload-async", &mine, &qcow2).await;
    assert_eq!(
        (r.status, r.text.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "rejecting Upload Request for PVC target that already finished uploading"
        )
    );
    // The CLI says so too.
    let run = virtplane(
        &c,
        &[
            "image-upload",
            "dv",
            "blank",
            "-n",
            NS,
            "--no-create",
            "--image-path",
            qcow2.to_str().unwrap(),
        ],
    )
    .await;
    assert!(!run.success);
    assert!(
        run.stderr.contains("not available for upload"),
        "{}",
        run.stderr
    );

    // Nobody else names a file for the DataVolume controller to import (and delete).
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("sneaky", json!({"upload": {}}), "16Mi"),
    )
    .await;
    let r = c
        .api
        .merge(
            &format!("{DVS}/sneaky"),
            &json!({"metadata": {"annotations": {"virtplane.io/uploaded-image": "/etc/hostname"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert!(
        r.body["message"].as_str().is_some_and(
            |m| m.contains("virtplane.io/uploaded-image is set by the upload proxy only")
        ),
        "{}",
        r.text
    );
    let mut preset = cdi::data_volume("preset", json!({"upload": {}}), "16Mi");
    preset["metadata"]["annotations"] = json!({"virtplane.io/uploaded-image": "/etc/hostname"});
    assert_eq!(
        c.api.post(DVS, &preset).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    no_uploads_left(&c).await;
}

#[tokio::test]
async fn too_large_or_cut_short_uploads_fail_cleanly() {
    let Some((c, images)) = start().await else {
        return;
    };
    // A qcow2 whose disk is larger than the claim: the DataVolume fails, the CLI says why.
    let run = image_upload(&c, "small", &image(&images, "disk.qcow2"), "2Mi").await;
    assert!(!run.success, "{}", run.stdout);
    assert!(
        run.stderr.contains("A larger PVC is required"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    let dv = c.api.get(&format!("{DVS}/small")).await.body;
    assert_eq!(dv["status"]["phase"], "Failed", "{}", dv["status"]);
    assert!(cdi::running_message(&dv).contains("A larger PVC is required"));

    // More bytes than the claim can hold are refused while they come in.
    let big = tempfile::NamedTempFile::new().unwrap();
    big.as_file().set_len(64 << 20).unwrap();
    let run = image_upload(&c, "tiny", big.path(), "2Mi").await;
    assert!(!run.success, "{}", run.stdout);
    assert!(
        run.stderr
            .contains("effective image size is larger than the reported available storage"),
        "{}",
        run.stderr
    );
    let dv = c.api.get(&format!("{DVS}/tiny")).await.body;
    assert_eq!(dv["status"]["phase"], "UploadReady", "{}", dv["status"]);
    assert!(annotation(&dv).is_none(), "{}", dv["metadata"]);
    no_uploads_left(&c).await;

    // A body that breaks off midway leaves neither a file nor an annotation, and the
    // DataVolume still takes a whole upload afterwards.
    cdi::create(
        &c.api,
        NS,
        &cdi::data_volume("cut", json!({"upload": {}}), "16Mi"),
    )
    .await;
    cdi::wait_phase(&c.api, NS, "cut", "UploadReady").await;
    let t = token(&c, "cut").await;
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
        Ok(bytes::Bytes::from(vec![1u8; 1 << 20])),
        Ok(bytes::Bytes::from(vec![2u8; 1 << 20])),
        Err(std::io::Error::other("the client gave up")),
    ];
    let broken = c
        .api
        .anonymous
        .post(format!("{}/v1beta1/upload-async", c.api.url))
        .bearer_auth(&t)
        .header("content-length", (4u64 << 20).to_string())
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await;
    assert!(
        broken
            .as_ref()
            .map_or(true, |r| r.status() != StatusCode::OK),
        "a broken upload was taken"
    );
    no_uploads_left(&c).await;
    let dv = c.api.get(&format!("{DVS}/cut")).await.body;
    assert_eq!(dv["status"]["phase"], "UploadReady", "{}", dv["status"]);
    assert!(annotation(&dv).is_none(), "{}", dv["metadata"]);
    let run = virtplane(
        &c,
        &[
            "image-upload",
            "dv",
            "cut",
            "-n",
            NS,
            "--no-create",
            "--image-path",
            image(&images, "disk.qcow2.xz").to_str().unwrap(),
        ],
    )
    .await;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    holds_the_image(&c, "cut").await;
    no_uploads_left(&c).await;
}
