//! Drives each VMI bound to one of our nodes: prepare (Scheduling → Scheduled), boot
//! (→ Running), watch the guest (→ Succeeded/Failed), pause/unpause and soft reboot on
//! request, and on deletion stop the guest and let the VMI go.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Map, Value};

use crate::hypervisor::{GuestInfo, Hypervisor, Observed, Prepared, Started, Stopping};
use crate::volume_sources::{SourceError, VolumeSources};

/// Set on a VMI by the pause/unpause subresources: the desired pause state.
const PAUSE_ANNOTATION: &str = "virtplane.io/paused";
/// Set by the softreboot subresource; we record the last one carried out.
const SOFT_REBOOT_ANNOTATION: &str = "virtplane.io/soft-reboot-requested";
const SOFT_REBOOT_DONE_ANNOTATION: &str = "virtplane.io/soft-reboot-done";
const FOREGROUND_FINALIZER: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
const DEFAULT_GRACE_SECONDS: u64 = 30;

struct Context {
    client: Client,
    nodes: HashSet<String>,
    hypervisor: Arc<dyn Hypervisor>,
}

fn vmi_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

pub async fn run(client: Client, nodes: Vec<String>, hypervisor: Arc<dyn Hypervisor>) {
    let api = Api::<DynamicObject>::all_with(client.clone(), &vmi_resource());
    // One node: let the server filter. Several: one watch, filtered here.
    let config = match nodes.as_slice() {
        [only] => watcher::Config::default().fields(&format!("status.nodeName={only}")),
        _ => watcher::Config::default(),
    };
    let changes = hypervisor.changes();
    let ctx = Arc::new(Context {
        client,
        nodes: nodes.into_iter().collect(),
        hypervisor,
    });
    let mut controller = Controller::new_with(api, config, vmi_resource());
    if let Some(changes) = changes {
        let triggers =
            tokio_stream::wrappers::BroadcastStream::new(changes).filter_map(|change| async move {
                let (namespace, name) = change.ok()?;
                Some(ObjectRef::new_with(&name, vmi_resource()).within(&namespace))
            });
        controller = controller.reconcile_on(triggers);
    }
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!("node agent: {e}");
            }
        })
        .await;
}

fn error_policy(_vmi: Arc<DynamicObject>, error: &kube::Error, _ctx: Arc<Context>) -> Action {
    tracing::debug!("node agent reconcile failed: {error}");
    Action::requeue(Duration::from_millis(500))
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn phase(vmi: &DynamicObject) -> &str {
    vmi.data
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn conditions(vmi: &DynamicObject) -> Vec<Value> {
    vmi.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn set_condition(list: &mut Vec<Value>, kind: &str, status: &str, reason: &str, message: &str) {
    let existing = list.iter().position(|c| c["type"] == kind);
    let since = existing
        .and_then(|i| (list[i]["status"] == status).then(|| list[i]["lastTransitionTime"].clone()))
        .unwrap_or_else(|| json!(now()));
    let condition = json!({"type": kind, "status": status, "reason": reason, "message": message,
                           "lastProbeTime": null, "lastTransitionTime": since});
    match existing {
        Some(i) => list[i] = condition,
        None => list.push(condition),
    }
}

/// Status fields for entering `phase`, with its transition timestamp.
fn enter_phase(vmi: &DynamicObject, phase: &str) -> Map<String, Value> {
    let mut transitions = vmi
        .data
        .pointer("/status/phaseTransitionTimestamps")
        .cloned()
        .unwrap_or_else(|| json!([]));
    if let Some(list) = transitions.as_array_mut() {
        list.push(json!({"phase": phase, "phaseTransitionTimestamp": now()}));
    }
    let mut status = Map::new();
    status.insert("phase".into(), json!(phase));
    status.insert("phaseTransitionTimestamps".into(), transitions);
    status
}

struct Writer<'a> {
    api: Api<DynamicObject>,
    vmi: &'a DynamicObject,
}

impl Writer<'_> {
    /// A merge patch guarded by the resourceVersion we acted on: if the VMI changed
    /// meanwhile, we simply see it again.
    async fn patch(&self, mut body: Value) -> Result<Action, kube::Error> {
        body["metadata"]["resourceVersion"] = json!(self.vmi.resource_version());
        let params = PatchParams {
            field_manager: Some("virt-handler".into()),
            ..Default::default()
        };
        match self
            .api
            .patch(&self.vmi.name_any(), &params, &Patch::Merge(&body))
            .await
        {
            Ok(_) => Ok(Action::await_change()),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                Ok(Action::await_change())
            }
            Err(e) => Err(e),
        }
    }
}

fn grace(vmi: &DynamicObject) -> Duration {
    let seconds = vmi
        .data
        .pointer("/spec/terminationGracePeriodSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    Duration::from_secs(seconds)
}

fn running_status(vmi: &DynamicObject, info: &GuestInfo, paused: bool) -> Map<String, Value> {
    let mut status = enter_phase(vmi, "Running");
    let mut list = conditions(vmi);
    if paused {
        set_condition(
            &mut list,
            "Ready",
            "False",
            "GuestNotRunning",
            "the guest is paused",
        );
        set_condition(
            &mut list,
            "Paused",
            "True",
            "PausedByUser",
            "VMI was paused by user",
        );
    } else {
        set_condition(&mut list, "Ready", "True", "", "");
    }
    if info.live_migratable {
        set_condition(&mut list, "LiveMigratable", "True", "", "");
    } else {
        set_condition(
            &mut list,
            "LiveMigratable",
            "False",
            "InterfaceNotLiveMigratable",
            "cannot migrate VMI",
        );
    }
    list.retain(|c| c["type"] != "Synchronized");
    status.insert("conditions".into(), json!(list));
    let interfaces: Vec<Value> = info
        .interfaces
        .iter()
        .map(|(name, mac, ip)| json!({"name": name, "mac": mac, "ipAddress": ip, "ipAddresses": [ip], "infoSource": "domain"}))
        .collect();
    status.insert("interfaces".into(), json!(interfaces));
    status.insert("machine".into(), json!({"type": info.machine}));
    if !info.port_forwards.is_empty() {
        status.insert("portForwards".into(), json!(info.port_forwards));
    }
    status.insert("migrationMethod".into(), json!("BlockMigration"));
    status.insert("volumeStatus".into(), json!(volume_status(vmi)));
    status
}

/// `status.volumeStatus`: every disk's volume with its target device, named in
/// declaration order per prefix (virtio `vda`, `vdb`…; sata, scsi and usb `sda`…; ide
/// `hda`…), as KubeVirt reports them.
fn volume_status(vmi: &DynamicObject) -> Vec<Value> {
    let disks = vmi
        .data
        .pointer("/spec/domain/devices/disks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut used: std::collections::HashMap<&str, u8> = std::collections::HashMap::new();
    disks
        .iter()
        .map(|disk| {
            let bus = ["disk", "cdrom", "lun"]
                .iter()
                .find_map(|kind| disk.pointer(&format!("/{kind}/bus")))
                .and_then(Value::as_str)
                .unwrap_or("virtio");
            let prefix = match bus {
                "virtio" => "vd",
                "ide" => "hd",
                _ => "sd",
            };
            let index = used.entry(prefix).or_insert(0);
            let target = format!("{prefix}{}", char::from(b'a' + (*index % 26)));
            *index += 1;
            json!({"name": disk["name"], "target": target})
        })
        .collect()
}

async fn reconcile(vmi: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    let node = vmi
        .data
        .pointer("/status/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !ctx.nodes.contains(node) {
        return Ok(Action::await_change());
    }
    let api = Api::<DynamicObject>::namespaced_with(
        ctx.client.clone(),
        &vmi.namespace().unwrap_or_default(),
        &vmi_resource(),
    );
    let writer = Writer { api, vmi: &vmi };
    let hv = &ctx.hypervisor;
    let phase = phase(&vmi);
    let is_final = matches!(phase, "Succeeded" | "Failed");

    if vmi.metadata.deletion_timestamp.is_some() {
        if !is_final {
            let succeeded = if phase == "Running" {
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
            let mut status = enter_phase(&vmi, if succeeded { "Succeeded" } else { "Failed" });
            let mut list = conditions(&vmi);
            set_condition(
                &mut list,
                "Ready",
                "False",
                "GuestNotRunning",
                "Guest VM is not reported as running",
            );
            list.retain(|c| c["type"] != "Paused");
            status.insert("conditions".into(), json!(list));
            return writer.patch(json!({"status": status})).await;
        }
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
        "Scheduling" => {
            let sources = match read_sources(&ctx.client, &vmi).await? {
                Ok(sources) => sources,
                Err(SourcesUnusable::Missing(message)) => {
                    // Like a pod waiting for its volume: retried until the object exists.
                    let mut list = conditions(&vmi);
                    set_condition(&mut list, "Synchronized", "False", "FailedMount", &message);
                    writer
                        .patch(json!({"status": {"conditions": list}}))
                        .await?;
                    return Ok(Action::requeue(Duration::from_secs(5)));
                }
                Err(SourcesUnusable::Invalid(message)) => {
                    return writer
                        .patch(json!({"status": failed_status(&vmi, "FailedCreate", &message)}))
                        .await;
                }
            };
            prepare(&vmi, &writer, hv.as_ref(), &sources).await
        }
        "Scheduled" => {
            let sources = match read_sources(&ctx.client, &vmi).await? {
                Ok(sources) => sources,
                Err(SourcesUnusable::Missing(message) | SourcesUnusable::Invalid(message)) => {
                    return writer
                        .patch(json!({"status": failed_status(&vmi, "FailedCreate", &message)}))
                        .await;
                }
            };
            start(&vmi, &writer, hv.as_ref(), &sources).await
        }
        "Running" => running(&vmi, &writer, hv.as_ref()).await,
        _ => {
            if is_final {
                hv.cleanup(&vmi).await;
            }
            Ok(Action::await_change())
        }
    }
}

/// Why the ConfigMaps and Secrets of a VMI's volumes cannot be used (yet).
enum SourcesUnusable {
    /// An object does not exist: it may still be created.
    Missing(String),
    /// What they hold cannot become the volume (a sysprep source without an answer file).
    Invalid(String),
}

/// Reads the objects the VMI's volumes name and checks they can become its disks; the
/// outer error is the API failing, which the controller retries.
async fn read_sources(
    client: &Client,
    vmi: &DynamicObject,
) -> Result<Result<VolumeSources, SourcesUnusable>, kube::Error> {
    let sources = match VolumeSources::read(client, vmi).await {
        Ok(sources) => sources,
        Err(e @ SourceError::Missing { .. }) => {
            return Ok(Err(SourcesUnusable::Missing(e.to_string())))
        }
        Err(SourceError::Api { source, .. }) => return Err(source),
    };
    Ok(crate::sysprep::check(vmi, &sources)
        .map(|()| sources)
        .map_err(SourcesUnusable::Invalid))
}

/// Status fields of a VMI that failed to start: phase Failed, why, and conditions that
/// say it (mirrored onto the VM).
fn failed_status(vmi: &DynamicObject, reason: &str, message: &str) -> Map<String, Value> {
    let mut status = enter_phase(vmi, "Failed");
    status.insert("reason".into(), json!(reason));
    let mut list = conditions(vmi);
    set_condition(&mut list, "Ready", "False", reason, message);
    list.retain(|c| c["type"] != "Synchronized");
    status.insert("conditions".into(), json!(list));
    status
}

/// Scheduling: disks and images ready, or a Synchronized=False condition saying why not.
async fn prepare(
    vmi: &DynamicObject,
    writer: &Writer<'_>,
    hv: &dyn Hypervisor,
    sources: &VolumeSources,
) -> Result<Action, kube::Error> {
    match hv.prepare(vmi, sources).await {
        Prepared::Ready => {
            let mut status = enter_phase(vmi, "Scheduled");
            let mut list = conditions(vmi);
            list.retain(|c| c["type"] != "Synchronized");
            status.insert("conditions".into(), json!(list));
            writer.patch(json!({"status": status})).await
        }
        Prepared::Failed { reason, message } => {
            let mut list = conditions(vmi);
            set_condition(&mut list, "Synchronized", "False", &reason, &message);
            writer
                .patch(json!({"status": {"conditions": list}}))
                .await?;
            Ok(Action::requeue(Duration::from_secs(10)))
        }
    }
}

/// Scheduled: boot the guest, or fail the VMI saying why.
async fn start(
    vmi: &DynamicObject,
    writer: &Writer<'_>,
    hv: &dyn Hypervisor,
    sources: &VolumeSources,
) -> Result<Action, kube::Error> {
    match hv.start(vmi, sources).await {
        Started::Pending(after) => Ok(Action::requeue(after)),
        Started::Running(info) => {
            let paused = vmi
                .data
                .pointer("/spec/startStrategy")
                .and_then(Value::as_str)
                == Some("Paused");
            let mut body = json!({"status": running_status(vmi, &info, paused)});
            if paused {
                body["metadata"] = json!({"annotations": {PAUSE_ANNOTATION: "true"}});
            }
            writer.patch(body).await
        }
        Started::Failed { reason, message } => {
            writer
                .patch(json!({"status": failed_status(vmi, &reason, &message)}))
                .await
        }
    }
}

/// A running VMI: carry out pause and soft-reboot requests, and notice the guest ending.
async fn running(
    vmi: &DynamicObject,
    writer: &Writer<'_>,
    hv: &dyn Hypervisor,
) -> Result<Action, kube::Error> {
    let want_paused = vmi.annotations().get(PAUSE_ANNOTATION).map(String::as_str) == Some("true");
    let is_paused = conditions(vmi)
        .iter()
        .any(|c| c["type"] == "Paused" && c["status"] == "True");
    if want_paused != is_paused {
        if let Err(e) = hv.set_paused(vmi, want_paused).await {
            tracing::warn!("pausing {} failed: {e}", vmi.name_any());
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        let mut list = conditions(vmi);
        if want_paused {
            set_condition(
                &mut list,
                "Paused",
                "True",
                "PausedByUser",
                "VMI was paused by user",
            );
            set_condition(
                &mut list,
                "Ready",
                "False",
                "GuestNotRunning",
                "the guest is paused",
            );
        } else {
            list.retain(|c| c["type"] != "Paused");
            set_condition(&mut list, "Ready", "True", "", "");
        }
        return writer.patch(json!({"status": {"conditions": list}})).await;
    }
    let requested = vmi.annotations().get(SOFT_REBOOT_ANNOTATION);
    if requested.is_some() && requested != vmi.annotations().get(SOFT_REBOOT_DONE_ANNOTATION) {
        if let Err(e) = hv.soft_reboot(vmi).await {
            tracing::warn!("soft reboot of {} failed: {e}", vmi.name_any());
        }
        return writer
            .patch(json!({"metadata": {"annotations": {SOFT_REBOOT_DONE_ANNOTATION: requested}}}))
            .await;
    }
    match hv.observe(vmi).await {
        Observed::Running { recheck } => Ok(Action::requeue(recheck)),
        Observed::Exited { succeeded, reason } => {
            let mut status = enter_phase(vmi, if succeeded { "Succeeded" } else { "Failed" });
            status.insert("reason".into(), json!(reason));
            let mut list = conditions(vmi);
            set_condition(
                &mut list,
                "Ready",
                "False",
                "GuestNotRunning",
                "Guest VM is not reported as running",
            );
            list.retain(|c| c["type"] != "Paused");
            status.insert("conditions".into(), json!(list));
            hv.cleanup(vmi).await;
            writer.patch(json!({"status": status})).await
        }
    }
}
