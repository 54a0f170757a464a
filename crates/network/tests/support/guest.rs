//! The test guest under QEMU for the kernel tests and benches: its files (built by
//! `scripts/build-test-guests`), a machine that boots it in a namespace on the
//! masquerade binding's tap, and reading its console.

use std::io::BufRead;
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use network::dhcp::{self, Lease};
use network::masquerade::{self, Masquerade};
use network::netns::NetNs;
use qemu::{Firmware, Instance, KernelBoot, MachineSpec, Nic, NicBackend, NicModel};

/// The guest NIC's MAC (what its DHCP lease is for).
pub const MAC: &str = "02:00:00:aa:bb:cc";

/// The test guest's kernel and initramfs, built by `scripts/build-test-guests` (cached;
/// under the lock the QEMU tests' registry takes, since they build the same files).
pub fn guest_files() -> Result<(PathBuf, PathBuf), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("scripts/build-test-guests");
    let out = std::process::Command::new("/usr/bin/flock")
        .arg(root.join("target/test-registry.lock"))
        .arg(&script)
        .current_dir(&root)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/build-test-guests failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let guests = root.join("target/test-guests");
    Ok((guests.join("bzImage"), guests.join("initramfs.cpio.gz")))
}

pub fn machine(dir: &Path, kernel: PathBuf, initrd: PathBuf, netns: PathBuf) -> MachineSpec {
    MachineSpec {
        name: "guest".into(),
        uuid: "00000000-0000-4000-8000-000000000002".into(),
        serial: None,
        machine_type: "q35".into(),
        accel: qemu::Accel::Tcg,
        cpu_model: "max".into(),
        sockets: 1,
        cores: 1,
        threads: 1,
        memory_mib: 128,
        hugepages: None,
        firmware: Firmware::Bios,
        kernel_boot: Some(KernelBoot {
            kernel,
            initrd: Some(initrd),
            cmdline: "console=ttyS0 quiet".into(),
        }),
        acpi: true,
        smm: false,
        disks: vec![],
        nics: vec![Nic {
            id: "default".into(),
            model: NicModel::VirtioNet,
            mac: MAC.into(),
            backend: NicBackend::Tap {
                ifname: masquerade::TAP.into(),
            },
            boot_index: None,
        }],
        rng: false,
        balloon: false,
        watchdog: None,
        console_socket: dir.join("console.sock"),
        console_log: dir.join("serial.log"),
        qmp_socket: dir.join("qmp.sock"),
        vnc_socket: None,
        pidfile: dir.join("qemu.pid"),
        sandbox: false,
        run_as: None,
        netns: Some(netns),
    }
}

/// Reads the guest's console until a line contains `wanted` (or the deadline passes).
pub fn wait_for(console: &mut BufReader<UnixStream>, wanted: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    let mut seen = String::new();
    while Instant::now() < deadline {
        let mut line = String::new();
        match console.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {
                seen.push_str(&line);
                if line.contains(wanted) {
                    return line;
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("console: {e}"),
        }
    }
    panic!("no {wanted:?} on the console within {within:?}; it said:\n{seen}");
}

/// The test guest started (and resumed) in `pod` behind KubeVirt's masquerade binding
/// (`masquerade`), leased 10.0.2.2 and `hostname` by our DHCP server.
pub struct PodGuest {
    pub instance: Instance,
    pub dhcp: tokio::task::JoinHandle<()>,
    /// The serial console: write commands here, read lines from `reader`.
    pub console: UnixStream,
    pub reader: BufReader<UnixStream>,
    /// Where QEMU's sockets and logs are.
    pub dir: tempfile::TempDir,
}

impl PodGuest {
    pub async fn start(
        qemu: &Path,
        files: (PathBuf, PathBuf),
        pod: &NetNs,
        masquerade: &Masquerade,
        hostname: &str,
    ) -> PodGuest {
        masquerade::wire(pod, masquerade).await.unwrap();
        let lease = Lease {
            mac: dhcp::parse_mac(MAC).unwrap(),
            address: masquerade::GUEST,
            prefix_len: masquerade::PREFIX_LEN,
            gateway: masquerade::GATEWAY,
            dns_servers: vec![],
            search: vec![],
            hostname: hostname.into(),
            mtu: None,
        };
        let dhcp = tokio::spawn(dhcp::serve(
            masquerade::dhcp_socket(pod).unwrap(),
            lease,
            None,
        ));
        let dir = tempfile::tempdir().unwrap();
        let spec = machine(dir.path(), files.0, files.1, pod.path());
        let instance = Instance::spawn(qemu, &spec, &dir.path().join("qemu.log"))
            .await
            .expect("QEMU starts in the Pod's namespace");
        let console = UnixStream::connect(&spec.console_socket).unwrap();
        console
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        let reader = BufReader::new(console.try_clone().unwrap());
        instance.resume().await.unwrap();
        PodGuest {
            instance,
            dhcp,
            console,
            reader,
            dir,
        }
    }
}
