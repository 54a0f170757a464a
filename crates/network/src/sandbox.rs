//! A Pod's network sandbox, made as the CNI `bridge` plugin makes it: the node's bridge
//! holds the gateway (the first address of the node's subnet); each Pod gets a network
//! namespace and a veth pair, one end on the bridge, the other `eth0` in the namespace
//! with the Pod's address and a default route through the gateway. Every step may be
//! repeated: an agent that died halfway makes the same sandbox again, or takes it down.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;

use futures::TryStreamExt;
use ipnet::Ipv4Net;
use rtnetlink::{Handle, LinkBridge, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::netns::{self, NetNs};

/// The Pod's end of its veth pair, inside its namespace.
pub const POD_INTERFACE: &str = "eth0";

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{what}: {source}")]
    Netlink {
        what: String,
        source: rtnetlink::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("no link named {0}")]
    NoLink(String),
}

pub(crate) fn netlink_failed(
    what: impl Into<String>,
) -> impl FnOnce(rtnetlink::Error) -> SandboxError {
    let what = what.into();
    move |source| SandboxError::Netlink { what, source }
}

fn io_failed(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
    let what = what.into();
    move |source| SandboxError::Io { what, source }
}

/// The index of the link named `name`, if there is one.
pub(crate) async fn link_index(handle: &Handle, name: &str) -> Result<Option<u32>, SandboxError> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(link) => Ok(link.map(|l| l.header.index)),
        // The kernel answers ENODEV for a name it does not know.
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -19 => Ok(None),
        Err(e) => Err(netlink_failed(format!("looking up link {name}"))(e)),
    }
}

pub(crate) async fn require_link(handle: &Handle, name: &str) -> Result<u32, SandboxError> {
    link_index(handle, name)
        .await?
        .ok_or_else(|| SandboxError::NoLink(name.into()))
}

/// Adds `address` to the link unless it is there already.
pub(crate) async fn ensure_address(
    handle: &Handle,
    index: u32,
    address: Ipv4Net,
) -> Result<(), SandboxError> {
    let mut existing = handle
        .address()
        .get()
        .set_link_index_filter(index)
        .execute();
    while let Some(message) = existing
        .try_next()
        .await
        .map_err(netlink_failed("listing addresses"))?
    {
        // The kernel may answer with every link's addresses: only this link's count.
        let held = message.header.index == index
            && message.attributes.iter().any(|a| {
                matches!(a, rtnetlink::packet_route::address::AddressAttribute::Address(IpAddr::V4(ip)) if *ip == address.addr())
            });
        if held && message.header.prefix_len == address.prefix_len() {
            return Ok(());
        }
    }
    handle
        .address()
        .add(index, IpAddr::V4(address.addr()), address.prefix_len())
        .execute()
        .await
        .map_err(netlink_failed(format!("adding {address}")))
}

/// Removes the link's IPv4 addresses other than `keep`.
pub(crate) async fn remove_other_addresses(
    handle: &Handle,
    index: u32,
    keep: Ipv4Net,
) -> Result<(), SandboxError> {
    remove_addresses(handle, index, Some(keep)).await
}

/// Removes every address of the link (its routes go with them).
pub(crate) async fn flush_addresses(handle: &Handle, index: u32) -> Result<(), SandboxError> {
    remove_addresses(handle, index, None).await
}

/// Removes the link's addresses: with `keep`, its IPv4 addresses but that one; without,
/// all of them.
async fn remove_addresses(
    handle: &Handle,
    index: u32,
    keep: Option<Ipv4Net>,
) -> Result<(), SandboxError> {
    let mut existing = handle
        .address()
        .get()
        .set_link_index_filter(index)
        .execute();
    let mut stale = Vec::new();
    while let Some(message) = existing
        .try_next()
        .await
        .map_err(netlink_failed("listing addresses"))?
    {
        // The kernel may answer with every link's addresses: only this link's count.
        if message.header.index != index {
            continue;
        }
        let Some(keep) = keep else {
            stale.push(message);
            continue;
        };
        let address = message.attributes.iter().find_map(|a| match a {
            rtnetlink::packet_route::address::AddressAttribute::Address(IpAddr::V4(ip)) => {
                Some(*ip)
            }
            _ => None,
        });
        if address
            .is_some_and(|a| a != keep.addr() || message.header.prefix_len != keep.prefix_len())
        {
            stale.push(message);
        }
    }
    for message in stale {
        handle
            .address()
            .del(message)
            .execute()
            .await
            .map_err(netlink_failed("removing an address"))?;
    }
    Ok(())
}

/// The node's bridge, up, with the gateway address (`gateway` is the address with the
/// subnet's prefix, `10.244.3.1/24`) and no other: a bridge left by a node that had
/// another subnet (a cluster made anew on this host) keeps none of its old addresses.
/// Made if missing.
pub async fn ensure_bridge(
    host: &Handle,
    name: &str,
    gateway: Ipv4Net,
) -> Result<u32, SandboxError> {
    let index = bridge_up(host, name).await?;
    remove_other_addresses(host, index, gateway).await?;
    ensure_address(host, index, gateway).await?;
    Ok(index)
}

/// The bridge `name`, made if missing, up; its addresses as they are.
pub(crate) async fn bridge_up(host: &Handle, name: &str) -> Result<u32, SandboxError> {
    let index = match link_index(host, name).await? {
        Some(index) => index,
        None => {
            host.link()
                .add(LinkBridge::new(name).build())
                .execute()
                .await
                .map_err(netlink_failed(format!("creating bridge {name}")))?;
            require_link(host, name).await?
        }
    };
    host.link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(netlink_failed(format!("bringing {name} up")))?;
    Ok(index)
}

/// What a Pod's sandbox is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLink {
    /// The namespace's name (`/run/netns/NAME`).
    pub netns: String,
    /// The host end of the veth pair (at most 15 bytes, as every link name).
    pub host_veth: String,
    /// The Pod's address with the subnet's prefix.
    pub address: Ipv4Net,
    pub gateway: Ipv4Addr,
    /// The node bridge the host end joins.
    pub bridge: String,
}

/// Makes the Pod's sandbox (again, if part of it is there): its namespace, `eth0` there
/// with the Pod's address and default route, its host end on the bridge.
pub async fn attach(host: &Handle, link: &PodLink) -> Result<NetNs, SandboxError> {
    let ns = NetNs::create(&link.netns)
        .map_err(io_failed(format!("creating namespace {}", link.netns)))?;
    let inside =
        netns::netlink(Some(&ns)).map_err(io_failed(format!("netlink in {}", link.netns)))?;
    let eth0 = veth_into(
        host,
        &ns,
        &inside,
        &link.host_veth,
        POD_INTERFACE,
        &link.bridge,
    )
    .await?;
    configure_inside(&inside, link, eth0).await?;
    Ok(ns)
}

/// A veth pair from the host's `bridge` into `ns` (whose netlink handle is `inside`):
/// the host end `host_veth` up on the bridge, the other end named `name` in the
/// namespace (down, no address). A pair left by an attempt that died halfway is made
/// anew. Returns the index of the end inside.
pub(crate) async fn veth_into(
    host: &Handle,
    ns: &NetNs,
    inside: &Handle,
    host_veth: &str,
    name: &str,
    bridge: &str,
) -> Result<u32, SandboxError> {
    let mut moving = format!("{host_veth}p");
    moving.truncate(15);
    for stale in [host_veth, moving.as_str()] {
        if let Some(index) = link_index(host, stale).await? {
            host.link()
                .del(index)
                .execute()
                .await
                .map_err(netlink_failed(format!("removing stale {stale}")))?;
        }
    }
    if let Some(index) = link_index(inside, name).await? {
        inside
            .link()
            .del(index)
            .execute()
            .await
            .map_err(netlink_failed(format!("removing a stale {name}")))?;
    }
    let bridge_index = link_index(host, bridge)
        .await?
        .ok_or_else(|| SandboxError::NoLink(bridge.into()))?;
    host.link()
        .add(LinkVeth::new(host_veth, &moving).build())
        .execute()
        .await
        .map_err(netlink_failed(format!("creating veth {host_veth}")))?;
    let host_end = require_link(host, host_veth).await?;
    host.link()
        .set(
            LinkUnspec::new_with_index(host_end)
                .controller(bridge_index)
                .up()
                .build(),
        )
        .execute()
        .await
        .map_err(netlink_failed(format!("putting {host_veth} on {bridge}")))?;
    let pod_end = require_link(host, &moving).await?;
    let ns_file = ns
        .open()
        .map_err(io_failed(format!("opening {}", ns.name())))?;
    host.link()
        .set(
            LinkUnspec::new_with_index(pod_end)
                .setns_by_fd(ns_file.as_raw_fd())
                .build(),
        )
        .execute()
        .await
        .map_err(netlink_failed(format!(
            "moving {moving} into {}",
            ns.name()
        )))?;
    let index = require_link(inside, &moving).await?;
    inside
        .link()
        .set(
            LinkUnspec::new_with_index(index)
                .name(name.to_string())
                .build(),
        )
        .execute()
        .await
        .map_err(netlink_failed(format!("naming the Pod's end {name}")))?;
    Ok(index)
}

/// Inside the namespace: `lo` up, `eth0` with the Pod's address, up, and the default
/// route through the gateway.
async fn configure_inside(inside: &Handle, link: &PodLink, eth0: u32) -> Result<(), SandboxError> {
    let lo = require_link(inside, "lo").await?;
    inside
        .link()
        .set(LinkUnspec::new_with_index(lo).up().build())
        .execute()
        .await
        .map_err(netlink_failed("bringing lo up"))?;
    ensure_address(inside, eth0, link.address).await?;
    inside
        .link()
        .set(LinkUnspec::new_with_index(eth0).up().build())
        .execute()
        .await
        .map_err(netlink_failed("bringing eth0 up"))?;
    inside
        .route()
        .add(
            RouteMessageBuilder::<Ipv4Addr>::new()
                .gateway(link.gateway)
                .build(),
        )
        .replace()
        .execute()
        .await
        .map_err(netlink_failed(format!(
            "default route via {}",
            link.gateway
        )))
}

/// Takes the Pod's sandbox down: its veth pair (removing one end removes both) and its
/// namespace. What is gone already is no error.
pub async fn detach(host: &Handle, netns: &str, host_veth: &str) -> Result<(), SandboxError> {
    if let Some(index) = link_index(host, host_veth).await? {
        host.link()
            .del(index)
            .execute()
            .await
            .map_err(netlink_failed(format!("removing {host_veth}")))?;
    }
    NetNs::named(netns)
        .delete()
        .map_err(io_failed(format!("removing namespace {netns}")))
}
