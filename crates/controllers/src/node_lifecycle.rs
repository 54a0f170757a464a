//! Node lifecycle: a node whose agent stops heart-beating becomes NotReady, and the VMIs
//! it ran fail with reason NodeUnresponsive, so nothing waits forever on a vanished host.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};

use crate::resources::{self, condition, str_at};

const MANAGER: &str = "virt-node-lifecycle";

fn last_heartbeat(node: &DynamicObject) -> Option<DateTime<Utc>> {
    let ready = condition(node, "Ready")?;
    let t = ready["lastHeartbeatTime"].as_str()?;
    DateTime::parse_from_rfc3339(t).ok().map(|t| t.with_timezone(&Utc))
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    }
}

pub async fn run(client: Client, grace: Duration) {
    let period = (grace / 4).clamp(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        tokio::time::sleep(period).await;
        if let Err(e) = pass(&client, grace).await {
            tracing::debug!("node lifecycle: {e}");
        }
    }
}

async fn pass(client: &Client, grace: Duration) -> Result<(), crate::Error> {
    let nodes = Api::<DynamicObject>::all_with(client.clone(), &resources::node());
    let grace = chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::seconds(40));
    let now = Utc::now();
    let mut lost = Vec::new();
    for node in nodes.list(&ListParams::default()).await?.items {
        let ready = condition(&node, "Ready").map(|c| c["status"].clone());
        let stale = last_heartbeat(&node).is_none_or(|t| now - t > grace);
        if !stale {
            continue;
        }
        lost.push(node.name_any());
        if ready.as_ref() != Some(&json!("Unknown")) {
            let mut conditions: Vec<Value> = node
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            resources::set_condition(
                &mut conditions,
                json!({"type": "Ready", "status": "Unknown",
                "reason": "NodeStatusUnknown", "message": "Node agent stopped posting node status.",
                "lastHeartbeatTime": condition(&node, "Ready").map(|c| c["lastHeartbeatTime"].clone()).unwrap_or(Value::Null),
                "lastTransitionTime": resources::now_rfc3339()}),
            );
            let patch = json!({"status": {"conditions": conditions}});
            nodes
                .patch_status(&node.name_any(), &params(), &Patch::Merge(&patch))
                .await?;
        }
    }
    if lost.is_empty() {
        return Ok(());
    }
    let vmis = Api::<DynamicObject>::all_with(client.clone(), &resources::virtual_machine_instance());
    let orphaned: Vec<DynamicObject> = vmis
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|v| str_at(v, "/status/nodeName").is_some_and(|n| lost.iter().any(|l| l == n)))
        .collect();
    futures::stream::iter(orphaned)
        .for_each_concurrent(8, |vmi| {
            let client = client.clone();
            async move {
                if let Err(e) = fail_vmi(client, &vmi).await {
                    tracing::debug!("node lifecycle: {}: {e}", vmi.name_any());
                }
            }
        })
        .await;
    Ok(())
}

/// Marks a VMI of a lost node Failed and, if it is being deleted, lets it go.
async fn fail_vmi(client: Client, vmi: &DynamicObject) -> Result<(), crate::Error> {
    let api = Api::<DynamicObject>::namespaced_with(
        client,
        &vmi.namespace().unwrap_or_default(),
        &resources::virtual_machine_instance(),
    );
    let final_phase = matches!(str_at(vmi, "/status/phase"), Some("Succeeded" | "Failed"));
    let mut patch = json!({"metadata": {"resourceVersion": vmi.resource_version()}});
    if !final_phase {
        let mut transitions = vmi
            .data
            .pointer("/status/phaseTransitionTimestamps")
            .cloned()
            .unwrap_or_else(|| json!([]));
        if let Some(list) = transitions.as_array_mut() {
            list.push(json!({"phase": "Failed", "phaseTransitionTimestamp": resources::now_rfc3339()}));
        }
        let mut conditions: Vec<Value> = vmi
            .data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        resources::set_condition(
            &mut conditions,
            json!({"type": "Ready", "status": "False", "reason": "NodeUnresponsive",
            "message": "the node running this VMI stopped responding", "lastProbeTime": null,
            "lastTransitionTime": resources::now_rfc3339()}),
        );
        patch["status"] = json!({"phase": "Failed", "reason": "NodeUnresponsive", "phaseTransitionTimestamps": transitions,
                                 "conditions": conditions});
    }
    if vmi.metadata.deletion_timestamp.is_some() {
        let finalizers: Vec<&String> = vmi
            .finalizers()
            .iter()
            .filter(|f| f.as_str() != kubevirt_api::defaults::VMI_FOREGROUND_FINALIZER)
            .collect();
        patch["metadata"]["finalizers"] = json!(finalizers);
    } else if final_phase {
        return Ok(());
    }
    api.patch(&vmi.name_any(), &params(), &Patch::Merge(&patch)).await?;
    Ok(())
}
