//! A real guest in a Pod: the test guest boots under QEMU started inside Pod A's namespace
//! with the masquerade binding's tap, takes 10.0.2.2 from our DHCP server, and serves on
//! a port that Pod B then reaches at Pod A's address across the node bridge. Skipped
//! loudly without QEMU, the test guest or the rights to make namespaces; failed instead
//! under CI or VIRTPLANE_REQUIRE_QEMU.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use network::dhcp::{self, Lease};
use network::masquerade::{self, Masquerade, Protocol};
use qemu::{Firmware, Instance, KernelBoot, MachineSpec, Nic, NicBackend, NicModel};

const MAC: &str = "02:00:00:aa:bb:cc";
const PORT: u16 = 8080;

mod support;

/// The test guest's kernel and initramfs, built by `scripts/build-test-guests` (cached;
/// under the lock the QEMU tests' registry takes, since they build the same files).
fn guest_files() -> Result<(PathBuf, PathBuf), String> {
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

fn machine(dir: &Path, kernel: PathBuf, initrd: PathBuf, netns: PathBuf) -> MachineSpec {
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
fn wait_for(console: &mut BufReader<UnixStream>, wanted: &str, within: Duration) -> String {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_in_a_pod_takes_its_address_by_dhcp_and_serves_other_pods() {
    let binary = PathBuf::from("/usr/bin/qemu-system-x86_64");
    if !binary.exists() {
        return support::skip("qemu-system-x86_64 is not installed (Debian's qemu-system-x86)");
    }
    let (kernel, initrd) = match guest_files() {
        Ok(files) => files,
        Err(why) => return support::skip(&why),
    };
    let Some(mut node) = support::node_with_pods("vpg", &["a", "b"]).await else {
        return;
    };
    let (a, b) = (node.pods[0].clone(), node.pods[1].clone());
    masquerade::wire(
        &a,
        &Masquerade {
            ports: vec![(Protocol::Tcp, PORT)],
            tap_owner: None,
        },
    )
    .await
    .unwrap();
    let lease = Lease {
        mac: dhcp::parse_mac(MAC).unwrap(),
        address: masquerade::GUEST,
        prefix_len: masquerade::PREFIX_LEN,
        gateway: masquerade::GATEWAY,
        dns_servers: vec![],
        search: vec![],
        hostname: "podguest".into(),
        mtu: None,
    };
    let dhcp_server = tokio::spawn(dhcp::serve(
        masquerade::dhcp_socket(&a).unwrap(),
        lease,
        None,
    ));

    let dir = tempfile::tempdir().unwrap();
    let spec = machine(dir.path(), kernel, initrd, a.path());
    let instance = Instance::spawn(&binary, &spec, &dir.path().join("qemu.log"))
        .await
        .expect("QEMU starts in the Pod's namespace");
    node.namespaces.kill = Some(instance.pid);
    let console = UnixStream::connect(&spec.console_socket).unwrap();
    console
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut writer = console.try_clone().unwrap();
    let mut reader = BufReader::new(console);
    instance.resume().await.unwrap();

    let booted = tokio::task::spawn_blocking(move || {
        let ip = wait_for(
            &mut reader,
            "virtplane-guest: ip eth0",
            Duration::from_secs(120),
        );
        let hostname = wait_for(
            &mut reader,
            "virtplane-guest: hostname",
            Duration::from_secs(30),
        );
        wait_for(
            &mut reader,
            "virtplane-guest: ready",
            Duration::from_secs(30),
        );
        // The guest's shell serves a line on the port, as `#virtplane: serve` would.
        writer
            .write_all(
                format!("\nnc -ll -p {PORT} -e /bin/echo-hello </dev/null >/dev/null 2>&1 &\n")
                    .as_bytes(),
            )
            .unwrap();
        (ip, hostname, reader)
    })
    .await
    .unwrap();
    let (ip, hostname, _reader) = booted;
    assert!(ip.trim_end().ends_with("ip eth0 10.0.2.2"), "{ip}");
    // The guest falls back to 10.0.2.2 without DHCP; only a lease names it podguest.
    assert!(
        hostname.trim_end().ends_with("hostname podguest"),
        "{hostname}"
    );
    dhcp_server.abort();

    // Pod B reaches the guest at Pod A's address.
    let to = SocketAddr::from((Ipv4Addr::new(10, 77, 0, 2), PORT));
    let answer = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let tried = b
                .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(2)))
                .unwrap();
            if let Ok(mut stream) = tried {
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut text = String::new();
                let _ = stream.read_to_string(&mut text);
                if !text.is_empty() {
                    return text;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the guest never answered on {to}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    })
    .await
    .unwrap();
    assert!(answer.contains("hello"), "{answer:?}");
    instance.kill();
}
