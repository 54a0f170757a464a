//! Pods: served so that the tools that look for them (`kubectl describe node`, which lists
//! the node's pods) find the kind. In KubeVirt each VMI runs in a virt-launcher Pod.

use apimachinery::resource::{PrinterColumn, ResourceInfo};
use serde_json::{json, Value};

use crate::registry::ResourceHooks;

pub static POD: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Pod",
    list_kind: "PodList",
    plural: "pods",
    singular: "pod",
    short_names: &["po"],
    categories: &["all"],
    namespaced: true,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn {
            name: "Status",
            column_type: "string",
            json_path: ".status.phase",
            description: "The phase of the Pod",
            priority: 0,
        },
        PrinterColumn::AGE,
        PrinterColumn {
            name: "IP",
            column_type: "string",
            json_path: ".status.podIP",
            description: "The IP address of the Pod",
            priority: 1,
        },
        PrinterColumn {
            name: "Node",
            column_type: "string",
            json_path: ".spec.nodeName",
            description: "The node the Pod is bound to",
            priority: 1,
        },
    ],
    schema_name: "io.k8s.api.core.v1.Pod",
};

/// Nothing to default or check beyond the schema.
pub struct PodHooks;

impl ResourceHooks for PodHooks {}

/// OpenAPI schemas of Pod and PodList.
pub fn schemas() -> Value {
    json!({
        "io.k8s.api.core.v1.Pod": {
            "type": "object",
            "description": "A group of containers on one node; in KubeVirt the sandbox a VMI runs in.",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string", "description": "The versioned schema of this representation of an object."},
                "kind": {"type": "string", "description": "The REST resource this object represents."},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                "spec": {"type": "object", "description": "What the Pod runs and where.",
                         "x-kubernetes-preserve-unknown-fields": true, "properties": {
                    "nodeName": {"type": "string", "description": "The node the Pod is bound to."}}},
                "status": {"type": "object", "description": "What the node last reported.",
                           "x-kubernetes-preserve-unknown-fields": true, "properties": {
                    "phase": {"type": "string", "description": "Pending, Running, Succeeded, Failed or Unknown."},
                    "podIP": {"type": "string"}}}
            }
        },
        "io.k8s.api.core.v1.PodList": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Pod"}}
            }
        }
    })
}
