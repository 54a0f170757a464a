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
        watchdog: None,
        console_socket: dir.join("console.sock"),
        console_log: dir.join("serial.log"),
        qmp_socket: dir.join("qmp.sock"),
        vnc_socket: None,
        pidfile: dir.join("qemu.pid"),
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
