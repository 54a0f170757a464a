//! The volume controller: a PersistentVolumeClaim gets a disk file of the requested size
//! in the data dir's volume pool (`DIR/volumes/<namespace>/<claim>`), and loses it when
//! the claim is deleted and no running VMI uses it any more.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::backoff::{object_key, Backoff};
use kubevirt_api::model::VirtualMachineInstance;
use kubevirt_api::names::annotations::VOLUME_PATH;
use kubevirt_api::quantity::Quantity;
use serde_json::json;

use crate::Error;

const PROTECTION: &str = "kubernetes.io/pvc-protection";

struct Context {
    client: Client,
    pool: PathBuf,
    /// Retry delays of claims whose sync failed, by `namespace/name`.
    backoff: Backoff<String>,
}

/// The file behind a claim.
pub fn claim_path(pool: &Path, namespace: &str, claim: &str) -> PathBuf {
    pool.join(namespace).join(claim)
}

pub async fn run(client: Client, pool: PathBuf) {
    let api = Api::<PersistentVolumeClaim>::all(client.clone());
    let ctx = Arc::new(Context {
        client,
        pool,
        backoff: Backoff::default(),
    });
    Controller::new(api, watcher::Config::default())
        .with_config(crate::controller_config())
        .run(
            crate::workqueue::measured("persistentvolumeclaim", reconcile),
            error_policy,
            ctx.clone(),
        )
        .for_each(|result| {
            match result {
                Ok((claim, _)) => ctx
                    .backoff
                    .succeeded(&object_key(claim.namespace.as_deref(), &claim.name)),
                // Deleted while queued: nothing left to retry.
                Err(controller::Error::ObjectNotFound(claim)) => ctx
                    .backoff
                    .succeeded(&object_key(claim.namespace.as_deref(), &claim.name)),
                // Logged by error_policy.
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!("volume controller: {e}"),
            }
            futures::future::ready(())
        })
        .await;
}

fn error_policy(claim: Arc<PersistentVolumeClaim>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = object_key(claim.namespace().as_deref(), &claim.name_any());
    let retry = ctx.backoff.failed(key.clone());
    tracing::warn!("volume controller: sync of {key} failed, retrying in {retry:?}: {error}");
    Action::requeue(retry)
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some("virtplane-volume-controller".into()),
        ..Default::default()
    }
}

/// Whether a VMI that is not finished still refers to the claim.
async fn in_use(client: &Client, namespace: &str, claim: &str) -> Result<bool, Error> {
    let vmis = Api::<VirtualMachineInstance>::namespaced(client.clone(), namespace);
    Ok(vmis
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .any(|vmi| {
            let uses = vmi
                .spec
                .volumes()
                .iter()
                .any(|v| v.source.claim() == Some(claim));
            uses && !vmi.phase().is_final()
        }))
}

async fn reconcile(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    let api = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &namespace);
    let path = claim_path(&ctx.pool, &namespace, &name);
    if claim.metadata.deletion_timestamp.is_some() {
        if !claim.finalizers().iter().any(|f| f == PROTECTION) {
            return Ok(Action::await_change());
        }
        if in_use(&ctx.client, &namespace, &name).await? {
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!("cannot free {}: {e}", path.display());
                return Ok(Action::requeue(Duration::from_secs(5)));
            }
        }
        let finalizers: Vec<&String> = claim
            .finalizers()
            .iter()
            .filter(|f| *f != PROTECTION)
            .collect();
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": claim.resource_version()}});
        api.patch(&name, &params(), &Patch::Merge(&patch)).await?;
        return Ok(Action::await_change());
    }
    let published = claim.annotations().get(VOLUME_PATH).map(String::as_str)
        == Some(path.to_string_lossy().as_ref());
    let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    if bound && path.exists() && published {
        return Ok(Action::await_change());
    }
    let spec = claim.spec.clone().unwrap_or_default();
    let requested = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned();
    let bytes = requested
        .as_ref()
        .and_then(|q| Quantity::parse(&q.0))
        .map_or(0, Quantity::value)
        .max(0) as u64;
    let allocated = std::fs::create_dir_all(path.parent().unwrap_or(&ctx.pool)).and_then(|()| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        // Sparse: the space is taken as the guest writes.
        if file.metadata()?.len() < bytes {
            file.set_len(bytes)?;
        }
        Ok(())
    });
    if let Err(e) = allocated {
        let patch = json!({"status": {"phase": "Pending", "conditions": [{"type": "Resizing", "status": "False",
            "reason": "AllocationFailed", "message": format!("cannot allocate {}: {e}", path.display())}]}});
        api.patch_status(&name, &params(), &Patch::Merge(&patch))
            .await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    }
    let volume = format!("pvc-{}", claim.uid().unwrap_or_default());
    let mut bind = json!({"metadata": {"annotations": {VOLUME_PATH: path}}});
    if spec.volume_name.is_none() {
        bind["spec"] = json!({"volumeName": volume});
    }
    if !published || bind.get("spec").is_some() {
        api.patch(&name, &params(), &Patch::Merge(&bind)).await?;
    }
    let modes = spec
        .access_modes
        .unwrap_or_else(|| vec!["ReadWriteOnce".into()]);
    let status = json!({"status": {"phase": "Bound", "accessModes": modes, "capacity": {"storage": requested}}});
    api.patch_status(&name, &params(), &Patch::Merge(&status))
        .await?;
    Ok(Action::await_change())
}
