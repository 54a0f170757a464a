//! Routes between nodes with the real kernel, as flannel's backends make them: two
//! namespaces stand in for two nodes, each with its bridge and a Pod. On one link
//! (host-gw) each node routes the other's pod CIDR through the other's address; with a
//! router between them (vxlan) through its VXLAN device. Either way the Pods reach each
//! other with their own addresses (no NAT), and a sync without peers removes our routes
//! (and tunnel entries) and nobody else's. Skipped loudly without the rights to make
//! namespaces; failed instead under CI or VIRTPLANE_REQUIRE_QEMU.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use futures::TryStreamExt;
use network::netns::{self, NetNs};
use network::plan::Backend;
use network::routes::{self, Peer, Via};
use network::sandbox::{self, PodLink};
use network::vxlan;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};

mod support;

use support::{index, Namespaces};

fn name(tag: &str) -> String {
    support::name("vpr", tag)
}

async fn up_with(handle: &Handle, link: &str, address: &str) {
    let index = index(handle, link).await;
    let (ip, prefix) = address.split_once('/').unwrap();
    handle
        .address()
        .add(index, ip.parse().unwrap(), prefix.parse().unwrap())
        .execute()
        .await
        .unwrap();
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .unwrap();
}

/// Node `n` (0 or 1): its bridge with 10.244.n.1/24, a Pod at 10.244.n.2 (namespace
/// `<tag>pod<n>`), forwarding on.
async fn node(ns: &NetNs, n: u8, tag: &str) -> (Handle, NetNs) {
    let handle = netns::netlink(Some(ns)).unwrap();
    let gateway = format!("10.244.{n}.1/24").parse().unwrap();
    sandbox::ensure_bridge(&handle, "vpbr0", gateway)
        .await
        .unwrap();
    ns.run(|| std::fs::write("/proc/sys/net/ipv4/ip_forward", "1"))
        .unwrap()
        .unwrap();
    let pod = sandbox::attach(
        &handle,
        &PodLink {
            netns: name(&format!("{tag}pod{n}")),
            host_veth: format!("vethpod{n}"),
            address: format!("10.244.{n}.2/24").parse().unwrap(),
            gateway: Ipv4Addr::new(10, 244, n, 1),
            bridge: "vpbr0".into(),
        },
    )
    .await
    .unwrap();
    (handle, pod)
}

/// Pod 0 (10.244.0.2) connects to a port of pod 1 (10.244.1.2), which sees it by its
/// own address; returns where pod 1 listened.
fn connects(pod0: &NetNs, pod1: &NetNs, how: &str) -> SocketAddr {
    let at_pod1 = pod1
        .run(|| TcpListener::bind(SocketAddr::from((Ipv4Addr::new(10, 244, 1, 2), 0))))
        .unwrap()
        .unwrap();
    let to = at_pod1.local_addr().unwrap();
    let _client = pod0
        .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(5)))
        .unwrap()
        .unwrap_or_else(|e| panic!("pod 0 does not reach pod 1 {how}: {e}"));
    let (_, peer) = at_pod1.accept().unwrap();
    assert_eq!(
        peer.ip(),
        std::net::IpAddr::V4(Ipv4Addr::new(10, 244, 0, 2))
    );
    to
}

fn peers() -> Vec<Peer> {
    (0..2u8)
        .map(|n| Peer {
            name: format!("node{n}"),
            address: Ipv4Addr::new(192, 168, 77, n + 1),
            pod_cidr: format!("10.244.{n}.0/24").parse().unwrap(),
        })
        .collect()
}

#[tokio::test]
async fn pods_on_two_nodes_reach_each_other_through_host_gw_routes() {
    let all = Namespaces {
        names: vec![name("node0"), name("node1"), name("pod0"), name("pod1")],
        kill: None,
    };
    let node0 = match NetNs::create(&all.names[0]) {
        Ok(ns) => ns,
        Err(e) => {
            return support::skip(&format!(
                "cannot make network namespaces here ({e}); run as root"
            ))
        }
    };
    let node1 = NetNs::create(&all.names[1]).unwrap();
    let (h0, pod0) = node(&node0, 0, "").await;
    let (h1, pod1) = node(&node1, 1, "").await;
    // The link the two nodes share.
    h0.link()
        .add(LinkVeth::new("link0", "link1").build())
        .execute()
        .await
        .unwrap();
    support::move_link(&h0, "link1", &node1).await;
    up_with(&h0, "link0", "192.168.77.1/24").await;
    up_with(&h1, "link1", "192.168.77.2/24").await;
    // Someone else's route on node 0, which our syncs must leave alone.
    h0.route()
        .add(
            RouteMessageBuilder::<Ipv4Addr>::new()
                .destination_prefix(Ipv4Addr::new(172, 30, 0, 0), 16)
                .gateway(Ipv4Addr::new(192, 168, 77, 9))
                .build(),
        )
        .execute()
        .await
        .unwrap();

    let peers = peers();
    assert_eq!(
        routes::sync(
            &h0,
            &routes::desired("node0", &peers, Backend::HostGw, &[]),
            None
        )
        .await
        .unwrap(),
        1
    );
    assert_eq!(
        routes::sync(
            &h1,
            &routes::desired("node1", &peers, Backend::HostGw, &[]),
            None
        )
        .await
        .unwrap(),
        1
    );
    // Synced again with nothing new: nothing changes.
    assert_eq!(
        routes::sync(
            &h0,
            &routes::desired("node0", &peers, Backend::HostGw, &[]),
            None
        )
        .await
        .unwrap(),
        0
    );

    let to = connects(&pod0, &pod1, "on the other node");

    // Node 1 left the cluster: node 0 drops its route, and only its route.
    let alone = routes::desired("node0", &peers[..1], Backend::HostGw, &[]);
    assert_eq!(routes::sync(&h0, &alone, None).await.unwrap(), 1);
    let refused = pod0
        .run(move || TcpStream::connect_timeout(&to, Duration::from_millis(500)))
        .unwrap();
    assert!(refused.is_err(), "pod 1 is still reachable");
    let mut kept = false;
    let mut listed = h0
        .route()
        .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
        .execute();
    while let Some(route) = listed.try_next().await.unwrap() {
        kept |= route.header.destination_prefix_length == 16;
    }
    assert!(kept, "the foreign route was removed");
}

/// How many neighbour entries of `family` the link `index` has.
async fn entries(handle: &Handle, index: u32, family: AddressFamily) -> usize {
    let mut listed = handle
        .neighbours()
        .get()
        .set_address_family(family)
        .execute();
    let mut count = 0;
    while let Some(entry) = listed.try_next().await.unwrap() {
        count += usize::from(entry.header.ifindex == index && entry.header.family == family);
    }
    count
}

#[tokio::test]
async fn pods_on_nodes_without_a_shared_link_reach_each_other_through_vxlan() {
    let all = Namespaces {
        names: vec![
            name("vx-node0"),
            name("vx-node1"),
            name("vxpod0"),
            name("vxpod1"),
            name("router"),
        ],
        kill: None,
    };
    let node0 = match NetNs::create(&all.names[0]) {
        Ok(ns) => ns,
        Err(e) => {
            return support::skip(&format!(
                "cannot make network namespaces here ({e}); run as root"
            ))
        }
    };
    let node1 = NetNs::create(&all.names[1]).unwrap();
    let router = NetNs::create(&all.names[4]).unwrap();
    let (h0, pod0) = node(&node0, 0, "vx").await;
    let (h1, pod1) = node(&node1, 1, "vx").await;
    // Each node on a network of its own (192.168.8n.0/24), a router between the two.
    let hr = netns::netlink(Some(&router)).unwrap();
    router
        .run(|| std::fs::write("/proc/sys/net/ipv4/ip_forward", "1"))
        .unwrap()
        .unwrap();
    let hosts = [(&h0, &node0), (&h1, &node1)];
    for (n, (handle, ns)) in hosts.iter().enumerate() {
        let (outside, inside) = (format!("uplink{n}"), format!("lan{n}"));
        hr.link()
            .add(LinkVeth::new(&outside, &inside).build())
            .execute()
            .await
            .unwrap();
        support::move_link(&hr, &inside, ns).await;
        up_with(&hr, &outside, &format!("192.168.8{n}.254/24")).await;
        up_with(handle, &inside, &format!("192.168.8{n}.1/24")).await;
        handle
            .route()
            .add(
                RouteMessageBuilder::<Ipv4Addr>::new()
                    .gateway(format!("192.168.8{n}.254").parse().unwrap())
                    .build(),
            )
            .execute()
            .await
            .unwrap();
    }
    let peers: Vec<Peer> = (0..2u8)
        .map(|n| Peer {
            name: format!("node{n}"),
            address: Ipv4Addr::new(192, 168, 80 + n, 1),
            pod_cidr: format!("10.244.{n}.0/24").parse().unwrap(),
        })
        .collect();

    // What the agent does: auto finds the peer off every link, so it is tunnelled.
    let mut devices = Vec::new();
    for (n, (handle, _)) in hosts.iter().enumerate() {
        let own = &peers[n];
        let connected = routes::connected(handle).await.unwrap();
        let wanted = routes::desired(&own.name, &peers, Backend::Auto, &connected);
        let tunnelled = routes::tunnelled(&wanted);
        assert_eq!(tunnelled.len(), 1, "{wanted:?} with {connected:?}");
        let device = vxlan::ensure(handle, &own.name, own.address, own.pod_cidr)
            .await
            .unwrap();
        // Made once: a second call finds it as it is.
        assert_eq!(
            vxlan::ensure(handle, &own.name, own.address, own.pod_cidr)
                .await
                .unwrap(),
            device
        );
        vxlan::sync_peers(handle, device, &tunnelled).await.unwrap();
        assert_eq!(
            routes::sync(handle, &wanted, Some(device)).await.unwrap(),
            1
        );
        assert_eq!(
            routes::sync(handle, &wanted, Some(device)).await.unwrap(),
            0
        );
        assert!(matches!(wanted.values().next(), Some(Via::Tunnel(_))));
        devices.push(device);
    }

    let to = connects(&pod0, &pod1, "through the tunnel");
    assert_eq!(entries(&h0, devices[0], AddressFamily::Inet).await, 1);
    assert_eq!(entries(&h0, devices[0], AddressFamily::Bridge).await, 1);

    // Node 1 left: node 0 drops its route and its tunnel entries.
    let alone = routes::desired("node0", &peers[..1], Backend::Auto, &[]);
    vxlan::sync_peers(&h0, devices[0], &[]).await.unwrap();
    assert_eq!(
        routes::sync(&h0, &alone, Some(devices[0])).await.unwrap(),
        1
    );
    assert_eq!(entries(&h0, devices[0], AddressFamily::Inet).await, 0);
    assert_eq!(entries(&h0, devices[0], AddressFamily::Bridge).await, 0);
    let refused = pod0
        .run(move || TcpStream::connect_timeout(&to, Duration::from_millis(500)))
        .unwrap();
    assert!(refused.is_err(), "pod 1 is still reachable");
}
