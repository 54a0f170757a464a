//! The VirtualMachine controller: keeps one VMI per VM as its runStrategy and queued
//! state-change requests say, and reports what it sees in the VM's status.

use apimachinery::pointer::Pointer;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Map, Value};

use crate::cached::{self, Cached, Kind, VirtualMachine, DECISION_SPEC_FIELDS};
use crate::datavolume::data_volume_resource;
use crate::resources::{condition, condition_is, str_at};
use crate::run_strategy::{
    self, ChangeRequest, Effect, Phase, RunStrategy, StartFailure, VmState, VmiAction, VmiState,
};
use crate::vm_volumes::{self, Readiness};
use crate::Error;
use kubevirt_api::backoff::{object_key, Backoff};
use kubevirt_api::lean::Lean;
use kubevirt_api::meta;
use kubevirt_api::model::{MigrationState, SpecStrategy, VmiPhase};
use kubevirt_api::resources::VM_CONTROLLER_FINALIZER as VM_FINALIZER;
use kubevirt_api::vm_status;

const MANAGER: &str = "virt-controller";

struct Context {
    client: Client,
    vm: ApiResource,
    vmi: ApiResource,
    /// Every VMI, as the shared VMI informer last saw it.
    vmis: Store<DynamicObject>,
    /// Retry delays of VMs whose sync failed, by `namespace/name`.
    backoff: Backoff<String>,
    expectations: Expectations,
}

/// What this controller wrote that its caches may not show yet, by `namespace/name` of
/// the VM (KubeVirt's controller expectations). A sync on a VM older than its own last
/// status write would only lose a conflict, and one that cannot find the VMI it just
/// created would ask the server for it.
#[derive(Default)]
struct Expectations(Mutex<HashMap<String, Expected>>);

#[derive(Default)]
struct Expected {
    /// The resourceVersion of the VM's last status write.
    vm_version: Option<u64>,
    /// The VMI this controller created, until the VMI cache shows it.
    vmi: Option<(Arc<DynamicObject>, Instant)>,
}

/// How long a created VMI stands in for the cache's; past that the server is asked.
const CREATED_VMI_TRUST: Duration = Duration::from_secs(30);
/// When a sync put off for a stale VM runs anyway, should the write's event not come.
const STALE_VM_RETRY: Duration = Duration::from_secs(5);

impl Expectations {
    fn with<T>(&self, key: &str, f: impl FnOnce(&mut Expected) -> T) -> T {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let expected = all.entry(key.to_string()).or_default();
        let result = f(expected);
        if expected.vm_version.is_none() && expected.vmi.is_none() {
            all.remove(key);
        }
        result
    }

    /// Whether the cached VM (at `version`) predates this controller's last write to it.
    fn vm_is_stale(&self, key: &str, version: Option<&str>) -> bool {
        let version = version.and_then(|v| v.parse::<u64>().ok());
        self.with(key, |expected| match (expected.vm_version, version) {
            (Some(written), Some(cached)) if cached < written => true,
            _ => {
                expected.vm_version = None;
                false
            }
        })
    }

    fn wrote_vm(&self, key: &str, version: Option<String>) {
        let version = version.and_then(|v| v.parse::<u64>().ok());
        self.with(key, |expected| expected.vm_version = version);
    }

    fn created_vmi(&self, key: &str, vmi: &Arc<DynamicObject>) {
        self.with(key, |expected| {
            expected.vmi = Some((vmi.clone(), Instant::now()));
        });
    }

    /// The VMI created for this VM that the cache does not show yet, if recent.
    fn vmi_not_cached(&self, key: &str, cached: bool) -> Option<Arc<DynamicObject>> {
        self.with(key, |expected| match expected.vmi.take() {
            Some((vmi, at)) if !cached && at.elapsed() < CREATED_VMI_TRUST => {
                expected.vmi = Some((vmi.clone(), at));
                Some(vmi)
            }
            _ => None,
        })
    }
}

pub async fn run(client: Client, shared: crate::informer::Shared) {
    let (vm_reader, vm_events) = cached::watch::<VirtualMachine>(&client);
    let ctx = Arc::new(Context {
        client,
        vm: VirtualMachine::resource(),
        vmi: crate::resources::virtual_machine_instance(),
        vmis: shared.vmis.store(),
        backoff: Backoff::default(),
        expectations: Expectations::default(),
    });
    let data_volumes = Api::<DynamicObject>::all_with(ctx.client.clone(), &data_volume_resource());
    Controller::for_stream(vm_events.applied_objects(), vm_reader)
        .reconcile_on(shared.vmis.follow(owning_vm))
        .owns_with(
            data_volumes,
            data_volume_resource(),
            kube::runtime::watcher::Config::default(),
        )
        .with_config(crate::controller_config())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| {
            match result {
                Ok((vm, _)) => ctx
                    .backoff
                    .succeeded(&object_key(vm.namespace.as_deref(), &vm.name)),
                // Deleted while queued: nothing left to retry.
                Err(controller::Error::ObjectNotFound(vm)) => ctx
                    .backoff
                    .succeeded(&object_key(vm.namespace.as_deref(), &vm.name)),
                // Logged by error_policy.
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!("vm controller: {e}"),
            }
            futures::future::ready(())
        })
        .await;
}

fn error_policy(vm: Arc<Cached<VirtualMachine>>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = object_key(vm.namespace().as_deref(), &vm.name_any());
    let retry = ctx.backoff.failed(key.clone());
    tracing::warn!("vm controller: sync of {key} failed, retrying in {retry:?}: {error}");
    Action::requeue(retry)
}

fn strategy_of(vm: &DynamicObject) -> Option<RunStrategy> {
    SpecStrategy::of_value(vm.data.get("spec")?).strategy()
}

fn requests_of(vm: &DynamicObject) -> Vec<ChangeRequest> {
    vm.data
        .at("/status/stateChangeRequests")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|r| match r["action"].as_str()? {
                    "Start" => Some(ChangeRequest::Start {
                        paused: r.at("/data/paused") == Some(&json!("true")),
                    }),
                    "Stop" => Some(ChangeRequest::Stop {
                        uid: r["uid"].as_str().map(str::to_string),
                    }),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn request_json(request: &ChangeRequest) -> Value {
    match request {
        ChangeRequest::Start { paused: true } => {
            json!({"action": "Start", "data": {"paused": "true"}})
        }
        ChangeRequest::Start { paused: false } => json!({"action": "Start"}),
        ChangeRequest::Stop { uid: Some(uid) } => json!({"action": "Stop", "uid": uid}),
        ChangeRequest::Stop { uid: None } => json!({"action": "Stop"}),
    }
}

fn start_failure_of(vm: &DynamicObject) -> Option<StartFailure> {
    let f = vm.data.at("/status/startFailure")?;
    Some(StartFailure {
        consecutive_fail_count: f["consecutiveFailCount"].as_u64().unwrap_or(0) as u32,
        last_failed_vmi_uid: f["lastFailedVMIUID"].as_str().unwrap_or("").to_string(),
        retry_after: f["retryAfterTimestamp"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(Utc::now),
    })
}

fn start_failure_json(f: &StartFailure) -> Value {
    json!({"consecutiveFailCount": f.consecutive_fail_count, "lastFailedVMIUID": f.last_failed_vmi_uid,
           "retryAfterTimestamp": meta::format_time(f.retry_after)})
}

fn vmi_state(vmi: &DynamicObject) -> VmiState {
    let migrating = MigrationState::of(&vmi.data).is_some_and(|m| m.moving());
    let sync_failure = condition(vmi, "Synchronized")
        .filter(|c| c["status"] == "False")
        .and_then(|c| c["reason"].as_str())
        .map(str::to_string);
    VmiState {
        uid: vmi.uid().unwrap_or_default(),
        phase: Phase::parse(str_at(vmi, "/status/phase").unwrap_or("")),
        deleting: vmi.metadata.deletion_timestamp.is_some(),
        ever_running: vmi
            .data
            .at("/status/phaseTransitionTimestamps")
            .and_then(Value::as_array)
            .is_some_and(|ts| ts.iter().any(|t| t["phase"] == "Running")),
        paused: condition_is(vmi, "Paused", "True"),
        unschedulable: condition(vmi, "PodScheduled")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "Unschedulable"),
        sync_failure,
        migrating,
    }
}

/// The VMI a VM starts: its template with the VM's name, owned by the VM (§1.6).
fn vmi_from_template(vm: &DynamicObject, template: Option<Value>, paused: bool) -> Value {
    let template = template.unwrap_or_else(|| json!({}));
    let mut labels = template
        .at("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !labels.is_object() {
        labels = json!({});
    }
    let mut annotations = template
        .at("/metadata/annotations")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !annotations.is_object() {
        annotations = json!({});
    }
    annotations["kubevirt.io/vm-generation"] =
        json!(vm.metadata.generation.unwrap_or(1).to_string());
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    if paused {
        spec["startStrategy"] = json!("Paused");
    }
    if spec.at("/domain/firmware/uuid").is_none() {
        if spec.at("/domain/firmware").is_none() {
            spec["domain"]["firmware"] = json!({});
        }
        spec["domain"]["firmware"]["uuid"] =
            json!(kubevirt_api::defaults::stable_firmware_uuid(&vm.name_any()));
    }
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": vm.name_any(),
            "namespace": vm.namespace(),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": vm.name_any(),
                                 "uid": vm.uid(), "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": spec,
    })
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    }
}

/// The VM's VMI: from the cache, or from the server when the cache may lag behind a
/// create (the VM's status says a VMI was created, but the cache has none).
async fn find_vmi(
    vm: &DynamicObject,
    vmis: &Api<Lean>,
    ctx: &Context,
) -> Result<Option<Arc<DynamicObject>>, Error> {
    let name = vm.name_any();
    let namespace = vm.namespace().unwrap_or_default();
    let cached = ctx
        .vmis
        .get(&ObjectRef::new_with(&name, ctx.vmi.clone()).within(&namespace));
    let created = ctx
        .expectations
        .vmi_not_cached(&object_key(Some(&namespace), &name), cached.is_some());
    let vmi = match (cached, created) {
        (Some(cached), _) => Some(cached),
        (None, Some(created)) => Some(created),
        (None, None) if vm.data.at("/status/created").and_then(Value::as_bool) == Some(true) => {
            vmis.get_opt(&name).await?.map(|vmi| Arc::new(vmi.0))
        }
        (None, None) => None,
    };
    Ok(vmi.filter(|vmi| owned_by(vmi, vm)))
}

/// The VM that controls `vmi`, to sync when the VMI changes.
fn owning_vm(vmi: &DynamicObject) -> Option<ObjectRef<Cached<VirtualMachine>>> {
    let owner = vmi
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))?;
    let group = owner.api_version.split_once('/').map(|(group, _)| group);
    (owner.kind == VirtualMachine::KIND && group == Some(VirtualMachine::GROUP)).then(|| {
        ObjectRef::new(&owner.name).within(vmi.metadata.namespace.as_deref().unwrap_or_default())
    })
}

/// Whether `vmi` is this VM's: a VMI of the same name left by an earlier VM is not.
fn owned_by(vmi: &DynamicObject, vm: &DynamicObject) -> bool {
    let vm_uid = vm.uid().unwrap_or_default();
    vmi.metadata
        .owner_references
        .as_ref()
        .is_some_and(|refs| refs.iter().any(|r| r.uid == vm_uid))
}

async fn reconcile(
    cached: Arc<Cached<VirtualMachine>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let key = object_key(cached.namespace().as_deref(), &cached.name_any());
    if ctx
        .expectations
        .vm_is_stale(&key, cached.resource_version().as_deref())
    {
        // The event of that write wakes this VM again.
        return Ok(Action::requeue(STALE_VM_RETRY));
    }
    let cached = cached.unpack()?;
    let vm = Arc::new(cached.object::<VirtualMachine>(Some(DECISION_SPEC_FIELDS))?);
    let namespace = vm.namespace().unwrap_or_default();
    let name = vm.name_any();
    let vms = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &namespace, &ctx.vm);
    // Decoded lean: the controller reads no managedFields.
    let vmis = Api::<Lean>::namespaced_with(ctx.client.clone(), &namespace, &ctx.vmi);
    let mut vmi = find_vmi(&vm, &vmis, &ctx).await?;
    let deleting = vm.metadata.deletion_timestamp.is_some();
    let has_finalizer = vm.finalizers().iter().any(|f| f == VM_FINALIZER);
    if deleting && vmi.is_none() {
        if has_finalizer {
            let finalizers: Vec<&String> = vm
                .finalizers()
                .iter()
                .filter(|f| *f != VM_FINALIZER)
                .collect();
            let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": vm.resource_version()}});
            vms.patch(&name, &params_merge(), &Patch::Merge(&patch))
                .await?;
        }
        return Ok(Action::await_change());
    }
    // The finalizer first, then on with the VM as that write left it (KubeVirt does both
    // in one sync).
    let vm = if !deleting && !has_finalizer {
        let mut finalizers = vm.finalizers().to_vec();
        finalizers.push(VM_FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": vm.resource_version()}});
        Arc::new(
            vms.patch(&name, &params_merge(), &Patch::Merge(&patch))
                .await?,
        )
    } else {
        vm
    };

    let Some(strategy) = strategy_of(&vm) else {
        let failure = json!({"type": "Failure", "status": "True", "reason": "FailedCreate",
            "message": "Error fetching RunStrategy: running and runstrategy are mutually exclusive or missing",
            "lastTransitionTime": meta::now()});
        let retry = update_status(&ctx, &key, &vm, |status| {
            let mut conditions = existing_conditions(&vm);
            meta::set_condition(&mut conditions, failure.clone());
            status.insert("conditions".into(), json!(conditions));
        })
        .await?;
        return Ok(next_sync(retry));
    };
    let templates = cached
        .spec_field("dataVolumeTemplates")?
        .and_then(|t| t.as_array().cloned())
        .unwrap_or_default();
    if !deleting && !templates.is_empty() {
        vm_volumes::ensure_templates(&ctx.client, &vm, &templates).await?;
    }
    let observed = vmi.as_deref().map(vmi_state);
    let state = VmState {
        strategy,
        deleting,
        last_strategy: str_at(&vm, "/status/runStrategy").and_then(RunStrategy::parse),
        requests: requests_of(&vm),
        start_failure: start_failure_of(&vm),
    };
    let now = Utc::now();
    let plan = run_strategy::plan(state, observed.as_ref(), now, |max| {
        chrono::Duration::milliseconds(rand::random_range(0..=max.num_milliseconds().max(0)))
    });
    let mut requeue = None;
    let mut effect = Effect::None;
    // A failed create or delete: the VM's Failure condition (reason, message).
    let mut failure: Option<(&str, String)> = None;
    // Whether the volumes let the VM start, when it wants to or has DataVolumes to show.
    let wants_vmi = matches!(plan.action, VmiAction::Create { .. });
    let volumes = if (wants_vmi || !templates.is_empty()) && vmi.is_none() && !deleting {
        match cached.spec_field("template")? {
            Some(template) => vm_volumes::readiness(&ctx.client, &namespace, &template).await?,
            None => Readiness::Ready,
        }
    } else {
        Readiness::Ready
    };
    if volumes != Readiness::Ready {
        // Woken by the DataVolumes it owns; others (and claims) are looked at again soon.
        requeue = Some(Duration::from_secs(2));
    }
    match &plan.action {
        VmiAction::None => {}
        VmiAction::Create { .. } if volumes != Readiness::Ready => {}
        VmiAction::Create { paused } => {
            let body: DynamicObject = serde_json::from_value(vmi_from_template(
                &vm,
                cached.spec_field("template")?,
                *paused,
            ))?;
            match vmis.create(&post_params(), &Lean(body)).await {
                // The status reports on the VMI just made, so the sync its creation
                // triggers finds nothing left to write.
                Ok(Lean(created)) => {
                    let created = Arc::new(created);
                    effect = Effect::Created;
                    ctx.expectations.created_vmi(&key, &created);
                    vmi = Some(created);
                }
                // The cache had not seen a VMI that exists: report on that one.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    vmi = vmis
                        .get_opt(&name)
                        .await?
                        .map(|vmi| Arc::new(vmi.0))
                        .filter(|vmi| owned_by(vmi, &vm));
                    if vmi.is_some() {
                        effect = Effect::FoundExisting;
                    }
                    requeue = Some(Duration::from_millis(100));
                }
                Err(kube::Error::Api(s)) => {
                    failure = Some((
                        "FailedCreate",
                        format!("Failure while starting VMI: {}", s.message),
                    ));
                    requeue = Some(Duration::from_secs(1));
                }
                Err(e) => return Err(e.into()),
            }
        }
        VmiAction::Delete => {
            if let Some(vmi) = &vmi {
                let dp = DeleteParams {
                    preconditions: vmi.uid().map(|uid| kube::api::Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match vmis.delete(&name, &dp).await {
                    Ok(_) => effect = Effect::Deleted,
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(kube::Error::Api(s)) => {
                        failure = Some((
                            "FailedDelete",
                            format!("Failure attempting to delete VMI: {}", s.message),
                        ));
                        requeue = Some(Duration::from_secs(1));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        VmiAction::WaitUntil(when) => {
            requeue = Some((*when - now).to_std().unwrap_or(Duration::from_millis(100)));
        }
        VmiAction::SwitchToAlways => {
            let patch = if vm.data.at("/spec/running").is_some() {
                json!({"spec": {"running": true}})
            } else {
                json!({"spec": {"runStrategy": "Always"}})
            };
            vms.patch(&name, &params_merge(), &Patch::Merge(&patch))
                .await?;
        }
    }
    let outcome = run_strategy::conclude(plan, observed.as_ref(), effect);
    let state = &outcome.state;
    let printable = match volumes.printable_status() {
        Some(waiting) if matches!(outcome.printable_status, "Stopped" | "Starting") => waiting,
        _ => outcome.printable_status,
    };
    let generation = vm.metadata.generation;
    let vmi_generation = vmi.as_ref().and_then(|v| {
        v.annotations()
            .get("kubevirt.io/vm-generation")
            .and_then(|g| g.parse::<i64>().ok())
    });
    let retry = update_status(&ctx, &key, &vm, |status| {
        status.insert("printableStatus".into(), json!(printable));
        status.insert("created".into(), json!(vmi.is_some()));
        let ready = vmi
            .as_ref()
            .is_some_and(|v| condition_is(v, "Ready", "True"));
        status.insert("ready".into(), json!(ready));
        if let Some(strategy) = state.last_strategy {
            status.insert("runStrategy".into(), json!(strategy.as_str()));
        }
        let mut conditions = vm_conditions(vmi.as_deref());
        conditions.extend(volumes.condition(&meta::now()));
        if let Some((reason, message)) = &failure {
            conditions.push(
                json!({"type": "Failure", "status": "True", "reason": reason, "message": message,
                                   "lastProbeTime": null, "lastTransitionTime": meta::now()}),
            );
        } else if state.start_failure.is_some() {
            conditions.extend(start_failure_condition(&vm, vmi.as_deref()));
        }
        status.insert("conditions".into(), json!(conditions));
        status.insert(
            "stateChangeRequests".into(),
            if state.requests.is_empty() {
                Value::Null
            } else {
                json!(state.requests.iter().map(request_json).collect::<Vec<_>>())
            },
        );
        status.insert(
            "startFailure".into(),
            state
                .start_failure
                .as_ref()
                .map(start_failure_json)
                .unwrap_or(Value::Null),
        );
        status.insert("desiredGeneration".into(), json!(generation));
        status.insert(
            "observedGeneration".into(),
            vmi_generation.map(|g| json!(g)).unwrap_or(Value::Null),
        );
    })
    .await?;
    // A status write lost to a conflict is retried even when the pass wanted no requeue.
    Ok(next_sync(sooner(requeue, retry)))
}

/// Requeue after `after`, or wait for the next change.
fn next_sync(after: Option<Duration>) -> Action {
    match after {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    }
}

/// The earlier of two optional requeues.
fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// While the VM backs off after a VMI that failed before it ran, why that VMI failed (a
/// Failure condition with its reason and message), so that the VM says more than
/// CrashLoopBackOff: taken from the failed VMI's Ready condition while it is there, then
/// kept from the VM's own until a VMI runs or the user stops the VM.
fn start_failure_condition(vm: &DynamicObject, vmi: Option<&DynamicObject>) -> Option<Value> {
    let from_vmi = vmi
        .filter(|vmi| VmiPhase::of(&vmi.data) == VmiPhase::Failed)
        .and_then(|vmi| condition(vmi, "Ready"))
        .filter(|ready| ready["status"] == "False")
        .map(|ready| {
            json!({"type": "Failure", "status": "True", "reason": ready["reason"],
                   "message": ready["message"], "lastProbeTime": null,
                   "lastTransitionTime": ready["lastTransitionTime"]})
        });
    from_vmi.or_else(|| condition(vm, "Failure").cloned())
}

fn existing_conditions(vm: &DynamicObject) -> Vec<Value> {
    vm.data
        .at("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Ready from the VMI (or VMINotExists), and every other VMI condition mirrored (§2.3).
fn vm_conditions(vmi: Option<&DynamicObject>) -> Vec<Value> {
    let Some(vmi) = vmi else {
        return vec![vm_status::vmi_not_exists_condition(&meta::now())];
    };
    let mut out: Vec<Value> = vmi
        .data
        .at("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !out.iter().any(|c| c["type"] == "Ready") {
        out.insert(
            0,
            json!({"type": "Ready", "status": "False", "reason": "VMIConditionMissing",
                             "message": "VMI is missing the Ready condition", "lastProbeTime": null,
                             "lastTransitionTime": meta::now()}),
        );
    }
    out
}

/// Writes the status fields `fill` sets (a `null` removes a field) when anything
/// changed, ignoring condition timestamps for the comparison. Returns when to sync
/// again: soon after the write lost to a conflict (or found the VM gone), else `None`.
async fn update_status(
    ctx: &Context,
    key: &str,
    vm: &DynamicObject,
    fill: impl FnOnce(&mut Map<String, Value>),
) -> Result<Option<Duration>, Error> {
    let current = vm
        .data
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut desired = current.clone();
    let mut changes = Map::new();
    fill(&mut changes);
    for (key, value) in &changes {
        if value.is_null() {
            desired.remove(key);
        } else {
            desired.insert(key.clone(), value.clone());
        }
    }
    let strip = |status: &Map<String, Value>| {
        let mut copy = status.clone();
        if let Some(conditions) = copy.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in conditions {
                if let Some(c) = c.as_object_mut() {
                    c.remove("lastTransitionTime");
                    c.remove("lastProbeTime");
                }
            }
        }
        copy
    };
    if strip(&desired) == strip(&current) {
        return Ok(None);
    }
    // Keep transition times of conditions whose status did not change.
    if let (Some(Value::Array(new)), Some(Value::Array(old))) =
        (changes.get_mut("conditions"), current.get("conditions"))
    {
        for c in new.iter_mut() {
            if let Some(prev) = old
                .iter()
                .find(|o| o["type"] == c["type"] && o["status"] == c["status"])
            {
                c["lastTransitionTime"] = prev["lastTransitionTime"].clone();
            }
        }
    }
    let patch = json!({"metadata": {"resourceVersion": vm.resource_version()}, "status": changes});
    let written = crate::writes::patch(
        &ctx.client,
        &ctx.vm,
        &vm.namespace().unwrap_or_default(),
        &vm.name_any(),
        Some("status"),
        &params_merge(),
        &Patch::Merge(&patch),
    )
    .await;
    match written {
        Ok(version) => {
            ctx.expectations.wrote_vm(key, version);
            Ok(None)
        }
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
            Ok(Some(Duration::from_millis(50)))
        }
        Err(e) => Err(e.into()),
    }
}

fn params_merge() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_status_write_keeps_its_retry() {
        let ms = Duration::from_millis;
        // The conflict retry of the status write wins over a later requeue, and is kept
        // when the pass wanted none.
        assert_eq!(sooner(Some(ms(1000)), Some(ms(50))), Some(ms(50)));
        assert_eq!(sooner(None, Some(ms(50))), Some(ms(50)));
        assert_eq!(sooner(Some(ms(100)), None), Some(ms(100)));
        assert_eq!(sooner(None, None), None);
        assert_eq!(next_sync(Some(ms(50))), Action::requeue(ms(50)));
        assert_eq!(next_sync(None), Action::await_change());
    }
}
