//! The migration controller's loop: caches of migrations, VMIs, nodes and the cluster's
//! configuration; each pass asks [`decide`] for every migration's next step and writes it
//! (with the hand-off's TLS credentials and MigrationPolicy), and collects old migrations.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use event_recorder::Recorder;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use kubevirt_api::backoff::{object_key, Backoff};
use kubevirt_api::meta;
use kubevirt_api::model::config::{self, KubeVirt};
use kubevirt_api::model::core::Node;
use kubevirt_api::model::{
    MigrationPhase, MigrationPolicy, VirtualMachineInstance, VirtualMachineInstanceMigration,
};
use kubevirt_api::names::finalizers::MIGRATION as FINALIZER;
use kubevirt_api::names::labels::{MIGRATION_TARGET_NODE, VMI_NAME};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::{
    decide, effective_configuration, policy, IssueCredentials, Step, View, FINISHED_KEPT, MANAGER,
};
use crate::informer::Informed;
use crate::scheduler::{free_nodes, requests, NodeView, Resources};

/// Which object a step wrote, at the version it was decided on.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Written {
    Migration(String),
    Vmi(String),
}

/// Which objects a step writes.
enum Writes {
    Migration,
    Vmi,
    Both,
}

impl Step {
    fn writes(&self) -> Writes {
        match self {
            Step::RequestAbort | Step::TargetDown { .. } => Writes::Vmi,
            // The VMI's new state and the migration's new phase arrive on two watches, in
            // either order: until both caches moved, a pass would judge one by the other.
            Step::HandOff { .. } => Writes::Both,
            _ => Writes::Migration,
        }
    }
}

/// What one pass has left to hand out: each node's free resources and the places
/// migrations hold under the limits.
struct Room {
    nodes: Vec<NodeView>,
    /// (uid, source node) of each migration that holds a place.
    active: Vec<(String, String)>,
    now: std::time::Instant,
}

struct Controller {
    client: Client,
    recorder: Recorder,
    migrations: Store<VirtualMachineInstanceMigration>,
    vmis: Store<VirtualMachineInstance>,
    nodes: Store<Node>,
    /// KubeVirt objects: the cluster's configuration.
    kubevirts: Store<KubeVirt>,
    policies: Store<MigrationPolicy>,
    namespaces: Store<Namespace>,
    backoff: Backoff<String>,
    /// When each migration first found no target, by uid.
    unschedulable_since: HashMap<String, std::time::Instant>,
    /// The resourceVersion of the object each migration's last step wrote, as the cache
    /// held it then: until the cache holds something newer, deciding again would repeat
    /// the step (a second hand-off, a conflict).
    acted_on: HashMap<String, Vec<Written>>,
    /// Migrations this controller moved to Scheduling, with their source node, until the
    /// cache shows it: they hold a place under the limits meanwhile.
    scheduled: HashMap<String, String>,
    credentials: Option<IssueCredentials>,
}

/// A cache of every object of kind `K`; `changed` is notified on each of its events.
pub(crate) fn reflect<K: Informed>(client: &Client, changed: Arc<Notify>) -> Store<K> {
    let writer = reflector::store::Writer::default();
    let reader = writer.as_reader();
    tokio::spawn(
        watcher(Api::<K>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .for_each(move |_| {
                changed.notify_one();
                futures::future::ready(())
            }),
    );
    reader
}

pub async fn run(
    client: Client,
    credentials: Option<IssueCredentials>,
    shared: crate::informer::Shared,
) {
    let changed = Arc::new(Notify::new());
    let mut controller = Controller {
        migrations: reflect(&client, changed.clone()),
        vmis: shared.vmis.subscribe(changed.clone()),
        nodes: shared.nodes.subscribe(changed.clone()),
        kubevirts: reflect(&client, changed.clone()),
        policies: reflect(&client, changed.clone()),
        namespaces: reflect(&client, changed.clone()),
        recorder: Recorder::start(client.clone(), "migration-controller", None),
        client,
        backoff: Backoff::default(),
        unschedulable_since: HashMap::new(),
        acted_on: HashMap::new(),
        scheduled: HashMap::new(),
        credentials,
    };
    loop {
        let _ = tokio::time::timeout(Duration::from_secs(2), changed.notified()).await;
        controller.pass().await;
    }
}

impl Controller {
    /// What each node has left: allocatable minus the VMIs on it and those migrating to it.
    fn free(&self, vmis: &[Arc<VirtualMachineInstance>]) -> Vec<NodeView> {
        let mut used: HashMap<String, Resources> = HashMap::new();
        for vmi in vmis.iter().filter(|v| !v.phase().is_final()) {
            let want = requests(&vmi.spec);
            let mut add = |node: &str| {
                let u = used.entry(node.to_string()).or_default();
                u.millicpu += want.millicpu;
                u.memory += want.memory;
            };
            if let Some(node) = vmi.node_name() {
                add(node);
            }
            if let Some(target) = vmi
                .migration_in_flight()
                .and_then(|m| m.target_node.as_deref())
            {
                add(target);
            }
        }
        free_nodes(&self.nodes.state(), &used)
    }

    async fn pass(&mut self) {
        let migrations = self.migrations.state();
        if migrations.is_empty() {
            // Passes run on every VMI and node event: with nothing to move, no walk over
            // every VMI and node (10,000 VMIs starting would make that quadratic).
            self.unschedulable_since.clear();
            self.acted_on.clear();
            self.scheduled.clear();
            self.backoff.retain(|_| false);
            return;
        }
        let vmis = self.vmis.state();
        let vmi_by_key: HashMap<(&str, &str), &Arc<VirtualMachineInstance>> = vmis
            .iter()
            .map(|v| ((v.namespace(), v.name()), v))
            .collect();
        let mut ordered: Vec<&Arc<VirtualMachineInstanceMigration>> = migrations.iter().collect();
        // Creation order, as KubeVirt keeps the newest; timestamps have whole seconds, so
        // the name breaks ties, the same way on every pass.
        ordered.sort_by_key(|m| {
            (
                m.metadata.creation_timestamp.clone().map(|t| t.0),
                m.name().to_string(),
            )
        });
        let kubevirt = self
            .kubevirts
            .state()
            .into_iter()
            .find(|kv| kv.namespace() == config::NAMESPACE && kv.name() == config::NAME);
        let configuration = effective_configuration(kubevirt.as_deref());
        let mut room = Room {
            nodes: self.free(&vmis),
            active: self.holding_places(&ordered),
            now: std::time::Instant::now(),
        };
        for migration in &ordered {
            let vmi = vmi_by_key
                .get(&(migration.namespace(), migration.vmi_name()))
                .copied();
            self.act_on(migration, vmi, &mut room, &configuration).await;
        }
        if let Err(e) = self.collect_finished(&ordered).await {
            tracing::warn!("migration controller: removing old migrations: {e}");
        }
    }

    /// The migrations that hold a place under the limits (uid, source node): KubeVirt
    /// counts those past Pending, and this controller those it just scheduled. Forgets
    /// what it kept of migrations that are gone.
    fn holding_places(
        &mut self,
        ordered: &[&Arc<VirtualMachineInstanceMigration>],
    ) -> Vec<(String, String)> {
        let mut active: Vec<(String, String)> = ordered
            .iter()
            .filter(|m| m.phase() > MigrationPhase::Pending && !m.phase().is_final())
            .map(|m| {
                let source = m
                    .status
                    .migration_state
                    .as_ref()
                    .and_then(|s| s.source_node.clone())
                    .unwrap_or_default();
                (m.uid().to_string(), source)
            })
            .collect();
        let known: std::collections::HashSet<String> =
            ordered.iter().map(|m| m.uid().to_string()).collect();
        self.unschedulable_since
            .retain(|uid, _| known.contains(uid));
        self.acted_on.retain(|uid, _| known.contains(uid));
        let still_pending: std::collections::HashSet<String> = ordered
            .iter()
            .filter(|m| m.phase() <= MigrationPhase::Pending)
            .map(|m| m.uid().to_string())
            .collect();
        self.scheduled.retain(|uid, _| still_pending.contains(uid));
        for (uid, source) in &self.scheduled {
            active.push((uid.clone(), source.clone()));
        }
        self.backoff.retain(|uid| known.contains(uid));
        active
    }

    /// Decides one migration's next step and takes it.
    async fn act_on(
        &mut self,
        migration: &VirtualMachineInstanceMigration,
        vmi: Option<&Arc<VirtualMachineInstance>>,
        room: &mut Room,
        configuration: &Value,
    ) {
        let uid = migration.uid().to_string();
        if self.backoff.waiting(&uid, room.now) {
            return;
        }
        let migration_version = Written::Migration(
            migration
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default(),
        );
        let vmi_version = Written::Vmi(
            vmi.and_then(|v| v.metadata.resource_version.clone())
                .unwrap_or_default(),
        );
        let stale = self.acted_on.get(&uid).is_some_and(|ws| {
            ws.iter()
                .any(|w| *w == migration_version || *w == vmi_version)
        });
        if stale {
            return;
        }
        let others: Vec<(String, String)> = room
            .active
            .iter()
            .filter(|(u, _)| *u != uid)
            .cloned()
            .collect();
        let view = View {
            vmi: vmi.map(|v| &**v),
            nodes: &room.nodes,
            active: &others,
            unschedulable_for: self.unschedulable_since.get(&uid).map(|t| t.elapsed()),
            configuration,
        };
        let step = decide(migration, &view);
        if step == Step::Wait {
            return;
        }
        self.reserve_target(&uid, &step, vmi.map(|v| &**v), room);
        let key = object_key(Some(migration.namespace()), migration.name());
        let writes = step.writes();
        let scheduling = match &step {
            Step::Enter {
                phase: MigrationPhase::Scheduling,
                status,
            } => status
                .pointer("/migrationState/sourceNode")
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        };
        match self
            .execute(migration, vmi.map(|v| &**v), step, configuration)
            .await
        {
            Ok(()) => {
                self.backoff.succeeded(&uid);
                if let Some(source) = scheduling {
                    self.scheduled.insert(uid.clone(), source);
                }
                let written = match writes {
                    Writes::Vmi => vec![vmi_version],
                    Writes::Migration => vec![migration_version],
                    Writes::Both => vec![vmi_version, migration_version],
                };
                self.acted_on.insert(uid, written);
            }
            Err(e) => {
                let retry = self.backoff.failed(uid);
                tracing::warn!("migration controller: {key} failed, retrying in {retry:?}: {e}");
            }
        }
    }

    /// What a chosen target takes is counted before the next migration chooses, and a
    /// migration entering Scheduling holds a place from now on.
    fn reserve_target(
        &mut self,
        uid: &str,
        step: &Step,
        vmi: Option<&VirtualMachineInstance>,
        room: &mut Room,
    ) {
        let (Step::Enter {
            phase: MigrationPhase::Scheduling,
            status,
        }
        | Step::Update { status }) = step
        else {
            return;
        };
        match status
            .pointer("/migrationState/targetNode")
            .and_then(Value::as_str)
        {
            Some(target) => {
                self.unschedulable_since.remove(uid);
                if let Some(vmi) = vmi {
                    let want = requests(&vmi.spec);
                    if let Some(entry) = room.nodes.iter_mut().find(|(n, _, _)| n == target) {
                        entry.2.millicpu -= want.millicpu;
                        entry.2.memory -= want.memory;
                    }
                }
            }
            None => {
                self.unschedulable_since
                    .entry(uid.to_string())
                    .or_insert(room.now);
            }
        }
        if !room.active.iter().any(|(u, _)| u == uid) {
            let source = status
                .pointer("/migrationState/sourceNode")
                .and_then(Value::as_str)
                .unwrap_or("");
            room.active.push((uid.to_string(), source.to_string()));
        }
    }

    fn migration_api(&self, namespace: &str) -> Api<VirtualMachineInstanceMigration> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn vmi_api(&self, namespace: &str) -> Api<VirtualMachineInstance> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn execute(
        &self,
        migration: &VirtualMachineInstanceMigration,
        vmi: Option<&VirtualMachineInstance>,
        step: Step,
        configuration: &Value,
    ) -> Result<(), kube::Error> {
        let namespace = migration.namespace();
        let name = migration.name();
        let version = &migration.metadata.resource_version;
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        let api = self.migration_api(namespace);
        let vmi_name = migration.vmi_name();
        let entering = |phase: MigrationPhase| {
            let transitions = migration.transitions_entering(phase, &meta::now());
            json!({"metadata": {"resourceVersion": version},
                   "status": {"phase": phase, "phaseTransitionTimestamps": transitions}})
        };
        match step {
            Step::Wait => Ok(()),
            Step::Enter { phase, status } => {
                let mut body = entering(phase);
                merge_into(&mut body["status"], status);
                api.patch_status(name, &params, &Patch::Merge(&body))
                    .await?;
                tracing::info!(
                    "migration {namespace}/{name} of {vmi_name}: {}",
                    phase.as_str()
                );
                let regarding = Recorder::reference(migration);
                match phase {
                    MigrationPhase::Succeeded => self.recorder.normal(
                        &regarding,
                        "SuccessfulMigration",
                        "Source node reported migration succeeded",
                    ),
                    MigrationPhase::Failed => {
                        let reason = body["status"]["migrationState"]["failureReason"]
                            .as_str()
                            .filter(|r| !r.is_empty());
                        self.recorder.warning(
                            &regarding,
                            "FailedMigration",
                            match reason {
                                Some(reason) => {
                                    format!("Source node reported migration failed: {reason}")
                                }
                                None => "Source node reported migration failed".to_string(),
                            },
                        );
                    }
                    _ => {}
                }
                Ok(())
            }
            Step::Update { status } => {
                let mut body = json!({"metadata": {"resourceVersion": version}, "status": {}});
                merge_into(&mut body["status"], status);
                api.patch_status(name, &params, &Patch::Merge(&body))
                    .await?;
                Ok(())
            }
            Step::HandOff { source, target } => {
                // `decide` hands off only a VMI it saw.
                let Some(vmi) = vmi else { return Ok(()) };
                let mut configuration = configuration.clone();
                let policy_name = self.apply_policy(vmi, namespace, &mut configuration);
                match &self.credentials {
                    _ if configuration["disableTLS"] == json!(true) => {}
                    Some(issue) => self.create_credentials(migration, &target, issue).await?,
                    None => {
                        tracing::warn!("migration {namespace}/{name}: no CA to sign its TLS credentials, so it runs without TLS");
                        configuration["disableTLS"] = json!(true);
                    }
                }
                // One write that replaces what an earlier migration left: its fields are
                // set to null beside the new ones (a merge would keep them), so no cache
                // ever holds a VMI whose state was cleared mid-hand-off.
                let mut state = serde_json::Map::new();
                if let Ok(Value::Object(old)) = serde_json::to_value(&vmi.status.migration_state) {
                    for key in old.keys() {
                        state.insert(key.clone(), Value::Null);
                    }
                }
                let fresh = json!({
                    "migrationUid": migration.uid(), "sourceNode": source, "targetNode": target,
                    "mode": "PreCopy", "migrationConfiguration": configuration,
                    "migrationPolicyName": policy_name});
                for (k, v) in fresh.as_object().into_iter().flatten() {
                    state.insert(k.clone(), v.clone());
                }
                let body = json!({
                    "metadata": {"resourceVersion": vmi.metadata.resource_version,
                                 "labels": {MIGRATION_TARGET_NODE: target}},
                    "status": {"migrationState": state}});
                self.vmi_api(namespace)
                    .patch(vmi_name, &params, &Patch::Merge(&body))
                    .await?;
                let status = entering(MigrationPhase::PreparingTarget);
                api.patch_status(name, &params, &Patch::Merge(&status))
                    .await?;
                tracing::info!("migration {namespace}/{name}: {vmi_name} handed over from {source} to {target}");
                Ok(())
            }
            Step::RequestAbort => {
                let body = json!({"status": {"migrationState": {"abortRequested": true}}});
                self.vmi_api(namespace)
                    .patch(vmi_name, &params, &Patch::Merge(&body))
                    .await?;
                tracing::info!("migration {namespace}/{name} deleted while running: aborting it");
                self.recorder.normal(
                    &Recorder::reference(migration),
                    "SuccessfulAbortMigration",
                    "Migration is ready to be canceled by virt-handler.",
                );
                Ok(())
            }
            Step::TargetDown { node } => {
                // Guarded: a target that took the VMI meanwhile keeps it.
                let version = vmi.and_then(|v| v.metadata.resource_version.as_deref());
                let body = json!({"metadata": {"resourceVersion": version},
                    "status": {"migrationState": {"failed": true, "completed": true,
                    "endTimestamp": meta::now(), "failureReason": format!("Target node {node} is down")}}});
                self.vmi_api(namespace)
                    .patch(vmi_name, &params, &Patch::Merge(&body))
                    .await?;
                Ok(())
            }
            Step::Finalize { state } => {
                if let Some(state) = state {
                    let body = json!({"status": {"migrationState": state}});
                    api.patch_status(name, &params, &Patch::Merge(&body))
                        .await?;
                    // The finalizer goes on the next pass, once the copy is in the cache.
                    return self
                        .drop_target_label(namespace, vmi_name, vmi, &params)
                        .await;
                }
                let finalizers: Vec<&String> = migration
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .filter(|f| f.as_str() != FINALIZER)
                    .collect();
                let body =
                    json!({"metadata": {"resourceVersion": version, "finalizers": finalizers}});
                api.patch(name, &params, &Patch::Merge(&body)).await?;
                Ok(())
            }
        }
    }

    /// Applies the MigrationPolicy that matches the VMI (if any) to `configuration`, and
    /// names it.
    fn apply_policy(
        &self,
        vmi: &VirtualMachineInstance,
        namespace: &str,
        configuration: &mut Value,
    ) -> Option<String> {
        let vmi_labels = vmi.metadata.labels.clone().unwrap_or_default();
        let namespace_labels: BTreeMap<String, String> = self
            .namespaces
            .state()
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(namespace))
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let policies = self.policies.state();
        let policy = policy::choose(&policies, &vmi_labels, &namespace_labels)?;
        policy::apply(configuration, policy);
        Some(policy.name().to_string())
    }

    /// The migration's Secret with its TLS credentials, owned by it (so it goes with it),
    /// for the addresses the target node publishes.
    async fn create_credentials(
        &self,
        migration: &VirtualMachineInstanceMigration,
        target: &str,
        issue: &IssueCredentials,
    ) -> Result<(), kube::Error> {
        use base64::Engine as _;
        let node = self.nodes.state().into_iter().find(|n| n.name() == target);
        let mut hosts: Vec<String> = node
            .iter()
            .flat_map(|n| n.status.addresses.iter().flatten())
            .map(|a| a.address.clone())
            .collect();
        hosts.push(target.to_string());
        hosts.sort();
        hosts.dedup();
        let files = issue(&hosts).map_err(|e| kube::Error::Service(e.into()))?;
        let data: serde_json::Map<String, Value> = files
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    json!(base64::engine::general_purpose::STANDARD.encode(v)),
                )
            })
            .collect();
        let namespace = migration.namespace();
        let uid = migration.uid();
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": kubevirt_api::names::migration_tls_secret(uid), "namespace": namespace,
                "ownerReferences": [{"apiVersion": VirtualMachineInstanceMigration::API_VERSION,
                    "kind": VirtualMachineInstanceMigration::KIND,
                    "name": migration.name(), "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
            "type": "Opaque",
            "data": data,
        });
        let secret: Secret = serde_json::from_value(secret).map_err(kube::Error::SerdeError)?;
        let api = Api::<Secret>::namespaced(self.client.clone(), namespace);
        match api.create(&Default::default(), &secret).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The target label goes with the migration that set it.
    async fn drop_target_label(
        &self,
        namespace: &str,
        vmi_name: &str,
        vmi: Option<&VirtualMachineInstance>,
        params: &PatchParams,
    ) -> Result<(), kube::Error> {
        let labelled = vmi
            .and_then(|v| v.metadata.labels.as_ref())
            .is_some_and(|l| l.contains_key(MIGRATION_TARGET_NODE));
        if labelled {
            let body = json!({"metadata": {"labels": {MIGRATION_TARGET_NODE: null}}});
            self.vmi_api(namespace)
                .patch(vmi_name, params, &Patch::Merge(&body))
                .await?;
        }
        Ok(())
    }

    /// Deletes all but the newest [`FINISHED_KEPT`] finished migrations of each VMI.
    async fn collect_finished(
        &self,
        migrations: &[&Arc<VirtualMachineInstanceMigration>],
    ) -> Result<(), kube::Error> {
        let mut finished: BTreeMap<(&str, &str), Vec<&VirtualMachineInstanceMigration>> =
            BTreeMap::new();
        for m in migrations {
            let done = m.phase().is_final()
                && !m
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == FINALIZER)
                && m.metadata.deletion_timestamp.is_none();
            if done {
                let vmi = m
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(VMI_NAME))
                    .map_or("", String::as_str);
                finished.entry((m.namespace(), vmi)).or_default().push(m);
            }
        }
        for ((namespace, _), list) in finished {
            // Oldest first (creation order), so the surplus is at the front.
            let surplus = list.len().saturating_sub(FINISHED_KEPT);
            for m in &list[..surplus] {
                match self
                    .migration_api(namespace)
                    .delete(m.name(), &DeleteParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

fn merge_into(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        for (k, v) in b {
            a.insert(k, v);
        }
    }
}
