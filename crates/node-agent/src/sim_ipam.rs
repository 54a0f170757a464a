//! Pod addresses for simulated nodes, which have no namespaces: each node's subnet as
//! its Node says (node IPAM's `spec.podCIDR`, followed with one watch for all of an
//! agent's nodes), and addresses of it handed out per VMI in memory (never twice while
//! held, freed when the guest goes), as the CNI host-local plugin does on disk.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher;
use kube::Api;

/// One node's subnet and who holds which of its addresses.
struct NodeAddresses {
    subnet: Ipv4Net,
    held: HashMap<String, Ipv4Addr>,
    taken: BTreeSet<u32>,
    /// Where the next search starts, so freed addresses are not handed out at once.
    next: u32,
}

impl NodeAddresses {
    fn new(subnet: Ipv4Net) -> NodeAddresses {
        NodeAddresses {
            subnet,
            held: HashMap::new(),
            taken: BTreeSet::new(),
            next: 0,
        }
    }

    /// Host offsets a Pod may take: past the network address and the gateway, short of
    /// the broadcast address.
    fn offsets(&self) -> std::ops::Range<u32> {
        // A /0 from a hand-edited Node would shift past 32 bits: saturate instead.
        let size = 1u32
            .checked_shl(32 - u32::from(self.subnet.prefix_len()))
            .unwrap_or(u32::MAX);
        2..size.saturating_sub(1).max(2)
    }

    fn allocate(&mut self, owner: &str) -> Option<Ipv4Addr> {
        if let Some(held) = self.held.get(owner) {
            return Some(*held);
        }
        let range = self.offsets();
        let span = range.end - range.start;
        let offset = (0..span)
            .map(|i| range.start + (self.next + i) % span)
            .find(|o| !self.taken.contains(o))?;
        self.taken.insert(offset);
        self.next = offset + 1 - range.start;
        let address = Ipv4Addr::from(u32::from(self.subnet.network()) + offset);
        self.held.insert(owner.to_string(), address);
        Some(address)
    }

    fn release(&mut self, owner: &str) {
        if let Some(address) = self.held.remove(owner) {
            self.taken
                .remove(&(u32::from(address) - u32::from(self.subnet.network())));
        }
    }
}

/// The Pod addresses of an agent's simulated nodes.
#[derive(Default)]
pub struct SimIpam {
    nodes: Mutex<HashMap<String, NodeAddresses>>,
}

impl SimIpam {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, NodeAddresses>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Node `node` has `subnet` (a node given another subnet starts afresh).
    pub fn set_subnet(&self, node: &str, subnet: Ipv4Net) {
        let mut nodes = self.lock();
        if nodes.get(node).is_none_or(|n| n.subnet != subnet) {
            nodes.insert(node.to_string(), NodeAddresses::new(subnet));
        }
    }

    /// The address `owner` holds on `node` (taken now if it holds none); `None` while the
    /// node has no subnet yet or when it is full.
    pub fn address(&self, node: &str, owner: &str) -> Option<Ipv4Addr> {
        self.lock().get_mut(node)?.allocate(owner)
    }

    pub fn release(&self, node: &str, owner: &str) {
        if let Some(addresses) = self.lock().get_mut(node) {
            addresses.release(owner);
        }
    }

    /// Follows the subnets of `nodes` from their Nodes until the process ends.
    pub async fn follow(self: Arc<Self>, client: kube::Client, nodes: Vec<String>) {
        let ours: HashSet<String> = nodes.into_iter().collect();
        let mut events = watcher(Api::<Node>::all(client), watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let node = match event {
                Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => node,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!("simulated nodes: watching Nodes for their subnets: {e}");
                    continue;
                }
            };
            let Some(name) = node.metadata.name.as_deref().filter(|n| ours.contains(*n)) else {
                continue;
            };
            let subnet = node
                .spec
                .as_ref()
                .and_then(|s| s.pod_cidr.as_deref())
                .and_then(|c| c.parse().ok());
            if let Some(subnet) = subnet {
                self.set_subnet(name, subnet);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_from_the_nodes_subnet_once_each_and_come_back() {
        let ipam = SimIpam::default();
        assert_eq!(ipam.address("n1", "vmi-a"), None, "no subnet yet");
        ipam.set_subnet("n1", "10.244.3.0/30".parse().unwrap());
        // A /30 leaves one address past the gateway: .2.
        assert_eq!(
            ipam.address("n1", "vmi-a"),
            Some(Ipv4Addr::new(10, 244, 3, 2))
        );
        assert_eq!(
            ipam.address("n1", "vmi-a"),
            Some(Ipv4Addr::new(10, 244, 3, 2)),
            "held, not taken again"
        );
        assert_eq!(ipam.address("n1", "vmi-b"), None, "full");
        ipam.release("n1", "vmi-a");
        assert_eq!(
            ipam.address("n1", "vmi-b"),
            Some(Ipv4Addr::new(10, 244, 3, 2))
        );
        ipam.set_subnet("n2", "10.244.4.0/24".parse().unwrap());
        let first = ipam.address("n2", "x").unwrap();
        ipam.release("n2", "x");
        assert_ne!(
            ipam.address("n2", "y").unwrap(),
            first,
            "a freed address is not handed out at once"
        );
        // A subnet as wide as a hand-edited Node may give: no overflow.
        ipam.set_subnet("n3", "0.0.0.0/0".parse().unwrap());
        assert_eq!(ipam.address("n3", "z"), Some(Ipv4Addr::new(0, 0, 0, 2)));
    }
}
