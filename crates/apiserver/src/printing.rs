//! Server-side printing: the `Table` kubectl shows for `get` without `-o`, with the
//! printer columns each kind declares.

use apimachinery::resource::ResourceInfo;
use serde_json::{json, Value};

/// Field selectors a kind supports beyond `metadata.name` and `metadata.namespace`.
pub fn selectable_fields(info: &ResourceInfo) -> &'static [&'static str] {
    match (info.group, info.plural) {
        ("kubevirt.io", "virtualmachineinstances") => &["status.nodeName", "status.phase"],
        ("kubevirt.io", "virtualmachineinstancemigrations") => &["spec.vmiName", "status.phase"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "pods") => &["spec.nodeName", "status.phase", "status.podIP"],
        ("", "secrets") => &["type"],
        ("", "events") => &[
            "involvedObject.apiVersion",
            "involvedObject.fieldPath",
            "involvedObject.kind",
            "involvedObject.name",
            "involvedObject.namespace",
            "involvedObject.resourceVersion",
            "involvedObject.uid",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        (crate::events::GROUP, "events") => &[
            "regarding.apiVersion",
            "regarding.fieldPath",
            "regarding.kind",
            "regarding.name",
            "regarding.namespace",
            "regarding.resourceVersion",
            "regarding.uid",
            "reason",
            "reportingController",
            "type",
        ],
        _ => &[],
    }
}

fn column_definitions(info: &ResourceInfo) -> Vec<Value> {
    let mut columns = Vec::new();
    if crate::events::leading_name(info) {
        columns.push(json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        "priority": 0}));
    }
    for column in info.printer_columns {
        let description = if column.description.is_empty() {
            format!(
                "Custom resource definition column (in JSONPath format): {}",
                column.json_path
            )
        } else {
            column.description.to_string()
        };
        columns.push(
            json!({"name": column.name, "type": column.column_type, "format": "",
            "description": description, "priority": column.priority}),
        );
    }
    columns
}

fn row_object(obj: &Value, include: Option<&str>) -> Value {
    match include {
        Some("None") => Value::Null,
        Some("Object") => obj.clone(),
        _ => json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                     "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({}))}),
    }
}

/// Cells kube-apiserver's printers compute for built-in kinds, where `read` is what the
/// column's JSONPath gave.
fn computed_cell(info: &ResourceInfo, column: &str, obj: &Value, read: Value) -> Value {
    match (info.group, info.plural, column) {
        // kubectl shows Ready/NotReady, not the condition's True/False, and
        // `,SchedulingDisabled` for a cordoned node.
        ("", "nodes", "Status") => {
            let mut status = if read == "True" { "Ready" } else { "NotReady" }.to_string();
            if obj.pointer("/spec/unschedulable") == Some(&json!(true)) {
                status.push_str(",SchedulingDisabled");
            }
            json!(status)
        }
        ("", "nodes", "Roles") => json!(crate::core::node::roles(obj)),
        // kube's node printer fills what a node did not report.
        ("", "nodes", "Internal-IP" | "External-IP") if read.is_null() => json!("<none>"),
        ("", "nodes", "OS-Image" | "Kernel-Version" | "Container-Runtime")
            if read.as_str().is_none_or(str::is_empty) =>
        {
            json!("<unknown>")
        }
        ("", "pods", _) => crate::core::pod_cell(column, obj, read),
        ("", "services", _) => crate::core::service::computed_cell(column, obj, read),
        // The number of keys, not the data.
        ("", "configmaps" | "secrets", "Data") => json!(crate::core::data_count(obj)),
        (access::rbac::GROUP, _, _) => crate::rbac::kinds::computed_cell(column, obj, read),
        (crate::certificates::GROUP, _, _) => crate::certificates::computed_cell(column, obj, read),
        ("", "events", _) => crate::events::computed_cell(column, obj, read),
        (crate::events::GROUP, "events", _) => {
            crate::events::computed_cell(column, &crate::events::v1_to_core(obj.clone()), read)
        }
        _ => read,
    }
}

/// A meta.k8s.io/v1 Table of `items`.
pub fn table(
    info: &ResourceInfo,
    items: &[Value],
    metadata: Value,
    include: Option<&str>,
) -> Value {
    let now = chrono::Utc::now();
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let mut cells = Vec::new();
            if crate::events::leading_name(info) {
                cells.push(json!(crate::object::name(obj)));
            }
            for column in info.printer_columns {
                let values =
                    apimachinery::jsonpath::eval(column.json_path, obj).unwrap_or_default();
                let cell = apimachinery::table::cell(column.column_type, &values, now);
                cells.push(computed_cell(info, column.name, obj, cell));
            }
            json!({"cells": cells, "object": row_object(obj, include)})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
           "columnDefinitions": column_definitions(info), "rows": rows})
}
