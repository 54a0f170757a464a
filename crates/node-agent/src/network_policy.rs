//! NetworkPolicy enforcement for the node's Pods: NetworkPolicies, Pods and Namespaces
//! watched into caches; on every change (a burst taken as one) each Pod of this node
//! with an address gets the rules of the policies that select it, and the node's policy
//! table (`network::policy`) is replaced in one transaction. Nothing is applied until
//! the caches are complete, so a restarted agent keeps the table it had (still enforced
//! by the kernel) until it can write a whole new one.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use apimachinery::selector::LabelSelector;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::reflector::Store;
use kube::ResourceExt;
use network::policy::{self, LocalPod, Peer, Ports, Protocol, Rule};
use serde_json::{Map, Value};
use tokio::sync::Notify;

use crate::pod_network::{PodNetworkSlot, Ready};
use crate::service_proxy::cache;

/// How long a change waits for the ones right behind it.
const SETTLE: Duration = Duration::from_millis(20);

fn labels(map: &std::collections::BTreeMap<String, String>) -> Map<String, Value> {
    map.iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

fn selector(
    value: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> LabelSelector {
    let json = value.map_or(Value::Null, |s| serde_json::to_value(s).unwrap_or_default());
    // Admission refused what does not parse; a selector that still fails selects nothing.
    LabelSelector::from_label_selector_json(&json).unwrap_or_else(|_| LabelSelector::nothing())
}

/// The Pods of the cluster as policies see them: namespace, labels, address.
struct PodView {
    namespace: String,
    labels: Map<String, Value>,
    address: Option<Ipv4Addr>,
    node: Option<String>,
    /// Container port names and numbers (named ports in policies resolve to them).
    ports: Vec<(String, u16, String)>,
}

fn pod_view(pod: &Pod) -> PodView {
    let spec = pod.spec.as_ref();
    PodView {
        namespace: pod.namespace().unwrap_or_default(),
        labels: labels(pod.labels()),
        address: pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok()),
        node: spec.and_then(|s| s.node_name.clone()),
        ports: spec
            .into_iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                Some((
                    p.name.clone()?,
                    u16::try_from(p.container_port).ok()?,
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ))
            })
            .collect(),
    }
}

fn protocol(name: Option<&str>) -> Option<Protocol> {
    match name.unwrap_or("TCP") {
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        "SCTP" => Some(Protocol::Sctp),
        _ => None,
    }
}

/// A rule's ports; a named port resolves against `target`'s (the Pod the rule guards).
fn rule_ports(ports: &[NetworkPolicyPort], target: &PodView) -> Vec<Ports> {
    ports
        .iter()
        .filter_map(|p| {
            let protocol_name = p.protocol.as_deref().unwrap_or("TCP");
            let protocol = protocol(Some(protocol_name))?;
            let range = match &p.port {
                None => None,
                Some(IntOrString::Int(n)) => {
                    let from = u16::try_from(*n).ok()?;
                    let to = p
                        .end_port
                        .and_then(|e| u16::try_from(e).ok())
                        .unwrap_or(from);
                    Some((from, to))
                }
                Some(IntOrString::String(name)) => {
                    let (_, number, _) = target
                        .ports
                        .iter()
                        .find(|(n, _, proto)| n == name && proto == protocol_name)?;
                    Some((*number, *number))
                }
            };
            Some(Ports { protocol, range })
        })
        .collect()
}

/// The Pods (their addresses) and blocks a rule's peers name, from `namespace`'s policy.
fn rule_peers(
    peers: &[NetworkPolicyPeer],
    namespace: &str,
    pods: &Pods,
    namespaces: &HashMap<String, Map<String, Value>>,
) -> Vec<Peer> {
    let mut found = Vec::new();
    for peer in peers {
        if let Some(block) = &peer.ip_block {
            if let Ok(cidr) = block.cidr.parse() {
                let except = block
                    .except
                    .iter()
                    .flatten()
                    .filter_map(|e| e.parse().ok())
                    .collect();
                found.push(Peer::Block { cidr, except });
            }
            continue;
        }
        let pod_selector = peer.pod_selector.as_ref().map(|s| selector(Some(s)));
        let namespace_selector = peer.namespace_selector.as_ref().map(|s| selector(Some(s)));
        // Without a namespace selector only the policy's namespace counts.
        let candidates: Box<dyn Iterator<Item = &PodView>> = match &namespace_selector {
            None => Box::new(pods.in_namespace(namespace)),
            Some(sel) => Box::new(pods.all.iter().filter(|pod| {
                namespaces
                    .get(&pod.namespace)
                    .is_some_and(|labels| sel.matches(labels))
            })),
        };
        for pod in candidates {
            let Some(address) = pod.address else { continue };
            if pod_selector
                .as_ref()
                .is_none_or(|sel| sel.matches(&pod.labels))
            {
                found.push(Peer::Address(address));
            }
        }
    }
    found
}

/// The cluster's Pods, and where each namespace's are among them.
struct Pods {
    all: Vec<PodView>,
    by_namespace: HashMap<String, Vec<usize>>,
}

impl Pods {
    fn new(all: Vec<PodView>) -> Pods {
        let mut by_namespace: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, pod) in all.iter().enumerate() {
            by_namespace
                .entry(pod.namespace.clone())
                .or_default()
                .push(i);
        }
        Pods { all, by_namespace }
    }

    fn in_namespace<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a PodView> + 'a {
        self.by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .map(|i| &self.all[*i])
    }
}

/// One rule of a policy with its peers resolved (`None`: anyone); its ports resolve
/// per Pod (named ports are the Pod's).
struct CompiledRule<'a> {
    peers: Option<Vec<Peer>>,
    ports: &'a [NetworkPolicyPort],
}

/// A policy read once: its selector parsed, its rules' peers resolved.
struct CompiledPolicy<'a> {
    selector: LabelSelector,
    ingress: Option<Vec<CompiledRule<'a>>>,
    egress: Option<Vec<CompiledRule<'a>>>,
}

fn compile<'a>(
    policy: &'a NetworkPolicy,
    pods: &Pods,
    namespaces: &HashMap<String, Map<String, Value>>,
) -> Option<CompiledPolicy<'a>> {
    let spec = policy.spec.as_ref()?;
    let namespace = policy.namespace().unwrap_or_default();
    let types = spec.policy_types.clone().unwrap_or_else(|| {
        let mut t = vec!["Ingress".to_string()];
        if spec.egress.is_some() {
            t.push("Egress".into());
        }
        t
    });
    let has = |kind: &str| types.iter().any(|t| t == kind);
    let rules = |peers: Vec<(Option<&'a Vec<NetworkPolicyPeer>>, &'a [NetworkPolicyPort])>| {
        peers
            .into_iter()
            .map(|(peers, ports)| CompiledRule {
                peers: peers
                    .filter(|p| !p.is_empty())
                    .map(|p| rule_peers(p, &namespace, pods, namespaces)),
                ports,
            })
            .collect::<Vec<_>>()
    };
    Some(CompiledPolicy {
        selector: selector(spec.pod_selector.as_ref()),
        ingress: has("Ingress").then(|| {
            rules(
                spec.ingress
                    .iter()
                    .flatten()
                    .map(|r| (r.from.as_ref(), r.ports.as_deref().unwrap_or_default()))
                    .collect(),
            )
        }),
        egress: has("Egress").then(|| {
            rules(
                spec.egress
                    .iter()
                    .flatten()
                    .map(|r| (r.to.as_ref(), r.ports.as_deref().unwrap_or_default()))
                    .collect(),
            )
        }),
    })
}

/// Each Pod of `node` with an address, with the rules of the policies selecting it.
fn local_pods(
    node: &str,
    policies: &[Arc<NetworkPolicy>],
    pods: &Pods,
    namespaces: &HashMap<String, Map<String, Value>>,
) -> Vec<LocalPod> {
    let local: Vec<&PodView> = pods
        .all
        .iter()
        .filter(|p| p.node.as_deref() == Some(node) && p.address.is_some())
        .collect();
    // Only the policies of namespaces with Pods here matter; each is compiled once.
    let wanted: std::collections::HashSet<&str> =
        local.iter().map(|p| p.namespace.as_str()).collect();
    let mut by_namespace: HashMap<String, Vec<CompiledPolicy>> = HashMap::new();
    for policy in policies {
        let namespace = policy.namespace().unwrap_or_default();
        if !wanted.contains(namespace.as_str()) {
            continue;
        }
        if let Some(compiled) = compile(policy, pods, namespaces) {
            by_namespace.entry(namespace).or_default().push(compiled);
        }
    }
    let mut out: Vec<LocalPod> = Vec::new();
    for pod in local {
        let mut entry = LocalPod {
            address: pod.address.expect("filtered"),
            ingress: None,
            egress: None,
        };
        for policy in by_namespace.get(&pod.namespace).into_iter().flatten() {
            if !policy.selector.matches(&pod.labels) {
                continue;
            }
            for (compiled, rules) in [
                (&policy.ingress, &mut entry.ingress),
                (&policy.egress, &mut entry.egress),
            ] {
                if let Some(compiled) = compiled {
                    let rules = rules.get_or_insert_with(Vec::new);
                    rules.extend(compiled.iter().map(|rule| Rule {
                        peers: rule.peers.clone(),
                        ports: rule_ports(rule.ports, pod),
                    }));
                }
            }
        }
        out.push(entry);
    }
    out.sort_by_key(|p| p.address);
    out
}

/// The node's policy table: named after its bridge.
pub fn table(ready: &Ready) -> String {
    format!("{}_pol", ready.network.bridge())
}

/// The node's policy table `table` for the Pods of `node`, from every policy, Pod and
/// Namespace of the cluster.
pub fn ruleset(
    node: &str,
    table: &str,
    policies: &[Arc<NetworkPolicy>],
    pods: &[Arc<Pod>],
    namespaces: &[Arc<Namespace>],
) -> String {
    let pods = Pods::new(pods.iter().map(|p| pod_view(p)).collect());
    let namespaces: HashMap<String, Map<String, Value>> = namespaces
        .iter()
        .map(|n| (n.name_any(), labels(n.labels())))
        .collect();
    let local = local_pods(node, policies, &pods, &namespaces);
    policy::ruleset(table, &local)
}

fn rules_now(
    node: &str,
    table: &str,
    policies: &Store<NetworkPolicy>,
    pods: &Store<Pod>,
    namespaces: &Store<Namespace>,
) -> String {
    ruleset(
        node,
        table,
        &policies.state(),
        &pods.state(),
        &namespaces.state(),
    )
}

/// Runs the node's policy enforcement until the process ends.
pub async fn run(client: kube::Client, slot: Arc<PodNetworkSlot>) {
    let ready = loop {
        if let Some(ready) = slot.wait(Duration::from_secs(3600)).await {
            break ready;
        }
    };
    let changed = Arc::new(Notify::new());
    let synced = [
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
    ];
    let (policies, follow_policies) =
        cache::<NetworkPolicy>(&client, changed.clone(), synced[0].clone());
    let (pods, follow_pods) = cache::<Pod>(&client, changed.clone(), synced[1].clone());
    let (namespaces, follow_namespaces) =
        cache::<Namespace>(&client, changed.clone(), synced[2].clone());
    tokio::spawn(follow_policies);
    tokio::spawn(follow_pods);
    tokio::spawn(follow_namespaces);
    for done in &synced {
        done.notified().await;
    }
    let node = slot.node().to_string();
    let table = table(&ready);
    let mut applied: Option<String> = None;
    let mut backoff = Duration::from_millis(200);
    loop {
        let rules = rules_now(&node, &table, &policies, &pods, &namespaces);
        if applied.as_ref() != Some(&rules) {
            match network::nft::apply_blocking(None, rules.clone()).await {
                Ok(()) => {
                    applied = Some(rules);
                    backoff = Duration::from_millis(200);
                }
                Err(e) => {
                    tracing::error!(
                        "node {node}: applying the network policy table: {e}; again in {backoff:?}"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
        }
        changed.notified().await;
        tokio::time::sleep(SETTLE).await;
    }
}
