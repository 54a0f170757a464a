//! KubeVirt's masquerade binding with the real kernel and nftables. A namespace stands in
//! for the node, two Pods join its bridge; Pod A is wired for a guest, and a third
//! namespace plays the guest behind A's `k6t-eth0` (a veth where QEMU would hold the
//! tap). The guest gets its address by DHCP from A; a listed port of A's address reaches
//! the guest (seen from the gateway), an unlisted one does not; the guest's own
//! connections leave with A's address. Skipped loudly without the rights to make
//! namespaces or without nft; failed instead under CI or VIRTPLANE_REQUIRE_QEMU.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use dhcproto::v4::{DhcpOption, Message, MessageType, Opcode};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use futures::TryStreamExt;
use network::dhcp::{self, Lease};
use network::masquerade::{self, Masquerade, Protocol, GUEST_BRIDGE};
use network::netns::{self, NetNs};
use rtnetlink::packet_route::link::LinkAttribute;
use rtnetlink::{LinkUnspec, LinkVeth, RouteMessageBuilder};

const GUEST_MAC: [u8; 6] = [0x02, 0, 0, 0xaa, 0xbb, 0xcc];

mod support;

use support::index;

/// Whether nft is here; says why not otherwise.
fn nft_or_skip() -> bool {
    let here = std::process::Command::new("nft")
        .arg("--version")
        .output()
        .is_ok();
    if !here {
        support::skip("nft is not installed (Debian's nftables)");
    }
    here
}

/// The guest stand-in: a veth from A's guest bridge into `guest`, its end named eth0
/// with the guest's MAC; the address comes later, by DHCP.
async fn plug_guest(a: &NetNs, guest: &NetNs) {
    let in_a = netns::netlink(Some(a)).unwrap();
    in_a.link()
        .add(LinkVeth::new("gport", "gmove").build())
        .execute()
        .await
        .unwrap();
    let bridge = index(&in_a, GUEST_BRIDGE).await;
    let port = index(&in_a, "gport").await;
    in_a.link()
        .set(
            LinkUnspec::new_with_index(port)
                .controller(bridge)
                .up()
                .build(),
        )
        .execute()
        .await
        .unwrap();
    support::move_link(&in_a, "gmove", guest).await;
    let in_guest = netns::netlink(Some(guest)).unwrap();
    let eth0 = index(&in_guest, "gmove").await;
    in_guest
        .link()
        .set(
            LinkUnspec::new_with_index(eth0)
                .name("eth0")
                .address(GUEST_MAC.to_vec())
                .up()
                .build(),
        )
        .execute()
        .await
        .unwrap();
    let lo = index(&in_guest, "lo").await;
    in_guest
        .link()
        .set(LinkUnspec::new_with_index(lo).up().build())
        .execute()
        .await
        .unwrap();
}

/// What the guest's DHCP client does: DISCOVER by broadcast from port 68 on eth0.
fn discover(guest: &NetNs) -> Message {
    guest
        .run(|| {
            let socket = socket2::Socket::new(
                socket2::Domain::IPV4,
                socket2::Type::DGRAM,
                Some(socket2::Protocol::UDP),
            )
            .unwrap();
            socket.set_broadcast(true).unwrap();
            socket.bind_device(Some(b"eth0")).unwrap();
            socket
                .bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, dhcp::CLIENT_PORT)).into())
                .unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let socket: std::net::UdpSocket = socket.into();
            let zero = Ipv4Addr::UNSPECIFIED;
            let mut request = Message::new_with_id(42, zero, zero, zero, zero, &GUEST_MAC);
            request
                .opts_mut()
                .insert(DhcpOption::MessageType(MessageType::Discover));
            let mut bytes = Vec::new();
            request.encode(&mut Encoder::new(&mut bytes)).unwrap();
            socket
                .send_to(&bytes, (Ipv4Addr::BROADCAST, dhcp::SERVER_PORT))
                .unwrap();
            let mut buf = vec![0u8; 1500];
            let (n, _) = socket.recv_from(&mut buf).expect("an offer");
            Message::decode(&mut Decoder::new(&buf[..n])).unwrap()
        })
        .unwrap()
}

async fn configure_guest(guest: &NetNs, address: Ipv4Addr, gateway: Ipv4Addr) {
    let in_guest = netns::netlink(Some(guest)).unwrap();
    let eth0 = index(&in_guest, "eth0").await;
    in_guest
        .address()
        .add(eth0, address.into(), 24)
        .execute()
        .await
        .unwrap();
    in_guest
        .route()
        .add(
            RouteMessageBuilder::<Ipv4Addr>::new()
                .gateway(gateway)
                .build(),
        )
        .execute()
        .await
        .unwrap();
}

fn listen_in(ns: &NetNs, at: SocketAddr) -> TcpListener {
    ns.run(move || TcpListener::bind(at)).unwrap().unwrap()
}

/// The packets the anti-spoofing rule matching `what` dropped in Pod `ns`.
fn dropped(ns: &NetNs, what: &str) -> u64 {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns.name(), "nft", "list", "table", "bridge"])
        .arg(masquerade::ANTISPOOF_TABLE)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains(what) && l.contains("drop"))
        .unwrap_or_else(|| panic!("no {what} rule in {text}"));
    line.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {line}"))
}

/// A connection from `ns` to `to` with the source address `from` (half a second).
fn connect_as(ns: &NetNs, from: Ipv4Addr, to: SocketAddr) -> std::io::Result<()> {
    ns.run(move || -> std::io::Result<()> {
        let socket = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.bind(&SocketAddr::from((from, 0)).into())?;
        socket.connect_timeout(&to.into(), Duration::from_millis(500))
    })
    .unwrap()
}

fn connect_from(ns: &NetNs, to: SocketAddr) -> std::io::Result<TcpStream> {
    ns.run(move || TcpStream::connect_timeout(&to, Duration::from_secs(3)))
        .unwrap()
}

#[tokio::test]
async fn a_guest_behind_masquerade_gets_dhcp_listed_ports_and_the_pods_address() {
    if !nft_or_skip() {
        return;
    }
    let Some(mut node) = support::node_with_pods("vpm", &["a", "b"]).await else {
        return;
    };
    let guest_name = support::name("vpm", "guest");
    node.namespaces.names.push(guest_name.clone());
    let (a, b) = (&node.pods[0], &node.pods[1]);
    let guest = NetNs::create(&guest_name).unwrap();
    let spec = Masquerade {
        guest_mac: Some(GUEST_MAC),
        ports: vec![(Protocol::Tcp, 2222)],
        tap_owner: Some((107, 107)),
    };
    masquerade::wire(a, &spec).await.unwrap();
    // Wired twice (an agent repeating a setup): the same result.
    masquerade::wire(a, &spec).await.unwrap();
    plug_guest(a, &guest).await;

    let lease = Lease {
        mac: GUEST_MAC,
        address: masquerade::GUEST,
        prefix_len: masquerade::PREFIX_LEN,
        gateway: masquerade::GATEWAY,
        dns_servers: vec![Ipv4Addr::new(10, 96, 0, 10)],
        search: vec!["default.svc.cluster.local".into()],
        hostname: "vm1".into(),
        mtu: None,
    };
    let socket = masquerade::dhcp_socket(a).unwrap();
    let server = tokio::spawn(dhcp::serve(socket, lease, None));
    let offer = tokio::task::spawn_blocking(move || discover(&NetNs::named(&guest_name)))
        .await
        .unwrap();
    server.abort();
    assert_eq!(offer.opcode(), Opcode::BootReply);
    assert_eq!(offer.opts().msg_type(), Some(MessageType::Offer));
    assert_eq!(offer.yiaddr(), masquerade::GUEST);
    configure_guest(&guest, offer.yiaddr(), masquerade::GATEWAY).await;

    // A listed port of the Pod's address reaches the guest, from the gateway.
    let in_guest = listen_in(&guest, "10.0.2.2:2222".parse().unwrap());
    let _client = connect_from(b, "10.77.0.2:2222".parse().unwrap()).unwrap();
    let (_, peer) = in_guest.accept().unwrap();
    assert_eq!(peer.ip(), std::net::IpAddr::V4(masquerade::GATEWAY));
    // An unlisted one does not.
    let _unlisted = listen_in(&guest, "10.0.2.2:2223".parse().unwrap());
    assert!(connect_from(b, "10.77.0.2:2223".parse().unwrap()).is_err());
    // The guest's own connections leave with the Pod's address.
    let at_b = listen_in(b, "10.77.0.3:8080".parse().unwrap());
    let _out = connect_from(&guest, "10.77.0.3:8080".parse().unwrap()).unwrap();
    let (_, peer) = at_b.accept().unwrap();
    assert_eq!(peer.ip(), "10.77.0.2".parse::<std::net::IpAddr>().unwrap());

    // A guest that forges its address, or its MAC, is dropped at its bridge.
    let in_guest_links = netns::netlink(Some(&guest)).unwrap();
    let eth0 = index(&in_guest_links, "eth0").await;
    in_guest_links
        .address()
        .add(eth0, Ipv4Addr::new(10, 0, 2, 99).into(), 24)
        .execute()
        .await
        .unwrap();
    let to_b: SocketAddr = "10.77.0.3:8080".parse().unwrap();
    assert!(connect_as(&guest, masquerade::GUEST, to_b).is_ok());
    assert!(
        connect_as(&guest, Ipv4Addr::new(10, 0, 2, 99), to_b).is_err(),
        "a forged source address passed"
    );
    assert!(
        dropped(a, "ip saddr") > 0,
        "no forged address was dropped at the bridge"
    );
    in_guest_links
        .link()
        .set(
            LinkUnspec::new_with_index(eth0)
                .address(vec![0x02, 0, 0, 0, 0x66, 0x66])
                .build(),
        )
        .execute()
        .await
        .unwrap();
    assert!(
        connect_as(&guest, masquerade::GUEST, to_b).is_err(),
        "a forged MAC passed"
    );
    assert!(
        dropped(a, "ether saddr") > 0,
        "no forged MAC was dropped at the bridge"
    );

    // The tap is there for QEMU, owned by QEMU's user.
    let in_a = netns::netlink(Some(a)).unwrap();
    let mut taps = in_a
        .link()
        .get()
        .match_name(masquerade::TAP.to_string())
        .execute();
    let tap = taps.try_next().await.unwrap().expect("tap0");
    assert!(tap
        .attributes
        .iter()
        .any(|a| matches!(a, LinkAttribute::Controller(_))));
}
