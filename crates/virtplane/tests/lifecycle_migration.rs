//! Live migration on simulated nodes (the phases with short delays, no guest): virtctl's
//! `migrate` subresource and `migrate-cancel`, `virtplane vm migrate-cancel`, the VM's
//! `Migrating` status, migrations that cannot start, the 5 finished migrations kept per
//! VMI, and `virtplane node drain`, which moves VMIs that may live-migrate and stops and
//! restarts the others elsewhere.

mod lifecycle;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lifecycle::{vm, Cluster};
use reqwest::StatusCode;
use serde_json::{json, Value};

const NS: &str = "moves";
const WAIT: Duration = Duration::from_secs(30);

fn vmims(ns: &str) -> String {
    format!("/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstancemigrations")
}

fn node_of(vmi: &Value) -> String {
    vmi["status"]["nodeName"].as_str().unwrap_or("").to_string()
}

fn phases(vmim: &Value) -> Vec<String> {
    vmim["status"]["phaseTransitionTimestamps"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|t| t["phase"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The VMI's migrations, oldest first.
async fn migrations_of(c: &Cluster, vmi: &str) -> Vec<Value> {
    let r = c
        .api
        .get(&format!(
            "{}?labelSelector=kubevirt.io%2Fvmi-name%3D{vmi}",
            vmims(NS)
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let mut items = r.body["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|m| {
        m["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or("")
            .to_string()
    });
    items
}

/// Waits until `kind` `name` has an event `reason` whose message contains `says`.
async fn wait_event(c: &Cluster, kind: &str, name: &str, reason: &str, says: &str) -> Value {
    let path = format!(
        "/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.kind%3D{kind},involvedObject.name%3D{name},reason%3D{reason}"
    );
    let found = c
        .api
        .eventually(&path, WAIT, |r| {
            r.body["items"].as_array().is_some_and(|items| {
                items
                    .iter()
                    .any(|e| e["message"].as_str().unwrap_or("").contains(says))
            })
        })
        .await;
    found.body["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|e| e["message"].as_str().unwrap_or("").contains(says))
        })
        .cloned()
        .unwrap_or_default()
}

/// Waits until the migration is final and let go by the controller.
async fn wait_final(c: &Cluster, name: &str) -> Value {
    let path = format!("{}/{name}", vmims(NS));
    c.api
        .eventually(&path, WAIT, |r| {
            let phase = r.body["status"]["phase"].as_str().unwrap_or("");
            (phase == "Succeeded" || phase == "Failed")
                && r.body["metadata"]
                    .get("finalizers")
                    .is_none_or(|f| f == &json!([]))
        })
        .await
        .body
}

fn cli(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(support::binary())
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("RUST_LOG")
        .output()
        .expect("run virtplane");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test]
async fn migrate_moves_the_vmi_through_kubevirts_phases() {
    let c = Cluster::start(2, &[]).await;
    c.namespace(NS).await;
    c.create_vm(
        NS,
        &vm(
            "roamer",
            Some("Always"),
            json!({"sim.virtplane.io/migration-delay": "1s"}),
        ),
    )
    .await;
    let before = c.wait_vmi_phase(NS, "roamer", "Running").await;
    let vmi_uid = before["metadata"]["uid"].clone();
    assert_eq!(
        support::condition(&before, "LiveMigratable").map(|c| c["status"].clone()),
        Some(json!("True"))
    );
    assert_eq!(before["status"]["migrationMethod"], "LiveMigration");

    // virtctl migrate: the subresource creates kubevirt-migrate-vm-XXXXX.
    let r = c.vm_verb(NS, "roamer", "migrate").await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let list = migrations_of(&c, "roamer").await;
    assert_eq!(list.len(), 1);
    let name = list[0]["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("kubevirt-migrate-vm-"), "{name}");
    // The VM shows Migrating while the guest moves.
    c.wait_printable(NS, "roamer", "Migrating").await;
    let done = wait_final(&c, &name).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
    assert_eq!(
        phases(&done),
        [
            "Pending",
            "Scheduling",
            "Scheduled",
            "PreparingTarget",
            "TargetReady",
            "Running",
            "Succeeded"
        ]
    );
    let after = c.get_vmi(NS, "roamer").await.body;
    assert_eq!(after["metadata"]["uid"], vmi_uid, "the same VMI, moved");
    assert_ne!(node_of(&after), node_of(&before));
    assert_eq!(
        after["metadata"]["labels"]["kubevirt.io/nodeName"],
        node_of(&after)
    );
    assert_eq!(
        done["status"]["migrationState"]["targetNode"],
        node_of(&after).as_str()
    );
    assert_eq!(
        done["status"]["migrationState"]["sourceNode"],
        node_of(&before).as_str()
    );
    c.wait_printable(NS, "roamer", "Running").await;
    // What each side reported, as KubeVirt's components say it.
    let target = node_of(&after);
    for (reason, says) in [
        ("PreparingTarget", "Migration Target is listening at"),
        ("Migrating", "VirtualMachineInstance is migrating."),
        (
            "Migrated",
            &format!("The VirtualMachineInstance migrated to node {target}.")[..],
        ),
    ] {
        wait_event(&c, "VirtualMachineInstance", "roamer", reason, says).await;
    }
    let succeeded = wait_event(
        &c,
        "VirtualMachineInstanceMigration",
        &name,
        "SuccessfulMigration",
        "Source node reported migration succeeded",
    )
    .await;
    assert_eq!(succeeded["source"]["component"], "migration-controller");

    // Not running: 409 as virt-api answers.
    c.create_vm(NS, &vm("parked", Some("Halted"), json!({})))
        .await;
    let r = c.vm_verb(NS, "parked", "migrate").await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("VM is not running"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn only_the_five_newest_finished_migrations_are_kept() {
    let c = Cluster::start(2, &["--sim-migration-delay", "50ms"]).await;
    c.namespace(NS).await;
    c.create_vm(NS, &vm("busy", Some("Always"), json!({})))
        .await;
    c.wait_vmi_phase(NS, "busy", "Running").await;
    let mut names = Vec::new();
    for i in 0..7 {
        let name = format!("hop-{i}");
        let r = c
            .api
            .post(
                &vmims(NS),
                &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": name}, "spec": {"vmiName": "busy"}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        let done = wait_final(&c, &name).await;
        assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
        names.push(name);
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let left: Vec<String> = migrations_of(&c, "busy")
            .await
            .iter()
            .map(|m| m["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect();
        if left == names[2..] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kept {left:?}, want the newest five"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn migrations_that_cannot_happen_are_refused_or_fail() {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    // A VMI whose interface is a bridge on the pod network cannot move.
    let mut bridged = vm("bridged", Some("Always"), json!({}));
    bridged["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"] =
        json!([{"name": "default", "bridge": {}}]);
    bridged["spec"]["template"]["spec"]["networks"] = json!([{"name": "default", "pod": {}}]);
    c.create_vm(NS, &bridged).await;
    let vmi = c.wait_vmi_phase(NS, "bridged", "Running").await;
    let live = support::condition(&vmi, "LiveMigratable")
        .cloned()
        .unwrap_or_default();
    assert_eq!(live["status"], "False", "{}", vmi["status"]);
    assert_eq!(live["reason"], "InterfaceNotLiveMigratable");
    let r = c.vm_verb(NS, "bridged", "migrate").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(
        r.body["message"],
        "Cannot migrate VMI, Reason: InterfaceNotLiveMigratable, Message: cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network"
    );

    // One node only: no target, the migration says why and waits.
    c.create_vm(NS, &vm("alone", Some("Always"), json!({})))
        .await;
    c.wait_vmi_phase(NS, "alone", "Running").await;
    let r = c
        .api
        .post(
            &vmims(NS),
            &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "nowhere"}, "spec": {"vmiName": "alone"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let waiting = c
        .api
        .eventually(&format!("{}/nowhere", vmims(NS)), WAIT, |r| {
            r.body["status"]["conditions"][0]["type"] == "TargetUnschedulable"
        })
        .await
        .body;
    assert_eq!(waiting["status"]["phase"], "Scheduling");
    assert_eq!(
        waiting["status"]["conditions"][0]["message"],
        "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.",
        "{}",
        waiting["status"]
    );
    // A second migration of the same VMI while one is in flight is refused.
    let r = c
        .api
        .post(
            &vmims(NS),
            &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "again"}, "spec": {"vmiName": "alone"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(
        r.body["message"],
        format!(
            "in-flight migration detected. Active migration job ({}) is currently already in progress for VMI alone.",
            waiting["metadata"]["uid"].as_str().unwrap()
        )
    );
    // Deleting it before it was handed over fails it as cancelled, and it goes.
    let r = c.api.delete(&format!("{}/nowhere", vmims(NS)), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    c.api
        .eventually(&format!("{}/nowhere", vmims(NS)), WAIT, |r| {
            r.status == StatusCode::NOT_FOUND
        })
        .await;
}

#[tokio::test]
async fn migrate_cancel_aborts_the_running_migration() {
    let c = Cluster::start(2, &[]).await;
    c.namespace(NS).await;
    c.create_vm(
        NS,
        &vm(
            "slow",
            Some("Always"),
            json!({"sim.virtplane.io/migration-delay": "60s"}),
        ),
    )
    .await;
    let before = c.wait_vmi_phase(NS, "slow", "Running").await;
    let kc = c.server.data_dir().join("admin.kubeconfig");
    let (code, _, stderr) = cli(&kc, &["vm", "migrate-cancel", "slow", "-n", NS]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("Found no migration to cancel for slow"),
        "{stderr}"
    );
    let (code, stdout, stderr) = cli(&kc, &["vm", "migrate", "slow", "-n", NS]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "VM slow was scheduled to migrate\n");
    let name = migrations_of(&c, "slow").await[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    c.api
        .eventually(&format!("{}/{name}", vmims(NS)), WAIT, |r| {
            r.body["status"]["phase"] == "Running"
        })
        .await;
    let (code, stdout, stderr) = cli(&kc, &["vm", "migrate-cancel", "slow", "-n", NS]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "VM slow was scheduled to migrate-cancel\n");
    c.api
        .eventually(&format!("{}/{name}", vmims(NS)), WAIT, |r| {
            r.status == StatusCode::NOT_FOUND
        })
        .await;
    let vmi = c.get_vmi(NS, "slow").await.body;
    let state = &vmi["status"]["migrationState"];
    assert_eq!(state["abortStatus"], "Succeeded", "{state}");
    assert_eq!(state["failureReason"], "Live migration has been aborted");
    assert_eq!(node_of(&vmi), node_of(&before));
    assert_eq!(vmi["status"]["phase"], "Running");
    wait_event(
        &c,
        "VirtualMachineInstanceMigration",
        &name,
        "SuccessfulAbortMigration",
        "Migration is ready to be canceled by virt-handler.",
    )
    .await;
    let failed = wait_event(
        &c,
        "VirtualMachineInstance",
        "slow",
        "Migrated",
        "reason:Live migration has been aborted",
    )
    .await;
    assert_eq!(failed["type"], "Warning", "{failed}");
}

#[tokio::test]
async fn drain_moves_what_may_move_and_restarts_the_rest_elsewhere() {
    let c = Cluster::start(3, &[]).await;
    c.namespace(NS).await;
    let nodes: Vec<String> = (0..3).map(|i| format!("sim-node-{i}")).collect();
    let cordon = |on: bool| json!({"spec": {"unschedulable": on}});
    for other in &nodes[1..] {
        c.api
            .merge(&format!("/api/v1/nodes/{other}"), &cordon(true))
            .await;
    }
    let with_strategy = |name: &str, strategy: Option<&str>| {
        let mut v = vm(name, Some("Always"), json!({}));
        if let Some(s) = strategy {
            v["spec"]["template"]["spec"]["evictionStrategy"] = json!(s);
        }
        v
    };
    let cases = [
        ("mover-a", Some("LiveMigrate")),
        ("mover-b", Some("LiveMigrateIfPossible")),
        ("stopper", None),
    ];
    let mut uids = Vec::new();
    for (name, strategy) in cases {
        c.create_vm(NS, &with_strategy(name, strategy)).await;
        let vmi = c.wait_vmi_phase(NS, name, "Running").await;
        assert_eq!(node_of(&vmi), nodes[0]);
        uids.push(vmi["metadata"]["uid"].clone());
    }
    for other in &nodes[1..] {
        c.api
            .merge(&format!("/api/v1/nodes/{other}"), &cordon(false))
            .await;
    }
    let kc = c.server.data_dir().join("admin.kubeconfig");
    let (code, stdout, stderr) = cli(&kc, &["node", "drain", &nodes[0], "--timeout", "60s"]);
    assert_eq!(code, 0, "stdout {stdout} stderr {stderr}");
    assert!(
        stdout.contains(&format!("node/{} drained", nodes[0])),
        "{stdout}"
    );
    let node = c.api.get(&format!("/api/v1/nodes/{}", nodes[0])).await.body;
    assert_eq!(node["spec"]["unschedulable"], true);
    assert!(node["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["key"] == "kubevirt.io/drain"));
    for (i, (name, strategy)) in cases.iter().enumerate() {
        let vmi = c
            .api
            .eventually(
                &format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances/{name}"),
                WAIT,
                |r| {
                    r.body["status"]["phase"] == "Running"
                        && r.body["status"]["nodeName"] != json!(nodes[0])
                },
            )
            .await
            .body;
        if strategy.is_some() {
            assert_eq!(vmi["metadata"]["uid"], uids[i], "{name} moved live");
            let evacuation = migrations_of(&c, name).await;
            assert_eq!(evacuation.len(), 1, "{name}");
            let m = &evacuation[0];
            assert!(m["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("kubevirt-evacuation-"));
            assert_eq!(
                m["metadata"]["annotations"]["kubevirt.io/evacuationMigration"],
                nodes[0].as_str()
            );
        } else {
            assert_ne!(
                vmi["metadata"]["uid"], uids[i],
                "{name} was stopped and started again"
            );
            assert!(migrations_of(&c, name).await.is_empty());
        }
    }
    let (code, stdout, _) = cli(&kc, &["node", "uncordon", &nodes[0]]);
    assert_eq!(code, 0);
    assert_eq!(stdout, format!("node/{} uncordoned\n", nodes[0]));
    let node = c.api.get(&format!("/api/v1/nodes/{}", nodes[0])).await.body;
    assert!(
        node["spec"].get("unschedulable").is_none_or(|u| u == false),
        "{}",
        node["spec"]
    );
    assert!(node["spec"]["taints"]
        .as_array()
        .is_none_or(|t| t.iter().all(|t| t["key"] != "kubevirt.io/drain")));
}

#[tokio::test]
async fn a_migration_policy_sets_the_migrations_of_the_vmis_it_selects() {
    let c = Cluster::start(2, &["--sim-migration-delay", "50ms"]).await;
    c.namespace(NS).await;
    let policies = "/apis/migrations.kubevirt.io/v1alpha1/migrationpolicies";
    let policy = |name: &str, selector: Value| {
        json!({"apiVersion": "migrations.kubevirt.io/v1alpha1", "kind": "MigrationPolicy",
               "metadata": {"name": name},
               "spec": {"allowPostCopy": true, "bandwidthPerMigration": "256Mi",
                        "selectors": {"virtualMachineInstanceSelector": selector}}})
    };
    for (name, selector) in [
        ("web", json!({"tier": "web"})),
        ("db", json!({"tier": "db"})),
    ] {
        let r = c.api.post(policies, &policy(name, selector)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    }
    let mut web = vm("webby", Some("Always"), json!({}));
    web["spec"]["template"]["metadata"]["labels"]["tier"] = json!("web");
    c.create_vm(NS, &web).await;
    c.wait_vmi_phase(NS, "webby", "Running").await;
    let r = c.vm_verb(NS, "webby", "migrate").await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let name = migrations_of(&c, "webby").await[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let done = wait_final(&c, &name).await;
    let state = &done["status"]["migrationState"];
    assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
    assert_eq!(state["migrationPolicyName"], "web", "{state}");
    assert_eq!(
        state["migrationConfiguration"]["allowPostCopy"], true,
        "{state}"
    );
    assert_eq!(
        state["migrationConfiguration"]["bandwidthPerMigration"], "256Mi",
        "{state}"
    );
    // A VMI no policy selects runs with the cluster's settings.
    c.create_vm(NS, &vm("plain", Some("Always"), json!({})))
        .await;
    c.wait_vmi_phase(NS, "plain", "Running").await;
    c.vm_verb(NS, "plain", "migrate").await;
    let name = migrations_of(&c, "plain").await[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let done = wait_final(&c, &name).await;
    let state = &done["status"]["migrationState"];
    assert!(state.get("migrationPolicyName").is_none(), "{state}");
    assert_eq!(
        state["migrationConfiguration"]["allowPostCopy"], false,
        "{state}"
    );
}
