//! The VirtualMachine controller: keeps one VMI per VM as its runStrategy and queued
//! state-change requests say, and reports what it sees in the VM's status.
//!
//! The decisions themselves live in `run_strategy` and the status texts in
//! `kubevirt_api::vm_status`; what stays here is one sync's I/O (create or delete the
//! VMI, write the status, say so in events), which reads best in one place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Map, Value};

use crate::cached::{self, Cached, DECISION_SPEC_FIELDS};
use crate::run_strategy::{
    self, ChangeRequest, Effect, RunStrategy, StartFailure, VmState, VmiAction, VmiState,
};
use crate::vm_volumes::{self, Readiness};
use crate::Error;
use event_recorder::Recorder;
use kubevirt_api::backoff::{object_key, Backoff};
use kubevirt_api::cdi::model::DataVolume;
use kubevirt_api::meta;
use kubevirt_api::model::object::{find, set};
use kubevirt_api::model::vm::{DataVolumeTemplate, VmiTemplate};
use kubevirt_api::model::vmi::START_PAUSED;
use kubevirt_api::model::{Condition, VirtualMachine, VirtualMachineInstance, VmiPhase};
use kubevirt_api::names::annotations::VM_GENERATION;
use kubevirt_api::names::conditions::{
    FAILURE, PAUSED, POD_SCHEDULED, READY, REASON_UNSCHEDULABLE, SYNCHRONIZED,
};
use kubevirt_api::resources::VM_CONTROLLER_FINALIZER as VM_FINALIZER;
use kubevirt_api::vm_status;

const MANAGER: &str = "virt-controller";

struct Context {
    client: Client,
    recorder: Recorder,
    /// Every VMI, as the shared VMI informer last saw it.
    vmis: Store<VirtualMachineInstance>,
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
    vmi: Option<(Arc<VirtualMachineInstance>, Instant)>,
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

    fn created_vmi(&self, key: &str, vmi: &Arc<VirtualMachineInstance>) {
        self.with(key, |expected| {
            expected.vmi = Some((vmi.clone(), Instant::now()));
        });
    }

    /// The VMI created for this VM that the cache does not show yet, if recent.
    fn vmi_not_cached(&self, key: &str, cached: bool) -> Option<Arc<VirtualMachineInstance>> {
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
        recorder: Recorder::start(client.clone(), "virtualmachine-controller", None),
        client,
        vmis: shared.vmis.store(),
        backoff: Backoff::default(),
        expectations: Expectations::default(),
    });
    let data_volumes = Api::<DataVolume>::all(ctx.client.clone());
    Controller::for_stream(vm_events.applied_objects(), vm_reader)
        .reconcile_on(shared.vmis.follow(owning_vm))
        .owns(data_volumes, kube::runtime::watcher::Config::default())
        .with_config(crate::controller_config())
        .run(
            crate::workqueue::measured("virtualmachine", reconcile),
            error_policy,
            ctx.clone(),
        )
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

fn strategy_of(vm: &VirtualMachine) -> Option<RunStrategy> {
    vm.spec_strategy().strategy()
}

fn start_failure_of(vm: &VirtualMachine) -> Option<StartFailure> {
    let f = vm.status.start_failure.as_ref()?;
    Some(StartFailure {
        consecutive_fail_count: u32::try_from(f.consecutive_fail_count.unwrap_or(0)).unwrap_or(0),
        last_failed_vmi_uid: f.last_failed_vmi_uid.clone().unwrap_or_default(),
        retry_after: f
            .retry_after_timestamp
            .as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(Utc::now),
    })
}

fn start_failure_json(f: &StartFailure) -> Value {
    json!({"consecutiveFailCount": f.consecutive_fail_count, "lastFailedVMIUID": f.last_failed_vmi_uid,
           "retryAfterTimestamp": meta::format_time(f.retry_after)})
}

fn vmi_state(vmi: &VirtualMachineInstance) -> VmiState {
    let sync_failure = vmi
        .condition(SYNCHRONIZED)
        .filter(|c| c.status.as_deref() == Some("False"))
        .and_then(|c| c.reason.clone());
    VmiState {
        uid: vmi.uid().to_string(),
        phase: vmi.phase(),
        deleting: vmi.metadata.deletion_timestamp.is_some(),
        ever_running: vmi.entered(VmiPhase::Running).is_some(),
        paused: vmi.condition(PAUSED).is_some_and(|c| c.is(PAUSED, "True")),
        unschedulable: vmi
            .condition(POD_SCHEDULED)
            .is_some_and(|c| c.is(POD_SCHEDULED, "False") && c.reason() == REASON_UNSCHEDULABLE),
        sync_failure,
        migrating: vmi.migration_state().is_some_and(|m| m.moving()),
    }
}

/// The VMI a VM starts: its template with the VM's name, owned by the VM (§1.6).
fn vmi_from_template(
    vm: &VirtualMachine,
    template: Option<VmiTemplate>,
    paused: bool,
) -> VirtualMachineInstance {
    let template = template.unwrap_or_default();
    let metadata = template.metadata.unwrap_or_default();
    let mut annotations = metadata.annotations.unwrap_or_default();
    annotations.insert(
        VM_GENERATION.into(),
        vm.metadata.generation.unwrap_or(1).to_string(),
    );
    let mut spec = template.spec.unwrap_or_default();
    if paused {
        spec.start_strategy = Some(START_PAUSED.into());
    }
    let firmware = spec
        .domain
        .get_or_insert_with(Default::default)
        .firmware
        .get_or_insert_with(Default::default);
    if firmware.uuid.is_none() {
        firmware.uuid = Some(kubevirt_api::defaults::stable_firmware_uuid(vm.name()));
    }
    VirtualMachineInstance {
        metadata: ObjectMeta {
            name: Some(vm.name().to_string()),
            namespace: Some(vm.namespace().to_string()),
            labels: Some(metadata.labels.unwrap_or_default()),
            annotations: Some(annotations),
            owner_references: Some(vec![vm.controller_reference()]),
            ..ObjectMeta::default()
        },
        spec,
        status: Default::default(),
    }
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
    vm: &VirtualMachine,
    vmis: &Api<VirtualMachineInstance>,
    ctx: &Context,
) -> Result<Option<Arc<VirtualMachineInstance>>, Error> {
    let (name, namespace) = (vm.name(), vm.namespace());
    let cached = ctx.vmis.get(&ObjectRef::new(name).within(namespace));
    let created = ctx
        .expectations
        .vmi_not_cached(&object_key(Some(namespace), name), cached.is_some());
    let vmi = match (cached, created) {
        (Some(cached), _) => Some(cached),
        (None, Some(created)) => Some(created),
        (None, None) if vm.status.created == Some(true) => vmis.get_opt(name).await?.map(Arc::new),
        (None, None) => None,
    };
    Ok(vmi.filter(|vmi| owned_by(vmi, vm)))
}

/// The VM that controls `vmi`, to sync when the VMI changes.
fn owning_vm(vmi: &VirtualMachineInstance) -> Option<ObjectRef<Cached<VirtualMachine>>> {
    let owner = vmi
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))?;
    let group = owner.api_version.split_once('/').map(|(group, _)| group);
    (owner.kind == VirtualMachine::KIND && group == Some(VirtualMachine::GROUP))
        .then(|| ObjectRef::new(&owner.name).within(vmi.namespace()))
}

/// Whether `vmi` is this VM's: a VMI of the same name left by an earlier VM is not.
fn owned_by(vmi: &VirtualMachineInstance, vm: &VirtualMachine) -> bool {
    vmi.metadata
        .owner_references
        .as_ref()
        .is_some_and(|refs| refs.iter().any(|r| r.uid == vm.uid()))
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
    let vm = Arc::new(cached.vm(DECISION_SPEC_FIELDS)?);
    let vms = Api::<VirtualMachine>::namespaced(ctx.client.clone(), vm.namespace());
    let vmis = Api::<VirtualMachineInstance>::namespaced(ctx.client.clone(), vm.namespace());
    let vmi = find_vmi(&vm, &vmis, &ctx).await?;
    let deleting = vm.metadata.deletion_timestamp.is_some();
    let Some(vm) = keep_finalizer(&vms, vm, vmi.is_some()).await? else {
        return Ok(Action::await_change());
    };
    let Some(strategy) = strategy_of(&vm) else {
        return report_missing_strategy(&ctx, &key, &vm).await;
    };
    let templates: Vec<DataVolumeTemplate> = cached
        .spec_field("dataVolumeTemplates")?
        .unwrap_or_default();
    if !deleting && !templates.is_empty() {
        vm_volumes::ensure_templates(&ctx.client, &vm, &templates).await?;
    }
    let observed = vmi.as_deref().map(vmi_state);
    let state = VmState {
        strategy,
        deleting,
        last_strategy: vm
            .status
            .run_strategy
            .as_deref()
            .and_then(RunStrategy::parse),
        requests: vm.change_requests(),
        start_failure: start_failure_of(&vm),
    };
    let now = Utc::now();
    let plan = run_strategy::plan(state, observed.as_ref(), now, |max| {
        chrono::Duration::milliseconds(rand::random_range(0..=max.num_milliseconds().max(0)))
    });
    // Whether the volumes let the VM start, when it wants to or has DataVolumes to show.
    let wants_vmi = matches!(plan.action, VmiAction::Create { .. });
    let volumes = if (wants_vmi || !templates.is_empty()) && vmi.is_none() && !deleting {
        match cached.spec_field::<VmiTemplate>("template")? {
            Some(template) => vm_volumes::readiness(&ctx.client, vm.namespace(), &template).await?,
            None => Readiness::Ready,
        }
    } else {
        Readiness::Ready
    };
    let step = Step {
        effect: Effect::None,
        vmi,
        failure: None,
        // Woken by the DataVolumes it owns; others (and claims) are looked at again soon.
        requeue: (volumes != Readiness::Ready).then_some(Duration::from_secs(2)),
    };
    let step = match &plan.action {
        VmiAction::Create { .. } if volumes != Readiness::Ready => step,
        VmiAction::Create { paused } => {
            let template = cached.spec_field("template")?;
            create_vmi(&ctx, &key, &vm, &vmis, template, *paused, step).await?
        }
        VmiAction::Delete => delete_vmi(&ctx, &vm, &vmis, step).await?,
        VmiAction::WaitUntil(when) => Step {
            requeue: Some((*when - now).to_std().unwrap_or(Duration::from_millis(100))),
            ..step
        },
        VmiAction::SwitchToAlways => {
            let patch = if vm.spec.running.is_some() {
                json!({"spec": {"running": true}})
            } else {
                json!({"spec": {"runStrategy": "Always"}})
            };
            vms.patch(vm.name(), &params_merge(), &Patch::Merge(&patch))
                .await?;
            step
        }
        VmiAction::None => step,
    };
    let outcome = run_strategy::conclude(plan, observed.as_ref(), step.effect);
    let printable = match volumes.printable_status() {
        Some(waiting) if matches!(outcome.printable_status, "Stopped" | "Starting") => waiting,
        _ => outcome.printable_status,
    };
    let report = Report {
        printable,
        vmi: step.vmi.as_deref(),
        state: &outcome.state,
        volumes: &volumes,
        failure: step.failure.as_ref(),
    };
    let retry = update_status(&ctx, &key, &vm, |status| report.fill(&vm, status)).await?;
    // A status write lost to a conflict is retried even when the pass wanted no requeue.
    Ok(next_sync(sooner(step.requeue, retry)))
}

/// Where a sync stands after acting on its plan.
struct Step {
    effect: Effect,
    /// The VM's VMI, as the action left it.
    vmi: Option<Arc<VirtualMachineInstance>>,
    /// A failed create or delete: the VM's Failure condition (reason, message).
    failure: Option<(&'static str, String)>,
    requeue: Option<Duration>,
}

/// Adds the VM's finalizer, or takes it away once a deleted VM has no VMI left. Returns
/// the VM to sync on (as the finalizer write left it), or `None` when the VM is done.
async fn keep_finalizer(
    vms: &Api<VirtualMachine>,
    vm: Arc<VirtualMachine>,
    has_vmi: bool,
) -> Result<Option<Arc<VirtualMachine>>, Error> {
    let deleting = vm.metadata.deletion_timestamp.is_some();
    let finalizers_now = vm.metadata.finalizers.clone().unwrap_or_default();
    let has_finalizer = finalizers_now.iter().any(|f| f == VM_FINALIZER);
    if deleting && !has_vmi {
        if has_finalizer {
            let finalizers: Vec<&String> = finalizers_now
                .iter()
                .filter(|f| *f != VM_FINALIZER)
                .collect();
            let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": vm.metadata.resource_version}});
            vms.patch(vm.name(), &params_merge(), &Patch::Merge(&patch))
                .await?;
        }
        return Ok(None);
    }
    if deleting || has_finalizer {
        return Ok(Some(vm));
    }
    // The finalizer first, then on with the VM as that write left it (KubeVirt does both
    // in one sync).
    let mut finalizers = finalizers_now;
    finalizers.push(VM_FINALIZER.to_string());
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": vm.metadata.resource_version}});
    // The answer is the whole VM; the sync goes on with the spec fields it decides by,
    // as the cache gave them, and the written metadata.
    let written = vms
        .patch(vm.name(), &params_merge(), &Patch::Merge(&patch))
        .await?;
    Ok(Some(Arc::new(VirtualMachine {
        metadata: written.metadata,
        ..(*vm).clone()
    })))
}

/// A VM with neither `running` nor `runStrategy` (or both) says so in a Failure condition.
async fn report_missing_strategy(
    ctx: &Context,
    key: &str,
    vm: &VirtualMachine,
) -> Result<Action, Error> {
    let failure = Condition::new(
        FAILURE,
        "True",
        "FailedCreate",
        "Error fetching RunStrategy: running and runstrategy are mutually exclusive or missing",
    );
    let retry = update_status(ctx, key, vm, |status| {
        let mut conditions = vm.status.conditions.clone().unwrap_or_default();
        set(&mut conditions, failure, &meta::now());
        status.insert("conditions".into(), json!(conditions));
    })
    .await?;
    Ok(next_sync(retry))
}

async fn create_vmi(
    ctx: &Context,
    key: &str,
    vm: &VirtualMachine,
    vmis: &Api<VirtualMachineInstance>,
    template: Option<VmiTemplate>,
    paused: bool,
    step: Step,
) -> Result<Step, Error> {
    let body = vmi_from_template(vm, template, paused);
    match vmis.create(&post_params(), &body).await {
        // The status reports on the VMI just made, so the sync its creation
        // triggers finds nothing left to write.
        Ok(created) => {
            ctx.recorder.normal(
                &Recorder::reference(vm),
                "SuccessfulCreate",
                format!(
                    "Started the virtual machine by creating the new virtual machine instance {}",
                    created.name_any()
                ),
            );
            let created = Arc::new(created);
            ctx.expectations.created_vmi(key, &created);
            Ok(Step {
                effect: Effect::Created,
                vmi: Some(created),
                ..step
            })
        }
        // The cache had not seen a VMI that exists: report on that one.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let vmi = vmis
                .get_opt(vm.name())
                .await?
                .map(Arc::new)
                .filter(|vmi| owned_by(vmi, vm));
            Ok(Step {
                effect: if vmi.is_some() {
                    Effect::FoundExisting
                } else {
                    step.effect
                },
                vmi,
                requeue: Some(Duration::from_millis(100)),
                ..step
            })
        }
        Err(kube::Error::Api(s)) => {
            ctx.recorder.warning(
                &Recorder::reference(vm),
                "FailedCreate",
                format!("Error creating virtual machine instance: {}", s.message),
            );
            Ok(Step {
                failure: Some((
                    "FailedCreate",
                    format!("Failure while starting VMI: {}", s.message),
                )),
                requeue: Some(Duration::from_secs(1)),
                ..step
            })
        }
        Err(e) => Err(e.into()),
    }
}

async fn delete_vmi(
    ctx: &Context,
    vm: &VirtualMachine,
    vmis: &Api<VirtualMachineInstance>,
    step: Step,
) -> Result<Step, Error> {
    let name = vm.name();
    let Some(vmi) = &step.vmi else {
        return Ok(step);
    };
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: vmi.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match vmis.delete(name, &dp).await {
        Ok(_) => {
            ctx.recorder.normal(
                &Recorder::reference(vm),
                "SuccessfulDelete",
                format!(
                    "Stopped the virtual machine by deleting the virtual machine instance {}",
                    vmi.metadata.uid.as_deref().unwrap_or(name)
                ),
            );
            Ok(Step {
                effect: Effect::Deleted,
                ..step
            })
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(step),
        Err(kube::Error::Api(s)) => {
            ctx.recorder.warning(
                &Recorder::reference(vm),
                "FailedDelete",
                format!(
                    "Error deleting virtual machine instance {name}: {}",
                    s.message
                ),
            );
            Ok(Step {
                failure: Some((
                    "FailedDelete",
                    format!("Failure attempting to delete VMI: {}", s.message),
                )),
                requeue: Some(Duration::from_secs(1)),
                ..step
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// What a sync reports in the VM's status.
struct Report<'a> {
    printable: &'a str,
    vmi: Option<&'a VirtualMachineInstance>,
    state: &'a VmState,
    volumes: &'a Readiness,
    failure: Option<&'a (&'static str, String)>,
}

impl Report<'_> {
    fn fill(&self, vm: &VirtualMachine, status: &mut Map<String, Value>) {
        let (vmi, state) = (self.vmi, self.state);
        status.insert("printableStatus".into(), json!(self.printable));
        status.insert("created".into(), json!(vmi.is_some()));
        let ready = vmi
            .and_then(|v| v.condition(READY))
            .is_some_and(|c| c.is(READY, "True"));
        status.insert("ready".into(), json!(ready));
        if let Some(strategy) = state.last_strategy {
            status.insert("runStrategy".into(), json!(strategy.as_str()));
        }
        let mut conditions = vm_conditions(vmi);
        conditions.extend(self.volumes.condition(&meta::now()));
        if let Some((reason, message)) = self.failure {
            let mut failure = Condition::new(FAILURE, "True", reason, message);
            failure.last_transition_time = Some(meta::now());
            conditions.push(failure);
        } else if state.start_failure.is_some() {
            conditions.extend(start_failure_condition(vm, vmi));
        }
        status.insert("conditions".into(), json!(conditions));
        status.insert(
            "stateChangeRequests".into(),
            if state.requests.is_empty() {
                Value::Null
            } else {
                json!(state
                    .requests
                    .iter()
                    .map(ChangeRequest::entry)
                    .collect::<Vec<_>>())
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
        status.insert("desiredGeneration".into(), json!(vm.metadata.generation));
        let vmi_generation = vmi.and_then(|v| {
            v.metadata
                .annotations
                .as_ref()?
                .get(VM_GENERATION)
                .and_then(|g| g.parse::<i64>().ok())
        });
        status.insert(
            "observedGeneration".into(),
            vmi_generation.map(|g| json!(g)).unwrap_or(Value::Null),
        );
    }
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
fn start_failure_condition(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
) -> Option<Condition> {
    let from_vmi = vmi
        .filter(|vmi| vmi.phase() == VmiPhase::Failed)
        .and_then(|vmi| vmi.condition(READY))
        .filter(|ready| ready.status.as_deref() == Some("False"))
        .map(|ready| Condition {
            type_: Some(FAILURE.into()),
            status: Some("True".into()),
            ..ready.clone()
        });
    from_vmi.or_else(|| vm.condition(FAILURE).cloned())
}

/// Ready from the VMI (or VMINotExists), and every other VMI condition mirrored (§2.3).
fn vm_conditions(vmi: Option<&VirtualMachineInstance>) -> Vec<Condition> {
    let Some(vmi) = vmi else {
        return vec![vm_status::vmi_not_exists_condition(&meta::now())];
    };
    let mut out = vmi.status.conditions.clone().unwrap_or_default();
    if find(&vmi.status.conditions, READY).is_none() {
        let mut missing = Condition::new(
            "Ready",
            "False",
            "VMIConditionMissing",
            "VMI is missing the Ready condition",
        );
        missing.last_transition_time = Some(meta::now());
        out.insert(0, missing);
    }
    out
}

/// Writes the status fields `fill` sets (a `null` removes a field) when anything
/// changed, ignoring condition timestamps for the comparison. Returns when to sync
/// again: soon after the write lost to a conflict (or found the VM gone), else `None`.
async fn update_status(
    ctx: &Context,
    key: &str,
    vm: &VirtualMachine,
    fill: impl FnOnce(&mut Map<String, Value>),
) -> Result<Option<Duration>, Error> {
    let current = match serde_json::to_value(&vm.status)? {
        Value::Object(status) => status,
        _ => Map::new(),
    };
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
    let patch =
        json!({"metadata": {"resourceVersion": vm.metadata.resource_version}, "status": changes});
    let written = crate::writes::patch(
        &ctx.client,
        &crate::resources::virtual_machine(),
        vm.namespace(),
        vm.name(),
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
