//! Node drain, as KubeVirt's evacuation controller does it: a node with the drain taint
//! (`kubevirt.io/drain:NoSchedule`, or the key the KubeVirt configuration names in
//! `migrations.nodeDrainTaintKey`) is emptied. A VMI whose eviction strategy is
//! `LiveMigrate` (or `LiveMigrateIfPossible` and live-migratable) is moved by a
//! `kubevirt-evacuation-` migration; one with `External` is only marked; the others are
//! stopped gracefully (their VMI deleted), and their VM starts them again elsewhere as its
//! runStrategy says. Failed evacuations are retried with KubeVirt's backoff (20 s,
//! doubling).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::model::config::{self, KubeVirt};
use kubevirt_api::model::core::Node;
use kubevirt_api::model::{
    MigrationPhase, VirtualMachineInstance, VirtualMachineInstanceMigration, VmiPhase,
};
use kubevirt_api::names::conditions::LIVE_MIGRATABLE;
use kubevirt_api::names::labels::{EVACUATION_MIGRATION, VMI_NAME};
use serde_json::json;
use tokio::sync::Notify;

use crate::migration::{effective_configuration, reflect};

const MANAGER: &str = "virt-controller";
pub const DEFAULT_DRAIN_TAINT: &str = "kubevirt.io/drain";
/// KubeVirt's first retry after a failed evacuation, doubled per failure in a row.
const FIRST_RETRY: Duration = Duration::from_secs(20);

/// What happens to one VMI on a draining node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evacuation {
    /// Create an evacuation migration.
    Migrate,
    /// Only mark it (`External`: someone else moves it).
    Mark,
    /// Stop it here; its VM starts it again elsewhere.
    Stop,
    /// It must migrate but cannot (`LiveMigrate` on a VMI that is not migratable): it
    /// stays, as KubeVirt blocks the drain.
    Blocked,
}

/// The eviction strategy in force for `vmi` and what it means on a draining node.
pub fn evacuation(vmi: &VirtualMachineInstance, cluster_default: Option<&str>) -> Evacuation {
    let strategy = vmi
        .spec
        .eviction_strategy
        .as_deref()
        .or(cluster_default)
        .unwrap_or("None");
    let migratable = vmi
        .condition(LIVE_MIGRATABLE)
        .is_some_and(|c| c.is(LIVE_MIGRATABLE, "True"));
    match (strategy, migratable) {
        ("LiveMigrate", true) | ("LiveMigrateIfPossible", true) => Evacuation::Migrate,
        ("LiveMigrate", false) => Evacuation::Blocked,
        ("External", _) => Evacuation::Mark,
        _ => Evacuation::Stop,
    }
}

/// Whether `node` carries the drain taint `key` with effect NoSchedule.
pub fn draining(node: &Node, key: &str) -> bool {
    node.spec
        .taints
        .iter()
        .flatten()
        .any(|t| t.key == key && t.effect == "NoSchedule")
}

struct Controller {
    recorder: event_recorder::Recorder,
    client: Client,
    nodes: Store<Node>,
    vmis: Store<VirtualMachineInstance>,
    migrations: Store<VirtualMachineInstanceMigration>,
    kubevirts: Store<KubeVirt>,
    /// Failed evacuations in a row, and when the last failed, by VMI uid.
    failures: HashMap<String, (u32, Instant)>,
    /// VMIs reported as blocked, so that it is logged once.
    blocked: HashSet<String>,
    /// Failed evacuation migrations already counted, by uid.
    counted: HashSet<String>,
    /// When an evacuation migration was created for a VMI (by uid): until the cache shows
    /// it, the VMI is not asked for again.
    requested: HashMap<String, Instant>,
}

/// How long a created evacuation migration may take to show in the cache.
const CACHE_LAG: Duration = Duration::from_secs(30);
/// How long a pass waits after the event that woke it, so that the events that follow
/// (a burst of VMI writes, heartbeats of many nodes) share it.
const BATCH: Duration = Duration::from_millis(50);

pub async fn run(client: Client, shared: crate::informer::Shared) {
    let changed = Arc::new(Notify::new());
    let mut controller = Controller {
        nodes: shared.nodes.subscribe(changed.clone()),
        vmis: shared.vmis.subscribe(changed.clone()),
        migrations: reflect(&client, changed.clone()),
        kubevirts: reflect(&client, changed.clone()),
        recorder: event_recorder::Recorder::start(
            client.clone(),
            "disruptionbudget-controller",
            None,
        ),
        client,
        failures: HashMap::new(),
        blocked: HashSet::new(),
        counted: HashSet::new(),
        requested: HashMap::new(),
    };
    loop {
        let _ = tokio::time::timeout(Duration::from_secs(5), changed.notified()).await;
        tokio::time::sleep(BATCH).await;
        if let Err(e) = controller.pass().await {
            tracing::warn!("evacuation: {e}");
        }
    }
}

impl Controller {
    async fn pass(&mut self) -> Result<(), kube::Error> {
        let kubevirt = self
            .kubevirts
            .state()
            .into_iter()
            .find(|kv| kv.namespace() == config::NAMESPACE && kv.name() == config::NAME);
        let config = effective_configuration(kubevirt.as_deref());
        let key = config["nodeDrainTaintKey"]
            .as_str()
            .unwrap_or(DEFAULT_DRAIN_TAINT)
            .to_string();
        let default_strategy = kubevirt
            .as_ref()
            .and_then(|kv| kv.spec.configuration.as_ref())
            .and_then(|c| c.eviction_strategy.clone());
        let migration_uids: HashSet<String> = self
            .migrations
            .state()
            .iter()
            .map(|m| m.uid().to_string())
            .collect();
        self.counted.retain(|uid| migration_uids.contains(uid));
        let draining_nodes: HashSet<String> = self
            .nodes
            .state()
            .iter()
            .filter(|n| draining(n, &key))
            .map(|n| n.name().to_string())
            .collect();
        // Passes run on every VMI and node event: without a drain they must not cost a
        // walk over every VMI (10,000 VMIs starting would make that quadratic).
        if draining_nodes.is_empty() {
            self.failures.clear();
            self.requested.clear();
            self.blocked.clear();
            return Ok(());
        }
        // What is remembered per VMI goes with the VMI.
        let known: HashSet<String> = self
            .vmis
            .state()
            .iter()
            .map(|v| v.uid().to_string())
            .collect();
        self.failures.retain(|uid, _| known.contains(uid));
        self.requested.retain(|uid, _| known.contains(uid));
        self.blocked.retain(|uid| known.contains(uid));
        let migrations = self.migrations.state();
        let moving: HashSet<(String, String)> = migrations
            .iter()
            .filter(|m| !m.phase().is_final())
            .filter_map(|m| {
                let vmi = m.labels().get(VMI_NAME)?.clone();
                Some((m.namespace().to_string(), vmi))
            })
            .collect();
        for vmi in self.vmis.state() {
            let Some(node) = vmi.node_name() else {
                continue;
            };
            if !draining_nodes.contains(node)
                || vmi.metadata.deletion_timestamp.is_some()
                || vmi.phase() != VmiPhase::Running
            {
                continue;
            }
            let namespace = vmi.namespace().to_string();
            let in_flight = vmi.migration_in_flight().is_some()
                || moving.contains(&(namespace.clone(), vmi.name().to_string()));
            let uid = vmi.uid().to_string();
            if in_flight {
                self.requested.remove(&uid);
                continue;
            }
            if self
                .requested
                .get(&uid)
                .is_some_and(|at| at.elapsed() < CACHE_LAG)
            {
                continue;
            }
            if let Some((count, at)) = self.failures.get(&uid) {
                if at.elapsed() < FIRST_RETRY * 2u32.saturating_pow(count.saturating_sub(1)) {
                    continue;
                }
            }
            let node = node.to_string();
            let result = match evacuation(&vmi, default_strategy.as_deref()) {
                Evacuation::Migrate => {
                    let result = self.migrate(&vmi, &node).await;
                    if result.is_ok() {
                        self.requested.insert(uid.clone(), Instant::now());
                    }
                    result
                }
                Evacuation::Mark => self.mark(&vmi, &node).await,
                Evacuation::Stop => self.stop(&vmi, &node).await,
                Evacuation::Blocked => {
                    if self.blocked.insert(uid.clone()) {
                        tracing::warn!(
                            "evacuation: VMI {namespace}/{} is configured with an eviction strategy but is not live-migratable; it stays on {node}",
                            vmi.name()
                        );
                    }
                    Ok(())
                }
            };
            if let Err(e) = result {
                let entry = self.failures.entry(uid).or_insert((0, Instant::now()));
                *entry = (entry.0 + 1, Instant::now());
                tracing::warn!(
                    "evacuation of {namespace}/{} from {node} failed: {e}",
                    vmi.name()
                );
            }
        }
        // A failed evacuation migration counts as a failure of its VMI.
        for m in migrations.iter().filter(|m| {
            m.annotations().contains_key(EVACUATION_MIGRATION)
                && m.phase() == MigrationPhase::Failed
        }) {
            let Some(vmi) = m.labels().get(VMI_NAME) else {
                continue;
            };
            let vmi = self
                .vmis
                .state()
                .into_iter()
                .find(|v| v.namespace() == m.namespace() && v.name() == vmi);
            if let Some(vmi) = vmi {
                if self.counted.insert(m.uid().to_string()) {
                    let entry = self
                        .failures
                        .entry(vmi.uid().to_string())
                        .or_insert((0, Instant::now()));
                    *entry = (entry.0 + 1, Instant::now());
                }
            }
        }
        Ok(())
    }

    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        }
    }

    async fn mark(&self, vmi: &VirtualMachineInstance, node: &str) -> Result<(), kube::Error> {
        if vmi.status.evacuation_node_name.as_deref() == Some(node) {
            return Ok(());
        }
        let api = Api::<VirtualMachineInstance>::namespaced(self.client.clone(), vmi.namespace());
        let body = json!({"status": {"evacuationNodeName": node}});
        api.patch(vmi.name(), &Self::params(), &Patch::Merge(&body))
            .await?;
        Ok(())
    }

    async fn migrate(&self, vmi: &VirtualMachineInstance, node: &str) -> Result<(), kube::Error> {
        self.mark(vmi, node).await?;
        let namespace = vmi.namespace();
        let api =
            Api::<VirtualMachineInstanceMigration>::namespaced(self.client.clone(), namespace);
        let migration = json!({
            "metadata": {"generateName": "kubevirt-evacuation-", "namespace": namespace,
                         "annotations": {EVACUATION_MIGRATION: node}},
            "spec": {"vmiName": vmi.name()},
        });
        let migration: VirtualMachineInstanceMigration =
            serde_json::from_value(migration).map_err(kube::Error::SerdeError)?;
        let created = match api.create(&PostParams::default(), &migration).await {
            Ok(created) => created,
            // Another migration of it is in flight (admission's answer): nothing to do.
            Err(kube::Error::Api(s))
                if s.code == 400 && s.message.contains("in-flight migration detected") =>
            {
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        tracing::info!(
            "evacuation: moving {namespace}/{} off {node} ({})",
            vmi.name(),
            created.name()
        );
        self.recorder.normal(
            &event_recorder::Recorder::reference(vmi),
            "SuccessfulEvict",
            format!(
                "Created migration {} to evict the VirtualMachineInstance from node {node}",
                created.name()
            ),
        );
        Ok(())
    }

    async fn stop(&self, vmi: &VirtualMachineInstance, node: &str) -> Result<(), kube::Error> {
        let namespace = vmi.namespace();
        let api = Api::<VirtualMachineInstance>::namespaced(self.client.clone(), namespace);
        tracing::info!(
            "evacuation: stopping {namespace}/{} on {node} (its eviction strategy does not live-migrate)",
            vmi.name()
        );
        match api.delete(vmi.name(), &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::Value;

    fn vmi(strategy: Option<&str>, migratable: bool) -> VirtualMachineInstance {
        let status = if migratable { "True" } else { "False" };
        let mut vmi = json!({"spec": {}, "status": {"conditions": [{"type": "LiveMigratable", "status": status}]}});
        if let Some(s) = strategy {
            vmi["spec"]["evictionStrategy"] = json!(s);
        }
        serde_json::from_value(vmi).unwrap()
    }

    #[test]
    fn the_eviction_strategy_decides() {
        assert_eq!(
            evacuation(&vmi(Some("LiveMigrate"), true), None),
            Evacuation::Migrate
        );
        assert_eq!(
            evacuation(&vmi(Some("LiveMigrate"), false), None),
            Evacuation::Blocked
        );
        assert_eq!(
            evacuation(&vmi(Some("LiveMigrateIfPossible"), true), None),
            Evacuation::Migrate
        );
        assert_eq!(
            evacuation(&vmi(Some("LiveMigrateIfPossible"), false), None),
            Evacuation::Stop
        );
        assert_eq!(
            evacuation(&vmi(Some("External"), true), None),
            Evacuation::Mark
        );
        assert_eq!(evacuation(&vmi(None, true), None), Evacuation::Stop);
        // The cluster's default applies to VMIs that set none.
        assert_eq!(
            evacuation(&vmi(None, true), Some("LiveMigrate")),
            Evacuation::Migrate
        );
        assert_eq!(
            evacuation(&vmi(Some("None"), true), Some("LiveMigrate")),
            Evacuation::Stop
        );
    }

    #[test]
    fn only_the_drain_taint_with_no_schedule_drains() {
        let node = |taints: Value| -> Node {
            serde_json::from_value(json!({"spec": {"taints": taints}})).unwrap()
        };
        assert!(draining(
            &node(json!([{"key": "kubevirt.io/drain", "effect": "NoSchedule"}])),
            DEFAULT_DRAIN_TAINT
        ));
        assert!(!draining(
            &node(json!([{"key": "kubevirt.io/drain", "effect": "PreferNoSchedule"}])),
            DEFAULT_DRAIN_TAINT
        ));
        assert!(!draining(
            &serde_json::from_value(json!({"spec": {"unschedulable": true}})).unwrap(),
            DEFAULT_DRAIN_TAINT
        ));
    }
}
