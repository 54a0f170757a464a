//! Registering a node and keeping it alive with heartbeats.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::Api;
use kubevirt_api::names::{annotations, labels};
use serde_json::json;

pub fn node_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Node"), "nodes")
}

use kubevirt_api::meta::now;

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some("virt-handler".into()),
        ..Default::default()
    }
}

/// What a node says about itself.
pub struct NodeSpec<'a> {
    pub name: &'a str,
    pub hypervisor: &'a str,
    /// How guests' vCPUs run here, for backends that run any.
    pub accel: Option<&'a str>,
    pub millicpu: i64,
    pub memory: i64,
    pub address: &'a str,
    /// The console endpoint, for agents that serve one.
    pub endpoint: Option<&'a crate::endpoint::Published>,
    /// The HostToolsReady condition, for backends that run host tools.
    pub host_tools: Option<&'a serde_json::Value>,
    /// How the node networks its guests, for backends that run guests.
    pub network: Option<&'a crate::pod_network::Report>,
}

/// The conditions a node agent writes: Ready, and HostToolsReady where it has one. (A
/// merge patch replaces the list, so each write carries both.)
fn conditions(
    ready_since: &str,
    host_tools: Option<&serde_json::Value>,
    network: Option<&serde_json::Value>,
) -> serde_json::Value {
    let mut list = vec![ready_condition(ready_since)];
    list.extend(host_tools.cloned());
    list.extend(network.cloned());
    json!(list)
}

fn ready_condition(since: &str) -> serde_json::Value {
    json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
           "message": "virtplane node agent is posting ready status",
           "lastHeartbeatTime": now(), "lastTransitionTime": since})
}

/// Creates the Node if it does not exist and reports capacity and readiness.
pub async fn register(client: &kube::Client, spec: &NodeSpec<'_>) -> Result<(), kube::Error> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &node_resource());
    let node: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": spec.name, "labels": {
            "kubernetes.io/hostname": spec.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            labels::SCHEDULABLE: "true"}},
        "spec": {},
    }))
    .map_err(kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e),
    }
    // Also on a Node that existed: the agent may have restarted with another backend or
    // accelerator.
    let labels = json!({"metadata": {"labels": {
        labels::HYPERVISOR: spec.hypervisor, labels::ACCEL: spec.accel,
        crate::pod_network::MODE_LABEL: spec.network.map(crate::pod_network::Report::label)}}});
    api.patch(spec.name, &params(), &Patch::Merge(&labels))
        .await?;
    if let Some(endpoint) = spec.endpoint {
        let fingerprint = json!({"metadata": {"annotations": {
            crate::endpoint::FINGERPRINT_ANNOTATION: endpoint.fingerprint}}});
        api.patch(spec.name, &params(), &Patch::Merge(&fingerprint))
            .await?;
    }
    let capacity = json!({"cpu": format!("{}m", spec.millicpu), "memory": spec.memory.to_string(), "pods": "110"});
    let mut status = json!({"status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": conditions(&now(), spec.host_tools, spec.network.map(crate::pod_network::Report::condition).as_ref()),
        "addresses": [{"type": "InternalIP", "address": spec.address}, {"type": "Hostname", "address": spec.name}],
        "nodeInfo": {"kubeletVersion": concat!("virtplane-", env!("CARGO_PKG_VERSION")), "operatingSystem": "linux",
                     "architecture": "amd64", "containerRuntimeVersion": spec.hypervisor,
                     "osImage": os_image(), "kernelVersion": kernel_version()},
    }});
    if let Some(endpoint) = spec.endpoint {
        // Where the API server dials the agent, as a kubelet publishes its port.
        status["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": endpoint.port}});
    }
    api.patch_status(spec.name, &params(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// The host's operating system as kubelet reports it: `PRETTY_NAME` of /etc/os-release.
fn os_image() -> String {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    release
        .lines()
        .find_map(|line| line.strip_prefix("PRETTY_NAME="))
        .map(|name| name.trim_matches('"').to_string())
        .unwrap_or_default()
}

/// The kernel's release (`uname -r`).
fn kernel_version() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|release| release.trim().to_string())
        .unwrap_or_default()
}

/// How often the node's `kubevirt.io/heartbeat` annotation is refreshed, as virt-handler
/// does: once a minute. The Ready condition carries the heartbeat that counts.
const ANNOTATION_EVERY: Duration = Duration::from_secs(60);

/// The Ready condition's `lastTransitionTime` to report for `name`: kept from the node as
/// it is when it is Ready already (an agent that restarted), else now.
async fn ready_since(api: &Api<DynamicObject>, name: &str) -> Result<String, kube::Error> {
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|n| {
            let ready = n
                .data
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")?
                .clone();
            (ready["status"] == "True")
                .then(|| ready["lastTransitionTime"].as_str().map(str::to_string))
                .flatten()
        })
        .unwrap_or_else(now))
}

/// Refreshes the Ready condition's heartbeat every `interval` (one status patch per node)
/// and the heartbeat annotation every `ANNOTATION_EVERY`, until the process ends. With
/// 1,000 nodes on one agent every request counts, so the Ready condition's transition
/// time is read once and again only after a beat failed (the node may have been marked
/// NotReady meanwhile).
pub async fn heartbeat(
    client: kube::Client,
    names: Vec<String>,
    interval: Duration,
    mut host_tools: Option<crate::host_tools::Report>,
    network: Option<serde_json::Value>,
) {
    let api = Api::<DynamicObject>::all_with(client, &node_resource());
    let mut since: HashMap<String, String> = HashMap::new();
    let mut annotated: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::time::sleep(interval).await;
        let host_tools = host_tools.as_mut().map(|report| report.refresh().clone());
        for name in &names {
            let ready_since = match since.get(name) {
                Some(since) => since.clone(),
                None => match ready_since(&api, name).await {
                    Ok(since) => since,
                    // A transition time made up now would stay: this beat waits instead.
                    Err(e) => {
                        tracing::warn!("heartbeat of node {name} failed: reading it: {e}");
                        continue;
                    }
                },
            };
            let status = json!({"status": {"conditions": conditions(&ready_since, host_tools.as_ref(), network.as_ref())}});
            let mut result = api
                .patch_status(name, &params(), &Patch::Merge(&status))
                .await
                .map(drop);
            let due = annotated
                .get(name)
                .is_none_or(|at| at.elapsed() >= ANNOTATION_EVERY);
            if result.is_ok() && due {
                // The status subresource ignores metadata: the annotation goes through
                // the node itself.
                let annotation =
                    json!({"metadata": {"annotations": {annotations::HEARTBEAT: now()}}});
                result = api
                    .patch(name, &params(), &Patch::Merge(&annotation))
                    .await
                    .map(drop);
                if result.is_ok() {
                    annotated.insert(name.clone(), Instant::now());
                }
            }
            match result {
                Ok(()) => {
                    since.insert(name.clone(), ready_since);
                }
                Err(e) => {
                    since.remove(name);
                    tracing::warn!("heartbeat of node {name} failed: {e}");
                }
            }
        }
    }
}
