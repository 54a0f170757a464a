//! Volumes whose data lives in ConfigMaps and Secrets (sysprep, cloud-init secretRef, a
//! containerDisk's imagePullSecret): a
//! missing object is reported on the VMI and the VM until it is created, and a sysprep
//! source without an answer file fails the VMI saying so. The node agent reads the
//! objects whatever its hypervisor, so simulated nodes show it. Tier A.

mod lifecycle;
mod support;

use std::time::Duration;

use lifecycle::{vm, Cluster};
use serde_json::{json, Value};
use support::{condition, printable};

const NS: &str = "sources";

/// A VM on a simulated node with one extra volume (and its cdrom or disk).
fn vm_with_volume(name: &str, strategy: &str, disk: Value, volume: Value) -> Value {
    let mut vm = vm(name, Some(strategy), json!({}));
    let spec = &mut vm["spec"]["template"]["spec"];
    spec["domain"]["devices"]["disks"] = json!([disk]);
    spec["volumes"] = json!([volume]);
    vm
}

fn sysprep_vm(name: &str, strategy: &str, source: Value) -> Value {
    vm_with_volume(
        name,
        strategy,
        json!({"name": "sysprep", "cdrom": {"bus": "sata"}}),
        json!({"name": "sysprep", "sysprep": source}),
    )
}

/// Waits for the VMI's Synchronized=False condition and returns its message.
async fn unsynchronized(c: &Cluster, name: &str) -> (String, String) {
    let vmi = c
        .wait_vmi(NS, name, Duration::from_secs(20), |v| {
            v.and_then(|v| condition(v, "Synchronized"))
                .is_some_and(|s| s["status"] == "False")
        })
        .await
        .expect("VMI");
    let sync = condition(&vmi, "Synchronized").expect("Synchronized");
    assert_eq!(vmi["status"]["phase"], "Scheduling", "{}", vmi["status"]);
    (
        sync["reason"].as_str().unwrap_or("").to_string(),
        sync["message"].as_str().unwrap_or("").to_string(),
    )
}

#[tokio::test]
async fn missing_objects_are_reported_until_they_exist() {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    c.create_vm(
        NS,
        &sysprep_vm("win", "Always", json!({"configMap": {"name": "answers"}})),
    )
    .await;
    let (reason, message) = unsynchronized(&c, "win").await;
    assert_eq!(reason, "FailedMount");
    assert_eq!(
        message,
        format!("volume sysprep: configmap \"answers\" not found in namespace {NS}")
    );
    // Mirrored onto the VM, which is still starting.
    let vm = c
        .wait_vm(NS, "win", Duration::from_secs(20), |vm| {
            condition(vm, "Synchronized").is_some_and(|s| s["message"] == message.as_str())
        })
        .await;
    assert_eq!(printable(&vm), "Starting", "{}", vm["status"]);

    // Created later, the ConfigMap is picked up without touching the VM.
    c.api
        .create(
            &format!("/api/v1/namespaces/{NS}/configmaps"),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "answers"},
                    "data": {"unattend.xml": "<unattend/>"}}),
        )
        .await;
    let vmi = c.wait_vmi_phase(NS, "win", "Running").await;
    assert!(
        condition(&vmi, "Synchronized").is_none(),
        "{}",
        vmi["status"]
    );
    c.wait_printable(NS, "win", "Running").await;

    // cloud-init user data from a Secret that does not exist (yet).
    c.create_vm(
        NS,
        &vm_with_volume(
            "linux",
            "Always",
            json!({"name": "cloudinit", "disk": {"bus": "virtio"}}),
            json!({"name": "cloudinit", "cloudInitNoCloud": {"secretRef": {"name": "userdata"}}}),
        ),
    )
    .await;
    let (reason, message) = unsynchronized(&c, "linux").await;
    assert_eq!(reason, "FailedMount");
    assert_eq!(
        message,
        format!("volume cloudinit: secret \"userdata\" not found in namespace {NS}")
    );
    c.api
        .create(
            &format!("/api/v1/namespaces/{NS}/secrets"),
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "userdata"},
                    "stringData": {"userdata": "#cloud-config\n"}}),
        )
        .await;
    c.wait_vmi_phase(NS, "linux", "Running").await;
}

#[tokio::test]
async fn a_missing_image_pull_secret_is_reported_until_it_exists() {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    c.create_vm(
        NS,
        &vm_with_volume(
            "private",
            "Always",
            json!({"name": "root", "disk": {"bus": "virtio"}}),
            json!({"name": "root", "containerDisk": {"image": "quay.io/example/private:1",
                                                     "imagePullSecret": "regcred"}}),
        ),
    )
    .await;
    let (reason, message) = unsynchronized(&c, "private").await;
    assert_eq!(reason, "ErrImagePull");
    assert_eq!(
        message,
        format!("volume root: imagePullSecret \"regcred\" not found in namespace {NS}")
    );
    c.wait_printable(NS, "private", "ErrImagePull").await;
    let config = json!({"auths": {"quay.io": {"auth": "dXNlcjpwYXNz"}}}).to_string();
    c.api
        .create(
            &format!("/api/v1/namespaces/{NS}/secrets"),
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred"},
                    "type": "kubernetes.io/dockerconfigjson",
                    "stringData": {".dockerconfigjson": config}}),
        )
        .await;
    c.wait_vmi_phase(NS, "private", "Running").await;
}

#[tokio::test]
async fn a_sysprep_source_without_an_answer_file_fails_the_vmi() {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    c.api
        .create(
            &format!("/api/v1/namespaces/{NS}/secrets"),
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "notes"},
                    "stringData": {"readme.txt": "no answers here"}}),
        )
        .await;
    c.create_vm(
        NS,
        &sysprep_vm("win", "Manual", json!({"secret": {"name": "notes"}})),
    )
    .await;
    let r = c.vm_verb(NS, "win", "start").await;
    assert!(r.status.is_success(), "{}", r.text);
    let vmi = c.wait_vmi_phase(NS, "win", "Failed").await;
    let expected = "volume sysprep (secret \"notes\"): Sysprep drive should contain autounattend.xml or unattend.xml but neither were found (keys: readme.txt)";
    let ready = condition(&vmi, "Ready").unwrap_or_else(|| panic!("{}", vmi["status"]));
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["message"], expected, "{}", vmi["status"]);
    assert_eq!(vmi["status"]["reason"], "FailedCreate");
    let vm = c
        .wait_vm(NS, "win", Duration::from_secs(20), |vm| {
            printable(vm) == "Stopped"
                && condition(vm, "Ready").is_some_and(|r| r["message"] == expected)
        })
        .await;
    assert_eq!(vm["status"]["ready"], false, "{}", vm["status"]);
}
