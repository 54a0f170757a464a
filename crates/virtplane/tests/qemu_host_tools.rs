//! A node without a host tool its guests need says so where a user looks. The node agent
//! runs with a `PATH` that has everything but `qemu-img` (what a fresh machine was left
//! with when apt removed qemu-utils): one error line at start naming the tool and its
//! package, the Node condition `virtplane.io/HostToolsReady=False` (also in `kubectl
//! describe node`), and a VM whose containerDisk needs qemu-img fails its VMI at once and
//! backs off (CrashLoopBackOff) with the reason in its conditions, instead of a silent
//! `Starting`. Once qemu-img is there the condition turns True by itself, and a start
//! boots the VM. Tier B (QEMU).

mod qemu;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use qemu::{disk_vm, guests, phase, Env, NodeAgent, SHORT};
use serde_json::{json, Value};
use support::{condition, printable, TestServer};

const NODE: &str = "no-qemu-img";
const CONDITION: &str = "virtplane.io/HostToolsReady";

/// A directory of links to every program on this process's `PATH` but `left_out`.
fn path_without(left_out: &str, dir: &Path) {
    let path = std::env::var_os("PATH").expect("PATH");
    for from in std::env::split_paths(&path) {
        for entry in std::fs::read_dir(&from).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let link = dir.join(&name);
            if name != left_out && !link.exists() {
                std::os::unix::fs::symlink(entry.path(), link).expect("link");
            }
        }
    }
}

async fn node_condition(env: &Env) -> Option<Value> {
    let node = env.api.get(&format!("/api/v1/nodes/{NODE}")).await;
    condition(&node.body, CONDITION).cloned()
}

async fn wait_node_condition(env: &Env, status: &str) -> Value {
    let deadline = Instant::now() + SHORT;
    loop {
        if let Some(c) = node_condition(env).await.filter(|c| c["status"] == status) {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "{CONDITION} never became {status}: {:?}",
            node_condition(env).await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_qemu_img_says_so_on_the_node_and_the_vm() {
    let Some(g) = guests() else { return };
    let tools = tempfile::tempdir().expect("tools dir");
    path_without("qemu-img", tools.path());
    let path = tools.path().display().to_string();
    let server = TestServer::start_with(&["--no-node"]).await;
    let agent = NodeAgent::start_logged(
        server.data_dir(),
        NODE,
        &[
            "--hypervisor",
            "qemu",
            "--insecure-registry",
            &g.registry,
            "--heartbeat-interval",
            "1s",
        ],
        &[("PATH", &path)],
        true,
    );
    let env = Env::new(&server.url, server.data_dir(), agent.data_dir()).on_node(&agent);
    env.wait_node_ready().await;

    // The Node, and the agent's log, name the tool and its package.
    let missing = wait_node_condition(&env, "False").await;
    assert_eq!(missing["reason"], "QemuImgNotInstalled", "{missing}");
    let message = missing["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "qemu-img is not installed on this node (Debian package qemu-utils; \
             scripts/install-deps installs it)"
        ),
        "{message}"
    );
    let log = agent.log_file();
    let error = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("qemu-img is not installed"))
        .unwrap_or_else(|| panic!("no error line about qemu-img in the agent's log:\n{log}"));
    assert!(error.contains("qemu-utils"), "{error}");
    describe_node_shows(&env, &missing);

    // A VM whose containerDisk needs an overlay made by qemu-img: its VMI fails at once
    // saying why, and the VM backs off with the reason in its conditions.
    let name = "needs-qemu-img";
    let mut vm = disk_vm(g, name, "q35", "virtio");
    vm["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": NODE});
    env.create_vm(&vm).await;
    let vm = env
        .wait_vm(name, SHORT, "printableStatus CrashLoopBackOff", |vm| {
            printable(vm) == "CrashLoopBackOff"
        })
        .await;
    let failure = condition(&vm, "Failure").unwrap_or_else(|| panic!("{}", vm["status"]));
    assert_eq!(failure["status"], "True", "{failure}");
    assert_eq!(failure["reason"], "FailedCreate", "{failure}");
    assert_eq!(
        failure["message"],
        "qemu-img is not installed on this node (Debian package qemu-utils; \
         scripts/install-deps installs it)",
        "{failure}"
    );
    assert!(
        vm["status"]["startFailure"]["consecutiveFailCount"].as_u64() >= Some(1),
        "{}",
        vm["status"]
    );
    assert!(env.qemus(name).is_empty(), "a QEMU was started for {name}");

    // qemu-img installed while the agent runs: the Node says so at its next heartbeat,
    // and a start (which clears the backoff, as in KubeVirt) boots the guest.
    let qemu_img = std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|dir| dir.join("qemu-img"))
        .find(|p| p.is_file())
        .expect("qemu-img on the test's PATH");
    std::os::unix::fs::symlink(&qemu_img, tools.path().join("qemu-img")).expect("link");
    let found = wait_node_condition(&env, "True").await;
    assert_eq!(found["reason"], "HostToolsInstalled", "{found}");
    env.vm_verb(name, "stop").await;
    env.wait_vm(name, SHORT, "Stopped", |vm| printable(vm) == "Stopped")
        .await;
    env.vm_verb(name, "start").await;
    let vmi = env.wait_running(name).await;
    assert_eq!(phase(&vmi), "Running");
    let vm = env
        .wait_vm(name, SHORT, "no Failure condition once it runs", |vm| {
            printable(vm) == "Running" && condition(vm, "Failure").is_none()
        })
        .await;
    assert!(
        vm["status"].get("startFailure").is_none(),
        "{}",
        vm["status"]
    );
    env.delete_vm(name).await;
    env.wait_vmi_gone(name, SHORT).await;
}

/// `kubectl describe node` lists the condition with its reason (kubectl is one of the
/// tools `scripts/install-deps test` installs).
fn describe_node_shows(env: &Env, condition: &Value) {
    let out = match std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .args(["describe", "node", NODE])
        .output()
    {
        Ok(out) => out,
        Err(e) if std::env::var_os("VIRTPLANE_REQUIRE_QEMU").is_some_and(|v| v != "0") => {
            panic!("kubectl cannot run: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: kubectl describe node: {e}");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl describe node failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(CONDITION))
        .unwrap_or_else(|| panic!("no {CONDITION} in kubectl describe node:\n{text}"));
    assert!(
        line.contains("False")
            && line.contains(condition["reason"].as_str().unwrap_or("?"))
            && line.contains("qemu-img is not installed"),
        "{line}"
    );
}
