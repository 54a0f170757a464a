//! A containerDisk from a registry that wants a token (Debian's docker-registry behind
//! the token service of `oci::testing`, as quay.io and Docker Hub answer): refused with a
//! message that says to add an imagePullSecret, then pulled with the credentials of a
//! `kubernetes.io/dockerconfigjson` Secret, booted, and recorded by digest in
//! `volumeStatus`. Tier B; skipped loudly without QEMU, the test guests or
//! docker-registry (a failure under `VIRTPLANE_REQUIRE_QEMU=1` or CI).

mod qemu;
mod support;

use base64::Engine;
use oci::testing::{docker_config_secret, registry_or_skip, Auth, AuthRegistry};
use qemu::{disk_vm, guests, Cluster, NS, SHORT};
use serde_json::json;
use support::{condition, printable};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_containerdisk_needs_its_image_pull_secret() {
    let Some(g) = guests() else { return };
    let Some(binary) = registry_or_skip("a_private_containerdisk_needs_its_image_pull_secret")
    else {
        return;
    };
    let registry = AuthRegistry::start(
        &binary,
        Auth::Token {
            users: vec![("alice".into(), "s3cret".into())],
            public: vec![],
        },
    )
    .await;
    let pushed = registry
        .push_layout("private/guest", "v1", &g.dir.join("oci"))
        .await;
    let image = format!("{}/private/guest:v1", registry.address);
    let cluster = Cluster::start(g, &["--insecure-registry", &registry.address]).await;
    let env = cluster.env();

    // No credentials: ErrImagePull, with the registry's refusal and what to do.
    let name = "no-secret";
    let mut vm = disk_vm(g, name, "q35", "virtio");
    vm["spec"]["template"]["spec"]["volumes"][0]["containerDisk"]["image"] = json!(image);
    env.create_vm(&vm).await;
    let failed = env
        .wait_vm(name, SHORT, "printableStatus ErrImagePull", |vm| {
            printable(vm) == "ErrImagePull"
        })
        .await;
    let sync = condition(&failed, "Synchronized").unwrap_or_else(|| panic!("{}", failed["status"]));
    let message = sync["message"].as_str().unwrap_or("");
    eprintln!("{name}: {message}");
    for words in [
        "unauthorized: authentication required",
        image.as_str(),
        "imagePullSecret",
        "kubectl create secret docker-registry",
    ] {
        assert!(
            message.contains(words),
            "{words:?} missing from {message:?}"
        );
    }
    env.delete_vm(name).await;

    // With the Secret: pulled through the token flow and booted.
    let (kind, data) = docker_config_secret(&registry.address, "alice", "s3cret");
    let data: serde_json::Map<String, serde_json::Value> = data
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!(base64::engine::general_purpose::STANDARD.encode(v)),
            )
        })
        .collect();
    env.api
        .create(
            &format!("/api/v1/namespaces/{NS}/secrets"),
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred"},
                    "type": kind, "data": data}),
        )
        .await;
    let name = "with-secret";
    let mut vm = disk_vm(g, name, "q35", "virtio");
    vm["spec"]["template"]["spec"]["volumes"][0]["containerDisk"] =
        json!({"image": image, "imagePullSecret": "regcred"});
    env.create_vm(&vm).await;
    let vmi = env.wait_running(name).await;
    let root = &vmi["status"]["volumeStatus"][0];
    assert_eq!(root["name"], "root", "{}", vmi["status"]);
    assert_eq!(
        root["containerDiskVolume"]["imageID"],
        json!(format!(
            "{}/private/guest@{}",
            registry.address, pushed.digest
        )),
        "{}",
        vmi["status"]
    );
    env.wait_ready(name).await;
    assert!(registry.token_requests() >= 2, "no token was asked for");
    env.delete_vm(name).await;
}
