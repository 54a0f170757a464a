//! KubeVirt's masquerade binding inside a Pod's namespace: the guest's tap joins a bridge
//! `k6t-eth0` that holds the gateway `10.0.2.1/24`; the guest takes `10.0.2.2` by DHCP;
//! nftables forwards what reaches the Pod's address to the guest (only the listed ports,
//! when the interface lists any) and masquerades what the guest sends out behind the
//! Pod's address. The rules are one `nft -f` transaction, so a Pod never holds half.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};

use ipnet::Ipv4Net;
use rtnetlink::LinkUnspec;

use crate::netns::{self, NetNs};
use crate::sandbox::{self, SandboxError, POD_INTERFACE};

pub const GUEST_BRIDGE: &str = "k6t-eth0";
pub const TAP: &str = "tap0";
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 1);
pub const GUEST: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
pub const PREFIX_LEN: u8 = 24;
/// The nftables table the rules live in.
pub const TABLE: &str = "virtplane_masquerade";
/// The ports a migration target's QEMU listens on at the Pod IP (the migration stream,
/// the disks' NBD export): KubeVirt's, and like KubeVirt's never forwarded to the guest.
pub const MIGRATION_PORTS: [u16; 2] = [49152, 49153];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// What the binding forwards, and who may open the tap.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Masquerade {
    /// The interface's `ports`: only these reach the guest; none listed, every port.
    pub ports: Vec<(Protocol, u16)>,
    /// The uid and gid QEMU runs as (the tap is theirs); `None` when QEMU runs as root.
    pub tap_owner: Option<(u32, u32)>,
    /// The guest NIC's MAC: frames from the guest with another are dropped.
    pub guest_mac: Option<[u8; 6]>,
}

/// The table of the anti-spoofing rules in a Pod's namespace.
pub const ANTISPOOF_TABLE: &str = "virtplane_antispoof";

/// Anti-spoofing on the guest's side of its bridge, as the CNI bridge plugin's
/// `macspoofchk` and more: what the guest sends into its bridge (through `tap0`, or any
/// port but the Pod's `eth0`) must carry its MAC (when known) and, for IPv4 and ARP,
/// its address or `0.0.0.0` (where DHCP starts from); the rest is dropped before the
/// bridge handles it. Secondary networks (`netN` and the guest's `tapN`) are the LAN's
/// business: not guarded. (This kernel's bridge hooks cannot match the bridge's name.)
pub fn antispoof_ruleset(guest_mac: Option<[u8; 6]>, address: Ipv4Addr) -> String {
    let mac_rule = guest_mac.map_or(String::new(), |m| {
        format!(
            "        ether saddr != {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} counter drop\n",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    });
    format!(
        "add table bridge {ANTISPOOF_TABLE}\n\
         delete table bridge {ANTISPOOF_TABLE}\n\
         table bridge {ANTISPOOF_TABLE} {{\n\
         \x20   chain guard {{\n\
         {mac_rule}\
         \x20       ether type ip ip saddr != {{ {address}, 0.0.0.0 }} counter drop\n\
         \x20       ether type arp arp saddr ip != {{ {address}, 0.0.0.0 }} counter drop\n\
         \x20   }}\n\
         \x20   chain ports {{\n\
         \x20       iifname \"{POD_INTERFACE}\" return\n\
         \x20       iifname \"{TAP}\" jump guard\n\
         \x20       iifname {{ \"net*\", \"tap*\" }} return\n\
         \x20       jump guard\n\
         \x20   }}\n\
         \x20   chain input {{\n\
         \x20       type filter hook input priority -200; policy accept;\n\
         \x20       jump ports\n\
         \x20   }}\n\
         \x20   chain forward {{\n\
         \x20       type filter hook forward priority -200; policy accept;\n\
         \x20       jump ports\n\
         \x20   }}\n\
         }}\n"
    )
}

/// The nftables ruleset of the binding (replaces whatever the table held).
pub fn ruleset(spec: &Masquerade) -> String {
    let inbound = if spec.ports.is_empty() {
        format!("        iifname \"{POD_INTERFACE}\" counter dnat to {GUEST}\n")
    } else {
        spec.ports
            .iter()
            .map(|(protocol, port)| {
                format!(
                    "        iifname \"{POD_INTERFACE}\" {} dport {port} counter dnat to {GUEST}\n",
                    protocol.nft()
                )
            })
            .collect()
    };
    format!(
        "add table ip {TABLE}\n\
         delete table ip {TABLE}\n\
         table ip {TABLE} {{\n\
         \x20   chain prerouting {{\n\
         \x20       type nat hook prerouting priority dstnat; policy accept;\n\
         \x20       iifname \"{POD_INTERFACE}\" tcp dport {{ {}, {} }} return\n\
         {inbound}\
         \x20   }}\n\
         \x20   chain postrouting {{\n\
         \x20       type nat hook postrouting priority srcnat; policy accept;\n\
         \x20       ip saddr {GUEST} oifname \"{POD_INTERFACE}\" counter masquerade\n\
         \x20       oifname \"{GUEST_BRIDGE}\" ip daddr {GUEST} counter snat to {GATEWAY}\n\
         \x20   }}\n\
         }}\n",
        MIGRATION_PORTS[0], MIGRATION_PORTS[1]
    )
}

fn io_failed(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
    let what = what.into();
    move |source| SandboxError::Io { what, source }
}

/// Creates the persistent tap `name` in the calling thread's namespace, owned by `owner`,
/// as `ip tuntap add mode tap user U group G vnet_hdr` does (the kernel makes taps only
/// through /dev/net/tun, not over netlink).
fn create_tap(name: &str, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    use rustix::ioctl::{opcode, IntegerSetter, Opcode, Setter};
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: u16,
        _pad: [u8; 22],
    }
    const IFF_TAP: u16 = 0x0002;
    const IFF_NO_PI: u16 = 0x1000;
    const IFF_VNET_HDR: u16 = 0x4000;
    const TUNSETIFF: Opcode = opcode::write::<std::ffi::c_int>(b'T', 202);
    const TUNSETPERSIST: Opcode = opcode::write::<std::ffi::c_int>(b'T', 203);
    const TUNSETOWNER: Opcode = opcode::write::<std::ffi::c_int>(b'T', 204);
    const TUNSETGROUP: Opcode = opcode::write::<std::ffi::c_int>(b'T', 206);

    let mut request = IfReq {
        name: [0; 16],
        flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
        _pad: [0; 22],
    };
    let bytes = name.as_bytes();
    if bytes.len() >= 16 {
        return Err(std::io::Error::other(format!(
            "tap name {name} is too long"
        )));
    }
    request.name[..bytes.len()].copy_from_slice(bytes);
    let tun: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?
        .into();
    // SAFETY: each opcode is the kernel's for its argument: TUNSETIFF takes a struct
    // ifreq (name, flags, padding to 40 bytes); the others take an integer by value.
    unsafe {
        rustix::ioctl::ioctl(tun.as_fd(), Setter::<TUNSETIFF, IfReq>::new(request))?;
        if let Some((uid, gid)) = owner {
            rustix::ioctl::ioctl(
                tun.as_fd(),
                IntegerSetter::<TUNSETOWNER>::new_usize(uid as usize),
            )?;
            rustix::ioctl::ioctl(
                tun.as_fd(),
                IntegerSetter::<TUNSETGROUP>::new_usize(gid as usize),
            )?;
        }
        rustix::ioctl::ioctl(tun.as_fd(), IntegerSetter::<TUNSETPERSIST>::new_usize(1))?;
    }
    Ok(())
}

/// Wires the binding in the Pod's namespace (again, if part of it is there): the guest
/// bridge with the gateway, the tap on it, forwarding on, the rules.
pub async fn wire(ns: &NetNs, spec: &Masquerade) -> Result<(), SandboxError> {
    let gateway = Ipv4Net::new(GATEWAY, PREFIX_LEN).expect("a /24");
    guest_bridge(ns, gateway, spec.tap_owner).await?;
    let rules = ruleset(spec) + &antispoof_ruleset(spec.guest_mac, GUEST);
    crate::nft::apply_blocking(Some(ns.clone()), rules).await
}

/// The address KubeVirt's bridge binding gives the guest bridge, so that its DHCP server
/// has one to answer from; nothing is routed to it.
pub const BRIDGE_BINDING_ADDRESS: Ipv4Addr = Ipv4Addr::new(169, 254, 75, 10);

/// Wires KubeVirt's bridge binding in the Pod's namespace (again, if part of it is
/// there): the guest bridge with the tap and the Pod's `eth0` on it, `eth0` without its
/// address (the guest takes it by DHCP), no rules. The guest is the Pod, every port.
pub async fn wire_bridge(
    ns: &NetNs,
    tap_owner: Option<(u32, u32)>,
    guest_mac: Option<[u8; 6]>,
    address: Ipv4Addr,
) -> Result<(), SandboxError> {
    let own = Ipv4Net::new(BRIDGE_BINDING_ADDRESS, 32).expect("a /32");
    let (inside, bridge) = guest_bridge(ns, own, tap_owner).await?;
    let eth0 = sandbox::link_index(&inside, POD_INTERFACE)
        .await?
        .ok_or_else(|| SandboxError::NoLink(POD_INTERFACE.into()))?;
    sandbox::flush_addresses(&inside, eth0).await?;
    inside
        .link()
        .set(
            LinkUnspec::new_with_index(eth0)
                .controller(bridge)
                .up()
                .build(),
        )
        .execute()
        .await
        .map_err(|source| SandboxError::Netlink {
            what: format!("putting {POD_INTERFACE} on {GUEST_BRIDGE}"),
            source,
        })?;
    let rules = format!("add table ip {TABLE}\ndelete table ip {TABLE}\n")
        + &antispoof_ruleset(guest_mac, address);
    crate::nft::apply_blocking(Some(ns.clone()), rules).await
}

/// The guest bridge with `address`, and the tap (owned by QEMU's user) on it, forwarding
/// on: what both bindings start from. Returns the netlink handle inside and the bridge.
async fn guest_bridge(
    ns: &NetNs,
    address: Ipv4Net,
    owner: Option<(u32, u32)>,
) -> Result<(rtnetlink::Handle, u32), SandboxError> {
    let inside =
        netns::netlink(Some(ns)).map_err(io_failed(format!("netlink in {}", ns.name())))?;
    let bridge = sandbox::ensure_bridge(&inside, GUEST_BRIDGE, address).await?;
    tap_on(ns, &inside, bridge, TAP, owner).await?;
    Ok((inside, bridge))
}

/// The guest's tap `tap` (owned by QEMU's user; taken as it is when it exists) up on
/// the bridge `bridge` inside `ns`, with forwarding on there.
pub(crate) async fn tap_on(
    ns: &NetNs,
    inside: &rtnetlink::Handle,
    bridge: u32,
    tap: &str,
    owner: Option<(u32, u32)>,
) -> Result<(), SandboxError> {
    let name = tap.to_string();
    let made = ns
        .run(move || -> std::io::Result<()> {
            match create_tap(&name, owner) {
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) => {}
                other => other?,
            }
            std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
        })
        .map_err(io_failed(format!("entering {}", ns.name())))?;
    made.map_err(io_failed(format!("creating {tap} and enabling forwarding")))?;
    let index = sandbox::link_index(inside, tap)
        .await?
        .ok_or_else(|| SandboxError::NoLink(tap.into()))?;
    inside
        .link()
        .set(
            LinkUnspec::new_with_index(index)
                .controller(bridge)
                .up()
                .build(),
        )
        .execute()
        .await
        .map_err(|source| SandboxError::Netlink {
            what: format!("putting {tap} on its bridge"),
            source,
        })
}

/// The DHCP server's socket: port 67 inside the Pod's namespace, on the guest bridge
/// only (broadcast replies must leave through it, not through the default route).
pub fn dhcp_socket(ns: &NetNs) -> Result<tokio::net::UdpSocket, SandboxError> {
    let made = ns
        .run(|| -> std::io::Result<std::net::UdpSocket> {
            let socket = socket2::Socket::new(
                socket2::Domain::IPV4,
                socket2::Type::DGRAM,
                Some(socket2::Protocol::UDP),
            )?;
            socket.set_reuse_address(true)?;
            socket.set_broadcast(true)?;
            socket.bind_device(Some(GUEST_BRIDGE.as_bytes()))?;
            socket.bind(
                &SocketAddr::from((Ipv4Addr::UNSPECIFIED, crate::dhcp::SERVER_PORT)).into(),
            )?;
            socket.set_nonblocking(true)?;
            Ok(socket.into())
        })
        .map_err(io_failed(format!("entering {}", ns.name())))?;
    let socket = made.map_err(io_failed("binding the DHCP socket"))?;
    tokio::net::UdpSocket::from_std(socket).map_err(io_failed("registering the DHCP socket"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_port_reaches_the_guest_unless_ports_are_listed() {
        let all = ruleset(&Masquerade::default());
        assert!(
            all.contains("iifname \"eth0\" counter dnat to 10.0.2.2\n"),
            "{all}"
        );
        assert!(
            all.contains("ip saddr 10.0.2.2 oifname \"eth0\" counter masquerade"),
            "{all}"
        );
        assert!(all.starts_with(
            "add table ip virtplane_masquerade\ndelete table ip virtplane_masquerade\n"
        ));
        let listed = ruleset(&Masquerade {
            guest_mac: None,
            ports: vec![(Protocol::Tcp, 22), (Protocol::Udp, 53)],
            tap_owner: None,
        });
        assert!(
            listed.contains("iifname \"eth0\" tcp dport 22 counter dnat to 10.0.2.2\n"),
            "{listed}"
        );
        assert!(
            listed.contains("iifname \"eth0\" udp dport 53 counter dnat to 10.0.2.2\n"),
            "{listed}"
        );
        assert!(
            !listed.contains("iifname \"eth0\" counter dnat"),
            "{listed}"
        );
    }
}
