//! Core kinds as the controllers and agents watch them: `k8s-openapi`'s spec and status,
//! with metadata decoded lean (a Node's managedFields grow with every heartbeat writer).

use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};

crate::kube_object! {
    /// `v1` Node.
    pub struct Node {
        group: "",
        version: "v1",
        kind: "Node",
        plural: "nodes",
        scope: ClusterResourceScope,
        spec: NodeSpec,
        status: NodeStatus,
    }
}

impl Node {
    /// Whether its Ready condition is True.
    pub fn ready(&self) -> bool {
        self.status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }

    pub fn labels(&self) -> &std::collections::BTreeMap<String, String> {
        static NONE: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
        self.metadata.labels.as_ref().unwrap_or(&NONE)
    }
}
