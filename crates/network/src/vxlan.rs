//! Between nodes that share no link: flannel's vxlan backend. Each node has one kernel
//! VXLAN device (VNI 1, UDP 8472, no learning) from its own address, holding the
//! network address of its subnet. For every peer reached through it the node keeps a
//! route to the peer's subnet via the peer's network address (onlink, see `routes`), a
//! permanent ARP entry giving that address the peer's device MAC, and an FDB entry
//! sending that MAC to the peer's node address. The MACs derive from node names, so a
//! node knows every other node's without asking anyone.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use ipnet::Ipv4Net;
use rtnetlink::packet_route::link::{InfoData, InfoVxlan, LinkAttribute, LinkInfo};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage,
};
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::{Handle, LinkUnspec, LinkVxlan};

use crate::node::stable_hash;
use crate::sandbox::{self, netlink_failed, SandboxError};

/// flannel's VNI and the Linux kernel's VXLAN port, which flannel uses too.
pub const VNI: u32 = 1;
pub const PORT: u16 = 8472;

/// The node's VXLAN device: `vpvx` and a hash of the node's name.
pub fn device_name(node: &str) -> String {
    format!("vpvx{:08x}", stable_hash(&[node]) as u32)
}

/// The MAC of a node's VXLAN device: locally administered, from the node's name.
pub fn device_mac(node: &str) -> [u8; 6] {
    let hash = stable_hash(&[node, "vtep"]).to_be_bytes();
    [0x02, hash[0], hash[1], hash[2], hash[3], hash[4]]
}

/// The index of the node's VXLAN device, if it has one.
pub async fn index(host: &Handle, node: &str) -> Result<Option<u32>, SandboxError> {
    sandbox::link_index(host, &device_name(node)).await
}

/// A peer reached through the tunnel: its subnet, its node address and device MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TunnelPeer {
    pub subnet: Ipv4Net,
    pub node_address: Ipv4Addr,
    pub mac: [u8; 6],
}

/// The source address a VXLAN device sends from, if the link is one.
fn local_address(link: &rtnetlink::packet_route::link::LinkMessage) -> Option<Ipv4Addr> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|info| match info {
            LinkInfo::Data(InfoData::Vxlan(data)) => data.iter().find_map(|d| match d {
                InfoVxlan::Local(ip) => Some(*ip),
                _ => None,
            }),
            _ => None,
        }),
        _ => None,
    })
}

/// The node's VXLAN device, up, sending from `local` and holding its subnet's network
/// address; made (again, when the node's address moved) if needed. Returns its index.
pub async fn ensure(
    host: &Handle,
    node: &str,
    local: Ipv4Addr,
    subnet: Ipv4Net,
) -> Result<u32, SandboxError> {
    let name = device_name(node);
    let existing = host
        .link()
        .get()
        .match_name(name.clone())
        .execute()
        .try_next()
        .await;
    let existing = match existing {
        Ok(link) => link,
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -19 => None,
        Err(e) => return Err(netlink_failed(format!("looking up link {name}"))(e)),
    };
    let index = match existing {
        Some(link) if local_address(&link) == Some(local) => link.header.index,
        stale => {
            if let Some(link) = stale {
                host.link()
                    .del(link.header.index)
                    .execute()
                    .await
                    .map_err(netlink_failed(format!(
                        "removing {name}, which sent from elsewhere"
                    )))?;
            }
            host.link()
                .add(
                    LinkVxlan::new(&name, VNI)
                        .local(local)
                        .port(PORT)
                        .learning(false)
                        .address(device_mac(node).to_vec())
                        .build(),
                )
                .execute()
                .await
                .map_err(netlink_failed(format!(
                    "creating VXLAN device {name} (VNI {VNI}, port {PORT}) from {local}"
                )))?;
            sandbox::require_link(host, &name).await?
        }
    };
    let own = Ipv4Net::new(subnet.network(), 32).expect("a valid prefix");
    sandbox::remove_other_addresses(host, index, own).await?;
    sandbox::ensure_address(host, index, own).await?;
    host.link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(netlink_failed(format!("bringing {name} up")))?;
    Ok(index)
}

/// The device's neighbour (`family` Inet: ARP) or forwarding (Bridge: FDB) entries.
async fn entries(
    host: &Handle,
    index: u32,
    family: AddressFamily,
) -> Result<Vec<NeighbourMessage>, SandboxError> {
    let mut listed = host.neighbours().get().set_address_family(family).execute();
    let mut found = Vec::new();
    while let Some(entry) = listed
        .try_next()
        .await
        .map_err(netlink_failed("listing neighbours"))?
    {
        if entry.header.ifindex == index && entry.header.family == family {
            found.push(entry);
        }
    }
    Ok(found)
}

fn destination(entry: &NeighbourMessage) -> Option<Ipv4Addr> {
    entry.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)) => Some(*ip),
        _ => None,
    })
}

fn mac(entry: &NeighbourMessage) -> Option<Vec<u8>> {
    entry.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::LinkLayerAddress(mac) => Some(mac.clone()),
        _ => None,
    })
}

/// Makes the device's ARP and FDB entries those of `peers`: each peer's network address
/// answered by its MAC, each MAC sent to its node. Entries of peers gone are removed.
pub async fn sync_peers(
    host: &Handle,
    index: u32,
    peers: &[TunnelPeer],
) -> Result<(), SandboxError> {
    let gateways: BTreeSet<Ipv4Addr> = peers.iter().map(|p| p.subnet.network()).collect();
    let macs: BTreeSet<Vec<u8>> = peers.iter().map(|p| p.mac.to_vec()).collect();
    for entry in entries(host, index, AddressFamily::Inet).await? {
        if destination(&entry).is_some_and(|ip| !gateways.contains(&ip)) {
            host.neighbours()
                .del(entry)
                .execute()
                .await
                .map_err(netlink_failed("removing the ARP entry of a node gone"))?;
        }
    }
    for entry in entries(host, index, AddressFamily::Bridge).await? {
        if mac(&entry).is_some_and(|m| !macs.contains(&m)) {
            host.neighbours()
                .del(entry)
                .execute()
                .await
                .map_err(netlink_failed("removing the FDB entry of a node gone"))?;
        }
    }
    for peer in peers {
        host.neighbours()
            .add(index, IpAddr::V4(peer.subnet.network()))
            .link_layer_address(&peer.mac)
            .replace()
            .execute()
            .await
            .map_err(netlink_failed(format!(
                "ARP entry for {} (node {})",
                peer.subnet, peer.node_address
            )))?;
        host.neighbours()
            .add_bridge(index, &peer.mac)
            .destination(IpAddr::V4(peer.node_address))
            .flags(NeighbourFlags::Own)
            .replace()
            .execute()
            .await
            .map_err(netlink_failed(format!(
                "FDB entry for node {}",
                peer.node_address
            )))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_macs_are_the_nodes_own_and_stable() {
        let name = device_name("node-a");
        assert!(name.len() <= 15, "{name}");
        assert_ne!(name, device_name("node-b"));
        assert_ne!(name, crate::node::bridge_name("node-a"));
        let mac = device_mac("node-a");
        assert_eq!(mac, device_mac("node-a"));
        assert_ne!(mac, device_mac("node-b"));
        // Locally administered, unicast.
        assert_eq!(mac[0] & 0b11, 0b10);
    }
}
