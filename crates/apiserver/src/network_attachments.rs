//! `k8s.cni.cncf.io/v1` NetworkAttachmentDefinitions (Multus' custom resource): a
//! secondary network a VMI names in `networks[].multus.networkName`. `spec.config` is a
//! CNI configuration in JSON; the node agent attaches what it understands (the `bridge`
//! plugin's host bridge) and says so on the VMI when it cannot.

use apimachinery::field::FieldError;
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use serde_json::{json, Value};

use crate::registry::{Admission, ResourceHooks};

pub const GROUP: &str = "k8s.cni.cncf.io";

pub static NETWORK_ATTACHMENT_DEFINITION: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "NetworkAttachmentDefinition",
    list_kind: "NetworkAttachmentDefinitionList",
    plural: "network-attachment-definitions",
    singular: "network-attachment-definition",
    short_names: &["net-attach-def"],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: &[PrinterColumn::AGE],
    schema_name: "io.cncf.cni.k8s.v1.NetworkAttachmentDefinition",
};

pub struct NetworkAttachmentHooks;

impl NetworkAttachmentHooks {
    /// What Multus' admission controller checks: a config that is a JSON object naming a
    /// plugin (`type`) or a list of them (`plugins`).
    fn errors(obj: &Value) -> Vec<FieldError> {
        let Some(config) = obj.pointer("/spec/config").and_then(Value::as_str) else {
            // Multus allows an empty spec: the configuration is then a file on each node,
            // which virtplane nodes do not have; the VMI says so when it is used.
            return Vec::new();
        };
        if config.trim().is_empty() {
            return Vec::new();
        }
        match serde_json::from_str::<Value>(config) {
            Err(e) => vec![FieldError::invalid(
                "spec.config",
                config,
                format!("invalid CNI configuration: {e}"),
            )],
            Ok(parsed) if !parsed.is_object() => vec![FieldError::invalid(
                "spec.config",
                config,
                "invalid CNI configuration: must be a JSON object",
            )],
            Ok(parsed) if parsed["type"].is_string() || parsed["plugins"].is_array() => Vec::new(),
            Ok(_) => vec![FieldError::invalid(
                "spec.config",
                config,
                "invalid CNI configuration: names no plugin (\"type\") or plugin list (\"plugins\")",
            )],
        }
    }
}

impl ResourceHooks for NetworkAttachmentHooks {
    fn validate_create(&self, obj: &Value) -> Admission {
        Admission {
            errors: Self::errors(obj),
            ..Default::default()
        }
    }

    fn validate_update(&self, _old: &Value, new: &Value, _privileged: bool) -> Admission {
        Admission {
            errors: Self::errors(new),
            ..Default::default()
        }
    }
}

/// OpenAPI schemas of NetworkAttachmentDefinition and its list, as Multus' CRD has them.
pub fn schemas() -> Value {
    json!({
        "io.cncf.cni.k8s.v1.NetworkAttachmentDefinition": {
            "type": "object",
            "description": "NetworkAttachmentDefinition is a CRD schema specified by the Network Plumbing Working Group to express the intent for attaching pods to one or more logical or physical networks.",
            "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": "NetworkAttachmentDefinition", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                "spec": {"type": "object", "description": "NetworkAttachmentDefinition spec defines the desired state of a network attachment", "properties": {
                    "config": {"type": "string", "description": "NetworkAttachmentDefinition config is a JSON-formatted CNI configuration"}}}
            }
        },
        "io.cncf.cni.k8s.v1.NetworkAttachmentDefinitionList": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/io.cncf.cni.k8s.v1.NetworkAttachmentDefinition"}}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nad(config: &str) -> Value {
        json!({"spec": {"config": config}})
    }

    #[test]
    fn configs_must_be_cni_json() {
        let ok = r#"{"cniVersion": "0.3.1", "type": "bridge", "bridge": "br0"}"#;
        assert!(NetworkAttachmentHooks::errors(&nad(ok)).is_empty());
        assert!(NetworkAttachmentHooks::errors(&json!({"spec": {}})).is_empty());
        let broken = NetworkAttachmentHooks::errors(&nad("{\"type\": "));
        assert_eq!(broken.len(), 1);
        let said = format!("{:?}", broken[0]);
        assert!(said.contains("spec.config"), "{said}");
        assert!(said.contains("invalid CNI configuration"), "{said}");
        assert_eq!(NetworkAttachmentHooks::errors(&nad("[1]")).len(), 1);
        assert_eq!(
            NetworkAttachmentHooks::errors(&nad("{\"bridge\": \"br0\"}")).len(),
            1
        );
    }
}
