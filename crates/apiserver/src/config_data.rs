//! Core (`v1`) ConfigMaps and Secrets: the data VMs are configured with (sysprep answer
//! files, cloud-init user data), validated as kube-apiserver validates them.

use apimachinery::field::{self, FieldError};
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use apimachinery::status::Status;
use apimachinery::table::AGE_COLUMN_DESCRIPTION;
use base64::Engine;
use serde_json::{json, Map, Value};

use crate::registry::{Admission, ResourceHooks};

/// `core.MaxSecretSize`: the most data one ConfigMap or Secret may hold.
const MAX_DATA_BYTES: usize = 1024 * 1024;
const IMMUTABLE_DETAIL: &str = "field is immutable when `immutable` is set";
const SECRET_TYPE_OPAQUE: &str = "Opaque";

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
        PrinterColumn {
            name: "Age",
            column_type: "date",
            json_path: ".metadata.creationTimestamp",
            description: AGE_COLUMN_DESCRIPTION,
            priority: 0,
        },
    ],
    schema_name: "io.k8s.api.core.v1.ConfigMap",
};

pub static SECRET: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Secret",
    list_kind: "SecretList",
    plural: "secrets",
    singular: "secret",
    short_names: &[],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: &[
        PrinterColumn {
            name: "Type",
            column_type: "string",
            json_path: ".type",
            description: "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
            priority: 0,
        },
        PrinterColumn {
            name: "Data",
            column_type: "string",
            json_path: ".data",
            description: "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
            priority: 0,
        },
        PrinterColumn {
            name: "Age",
            column_type: "date",
            json_path: ".metadata.creationTimestamp",
            description: AGE_COLUMN_DESCRIPTION,
            priority: 0,
        },
    ],
    schema_name: "io.k8s.api.core.v1.Secret",
};

/// The number of keys `kubectl get` shows in the DATA column.
pub fn data_count(obj: &Value) -> usize {
    ["data", "binaryData"]
        .iter()
        .filter_map(|field| obj.get(field).and_then(Value::as_object))
        .map(Map::len)
        .sum()
}

/// The 400 kube-apiserver's decoder answers for a malformed body.
fn undecodable(kind: &str, why: &str) -> Status {
    Status::bad_request(format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
    ))
}

/// Decodes every base64 value of `obj[field]` and writes it back in canonical form, as a
/// round trip through Go's `[]byte` does; returns the decoded sizes.
fn canonical_base64(obj: &mut Value, field: &str, kind: &str) -> Result<usize, Status> {
    let Some(map) = obj.get_mut(field).and_then(Value::as_object_mut) else {
        return Ok(0);
    };
    let mut total = 0;
    for value in map.values_mut() {
        let Some(text) = value.as_str() else {
            continue; // the schema reports the wrong type
        };
        let bytes = apimachinery::go_base64::decode(text).map_err(|e| undecodable(kind, &e))?;
        total += bytes.len();
        *value = Value::String(base64::engine::general_purpose::STANDARD.encode(&bytes));
    }
    Ok(total)
}

fn keys(obj: &Value, field: &str) -> Vec<String> {
    obj.get(field)
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Every key of `obj[field]` must be a valid file name (`IsConfigMapKey`).
fn key_errors(obj: &Value, field: &str, errors: &mut Vec<FieldError>) {
    for key in keys(obj, field) {
        for message in apimachinery::meta_validation::is_config_map_key(&key) {
            errors.push(FieldError::invalid(
                field::key(field, &key),
                key.clone(),
                message,
            ));
        }
    }
}

/// Summed size of the (decoded) values of `obj[field]`.
fn data_size(obj: &Value, field: &str, base64_values: bool) -> usize {
    let Some(map) = obj.get(field).and_then(Value::as_object) else {
        return 0;
    };
    map.values()
        .filter_map(Value::as_str)
        .map(|text| match base64_values {
            true => apimachinery::go_base64::decode(text).map_or(0, |b| b.len()),
            false => text.len(),
        })
        .sum()
}

fn is_immutable(obj: &Value) -> bool {
    obj.get("immutable") == Some(&json!(true))
}

/// Once `immutable: true` is stored, the flag and the data fields stay as they are.
fn immutability_errors(old: &Value, new: &Value, fields: &[&str]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if !is_immutable(old) {
        return errors;
    }
    if !is_immutable(new) {
        errors.push(FieldError::forbidden("immutable", IMMUTABLE_DETAIL));
    }
    let empty = Value::Object(Map::new());
    for field in fields {
        let before = old.get(*field).unwrap_or(&empty);
        let after = new.get(*field).unwrap_or(&empty);
        if before != after {
            errors.push(FieldError::forbidden(*field, IMMUTABLE_DETAIL));
        }
    }
    errors
}

fn admission(errors: Vec<FieldError>) -> Admission {
    Admission {
        errors,
        warnings: Vec::new(),
    }
}

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

pub struct SecretHooks;

/// The data keys a Secret of a well-known type must carry.
fn required_keys(secret_type: &str) -> &'static [&'static str] {
    match secret_type {
        "kubernetes.io/dockercfg" => &[".dockercfg"],
        "kubernetes.io/dockerconfigjson" => &[".dockerconfigjson"],
        "kubernetes.io/ssh-auth" => &["ssh-privatekey"],
        "kubernetes.io/tls" => &["tls.crt", "tls.key"],
        _ => &[],
    }
}

impl SecretHooks {
    fn errors(obj: &Value) -> Vec<FieldError> {
        let mut errors = Vec::new();
        key_errors(obj, "data", &mut errors);
        if data_size(obj, "data", true) > MAX_DATA_BYTES {
            errors.push(FieldError::too_long(
                "data",
                format!("may not be more than {MAX_DATA_BYTES} bytes"),
            ));
        }
        let data = keys(obj, "data");
        let secret_type = obj.get("type").and_then(Value::as_str).unwrap_or("");
        for key in required_keys(secret_type) {
            if !data.iter().any(|k| k == key) {
                errors.push(FieldError::required(field::key("data", key), ""));
            }
        }
        match secret_type {
            "kubernetes.io/basic-auth"
                if !data.iter().any(|k| k == "username" || k == "password") =>
            {
                for key in ["username", "password"] {
                    errors.push(FieldError::required(field::key("data", key), ""));
                }
            }
            "kubernetes.io/service-account-token" => {
                let annotation = "kubernetes.io/service-account.name";
                let named = obj
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(annotation))
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty());
                if !named {
                    errors.push(FieldError::required(
                        field::key("metadata.annotations", annotation),
                        "",
                    ));
                }
            }
            _ => {}
        }
        errors
    }
}

impl ResourceHooks for SecretHooks {
    /// `stringData` is write-only: merged into `data` (winning over it), never stored.
    fn decode(&self, obj: &mut Value) -> Result<(), Status> {
        canonical_base64(obj, "data", SECRET.kind)?;
        let Some(root) = obj.as_object_mut() else {
            return Ok(());
        };
        if let Some(Value::Object(strings)) = root.remove("stringData") {
            if !root.get("data").is_some_and(Value::is_object) {
                root.insert("data".into(), json!({}));
            }
            if let Some(data) = root.get_mut("data").and_then(Value::as_object_mut) {
                for (key, value) in strings {
                    let text = value.as_str().unwrap_or_default();
                    let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                    data.insert(key, Value::String(encoded));
                }
            }
        }
        if root
            .get("type")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            root.insert("type".into(), json!(SECRET_TYPE_OPAQUE));
        }
        Ok(())
    }

    fn allows_unconditional_update(&self) -> bool {
        true
    }

    fn validate_create(&self, obj: &Value) -> Admission {
        admission(Self::errors(obj))
    }

    fn validate_update(&self, old: &Value, new: &Value, _privileged: bool) -> Admission {
        let mut errors = Vec::new();
        let old_type = old.get("type").cloned().unwrap_or(Value::Null);
        let new_type = new.get("type").cloned().unwrap_or(Value::Null);
        if old_type != new_type {
            errors.push(FieldError::invalid(
                "type",
                new_type,
                apimachinery::meta_validation::FIELD_IMMUTABLE,
            ));
        }
        errors.extend(immutability_errors(old, new, &["data"]));
        errors.extend(Self::errors(new));
        admission(errors)
    }
}

/// OpenAPI schemas of ConfigMap and Secret, in kube-apiserver's components naming.
pub fn schemas() -> Value {
    let meta =
        json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"});
    let list_meta =
        json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"});
    let strings = json!({"type": "object", "additionalProperties": {"type": "string"}});
    let bytes =
        json!({"type": "object", "additionalProperties": {"type": "string", "format": "byte"}});
    let type_meta = |kind: &str| {
        json!({
            "apiVersion": {"type": "string", "description": "The versioned schema of this representation of an object."},
            "kind": {"type": "string", "description": format!("The REST resource this object represents: {kind}.")},
        })
    };
    let with = |mut base: Value, extra: Value| {
        if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
            base.extend(extra);
        }
        base
    };
    let list = |item: &str| {
        with(
            type_meta(&format!("{item}List")),
            json!({"metadata": list_meta,
                   "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/io.k8s.api.core.v1.{item}")}}}),
        )
    };
    json!({
        "io.k8s.api.core.v1.ConfigMap": {
            "type": "object",
            "description": "ConfigMap holds configuration data for pods to consume.",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}],
            "properties": with(type_meta("ConfigMap"), json!({
                "metadata": meta,
                "data": with(strings.clone(), json!({"description": "Configuration data; each key (alphanumeric characters, '-', '_' or '.') becomes a file name."})),
                "binaryData": with(bytes.clone(), json!({"description": "Binary configuration data, base64 encoded; keys must not repeat those of data."})),
                "immutable": {"type": "boolean", "description": "If true, data and binaryData can no longer be changed (only metadata can)."}
            }))
        },
        "io.k8s.api.core.v1.ConfigMapList": {"type": "object", "properties": list("ConfigMap")},
        "io.k8s.api.core.v1.Secret": {
            "type": "object",
            "description": "Secret holds secret data of a certain type.",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Secret", "version": "v1"}],
            "properties": with(type_meta("Secret"), json!({
                "metadata": meta,
                "data": with(bytes, json!({"description": "Secret data, base64 encoded; each key (alphanumeric characters, '-', '_' or '.') becomes a file name."})),
                "stringData": with(strings, json!({"description": "Write-only convenience: plain-text values merged into data on write (they win over data); never read back."})),
                "type": {"type": "string", "description": "Used to facilitate programmatic handling of secret data (Opaque when empty); cannot change after creation."},
                "immutable": {"type": "boolean", "description": "If true, data can no longer be changed (only metadata can)."}
            }))
        },
        "io.k8s.api.core.v1.SecretList": {"type": "object", "properties": list("Secret")}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_data_merges_into_data_and_type_defaults() {
        let mut secret =
            json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "z", "c": "w"}});
        SecretHooks.decode(&mut secret).unwrap();
        assert_eq!(
            secret,
            json!({"data": {"a": "eA==", "b": "eg==", "c": "dw=="}, "type": "Opaque"})
        );
        let mut only_strings = json!({"stringData": {"userdata": "#cloud-config"}});
        SecretHooks.decode(&mut only_strings).unwrap();
        assert_eq!(only_strings["data"]["userdata"], "I2Nsb3VkLWNvbmZpZw==");
    }

    #[test]
    fn malformed_base64_is_a_decoding_error() {
        let mut secret = json!({"data": {"a": "not base64!"}});
        let status = SecretHooks.decode(&mut secret).unwrap_err();
        assert_eq!(status.code, 400);
        assert_eq!(
            status.message,
            "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3"
        );
    }

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

    #[test]
    fn immutable_data_stays() {
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let relabelled =
            json!({"immutable": true, "data": {"a": "1"}, "metadata": {"labels": {"x": "y"}}});
        assert!(immutability_errors(&old, &relabelled, &["data"]).is_empty());
        let changed = json!({"immutable": false, "data": {"a": "2"}});
        let messages: Vec<String> = immutability_errors(&old, &changed, &["data"])
            .iter()
            .map(FieldError::message)
            .collect();
        assert_eq!(
            messages,
            [
                "immutable: Forbidden: field is immutable when `immutable` is set",
                "data: Forbidden: field is immutable when `immutable` is set"
            ]
        );
    }

    #[test]
    fn typed_secrets_need_their_keys() {
        let tls = json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}});
        let messages: Vec<String> = SecretHooks::errors(&tls)
            .iter()
            .map(FieldError::message)
            .collect();
        assert_eq!(messages, ["data[tls.key]: Required value"]);
        let basic = json!({"type": "kubernetes.io/basic-auth", "data": {}});
        assert_eq!(SecretHooks::errors(&basic).len(), 2);
    }

    #[test]
    fn data_column_counts_both_maps() {
        assert_eq!(
            data_count(&json!({"data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}})),
            3
        );
        assert_eq!(data_count(&json!({})), 0);
    }
}
