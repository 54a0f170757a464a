//! virt-launcher Pods: each VMI placed on a node has a core v1 Pod there, as in KubeVirt,
//! named `virt-launcher-<vmi>-<suffix>`, carrying the VMI's labels and KubeVirt's own,
//! owned by the VMI (so deleting the VMI deletes it), with its phase, IP and readiness
//! following the VMI's. The Pod is the VMI seen as a Pod, for the tools that look for
//! Pods (`kubectl get pods -o wide`, Services' selectors, `kubectl logs`): the node agent
//! makes the sandbox and runs the guest; nothing starts because a Pod exists. After a
//! migration the VMI has a Pod on its new node and the old one goes.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, reflector, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::backoff::{object_key, Backoff};
use kubevirt_api::model::core::Node;
use kubevirt_api::model::{VirtualMachineInstance, VmiPhase};
use serde_json::{json, Map, Value};

use crate::Error;

const MANAGER: &str = "virt-controller";
/// When every cached VMI is looked at: soon after the start, then now and then.
const RESYNC_FIRST: std::time::Duration = std::time::Duration::from_secs(3);
const RESYNC: std::time::Duration = std::time::Duration::from_secs(300);
/// KubeVirt's labels on a launcher Pod.
pub const APP_LABEL: &str = "kubevirt.io";
pub const APP_LAUNCHER: &str = "virt-launcher";
pub const CREATED_BY_LABEL: &str = "kubevirt.io/created-by";
pub const VM_NAME_LABEL: &str = "vm.kubevirt.io/name";
pub use kubevirt_api::names::launcher_pod as pod_name;

/// The containers a launcher Pod lists: the guest's, and its serial log, as KubeVirt's.
pub const COMPUTE: &str = "compute";
pub const CONSOLE_LOG: &str = "guest-console-log";

/// The Pod phase of a VMI phase.
fn pod_phase(phase: VmiPhase) -> &'static str {
    match phase {
        VmiPhase::Running => "Running",
        VmiPhase::Succeeded => "Succeeded",
        VmiPhase::Failed => "Failed",
        VmiPhase::Unknown => "Unknown",
        _ => "Pending",
    }
}

/// The node of a VMI that has one (scheduled, or later).
fn placed_on(vmi: &VirtualMachineInstance) -> Option<&str> {
    let node = vmi.node_name().filter(|n| !n.is_empty())?;
    (!matches!(vmi.phase(), VmiPhase::Pending | VmiPhase::Scheduling)).then_some(node)
}

/// The Pod's IP: the guest's interface address on the pod network, once it runs.
fn pod_ip(vmi: &VirtualMachineInstance) -> Option<String> {
    if vmi.phase() != VmiPhase::Running {
        return None;
    }
    vmi.status
        .interfaces
        .as_ref()?
        .first()?
        .ip_address
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// The Pod's status, from the VMI's.
fn pod_status(vmi: &VirtualMachineInstance, host_ip: Option<&str>, since: &str) -> Value {
    let phase = pod_phase(vmi.phase());
    let running = phase == "Running";
    let ready = if running { "True" } else { "False" };
    let condition = |kind: &str, status: &str| json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": since});
    let container = |name: &str, image: &str| {
        let state = match phase {
            "Running" => json!({"running": {"startedAt": since}}),
            "Succeeded" | "Failed" => json!({"terminated": {
                "exitCode": if phase == "Succeeded" { 0 } else { 1 },
                "reason": if phase == "Succeeded" { "Completed" } else { "Error" },
                "startedAt": since, "finishedAt": since}}),
            _ => json!({"waiting": {"reason": "ContainerCreating"}}),
        };
        json!({"name": name, "image": image, "imageID": "", "ready": running,
               "restartCount": 0, "started": running, "state": state})
    };
    let mut status = json!({
        "phase": phase,
        "conditions": [
            condition("PodReadyToStartContainers", "True"),
            condition("Initialized", "True"),
            condition("Ready", ready),
            condition("ContainersReady", ready),
            condition("PodScheduled", "True"),
        ],
        "containerStatuses": [container(COMPUTE, LAUNCHER_IMAGE), container(CONSOLE_LOG, LAUNCHER_IMAGE)],
        "qosClass": "Burstable",
        "startTime": since,
    });
    if let Some(host_ip) = host_ip {
        status["hostIP"] = json!(host_ip);
        status["hostIPs"] = json!([{"ip": host_ip}]);
    }
    if let Some(ip) = pod_ip(vmi) {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    status
}

/// What the Pod's containers say they run (virtplane runs QEMU itself, from the node).
const LAUNCHER_IMAGE: &str = "virtplane.io/virt-launcher:builtin";

/// The VMI's labels and KubeVirt's own: what Services select launcher Pods by.
fn pod_labels(vmi: &VirtualMachineInstance) -> Map<String, Value> {
    let mut labels: Map<String, Value> = vmi
        .labels()
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    labels.insert(APP_LABEL.into(), json!(APP_LAUNCHER));
    labels.insert(CREATED_BY_LABEL.into(), json!(vmi.uid()));
    labels.insert(VM_NAME_LABEL.into(), json!(vmi.name_any()));
    labels
}

/// The whole Pod of `vmi` on `node`.
fn pod(vmi: &VirtualMachineInstance, node: &str, host_ip: Option<&str>, since: &str) -> Value {
    let name = vmi.name_any();
    let labels = pod_labels(vmi);
    let requests = vmi
        .spec
        .domain
        .as_ref()
        .and_then(|d| d.resources.as_ref())
        .and_then(|r| r.requests.clone())
        .map_or_else(|| json!({}), |r| json!(r));
    // The interfaces' ports, as KubeVirt lists them on the compute container (a
    // Service's named targetPort resolves against them).
    let ports: Vec<Value> = vmi
        .spec
        .interfaces()
        .iter()
        .flat_map(|iface| iface.ports.iter())
        .map(|p| {
            let mut port = json!({"containerPort": p.port,
                                  "protocol": p.protocol.to_ascii_uppercase()});
            if let Some(name) = &p.name {
                port["name"] = json!(name);
            }
            port
        })
        .collect();
    let mut spec = json!({
        "nodeName": node,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": vmi.spec.termination_grace_period_seconds.unwrap_or(30),
        "containers": [
            {"name": COMPUTE, "image": LAUNCHER_IMAGE, "command": ["/usr/bin/virt-launcher"],
             "resources": {"requests": requests}, "ports": ports},
            {"name": CONSOLE_LOG, "image": LAUNCHER_IMAGE, "command": ["/usr/bin/virt-tail"]},
        ],
    });
    if let Some(hostname) = &vmi.spec.hostname {
        spec["hostname"] = json!(hostname);
    }
    if let Some(subdomain) = &vmi.spec.subdomain {
        spec["subdomain"] = json!(subdomain);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(&name, vmi.uid(), node),
            "namespace": vmi.namespace(),
            "labels": labels,
            "annotations": {"kubevirt.io/domain": name,
                            "kubectl.kubernetes.io/default-container": COMPUTE},
            "ownerReferences": [{
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "name": name, "uid": vmi.uid(), "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
        "status": pod_status(vmi, host_ip, since),
    })
}

/// The launcher Pods of each VMI, by VMI uid, from the Pod watch.
type PodsByOwner = Arc<Mutex<HashMap<String, BTreeSet<(String, String)>>>>;

struct Context {
    client: Client,
    vmis: Store<VirtualMachineInstance>,
    nodes: Store<Node>,
    pods: Store<Pod>,
    by_owner: PodsByOwner,
    backoff: Backoff<String>,
}

fn owner_uid(pod: &Pod) -> Option<String> {
    pod.labels().get(CREATED_BY_LABEL).cloned()
}

/// The VMI a launcher Pod belongs to.
fn owner_ref(pod: &Pod) -> Option<ObjectRef<VirtualMachineInstance>> {
    let owner = pod
        .owner_references()
        .iter()
        .find(|o| o.kind == "VirtualMachineInstance")?;
    Some(ObjectRef::new(&owner.name).within(&pod.namespace()?))
}

pub async fn run(client: Client, shared: crate::informer::Shared) {
    let selector = format!("{APP_LABEL}={APP_LAUNCHER}");
    let writer = reflector::store::Writer::default();
    let pods = writer.as_reader();
    let by_owner = PodsByOwner::default();
    let index = by_owner.clone();
    let pod_events = reflector(
        writer,
        watcher(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().labels(&selector),
        ),
    )
    .default_backoff()
    .touched_objects()
    .filter_map(move |event| {
        let found = event.ok().and_then(|pod| {
            let uid = owner_uid(&pod)?;
            let key = (pod.namespace()?, pod.name_any());
            let mut index = index.lock().unwrap_or_else(|p| p.into_inner());
            if pod.metadata.deletion_timestamp.is_some() {
                if let Some(set) = index.get_mut(&uid) {
                    set.remove(&key);
                }
            } else {
                index.entry(uid).or_default().insert(key);
            }
            owner_ref(&pod)
        });
        futures::future::ready(found)
    });
    let ctx = Arc::new(Context {
        client,
        vmis: shared.vmis.store(),
        nodes: shared.nodes.store(),
        pods,
        by_owner,
        backoff: Backoff::default(),
    });
    let vmis = shared
        .vmis
        .follow(|vmi: &VirtualMachineInstance| Some(Ok::<_, watcher::Error>(vmi.clone())));
    // The VMIs cached before this controller followed the informer, and a resync.
    let resync = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval_at(
        tokio::time::Instant::now() + RESYNC_FIRST,
        RESYNC,
    ))
    .map(|_| ());
    Controller::for_stream(vmis, ctx.vmis.clone())
        .reconcile_on(pod_events)
        .reconcile_all_on(resync)
        .with_config(crate::controller_config())
        .run(
            crate::workqueue::measured("launcher-pod", reconcile),
            error_policy,
            ctx.clone(),
        )
        .for_each(|result| {
            match result {
                Ok((vmi, _)) => ctx
                    .backoff
                    .succeeded(&object_key(vmi.namespace.as_deref(), &vmi.name)),
                Err(controller::Error::ObjectNotFound(vmi)) => ctx
                    .backoff
                    .succeeded(&object_key(vmi.namespace.as_deref(), &vmi.name)),
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!("launcher pods: {e}"),
            }
            futures::future::ready(())
        })
        .await;
}

fn error_policy(vmi: Arc<VirtualMachineInstance>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = object_key(Some(vmi.namespace()), &vmi.name_any());
    let retry = ctx.backoff.failed(key.clone());
    tracing::warn!("launcher pods: sync of {key} failed, retrying in {retry:?}: {error}");
    Action::requeue(retry)
}

fn host_ip(nodes: &Store<Node>, node: &str) -> Option<String> {
    let node = nodes.get(&ObjectRef::new(node))?;
    node.status
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

/// Whether the stored Pod's status already says what `wanted` says.
fn status_current(pod: &Pod, wanted: &Value) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let ready = |status: &Value| {
        status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .map(|c| c["status"].clone())
    };
    let held = serde_json::to_value(status).unwrap_or_default();
    held["phase"] == wanted["phase"]
        && held["podIP"] == wanted["podIP"]
        && held["hostIP"] == wanted["hostIP"]
        && ready(&held) == ready(wanted)
}

async fn reconcile(vmi: Arc<VirtualMachineInstance>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = vmi.namespace().to_string();
    let api = Api::<Pod>::namespaced(ctx.client.clone(), &namespace);
    let wanted_node = placed_on(&vmi).filter(|_| vmi.metadata.deletion_timestamp.is_none());
    let wanted_name = wanted_node.map(|node| pod_name(&vmi.name_any(), vmi.uid(), node));
    // Pods of this VMI on other nodes (it moved) or of a VMI no longer placed: gone.
    let held: Vec<(String, String)> = ctx
        .by_owner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(vmi.uid())
        .map(|set| set.iter().cloned().collect())
        .unwrap_or_default();
    for (pod_namespace, name) in held {
        if Some(&name) != wanted_name.as_ref() && pod_namespace == namespace {
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let (Some(node), Some(name)) = (wanted_node, wanted_name) else {
        return Ok(Action::await_change());
    };
    let host_ip = host_ip(&ctx.nodes, node);
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match ctx.pods.get(&ObjectRef::new(&name).within(&namespace)) {
        Some(existing) => {
            let since = existing
                .status
                .as_ref()
                .and_then(|s| serde_json::to_value(&s.start_time).ok())
                .and_then(|t| t.as_str().map(str::to_string))
                .unwrap_or_else(kubevirt_api::meta::now);
            let wanted = pod_status(&vmi, host_ip.as_deref(), &since);
            // Labels follow the VMI's (a Service selects by them); removed ones go too.
            let labels = pod_labels(&vmi);
            let held = existing.labels();
            let stale = held.len() != labels.len()
                || labels
                    .iter()
                    .any(|(k, v)| held.get(k).map(String::as_str) != v.as_str());
            if stale {
                let mut patch: Map<String, Value> =
                    held.keys().map(|k| (k.clone(), Value::Null)).collect();
                patch.extend(labels);
                api.patch(
                    &name,
                    &params,
                    &Patch::Merge(&json!({"metadata": {"labels": patch}})),
                )
                .await?;
            }
            if !status_current(&existing, &wanted) {
                api.patch_status(&name, &params, &Patch::Merge(&json!({"status": wanted})))
                    .await?;
            }
        }
        None => {
            let now = kubevirt_api::meta::now();
            let pod: Pod = serde_json::from_value(pod(&vmi, node, host_ip.as_deref(), &now))?;
            let post = PostParams {
                field_manager: Some(MANAGER.into()),
                ..Default::default()
            };
            match api.create(&post, &pod).await {
                Ok(_) => {}
                // Made already, and the cache has not seen it: its event brings us back.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_per_node_and_fit() {
        let a = pod_name("vm1", "0a1b", "node-a");
        assert!(a.starts_with("virt-launcher-vm1-"), "{a}");
        assert_eq!(a.len(), "virt-launcher-vm1-".len() + 5);
        assert_eq!(a, pod_name("vm1", "0a1b", "node-a"));
        assert_ne!(a, pod_name("vm1", "0a1b", "node-b"));
        let long = pod_name(&"x".repeat(253), "u", "n");
        assert!(long.len() <= 63, "{long}");
    }
}
