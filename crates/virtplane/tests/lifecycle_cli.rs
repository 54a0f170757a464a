//! `virtplane vm start|stop|restart|pause|unpause NAME [-n NS] [--kubeconfig F]`:
//! virtctl's output on success, one `virtplane: ...` line and a non-zero exit on
//! failure, and the effect through the same subresources. Tier A.

mod lifecycle;
mod support;

use std::path::Path;
use std::process::Command;

use lifecycle::{vm, Cluster};
use serde_json::json;
use support::uid;

const NS: &str = "cli";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn virtplane_vm(kubeconfig: &Path, args: &[&str]) -> Run {
    let out = Command::new(support::binary())
        .arg("vm")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("RUST_LOG")
        .output()
        .expect("run virtplane vm");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

#[track_caller]
fn assert_ok(run: &Run, stdout: &str) {
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    assert_eq!(run.stdout, format!("{stdout}\n"));
    assert_eq!(run.stderr, "");
}

/// Exit 1, nothing on stdout, exactly one `virtplane: ` line on stderr containing `part`.
#[track_caller]
fn assert_fails(run: &Run, part: &str) {
    assert_eq!(
        run.code, 1,
        "stdout {:?} stderr {:?}",
        run.stdout, run.stderr
    );
    assert_eq!(run.stdout, "");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {:?}", run.stderr);
    assert!(lines[0].starts_with("virtplane: "), "{}", lines[0]);
    assert!(lines[0].contains(part), "{:?} lacks {part:?}", lines[0]);
}

#[tokio::test]
async fn vm_verbs_drive_the_lifecycle_and_report_failures() {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    let kc = c.server.data_dir().join("admin.kubeconfig");
    c.create_vm(NS, &vm("c1", Some("Halted"), json!({}))).await;
    c.wait_printable(NS, "c1", "Stopped").await;

    assert_ok(
        &virtplane_vm(&kc, &["start", "c1", "-n", NS]),
        "VM c1 was scheduled to start",
    );
    c.wait_printable(NS, "c1", "Running").await;
    assert_fails(
        &virtplane_vm(&kc, &["start", "c1", "-n", NS]),
        "start c1: Operation cannot be fulfilled on virtualmachine.kubevirt.io \"c1\": VM is already running",
    );

    assert_ok(
        &virtplane_vm(&kc, &["pause", "c1", "-n", NS]),
        "VMI c1 was scheduled to pause",
    );
    c.wait_printable(NS, "c1", "Paused").await;
    assert_fails(
        &virtplane_vm(&kc, &["pause", "c1", "-n", NS]),
        "VMI is already paused",
    );
    assert_ok(
        &virtplane_vm(&kc, &["unpause", "c1", "-n", NS]),
        "VMI c1 was scheduled to unpause",
    );
    c.wait_vm(NS, "c1", std::time::Duration::from_secs(10), |v| {
        v["status"]["printableStatus"] == "Running" && v["status"]["ready"] == true
    })
    .await;

    let before = c.get_vmi(NS, "c1").await.body;
    assert_ok(
        &virtplane_vm(&kc, &["restart", "c1", "-n", NS]),
        "VM c1 was scheduled to restart",
    );
    c.wait_vmi(NS, "c1", std::time::Duration::from_secs(15), |v| {
        v.is_some_and(|v| uid(v) != uid(&before) && v["status"]["phase"] == "Running")
    })
    .await;

    assert_ok(
        &virtplane_vm(&kc, &["stop", "c1", "-n", NS]),
        "VM c1 was scheduled to stop",
    );
    c.wait_vmi_gone(NS, "c1").await;
    c.wait_printable(NS, "c1", "Stopped").await;
    assert_fails(
        &virtplane_vm(&kc, &["stop", "c1", "-n", NS]),
        "VM is not running",
    );
    assert_fails(
        &virtplane_vm(&kc, &["unpause", "c1", "-n", NS]),
        "virtualmachineinstance.kubevirt.io \"c1\" not found",
    );
    assert_fails(
        &virtplane_vm(&kc, &["restart", "c1", "-n", NS]),
        "RunStategy Halted does not support manual restart requests",
    );
    assert_fails(
        &virtplane_vm(&kc, &["start", "ghost", "-n", NS]),
        "virtualmachine.kubevirt.io \"ghost\" not found",
    );

    // Without -n: the kubeconfig's namespace (default).
    c.create_vm("default", &vm("d1", Some("Halted"), json!({})))
        .await;
    assert_ok(
        &virtplane_vm(&kc, &["start", "d1"]),
        "VM d1 was scheduled to start",
    );
    c.wait_printable("default", "d1", "Running").await;

    // Usage errors.
    let run = virtplane_vm(&kc, &["reboot", "c1"]);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("unknown verb \"reboot\""),
        "{}",
        run.stderr
    );
    let missing = c.server.data_dir().join("missing.kubeconfig");
    assert_fails(
        &virtplane_vm(&missing, &["start", "c1"]),
        "cannot read kubeconfig",
    );
}
