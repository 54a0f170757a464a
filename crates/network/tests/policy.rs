//! NetworkPolicy tables with the real kernel: a node (namespace) with three Pods on its
//! bridge; the node's policy table isolates Pod a for ingress (only b admitted, on one
//! port) and Pod c for egress (nothing admitted). Pods on one bridge are checked too,
//! since the node hands bridged IPv4 to the IP hooks; replies of admitted connections
//! pass. Skipped loudly without the rights to make namespaces or nft; failed instead
//! under CI or VIRTPLANE_REQUIRE_QEMU.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use network::netns::NetNs;
use network::policy::{self, LocalPod, Peer, Ports, Protocol, Rule};

mod support;

fn listen(ns: &NetNs, ip: Ipv4Addr, port: u16) -> TcpListener {
    ns.run(move || TcpListener::bind(SocketAddr::from((ip, port))))
        .unwrap()
        .unwrap()
}

/// Whether `from` opens a connection to `to`: tried until `within` has passed (a fresh
/// veth pair on a busy host may take a moment), one second per try.
fn reaches_within(from: &NetNs, to: SocketAddr, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        let tried = from
            .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(1)))
            .unwrap();
        if tried.is_ok() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Admitted: reached within 10 s.
fn reaches(from: &NetNs, to: SocketAddr) -> bool {
    reaches_within(from, to, Duration::from_secs(10))
}

/// Dropped: no connection in one try of a second (the admitted paths beside it show
/// the network itself works).
fn dropped(from: &NetNs, to: SocketAddr) -> bool {
    !reaches_within(from, to, Duration::ZERO)
}

#[tokio::test]
async fn policies_admit_what_their_rules_name_and_drop_the_rest() {
    if !std::process::Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return support::skip("nft (Debian's nftables) does not run");
    }
    let Some(node) = support::node_with_pods("vpp", &["a", "b", "c"]).await else {
        return;
    };
    let (a, b, c) = (&node.pods[0], &node.pods[1], &node.pods[2]);
    let ip = |n: u8| Ipv4Addr::new(10, 77, 0, n);
    node.ns
        .run(|| std::fs::write("/proc/sys/net/bridge/bridge-nf-call-iptables", "1"))
        .unwrap()
        .expect("bridged IPv4 to the IP hooks");
    let _a80 = listen(a, ip(2), 80);
    let _a81 = listen(a, ip(2), 81);
    let _b80 = listen(b, ip(3), 80);
    let _c80 = listen(c, ip(4), 80);
    assert!(
        reaches(c, SocketAddr::from((ip(2), 80))),
        "no policy: all pass"
    );

    let pods = [
        LocalPod {
            address: ip(2),
            ingress: Some(vec![Rule {
                peers: Some(vec![Peer::Address(ip(3))]),
                ports: vec![Ports {
                    protocol: Protocol::Tcp,
                    range: Some((80, 80)),
                }],
            }]),
            egress: None,
        },
        LocalPod {
            address: ip(4),
            ingress: None,
            egress: Some(vec![]),
        },
    ];
    network::nft::apply(Some(&node.ns), &policy::ruleset("vpbr0_pol", &pods)).unwrap();
    assert!(
        reaches(b, SocketAddr::from((ip(2), 80))),
        "b is admitted to a:80"
    );
    assert!(
        dropped(b, SocketAddr::from((ip(2), 81))),
        "a:81 is not admitted"
    );
    assert!(
        dropped(c, SocketAddr::from((ip(2), 80))),
        "c may send nothing"
    );
    assert!(
        dropped(c, SocketAddr::from((ip(3), 80))),
        "c may send nothing"
    );
    assert!(
        reaches(b, SocketAddr::from((ip(4), 80))),
        "c's replies to an admitted connection pass"
    );

    // Replaced: a block admitting b and c except c.
    let block = [LocalPod {
        address: ip(2),
        ingress: Some(vec![Rule {
            peers: Some(vec![Peer::Block {
                cidr: "10.77.0.0/24".parse().unwrap(),
                except: vec!["10.77.0.4/32".parse().unwrap()],
            }]),
            ports: vec![],
        }]),
        egress: None,
    }];
    network::nft::apply(Some(&node.ns), &policy::ruleset("vpbr0_pol", &block)).unwrap();
    assert!(reaches(b, SocketAddr::from((ip(2), 81))));
    assert!(dropped(c, SocketAddr::from((ip(2), 81))));
}
