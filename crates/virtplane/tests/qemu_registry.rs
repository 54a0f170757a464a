//! Images from an HTTPS registry (`scripts/test-registry --tls`, a certificate from a
//! throwaway CA): pulled and booted when the node trusts the CA (here through
//! `SSL_CERT_FILE`), refused with a message saying what to do when it does not, and
//! pulled anyway from a registry listed in `--insecure-registry` (Docker's semantics:
//! an insecure registry may present any certificate, or speak plain HTTP, which every
//! other QEMU test uses). Tier B; skipped loudly without QEMU or the test guests.

mod qemu;
mod support;

use qemu::{guests, kernel_vm, tls_registry, Cluster, SHORT};
use serde_json::json;
use support::{condition, printable};

/// A kernelBoot VM whose kernel image comes from `registry`.
fn vm_from(g: &qemu::Guests, name: &str, registry: &str) -> serde_json::Value {
    let mut vm = kernel_vm(g, name, "Always", None);
    vm["spec"]["template"]["spec"]["domain"]["firmware"]["kernelBoot"]["container"]["image"] =
        json!(format!("{registry}/guest-kernel:latest"));
    vm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_registry_trusted_through_the_node_trust_store() {
    let Some(g) = guests() else { return };
    let tls = tls_registry();
    let ca = tls.ca_file.display().to_string();
    let cluster = Cluster::start_with_env(g, &[], &[("SSL_CERT_FILE", &ca)]).await;
    let env = cluster.env();
    let name = "trusted";
    env.create_vm(&vm_from(g, name, &tls.address)).await;
    env.wait_running(name).await;
    env.wait_ready(name).await;
    let argv = env.qemu_argv(name).join(" ");
    assert!(argv.contains("/boot/vmlinux"), "{argv}");
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_https_registry_fails_unless_insecure() {
    let Some(g) = guests() else { return };
    let tls = tls_registry();
    let port = tls.address.rsplit(':').next().expect("port");
    // The certificate names both 127.0.0.1 and localhost; only the first is insecure.
    let insecure = format!("127.0.0.1:{port}");
    let untrusted = format!("localhost:{port}");
    let cluster = Cluster::start(g, &["--insecure-registry", &insecure]).await;
    let env = cluster.env();

    let name = "untrusted";
    env.create_vm(&vm_from(g, name, &untrusted)).await;
    let vm = env
        .wait_vm(name, SHORT, "printableStatus ErrImagePull", |vm| {
            printable(vm) == "ErrImagePull"
        })
        .await;
    let sync = condition(&vm, "Synchronized").unwrap_or_else(|| panic!("{}", vm["status"]));
    let message = sync["message"].as_str().unwrap_or("");
    eprintln!("{name}: {message}");
    for words in [
        format!("{untrusted}/guest-kernel:latest"),
        "certificate is not trusted".to_string(),
        "SSL_CERT_FILE".to_string(),
        format!("--insecure-registry {untrusted}"),
    ] {
        assert!(
            message.contains(&words),
            "{words:?} missing from {message:?}"
        );
    }
    env.delete_vm(name).await;

    // Listed as insecure: the untrusted certificate is accepted.
    let name = "insecure-https";
    env.create_vm(&vm_from(g, name, &insecure)).await;
    env.wait_running(name).await;
    env.wait_ready(name).await;
    env.delete_vm(name).await;
}
