//! Places VMIs on nodes — the part of scheduling that KubeVirt leaves to the Kubernetes
//! scheduler and its launcher pods. A VMI fits a node that is Ready and schedulable,
//! whose taints it tolerates, whose labels match its nodeSelector and required node
//! affinity, and that has the CPU and memory it requests left. Among those, the one with
//! the most free memory wins. A VMI that fits nowhere says why, like a pending pod.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::Client;
use kubevirt_api::backoff::{object_key, Backoff};
use kubevirt_api::meta;
use kubevirt_api::model::core::Node;
use kubevirt_api::model::vmi::VmiSpec;
use kubevirt_api::model::{Condition, VirtualMachineInstance, VmiPhase};
use kubevirt_api::quantity::Quantity;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify, Semaphore};

use crate::resources;

const MANAGER: &str = "virt-scheduler";
const NODE_NAME_LABEL: &str = kubevirt_api::names::labels::NODE_NAME;
use kubevirt_api::names::conditions::{POD_SCHEDULED, REASON_UNSCHEDULABLE};
/// The CPU a vCPU requests by default: KubeVirt's cpuAllocationRatio of 10.
const MILLICPU_PER_VCPU: i64 = 100;
/// How long a pass waits after the event that woke it, so that the events that follow
/// share it.
const BATCH: Duration = Duration::from_millis(20);
/// A pass reads every VMI, so with many of them the wait grows with the pass: the next
/// one waits this many times as long as the last one planned, which keeps the
/// scheduler's passes to a fraction of a core however many VMIs change at once.
const WAIT_PER_PASS_TIME: u32 = 4;
/// The longest that wait gets: one pass slowed by a busy machine must not hold the next
/// one back for long.
const MAX_WAIT: Duration = Duration::from_secs(1);
/// Scheduling writes (bindings, unschedulable reports) in flight at once.
const IN_FLIGHT: usize = 64;

/// CPU (millicores) and memory (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub millicpu: i64,
    pub memory: i64,
}

fn quantity(v: Option<&Value>) -> Option<Quantity> {
    v.and_then(Quantity::from_json)
}

/// What a VMI asks of its node.
pub fn requests(spec: &VmiSpec) -> Resources {
    let domain = spec.domain.clone().unwrap_or_default();
    let resources = domain.resources.unwrap_or_default();
    let request = |name: &str| quantity(resources.requests.as_ref().and_then(|r| r.get(name)));
    let memory = request("memory")
        .or_else(|| quantity(domain.memory.as_ref().and_then(|m| m.guest.as_ref())))
        .or_else(|| quantity(resources.limits.as_ref().and_then(|l| l.get("memory"))))
        .map_or(0, Quantity::value);
    let cpu = domain.cpu.unwrap_or_default();
    let vcpus = [cpu.sockets, cpu.cores, cpu.threads]
        .iter()
        .map(|n| i64::from(n.unwrap_or(1).max(1)))
        .product::<i64>();
    let millicpu = request("cpu").map_or(vcpus * MILLICPU_PER_VCPU, Quantity::milli_value);
    Resources { millicpu, memory }
}

/// What a node offers in total.
pub fn allocatable(node: &Node) -> Resources {
    let get = |k: &str| {
        let text = node.status.allocatable.as_ref()?.get(k)?;
        Quantity::parse(&text.0)
    };
    Resources {
        millicpu: get("cpu").map_or(0, Quantity::milli_value),
        memory: get("memory").map_or(0, Quantity::value),
    }
}

/// Why a node was not chosen, worded as the Kubernetes scheduler words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Misfit {
    NotReady,
    Unschedulable,
    Taint,
    Selector,
    Cpu,
    Memory,
    /// The node a migrating VMI runs on (KubeVirt's target pod has anti-affinity to it).
    AntiAffinity,
}

impl Misfit {
    fn text(self) -> &'static str {
        match self {
            Misfit::NotReady => "node(s) were not ready",
            Misfit::Unschedulable => "node(s) were unschedulable",
            Misfit::Taint => "node(s) had untolerated taint(s)",
            Misfit::Selector => "node(s) didn't match Pod's node affinity/selector",
            Misfit::Cpu => "Insufficient cpu",
            Misfit::Memory => "Insufficient memory",
            Misfit::AntiAffinity => "node(s) didn't match pod anti-affinity rules",
        }
    }
}

fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| {
        let exists = t.operator.as_deref() == Some("Exists");
        let key_ok = match t.key.as_deref().unwrap_or("") {
            "" => exists,
            key => key == taint.key,
        };
        let value_ok =
            exists || t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("");
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        key_ok && value_ok && effect_ok
    })
}

/// One requirement of a `nodeSelectorTerm` on the value it looks at (`None`: absent).
fn holds(requirement: &NodeSelectorRequirement, actual: Option<&str>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    let compare = |ordering: std::cmp::Ordering| match (
        actual.and_then(number),
        values.first().and_then(|v| number(v)),
    ) {
        (Some(a), Some(b)) => a.cmp(&b) == ordering,
        _ => false,
    };
    match requirement.operator.as_str() {
        "In" => actual.is_some_and(|a| values.iter().any(|v| v == a)),
        "NotIn" => actual.is_none_or(|a| !values.iter().any(|v| v == a)),
        "Exists" => actual.is_some(),
        "DoesNotExist" => actual.is_none(),
        "Gt" => compare(std::cmp::Ordering::Greater),
        "Lt" => compare(std::cmp::Ordering::Less),
        _ => false,
    }
}

/// One `nodeSelectorTerm`: every expression must hold.
fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let labels = node.labels();
    term.match_expressions
        .iter()
        .flatten()
        .all(|e| holds(e, labels.get(&e.key).map(String::as_str)))
        && term.match_fields.iter().flatten().all(|e| {
            let actual = (e.key == "metadata.name").then(|| node.name());
            holds(e, actual)
        })
}

/// Whether a VMI of `spec` may run on `node` at all, ignoring capacity.
pub fn eligible(spec: &VmiSpec, node: &Node) -> Result<(), Misfit> {
    if !node.ready() {
        return Err(Misfit::NotReady);
    }
    if node.spec.unschedulable == Some(true) {
        return Err(Misfit::Unschedulable);
    }
    let taints = node.spec.taints.as_deref().unwrap_or_default();
    if taints.iter().any(|t| {
        matches!(t.effect.as_str(), "NoSchedule" | "NoExecute") && !tolerates(spec.tolerations(), t)
    }) {
        return Err(Misfit::Taint);
    }
    if let Some(selector) = &spec.node_selector {
        let labels = node.labels();
        if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return Err(Misfit::Selector);
        }
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    if !terms.is_empty() && !terms.iter().any(|t| term_matches(t, node)) {
        return Err(Misfit::Selector);
    }
    Ok(())
}

/// The node to place a VMI of `spec` on, given what each node has left, or the reasons
/// none fits.
pub fn choose(spec: &VmiSpec, nodes: &[NodeView]) -> Result<String, String> {
    choose_except(spec, nodes, None)
}

/// As [`choose`], never choosing `except` (a migration's source node).
pub fn choose_except(
    spec: &VmiSpec,
    nodes: &[NodeView],
    except: Option<&str>,
) -> Result<String, String> {
    let verdicts = verdicts(spec, nodes);
    pick(requests(spec), nodes, &verdicts, except).map(|i| nodes[i].0.clone())
}

/// `eligible` of a VMI of `spec` on each node.
fn verdicts(spec: &VmiSpec, nodes: &[NodeView]) -> Vec<Result<(), Misfit>> {
    nodes
        .iter()
        .map(|(_, node, _)| eligible(spec, node))
        .collect()
}

/// What `eligible` reads of a VMI: VMIs alike (made from one template) are filtered
/// alike, so a pass filters the nodes once per kind rather than once per VMI.
fn filter_kind(spec: &VmiSpec) -> String {
    serde_json::to_string(&(&spec.node_selector, &spec.affinity, &spec.tolerations))
        .unwrap_or_default()
}

/// The index of the node for a VMI asking `want`, given each node's `verdicts` (from
/// `eligible`), or the reasons none fits.
fn pick(
    want: Resources,
    nodes: &[NodeView],
    verdicts: &[Result<(), Misfit>],
    except: Option<&str>,
) -> Result<usize, String> {
    let mut misfits: BTreeMap<Misfit, usize> = BTreeMap::new();
    let mut best: Option<(usize, i64)> = None;
    for (i, ((name, _, free), verdict)) in nodes.iter().zip(verdicts).enumerate() {
        if except == Some(name.as_str()) {
            *misfits.entry(Misfit::AntiAffinity).or_default() += 1;
            continue;
        }
        let capacity = if want.millicpu > free.millicpu {
            Err(Misfit::Cpu)
        } else if want.memory > free.memory {
            Err(Misfit::Memory)
        } else {
            Ok(())
        };
        match verdict.and(capacity) {
            Ok(()) if best.is_none_or(|(_, mem)| free.memory > mem) => {
                best = Some((i, free.memory))
            }
            Ok(()) => {}
            Err(m) => *misfits.entry(m).or_default() += 1,
        }
    }
    if let Some((i, _)) = best {
        return Ok(i);
    }
    // Sorted as whole strings, count included, as the Kubernetes scheduler sorts them.
    let mut reasons: Vec<String> = misfits
        .iter()
        .map(|(m, n)| format!("{n} {}", m.text()))
        .collect();
    reasons.sort();
    Err(format!(
        "0/{} nodes are available: {}.",
        nodes.len(),
        reasons.join(", ")
    ))
}

/// What a pass reads of a VMI. Kept between passes until the VMI's resourceVersion
/// changes: with 10,000 VMIs, reading them again from their JSON each pass cost
/// 11 µs apiece (112 ms a pass).
struct SeenVmi {
    resource_version: Option<String>,
    /// The pass that last saw it in the cache.
    pass: u64,
    phase: VmiPhase,
    node: Option<String>,
    /// Where it is migrating to, while a migration is in flight.
    migration_target: Option<String>,
    requests: Resources,
}

#[derive(Default)]
struct SeenVmis(HashMap<String, SeenVmi>);

impl SeenVmis {
    /// `vmi` as this pass sees it, read again only if it changed.
    fn see(&mut self, uid: &str, vmi: &VirtualMachineInstance, pass: u64) -> &SeenVmi {
        let version = vmi.metadata.resource_version.as_deref();
        let fresh = |old: Option<Resources>| SeenVmi {
            resource_version: version.map(str::to_string),
            pass,
            phase: vmi.phase(),
            node: vmi.node_name().map(str::to_string),
            migration_target: vmi
                .migration_in_flight()
                .and_then(|m| m.target_node.clone()),
            // A VMI's spec (and so what it asks for) does not change.
            requests: old.unwrap_or_else(|| requests(&vmi.spec)),
        };
        if !self.0.contains_key(uid) {
            return self.0.entry(uid.to_string()).or_insert(fresh(None));
        }
        let seen = self.0.get_mut(uid).expect("present: checked above");
        if seen.resource_version.as_deref() != version {
            *seen = fresh(Some(seen.requests));
        }
        seen.pass = pass;
        seen
    }

    fn get(&self, uid: &str, pass: u64) -> Option<&SeenVmi> {
        self.0.get(uid).filter(|seen| seen.pass == pass)
    }

    fn forget_unseen(&mut self, pass: u64) {
        self.0.retain(|_, seen| seen.pass == pass);
    }
}

struct Scheduler {
    client: Client,
    nodes: Store<Node>,
    vmis: Store<VirtualMachineInstance>,
    /// Placements written but not yet seen in the VMI cache, by VMI uid.
    assumed: HashMap<String, (String, Resources)>,
    /// What each pass reads of each VMI, by uid.
    seen: SeenVmis,
    pass_number: u64,
    /// Steps being carried out.
    in_flight: Arc<Semaphore>,
    /// Uids of VMIs whose binding failed, to be placed again.
    report: mpsc::UnboundedSender<String>,
    /// Retry delays of VMIs whose step failed, by uid.
    backoff: Arc<Backoff<String>>,
    failed: mpsc::UnboundedReceiver<String>,
    changed: Arc<Notify>,
}

pub async fn run(client: Client, shared: crate::informer::Shared) {
    let changed = Arc::new(Notify::new());
    let nodes = shared.nodes.subscribe(changed.clone());
    let vmis = shared.vmis.subscribe(changed.clone());
    let (report, failed) = mpsc::unbounded_channel();
    let mut scheduler = Scheduler {
        client,
        nodes,
        vmis,
        assumed: HashMap::new(),
        seen: SeenVmis::default(),
        pass_number: 0,
        in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
        report,
        failed,
        changed: changed.clone(),
        backoff: Arc::new(Backoff::default()),
    };
    let mut last_planned = Duration::ZERO;
    loop {
        let _ = tokio::time::timeout(Duration::from_secs(2), changed.notified()).await;
        // A pass looks at every VMI and node: the events of the next moment (heartbeats
        // of many nodes, a burst of creates) share one.
        let wait = last_planned.saturating_mul(WAIT_PER_PASS_TIME);
        tokio::time::sleep(wait.clamp(BATCH, MAX_WAIT)).await;
        last_planned = scheduler.pass().await;
    }
}

enum Step {
    Bind {
        vmi: Arc<VirtualMachineInstance>,
        node: String,
    },
    Unschedulable {
        vmi: Arc<VirtualMachineInstance>,
        message: String,
    },
    /// Deleted before it was ever placed: nothing runs it, so nothing else will let it go.
    ReleaseUnplaced { vmi: Arc<VirtualMachineInstance> },
}

impl Step {
    fn vmi(&self) -> &VirtualMachineInstance {
        match self {
            Step::Bind { vmi, .. }
            | Step::Unschedulable { vmi, .. }
            | Step::ReleaseUnplaced { vmi } => vmi,
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Step::Bind { .. } => "binding",
            Step::Unschedulable { .. } => "reporting unschedulable",
            Step::ReleaseUnplaced { .. } => "releasing",
        }
    }
}

impl Scheduler {
    /// Places what waits for a node; returns how long planning took.
    async fn pass(&mut self) -> Duration {
        let started = std::time::Instant::now();
        let vmis = self.vmis.state();
        while let Ok(uid) = self.failed.try_recv() {
            self.assumed.remove(&uid);
        }
        self.pass_number += 1;
        let pass = self.pass_number;
        let mut used: HashMap<String, Resources> = HashMap::new();
        fn take(node: &str, r: Resources, used: &mut HashMap<String, Resources>) {
            let u = match used.get_mut(node) {
                Some(u) => u,
                None => used.entry(node.to_string()).or_default(),
            };
            u.millicpu += r.millicpu;
            u.memory += r.memory;
        }
        let now = std::time::Instant::now();
        let mut pending: Vec<Arc<VirtualMachineInstance>> = Vec::new();
        for vmi in &vmis {
            let Some(uid) = vmi.metadata.uid.as_ref() else {
                continue;
            };
            let seen = self.seen.see(uid, vmi, pass);
            match &seen.node {
                // A VMI that ended holds nothing.
                Some(_) if seen.phase.is_final() => {}
                Some(node) => {
                    take(node, seen.requests, &mut used);
                    // A migrating VMI holds its place on the target too.
                    if let Some(target) = &seen.migration_target {
                        take(target, seen.requests, &mut used);
                    }
                }
                None => {
                    let waiting = self.assumed.contains_key(uid) || self.backoff.waiting(uid, now);
                    let placeable = vmi.metadata.deletion_timestamp.is_some()
                        || matches!(
                            seen.phase,
                            VmiPhase::Unset | VmiPhase::Pending | VmiPhase::Scheduling
                        );
                    if !waiting && placeable {
                        pending.push(vmi.clone());
                    }
                }
            }
        }
        // VMIs gone from the cache, or placed as the cache now shows, are forgotten.
        self.seen.forget_unseen(pass);
        let seen = &self.seen;
        self.assumed
            .retain(|uid, _| seen.get(uid, pass).is_some_and(|s| s.node.is_none()));
        self.backoff.retain(|uid| seen.get(uid, pass).is_some());
        for (node, r) in self.assumed.values() {
            take(node, *r, &mut used);
        }
        let mut nodes = free_nodes(&self.nodes.state(), &used);
        pending.sort_by_key(|v| v.metadata.creation_timestamp.clone().map(|t| t.0));
        let mut steps = Vec::new();
        let mut filtered: HashMap<String, Vec<Result<(), Misfit>>> = HashMap::new();
        for vmi in pending {
            if vmi.metadata.deletion_timestamp.is_some() {
                steps.push(Step::ReleaseUnplaced { vmi });
                continue;
            }
            let verdicts = filtered
                .entry(filter_kind(&vmi.spec))
                .or_insert_with(|| verdicts(&vmi.spec, &nodes));
            let want = requests(&vmi.spec);
            match pick(want, &nodes, verdicts, None) {
                Ok(i) => {
                    let (node, _, free) = &mut nodes[i];
                    free.millicpu -= want.millicpu;
                    free.memory -= want.memory;
                    let node = node.clone();
                    if let Some(uid) = &vmi.metadata.uid {
                        self.assumed.insert(uid.clone(), (node.clone(), want));
                    }
                    steps.push(Step::Bind { vmi, node });
                }
                Err(message) => steps.push(Step::Unschedulable { vmi, message }),
            }
        }
        let planned = started.elapsed();
        let count = steps.len();
        // Steps run on their own (at most IN_FLIGHT at a time) so that the next pass can
        // place what arrives meanwhile; `assumed` keeps it from placing a VMI twice. A
        // step that fails is retried after its VMI's backoff: a failed binding comes back
        // through `failed`, and a pass is triggered when the delay is over.
        for step in steps {
            let Ok(permit) = self.in_flight.clone().acquire_owned().await else {
                break;
            };
            let (client, report, changed, backoff) = (
                self.client.clone(),
                self.report.clone(),
                self.changed.clone(),
                self.backoff.clone(),
            );
            tokio::spawn(async move {
                let uid = step.vmi().uid().to_string();
                let key = object_key(Some(step.vmi().namespace()), step.vmi().name());
                let (what, bind) = (step.what(), matches!(step, Step::Bind { .. }));
                let result = execute(client, step).await;
                drop(permit);
                match result {
                    Ok(()) => backoff.succeeded(&uid),
                    Err(e) => {
                        let retry = backoff.failed(uid.clone());
                        tracing::warn!(
                            "scheduler: {what} {key} failed, retrying in {retry:?}: {e}"
                        );
                        if bind {
                            let _ = report.send(uid);
                        }
                        tokio::time::sleep(retry).await;
                        changed.notify_one();
                    }
                }
            });
        }
        tracing::debug!(
            "scheduler pass: {} VMIs, {count} steps, planned in {planned:?}, issued in {:?}",
            vmis.len(),
            started.elapsed()
        );
        planned
    }
}

/// The VMI's status as entering Scheduling leaves it: the phase and its transition time.
fn entering_scheduling(vmi: &VirtualMachineInstance) -> Value {
    let transitions = vmi.transitions_entering(VmiPhase::Scheduling, &meta::now());
    json!({"phase": VmiPhase::Scheduling, "phaseTransitionTimestamps": transitions})
}

/// Carries out one step.
async fn execute(client: Client, step: Step) -> Result<(), kube::Error> {
    let conditions = |vmi: &VirtualMachineInstance| -> Vec<Condition> {
        vmi.status.conditions.clone().unwrap_or_default()
    };
    let (vmi, patch) = match &step {
        Step::Bind { vmi, node } => {
            let mut status = entering_scheduling(vmi);
            let mut conditions = conditions(vmi);
            conditions.retain(|c| c.kind() != POD_SCHEDULED);
            status["nodeName"] = json!(node);
            status["conditions"] = json!(conditions);
            (
                vmi,
                json!({
                    "metadata": {"resourceVersion": vmi.metadata.resource_version, "labels": {NODE_NAME_LABEL: node}},
                    "status": status,
                }),
            )
        }
        Step::Unschedulable { vmi, message } => {
            let already = vmi
                .condition(POD_SCHEDULED)
                .is_some_and(|c| c.message() == message);
            if already && vmi.phase() == VmiPhase::Scheduling {
                return Ok(());
            }
            let mut conditions = conditions(vmi);
            kubevirt_api::model::object::set(
                &mut conditions,
                Condition::new(POD_SCHEDULED, "False", REASON_UNSCHEDULABLE, message),
                &meta::now(),
            );
            let mut status = if vmi.phase() != VmiPhase::Scheduling {
                entering_scheduling(vmi)
            } else {
                json!({})
            };
            status["conditions"] = json!(conditions);
            (
                vmi,
                json!({"metadata": {"resourceVersion": vmi.metadata.resource_version}, "status": status}),
            )
        }
        Step::ReleaseUnplaced { vmi } => {
            let all = vmi.metadata.finalizers.as_deref().unwrap_or_default();
            let finalizers: Vec<&String> = all
                .iter()
                .filter(|f| f.as_str() != kubevirt_api::defaults::VMI_FOREGROUND_FINALIZER)
                .collect();
            if finalizers.len() == all.len() && vmi.phase().is_final() {
                return Ok(());
            }
            (
                vmi,
                json!({"metadata": {"resourceVersion": vmi.metadata.resource_version, "finalizers": finalizers},
                         "status": {"phase": VmiPhase::Failed, "reason": "Deleted before it was scheduled"}}),
            )
        }
    };
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    crate::writes::patch(
        &client,
        &resources::virtual_machine_instance(),
        vmi.namespace(),
        vmi.name(),
        None,
        &params,
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// A node as the placement functions read it: its name, the node and what it has left.
pub type NodeView = (String, Arc<Node>, Resources);

/// Each node (sorted by name) as [`choose`] takes it, with what it has left once `used`
/// (by node name) is taken.
pub fn free_nodes(nodes: &[Arc<Node>], used: &HashMap<String, Resources>) -> Vec<NodeView> {
    let mut views: Vec<NodeView> = nodes
        .iter()
        .map(|node| {
            let total = allocatable(node);
            let u = used.get(node.name()).copied().unwrap_or_default();
            let free = Resources {
                millicpu: total.millicpu - u.millicpu,
                memory: total.memory - u.memory,
            };
            (node.name().to_string(), node.clone(), free)
        })
        .collect();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    views
}

#[cfg(test)]
mod tests;
