//! The DataVolume controller (CDI's, in this server): a DataVolume gets a claim of its
//! name that it owns, and once the claim is bound its bytes are brought in — imported
//! from a URL, cloned from another claim, left blank or taken from an upload — with the
//! phase, progress, restart count and conditions CDI shows. Transfers run as tasks of
//! this process, several at once; a transient failure is retried with backoff, and a
//! transfer interrupted by a restart starts again from the beginning, so a half-filled
//! disk is never marked Succeeded.

mod data_source;
mod sources;
mod status;
mod transfers;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::backoff::{object_key, Backoff};
use kubevirt_api::cdi::model::DataVolume;
use kubevirt_api::cdi::{ClaimProperties, Origin, Phase, Source, Spec};
use kubevirt_api::names::annotations::UPLOADED_IMAGE;
use serde_json::{json, Value};

use crate::Error;
use status::{State, Transfer};
use transfers::{Look, Outcome, Transfers};

pub use transfers::Job;

/// How often a running transfer's progress is written to its DataVolume.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How many transfers move bytes at once.
const PARALLEL_TRANSFERS: usize = 4;

struct Context {
    client: Client,
    recorder: event_recorder::Recorder,
    transfers: Transfers,
    /// Retry delays of DataVolumes whose sync failed, by `namespace/name`.
    backoff: Backoff<String>,
    /// When each DataVolume (by uid) whose last attempt failed transiently may try again.
    retry_at: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
    /// Delays between transfer attempts.
    attempts: Backoff<String>,
    /// Where the upload proxy puts the images it received (`DIR/uploads`).
    uploads: PathBuf,
}

/// The controller's directories.
pub struct Dirs {
    /// Where images are staged while they are converted, and where images of `registry`
    /// sources are pulled to (`DIR/import-scratch`).
    pub scratch: PathBuf,
    /// Where the upload proxy leaves the images it received (`DIR/uploads`).
    pub uploads: PathBuf,
}

/// Runs the controller; images of `registry` sources may come from `insecure_registries`.
pub async fn run(client: Client, dirs: Dirs, insecure_registries: Vec<String>) {
    let Dirs { scratch, uploads } = dirs;
    // The upload proxy names files by their canonical path.
    let uploads = std::fs::canonicalize(&uploads).unwrap_or(uploads);
    let registry = oci::Config::new(scratch.join("registry"), insecure_registries);
    let api = Api::<DataVolume>::all(client.clone());
    let claims = Api::<PersistentVolumeClaim>::all(client.clone());
    let ctx = Arc::new(Context {
        recorder: event_recorder::Recorder::start(client.clone(), "datavolume-controller", None),
        client,
        transfers: Transfers::new(scratch, PARALLEL_TRANSFERS, registry),
        backoff: Backoff::default(),
        retry_at: Default::default(),
        attempts: Backoff::new(Duration::from_secs(2), Duration::from_secs(300)),
        uploads,
    });
    let controller =
        Controller::new(api, watcher::Config::default()).owns(claims, watcher::Config::default());
    tokio::spawn(cancel_orphans(controller.store(), ctx.clone()));
    tokio::spawn(data_source::run(ctx.client.clone()));
    controller
        .with_config(crate::controller_config())
        .run(
            crate::workqueue::measured("datavolume", reconcile),
            error_policy,
            ctx.clone(),
        )
        .for_each(|result| {
            match result {
                Ok((dv, _)) => ctx
                    .backoff
                    .succeeded(&object_key(dv.namespace.as_deref(), &dv.name)),
                // Deleted while queued: nothing left to do.
                Err(controller::Error::ObjectNotFound(_)) => {}
                // Logged by error_policy.
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!("datavolume controller: {e}"),
            }
            futures::future::ready(())
        })
        .await;
}

/// Stops the transfers of DataVolumes that were deleted (reconcile never sees those).
async fn cancel_orphans(store: Store<DataVolume>, ctx: Arc<Context>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for (uid, key) in ctx.transfers.running() {
            let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
            let reference = ObjectRef::new(name).within(namespace);
            let alive = store.get(&reference).is_some_and(|dv| {
                dv.uid() == uid.as_str() && dv.metadata.deletion_timestamp.is_none()
            });
            if !alive {
                tracing::info!("datavolume {key} is gone: stopping its transfer");
                ctx.transfers.cancel(&uid);
            }
        }
    }
}

fn error_policy(dv: Arc<DataVolume>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = object_key(Some(dv.namespace()), dv.name());
    let retry = ctx.backoff.failed(key.clone());
    tracing::warn!("datavolume controller: sync of {key} failed, retrying in {retry:?}: {error}");
    Action::requeue(retry)
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some("virtplane-datavolume-controller".into()),
        ..Default::default()
    }
}

/// Writes the status for `state` unless it shows that already.
async fn report(ctx: &Context, dv: &DataVolume, state: &State, restarts: i64) -> Result<(), Error> {
    let api = Api::<DataVolume>::namespaced(ctx.client.clone(), dv.namespace());
    let new = status::status(state, &dv.status, restarts, &kubevirt_api::meta::now());
    if status::changes(&dv.status, &new) {
        api.patch_status(dv.name(), &params(), &Patch::Merge(&json!({"status": new})))
            .await?;
        // Said when the phase changes, and for each failed attempt.
        let entered = new.phase != Some(dv.phase());
        for (kind, reason, message) in status::events(state) {
            if entered || kind == event_recorder::EventType::Warning {
                ctx.recorder.record(
                    &event_recorder::Recorder::reference(dv),
                    kind,
                    &reason,
                    message,
                );
            }
        }
    }
    Ok(())
}

/// Whether the DataVolume with `uid` is the claim's controlling owner.
fn owned_by(claim: &PersistentVolumeClaim, uid: &str) -> bool {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

async fn reconcile(dv: Arc<DataVolume>, ctx: Arc<Context>) -> Result<Action, Error> {
    if dv.metadata.deletion_timestamp.is_some() {
        ctx.transfers.cancel(dv.uid());
        return Ok(Action::await_change());
    }
    if matches!(dv.phase(), Phase::Succeeded | Phase::Failed) {
        ctx.transfers.forget(dv.uid());
        return Ok(Action::await_change());
    }
    let restarts = dv.status.restart_count.unwrap_or(0);
    match pass(&dv, &ctx, restarts).await? {
        Stop::Quiet(next) => Ok(next),
        Stop::Report {
            state,
            restarts,
            next,
        } => {
            report(&ctx, &dv, &state, restarts).await?;
            Ok(next)
        }
    }
}

/// Where a pass ends: with a state to report (the restart count to show, and when to
/// look again), or quietly.
enum Stop {
    Report {
        state: State,
        restarts: i64,
        next: Action,
    },
    Quiet(Action),
}

fn stop(state: State, restarts: i64, next: Action) -> Stop {
    Stop::Report {
        state,
        restarts,
        next,
    }
}

/// One of a pass's steps: its value, or where the pass ends.
type Step<T> = Result<T, Stop>;

/// Takes a step's value, or ends the pass with what it found.
macro_rules! step {
    ($step:expr) => {
        match $step {
            Ok(value) => value,
            Err(stop) => return Ok(stop),
        }
    };
}

/// From the source to a running transfer: the claim, the transfer's outcome, the next
/// attempt.
async fn pass(dv: &DataVolume, ctx: &Context, restarts: i64) -> Result<Stop, Error> {
    let spec = dv.parsed_spec();
    let (source, transfer) = step!(source_of(ctx, &spec, restarts).await?);
    let claims = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), dv.namespace());
    let target = step!(bound_claim(ctx, dv, &claims, &spec, &source, restarts).await?);
    step!(transfer_outcome(ctx, dv, &claims, transfer, restarts).await?);
    // Nothing runs: start (or restart) the transfer, unless its retry is not due yet.
    let uid = dv.uid();
    if let Some(due) = lock_retry(ctx).get(uid).copied() {
        let now = Instant::now();
        if due > now {
            return Ok(Stop::Quiet(Action::requeue(due - now)));
        }
    }
    lock_retry(ctx).remove(uid);
    // Shown running but not running here: this process restarted mid-transfer, which
    // starts it again from the beginning.
    let running = kubevirt_api::cdi::conditions::RUNNING;
    let interrupted = transfer != Transfer::Upload
        && dv.phase() == transfer.in_progress()
        && dv.condition(running).is_some_and(|c| c.is(running, "True"));
    let restarts = if interrupted { restarts + 1 } else { restarts };
    let job = step!(job_for(ctx, dv, &claims, &source, transfer, restarts).await?);
    let key = object_key(Some(dv.namespace()), dv.name());
    tracing::info!(
        "datavolume {key}: starting its {transfer:?} into {}",
        target.path.display()
    );
    ctx.transfers.start(uid, &key, job, target);
    let state = State::Running {
        transfer,
        claim: dv.name().to_string(),
        progress: "N/A".into(),
    };
    Ok(stop(state, restarts, Action::requeue(PROGRESS_EVERY)))
}

/// The source to bring bytes from (a DataSource resolved to its claim), and so the kind
/// of transfer.
async fn source_of(
    ctx: &Context,
    spec: &Spec,
    restarts: i64,
) -> Result<Step<(Source, Transfer)>, Error> {
    let failed = |message: String| {
        let state = State::Failed {
            transfer: Transfer::Import,
            claim: None,
            message,
        };
        Err(stop(state, restarts, Action::await_change()))
    };
    let source = match &spec.origin {
        Origin::Source(source) => source.clone(),
        Origin::DataSource(reference) => {
            match sources::data_source_claim(&ctx.client, reference).await? {
                Ok(claim) => Source::Pvc(claim),
                Err(message) => {
                    let state = State::WaitingForSource { message };
                    let next = Action::requeue(Duration::from_secs(5));
                    return Ok(Err(stop(state, restarts, next)));
                }
            }
        }
        Origin::Missing => return Ok(failed("the DataVolume names no source".into())),
    };
    let transfer = match &source {
        Source::Http(_) | Source::Registry(_) => Transfer::Import,
        Source::Pvc(_) => Transfer::Clone,
        Source::Upload => Transfer::Upload,
        Source::Blank => Transfer::Blank,
        Source::Unsupported(kind) => {
            return Ok(failed(format!(
                "DataVolume source {kind} is not supported by virtplane"
            )))
        }
    };
    Ok(Ok((source, transfer)))
}

/// The DataVolume's claim, made when missing, and where its bytes go once it is bound.
async fn bound_claim(
    ctx: &Context,
    dv: &DataVolume,
    claims: &Api<PersistentVolumeClaim>,
    spec: &Spec,
    source: &Source,
    restarts: i64,
) -> Result<Step<importer::Target>, Error> {
    let name = dv.name().to_string();
    let pending = |claim| {
        let state = State::ClaimPending { claim };
        Ok(Err(stop(state, restarts, Action::await_change())))
    };
    let Some(claim) = claims.get_opt(&name).await? else {
        let size = match (source, spec.requested_size()) {
            (Source::Pvc(from), None) => sources::claim_size(&ctx.client, from).await?,
            _ => None,
        };
        let profile = sources::claim_properties(&ctx.client, spec).await?;
        let claim = claim_for(dv, spec, size.as_ref(), &profile)?;
        claims.create(&PostParams::default(), &claim).await?;
        return pending(name);
    };
    if !owned_by(&claim, dv.uid()) {
        let state = State::ClaimNotOurs { claim: name };
        let next = Action::requeue(Duration::from_secs(10));
        return Ok(Err(stop(state, restarts, next)));
    }
    match sources::bound_target(&claim) {
        Some(target) => Ok(Ok(target)),
        None => pending(name),
    }
}

/// What the transfer running (or just ended) here shows; `Ok` when none runs.
async fn transfer_outcome(
    ctx: &Context,
    dv: &DataVolume,
    claims: &Api<PersistentVolumeClaim>,
    transfer: Transfer,
    restarts: i64,
) -> Result<Step<()>, Error> {
    let (uid, claim) = (dv.uid(), dv.name().to_string());
    let outcome = match ctx.transfers.look(uid) {
        Look::Idle => return Ok(Ok(())),
        Look::Running(progress) => {
            let state = State::Running {
                transfer,
                claim,
                progress,
            };
            return Ok(Err(stop(state, restarts, Action::requeue(PROGRESS_EVERY))));
        }
        Look::Finished(outcome) => outcome,
    };
    ctx.transfers.forget(uid);
    let state = match outcome {
        Outcome::Done => {
            ctx.attempts.succeeded(&uid.to_string());
            mark_claim_succeeded(claims, &claim).await?;
            State::Succeeded { transfer, claim }
        }
        Outcome::Permanent(message) => State::Failed {
            transfer,
            claim: Some(claim),
            message,
        },
        Outcome::Transient(message) => {
            let wait = ctx.attempts.failed(uid.to_string());
            lock_retry(ctx).insert(uid.to_string(), Instant::now() + wait);
            let state = State::Retrying {
                transfer,
                claim,
                message,
            };
            return Ok(Err(stop(state, restarts + 1, Action::requeue(wait))));
        }
        // Not an outcome to show: the next pass starts it again.
        Outcome::Cancelled => return Ok(Err(Stop::Quiet(Action::requeue(PROGRESS_EVERY)))),
    };
    Ok(Err(stop(state, restarts, Action::await_change())))
}

/// The transfer job for `source`; a blank disk needs none, an upload waits for its image.
async fn job_for(
    ctx: &Context,
    dv: &DataVolume,
    claims: &Api<PersistentVolumeClaim>,
    source: &Source,
    transfer: Transfer,
    restarts: i64,
) -> Result<Step<Job>, Error> {
    let claim = dv.name().to_string();
    let failed = |message| {
        let state = State::Failed {
            transfer,
            claim: Some(dv.name().to_string()),
            message,
        };
        Ok(Err(stop(state, restarts, Action::await_change())))
    };
    let job = match source {
        Source::Blank => {
            // The volume controller allocated the claim's file sparse: it reads as zeros.
            mark_claim_succeeded(claims, &claim).await?;
            let state = State::Succeeded { transfer, claim };
            return Ok(Err(stop(state, restarts, Action::await_change())));
        }
        Source::Upload => match dv.annotations().get(UPLOADED_IMAGE) {
            // Admission keeps the annotation to the upload proxy; only its directory is
            // taken all the same, since the file is removed once imported.
            Some(file) if Path::new(file).starts_with(&ctx.uploads) && Path::new(file).exists() => {
                Job::Upload(PathBuf::from(file))
            }
            _ => {
                let state = State::UploadReady { claim };
                return Ok(Err(stop(state, restarts, Action::await_change())));
            }
        },
        Source::Http(http) => {
            match sources::http_source(&ctx.client, dv.namespace(), http).await? {
                Ok(source) => Job::Http(source),
                Err(message) => return failed(message),
            }
        }
        Source::Pvc(from) => match sources::claim_file(&ctx.client, from).await? {
            Ok(path) => Job::Clone(path),
            Err(message) => {
                let state = State::WaitingForSource { message };
                let next = Action::requeue(Duration::from_secs(5));
                return Ok(Err(stop(state, restarts, next)));
            }
        },
        Source::Registry(registry) => {
            match sources::registry_pull(&ctx.client, dv.namespace(), registry).await? {
                Ok((image, options)) => Job::Registry { image, options },
                Err(message) => return failed(message),
            }
        }
        // Turned away by source_of.
        Source::Unsupported(_) => return Ok(Err(Stop::Quiet(Action::await_change()))),
    };
    Ok(Ok(job))
}

fn lock_retry(
    ctx: &Context,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Instant>> {
    ctx.retry_at
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// CDI's importer and upload pods leave their phase in this annotation of the claim;
/// virtctl's image-upload waits for `Succeeded` there.
const POD_PHASE: &str = "cdi.kubevirt.io/storage.pod.phase";
/// What CDI marks the claim of an upload DataVolume with (virtctl checks it).
const UPLOAD_TARGET: &str = "cdi.kubevirt.io/storage.upload.target";

async fn mark_claim_succeeded(
    claims: &Api<PersistentVolumeClaim>,
    name: &str,
) -> Result<(), Error> {
    let patch = json!({"metadata": {"annotations": {POD_PHASE: "Succeeded"}}});
    claims.patch(name, &params(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// The claim a DataVolume creates: its name, owned by it, with CDI's labels.
fn claim_for(
    dv: &DataVolume,
    spec: &Spec,
    size: Option<&Value>,
    profile: &ClaimProperties,
) -> Result<PersistentVolumeClaim, Error> {
    let claim = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": dv.name(),
            "namespace": dv.namespace(),
            "labels": {
                "app": "containerized-data-importer",
                "app.kubernetes.io/component": "storage",
                "app.kubernetes.io/managed-by": "cdi-controller",
            },
            "annotations": {"cdi.kubevirt.io/storage.contentType": "kubevirt"},
            "ownerReferences": [dv.controller_reference()],
        },
        "spec": spec.claim_spec(size, profile),
    });
    let mut claim = claim;
    if spec.origin == Origin::Source(Source::Upload) {
        claim["metadata"]["annotations"][UPLOAD_TARGET] = json!("");
    }
    Ok(serde_json::from_value(claim)?)
}
