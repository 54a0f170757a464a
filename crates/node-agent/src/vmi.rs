//! Drives each VMI bound to one of our nodes: prepare (Scheduling → Scheduled), boot
//! (→ Running), watch the guest (→ Succeeded/Failed), pause/unpause and soft reboot on
//! request, and on deletion stop the guest and let the VMI go.
//!
//! The one VMI state machine, each phase's step next to the next; the status documents it
//! writes are built in `vmi_status`, and migration, volume sources and the hypervisor live
//! in their own modules.

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, reflector, ObjectRef};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Map, Value};

use crate::hypervisor::{Hypervisor, Observed, PauseCause, Prepared, Started, Stopping};
use crate::volume_sources::VolumeSources;

use kubevirt_api::model::{Condition, VirtualMachineInstance, VmiPhase};
use kubevirt_api::names::annotations::{
    PAUSED as PAUSE_ANNOTATION, SOFT_REBOOT_DONE as SOFT_REBOOT_DONE_ANNOTATION,
    SOFT_REBOOT_REQUESTED as SOFT_REBOOT_ANNOTATION, UNPAUSE_DONE, UNPAUSE_REQUESTED,
};
use kubevirt_api::names::conditions::{
    MESSAGE_PAUSED_BY_USER, MESSAGE_PAUSED_IO_ERROR, PAUSED, READY, REASON_FAILED_CREATE,
    REASON_GUEST_NOT_RUNNING, REASON_PAUSED_BY_HYPERVISOR, REASON_PAUSED_BY_USER,
    REASON_PAUSED_IO_ERROR, SYNCHRONIZED,
};
use kubevirt_api::names::finalizers::VMI_FOREGROUND as FOREGROUND_FINALIZER;
use kubevirt_api::names::labels::MIGRATION_TARGET_NODE;

use crate::context::{normal, warning, Context, Note, SAME_FAILURES_BEFORE_FAILING};
use crate::vmi_status::{
    conditions, enter_phase, failed_status, running_status, scheduled_status, set_condition,
    with_status,
};
use crate::volume_sources::{read_sources, SourcesUnusable};
const DEFAULT_GRACE_SECONDS: u64 = 30;

pub async fn run(client: Client, nodes: Vec<String>, hypervisor: Arc<dyn Hypervisor>) {
    // One node: let the server filter. Several: one watch, filtered here.
    let (on_node, moving_here) = match nodes.as_slice() {
        [only] => (
            watcher::Config::default().fields(&format!("status.nodeName={only}")),
            watcher::Config::default().labels(&format!("{MIGRATION_TARGET_NODE}={only}")),
        ),
        _ => (
            watcher::Config::default(),
            watcher::Config::default().labels(MIGRATION_TARGET_NODE),
        ),
    };
    // One node: its name is the events' source host, as virt-handler's.
    let host = match nodes.as_slice() {
        [only] => Some(only.as_str()),
        _ => None,
    };
    let ctx = Arc::new(Context {
        events: event_recorder::Recorder::start(client.clone(), "virt-handler", host),
        shutting_down: Default::default(),
        client,
        nodes: nodes.into_iter().collect(),
        hypervisor,
        backoff: Default::default(),
        awaiting: Default::default(),
        prepare_failures: Default::default(),
    });
    tokio::spawn(sweep(ctx.clone()));
    // VMIs on our nodes, and VMIs migrating to them: the target side of a migration
    // runs apart, so that neither side waits for the other.
    let on_node = controller(&ctx.client, on_node, &ctx).run(reconcile, error_policy, ctx.clone());
    let moving_here = controller(&ctx.client, moving_here, &ctx).run(
        crate::migration::target,
        error_policy,
        ctx.clone(),
    );
    futures::join!(report(on_node, &ctx), report(moving_here, &ctx));
}

/// A controller over the VMIs `config` selects, woken also when a guest changes on its own.
fn controller(
    client: &Client,
    config: watcher::Config,
    ctx: &Context,
) -> Controller<VirtualMachineInstance> {
    // Decoded lean (the model skips managedFields): with simulated nodes, this watch sees
    // every VMI of the cluster.
    let writer = reflector::store::Writer::default();
    let reader = writer.as_reader();
    let vmis = reflector(
        writer,
        watcher(Api::<VirtualMachineInstance>::all(client.clone()), config),
    );
    let mut controller = Controller::for_stream(vmis.applied_objects(), reader);
    if let Some(changes) = ctx.hypervisor.changes() {
        let triggers =
            tokio_stream::wrappers::BroadcastStream::new(changes).filter_map(|change| async move {
                let (namespace, name) = change.ok()?;
                Some(ObjectRef::new(&name).within(&namespace))
            });
        controller = controller.reconcile_on(triggers);
    }
    controller
}

async fn report<S>(results: S, ctx: &Context)
where
    S: futures::Stream<
        Item = Result<
            (ObjectRef<VirtualMachineInstance>, Action),
            kube::runtime::controller::Error<kube::Error, watcher::Error>,
        >,
    >,
{
    results
        .for_each(|result| {
            use kube::runtime::controller::Error;
            let key = |vmi: &ObjectRef<VirtualMachineInstance>| {
                kubevirt_api::backoff::object_key(vmi.namespace.as_deref(), &vmi.name)
            };
            match result {
                Ok((vmi, _)) => ctx.backoff.succeeded(&key(&vmi)),
                // Deleted while queued: nothing left to retry.
                Err(Error::ObjectNotFound(vmi)) => ctx.backoff.succeeded(
                    &kubevirt_api::backoff::object_key(vmi.namespace.as_deref(), &vmi.name),
                ),
                // Logged by error_policy.
                Err(Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!("node agent: {e}"),
            }
            futures::future::ready(())
        })
        .await;
}

/// How often the node looks for leftovers of VMIs it no longer runs.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Releases what the node holds for VMIs that are neither on it nor migrating to it (a
/// source copy or a failed target left when an agent restarted at the wrong moment).
async fn sweep(ctx: Arc<Context>) {
    // First soon after start: leftovers are most likely after a restart.
    let mut wait = Duration::from_secs(5);
    loop {
        tokio::time::sleep(wait).await;
        wait = SWEEP_INTERVAL;
        for (namespace, name) in ctx.hypervisor.local_vmis() {
            let api = Api::<VirtualMachineInstance>::namespaced(ctx.client.clone(), &namespace);
            let vmi = match api.get_opt(&name).await {
                Ok(vmi) => vmi,
                // A node may read only the VMIs that concern it: this one went elsewhere.
                Err(kube::Error::Api(s)) if s.code == 403 => None,
                Err(e) => {
                    tracing::warn!("sweep: reading VMI {namespace}/{name}: {e}");
                    continue;
                }
            };
            let wanted = vmi.is_some_and(|vmi| {
                let target = vmi
                    .migration_state()
                    .filter(|m| m.failed != Some(true))
                    .and_then(|m| m.target_node.as_deref());
                vmi.node_name().is_some_and(|n| ctx.nodes.contains(n))
                    || target.is_some_and(|n| ctx.nodes.contains(n))
            });
            if !wanted {
                ctx.hypervisor.release_leftover(&namespace, &name).await;
            }
        }
    }
}

pub(crate) fn error_policy(
    vmi: Arc<VirtualMachineInstance>,
    error: &kube::Error,
    ctx: Arc<Context>,
) -> Action {
    let _vmi = crate::context::vmi_span(&vmi).entered();
    let key = kubevirt_api::backoff::object_key(Some(vmi.namespace()), vmi.name());
    let retry = ctx.backoff.failed(key.clone());
    tracing::warn!("node agent: sync of {key} failed, retrying in {retry:?}: {error}");
    Action::requeue(retry)
}

struct Writer<'a> {
    api: Api<VirtualMachineInstance>,
    vmi: &'a VirtualMachineInstance,
    ctx: &'a Context,
}

impl Writer<'_> {
    /// A merge patch guarded by the resourceVersion we acted on: if the VMI changed
    /// meanwhile, we simply see it again.
    async fn patch(&self, body: Value) -> Result<Action, kube::Error> {
        self.patch_noting(body, Vec::new()).await
    }

    /// [`Writer::patch`], recording `notes` about the VMI once the write landed.
    async fn patch_noting(&self, mut body: Value, notes: Vec<Note>) -> Result<Action, kube::Error> {
        body["metadata"]["resourceVersion"] = json!(self.vmi.metadata.resource_version);
        let params = PatchParams {
            field_manager: Some("virt-handler".into()),
            ..Default::default()
        };
        let request = kube::core::Request::new(self.api.resource_url())
            .patch(&self.vmi.name_any(), &params, &Patch::Merge(&body))
            .map_err(kube::Error::BuildRequest)?;
        // The written VMI is not read back: skipped while parsed, never decoded.
        let written = self
            .api
            .clone()
            .into_client()
            .request::<serde::de::IgnoredAny>(request)
            .await;
        match written {
            Ok(_) => {
                self.ctx.note(self.vmi, notes);
                Ok(Action::await_change())
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                Ok(Action::await_change())
            }
            Err(e) => Err(e),
        }
    }
}

fn grace(vmi: &VirtualMachineInstance) -> Duration {
    let seconds = vmi
        .spec
        .termination_grace_period_seconds
        .and_then(|s| u64::try_from(s).ok())
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    Duration::from_secs(seconds)
}

async fn reconcile(
    vmi: Arc<VirtualMachineInstance>,
    ctx: Arc<Context>,
) -> Result<Action, kube::Error> {
    let span = crate::context::vmi_span(&vmi);
    reconcile_vmi(vmi, ctx).instrument(span).await
}

async fn reconcile_vmi(
    vmi: Arc<VirtualMachineInstance>,
    ctx: Arc<Context>,
) -> Result<Action, kube::Error> {
    let node = vmi.node_name().unwrap_or("");
    if !ctx.nodes.contains(node) {
        return Ok(Action::await_change());
    }
    let api = Api::<VirtualMachineInstance>::namespaced(ctx.client.clone(), vmi.namespace());
    let writer = Writer {
        api,
        vmi: &vmi,
        ctx: &ctx,
    };
    let hv = &ctx.hypervisor;
    let phase = vmi.phase();
    let is_final = phase.is_final();
    tracing::debug!("sync: phase {phase:?}");

    if vmi.metadata.deletion_timestamp.is_some() {
        // A guest being deleted does not move any more.
        if let Some(uid) = vmi
            .migration_state()
            .and_then(|m| m.migration_uid.as_deref())
        {
            hv.abort_sending(&vmi, uid);
        }
        if !is_final {
            let succeeded = if phase == VmiPhase::Running {
                if ctx.first_shutdown(&vmi) {
                    ctx.note(
                        &vmi,
                        vec![normal("ShuttingDown", "Signaled Graceful Shutdown")],
                    );
                }
                match hv.stop(&vmi, grace(&vmi)).await {
                    Stopping::Pending(after) => return Ok(Action::requeue(after)),
                    Stopping::Done { succeeded } => succeeded,
                }
            } else {
                // Deleted before it ever ran.
                false
            };
            // Report how the guest ended first (as virt-handler does); the finalizer
            // goes on the next pass, so the final phase is visible before the VMI is.
            let mut status = enter_phase(
                &vmi,
                if succeeded {
                    VmiPhase::Succeeded
                } else {
                    VmiPhase::Failed
                },
            );
            let mut list = conditions(&vmi);
            set_condition(
                &mut list,
                "Ready",
                "False",
                "GuestNotRunning",
                "Guest VM is not reported as running",
            );
            list.retain(|c| c.kind() != PAUSED);
            status.insert("conditions".into(), json!(list));
            let notes = if phase != VmiPhase::Running {
                Vec::new()
            } else if succeeded {
                vec![normal(
                    "Stopped",
                    "The VirtualMachineInstance was shut down.",
                )]
            } else {
                vec![warning("Stopped", "The VirtualMachineInstance crashed.")]
            };
            return writer.patch_noting(json!({"status": status}), notes).await;
        }
        ctx.forget_shutdown(&vmi);
        let status = Map::new();
        hv.cleanup(&vmi).await;
        let finalizers: Vec<&String> = vmi
            .finalizers()
            .iter()
            .filter(|f| f.as_str() != FOREGROUND_FINALIZER)
            .collect();
        return writer
            .patch(json!({"metadata": {"finalizers": finalizers}, "status": status}))
            .await;
    }
    match phase {
        VmiPhase::Scheduling => {
            let sources = match read_sources(&ctx.client, &vmi).await? {
                Ok(sources) => sources,
                Err(SourcesUnusable::Missing { reason, message }) => {
                    // Like a pod waiting for its volume: retried until the object exists.
                    let mut list = conditions(&vmi);
                    set_condition(&mut list, SYNCHRONIZED, "False", reason, &message);
                    writer
                        .patch(json!({"status": {"conditions": list}}))
                        .await?;
                    return Ok(Action::requeue(Duration::from_secs(5)));
                }
                Err(SourcesUnusable::Invalid(message)) => {
                    let notes = vec![warning("SyncFailed", message.clone())];
                    return writer
                        .patch_noting(
                            json!({"status": failed_status(&vmi, "FailedCreate", &message)}),
                            notes,
                        )
                        .await;
                }
            };
            prepare(&vmi, &writer, &ctx, &sources).await
        }
        VmiPhase::Scheduled => {
            let sources = match read_sources(&ctx.client, &vmi).await? {
                Ok(sources) => sources,
                Err(
                    SourcesUnusable::Missing { message, .. } | SourcesUnusable::Invalid(message),
                ) => {
                    let notes = vec![warning("SyncFailed", message.clone())];
                    return writer
                        .patch_noting(
                            json!({"status": failed_status(&vmi, "FailedCreate", &message)}),
                            notes,
                        )
                        .await;
                }
            };
            start(&vmi, &writer, hv.as_ref(), &sources).await
        }
        VmiPhase::Running => {
            if let Some(result) = crate::migration::source(&vmi, &ctx, node).await {
                return result;
            }
            running(&vmi, &writer, hv.as_ref(), &ctx).await
        }
        _ => {
            if is_final {
                hv.cleanup(&vmi).await;
            }
            Ok(Action::await_change())
        }
    }
}

/// Scheduling: disks and images ready, or a Synchronized=False condition saying why not.
/// A guest that boots at once (a simulated one, a QEMU that spawns without waiting) is
/// started in the same pass: one write says Running, with Scheduled still recorded in
/// phaseTransitionTimestamps, and a start costs one status write and one watch round trip
/// fewer. A boot that has to wait writes Scheduled first, as before.
async fn prepare(
    vmi: &VirtualMachineInstance,
    writer: &Writer<'_>,
    ctx: &Context,
    sources: &VolumeSources,
) -> Result<Action, kube::Error> {
    let hv = ctx.hypervisor.as_ref();
    let prepared = hv.prepare(vmi, sources).await;
    if !matches!(prepared, Prepared::Failed { .. }) {
        ctx.forget_prepare_failures(vmi);
    }
    match prepared {
        Prepared::Ready(pulled) => {
            let scheduled = scheduled_status(vmi, pulled);
            // The boot sees the VMI as the Scheduled write would leave it (the pinned
            // image digests included).
            let as_scheduled = with_status(vmi, &scheduled);
            match boot(&as_scheduled, hv, sources).await {
                Boot::Write(body, notes) => writer.patch_noting(body, notes).await,
                Boot::Wait(after) => {
                    writer.patch(json!({"status": scheduled})).await?;
                    Ok(Action::requeue(after))
                }
            }
        }
        Prepared::Unable { reason, message } => {
            let notes = vec![warning("SyncFailed", message.clone())];
            writer
                .patch_noting(
                    json!({"status": failed_status(vmi, &reason, &message)}),
                    notes,
                )
                .await
        }
        // Only failures to create: an image that cannot be pulled is waited for as long as
        // it takes, as a pod waits in ImagePullBackOff.
        Prepared::Failed { reason, message }
            if reason == REASON_FAILED_CREATE
                && ctx.failed_to_prepare(vmi, format!("{reason}: {message}"))
                    >= SAME_FAILURES_BEFORE_FAILING =>
        {
            ctx.forget_prepare_failures(vmi);
            let notes = vec![warning("SyncFailed", message.clone())];
            writer
                .patch_noting(
                    json!({"status": failed_status(vmi, &reason, &message)}),
                    notes,
                )
                .await
        }
        Prepared::Failed { reason, message } => {
            let mut list = conditions(vmi);
            set_condition(&mut list, SYNCHRONIZED, "False", &reason, &message);
            // ErrImagePull and the like, each time it is tried (correlated into one).
            let notes = vec![warning(failure_reason(&reason), message.clone())];
            writer
                .patch_noting(json!({"status": {"conditions": list}}), notes)
                .await?;
            Ok(Action::requeue(Duration::from_secs(10)))
        }
    }
}

/// Scheduled: boot the guest, or fail the VMI saying why.
async fn start(
    vmi: &VirtualMachineInstance,
    writer: &Writer<'_>,
    hv: &dyn Hypervisor,
    sources: &VolumeSources,
) -> Result<Action, kube::Error> {
    match boot(vmi, hv, sources).await {
        Boot::Write(body, notes) => writer.patch_noting(body, notes).await,
        Boot::Wait(after) => Ok(Action::requeue(after)),
    }
}

/// The reason of a failure to prepare, as an event reason (a `'static` one: the
/// recorder's reasons are KubeVirt's, not free text).
fn failure_reason(reason: &str) -> &'static str {
    match reason {
        "ErrImagePull" => "ErrImagePull",
        "FailedMount" => "FailedMount",
        _ => "SyncFailed",
    }
}

/// What booting a Scheduled VMI's guest comes to.
enum Boot {
    /// The write that reports it (Running, or Failed with the reason) and its events.
    Write(Value, Vec<Note>),
    /// Not up yet: look again after this long.
    Wait(Duration),
}

async fn boot(vmi: &VirtualMachineInstance, hv: &dyn Hypervisor, sources: &VolumeSources) -> Boot {
    match hv.start(vmi, sources).await {
        Started::Pending(after) => Boot::Wait(after),
        Started::Running(info) => {
            let paused = vmi.spec.starts_paused();
            let mut body =
                json!({"status": running_status(vmi, &info, paused, hv.accel(), sources)});
            if paused {
                body["metadata"] = json!({"annotations": {PAUSE_ANNOTATION: "true"}});
            }
            let notes = vec![
                normal("Created", "VirtualMachineInstance defined."),
                normal("Started", "VirtualMachineInstance started."),
            ];
            Boot::Write(body, notes)
        }
        Started::Failed { reason, message } => Boot::Write(
            json!({"status": failed_status(vmi, &reason, &message)}),
            vec![warning("SyncFailed", message)],
        ),
    }
}

/// What a running VMI's Ready and Paused conditions say about its vCPUs.
#[derive(Debug, PartialEq)]
enum VcpuReport {
    Running,
    Paused {
        reason: &'static str,
        message: String,
    },
}

/// Sets Ready and Paused to match what the hypervisor observed; `None` when they already do.
fn report_vcpus(vmi: &VirtualMachineInstance, report: &VcpuReport) -> Option<Vec<Condition>> {
    let before = conditions(vmi);
    let mut list = before.clone();
    match report {
        VcpuReport::Running => {
            list.retain(|c| c.kind() != PAUSED);
            set_condition(&mut list, READY, "True", "", "");
        }
        VcpuReport::Paused { reason, message } => {
            set_condition(&mut list, PAUSED, "True", reason, message);
            let ready_message = if *reason == REASON_PAUSED_BY_USER {
                "the guest is paused"
            } else {
                message.as_str()
            };
            set_condition(
                &mut list,
                READY,
                "False",
                REASON_GUEST_NOT_RUNNING,
                ready_message,
            );
        }
    }
    (list != before).then_some(list)
}

/// A running VMI: carry out pause, unpause and soft-reboot requests, report what the
/// guest's vCPUs do, and notice the guest ending.
async fn running(
    vmi: &VirtualMachineInstance,
    writer: &Writer<'_>,
    hv: &dyn Hypervisor,
    ctx: &Context,
) -> Result<Action, kube::Error> {
    let annotations = vmi.annotations();
    let want_paused = annotations.get(PAUSE_ANNOTATION).map(String::as_str) == Some("true");
    let unpause = annotations
        .get(UNPAUSE_REQUESTED)
        .filter(|r| annotations.get(UNPAUSE_DONE) != Some(*r));
    let requested = annotations.get(SOFT_REBOOT_ANNOTATION);
    if requested.is_some() && requested != annotations.get(SOFT_REBOOT_DONE_ANNOTATION) {
        if let Err(e) = hv.soft_reboot(vmi).await {
            // Not recorded as done: tried again until the guest takes it.
            tracing::warn!(
                "soft reboot of {}/{} failed: {e}; trying again",
                vmi.namespace().to_string(),
                vmi.name_any()
            );
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        return writer
            .patch_noting(
                json!({"metadata": {"annotations": {SOFT_REBOOT_DONE_ANNOTATION: requested}}}),
                vec![normal(
                    "SoftRebooted",
                    "VirtualMachineInstance soft rebooted",
                )],
            )
            .await;
    }
    let (report, recheck) = match hv.observe(vmi).await {
        Observed::Exited { succeeded, reason } => {
            let mut status = enter_phase(
                vmi,
                if succeeded {
                    VmiPhase::Succeeded
                } else {
                    VmiPhase::Failed
                },
            );
            status.insert("reason".into(), json!(reason));
            let mut list = conditions(vmi);
            set_condition(
                &mut list,
                READY,
                "False",
                REASON_GUEST_NOT_RUNNING,
                "Guest VM is not reported as running",
            );
            list.retain(|c| c.kind() != PAUSED);
            status.insert("conditions".into(), json!(list));
            hv.cleanup(vmi).await;
            let note = if succeeded {
                normal("Stopped", "The VirtualMachineInstance was shut down.")
            } else {
                warning("Stopped", "The VirtualMachineInstance crashed.")
            };
            return writer
                .patch_noting(json!({"status": status}), vec![note])
                .await;
        }
        Observed::Halted { reason, message } => {
            tracing::warn!(
                "guest of {}/{} cannot go on: {message}",
                vmi.namespace().to_string(),
                vmi.name_any()
            );
            let mut status = failed_status(vmi, &reason, &message);
            if let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) {
                list.retain(|c| c["type"] != PAUSED);
            }
            hv.cleanup(vmi).await;
            return writer
                .patch_noting(
                    json!({"status": status}),
                    vec![warning("SyncFailed", message)],
                )
                .await;
        }
        Observed::Running { recheck } => {
            if want_paused {
                return set_paused(vmi, hv, ctx, true).await;
            }
            (VcpuReport::Running, recheck)
        }
        Observed::Paused {
            cause: PauseCause::Requested,
            recheck,
            ..
        } => {
            if !want_paused {
                return set_paused(vmi, hv, ctx, false).await;
            }
            let report = VcpuReport::Paused {
                reason: REASON_PAUSED_BY_USER,
                message: MESSAGE_PAUSED_BY_USER.into(),
            };
            (report, recheck)
        }
        Observed::Paused {
            cause,
            message,
            recheck,
        } => {
            // Stopped on its own: resumed only when a user asks (`unpause`), as KubeVirt
            // leaves a guest paused on an I/O error until storage is fixed.
            if let Some(request) = unpause {
                if let Err(e) = hv.set_paused(vmi, false).await {
                    tracing::warn!("unpausing {}: {e}", vmi.name_any());
                    return Ok(Action::requeue(Duration::from_secs(5)));
                }
                return writer
                    .patch_noting(
                        json!({"metadata": {"annotations": {UNPAUSE_DONE: request}}}),
                        vec![normal("Unpaused", "VirtualMachineInstance unpaused")],
                    )
                    .await;
            }
            let report = match cause {
                PauseCause::IoError => VcpuReport::Paused {
                    reason: REASON_PAUSED_IO_ERROR,
                    message: format!("{MESSAGE_PAUSED_IO_ERROR}: {message}"),
                },
                _ => VcpuReport::Paused {
                    reason: REASON_PAUSED_BY_HYPERVISOR,
                    message,
                },
            };
            (report, recheck)
        }
    };
    if let Some(list) = report_vcpus(vmi, &report) {
        writer
            .patch(json!({"status": {"conditions": list}}))
            .await?;
    }
    Ok(Action::requeue(recheck))
}

/// Pauses or resumes the vCPUs; the run-state change that follows brings the VMI back
/// here, where its conditions are reported.
async fn set_paused(
    vmi: &VirtualMachineInstance,
    hv: &dyn Hypervisor,
    ctx: &Context,
    paused: bool,
) -> Result<Action, kube::Error> {
    if let Err(e) = hv.set_paused(vmi, paused).await {
        tracing::warn!(
            "{} {}/{} failed: {e}; trying again",
            if paused { "pausing" } else { "resuming" },
            vmi.namespace().to_string(),
            vmi.name_any()
        );
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    ctx.note(
        vmi,
        vec![if paused {
            normal("Paused", "VirtualMachineInstance paused")
        } else {
            normal("Unpaused", "VirtualMachineInstance unpaused")
        }],
    );
    Ok(Action::requeue(Duration::from_millis(50)))
}
