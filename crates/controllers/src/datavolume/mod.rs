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
        .run(reconcile, error_policy, ctx.clone())
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
async fn report(
    api: &Api<DataVolume>,
    dv: &DataVolume,
    state: &State,
    restarts: i64,
) -> Result<(), Error> {
    let new = status::status(state, &dv.status, restarts, &kubevirt_api::meta::now());
    if status::changes(&dv.status, &new) {
        api.patch_status(dv.name(), &params(), &Patch::Merge(&json!({"status": new})))
            .await?;
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
    let namespace = dv.namespace().to_string();
    let name = dv.name().to_string();
    let uid = dv.uid().to_string();
    let key = object_key(Some(&namespace), &name);
    if dv.metadata.deletion_timestamp.is_some() {
        ctx.transfers.cancel(&uid);
        return Ok(Action::await_change());
    }
    let api = Api::<DataVolume>::namespaced(ctx.client.clone(), &namespace);
    let restarts = dv.status.restart_count.unwrap_or(0);
    if matches!(dv.phase(), Phase::Succeeded | Phase::Failed) {
        ctx.transfers.forget(&uid);
        return Ok(Action::await_change());
    }
    let spec = dv.parsed_spec();
    let source = match &spec.origin {
        Origin::Source(source) => source.clone(),
        Origin::DataSource(reference) => {
            match sources::data_source_claim(&ctx.client, reference).await? {
                Ok(claim) => Source::Pvc(claim),
                Err(message) => {
                    report(&api, &dv, &State::WaitingForSource { message }, restarts).await?;
                    return Ok(Action::requeue(Duration::from_secs(5)));
                }
            }
        }
        Origin::Missing => {
            let state = State::Failed {
                transfer: Transfer::Import,
                claim: None,
                message: "the DataVolume names no source".into(),
            };
            report(&api, &dv, &state, restarts).await?;
            return Ok(Action::await_change());
        }
    };
    let transfer = match &source {
        Source::Http(_) | Source::Registry(_) => Transfer::Import,
        Source::Pvc(_) => Transfer::Clone,
        Source::Upload => Transfer::Upload,
        Source::Blank => Transfer::Blank,
        Source::Unsupported(kind) => {
            let state = State::Failed {
                transfer: Transfer::Import,
                claim: None,
                message: format!("DataVolume source {kind} is not supported by virtplane"),
            };
            report(&api, &dv, &state, restarts).await?;
            return Ok(Action::await_change());
        }
    };

    let claims = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &namespace);
    let Some(claim) = claims.get_opt(&name).await? else {
        let size = match (&source, spec.requested_size()) {
            (Source::Pvc(from), None) => sources::claim_size(&ctx.client, from).await?,
            _ => None,
        };
        let profile = sources::claim_properties(&ctx.client, &spec).await?;
        let claim = claim_for(&dv, &spec, size.as_ref(), &profile)?;
        claims.create(&PostParams::default(), &claim).await?;
        report(&api, &dv, &State::ClaimPending { claim: name }, restarts).await?;
        return Ok(Action::await_change());
    };
    if !owned_by(&claim, &uid) {
        report(&api, &dv, &State::ClaimNotOurs { claim: name }, restarts).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    }
    let Some(target) = sources::bound_target(&claim) else {
        report(&api, &dv, &State::ClaimPending { claim: name }, restarts).await?;
        return Ok(Action::await_change());
    };

    match ctx.transfers.look(&uid) {
        Look::Idle => {}
        Look::Running(progress) => {
            let state = State::Running {
                transfer,
                claim: name,
                progress,
            };
            report(&api, &dv, &state, restarts).await?;
            return Ok(Action::requeue(PROGRESS_EVERY));
        }
        Look::Finished(outcome) => {
            ctx.transfers.forget(&uid);
            let state = match outcome {
                Outcome::Done => {
                    ctx.attempts.succeeded(&uid);
                    mark_claim_succeeded(&claims, &name).await?;
                    State::Succeeded {
                        transfer,
                        claim: name,
                    }
                }
                Outcome::Permanent(message) => State::Failed {
                    transfer,
                    claim: Some(name),
                    message,
                },
                Outcome::Transient(message) => {
                    let wait = ctx.attempts.failed(uid.clone());
                    lock_retry(&ctx).insert(uid.clone(), Instant::now() + wait);
                    let state = State::Retrying {
                        transfer,
                        claim: name,
                        message,
                    };
                    report(&api, &dv, &state, restarts + 1).await?;
                    return Ok(Action::requeue(wait));
                }
                Outcome::Cancelled => return Ok(Action::requeue(PROGRESS_EVERY)),
            };
            report(&api, &dv, &state, restarts).await?;
            return Ok(Action::await_change());
        }
    }
    // Nothing runs: start (or restart) the transfer, unless its retry is not due yet.
    if let Some(due) = lock_retry(&ctx).get(&uid).copied() {
        let now = Instant::now();
        if due > now {
            return Ok(Action::requeue(due - now));
        }
    }
    lock_retry(&ctx).remove(&uid);
    // Shown running but not running here: this process restarted mid-transfer, which
    // starts it again from the beginning.
    let running = kubevirt_api::cdi::conditions::RUNNING;
    let interrupted = transfer != Transfer::Upload
        && dv.phase() == transfer.in_progress()
        && dv.condition(running).is_some_and(|c| c.is(running, "True"));
    let restarts = if interrupted { restarts + 1 } else { restarts };
    let job = match &source {
        Source::Blank => {
            // The volume controller allocated the claim's file sparse: it reads as zeros.
            mark_claim_succeeded(&claims, &name).await?;
            report(
                &api,
                &dv,
                &State::Succeeded {
                    transfer,
                    claim: name,
                },
                restarts,
            )
            .await?;
            return Ok(Action::await_change());
        }
        Source::Upload => match dv.annotations().get(UPLOADED_IMAGE) {
            // Admission keeps the annotation to the upload proxy; only its directory is
            // taken all the same, since the file is removed once imported.
            Some(file) if Path::new(file).starts_with(&ctx.uploads) && Path::new(file).exists() => {
                Job::Upload(PathBuf::from(file))
            }
            _ => {
                report(&api, &dv, &State::UploadReady { claim: name }, restarts).await?;
                return Ok(Action::await_change());
            }
        },
        Source::Http(http) => match sources::http_source(&ctx.client, &namespace, http).await? {
            Ok(source) => Job::Http(source),
            Err(message) => {
                let state = State::Failed {
                    transfer,
                    claim: Some(name),
                    message,
                };
                report(&api, &dv, &state, restarts).await?;
                return Ok(Action::await_change());
            }
        },
        Source::Pvc(from) => match sources::claim_file(&ctx.client, from).await? {
            Ok(path) => Job::Clone(path),
            Err(message) => {
                report(&api, &dv, &State::WaitingForSource { message }, restarts).await?;
                return Ok(Action::requeue(Duration::from_secs(5)));
            }
        },
        Source::Registry(registry) => {
            match sources::registry_pull(&ctx.client, &namespace, registry).await? {
                Ok((image, options)) => Job::Registry { image, options },
                Err(message) => {
                    let state = State::Failed {
                        transfer,
                        claim: Some(name),
                        message,
                    };
                    report(&api, &dv, &state, restarts).await?;
                    return Ok(Action::await_change());
                }
            }
        }
        Source::Unsupported(_) => return Ok(Action::await_change()),
    };
    tracing::info!(
        "datavolume {key}: starting its {transfer:?} into {}",
        target.path.display()
    );
    ctx.transfers.start(&uid, &key, job, target);
    let state = State::Running {
        transfer,
        claim: name,
        progress: "N/A".into(),
    };
    report(&api, &dv, &state, restarts).await?;
    Ok(Action::requeue(PROGRESS_EVERY))
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
            "ownerReferences": [{
                "apiVersion": DataVolume::API_VERSION,
                "kind": DataVolume::KIND,
                "name": dv.name(),
                "uid": dv.uid(),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": spec.claim_spec(size, profile),
    });
    let mut claim = claim;
    if spec.origin == Origin::Source(Source::Upload) {
        claim["metadata"]["annotations"][UPLOAD_TARGET] = json!("");
    }
    Ok(serde_json::from_value(claim)?)
}
