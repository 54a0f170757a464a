//! The node's pod network as the agent runs it: set up once the Node has its subnet
//! (`spec.podCIDR`, from node IPAM) and the cluster's plan (the annotations node IPAM
//! writes beside it), then kept: routes to every other node's subnet, through that
//! node's address when both share a link (flannel's host-gw) and through the node's
//! VXLAN device otherwise (flannel's vxlan), made again as Nodes come, move and go.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher;
use kube::Api;
use kubevirt_api::names::annotations;
use network::node::NodeNetwork;
use network::plan::Backend;
use network::routes::{self, Peer, Via};
use tokio::sync::watch;

/// How a node networks its guests (`--pod-network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The pod network when the agent can make network namespaces, else user mode.
    Auto,
    /// Each VMI in a Pod on the node's bridge: namespaces, veth, nftables (needs root).
    Pod,
    /// QEMU's user-mode network: no Pod, no address of its own; ports are forwarded
    /// from the node (`status.portForwards`). Works without root.
    User,
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "pod" => Ok(Mode::Pod),
            "user" => Ok(Mode::User),
            other => Err(format!("{other:?}: use auto, pod or user")),
        }
    }
}

/// Why this host cannot run the pod network, if it cannot: it takes root (namespaces,
/// links, nftables) and Debian's nftables.
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some(
            "the agent does not run as root, which making network namespaces takes".into(),
        );
    }
    match std::process::Command::new("nft").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("nft (Debian's nftables) does not run on this host".into()),
    }
}

/// The label that says how a node networks its guests: `pod` or `user`.
pub const MODE_LABEL: &str = "network.virtplane.io/mode";
/// The Node condition that says whether guests get Pods on the pod network.
pub const CONDITION: &str = "virtplane.io/PodNetworkReady";

/// How a node networks its guests, as its Node says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub pod: bool,
    /// Why, in words.
    pub message: String,
}

impl Report {
    pub fn label(&self) -> &'static str {
        if self.pod {
            "pod"
        } else {
            "user"
        }
    }

    /// The Node condition.
    pub fn condition(&self) -> serde_json::Value {
        let (status, reason) = if self.pod {
            ("True", "PodNetwork")
        } else {
            ("False", "UserModeNetwork")
        };
        serde_json::json!({"type": CONDITION, "status": status, "reason": reason,
                           "message": self.message, "lastTransitionTime": kubevirt_api::meta::now()})
    }
}

/// The key a VMI's Pod goes by on the node (its IPAM owner, its names' seed).
pub fn pod_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Where a node's pod network keeps its state, in the node's dir.
pub fn state_dir(node_dir: &std::path::Path) -> PathBuf {
    node_dir.join("network")
}

/// The Pod IP of `namespace/name` on the node whose dir is `node_dir`, if it has one.
pub fn pod_ip(
    node_dir: &std::path::Path,
    namespace: &str,
    name: &str,
) -> Result<Option<Ipv4Addr>, network::IpamError> {
    network::Ipam::lookup_in(
        &state_dir(node_dir).join(network::node::IPAM_DIR),
        &pod_key(namespace, name),
    )
}

/// The cluster-wide part of the plan a node needs, as node IPAM publishes it on Nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPlan {
    pub cluster_cidr: Ipv4Net,
    pub service_cidr: Option<Ipv4Net>,
    pub domain: String,
    pub backend: Backend,
}

/// A node's pod network once it is set up.
#[derive(Debug)]
pub struct Ready {
    pub network: NodeNetwork,
    pub plan: ClusterPlan,
}

/// Where the node's pod network will be: empty until the Node has its subnet.
#[derive(Debug)]
pub struct PodNetworkSlot {
    node: String,
    state_dir: PathBuf,
    ready: watch::Sender<Option<Arc<Ready>>>,
}

impl PodNetworkSlot {
    /// The slot of `node`, whose IPAM state lives in `state_dir`.
    pub fn new(node: &str, state_dir: PathBuf) -> PodNetworkSlot {
        PodNetworkSlot {
            node: node.into(),
            state_dir,
            ready: watch::channel(None).0,
        }
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// The network, if it is set up.
    pub fn get(&self) -> Option<Arc<Ready>> {
        self.ready.borrow().clone()
    }

    /// The network, waiting up to `wait` for it to be set up.
    pub async fn wait(&self, wait: Duration) -> Option<Arc<Ready>> {
        let mut ready = self.ready.subscribe();
        let found = tokio::time::timeout(wait, ready.wait_for(Option::is_some))
            .await
            .ok()?
            .ok()?
            .clone();
        found
    }
}

/// The node's subnet and the cluster's plan, once node IPAM has written both.
fn assignment(node: &Node) -> Option<(Ipv4Net, ClusterPlan)> {
    let subnet = node.spec.as_ref()?.pod_cidr.as_deref()?.parse().ok()?;
    let notes = node.metadata.annotations.as_ref()?;
    let plan = ClusterPlan {
        cluster_cidr: notes.get(annotations::CLUSTER_CIDR)?.parse().ok()?,
        service_cidr: notes
            .get(annotations::SERVICE_CIDR)
            .and_then(|s| s.parse().ok()),
        domain: notes
            .get(annotations::CLUSTER_DOMAIN)
            .cloned()
            .unwrap_or_else(|| "cluster.local".into()),
        backend: notes
            .get(annotations::POD_NETWORK_BACKEND)
            .and_then(|b| b.parse().ok())
            .unwrap_or_default(),
    };
    Some((subnet, plan))
}

/// A Node as the routes see it: its name, InternalIP and subnet.
fn peer(node: &Node) -> Option<Peer> {
    let name = node.metadata.name.clone()?;
    let pod_cidr = node.spec.as_ref()?.pod_cidr.as_deref()?.parse().ok()?;
    let address = node
        .status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .and_then(|a| routes::ipv4(&a.address))?;
    Some(Peer {
        name,
        address,
        pod_cidr,
    })
}

/// Runs the node's pod network until the process ends: waits for the Node's subnet, sets
/// the network up (retrying with backoff), then keeps the routes to the other nodes.
pub async fn run(client: kube::Client, slot: Arc<PodNetworkSlot>) {
    let nodes: Api<Node> = Api::all(client);
    let mut known: BTreeMap<String, Node> = BTreeMap::new();
    let mut routed: Option<BTreeMap<Ipv4Net, Via>> = None;
    let mut backoff = Duration::from_millis(200);
    let mut events = watcher(nodes, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => {
                known.insert(node.metadata.name.clone().unwrap_or_default(), node);
            }
            Ok(watcher::Event::Delete(node)) => {
                known.remove(node.metadata.name.as_deref().unwrap_or_default());
            }
            Ok(watcher::Event::Init) => known.clear(),
            Ok(watcher::Event::InitDone) => {}
            Err(e) => {
                tracing::warn!("node {}: watching Nodes: {e}", slot.node);
                continue;
            }
        }
        if slot.get().is_none() {
            let Some((subnet, plan)) = known.get(&slot.node).and_then(assignment) else {
                continue;
            };
            match NodeNetwork::start(&slot.node, &slot.state_dir, subnet, plan.cluster_cidr).await {
                Ok(network) => {
                    slot.ready
                        .send_replace(Some(Arc::new(Ready { network, plan })));
                }
                Err(e) => {
                    tracing::error!(
                        "node {}: setting up the pod network on {subnet}: {e}; again in {backoff:?}",
                        slot.node
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
        }
        let Some(ready) = slot.get() else { continue };
        let Some(own) = known.get(&slot.node).and_then(peer) else {
            continue;
        };
        // Nodes that share this host's address (several nodes on one host) reach each
        // other's bridges directly.
        let peers: Vec<Peer> = known
            .values()
            .filter_map(peer)
            .filter(|p| p.name == slot.node || p.address != own.address)
            .collect();
        match keep_routes(&ready, &own, &peers, routed.as_ref()).await {
            Ok(wanted) => routed = Some(wanted),
            Err(e) => tracing::warn!("node {}: routes to other nodes: {e}", slot.node),
        }
    }
}

/// Routes to every peer's subnet as the plan's backend says, with the VXLAN device and
/// its entries when some peer is tunnelled. Returns the routes now in place.
async fn keep_routes(
    ready: &Ready,
    own: &Peer,
    peers: &[Peer],
    routed: Option<&BTreeMap<Ipv4Net, Via>>,
) -> Result<BTreeMap<Ipv4Net, Via>, network::sandbox::SandboxError> {
    let host = ready.network.host();
    let connected = match ready.plan.backend {
        Backend::Auto => routes::connected(host).await?,
        Backend::HostGw | Backend::Vxlan => Vec::new(),
    };
    let wanted = routes::desired(&own.name, peers, ready.plan.backend, &connected);
    if routed == Some(&wanted) {
        return Ok(wanted);
    }
    let tunnelled = routes::tunnelled(&wanted);
    let tunnel = if tunnelled.is_empty() {
        // No peer is tunnelled any more: the device stays, its entries go.
        if let Some(index) = network::vxlan::index(host, &own.name).await? {
            network::vxlan::sync_peers(host, index, &[]).await?;
        }
        None
    } else {
        let index =
            network::vxlan::ensure(host, &own.name, own.address, ready.network.subnet()).await?;
        network::vxlan::sync_peers(host, index, &tunnelled).await?;
        Some(index)
    };
    let changed = routes::sync(host, &wanted, tunnel).await?;
    if changed > 0 {
        tracing::info!(
            "node {}: {changed} route(s) to other nodes changed ({} in all, {} through VXLAN)",
            own.name,
            wanted.len(),
            tunnelled.len()
        );
    }
    Ok(wanted)
}
