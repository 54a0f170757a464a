//! Nodes: the hosts that run virtual machines, registered and heart-beaten by their
//! node agents.

use apimachinery::resource::{PrinterColumn, ResourceInfo};
use serde_json::{json, Value};

use crate::registry::ResourceHooks;

pub static NODE: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Node",
    list_kind: "NodeList",
    plural: "nodes",
    singular: "node",
    short_names: &["no"],
    categories: &[],
    namespaced: false,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn {
            name: "Status",
            column_type: "string",
            json_path: ".status.conditions[?(@.type=='Ready')].status",
            description: "Whether the node's agent is heart-beating (Ready) or not (NotReady)",
            priority: 0,
        },
        PrinterColumn {
            name: "Roles",
            column_type: "string",
            json_path: ".metadata.labels",
            description: "The roles of the node, from its node-role.kubernetes.io/ROLE labels.",
            priority: 0,
        },
        PrinterColumn::AGE,
        PrinterColumn {
            name: "Version",
            column_type: "string",
            json_path: ".status.nodeInfo.kubeletVersion",
            description: "Version of the node's agent.",
            priority: 0,
        },
        PrinterColumn {
            name: "Internal-IP",
            column_type: "string",
            json_path: ".status.addresses[?(@.type=='InternalIP')].address",
            description: "The node's address inside the cluster.",
            priority: 1,
        },
        PrinterColumn {
            name: "External-IP",
            column_type: "string",
            json_path: ".status.addresses[?(@.type=='ExternalIP')].address",
            description: "The node's address outside the cluster.",
            priority: 1,
        },
        PrinterColumn {
            name: "OS-Image",
            column_type: "string",
            json_path: ".status.nodeInfo.osImage",
            description: "The host's operating system (PRETTY_NAME of /etc/os-release).",
            priority: 1,
        },
        PrinterColumn {
            name: "Kernel-Version",
            column_type: "string",
            json_path: ".status.nodeInfo.kernelVersion",
            description: "The host's kernel release (uname -r).",
            priority: 1,
        },
        PrinterColumn {
            name: "Container-Runtime",
            column_type: "string",
            json_path: ".status.nodeInfo.containerRuntimeVersion",
            description: "What runs the node's guests (qemu or sim).",
            priority: 1,
        },
    ],
    schema_name: "io.k8s.api.core.v1.Node",
};

/// The Roles cell, as kube's node printer makes it: each `node-role.kubernetes.io/ROLE`
/// label's ROLE (and `kubernetes.io/role`'s value), sorted, or `<none>`.
pub fn roles(obj: &Value) -> String {
    let mut roles: Vec<&str> = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) if !role.is_empty() => Some(role),
                _ if key == "kubernetes.io/role" => value.as_str().filter(|v| !v.is_empty()),
                _ => None,
            },
        )
        .collect();
    roles.sort_unstable();
    roles.dedup();
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    }
}

/// Nodes are written by node agents; nothing to default or check beyond the schema.
pub struct NodeHooks;

impl ResourceHooks for NodeHooks {}

/// OpenAPI schemas of Node and NodeList.
pub fn schemas() -> Value {
    json!({
        "io.k8s.api.core.v1.Node": {
            "type": "object",
            "description": "A host that runs virtual machines: registered and heart-beaten by its node agent.",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Node", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string", "description": "The versioned schema of this representation of an object."},
                "kind": {"type": "string", "description": "The REST resource this object represents."},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                "spec": {"type": "object", "description": "How the node may be used.", "properties": {
                    "unschedulable": {"type": "boolean", "description": "No new virtual machines are placed on the node."},
                    "taints": {"type": "array", "description": "Taints repel virtual machines that do not tolerate them.",
                               "items": {"type": "object", "properties": {
                                   "key": {"type": "string"}, "value": {"type": "string"},
                                   "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                                   "timeAdded": {"type": "string", "format": "date-time"}}}},
                    "providerID": {"type": "string"},
                    "podCIDR": {"type": "string", "description": "The node's subnet of the cluster CIDR, assigned by node IPAM."},
                    "podCIDRs": {"type": "array", "items": {"type": "string"}}}},
                "status": {"type": "object", "description": "What the node agent last reported.",
                           "x-kubernetes-preserve-unknown-fields": true, "properties": {
                    "capacity": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}},
                    "allocatable": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}},
                    "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    "addresses": {"type": "array", "items": {"type": "object", "properties": {
                        "type": {"type": "string"}, "address": {"type": "string"}}}},
                    "nodeInfo": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "daemonEndpoints": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            }
        },
        "io.k8s.api.core.v1.NodeList": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Node"}}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_come_from_labels_as_kubectl_shows_them() {
        assert_eq!(roles(&json!({"metadata": {}})), "<none>");
        let labelled = json!({"metadata": {"labels": {
            "node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "",
            "kubernetes.io/role": "worker", "kubernetes.io/hostname": "n1"}}});
        assert_eq!(roles(&labelled), "control-plane,worker");
    }
}
