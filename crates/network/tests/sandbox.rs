//! Pod sandboxes made with the real kernel: a namespace stands in for the node (so the
//! machine's own links are never touched), two Pods join its bridge, and TCP crosses
//! from one Pod to the other and to the gateway. Made twice (an agent repeating a setup
//! after a crash), then taken down without a trace. Skipped loudly without the rights
//! to make namespaces; failed instead under CI or VIRTPLANE_REQUIRE_QEMU.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use futures::TryStreamExt;
use network::netns::NetNs;
use network::sandbox;
use rtnetlink::packet_route::link::LinkAttribute;

mod support;

/// A listener made inside `ns` (a socket stays in the namespace it was made in).
fn listen_in(ns: &NetNs, ip: Ipv4Addr) -> TcpListener {
    ns.run(move || TcpListener::bind(SocketAddr::from((ip, 0))))
        .unwrap()
        .unwrap()
}

/// Connects from inside `ns` to `to`, sends a line and reads the answer.
fn ask_from(ns: &NetNs, to: SocketAddr, listener: &TcpListener) -> String {
    let stream = ns
        .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(5)))
        .unwrap()
        .unwrap_or_else(|e| panic!("connect to {to}: {e}"));
    let (mut served, _) = listener.accept().unwrap();
    let mut client = stream;
    client.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    served.read_exact(&mut got).unwrap();
    served.write_all(b"pong").unwrap();
    let mut answer = [0u8; 4];
    client.read_exact(&mut answer).unwrap();
    format!(
        "{}/{}",
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&answer)
    )
}

#[tokio::test]
async fn pods_on_one_bridge_reach_each_other_and_the_gateway() {
    let Some(node) = support::node_with_pods("vpt", &["a", "b"]).await else {
        return;
    };
    let host = &node.host;
    let gateway = "10.77.0.1/24".parse().unwrap();
    // The bridge made again (an agent restarting): nothing changes.
    sandbox::ensure_bridge(host, "vpbr0", gateway)
        .await
        .unwrap();
    let (a, b) = (
        support::pod_link("vpt", "a", 2),
        support::pod_link("vpt", "b", 3),
    );
    let ns_b = &node.pods[1];
    // An agent that restarts makes A again: the result is the same sandbox.
    let ns_a = sandbox::attach(host, &a).await.unwrap();

    let at_b = listen_in(ns_b, Ipv4Addr::new(10, 77, 0, 3));
    let to_b = at_b.local_addr().unwrap();
    assert_eq!(ask_from(&ns_a, to_b, &at_b), "ping/pong", "A to B");
    let at_gateway = listen_in(&node.ns, Ipv4Addr::new(10, 77, 0, 1));
    let to_gateway = at_gateway.local_addr().unwrap();
    assert_eq!(
        ask_from(ns_b, to_gateway, &at_gateway),
        "ping/pong",
        "B to the gateway"
    );
    // The default route goes through the gateway: an address beyond the subnet is
    // routed there (and refused by nobody listening, not unreachable). The node does not
    // forward it: a new namespace inherits this host's forwarding, which a node agent
    // on the host turns on, and a forwarding node without a route answers unreachable.
    node.ns
        .run(|| std::fs::write("/proc/sys/net/ipv4/ip_forward", "0"))
        .unwrap()
        .unwrap();
    let beyond = ns_a
        .run(|| {
            TcpStream::connect_timeout(&"10.78.0.9:80".parse().unwrap(), Duration::from_millis(300))
        })
        .unwrap()
        .unwrap_err();
    assert_ne!(
        beyond.kind(),
        std::io::ErrorKind::NetworkUnreachable,
        "{beyond}"
    );

    for p in [&a, &b] {
        sandbox::detach(host, &p.netns, &p.host_veth).await.unwrap();
        sandbox::detach(host, &p.netns, &p.host_veth).await.unwrap();
        assert!(!NetNs::named(&p.netns).exists(), "{} is gone", p.netns);
    }
    // A node made anew with another subnet: its bridge keeps only the new gateway.
    sandbox::ensure_bridge(host, "vpbr0", "10.79.0.1/24".parse().unwrap())
        .await
        .unwrap();
    let shown = std::process::Command::new("ip")
        .args([
            "-n",
            node.ns.name(),
            "-4",
            "-o",
            "addr",
            "show",
            "dev",
            "vpbr0",
        ])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("10.79.0.1/24") && !shown.contains("10.77.0.1"),
        "{shown}"
    );
    let mut links = Vec::new();
    let mut listed = host.link().get().execute();
    while let Some(link) = listed.try_next().await.unwrap() {
        for attribute in link.attributes {
            if let LinkAttribute::IfName(name) = attribute {
                links.push(name);
            }
        }
    }
    assert!(
        !links.iter().any(|l| l.starts_with("veth")),
        "veths left on the node: {links:?}"
    );
}
