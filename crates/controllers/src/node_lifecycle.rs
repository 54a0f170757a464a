//! Node lifecycle: a node whose agent stops heart-beating becomes NotReady, and the VMIs
//! it ran fail with reason NodeUnresponsive, so nothing waits forever on a vanished host.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::NodeCondition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use kubevirt_api::backoff::{object_key, Backoff};
use kubevirt_api::meta;
use kubevirt_api::model::core::Node;
use kubevirt_api::model::object::set;
use kubevirt_api::model::{Condition, VirtualMachineInstance, VmiPhase};

const MANAGER: &str = "virt-node-lifecycle";

fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
}

/// What the node reported as its last heartbeat (second resolution, the agent's clock).
fn last_heartbeat(node: &Node) -> Option<String> {
    ready_condition(node)?
        .last_heartbeat_time
        .as_ref()
        .map(|t| t.0.to_string())
}

/// When this controller last saw each node's heartbeat change, on its own clock — as
/// the Kubernetes node lifecycle controller does (its probe timestamps): immune to the
/// agents' clock skew and to the one-second resolution of the reported time.
#[derive(Default)]
struct Seen(HashMap<String, (Option<String>, Instant)>);

impl Seen {
    /// Records the node's heartbeat and says whether it has been silent for `grace`.
    fn stale(
        &mut self,
        node: &str,
        heartbeat: Option<String>,
        now: Instant,
        grace: Duration,
    ) -> bool {
        let entry = self
            .0
            .entry(node.to_string())
            .or_insert((heartbeat.clone(), now));
        if entry.0 != heartbeat {
            *entry = (heartbeat, now);
        }
        now.duration_since(entry.1) > grace
    }
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    }
}

/// What the controller keeps between passes.
#[derive(Default)]
struct State {
    seen: Seen,
    /// Retry delays of node status writes that failed, by node name.
    node_writes: Backoff<String>,
    /// Retry delays of VMI writes that failed, by `namespace/name`.
    vmi_writes: Backoff<String>,
}

pub async fn run(client: Client, grace: Duration) {
    let period = (grace / 4).clamp(Duration::from_millis(200), Duration::from_secs(5));
    let mut state = State::default();
    let recorder = event_recorder::Recorder::start(client.clone(), "node-controller", None);
    loop {
        tokio::time::sleep(period).await;
        // The pass itself is not backed off: each one is a new look at the heartbeats,
        // and a lost node is to be noticed as soon as the API answers again.
        if let Err(e) = pass(&client, grace, &mut state, &recorder).await {
            tracing::warn!("node lifecycle: pass failed: {e}");
        }
    }
}

/// One look at every node: a node silent for `grace` is marked NotReady and its VMIs
/// failed. A failed write of one object is logged and retried with that object's
/// backoff on a later pass, without holding up the others.
async fn pass(
    client: &Client,
    grace: Duration,
    state: &mut State,
    recorder: &event_recorder::Recorder,
) -> Result<(), crate::Error> {
    let nodes = Api::<Node>::all(client.clone());
    let now = Instant::now();
    let mut lost = Vec::new();
    let listed = nodes.list(&ListParams::default()).await?.items;
    state
        .seen
        .0
        .retain(|name, _| listed.iter().any(|n| n.name() == name));
    state
        .node_writes
        .retain(|name| listed.iter().any(|n| n.name() == name));
    for node in listed {
        let name = &node.name().to_string();
        let stale = state.seen.stale(name, last_heartbeat(&node), now, grace);
        if !stale {
            continue;
        }
        lost.push(name.clone());
        let unknown = ready_condition(&node).is_some_and(|c| c.status == "Unknown");
        if !unknown && !state.node_writes.waiting(name, now) {
            let mut conditions: Vec<Value> = node
                .status
                .conditions
                .iter()
                .flatten()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect();
            let last_heartbeat = ready_condition(&node).and_then(|c| c.last_heartbeat_time.clone());
            meta::set_condition(
                &mut conditions,
                json!({"type": "Ready", "status": "Unknown",
                "reason": "NodeStatusUnknown", "message": "Node agent stopped posting node status.",
                "lastHeartbeatTime": last_heartbeat,
                "lastTransitionTime": meta::now()}),
            );
            let patch = json!({"status": {"conditions": conditions}});
            match nodes
                .patch_status(name, &params(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => state.node_writes.succeeded(name),
                Err(e) => {
                    let retry = state.node_writes.failed(name.clone());
                    tracing::warn!(
                        "node lifecycle: marking node {name} NotReady failed, retrying in {retry:?}: {e}"
                    );
                }
            }
        }
    }
    if lost.is_empty() {
        state.vmi_writes.retain(|_| false);
        return Ok(());
    }
    let vmis = Api::<VirtualMachineInstance>::all(client.clone());
    let orphaned: Vec<VirtualMachineInstance> = vmis
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|v| v.node_name().is_some_and(|n| lost.iter().any(|l| l == n)))
        .collect();
    let key = |vmi: &VirtualMachineInstance| object_key(Some(vmi.namespace()), vmi.name());
    let keys: Vec<String> = orphaned.iter().map(key).collect();
    state.vmi_writes.retain(|k| keys.contains(k));
    let writes = &state.vmi_writes;
    futures::stream::iter(orphaned)
        .filter(|vmi| futures::future::ready(!writes.waiting(&key(vmi), now)))
        .for_each_concurrent(8, |vmi| {
            let client = client.clone();
            async move {
                match fail_vmi(client, &vmi, recorder).await {
                    Ok(()) => writes.succeeded(&key(&vmi)),
                    Err(e) => {
                        let retry = writes.failed(key(&vmi));
                        tracing::warn!(
                            "node lifecycle: failing VMI {} failed, retrying in {retry:?}: {e}",
                            key(&vmi)
                        );
                    }
                }
            }
        })
        .await;
    Ok(())
}

/// Marks a VMI of a lost node Failed or, once it is, lets it go if it is being deleted.
async fn fail_vmi(
    client: Client,
    vmi: &VirtualMachineInstance,
    recorder: &event_recorder::Recorder,
) -> Result<(), crate::Error> {
    let api = Api::<VirtualMachineInstance>::namespaced(client, vmi.namespace());
    let mut patch = json!({"metadata": {"resourceVersion": vmi.metadata.resource_version}});
    let failing = !vmi.phase().is_final();
    if failing {
        let now = meta::now();
        let transitions = vmi.transitions_entering(VmiPhase::Failed, &now);
        let mut conditions = vmi.status.conditions.clone().unwrap_or_default();
        set(
            &mut conditions,
            Condition::new(
                "Ready",
                "False",
                "NodeUnresponsive",
                "the node running this VMI stopped responding",
            ),
            &now,
        );
        patch["status"] = json!({"phase": VmiPhase::Failed, "reason": "NodeUnresponsive",
                                 "phaseTransitionTimestamps": transitions, "conditions": conditions});
        // The failure is recorded first; a VMI being deleted is let go on the next pass,
        // so its end is visible rather than lost with it.
    } else if vmi.metadata.deletion_timestamp.is_some() {
        let finalizers: Vec<&String> = vmi
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| f.as_str() != kubevirt_api::defaults::VMI_FOREGROUND_FINALIZER)
            .collect();
        patch["metadata"]["finalizers"] = json!(finalizers);
    } else {
        return Ok(());
    }
    api.patch(vmi.name(), &params(), &Patch::Merge(&patch))
        .await?;
    if failing {
        recorder.warning(
            &event_recorder::Recorder::reference(vmi),
            "NodeUnresponsive",
            format!(
                "virt-handler on node {} is not responsive, marking VMI as failed",
                vmi.node_name().unwrap_or("")
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staleness_is_measured_from_when_a_heartbeat_was_seen() {
        let grace = Duration::from_secs(40);
        let t0 = Instant::now();
        let mut seen = Seen::default();
        let beat = |s: &str| Some(s.to_string());
        // A reported time far in the past (skewed clock) is not stale on first sight.
        assert!(!seen.stale("n", beat("2001-01-01T00:00:00Z"), t0, grace));
        assert!(!seen.stale("n", beat("2001-01-01T00:00:00Z"), t0 + grace, grace));
        assert!(seen.stale(
            "n",
            beat("2001-01-01T00:00:00Z"),
            t0 + grace + Duration::from_millis(1),
            grace
        ));
        // A new heartbeat restarts the clock.
        let t1 = t0 + Duration::from_secs(50);
        assert!(!seen.stale("n", beat("2001-01-01T00:00:10Z"), t1, grace));
        assert!(!seen.stale(
            "n",
            beat("2001-01-01T00:00:10Z"),
            t1 + Duration::from_secs(39),
            grace
        ));
        assert!(seen.stale(
            "n",
            beat("2001-01-01T00:00:10Z"),
            t1 + Duration::from_secs(41),
            grace
        ));
        // A node that never reported is stale once the grace period has passed.
        assert!(!seen.stale("m", None, t1, grace));
        assert!(seen.stale("m", None, t1 + Duration::from_secs(41), grace));
    }
}
