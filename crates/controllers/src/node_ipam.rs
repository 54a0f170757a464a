//! Node IPAM, as kube-controller-manager's range allocator: every Node gets
//! `spec.podCIDR` (and `spec.podCIDRs`), a subnet of the cluster CIDR of the node mask
//! size, that no other Node holds. The subnets taken are what the Nodes hold (read from
//! the controller's cache, so a restart loses nothing) plus those handed out and not yet
//! seen there; a deleted Node's subnet is free again, after the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use ipnet::Ipv4Net;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client};
use kubevirt_api::backoff::Backoff;
use kubevirt_api::model::core::Node;
use kubevirt_api::names::annotations;
use network::{AddressPlan, Subnets};
use serde_json::json;

use crate::Error;

const MANAGER: &str = "node-ipam-controller";
/// How often a Node that found the cluster CIDR full looks again.
const FULL_RETRY: Duration = Duration::from_secs(30);

/// The subnet a Node holds, if it holds one this plan knows.
fn held(node: &Node) -> Option<Ipv4Net> {
    node.spec.pod_cidr.as_deref()?.parse().ok()
}

struct Context {
    client: Client,
    /// The plan's annotations every Node carries beside its subnet.
    plan: std::collections::BTreeMap<String, String>,
    nodes: Store<Node>,
    allocator: Mutex<Allocator>,
    backoff: Backoff<String>,
}

/// The node subnets and those handed out but not yet seen in the cache, by node name.
struct Allocator {
    subnets: Subnets,
    handed_out: HashMap<String, Ipv4Net>,
}

impl Allocator {
    /// A subnet for `node`, given what the cached Nodes hold; `None` when none is left.
    fn allocate(&mut self, node: &str, cached: &[Arc<Node>]) -> Option<Ipv4Net> {
        if let Some(subnet) = self.handed_out.get(node) {
            return Some(*subnet);
        }
        // Forget hand-outs the cache has caught up with (or whose Node is gone).
        self.handed_out.retain(|name, subnet| {
            cached
                .iter()
                .find(|n| n.name() == name)
                .is_some_and(|n| held(n) != Some(*subnet))
        });
        let taken = cached.iter().filter_map(|n| held(n));
        for refused in self
            .subnets
            .reset(taken.chain(self.handed_out.values().copied()))
        {
            tracing::debug!("node IPAM: {refused}");
        }
        let subnet = self.subnets.allocate()?;
        self.handed_out.insert(node.to_string(), subnet);
        Some(subnet)
    }

    /// The hand-out to `node` did not reach the store.
    fn forget(&mut self, node: &str) {
        self.handed_out.remove(node);
    }
}

pub async fn run(client: Client, plan: AddressPlan) {
    let api = Api::<Node>::all(client.clone());
    let controller =
        Controller::new(api, watcher::Config::default()).with_config(crate::controller_config());
    let ctx = Arc::new(Context {
        client,
        plan: plan_annotations(&plan),
        nodes: controller.store(),
        allocator: Mutex::new(Allocator {
            subnets: plan.node_subnets(),
            handed_out: HashMap::new(),
        }),
        backoff: Backoff::default(),
    });
    controller
        .run(
            crate::workqueue::measured("nodeipam", reconcile),
            error_policy,
            ctx.clone(),
        )
        .for_each(|result| {
            match result {
                Ok((node, _)) => ctx.backoff.succeeded(&node.name),
                Err(controller::Error::ObjectNotFound(node)) => ctx.backoff.succeeded(&node.name),
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!("node IPAM: {e}"),
            }
            futures::future::ready(())
        })
        .await;
}

fn error_policy(node: Arc<Node>, error: &Error, ctx: Arc<Context>) -> Action {
    let retry = ctx.backoff.failed(node.name().to_string());
    tracing::warn!(
        "node IPAM: sync of node {} failed, retrying in {retry:?}: {error}",
        node.name()
    );
    Action::requeue(retry)
}

/// The annotations that publish `plan` on every Node.
fn plan_annotations(plan: &AddressPlan) -> std::collections::BTreeMap<String, String> {
    [
        (annotations::CLUSTER_CIDR, plan.cluster_cidr.to_string()),
        (annotations::SERVICE_CIDR, plan.service_cidr.to_string()),
        (annotations::CLUSTER_DOMAIN, plan.cluster_domain.clone()),
        (annotations::POD_NETWORK_BACKEND, plan.backend.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Whether the Node carries the plan's annotations as they are.
fn publishes(node: &Node, plan: &std::collections::BTreeMap<String, String>) -> bool {
    let held = node.metadata.annotations.as_ref();
    plan.iter()
        .all(|(k, v)| held.and_then(|a| a.get(k)) == Some(v))
}

async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    let api = Api::<Node>::all(ctx.client.clone());
    let name = node.name().to_string();
    if node.spec.pod_cidr.is_some() {
        if !publishes(&node, &ctx.plan) {
            let patch = json!({"metadata": {"annotations": ctx.plan}});
            api.patch(&name, &params, &Patch::Merge(&patch)).await?;
        }
        return Ok(Action::await_change());
    }
    let subnet = {
        let mut allocator = ctx.allocator.lock().unwrap_or_else(PoisonError::into_inner);
        allocator.allocate(&name, &ctx.nodes.state())
    };
    let Some(subnet) = subnet else {
        // kube-controller-manager says so with a CIDRNotAvailable event.
        let cluster = ctx
            .allocator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .subnets
            .cluster();
        tracing::error!(
            "node IPAM: no pod CIDR left in the cluster CIDR {cluster} for node {name} (CIDRNotAvailable); it gets one when a Node is deleted"
        );
        return Ok(Action::requeue(FULL_RETRY));
    };
    let patch = json!({"metadata": {"annotations": ctx.plan},
                       "spec": {"podCIDR": subnet.to_string(), "podCIDRs": [subnet.to_string()]}});
    match api.patch(&name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => {
            tracing::info!("node IPAM: node {name} has pod CIDR {subnet}");
            Ok(Action::await_change())
        }
        Err(e) => {
            ctx.allocator
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .forget(&name);
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cidr: Option<&str>) -> Arc<Node> {
        let mut value =
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}});
        if let Some(cidr) = cidr {
            value["spec"]["podCIDR"] = json!(cidr);
        }
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn allocator(cluster: &str) -> Allocator {
        Allocator {
            subnets: Subnets::new(cluster.parse().unwrap(), 24).unwrap(),
            handed_out: HashMap::new(),
        }
    }

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn nodes_get_subnets_nobody_holds_nor_was_handed() {
        let mut allocator = allocator("10.244.0.0/16");
        let cached = vec![
            node("a", Some("10.244.0.0/24")),
            node("b", None),
            node("c", None),
        ];
        assert_eq!(allocator.allocate("b", &cached), Some(net("10.244.1.0/24")));
        // b's patch is not in the cache yet: c must not get the same subnet.
        assert_eq!(allocator.allocate("c", &cached), Some(net("10.244.2.0/24")));
        // Asked again before the cache caught up, b keeps what it was handed.
        assert_eq!(allocator.allocate("b", &cached), Some(net("10.244.1.0/24")));
        let caught_up = vec![
            node("a", Some("10.244.0.0/24")),
            node("b", Some("10.244.1.0/24")),
            node("c", Some("10.244.2.0/24")),
            node("d", None),
        ];
        assert_eq!(
            allocator.allocate("d", &caught_up),
            Some(net("10.244.3.0/24"))
        );
    }

    #[test]
    fn a_full_cluster_cidr_hands_out_nothing_until_a_node_goes() {
        let mut allocator = allocator("10.0.0.0/23");
        let full = vec![
            node("a", Some("10.0.0.0/24")),
            node("b", Some("10.0.1.0/24")),
            node("c", None),
        ];
        assert_eq!(allocator.allocate("c", &full), None);
        let a_deleted = vec![node("b", Some("10.0.1.0/24")), node("c", None)];
        assert_eq!(
            allocator.allocate("c", &a_deleted),
            Some(net("10.0.0.0/24"))
        );
    }

    #[test]
    fn a_failed_patch_frees_what_was_handed_out() {
        let mut allocator = allocator("10.0.0.0/23");
        let cached = vec![node("a", None), node("b", None)];
        assert_eq!(allocator.allocate("a", &cached), Some(net("10.0.0.0/24")));
        allocator.forget("a");
        assert_eq!(allocator.allocate("b", &cached), Some(net("10.0.1.0/24")));
        assert_eq!(allocator.allocate("a", &cached), Some(net("10.0.0.0/24")));
    }
}
