//! The endpoint-slice controller, as kube-controller-manager's: for every Service with a
//! selector, an EndpointSlice (`discovery.k8s.io/v1`) listing the Pods the selector
//! matches that have an IP (a VMI's virt-launcher Pod carries the VMI's labels, so
//! `virtctl expose` works unchanged), each with its readiness, node and Pod, and the
//! Service's ports resolved against the Pod's (a named `targetPort`). Services without a
//! selector keep whatever slices their owner writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::backoff::{object_key, Backoff};
use serde_json::{json, Value};

use crate::Error;

pub const MANAGER: &str = "endpointslice-controller.k8s.io";
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";

struct Context {
    client: Client,
    pods: Store<Pod>,
    slices: Store<EndpointSlice>,
    backoff: Backoff<String>,
}

/// The slice of a Service: one per Service, named after it.
pub fn slice_name(service: &str) -> String {
    let mut hash: u32 = 2_166_136_261;
    for byte in service.bytes() {
        hash = (hash ^ u32::from(byte)).wrapping_mul(16_777_619);
    }
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = (0..5)
        .map(|i| char::from(alphabet[(hash >> (i * 6)) as usize % alphabet.len()]))
        .collect();
    let mut base = service.to_string();
    base.truncate(57);
    format!("{}-{suffix}", base.trim_end_matches(['-', '.']))
}

/// Whether every `selector` label is on the Pod.
fn selects(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.labels();
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A named `targetPort` resolved against the Pod's container ports.
fn pod_port(pod: &Pod, name: &str) -> Option<i32> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(name))
        .map(|p| p.container_port)
}

/// The slice the Service should have, from the Pods its selector matches.
fn desired(service: &Service, pods: &[Arc<Pod>]) -> Option<Value> {
    let spec = service.spec.as_ref()?;
    let selector = spec.selector.as_ref().filter(|s| !s.is_empty())?;
    let namespace = service.namespace()?;
    let name = service.name_any();
    let matched: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(&namespace))
        .filter(|p| p.metadata.deletion_timestamp.is_none() && selects(selector, p))
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .is_some_and(|ip| !ip.is_empty())
        })
        .collect();
    let publish_not_ready = spec.publish_not_ready_addresses.unwrap_or(false);
    let mut endpoints: Vec<Value> = matched
        .iter()
        .map(|pod| {
            let ready = is_ready(pod);
            let mut endpoint = json!({
                "addresses": [pod.status.as_ref().and_then(|s| s.pod_ip.clone())],
                "conditions": {"ready": ready || publish_not_ready, "serving": ready, "terminating": false},
                "targetRef": {"kind": "Pod", "namespace": namespace, "name": pod.name_any(), "uid": pod.uid()},
            });
            let pod_spec = pod.spec.as_ref();
            if let Some(node) = pod_spec.and_then(|s| s.node_name.clone()) {
                endpoint["nodeName"] = json!(node);
            }
            // A Pod named by hostname in the Service's subdomain gets its own DNS name.
            if let (Some(hostname), Some(subdomain)) = (
                pod_spec.and_then(|s| s.hostname.clone()),
                pod_spec.and_then(|s| s.subdomain.clone()),
            ) {
                if subdomain == name {
                    endpoint["hostname"] = json!(hostname);
                }
            }
            endpoint
        })
        .collect();
    endpoints.sort_by(|a, b| a["addresses"].to_string().cmp(&b["addresses"].to_string()));
    let ports: Vec<Value> = spec
        .ports
        .iter()
        .flatten()
        .map(|port| {
            let target = match &port.target_port {
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => Some(*n),
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(named)) => {
                    matched.iter().find_map(|pod| pod_port(pod, named))
                }
                None => Some(port.port),
            };
            let mut entry = json!({"name": port.name.clone().unwrap_or_default(),
                                   "protocol": port.protocol.clone().unwrap_or_else(|| "TCP".into())});
            if let Some(target) = target {
                entry["port"] = json!(target);
            }
            entry
        })
        .collect();
    Some(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": slice_name(&name),
            "namespace": namespace,
            "labels": {SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGER},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name,
                                 "uid": service.uid(), "controller": true, "blockOwnerDeletion": true}],
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    }))
}

/// Whether the stored slice already lists what `wanted` does.
fn current(stored: &EndpointSlice, wanted: &Value) -> bool {
    let held = serde_json::to_value(stored).unwrap_or_default();
    let endpoints = |v: &Value| v["endpoints"].as_array().cloned().unwrap_or_default();
    let strip = |list: Vec<Value>| -> Vec<Value> {
        list.into_iter()
            .map(|mut e| {
                if let Some(map) = e.as_object_mut() {
                    map.retain(|k, _| {
                        matches!(
                            k.as_str(),
                            "addresses" | "conditions" | "nodeName" | "hostname"
                        )
                    });
                }
                e
            })
            .collect()
    };
    strip(endpoints(&held)) == strip(endpoints(wanted)) && held["ports"] == wanted["ports"]
}

pub async fn run(client: Client) {
    let services = Api::<Service>::all(client.clone());
    let controller = Controller::new(services, watcher::Config::default())
        .with_config(crate::controller_config());
    let service_store = controller.store();
    let (pods, pod_events) = crate::reflect::<Pod>(&client, watcher::Config::default());
    let (slices, slice_events) = crate::reflect::<EndpointSlice>(
        &client,
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGER}")),
    );
    let ctx = Arc::new(Context {
        client,
        pods,
        slices,
        backoff: Backoff::default(),
    });
    // A Pod wakes the Services of its namespace whose selector takes it (or took it: a
    // relabelled Pod is looked at by every Service of its namespace).
    let by_pod = pod_events.flat_map(move |pod: Arc<Pod>| {
        let namespace = pod.namespace().unwrap_or_default();
        let woken: Vec<ObjectRef<Service>> = service_store
            .state()
            .iter()
            .filter(|s| s.namespace().as_deref() == Some(namespace.as_str()))
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect();
        futures::stream::iter(woken)
    });
    let by_slice = slice_events.filter_map(|slice: Arc<EndpointSlice>| async move {
        let service = slice.labels().get(SERVICE_NAME_LABEL)?.clone();
        Some(ObjectRef::new(&service).within(&slice.namespace()?))
    });
    controller
        .reconcile_on(by_pod)
        .reconcile_on(by_slice)
        .run(
            crate::workqueue::measured("endpointslice", reconcile),
            error_policy,
            ctx.clone(),
        )
        .for_each(|result| {
            match result {
                Ok((svc, _)) => ctx
                    .backoff
                    .succeeded(&object_key(svc.namespace.as_deref(), &svc.name)),
                Err(controller::Error::ObjectNotFound(svc)) => ctx
                    .backoff
                    .succeeded(&object_key(svc.namespace.as_deref(), &svc.name)),
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!("endpoint slices: {e}"),
            }
            futures::future::ready(())
        })
        .await;
}

fn error_policy(service: Arc<Service>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = object_key(service.namespace().as_deref(), &service.name_any());
    let retry = ctx.backoff.failed(key.clone());
    tracing::warn!("endpoint slices: sync of {key} failed, retrying in {retry:?}: {error}");
    Action::requeue(retry)
}

async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    if service.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(wanted) = desired(&service, &ctx.pods.state()) else {
        return Ok(Action::await_change());
    };
    let namespace = service.namespace().unwrap_or_default();
    let name = slice_name(&service.name_any());
    if let Some(stored) = ctx.slices.get(&ObjectRef::new(&name).within(&namespace)) {
        if current(&stored, &wanted) {
            return Ok(Action::await_change());
        }
    }
    let params = PatchParams::apply(MANAGER).force();
    Api::<EndpointSlice>::namespaced(ctx.client.clone(), &namespace)
        .patch(&name, &params, &Patch::Apply(&wanted))
        .await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, labels: Value, ip: Option<&str>, ready: bool) -> Arc<Pod> {
        let mut pod = json!({"metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}"), "labels": labels},
                             "spec": {"nodeName": "n1", "containers": [{"name": "compute", "ports": [{"name": "ssh", "containerPort": 22}]}]},
                             "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
        if let Some(ip) = ip {
            pod["status"]["podIP"] = json!(ip);
        }
        Arc::new(serde_json::from_value(pod).unwrap())
    }

    #[test]
    fn a_slice_lists_the_selected_pods_with_ips() {
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "s1"},
            "spec": {"selector": {"app": "web"}, "ports": [
                {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "ssh", "port": 2222, "targetPort": "ssh", "protocol": "TCP"}]}}))
        .unwrap();
        let pods = vec![
            pod("a", json!({"app": "web"}), Some("10.244.0.2"), true),
            pod("b", json!({"app": "web"}), Some("10.244.0.3"), false),
            pod("c", json!({"app": "db"}), Some("10.244.0.4"), true),
            pod("d", json!({"app": "web"}), None, false),
        ];
        let slice = desired(&service, &pods).unwrap();
        let addresses: Vec<&Value> = slice["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["addresses"][0])
            .collect();
        assert_eq!(addresses, [&json!("10.244.0.2"), &json!("10.244.0.3")]);
        assert_eq!(slice["endpoints"][0]["conditions"]["ready"], true);
        assert_eq!(slice["endpoints"][1]["conditions"]["ready"], false);
        assert_eq!(slice["ports"][0]["port"], 8080);
        assert_eq!(slice["ports"][1]["port"], 22);
        assert_eq!(slice["metadata"]["labels"][SERVICE_NAME_LABEL], "web");
    }
}
