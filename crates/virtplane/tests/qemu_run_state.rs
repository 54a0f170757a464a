//! Tier B: a guest whose vCPUs stop is never reported Running and Ready. The accelerator a
//! node chose is shown on its Node and on each VMI; a guest killed by a failing KVM fails
//! its VMI with QEMU's own words; a disk I/O error pauses the guest (PausedIOError) until
//! storage has room again and the user unpauses it. The newest console or VNC client
//! takes the socket from an older one.

mod qemu;
mod support;

use std::process::Command;
use std::time::Duration;

use qemu::{add_volume, guests, kernel_vm, phase, shared, Cluster, Console, BOOT, SHORT};
use serde_json::json;
use support::{condition, printable};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chosen_accelerator_is_on_the_node_and_the_vmi() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let node = env.api.get(&format!("/api/v1/nodes/{}", env.node)).await;
    let accel = node.body["metadata"]["labels"]["virtplane.io/accel"]
        .as_str()
        .unwrap_or_else(|| panic!("no accel label: {}", node.body["metadata"]))
        .to_string();
    assert!(accel == "kvm" || accel == "tcg", "{accel}");
    let name = "accel";
    env.create_vm(&kernel_vm(g, name, "Always", None)).await;
    let vmi = env.wait_running(name).await;
    assert_eq!(
        vmi["status"]["accelerator"],
        json!(accel),
        "{}",
        vmi["status"]
    );
    let argv = env.qemu_argv(name).join(" ");
    assert!(argv.contains(&format!("accel={accel}")), "{argv}");
    env.wait_ready(name).await;
    env.delete_vm(name).await;
}

/// Whether this host's KVM runs a kernel to its end: what `--accel auto` decided.
fn kvm_really_works() -> Option<bool> {
    let binary = qemu::qemu_binary()?;
    let chosen = ::qemu::accel::choose(::qemu::AccelChoice::Auto, &binary).ok()?;
    Some(chosen.accel == ::qemu::Accel::Kvm)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_kvm_cannot_run_fails_with_qemus_words() {
    let Some(g) = guests() else { return };
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        eprintln!("SKIP a_guest_that_kvm_cannot_run_fails_with_qemus_words: no usable /dev/kvm on this host, so --accel kvm cannot be forced");
        return;
    }
    if kvm_really_works() == Some(true) {
        eprintln!("SKIP a_guest_that_kvm_cannot_run_fails_with_qemus_words: KVM runs guests on this host, so no guest dies under it");
        return;
    }
    let cluster = Cluster::start(g, &["--accel", "kvm"]).await;
    let env = cluster.env();
    let node = env.api.get(&format!("/api/v1/nodes/{}", env.node)).await;
    assert_eq!(node.body["metadata"]["labels"]["virtplane.io/accel"], "kvm");
    let name = "kvmdies";
    env.create_vm(&kernel_vm(g, name, "Once", None)).await;
    let vmi = env
        .wait_vmi(name, BOOT, "phase Failed", |v| {
            v.is_some_and(|v| phase(v) == "Failed")
        })
        .await
        .expect("VMI");
    let ready = condition(&vmi, "Ready").unwrap_or_else(|| panic!("{}", vmi["status"]));
    assert_eq!(ready["status"], "False");
    let message = ready["message"].as_str().unwrap_or("");
    let qemus_words = [
        "KVM internal error",
        "emulation failure",
        "failed to set MSR",
        "kvm_buf_set_msrs",
    ];
    assert!(
        qemus_words.iter().any(|w| message.contains(w)),
        "the failure should quote QEMU: {}",
        vmi["status"]
    );
    let vm = env
        .wait_vm(name, SHORT, "printableStatus of a failed guest", |vm| {
            printable(vm) != "Running" && printable(vm) != "Starting"
        })
        .await;
    assert_ne!(vm["status"]["ready"], true, "{}", vm["status"]);
}

/// A tmpfs inside the host-disk dir, removed (lazily) when dropped.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(path: std::path::PathBuf, size: &str) -> Result<SmallFs, String> {
        std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(SmallFs(path))
    }

    fn grow(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .output()
            .expect("mount");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_fills_up_pauses_the_guest_until_unpause() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let small = match SmallFs::mount(env.host_disk_dir.join("small"), "4m") {
        Ok(fs) => fs,
        Err(e) => {
            // CI runs as root and can: there it must not be skipped.
            if std::env::var_os("VIRTPLANE_REQUIRE_QEMU").is_some_and(|v| v != "0") {
                panic!("cannot mount a tmpfs for the full-disk test (VIRTPLANE_REQUIRE_QEMU is set): {e}");
            }
            eprintln!("SKIP a_disk_that_fills_up_pauses_the_guest_until_unpause: cannot mount a tmpfs here ({e})");
            return;
        }
    };
    let name = "fullDisk".to_ascii_lowercase();
    let name = name.as_str();
    let path = small.0.join("data.img");
    let mut vm = kernel_vm(g, name, "Always", None);
    // O_DIRECT does not exist on tmpfs: the page cache it is.
    add_volume(
        &mut vm,
        json!({"name": "data", "disk": {"bus": "virtio"}, "cache": "writeback"}),
        json!({"name": "data", "hostDisk": {"path": path, "type": "DiskOrCreate", "capacity": "32Mi"}}),
    );
    env.create_vm(&vm).await;
    env.wait_running(name).await;
    env.wait_ready(name).await;
    let mut console = env.console(name).await.expect("console");
    console.send("\r").await;
    // 16 MiB into a 4 MiB filesystem: QEMU stops the guest on ENOSPC.
    console
        .send("dd if=/dev/urandom of=/dev/vda bs=1M count=16 conv=fsync; echo dd-$?-done\r")
        .await;
    let vmi = env
        .wait_vmi(name, SHORT, "condition Paused=True", |v| {
            v.and_then(|v| condition(v, "Paused"))
                .is_some_and(|c| c["status"] == "True")
        })
        .await
        .expect("VMI");
    let paused = condition(&vmi, "Paused").unwrap();
    assert_eq!(paused["reason"], "PausedIOError", "{}", vmi["status"]);
    assert!(
        paused["message"]
            .as_str()
            .unwrap_or("")
            .contains("low-level IO error detected"),
        "{paused}"
    );
    assert_eq!(condition(&vmi, "Ready").unwrap()["status"], "False");
    assert_eq!(phase(&vmi), "Running");
    // It stays paused: nothing resumes it behind the user's back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = env.vmi(name).await.expect("VMI");
    assert_eq!(
        condition(&still, "Paused").unwrap()["reason"],
        "PausedIOError"
    );

    small.grow("64m");
    env.vmi_verb(name, "unpause").await;
    env.wait_vmi(name, SHORT, "Paused condition removed", |v| {
        v.is_some_and(|v| {
            condition(v, "Paused").is_none()
                && condition(v, "Ready").is_some_and(|c| c["status"] == "True")
        })
    })
    .await;
    let from = 0;
    assert!(
        console
            .read_until(from, "dd-0-done", Duration::from_secs(60))
            .await,
        "the guest's write did not finish after the disk had room: {:?}",
        console.seen
    );
    env.delete_vm(name).await;
    env.wait_vmi_gone(name, SHORT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_console_and_vnc_client_takes_over() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "twoconsoles";
    env.create_vm(&kernel_vm(g, name, "Always", None)).await;
    env.wait_running(name).await;
    env.wait_ready(name).await;
    let mut first = env.console(name).await.expect("first console");
    first.send("\r").await;
    assert!(
        first
            .run("echo $((6*7))-first", "42-first", Duration::from_secs(30))
            .await
            .is_some(),
        "the first console does not answer: {:?}",
        first.seen
    );
    let mut second = env.console(name).await.expect("second console");
    assert!(
        first.closed_within(Duration::from_secs(10)).await,
        "the older console was not closed when a newer one connected"
    );
    second.send("\r").await;
    assert!(
        second
            .run("echo $((3*5))-second", "15-second", Duration::from_secs(30))
            .await
            .is_some(),
        "the newer console does not get the guest: {:?}",
        second.seen
    );

    let mut vnc_first = Console::open(&env, name, "vnc").await.expect("first vnc");
    assert!(
        vnc_first
            .read_until(0, "RFB ", Duration::from_secs(10))
            .await,
        "no VNC greeting: {:?}",
        vnc_first.seen
    );
    let mut vnc_second = Console::open(&env, name, "vnc").await.expect("second vnc");
    assert!(
        vnc_first.closed_within(Duration::from_secs(10)).await,
        "the older VNC client was not closed"
    );
    assert!(
        vnc_second
            .read_until(0, "RFB ", Duration::from_secs(10))
            .await,
        "the newer VNC client gets no greeting: {:?}",
        vnc_second.seen
    );
    env.delete_vm(name).await;
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// One frozen QEMU (SIGSTOP: its monitor never answers) must not hold up work on another
/// VMI of the same node: each VMI has its own lock in the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_qemu_does_not_stall_another_vm() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let (frozen, other) = ("frozen", "unfrozen");
    env.create_vm(&kernel_vm(g, frozen, "Always", None)).await;
    env.create_vm(&kernel_vm(g, other, "Always", None)).await;
    env.wait_running(frozen).await;
    env.wait_running(other).await;
    let pid = env.qemu_pid(frozen).expect("qemu pid");
    signal(pid, rustix::process::Signal::STOP);
    // The agent now waits on the frozen QEMU's monitor (up to its 30 s QMP timeout).
    env.vmi_verb(frozen, "pause").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.vmi_verb(other, "pause").await;
    let paused = env
        .wait_vmi(
            other,
            Duration::from_secs(15),
            "condition Paused=True",
            |v| {
                v.and_then(|v| condition(v, "Paused"))
                    .is_some_and(|c| c["status"] == "True")
            },
        )
        .await;
    signal(pid, rustix::process::Signal::CONT);
    assert!(
        paused.is_some(),
        "pausing a VM waited for another VM's frozen QEMU"
    );
    env.delete_vm(frozen).await;
    env.delete_vm(other).await;
}
