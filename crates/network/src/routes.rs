//! Routes between nodes, as flannel sets them: each other node's pod CIDR through that
//! node's address when the nodes share a link (host-gw), or through the node's VXLAN
//! device to the peer's network address, onlink, when they do not (vxlan). The routes
//! carry a protocol number of their own, so a sync adds what is missing, replaces what
//! moved and removes what this node no longer needs without touching anyone else's.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use ipnet::Ipv4Net;
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteProtocol};
use rtnetlink::{Handle, RouteMessageBuilder};

use crate::plan::Backend;
use crate::sandbox::SandboxError;
use crate::vxlan::{self, TunnelPeer};

/// The `proto` of our routes (`ip route` shows it as a number): not one the kernel or a
/// routing daemon uses.
pub const PROTOCOL: u8 = 76;

/// A node as the routes see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub name: String,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
}

/// How a peer's subnet is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Through the peer's address, on a link both share.
    Direct(Ipv4Addr),
    /// Through this node's VXLAN device, to the peer's.
    Tunnel(TunnelPeer),
}

/// The routes node `own` needs: every other node's pod CIDR, directly through its
/// address or through the tunnel, as `backend` says; `connected` are the networks this
/// host has a link on (auto goes direct to a peer inside one of them).
pub fn desired(
    own: &str,
    peers: &[Peer],
    backend: Backend,
    connected: &[Ipv4Net],
) -> BTreeMap<Ipv4Net, Via> {
    peers
        .iter()
        .filter(|p| p.name != own)
        .map(|p| {
            let subnet = p.pod_cidr.trunc();
            let direct = match backend {
                Backend::HostGw => true,
                Backend::Vxlan => false,
                Backend::Auto => connected.iter().any(|net| net.contains(&p.address)),
            };
            let via = if direct {
                Via::Direct(p.address)
            } else {
                Via::Tunnel(TunnelPeer {
                    subnet,
                    node_address: p.address,
                    mac: vxlan::device_mac(&p.name),
                })
            };
            (subnet, via)
        })
        .collect()
}

/// The peers among `routes` reached through the tunnel.
pub fn tunnelled(routes: &BTreeMap<Ipv4Net, Via>) -> Vec<TunnelPeer> {
    routes
        .values()
        .filter_map(|via| match via {
            Via::Tunnel(peer) => Some(*peer),
            Via::Direct(_) => None,
        })
        .collect()
}

/// The networks this host has an address on (not host routes, not loopback).
pub async fn connected(handle: &Handle) -> Result<Vec<Ipv4Net>, SandboxError> {
    let mut listed = handle.address().get().execute();
    let mut networks = Vec::new();
    while let Some(message) = listed
        .try_next()
        .await
        .map_err(failed("listing addresses".into()))?
    {
        for attribute in &message.attributes {
            if let AddressAttribute::Address(IpAddr::V4(ip)) = attribute {
                if ip.is_loopback() || message.header.prefix_len >= 32 {
                    continue;
                }
                if let Ok(net) = Ipv4Net::new(*ip, message.header.prefix_len) {
                    networks.push(net.trunc());
                }
            }
        }
    }
    Ok(networks)
}

/// One of our routes as it is: where to, through which gateway and link.
struct Present {
    gateway: Option<Ipv4Addr>,
    output: Option<u32>,
    message: RouteMessage,
}

fn ours(message: RouteMessage) -> Option<(Ipv4Net, Present)> {
    if message.header.protocol != RouteProtocol::Other(PROTOCOL) {
        return None;
    }
    let mut destination = None;
    let mut gateway = None;
    let mut output = None;
    for attribute in &message.attributes {
        match attribute {
            RouteAttribute::Destination(RouteAddress::Inet(ip)) => destination = Some(*ip),
            RouteAttribute::Gateway(RouteAddress::Inet(ip)) => gateway = Some(*ip),
            RouteAttribute::Oif(index) => output = Some(*index),
            _ => {}
        }
    }
    let net = Ipv4Net::new(destination?, message.header.destination_prefix_length).ok()?;
    Some((
        net,
        Present {
            gateway,
            output,
            message,
        },
    ))
}

/// Whether the route there is the one wanted (`tunnel`: the VXLAN device's index).
fn matches(present: &Present, via: &Via, tunnel: Option<u32>) -> bool {
    match via {
        Via::Direct(address) => present.gateway == Some(*address),
        Via::Tunnel(peer) => {
            present.gateway == Some(peer.subnet.network()) && present.output == tunnel
        }
    }
}

fn route(net: Ipv4Net, via: &Via, tunnel: Option<u32>) -> Result<RouteMessage, SandboxError> {
    let builder = RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(net.network(), net.prefix_len())
        .protocol(RouteProtocol::Other(PROTOCOL));
    Ok(match via {
        Via::Direct(address) => builder.gateway(*address).build(),
        Via::Tunnel(peer) => {
            let index =
                tunnel.ok_or_else(|| SandboxError::NoLink("the node's VXLAN device".into()))?;
            builder
                .gateway(peer.subnet.network())
                .output_interface(index)
                .onlink()
                .build()
        }
    })
}

fn failed(what: String) -> impl FnOnce(rtnetlink::Error) -> SandboxError {
    move |source| SandboxError::Netlink { what, source }
}

/// Makes this node's routes `wanted` (`tunnel`: the index of its VXLAN device, which
/// tunnelled routes go through): adds or moves what differs, removes ours that are not
/// wanted. Returns how many routes changed.
pub async fn sync(
    handle: &Handle,
    wanted: &BTreeMap<Ipv4Net, Via>,
    tunnel: Option<u32>,
) -> Result<usize, SandboxError> {
    let mut present: BTreeMap<Ipv4Net, Present> = BTreeMap::new();
    let mut listed = handle
        .route()
        .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
        .execute();
    while let Some(message) = listed
        .try_next()
        .await
        .map_err(failed("listing routes".into()))?
    {
        if let Some((net, route)) = ours(message) {
            present.insert(net, route);
        }
    }
    let mut changed = 0;
    for (net, route) in &present {
        if wanted
            .get(net)
            .is_none_or(|via| !matches(route, via, tunnel))
        {
            handle
                .route()
                .del(route.message.clone())
                .execute()
                .await
                .map_err(failed(format!("removing the route to {net}")))?;
            changed += 1;
        }
    }
    for (net, via) in wanted {
        if present
            .get(net)
            .is_some_and(|route| matches(route, via, tunnel))
        {
            continue;
        }
        handle
            .route()
            .add(route(*net, via, tunnel)?)
            .replace()
            .execute()
            .await
            .map_err(failed(format!("routing {net} via {via:?}")))?;
        changed += 1;
    }
    Ok(changed)
}

/// Whether `ip` is an IPv4 address (nodes publish theirs as strings).
pub fn ipv4(ip: &str) -> Option<Ipv4Addr> {
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_routes_every_other_nodes_pod_cidr_through_its_address() {
        let peer = |name: &str, ip: &str, cidr: &str| Peer {
            name: name.into(),
            address: ip.parse().unwrap(),
            pod_cidr: cidr.parse().unwrap(),
        };
        let peers = [
            peer("a", "192.168.77.1", "10.244.0.0/24"),
            peer("b", "192.168.77.2", "10.244.1.0/24"),
            peer("c", "192.168.77.3", "10.244.2.0/24"),
        ];
        let lan: Vec<Ipv4Net> = vec!["192.168.77.0/24".parse().unwrap()];
        let routes = desired("b", &peers, Backend::Auto, &lan);
        assert_eq!(routes.len(), 2);
        assert_eq!(
            routes[&"10.244.0.0/24".parse::<Ipv4Net>().unwrap()],
            Via::Direct(Ipv4Addr::new(192, 168, 77, 1))
        );
        assert!(!routes.contains_key(&"10.244.1.0/24".parse::<Ipv4Net>().unwrap()));
        assert!(tunnelled(&routes).is_empty());
        assert_eq!(ipv4("10.0.0.1"), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(ipv4("fd00::1"), None);
    }

    #[test]
    fn peers_off_every_link_are_tunnelled_unless_host_gw_is_asked_for() {
        let peers = [
            Peer {
                name: "a".into(),
                address: "192.168.81.2".parse().unwrap(),
                pod_cidr: "10.244.0.0/24".parse().unwrap(),
            },
            Peer {
                name: "c".into(),
                address: "192.168.77.3".parse().unwrap(),
                pod_cidr: "10.244.2.0/24".parse().unwrap(),
            },
        ];
        let lan: Vec<Ipv4Net> = vec!["192.168.77.0/24".parse().unwrap()];
        let auto = desired("b", &peers, Backend::Auto, &lan);
        assert_eq!(
            tunnelled(&auto),
            vec![TunnelPeer {
                subnet: "10.244.0.0/24".parse().unwrap(),
                node_address: "192.168.81.2".parse().unwrap(),
                mac: vxlan::device_mac("a"),
            }]
        );
        assert!(matches!(
            auto[&"10.244.2.0/24".parse::<Ipv4Net>().unwrap()],
            Via::Direct(_)
        ));
        assert_eq!(
            tunnelled(&desired("b", &peers, Backend::Vxlan, &lan)).len(),
            2
        );
        assert!(tunnelled(&desired("b", &peers, Backend::HostGw, &[])).is_empty());
    }
}
