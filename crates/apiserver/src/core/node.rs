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
        PrinterColumn::AGE,
    ],
    schema_name: "io.k8s.api.core.v1.Node",
};

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
                    "podCIDR": {"type": "string"}}},
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
