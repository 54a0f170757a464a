//! `metrics.k8s.io/v1beta1` NodeMetrics and PodMetrics, as metrics-server serves them
//! (`kubectl top nodes|pods`), from what each node's agent reads of its host and guests
//! (`/v1/usage`). A launcher Pod has one container, `compute`, which uses what its
//! guest's QEMU does. Nodes that do not answer are left out, as metrics-server does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use apimachinery::status::{GroupResource, Status};
use metrics::usage::{Report, Used, USAGE_PATH};
use serde_json::{json, Value};

use crate::agent_dial::AgentDialer;
use crate::registry::{ListRequest, Registry};
use crate::request::ResourcePath;

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";
/// How long an agent may take (its first answer in a while waits a second for a rate).
const AGENT_TIMEOUT: Duration = Duration::from_secs(5);
/// The label KubeVirt puts on a launcher Pod with its VMI's name.
const VMI_NAME_LABEL: &str = "vm.kubevirt.io/name";

/// Answers a GET of `nodes`, `nodes/NAME`, `pods` or `pods/NAME` (in a namespace or in
/// all), the objects chosen by `selection` (label and field selectors of the Nodes or Pods).
pub async fn serve(
    registry: &Registry,
    agents: &AgentDialer,
    path: &ResourcePath,
    selection: &ListRequest,
) -> Result<Value, Status> {
    let (plural, kind) = match path.resource.as_str() {
        "nodes" => ("nodes", "NodeMetrics"),
        "pods" => ("pods", "PodMetrics"),
        _ => return Err(not_found_path()),
    };
    if path.subresource.is_some() {
        return Err(not_found_path());
    }
    let reg = registry
        .find("", "v1", plural)
        .ok_or_else(|| Status::internal(format!("no {plural} registration")))?;
    let objects: Vec<Value> = match &path.name {
        Some(name) => match registry.get(&reg, path.namespace.as_deref(), name).await {
            Ok(object) => vec![object],
            Err(status) if status.code == 404 => Vec::new(),
            Err(status) => return Err(status),
        },
        None => registry
            .list(&reg, selection)
            .await?
            .items
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect(),
    };
    let nodes: BTreeSet<String> = objects
        .iter()
        .filter_map(|o| match plural {
            "nodes" => o.pointer("/metadata/name"),
            _ => o.pointer("/spec/nodeName"),
        })
        .filter_map(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    let reports = reports(registry, agents, nodes).await;
    let items: Vec<Value> = objects
        .iter()
        .filter_map(|o| match plural {
            "nodes" => node_metrics(o, &reports),
            _ => pod_metrics(o, &reports),
        })
        .collect();
    let body = match &path.name {
        Some(name) => {
            let mut item = items.into_iter().next().ok_or_else(|| {
                let shown = match &path.namespace {
                    Some(namespace) => format!("{namespace}/{name}"),
                    None => name.clone(),
                };
                Status::not_found(&GroupResource::new(GROUP, &kind.to_lowercase()), &shown)
            })?;
            item["kind"] = json!(kind);
            item["apiVersion"] = json!(format!("{GROUP}/{VERSION}"));
            item
        }
        None => json!({
            "kind": format!("{kind}List"),
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "metadata": {},
            "items": items,
        }),
    };
    Ok(body)
}

fn not_found_path() -> Status {
    Status::failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// Each node's report, asked of all at once; a node that cannot answer is logged and
/// left out.
async fn reports(
    registry: &Registry,
    agents: &AgentDialer,
    nodes: BTreeSet<String>,
) -> HashMap<String, Report> {
    let asked = nodes.into_iter().map(|node| async move {
        let answer = tokio::time::timeout(
            AGENT_TIMEOUT,
            agents.fetch(registry, &node, "resource usage", USAGE_PATH),
        )
        .await;
        let report = match answer {
            Ok(Ok(bytes)) => serde_json::from_slice::<Report>(&bytes)
                .map_err(|e| format!("its answer does not parse: {e}")),
            Ok(Err(status)) => Err(status.message),
            Err(_) => Err(format!("no answer within {AGENT_TIMEOUT:?}")),
        };
        match report {
            Ok(report) => Some((node, report)),
            Err(why) => {
                tracing::debug!("metrics.k8s.io: the usage of node {node}: {why}");
                None
            }
        }
    });
    futures::future::join_all(asked)
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn usage(used: &Used) -> Value {
    json!({
        "cpu": format!("{}n", used.cpu_nanocores),
        "memory": format!("{}Ki", used.memory_bytes / 1024),
    })
}

/// metrics-server's window, a Go duration.
fn window(report: &Report) -> String {
    format!("{}s", (report.window_seconds * 1000.0).round() / 1000.0)
}

/// The metadata metrics-server gives: the object's name, namespace and labels, created now.
fn metadata(object: &Value, report: &Report) -> Value {
    let mut metadata = json!({
        "name": object.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        "creationTimestamp": report.timestamp,
    });
    if let Some(namespace) = object.pointer("/metadata/namespace") {
        metadata["namespace"] = namespace.clone();
    }
    if let Some(labels) = object.pointer("/metadata/labels") {
        metadata["labels"] = labels.clone();
    }
    metadata
}

fn node_metrics(node: &Value, reports: &HashMap<String, Report>) -> Option<Value> {
    let report = reports.get(node.pointer("/metadata/name")?.as_str()?)?;
    let used = report.node.as_ref()?;
    Some(json!({
        "metadata": metadata(node, report),
        "timestamp": report.timestamp,
        "window": window(report),
        "usage": usage(used),
    }))
}

fn pod_metrics(pod: &Value, reports: &HashMap<String, Report>) -> Option<Value> {
    let report = reports.get(pod.pointer("/spec/nodeName")?.as_str()?)?;
    let namespace = pod.pointer("/metadata/namespace")?.as_str()?;
    let labels: BTreeMap<String, String> =
        serde_json::from_value(pod.pointer("/metadata/labels")?.clone()).ok()?;
    let vmi = labels.get(VMI_NAME_LABEL)?;
    let guest = report
        .guests
        .iter()
        .find(|g| g.namespace == namespace && &g.name == vmi)?;
    Some(json!({
        "metadata": metadata(pod, report),
        "timestamp": report.timestamp,
        "window": window(report),
        "containers": [{"name": "compute", "usage": usage(&guest.used)}],
    }))
}
