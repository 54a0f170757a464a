//! What ConfigMaps and Secrets share: the data VMs are configured with (sysprep answer
//! files, cloud-init user data), validated as kube-apiserver validates them.

use apimachinery::field::{self, FieldError};
use apimachinery::status::Status;
use base64::Engine;
use serde_json::{json, Map, Value};

use crate::registry::Admission;

/// `core.MaxSecretSize`: the most data one ConfigMap or Secret may hold.
pub(super) const MAX_DATA_BYTES: usize = 1024 * 1024;
pub(super) const IMMUTABLE_DETAIL: &str = "field is immutable when `immutable` is set";

/// The number of keys `kubectl get` shows in the DATA column.
pub fn data_count(obj: &Value) -> usize {
    ["data", "binaryData"]
        .iter()
        .filter_map(|field| obj.get(field).and_then(Value::as_object))
        .map(Map::len)
        .sum()
}

/// The 400 kube-apiserver's decoder answers for a malformed body.
pub(super) fn undecodable(kind: &str, why: &str) -> Status {
    Status::bad_request(format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
    ))
}

/// Decodes every base64 value of `obj[field]` and writes it back in canonical form, as a
/// round trip through Go's `[]byte` does; returns the decoded sizes.
pub(super) fn canonical_base64(obj: &mut Value, field: &str, kind: &str) -> Result<usize, Status> {
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

pub(super) fn keys(obj: &Value, field: &str) -> Vec<String> {
    obj.get(field)
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Every key of `obj[field]` must be a valid file name (`IsConfigMapKey`).
pub(super) fn key_errors(obj: &Value, field: &str, errors: &mut Vec<FieldError>) {
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
pub(super) fn data_size(obj: &Value, field: &str, base64_values: bool) -> usize {
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

pub(super) fn is_immutable(obj: &Value) -> bool {
    obj.get("immutable") == Some(&json!(true))
}

/// Once `immutable: true` is stored, the flag and the data fields stay as they are.
pub(super) fn immutability_errors(old: &Value, new: &Value, fields: &[&str]) -> Vec<FieldError> {
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

pub(super) fn admission(errors: Vec<FieldError>) -> Admission {
    Admission {
        errors,
        warnings: Vec::new(),
    }
}

/// Schema pieces both kinds use, in kube-apiserver's components naming.
pub(super) fn object_meta_schema() -> Value {
    json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"})
}

/// A map of strings.
pub(super) fn strings_schema() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}})
}

/// A map of base64 strings.
pub(super) fn bytes_schema() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string", "format": "byte"}})
}

/// The `apiVersion` and `kind` properties.
pub(super) fn type_meta_schema(kind: &str) -> Value {
    json!({
        "apiVersion": {"type": "string", "description": "The versioned schema of this representation of an object."},
        "kind": {"type": "string", "description": format!("The REST resource this object represents: {kind}.")},
    })
}

/// `base` with the fields of `extra` added.
pub(super) fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

/// The properties of `<item>List`.
pub(super) fn list_schema(item: &str) -> Value {
    let list_meta =
        json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"});
    with(
        type_meta_schema(&format!("{item}List")),
        json!({"metadata": list_meta,
               "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/io.k8s.api.core.v1.{item}")}}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn data_column_counts_both_maps() {
        assert_eq!(
            data_count(&json!({"data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}})),
            3
        );
        assert_eq!(data_count(&json!({})), 0);
    }
}
