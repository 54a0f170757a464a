//! Routes between nodes, as flannel's host-gw backend sets them: each other node's pod
//! CIDR through that node's address, when the nodes share a link. The routes carry a
//! protocol number of their own, so a sync adds what is missing, replaces what moved and
//! removes what this node no longer needs without touching anyone else's routes.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use ipnet::Ipv4Net;
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteProtocol};
use rtnetlink::{Handle, RouteMessageBuilder};

use crate::sandbox::SandboxError;

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

/// The routes node `own` needs: every other node's pod CIDR through its address.
pub fn desired(own: &str, peers: &[Peer]) -> BTreeMap<Ipv4Net, Ipv4Addr> {
    peers
        .iter()
        .filter(|p| p.name != own)
        .map(|p| (p.pod_cidr.trunc(), p.address))
        .collect()
}

fn ours(message: &RouteMessage) -> Option<(Ipv4Net, Option<Ipv4Addr>)> {
    if message.header.protocol != RouteProtocol::Other(PROTOCOL) {
        return None;
    }
    let mut destination = None;
    let mut gateway = None;
    for attribute in &message.attributes {
        match attribute {
            RouteAttribute::Destination(RouteAddress::Inet(ip)) => destination = Some(*ip),
            RouteAttribute::Gateway(RouteAddress::Inet(ip)) => gateway = Some(*ip),
            _ => {}
        }
    }
    let net = Ipv4Net::new(destination?, message.header.destination_prefix_length).ok()?;
    Some((net, gateway))
}

fn route(net: Ipv4Net, via: Ipv4Addr) -> RouteMessage {
    RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(net.network(), net.prefix_len())
        .gateway(via)
        .protocol(RouteProtocol::Other(PROTOCOL))
        .build()
}

fn failed(what: String) -> impl FnOnce(rtnetlink::Error) -> SandboxError {
    move |source| SandboxError::Netlink { what, source }
}

/// Makes this node's routes `wanted`: adds or moves what differs, removes ours that are
/// not wanted. Returns how many routes changed.
pub async fn sync(
    handle: &Handle,
    wanted: &BTreeMap<Ipv4Net, Ipv4Addr>,
) -> Result<usize, SandboxError> {
    let mut present: BTreeMap<Ipv4Net, (Option<Ipv4Addr>, RouteMessage)> = BTreeMap::new();
    let mut listed = handle
        .route()
        .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
        .execute();
    while let Some(message) = listed
        .try_next()
        .await
        .map_err(failed("listing routes".into()))?
    {
        if let Some((net, gateway)) = ours(&message) {
            present.insert(net, (gateway, message));
        }
    }
    let mut changed = 0;
    for (net, (gateway, message)) in &present {
        if wanted.get(net).is_none_or(|via| Some(*via) != *gateway) {
            handle
                .route()
                .del(message.clone())
                .execute()
                .await
                .map_err(failed(format!("removing the route to {net}")))?;
            changed += 1;
        }
    }
    for (net, via) in wanted {
        if present
            .get(net)
            .is_some_and(|(gateway, _)| *gateway == Some(*via))
        {
            continue;
        }
        handle
            .route()
            .add(route(*net, *via))
            .replace()
            .execute()
            .await
            .map_err(failed(format!("routing {net} via {via}")))?;
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
        let routes = desired("b", &peers);
        assert_eq!(routes.len(), 2);
        assert_eq!(
            routes[&"10.244.0.0/24".parse::<Ipv4Net>().unwrap()],
            Ipv4Addr::new(192, 168, 77, 1)
        );
        assert!(!routes.contains_key(&"10.244.1.0/24".parse::<Ipv4Net>().unwrap()));
        assert_eq!(ipv4("10.0.0.1"), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(ipv4("fd00::1"), None);
    }
}
