//! Tier B: with the agent running as root, each VMI's QEMU runs as its own unprivileged
//! uid, sandboxed, and can open its own files but not another VMI's, nor the server's
//! store. Checked from outside, as an administrator would: /proc/PID/status, file owners
//! and modes, and `setpriv` running `cat` as each QEMU's user.
//! Skipped loudly without QEMU or the test guests, or when the tests do not run as root.

mod qemu;
mod support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use qemu::{add_volume, guests, kernel_vm, proc_status, Cluster, SHORT};
use serde_json::json;

/// The default `--qemu-uid-base`: the group every QEMU is in.
const BASE: u32 = 2_000_000_000;

/// Whether `cat FILE` succeeds as QEMU's user (`uid`, its own gid, the QEMU group).
fn can_read_as(uid: u32, file: &Path) -> bool {
    let out = Command::new("setpriv")
        .args(["--reuid", &uid.to_string(), "--regid", &uid.to_string()])
        .arg(format!("--groups={BASE}"))
        .arg("--")
        .arg("cat")
        .arg(file)
        .output()
        .expect("setpriv (util-linux) runs");
    out.status.success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_qemu_runs_as_its_own_user_and_reaches_only_its_files() {
    let Some(g) = guests() else { return };
    if !rustix::process::geteuid().is_root() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: QEMU users need the agent to run as root"
        );
        return;
    }
    let cluster = Cluster::start(g, &[]).await;
    let env = cluster.env();
    let names = ["iso-a", "iso-b"];
    for name in names {
        let mut vm = kernel_vm(g, name, "Always", None);
        add_volume(
            &mut vm,
            json!({"name": "scratch", "disk": {"bus": "virtio"}}),
            json!({"name": "scratch", "emptyDisk": {"capacity": "16Mi"}}),
        );
        env.create_vm(&vm).await;
    }
    let mut uids = Vec::new();
    for name in names {
        env.wait_running(name).await;
        // The guest booted and saw its disk: QEMU opened everything it needs as itself.
        let lines = env.wait_ready(name).await;
        assert!(
            lines.iter().any(|l| l.contains("virtplane-guest: disk vd")),
            "{name}: {lines:#?}"
        );
        let pids = env.qemus(name);
        assert_eq!(pids.len(), 1, "{name}: {pids:?}");
        let status = |field| proc_status(pids[0], field).unwrap_or_default();
        let ids: Vec<u32> = status("Uid")
            .split_whitespace()
            .map(|u| u.parse().unwrap())
            .collect();
        assert_eq!(ids.len(), 4, "{name}: Uid {:?}", status("Uid"));
        assert!(ids.iter().all(|u| *u == ids[0]), "{name}: Uid {ids:?}");
        let uid = ids[0];
        assert!(uid > BASE, "{name}: QEMU runs as uid {uid}");
        assert_eq!(
            status("Gid").split_whitespace().next(),
            Some(&*uid.to_string())
        );
        assert!(
            status("Groups")
                .split_whitespace()
                .any(|g| g == BASE.to_string()),
            "{name}: Groups {}",
            status("Groups")
        );
        assert_eq!(status("Seccomp"), "2", "{name}: not sandboxed");
        assert_eq!(status("NoNewPrivs"), "1", "{name}: may regain privileges");

        let dir = env.vmi_dir(name);
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777),
            (0, uid, 0o710),
            "{}",
            dir.display()
        );
        let run = std::fs::metadata(dir.join("run")).unwrap();
        assert_eq!((run.uid(), run.mode() & 0o7777), (uid, 0o700));
        uids.push(uid);
    }
    assert_ne!(uids[0], uids[1], "two VMIs share a QEMU uid");

    let file = |name: &str, f: &str| env.vmi_dir(name).join(f);
    for (me, other, uid) in [(names[0], names[1], uids[0]), (names[1], names[0], uids[1])] {
        // Its own disk and serial log: yes.
        assert!(can_read_as(uid, &file(me, "scratch.qcow2")), "{me}");
        assert!(can_read_as(uid, &file(me, "run/serial.log")), "{me}");
        // The other VMI's: no.
        assert!(
            !can_read_as(uid, &file(other, "scratch.qcow2")),
            "{me}'s QEMU user reads {other}'s disk"
        );
        assert!(
            !can_read_as(uid, &file(other, "run/serial.log")),
            "{me}'s QEMU user reads {other}'s serial log"
        );
        assert!(!can_read_as(uid, &file(other, "qemu.log")));
        // Nor the server's store or its admin credentials.
        for private in ["state.db", "admin.kubeconfig"] {
            let path = env.data_dir.join(private);
            assert!(path.exists(), "{}", path.display());
            assert!(
                !can_read_as(uid, &path),
                "{me}'s QEMU user reads {}",
                path.display()
            );
        }
    }

    // The agent, as root, still cleans up after them.
    for name in names {
        env.delete_vm(name).await;
    }
    for name in names {
        let deadline = std::time::Instant::now() + SHORT;
        while env.vmi_dir(name).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}'s dir is left after {SHORT:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
        assert!(env.qemus(name).is_empty(), "{name}'s QEMU still runs");
    }
}
