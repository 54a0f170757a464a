//! OpenAPI value validation with the error texts apiextensions-apiserver produces (its
//! kube-openapi validator results turned into `field.Error`s).

use std::collections::HashSet;

use serde_json::{json, Value};

use super::{values_equal, Bound, ListType, NodeRef, Schema, Type, MAX_DEPTH};
use crate::field::{self, ErrorType, FieldError};

impl Schema {
    /// Validates an already pruned object. The root's `apiVersion`, `kind` and `metadata`
    /// are only type-checked: their rules live with the generic object-meta validation.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        if super::too_deep(obj, MAX_DEPTH) {
            return vec![FieldError::forbidden(
                "",
                format!("nesting deeper than {MAX_DEPTH} levels is not supported"),
            )];
        }
        let mut errors = Vec::new();
        validate_value(
            obj,
            self.root(),
            None,
            &mut String::new(),
            true,
            &mut errors,
            0,
        );
        errors
    }

    /// As [`Schema::validate`] for an update of `old`, with validation ratcheting as
    /// kube-apiserver does it (KEP-4008): a field whose value the update left as it was
    /// is not validated again, so only what changed is checked (a status write, say).
    pub fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        if super::too_deep(obj, MAX_DEPTH) {
            return self.validate(obj);
        }
        let mut errors = Vec::new();
        validate_value(
            obj,
            self.root(),
            Some(old),
            &mut String::new(),
            true,
            &mut errors,
            0,
        );
        errors
    }
}

/// `path` is one buffer for the whole walk, extended for each child and cut back after it.
/// `old` is the value at the same place before an update (ratcheting: an unchanged value
/// is not validated again). Only object properties are matched up; list items are not.
fn validate_value(
    value: &Value,
    node: NodeRef<'_>,
    old: Option<&Value>,
    path: &mut String,
    root: bool,
    errors: &mut Vec<FieldError>,
    depth: usize,
) {
    if depth > MAX_DEPTH || old == Some(value) {
        return;
    }
    if value.is_null() {
        if !node.nullable && !node.types.is_empty() {
            errors.push(type_error(path, &type_list(&node.types), "null"));
        } else if !node.nullable && node.int_or_string {
            int_or_string_error(path, "null", errors);
        }
        return;
    }
    let actual = type_name(value);
    if !node.types.is_empty() && !node.types.iter().any(|&t| t.matches(value)) {
        errors.push(type_error(path, &type_list(&node.types), actual));
        return;
    }
    if node.int_or_string && !(value.is_string() || Type::Integer.matches(value)) {
        int_or_string_error(path, actual, errors);
        return;
    }
    match value {
        Value::String(s) => validate_string(s, node, path, errors),
        Value::Number(_) => validate_number(value, node, path, errors),
        _ => {}
    }
    if !node.enum_values.is_empty() && !node.enum_values.iter().any(|e| values_equal(e, value)) {
        let supported: Vec<String> = node
            .enum_values
            .iter()
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_string))
            .collect();
        let supported: Vec<&str> = supported.iter().map(String::as_str).collect();
        errors.push(FieldError::not_supported(&*path, value.clone(), &supported));
    }
    match value {
        Value::Array(items) => validate_array(items, value, node, path, errors, depth),
        Value::Object(map) => {
            for name in &node.required {
                if root && matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if !map.contains_key(name) {
                    errors.push(FieldError::required(field::child(path, name), ""));
                }
            }
            if let Some(min) = node.min_properties.filter(|&m| (map.len() as u64) < m) {
                errors.push(FieldError::invalid(
                    &*path,
                    value.clone(),
                    format!("{path} in body should have at least {min} properties"),
                ));
            }
            if let Some(max) = node.max_properties.filter(|&m| map.len() as u64 > m) {
                errors.push(too_many(path, map.len(), max));
            }
            for (key, child_value) in map {
                let child = node.property(key).or_else(|| node.additional_properties());
                if let Some(child) = child {
                    let parent = field::push_child(path, key);
                    let old_child = old.and_then(|o| o.get(key));
                    validate_value(
                        child_value,
                        child,
                        old_child,
                        path,
                        false,
                        errors,
                        depth + 1,
                    );
                    path.truncate(parent);
                }
            }
        }
        _ => {}
    }
}

fn validate_string(s: &str, node: NodeRef<'_>, path: &str, errors: &mut Vec<FieldError>) {
    let chars = s.chars().count() as u64;
    if let Some(max) = node.max_length.filter(|&m| chars > m) {
        let unit = if max == 1 { "byte" } else { "bytes" };
        errors.push(FieldError::too_long(
            path,
            format!("may not be more than {max} {unit}"),
        ));
    }
    if let Some(min) = node.min_length.filter(|&m| chars < m) {
        errors.push(FieldError::invalid(
            path,
            s,
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let (Some(pattern), Some(regex)) = (&node.pattern, &node.regex) {
        if !regex.is_match(s) {
            errors.push(FieldError::invalid(
                path,
                s,
                format!("{path} in body should match '{pattern}'"),
            ));
        }
    }
    if let Some(format) = &node.format {
        let ok = match format.as_str() {
            "date-time" => is_date_time(s),
            "uuid" => is_uuid(s),
            _ => true,
        };
        if !ok {
            errors.push(FieldError::type_invalid(
                path,
                s,
                format!("{path} in body must be of type {format}: {s:?}"),
            ));
        }
    }
}

fn validate_number(value: &Value, node: NodeRef<'_>, path: &str, errors: &mut Vec<FieldError>) {
    let Some(n) = value.as_f64() else { return };
    if let Some(m) = node
        .multiple_of
        .filter(|&m| m > 0.0 && (n / m).fract() != 0.0)
    {
        errors.push(FieldError::invalid(
            path,
            value.clone(),
            format!("{path} in body should be a multiple of {}", number(m)),
        ));
    }
    if let Some(Bound {
        value: max,
        exclusive,
    }) = node.maximum
    {
        if n > max || (exclusive && n == max) {
            let op = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                value.clone(),
                format!("{path} in body should be {op} {}", number(max)),
            ));
        }
    }
    if let Some(Bound {
        value: min,
        exclusive,
    }) = node.minimum
    {
        if n < min || (exclusive && n == min) {
            let op = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                value.clone(),
                format!("{path} in body should be {op} {}", number(min)),
            ));
        }
    }
}

fn validate_array(
    items: &[Value],
    value: &Value,
    node: NodeRef<'_>,
    path: &mut String,
    errors: &mut Vec<FieldError>,
    depth: usize,
) {
    if let Some(min) = node.min_items.filter(|&m| (items.len() as u64) < m) {
        errors.push(FieldError::invalid(
            &*path,
            value.clone(),
            format!("{path} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = node.max_items.filter(|&m| items.len() as u64 > m) {
        errors.push(too_many(path, items.len(), max));
    }
    if node.unique_items && has_duplicates(items.iter().cloned()) {
        errors.push(FieldError::invalid(
            &*path,
            value.clone(),
            format!("{path} in body shouldn't contain duplicates"),
        ));
    }
    match node.list_type() {
        ListType::Set => {
            let mut seen = HashSet::new();
            for (i, item) in items.iter().enumerate() {
                if !seen.insert(crate::ssa::canonical_json(item)) {
                    errors.push(FieldError::duplicate(field::index(path, i), item.clone()));
                }
            }
        }
        ListType::Map(keys) => {
            let mut seen = HashSet::new();
            for (i, item) in items.iter().enumerate() {
                let Some(obj) = item.as_object() else {
                    continue;
                };
                let key: serde_json::Map<String, Value> = keys
                    .iter()
                    .filter_map(|k| obj.get(k).map(|v| (k.clone(), v.clone())))
                    .collect();
                let key = Value::Object(key);
                if !seen.insert(crate::ssa::canonical_json(&key)) {
                    errors.push(FieldError::duplicate(field::index(path, i), key));
                }
            }
        }
        ListType::Atomic => {}
    }
    if let Some(item_node) = node.items() {
        for (i, item) in items.iter().enumerate() {
            let parent = field::push_index(path, i);
            validate_value(item, item_node, None, path, false, errors, depth + 1);
            path.truncate(parent);
        }
    }
}

fn has_duplicates(items: impl Iterator<Item = Value>) -> bool {
    let mut seen = HashSet::new();
    items
        .map(|v| crate::ssa::canonical_json(&v))
        .any(|k| !seen.insert(k))
}

/// `spec.x: Invalid value: "integer": spec.x in body must be of type string: "integer"`.
fn type_error(path: &str, expected: &str, actual: &str) -> FieldError {
    FieldError::type_invalid(
        path,
        actual,
        format!("{path} in body must be of type {expected}: {actual:?}"),
    )
}

/// int-or-string is validated as `anyOf: [integer, string]`: the anyOf failure, then the
/// first alternative's type error.
fn int_or_string_error(path: &str, actual: &str, errors: &mut Vec<FieldError>) {
    errors.push(FieldError::invalid(
        path,
        "",
        format!("{path:?} must validate at least one schema (anyOf)"),
    ));
    errors.push(type_error(path, "integer", actual));
}

fn too_many(path: &str, actual: usize, max: u64) -> FieldError {
    FieldError {
        kind: ErrorType::TooMany,
        field: path.to_string(),
        value: Some(json!(actual)),
        detail: format!("must have at most {max} items"),
        verbatim: false,
    }
}

fn type_list(types: &[Type]) -> String {
    types.iter().map(|t| t.name()).collect::<Vec<_>>().join(",")
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Integral floats count as integers, as in kube-openapi.
/// Bounds print like Go's `%v` of a float64: integral values without a fraction.
fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// Lenient like strfmt: RFC 3339 with any precision or offset, or a local date-time.
fn is_date_time(s: &str) -> bool {
    if chrono::DateTime::parse_from_rfc3339(s).is_ok() {
        return true;
    }
    let trimmed = s.strip_suffix(['Z', 'z']).unwrap_or(s);
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"]
        .iter()
        .any(|layout| chrono::NaiveDateTime::parse_from_str(trimmed, layout).is_ok())
}

/// 8-4-4-4-12 hex digits; the dashes are optional, case does not matter.
fn is_uuid(s: &str) -> bool {
    let hex: Vec<char> = s.chars().filter(|&c| c != '-').collect();
    let dashes_ok = s.chars().filter(|&c| c == '-').count() == 0
        || (s.len() == 36
            && [8, 13, 18, 23]
                .iter()
                .all(|&i| s.as_bytes().get(i) == Some(&b'-')));
    hex.len() == 32 && hex.iter().all(char::is_ascii_hexdigit) && dashes_ok
}

#[cfg(test)]
mod tests {
    use super::super::tests::vm_schema;
    use super::*;

    fn messages(obj: Value) -> Vec<String> {
        vm_schema()
            .validate(&obj)
            .iter()
            .map(FieldError::message)
            .collect()
    }

    #[test]
    fn type_mismatches_read_like_apiextensions() {
        assert_eq!(
            messages(json!({"spec": {"runStrategy": 3}})),
            vec![
                r#"spec.runStrategy: Invalid value: "integer": spec.runStrategy in body must be of type string: "integer""#
            ]
        );
        assert_eq!(
            messages(json!({"spec": {"running": null, "template": []}})),
            vec![
                r#"spec.running: Invalid value: "null": spec.running in body must be of type boolean: "null""#,
                r#"spec.template: Invalid value: "array": spec.template in body must be of type object: "array""#,
            ]
        );
        assert_eq!(
            messages(
                json!({"spec": {"template": {"spec": {"domain": {"devices": {}, "memory": {"guest": true}}, "uuid": null, "since": null}}}})
            ),
            vec![
                r#"spec.template.spec.domain.memory.guest: Invalid value: "": "spec.template.spec.domain.memory.guest" must validate at least one schema (anyOf)"#,
                r#"spec.template.spec.domain.memory.guest: Invalid value: "boolean": spec.template.spec.domain.memory.guest in body must be of type integer: "boolean""#,
            ]
        );
        assert!(messages(json!({"spec": {"template": {"spec": {"domain": {"devices": {}, "cpu": {"cores": 2.0}, "memory": {"guest": "1Gi"}}}}}})).is_empty());
    }

    #[test]
    fn value_rules() {
        let got = messages(json!({
            "spec": {
                "runStrategy": "Sometimes",
                "template": {"spec": {
                    "domain": {"cpu": {"cores": 0}, "devices": {"disks": [{"name": "d", "bootOrder": 0}, {}]}},
                    "hostname": "Bad_Host",
                    "volumes": [{"name": "averyveryverylongname"}, {"name": "averyveryverylongname"}],
                    "tags": ["a", "a"],
                    "uuid": "not-a-uuid",
                    "since": "yesterday"
                }}
            }
        }));
        assert_eq!(
            got,
            vec![
                r#"spec.runStrategy: Unsupported value: "Sometimes": supported values: "Always", "Halted", "Manual""#,
                r#"spec.template.spec.domain.cpu.cores: Invalid value: 0: spec.template.spec.domain.cpu.cores in body should be greater than or equal to 1"#,
                r#"spec.template.spec.domain.devices.disks[0].bootOrder: Invalid value: 0: spec.template.spec.domain.devices.disks[0].bootOrder in body should be greater than or equal to 1"#,
                r#"spec.template.spec.domain.devices.disks[1].name: Required value"#,
                r#"spec.template.spec.hostname: Invalid value: "Bad_Host": spec.template.spec.hostname in body should match '^[a-z0-9-]+$'"#,
                r#"spec.template.spec.since: Invalid value: "yesterday": spec.template.spec.since in body must be of type date-time: "yesterday""#,
                r#"spec.template.spec.tags[1]: Duplicate value: "a""#,
                r#"spec.template.spec.uuid: Invalid value: "not-a-uuid": spec.template.spec.uuid in body must be of type uuid: "not-a-uuid""#,
                r#"spec.template.spec.volumes[1]: Duplicate value: {"name":"averyveryverylongname"}"#,
                r#"spec.template.spec.volumes[0].name: Too long: may not be more than 10 bytes"#,
                r#"spec.template.spec.volumes[1].name: Too long: may not be more than 10 bytes"#,
            ]
        );
    }

    #[test]
    fn required_and_root_metadata() {
        assert_eq!(
            messages(json!({"apiVersion": "kubevirt.io/v1"})),
            vec!["spec: Required value"]
        );
        assert_eq!(
            messages(
                json!({"metadata": {"labels": {"a": 1}, "name": "x"}, "spec": {"template": {"spec": {"domain": {}}}}})
            ),
            vec![
                r#"metadata.labels.a: Invalid value: "integer": metadata.labels.a in body must be of type string: "integer""#,
                "spec.template.spec.domain.devices: Required value",
            ]
        );
    }

    #[test]
    fn formats_are_lenient() {
        for ok in [
            "2025-01-01T00:00:00Z",
            "2025-01-01T00:00:00.123+02:00",
            "2025-01-01T00:00:00",
            "2025-01-01T00:00Z",
        ] {
            assert!(is_date_time(ok), "{ok}");
        }
        assert!(!is_date_time("2025-01-01"));
        assert!(is_uuid("6a1a2c5e-4b3f-4f7e-9b1e-0e2d3c4b5a69"));
        assert!(is_uuid("6A1A2C5E4B3F4F7E9B1E0E2D3C4B5A69"));
        assert!(!is_uuid("6a1a2c5e-4b3f-4f7e-9b1e-0e2d3c4b5a6"));
    }
}
