//! Tier B: these start a real qemu-system-x86_64 (software emulation is enough).
//!
//! Without QEMU a test prints `SKIPPED: ...` and passes; with `VIRTPLANE_REQUIRE_QEMU=1`
//! (set by `scripts/test` and CI, which install it) it fails instead.

use std::path::PathBuf;
use std::time::Duration;

use qemu::{Firmware, Instance, MachineSpec};

fn qemu_binary() -> Option<PathBuf> {
    let path = PathBuf::from("/usr/bin/qemu-system-x86_64");
    if path.exists() {
        return Some(path);
    }
    let why = "qemu-system-x86_64 is not installed (Debian package qemu-system-x86)";
    if std::env::var_os("VIRTPLANE_REQUIRE_QEMU").is_some_and(|v| v != "0") {
        panic!("tier-B QEMU tests cannot run (VIRTPLANE_REQUIRE_QEMU is set): {why}");
    }
    // Straight to the process's stderr: the test harness would swallow eprintln! of a
    // passing test.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: tier-B QEMU test: {why}");
    None
}

fn spec(dir: &std::path::Path) -> MachineSpec {
    MachineSpec {
        name: "test".into(),
        uuid: "00000000-0000-4000-8000-000000000001".into(),
        serial: None,
        machine_type: "q35".into(),
        accel: qemu::Accel::Tcg,
        cpu_model: "max".into(),
        sockets: 1,
        cores: 1,
        threads: 1,
        memory_mib: 64,
        hugepages: None,
        firmware: Firmware::Bios,
        kernel_boot: None,
        acpi: true,
        smm: false,
        disks: vec![],
        nics: vec![],
        rng: false,
        balloon: false,
        watchdog: None,
        console_socket: dir.join("console.sock"),
        console_log: dir.join("serial.log"),
        qmp_socket: dir.join("qmp.sock"),
        vnc_socket: None,
        pidfile: dir.join("qemu.pid"),
        sandbox: true,
        run_as: None,
        netns: None,
    }
}

/// Kills the QEMU of a test even when an assertion fails first.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg("-9")
            .arg(self.0.to_string())
            .status();
    }
}

#[tokio::test]
async fn start_pause_adopt_and_kill() {
    let Some(binary) = qemu_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let instance = Instance::spawn(&binary, &spec, &dir.path().join("qemu.log"))
        .await
        .expect("spawn");
    let _guard = KillOnDrop(instance.pid);
    assert_eq!(instance.qmp.status().await.unwrap(), "prelaunch");
    instance.resume().await.unwrap();
    assert_eq!(instance.qmp.status().await.unwrap(), "running");
    instance.pause().await.unwrap();
    assert_eq!(instance.qmp.status().await.unwrap(), "paused");

    // While this process holds the monitor, nobody else can take it over.
    let pid = instance.pid;
    assert!(Instance::adopt(&spec.pidfile, &spec.qmp_socket)
        .await
        .is_none());
    // An agent that restarts has let go of it; the process is found again through its
    // pidfile and monitor socket.
    instance.release().await;
    let adopted = Instance::adopt(&spec.pidfile, &spec.qmp_socket).await;
    let Some(adopted) = adopted else {
        panic!("could not adopt the running QEMU")
    };
    assert_eq!(adopted.pid, pid);
    assert_eq!(adopted.qmp.status().await.unwrap(), "paused");

    adopted.kill();
    tokio::time::timeout(Duration::from_secs(10), adopted.qmp.closed())
        .await
        .expect("QEMU did not exit");
    assert!(adopted.exited());
    assert_eq!(
        adopted.shutdown_reason(),
        None,
        "a kill is not a guest shutdown"
    );
    assert!(Instance::adopt(&spec.pidfile, &spec.qmp_socket)
        .await
        .is_none());
}

#[tokio::test]
async fn a_bad_command_line_reports_qemus_words() {
    let Some(binary) = qemu_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path());
    spec.machine_type = "no-such-machine".into();
    let error = Instance::spawn(&binary, &spec, &dir.path().join("qemu.log"))
        .await
        .err()
        .expect("must fail");
    assert!(
        error.to_string().contains("unsupported machine type"),
        "{error}"
    );
}

/// A line of /proc/PID/status (`Seccomp`, `Uid`, `Groups`), without its label.
fn proc_status(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

#[test]
fn this_qemu_supports_the_sandbox() {
    let Some(binary) = qemu_binary() else { return };
    qemu::sandbox::probe(&binary).expect("-sandbox with every class denied");
}

/// Under the sandbox QEMU runs a seccomp filter and cannot start a program: an `exec:`
/// migration (QEMU forks a shell for it) fails, where it works without the sandbox.
#[tokio::test]
async fn a_sandboxed_qemu_cannot_spawn_programs() {
    let Some(binary) = qemu_binary() else { return };
    for sandbox in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = spec(dir.path());
        spec.sandbox = sandbox;
        let instance = Instance::spawn(&binary, &spec, &dir.path().join("qemu.log"))
            .await
            .expect("spawn");
        let _guard = KillOnDrop(instance.pid);
        let seccomp = proc_status(instance.pid, "Seccomp");
        assert_eq!(seccomp == "2", sandbox, "Seccomp: {seccomp}");
        let marker = dir.path().join("ran");
        let uri = format!("exec:touch {}", marker.display());
        let started = instance
            .qmp
            .execute("migrate", Some(serde_json::json!({"uri": uri})))
            .await;
        // Failing to fork is reported either at once or as a failed migration: wait for
        // the migration to settle, then look for the program's trace.
        for _ in 0..200 {
            let Ok(info) = instance.qmp.execute("query-migrate", None).await else {
                break;
            };
            let status = info["status"].as_str().unwrap_or("").to_string();
            if started.is_err() || matches!(status.as_str(), "failed" | "completed" | "") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            marker.exists(),
            !sandbox,
            "sandbox {sandbox}: the exec: program ran: {}; migrate said {started:?}",
            marker.exists()
        );
        instance.kill();
    }
}

/// With `run_as` QEMU never runs as root: its real, effective and saved uids and gids
/// are the ones given, with only the groups given.
#[tokio::test]
async fn qemu_runs_as_the_user_given() {
    let Some(binary) = qemu_binary() else { return };
    if !rustix::process::geteuid().is_root() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: dropping to another user needs root"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (uid, gid) = (2_000_123_456u32, 2_000_123_000u32);
    // QEMU makes its sockets and pidfile in the dir: it must be that user's.
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    let mut spec = spec(dir.path());
    spec.run_as = Some(qemu::RunAs {
        uid,
        gid,
        groups: vec![gid + 1],
    });
    let instance = Instance::spawn(&binary, &spec, &dir.path().join("qemu.log"))
        .await
        .expect("spawn as an unprivileged user");
    let _guard = KillOnDrop(instance.pid);
    assert_eq!(
        proc_status(instance.pid, "Uid"),
        format!("{uid}\t{uid}\t{uid}\t{uid}")
    );
    assert_eq!(
        proc_status(instance.pid, "Gid"),
        format!("{gid}\t{gid}\t{gid}\t{gid}")
    );
    assert_eq!(proc_status(instance.pid, "Groups"), format!("{}", gid + 1));
    assert_eq!(proc_status(instance.pid, "Seccomp"), "2");
    assert_eq!(instance.qmp.status().await.unwrap(), "prelaunch");
    instance.kill();
}
