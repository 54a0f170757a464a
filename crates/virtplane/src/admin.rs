//! Commands that act on the cluster through its API: `virtplane vm migrate-cancel` (as
//! virtctl's migrate-cancel) and `virtplane node drain|cordon|uncordon`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::Taint;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::Api;
use kubevirt_api::model::core::Node;
use kubevirt_api::model::{VirtualMachineInstance, VirtualMachineInstanceMigration};
use kubevirt_api::names::labels::VMI_NAME;
use serde_json::json;

/// The drain taint KubeVirt evacuates nodes for.
pub const DRAIN_TAINT: &str = "kubevirt.io/drain";

/// The kubeconfig given, or the one kubectl would use.
pub async fn config(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig found; pass --kubeconfig")?,
    })
}

fn migrations(client: kube::Client, namespace: &str) -> Api<VirtualMachineInstanceMigration> {
    Api::namespaced(client, namespace)
}

fn nodes(client: kube::Client) -> Api<Node> {
    Api::all(client)
}

/// virtctl's migrate-cancel: deletes the VMI's unfinished migration, which aborts it.
pub async fn migrate_cancel(
    client: kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    let api = migrations(client, namespace);
    let list = api
        .list(&ListParams::default().labels(&format!("{VMI_NAME}={name}")))
        .await
        .context("listing migrations")?;
    let Some(running) = list.items.iter().find(|m| !m.phase().is_final()) else {
        bail!("Found no migration to cancel for {name}");
    };
    api.delete(running.name(), &DeleteParams::default())
        .await
        .with_context(|| format!("deleting migration {}", running.name()))?;
    println!("VM {name} was scheduled to migrate-cancel");
    Ok(())
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some("virtplane".into()),
        ..Default::default()
    }
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec.taints.clone().unwrap_or_default()
}

/// Marks the node unschedulable (`kubectl cordon`) and, with `drain`, adds the drain
/// taint, so that its VMIs are evacuated.
pub async fn cordon(client: kube::Client, node: &str, drain: bool) -> anyhow::Result<()> {
    let api = nodes(client);
    let current = api
        .get(node)
        .await
        .with_context(|| format!("node {node}"))?;
    let mut list = taints(&current);
    if drain && !list.iter().any(|t| t.key == DRAIN_TAINT) {
        list.push(Taint {
            key: DRAIN_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        });
    }
    let body = json!({"metadata": {"resourceVersion": current.metadata.resource_version},
                      "spec": {"unschedulable": true, "taints": list}});
    api.patch(node, &params(), &Patch::Merge(&body))
        .await
        .with_context(|| format!("cordoning node {node}"))?;
    println!("node/{node} cordoned");
    Ok(())
}

/// Undoes `cordon` and `drain`.
pub async fn uncordon(client: kube::Client, node: &str) -> anyhow::Result<()> {
    let api = nodes(client);
    let current = api
        .get(node)
        .await
        .with_context(|| format!("node {node}"))?;
    let list: Vec<Taint> = taints(&current)
        .into_iter()
        .filter(|t| t.key != DRAIN_TAINT)
        .collect();
    let body = json!({"metadata": {"resourceVersion": current.metadata.resource_version},
                      "spec": {"unschedulable": null, "taints": list}});
    api.patch(node, &params(), &Patch::Merge(&body))
        .await
        .with_context(|| format!("uncordoning node {node}"))?;
    println!("node/{node} uncordoned");
    Ok(())
}

/// `drain`: cordon with the drain taint, then wait until no VMI runs on the node.
pub async fn drain(client: kube::Client, node: &str, timeout: Duration) -> anyhow::Result<()> {
    cordon(client.clone(), node, true).await?;
    let vmis: Api<VirtualMachineInstance> = Api::all(client);
    let began = Instant::now();
    let mut last = usize::MAX;
    loop {
        let on_node = vmis
            .list(&ListParams::default().fields(&format!("status.nodeName={node}")))
            .await
            .context("listing the node's VMIs")?
            .items;
        if on_node.is_empty() {
            println!("node/{node} drained");
            return Ok(());
        }
        if on_node.len() != last {
            let names: Vec<String> = on_node
                .iter()
                .map(|v| format!("{}/{}", v.namespace(), v.name()))
                .collect();
            println!(
                "evacuating {} VMI(s) from {node}: {}",
                names.len(),
                names.join(", ")
            );
            last = on_node.len();
        }
        if began.elapsed() > timeout {
            bail!(
                "node {node} still runs {} VMI(s) after {timeout:?} (a VMI with evictionStrategy LiveMigrate that cannot migrate stays)",
                on_node.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
