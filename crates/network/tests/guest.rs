//! A real guest in a Pod: the test guest boots under QEMU started inside Pod A's namespace
//! with the masquerade binding's tap, takes 10.0.2.2 from our DHCP server, and serves on
//! a port that Pod B then reaches at Pod A's address across the node bridge. Skipped
//! loudly without QEMU, the test guest or the rights to make namespaces; failed instead
//! under CI or VIRTPLANE_REQUIRE_QEMU.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use network::masquerade::{Masquerade, Protocol};

const PORT: u16 = 8080;

mod support;

use support::guest::{guest_files, wait_for, PodGuest};

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
    let PodGuest {
        instance,
        dhcp: dhcp_server,
        console: mut writer,
        mut reader,
        dir: _dir,
    } = PodGuest::start(
        &binary,
        (kernel, initrd),
        &a,
        &Masquerade {
            guest_mac: None,
            ports: vec![(Protocol::Tcp, PORT)],
            tap_owner: None,
        },
        "podguest",
    )
    .await;
    node.namespaces.kill = Some(instance.pid);

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
