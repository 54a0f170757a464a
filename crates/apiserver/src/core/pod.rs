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
            name: "Ready",
            column_type: "string",
            json_path: ".status.containerStatuses",
            description: "Ready containers of all the Pod's containers",
            priority: 0,
        },
        PrinterColumn {
            name: "Status",
            column_type: "string",
            json_path: ".status.phase",
            description: "The phase of the Pod, or why it is not running",
            priority: 0,
        },
        PrinterColumn {
            name: "Restarts",
            column_type: "string",
            json_path: ".status.containerStatuses",
            description: "How often the Pod's containers restarted",
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
        PrinterColumn {
            name: "Nominated Node",
            column_type: "string",
            json_path: ".status.nominatedNodeName",
            description: "The node a preempting Pod waits for",
            priority: 1,
        },
        PrinterColumn {
            name: "Readiness Gates",
            column_type: "string",
            json_path: ".spec.readinessGates",
            description: "Readiness gates met of all the Pod's gates",
            priority: 1,
        },
    ],
    schema_name: "io.k8s.api.core.v1.Pod",
};

/// Pods are made by virtplane itself (each VMI's virt-launcher Pod): their status is
/// written by its controller, which creates a Pod with the status it already knows (one
/// write instead of two, as a kubelet's mirror Pod carries its state); anyone else's
/// create starts Pending, as kube-apiserver's.
pub struct PodHooks;

impl ResourceHooks for PodHooks {
    fn keeps_status_on_create(&self, privileged: bool) -> bool {
        privileged
    }

    fn controller_fields_on_create(&self, obj: &mut Value) {
        if obj.pointer("/status/phase").is_none() {
            obj["status"] = json!({"phase": "Pending"});
        }
    }
}

/// kubectl's cells of a Pod that its printer computes: `READY` as ready/all containers,
/// `RESTARTS` summed, and `<none>` where a Pod says nothing.
pub fn computed_cell(column: &str, obj: &Value, read: Value) -> Value {
    let statuses = obj
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    match column {
        "Ready" => {
            let all = obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
            json!(format!("{ready}/{all}"))
        }
        "Restarts" => json!(statuses
            .map_or(0, |s| s
                .iter()
                .filter_map(|c| c["restartCount"].as_u64())
                .sum::<u64>())
            .to_string()),
        "IP" | "Node" | "Nominated Node" | "Readiness Gates" if read.is_null() || read == "" => {
            json!("<none>")
        }
        _ => read,
    }
}

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
