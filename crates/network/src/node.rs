//! One node's share of the cluster network: its bridge holding the gateway of the node's
//! subnet, forwarding on, traffic leaving the cluster CIDR masqueraded behind the node's
//! address (flannel's `ipMasq`), and its Pods: each a sandbox on the bridge with an
//! address from the node's IPAM, KubeVirt's masquerade binding inside, and the DHCP
//! server that hands the guest its lease. Pods are known by a key of the caller's
//! (`namespace/name`); every name on the host is derived from the node and that key, so
//! nodes sharing a host (tests, simulated racks) never meet.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Mutex;

use ipnet::Ipv4Net;
use rtnetlink::Handle;
use tokio::task::JoinHandle;

use crate::dhcp::Lease;
use crate::ipam::{Ipam, IpamError};
use crate::masquerade::{self, Masquerade};
use crate::netns::{self, NetNs};
use crate::sandbox::{self, PodLink, SandboxError};

#[derive(Debug, thiserror::Error)]
pub enum NodeNetworkError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Ipam(#[from] IpamError),
}

/// Where the node's IPAM state is, in its state dir.
pub const IPAM_DIR: &str = "ipam";

/// FNV-1a: a hash that stays the same across builds, for names that outlive a process.
pub(crate) fn stable_hash(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain(std::iter::once(0)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// The node's bridge: `vpbr` and a hash of the node's name (15 bytes at most).
pub fn bridge_name(node: &str) -> String {
    format!("vpbr{:08x}", stable_hash(&[node]) as u32)
}

/// The names of a Pod's namespace and host-side veth.
pub fn pod_names(node: &str, key: &str) -> (String, String) {
    let hash = stable_hash(&[node, key]);
    (format!("vp-{hash:016x}"), format!("vh{:012x}", hash >> 16))
}

/// The host end of a Pod's secondary interface `number` (`net{number}` inside).
pub fn secondary_veth(node: &str, key: &str, number: usize) -> String {
    let hash = stable_hash(&[node, key]);
    format!("vs{:011x}{number}", hash >> 20)
}

/// The secondary interfaces a Pod may have (`net1` … `net9`).
pub const MAX_SECONDARIES: usize = 9;

/// The rules of the node itself, in a table of the node's own: what leaves the cluster
/// CIDR masqueraded, and TCP's segment size fitted to the route it takes (a Pod's
/// 1500-byte frames do not fit a VXLAN tunnel's 1450).
pub fn node_ruleset(table: &str, cluster: Ipv4Net) -> String {
    format!(
        "add table ip {table}\n\
         delete table ip {table}\n\
         table ip {table} {{\n\
         \x20   chain postrouting {{\n\
         \x20       type nat hook postrouting priority srcnat; policy accept;\n\
         \x20       ip saddr {cluster} ip daddr != {cluster} counter masquerade\n\
         \x20   }}\n\
         \x20   chain forward {{\n\
         \x20       type filter hook forward priority mangle; policy accept;\n\
         \x20       tcp flags syn / syn,rst tcp option maxseg size set rt mtu\n\
         \x20   }}\n\
         }}\n"
    )
}

/// How the guest joins its Pod: KubeVirt's masquerade binding (the guest behind the
/// Pod IP), or its bridge binding (the guest is the Pod IP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    Masquerade(Masquerade),
    Bridge {
        tap_owner: Option<(u32, u32)>,
        guest_mac: Option<[u8; 6]>,
    },
    /// No guest interface on the pod network (a VMI on secondary networks only): the
    /// Pod still has its `eth0` and address, as every Pod does.
    Unused,
}

/// A Pod as the node made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub netns: NetNs,
    pub address: Ipv4Addr,
}

/// The node's network: its bridge and IPAM, and the DHCP servers of its Pods.
#[derive(Debug)]
pub struct NodeNetwork {
    node: String,
    bridge: String,
    ipam: Ipam,
    host: Handle,
    dhcp: Mutex<HashMap<String, JoinHandle<()>>>,
}

impl NodeNetwork {
    /// Sets the node up on `subnet` (its `spec.podCIDR`), with IPAM state in `state_dir`:
    /// the bridge with the gateway, forwarding, the node's rules. Repeatable.
    pub async fn start(
        node: &str,
        state_dir: &Path,
        subnet: Ipv4Net,
        cluster: Ipv4Net,
    ) -> Result<NodeNetwork, NodeNetworkError> {
        let ipam = Ipam::open(state_dir.join(IPAM_DIR), subnet)?;
        let host = netns::netlink(None).map_err(|source| SandboxError::Io {
            what: "netlink".into(),
            source,
        })?;
        let bridge = bridge_name(node);
        let gateway = Ipv4Net::new(ipam.gateway(), subnet.prefix_len()).expect("a valid prefix");
        sandbox::ensure_bridge(&host, &bridge, gateway).await?;
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").map_err(|source| {
            SandboxError::Io {
                what: "enabling IPv4 forwarding".into(),
                source,
            }
        })?;
        // Pod-to-Pod traffic on the bridge passes the IP hooks too (conntrack, Service
        // replies, NetworkPolicy), as kube-proxy and every bridge CNI need.
        if let Err(e) = std::fs::write("/proc/sys/net/bridge/bridge-nf-call-iptables", "1") {
            tracing::warn!(
                "node {node}: bridged traffic bypasses nftables (bridge-nf-call-iptables: {e}): NetworkPolicies do not hold between Pods of this node"
            );
        }
        crate::nft::apply_blocking(None, node_ruleset(&bridge, cluster)).await?;
        tracing::info!("node {node}: Pods on {subnet}, bridge {bridge}");
        Ok(NodeNetwork {
            node: node.into(),
            bridge,
            ipam,
            host,
            dhcp: Mutex::new(HashMap::new()),
        })
    }

    pub fn subnet(&self) -> Ipv4Net {
        self.ipam.subnet()
    }

    pub fn gateway(&self) -> Ipv4Addr {
        self.ipam.gateway()
    }

    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// The netlink handle on the node's namespace (for routes).
    pub fn host(&self) -> &Handle {
        &self.host
    }

    fn link(&self, key: &str, address: Ipv4Addr) -> PodLink {
        let (netns, host_veth) = pod_names(&self.node, key);
        PodLink {
            netns,
            host_veth,
            address: Ipv4Net::new(address, self.subnet().prefix_len()).expect("a valid prefix"),
            gateway: self.gateway(),
            bridge: self.bridge.clone(),
        }
    }

    /// Makes the Pod `key` with its binding (again, if part of it is there): an address
    /// (the one it holds already, after a restart), the sandbox, the binding. On failure
    /// what was made is taken down again and the address freed.
    pub async fn attach(&self, key: &str, binding: &Binding) -> Result<Pod, NodeNetworkError> {
        let address = self.ipam.allocate(key)?;
        let link = self.link(key, address);
        let made = async {
            let netns = sandbox::attach(&self.host, &link).await?;
            match binding {
                Binding::Masquerade(spec) => masquerade::wire(&netns, spec).await?,
                Binding::Bridge {
                    tap_owner,
                    guest_mac,
                } => masquerade::wire_bridge(&netns, *tap_owner, *guest_mac, address).await?,
                Binding::Unused => {}
            }
            Ok::<_, SandboxError>(netns)
        }
        .await;
        match made {
            Ok(netns) => Ok(Pod { netns, address }),
            Err(e) => {
                if let Err(undo) = self.detach(key).await {
                    tracing::warn!("taking down the half-made Pod {key}: {undo}");
                }
                Err(e.into())
            }
        }
    }

    /// Attaches the Pod `key` (made by `attach`) to a secondary network as interface
    /// `net{number}`, with the guest's tap `tap{number}`.
    pub async fn attach_secondary(
        &self,
        key: &str,
        pod: &Pod,
        number: usize,
        attachment: crate::secondary::Attachment,
        tap_owner: Option<(u32, u32)>,
    ) -> Result<(), NodeNetworkError> {
        let secondary = crate::secondary::Secondary {
            number,
            attachment,
            host_veth: secondary_veth(&self.node, key, number),
            tap_owner,
        };
        crate::secondary::attach(&self.host, &pod.netns, &secondary).await?;
        Ok(())
    }

    /// The Pod `key`, when it holds an address and its namespace exists.
    pub fn pod(&self, key: &str) -> Result<Option<Pod>, NodeNetworkError> {
        let Some(address) = self.ipam.lookup(key)? else {
            return Ok(None);
        };
        let netns = NetNs::named(&pod_names(&self.node, key).0);
        Ok(netns.exists().then_some(Pod { netns, address }))
    }

    /// Serves the guest's DHCP in the Pod (once: a repeated call leaves a running server).
    pub fn serve_dhcp(&self, key: &str, pod: &Pod, lease: Lease) -> Result<(), NodeNetworkError> {
        let mut servers = self.dhcp.lock().unwrap_or_else(|p| p.into_inner());
        if servers.get(key).is_some_and(|task| !task.is_finished()) {
            return Ok(());
        }
        let socket = masquerade::dhcp_socket(&pod.netns)?;
        servers.insert(
            key.into(),
            tokio::spawn(crate::dhcp::serve(socket, lease, None)),
        );
        Ok(())
    }

    /// Takes the Pod `key` down and frees its address. What is gone already is no error.
    pub async fn detach(&self, key: &str) -> Result<(), NodeNetworkError> {
        if let Some(server) = self
            .dhcp
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key)
        {
            server.abort();
        }
        let (netns, host_veth) = pod_names(&self.node, key);
        for number in 1..=MAX_SECONDARIES {
            crate::secondary::detach(&self.host, &secondary_veth(&self.node, key, number)).await?;
        }
        sandbox::detach(&self.host, &netns, &host_veth).await?;
        self.ipam.release(key)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernel_and_differ_by_node_and_pod() {
        let bridge = bridge_name("node-a");
        assert!(bridge.len() <= 15, "{bridge}");
        assert_ne!(bridge, bridge_name("node-b"));
        let (ns, veth) = pod_names("node-a", "default/vm1");
        assert!(veth.len() <= 15, "{veth}");
        assert_eq!(
            (ns.clone(), veth.clone()),
            pod_names("node-a", "default/vm1")
        );
        assert_ne!(ns, pod_names("node-b", "default/vm1").0);
        assert_ne!(veth, pod_names("node-a", "default/vm2").1);
        let secondary = secondary_veth("node-a", "default/vm1", MAX_SECONDARIES);
        assert!(secondary.len() <= 15, "{secondary}");
        assert_ne!(secondary, secondary_veth("node-a", "default/vm1", 1));
    }

    #[test]
    fn traffic_leaving_the_cluster_is_masqueraded() {
        let rules = node_ruleset("vpbr1", "10.244.0.0/16".parse().unwrap());
        assert!(
            rules.contains("ip saddr 10.244.0.0/16 ip daddr != 10.244.0.0/16 counter masquerade"),
            "{rules}"
        );
    }
}
