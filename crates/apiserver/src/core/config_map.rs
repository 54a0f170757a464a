//! ConfigMaps: configuration data, validated as kube-apiserver validates it.

use apimachinery::field::{self, FieldError};
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use apimachinery::status::Status;
use serde_json::{json, Value};

use super::config_data::{
    admission, bytes_schema, canonical_base64, data_size, immutability_errors, key_errors, keys,
    list_schema, object_meta_schema, strings_schema, type_meta_schema, with, MAX_DATA_BYTES,
};
use crate::registry::{Admission, ResourceHooks};

pub static CONFIG_MAP: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "ConfigMap",
    list_kind: "ConfigMapList",
    plural: "configmaps",
    singular: "configmap",
    short_names: &["cm"],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: &[
        PrinterColumn {
            name: "Data",
            column_type: "string",
            json_path: ".data",
            description: "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.",
            priority: 0,
        },
        PrinterColumn::AGE,
    ],
    schema_name: "io.k8s.api.core.v1.ConfigMap",
};

pub struct ConfigMapHooks;

impl ConfigMapHooks {
    fn errors(obj: &Value) -> Vec<FieldError> {
        let mut errors = Vec::new();
        key_errors(obj, "data", &mut errors);
        let binary = keys(obj, "binaryData");
        for key in keys(obj, "data") {
            if binary.contains(&key) {
                errors.push(FieldError::invalid(
                    field::key("data", &key),
                    key.clone(),
                    "duplicate of key present in binaryData",
                ));
            }
        }
        key_errors(obj, "binaryData", &mut errors);
        if data_size(obj, "data", false) + data_size(obj, "binaryData", true) > MAX_DATA_BYTES {
            errors.push(FieldError::too_long(
                "",
                format!("may not be more than {MAX_DATA_BYTES} bytes"),
            ));
        }
        errors
    }
}

impl ResourceHooks for ConfigMapHooks {
    fn decode(&self, obj: &mut Value) -> Result<(), Status> {
        canonical_base64(obj, "binaryData", CONFIG_MAP.kind).map(|_| ())
    }

    fn allows_unconditional_update(&self) -> bool {
        true
    }

    fn validate_create(&self, obj: &Value) -> Admission {
        admission(Self::errors(obj))
    }

    fn validate_update(&self, old: &Value, new: &Value, _privileged: bool) -> Admission {
        let mut errors = immutability_errors(old, new, &["data", "binaryData"]);
        errors.extend(Self::errors(new));
        admission(errors)
    }
}

/// OpenAPI schemas of ConfigMap and ConfigMapList.
pub fn schemas() -> Value {
    json!({
        "io.k8s.api.core.v1.ConfigMap": {
            "type": "object",
            "description": "ConfigMap holds configuration data for pods to consume.",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}],
            "properties": with(type_meta_schema("ConfigMap"), json!({
                "metadata": object_meta_schema(),
                "data": with(strings_schema(), json!({"description": "Configuration data; each key (alphanumeric characters, '-', '_' or '.') becomes a file name."})),
                "binaryData": with(bytes_schema(), json!({"description": "Binary configuration data, base64 encoded; keys must not repeat those of data."})),
                "immutable": {"type": "boolean", "description": "If true, data and binaryData can no longer be changed (only metadata can)."}
            }))
        },
        "io.k8s.api.core.v1.ConfigMapList": {"type": "object", "properties": list_schema("ConfigMap")}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_map_rules() {
        let ok = json!({"data": {"unattend.xml": "<x/>"}, "binaryData": {"b": "AA=="}});
        assert!(ConfigMapHooks::errors(&ok).is_empty());
        let bad = json!({"data": {"a b": "1", "k": "2"}, "binaryData": {"k": "AA=="}});
        let messages: Vec<String> = ConfigMapHooks::errors(&bad)
            .iter()
            .map(FieldError::message)
            .collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("data[a b]: Invalid value: \"a b\": a valid config key"));
        assert_eq!(
            messages[1],
            "data[k]: Invalid value: \"k\": duplicate of key present in binaryData"
        );
        let big = json!({"data": {"a": "x".repeat(MAX_DATA_BYTES + 1)}});
        assert_eq!(
            ConfigMapHooks::errors(&big)[0].message(),
            "Too long: may not be more than 1048576 bytes"
        );
    }
}
