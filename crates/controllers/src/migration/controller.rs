//! The migration controller's loop: caches of migrations, VMIs, nodes and the cluster's
//! configuration; each pass asks [`decide`] for every migration's next step and writes it
//! (with the hand-off's TLS credentials and MigrationPolicy), and collects old migrations.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use kubevirt_api::backoff::{object_key, Backoff};
use kubevirt_api::meta;
use kubevirt_api::model::{MigrationPhase, MigrationState, VmiPhase};
use kubevirt_api::names::finalizers::MIGRATION as FINALIZER;
use kubevirt_api::names::labels::{MIGRATION_TARGET_NODE, VMI_NAME};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::{
    decide, effective_configuration, kubevirt_resource, migration_resource, policy, str_at,
    IssueCredentials, Step, View, FINISHED_KEPT, KUBEVIRT_NAME, KUBEVIRT_NAMESPACE, MANAGER,
};
use crate::resources;
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

struct Controller {
    client: Client,
    migrations: Store<DynamicObject>,
    vmis: Store<DynamicObject>,
    nodes: Store<DynamicObject>,
    /// KubeVirt objects: the cluster's configuration.
    kubevirts: Store<DynamicObject>,
    policies: Store<DynamicObject>,
    namespaces: Store<DynamicObject>,
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

pub(crate) fn reflect(
    client: &Client,
    resource: ApiResource,
    changed: Arc<Notify>,
) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::new(resource.clone());
    let reader = writer.as_reader();
    tokio::spawn(
        kubevirt_api::lean::watch(client, &resource, watcher::Config::default())
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
        migrations: reflect(&client, migration_resource(), changed.clone()),
        vmis: shared.vmis.subscribe(changed.clone()),
        nodes: shared.nodes.subscribe(changed.clone()),
        kubevirts: reflect(&client, kubevirt_resource(), changed.clone()),
        policies: reflect(&client, policy_resource(), changed.clone()),
        namespaces: reflect(&client, namespace_resource(), changed.clone()),
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

fn value_of(obj: &DynamicObject) -> Value {
    let mut value = obj.data.clone();
    value["metadata"] = serde_json::to_value(&obj.metadata).unwrap_or(Value::Null);
    value
}

impl Controller {
    /// What each node has left: allocatable minus the VMIs on it and those migrating to it.
    fn free(&self, vmis: &[Arc<DynamicObject>]) -> Vec<NodeView> {
        let mut used: HashMap<String, Resources> = HashMap::new();
        for vmi in vmis.iter().filter(|v| !VmiPhase::of(&v.data).is_final()) {
            let want = requests(&vmi.data);
            let mut add = |node: &str| {
                let u = used.entry(node.to_string()).or_default();
                u.millicpu += want.millicpu;
                u.memory += want.memory;
            };
            if let Some(node) = resources::str_at(vmi, "/status/nodeName") {
                add(node);
            }
            if let Some(target) = MigrationState::of(&vmi.data)
                .filter(|m| m.in_flight())
                .and_then(|m| m.target_node)
            {
                add(&target);
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
        let mut nodes = self.free(&vmis);
        let vmi_by_key: HashMap<(String, String), &Arc<DynamicObject>> = vmis
            .iter()
            .map(|v| ((v.namespace().unwrap_or_default(), v.name_any()), v))
            .collect();
        let mut ordered: Vec<&Arc<DynamicObject>> = migrations.iter().collect();
        // Creation order, as KubeVirt keeps the newest; timestamps have whole seconds, so
        // the name breaks ties, the same way on every pass.
        ordered.sort_by_key(|m| {
            (
                m.metadata.creation_timestamp.clone().map(|t| t.0),
                m.name_any(),
            )
        });
        // Migrations that hold a place (KubeVirt counts those past Pending).
        let mut active: Vec<(String, String)> = ordered
            .iter()
            .filter(|m| {
                let p = MigrationPhase::of(&m.data);
                p > MigrationPhase::Pending && !p.is_final()
            })
            .map(|m| {
                let source = resources::str_at(m, "/status/migrationState/sourceNode")
                    .unwrap_or("")
                    .to_string();
                (m.uid().unwrap_or_default(), source)
            })
            .collect();
        let known: std::collections::HashSet<String> =
            ordered.iter().filter_map(|m| m.uid()).collect();
        self.unschedulable_since
            .retain(|uid, _| known.contains(uid));
        self.acted_on.retain(|uid, _| known.contains(uid));
        let still_pending: std::collections::HashSet<String> = ordered
            .iter()
            .filter(|m| MigrationPhase::of(&m.data) <= MigrationPhase::Pending)
            .filter_map(|m| m.uid())
            .collect();
        self.scheduled.retain(|uid, _| still_pending.contains(uid));
        for (uid, source) in &self.scheduled {
            active.push((uid.clone(), source.clone()));
        }
        self.backoff.retain(|uid| known.contains(uid));
        let now = std::time::Instant::now();
        let kubevirt = self.kubevirts.state().into_iter().find(|kv| {
            kv.namespace().as_deref() == Some(KUBEVIRT_NAMESPACE) && kv.name_any() == KUBEVIRT_NAME
        });
        let configuration = effective_configuration(kubevirt.map(|kv| kv.data.clone()).as_ref());
        for migration in &ordered {
            let uid = migration.uid().unwrap_or_default();
            if self.backoff.waiting(&uid, now) {
                continue;
            }
            let vmim = value_of(migration);
            let namespace = migration.namespace().unwrap_or_default();
            let vmi_name = resources::str_at(migration, "/spec/vmiName")
                .unwrap_or("")
                .to_string();
            let vmi_object = vmi_by_key.get(&(namespace.clone(), vmi_name));
            let migration_version =
                Written::Migration(migration.resource_version().unwrap_or_default());
            let vmi_version = Written::Vmi(
                vmi_object
                    .and_then(|v| v.resource_version())
                    .unwrap_or_default(),
            );
            let stale = self.acted_on.get(&uid).is_some_and(|ws| {
                ws.iter()
                    .any(|w| *w == migration_version || *w == vmi_version)
            });
            if stale {
                continue;
            }
            let vmi = vmi_object.map(|v| value_of(v));
            let others: Vec<(String, String)> =
                active.iter().filter(|(u, _)| *u != uid).cloned().collect();
            let view = View {
                vmi: vmi.as_ref(),
                nodes: &nodes,
                active: &others,
                unschedulable_for: self.unschedulable_since.get(&uid).map(|t| t.elapsed()),
                configuration: &configuration,
            };
            let step = decide(&vmim, &view);
            if step == Step::Wait {
                continue;
            }
            // What a chosen target takes is counted before the next migration chooses.
            if let Step::Enter {
                phase: MigrationPhase::Scheduling,
                status,
            }
            | Step::Update { status } = &step
            {
                match status
                    .pointer("/migrationState/targetNode")
                    .and_then(Value::as_str)
                {
                    Some(target) => {
                        self.unschedulable_since.remove(&uid);
                        if let Some(vmi) = &vmi {
                            let want = requests(vmi);
                            if let Some(entry) = nodes.iter_mut().find(|(n, _, _)| n == target) {
                                entry.2.millicpu -= want.millicpu;
                                entry.2.memory -= want.memory;
                            }
                        }
                    }
                    None => {
                        self.unschedulable_since.entry(uid.clone()).or_insert(now);
                    }
                }
                if !active.iter().any(|(u, _)| *u == uid) {
                    let source = status
                        .pointer("/migrationState/sourceNode")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    active.push((uid.clone(), source.to_string()));
                }
            }
            let key = object_key(Some(&namespace), &migration.name_any());
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
                .execute(migration, &vmim, vmi.as_ref(), step, &configuration)
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
                    tracing::warn!(
                        "migration controller: {key} failed, retrying in {retry:?}: {e}"
                    );
                }
            }
        }
        if let Err(e) = self.collect_finished(&ordered).await {
            tracing::warn!("migration controller: removing old migrations: {e}");
        }
    }

    fn migration_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &migration_resource())
    }

    fn vmi_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &resources::virtual_machine_instance(),
        )
    }

    async fn execute(
        &self,
        migration: &DynamicObject,
        vmim: &Value,
        vmi: Option<&Value>,
        step: Step,
        configuration: &Value,
    ) -> Result<(), kube::Error> {
        let namespace = migration.namespace().unwrap_or_default();
        let name = migration.name_any();
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        let api = self.migration_api(&namespace);
        let vmi_name = str_at(vmim, "/spec/vmiName").unwrap_or("").to_string();
        match step {
            Step::Wait => Ok(()),
            Step::Enter { phase, status } => {
                let mut transitions = vmim
                    .pointer("/status/phaseTransitionTimestamps")
                    .cloned()
                    .unwrap_or_else(|| json!([]));
                if let Some(list) = transitions.as_array_mut() {
                    list.push(
                        json!({"phase": phase.as_str(), "phaseTransitionTimestamp": meta::now()}),
                    );
                }
                let mut body = json!({"metadata": {"resourceVersion": migration.resource_version()},
                    "status": {"phase": phase.as_str(), "phaseTransitionTimestamps": transitions}});
                merge_into(&mut body["status"], status);
                api.patch_status(&name, &params, &Patch::Merge(&body))
                    .await?;
                tracing::info!(
                    "migration {namespace}/{name} of {vmi_name}: {}",
                    phase.as_str()
                );
                Ok(())
            }
            Step::Update { status } => {
                let mut body = json!({"metadata": {"resourceVersion": migration.resource_version()}, "status": {}});
                merge_into(&mut body["status"], status);
                api.patch_status(&name, &params, &Patch::Merge(&body))
                    .await?;
                Ok(())
            }
            Step::HandOff { source, target } => {
                // `decide` hands off only a VMI it saw.
                let Some(vmi) = vmi else { return Ok(()) };
                let mut configuration = configuration.clone();
                let policy_name = self.apply_policy(vmi, &namespace, &mut configuration);
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
                if let Some(old) = vmi
                    .pointer("/status/migrationState")
                    .and_then(Value::as_object)
                {
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
                    "metadata": {"resourceVersion": str_at(vmi, "/metadata/resourceVersion"),
                                 "labels": {MIGRATION_TARGET_NODE: target}},
                    "status": {"migrationState": state}});
                self.vmi_api(&namespace)
                    .patch(&vmi_name, &params, &Patch::Merge(&body))
                    .await?;
                let mut transitions = vmim
                    .pointer("/status/phaseTransitionTimestamps")
                    .cloned()
                    .unwrap_or_else(|| json!([]));
                if let Some(list) = transitions.as_array_mut() {
                    list.push(json!({"phase": MigrationPhase::PreparingTarget.as_str(), "phaseTransitionTimestamp": meta::now()}));
                }
                let status = json!({"metadata": {"resourceVersion": migration.resource_version()}, "status": {"phase": MigrationPhase::PreparingTarget.as_str(),
                    "phaseTransitionTimestamps": transitions}});
                api.patch_status(&name, &params, &Patch::Merge(&status))
                    .await?;
                tracing::info!("migration {namespace}/{name}: {vmi_name} handed over from {source} to {target}");
                Ok(())
            }
            Step::RequestAbort => {
                let body = json!({"status": {"migrationState": {"abortRequested": true}}});
                self.vmi_api(&namespace)
                    .patch(&vmi_name, &params, &Patch::Merge(&body))
                    .await?;
                tracing::info!("migration {namespace}/{name} deleted while running: aborting it");
                Ok(())
            }
            Step::TargetDown { node } => {
                // Guarded: a target that took the VMI meanwhile keeps it.
                let version = vmi.and_then(|v| str_at(v, "/metadata/resourceVersion"));
                let body = json!({"metadata": {"resourceVersion": version},
                    "status": {"migrationState": {"failed": true, "completed": true,
                    "endTimestamp": meta::now(), "failureReason": format!("Target node {node} is down")}}});
                self.vmi_api(&namespace)
                    .patch(&vmi_name, &params, &Patch::Merge(&body))
                    .await?;
                Ok(())
            }
            Step::Finalize { state } => {
                if let Some(state) = state {
                    let body = json!({"status": {"migrationState": state}});
                    api.patch_status(&name, &params, &Patch::Merge(&body))
                        .await?;
                    // The finalizer goes on the next pass, once the copy is in the cache.
                    return self
                        .drop_target_label(&namespace, &vmi_name, vmi, &params)
                        .await;
                }
                let finalizers: Vec<&String> = migration
                    .finalizers()
                    .iter()
                    .filter(|f| f.as_str() != FINALIZER)
                    .collect();
                let body = json!({"metadata": {"resourceVersion": migration.resource_version(), "finalizers": finalizers}});
                api.patch(&name, &params, &Patch::Merge(&body)).await?;
                Ok(())
            }
        }
    }

    /// Applies the MigrationPolicy that matches the VMI (if any) to `configuration`, and
    /// names it.
    fn apply_policy(
        &self,
        vmi: &Value,
        namespace: &str,
        configuration: &mut Value,
    ) -> Option<String> {
        let labels = |v: Option<&Value>| -> BTreeMap<String, String> {
            v.and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        };
        let vmi_labels = labels(vmi.pointer("/metadata/labels"));
        let namespace_labels: BTreeMap<String, String> = self
            .namespaces
            .state()
            .iter()
            .find(|n| n.name_any() == namespace)
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default()
            .into_iter()
            .collect();
        let policies: Vec<Value> = self.policies.state().iter().map(|p| value_of(p)).collect();
        let policy = policy::choose(&policies, &vmi_labels, &namespace_labels)?;
        policy::apply(configuration, policy);
        policy
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// The migration's Secret with its TLS credentials, owned by it (so it goes with it),
    /// for the addresses the target node publishes.
    async fn create_credentials(
        &self,
        migration: &DynamicObject,
        target: &str,
        issue: &IssueCredentials,
    ) -> Result<(), kube::Error> {
        use base64::Engine as _;
        let node = self
            .nodes
            .state()
            .into_iter()
            .find(|n| n.name_any() == target);
        let mut hosts: Vec<String> = node
            .and_then(|n| {
                n.data
                    .pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .cloned()
            })
            .unwrap_or_default()
            .iter()
            .filter_map(|a| a["address"].as_str().map(str::to_string))
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
        let namespace = migration.namespace().unwrap_or_default();
        let uid = migration.uid().unwrap_or_default();
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": kubevirt_api::names::migration_tls_secret(&uid), "namespace": namespace,
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                    "name": migration.name_any(), "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
            "type": "Opaque",
            "data": data,
        });
        let secret: DynamicObject =
            serde_json::from_value(secret).map_err(kube::Error::SerdeError)?;
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &namespace,
            &secret_resource(),
        );
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
        vmi: Option<&Value>,
        params: &PatchParams,
    ) -> Result<(), kube::Error> {
        let label = format!(
            "/metadata/labels/{}",
            MIGRATION_TARGET_NODE.replace('/', "~1")
        );
        if vmi.and_then(|v| v.pointer(&label)).is_some() {
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
        migrations: &[&Arc<DynamicObject>],
    ) -> Result<(), kube::Error> {
        let mut finished: BTreeMap<(String, String), Vec<&Arc<DynamicObject>>> = BTreeMap::new();
        for m in migrations {
            let done = MigrationPhase::of(&m.data).is_final()
                && !m.finalizers().iter().any(|f| f == FINALIZER)
                && m.metadata.deletion_timestamp.is_none();
            if done {
                let vmi = m.labels().get(VMI_NAME).cloned().unwrap_or_default();
                finished
                    .entry((m.namespace().unwrap_or_default(), vmi))
                    .or_default()
                    .push(m);
            }
        }
        for ((namespace, _), list) in finished {
            // Oldest first (creation order), so the surplus is at the front.
            let surplus = list.len().saturating_sub(FINISHED_KEPT);
            for m in &list[..surplus] {
                match self
                    .migration_api(&namespace)
                    .delete(&m.name_any(), &DeleteParams::default())
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

fn policy_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("migrations.kubevirt.io", "v1alpha1", "MigrationPolicy"),
        "migrationpolicies",
    )
}

fn namespace_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Namespace"), "namespaces")
}

fn secret_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Secret"), "secrets")
}

fn merge_into(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        for (k, v) in b {
            a.insert(k, v);
        }
    }
}
