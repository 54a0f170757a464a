//! Secrets: sensitive data (cloud-init user data, sysprep answer files), validated as
//! kube-apiserver validates it.

use apimachinery::field::{self, FieldError};
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use apimachinery::status::Status;
use base64::Engine;
use serde_json::{json, Value};

use super::config_data::{
    admission, bytes_schema, canonical_base64, data_size, immutability_errors, key_errors, keys,
    list_schema, object_meta_schema, strings_schema, type_meta_schema, with, MAX_DATA_BYTES,
};
use crate::registry::{Admission, ResourceHooks};

const SECRET_TYPE_OPAQUE: &str = "Opaque";

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
        PrinterColumn::AGE,
    ],
    schema_name: "io.k8s.api.core.v1.Secret",
};

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

/// OpenAPI schemas of Secret and SecretList.
pub fn schemas() -> Value {
    json!({
        "io.k8s.api.core.v1.Secret": {
            "type": "object",
            "description": "Secret holds secret data of a certain type.",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Secret", "version": "v1"}],
            "properties": with(type_meta_schema("Secret"), json!({
                "metadata": object_meta_schema(),
                "data": with(bytes_schema(), json!({"description": "Secret data, base64 encoded; each key (alphanumeric characters, '-', '_' or '.') becomes a file name."})),
                "stringData": with(strings_schema(), json!({"description": "Write-only convenience: plain-text values merged into data on write (they win over data); never read back."})),
                "type": {"type": "string", "description": "Used to facilitate programmatic handling of secret data (Opaque when empty); cannot change after creation."},
                "immutable": {"type": "boolean", "description": "If true, data can no longer be changed (only metadata can)."}
            }))
        },
        "io.k8s.api.core.v1.SecretList": {"type": "object", "properties": list_schema("Secret")}
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
}
