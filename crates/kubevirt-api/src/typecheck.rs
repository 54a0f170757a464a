//! Checks that a client's JSON has the types our schema declares before any admission rule
//! looks at it, reporting mismatches the way the Kubernetes schema validator words them.
//! Unknown fields are left alone: pruning them is the structural-schema engine's job.
//!
//! The walk follows apimachinery's structural schema of the checked component; only the
//! JSON types (and quantities, which must parse as Go's) are checked here, since KubeVirt's
//! webhooks see a decoded object and the rest of the schema is theirs to enforce.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use apimachinery::field::{self, FieldError};
use apimachinery::schema::{NodeRef, Schema};
use serde_json::Value;

use crate::quantity::{Quantity, FORMAT_ERROR};
use crate::schema;

const QUANTITY_SCHEMA: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

/// Type errors of `value` against the named component schema, with paths below `path`.
pub(crate) fn check(value: &Value, schema_name: &'static str, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(schema) = compiled(schema_name) {
        let mut at = Path {
            base: path,
            segments: Vec::new(),
        };
        walk(value, schema.root(), &mut at, &mut errs);
    }
    errs
}

/// The structural schema of a component, built the first time it is checked against.
fn compiled(name: &'static str) -> Option<&'static Schema> {
    static SCHEMAS: OnceLock<Mutex<HashMap<&'static str, Option<&'static Schema>>>> =
        OnceLock::new();
    let mut schemas = SCHEMAS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *schemas.entry(name).or_insert_with(|| {
        // The documents are compiled in; a unit test builds each checked component.
        Schema::from_components(schema::openapi_components(), name)
            .ok()
            .map(|schema| &*Box::leak(Box::new(schema)))
    })
}

/// Where the walk is, kept as segments and spelled out only for an error: formatting
/// every path of a well-typed object cost more than checking it.
struct Path<'v> {
    base: &'v str,
    segments: Vec<Segment<'v>>,
}

enum Segment<'v> {
    Key(&'v str),
    Index(usize),
}

impl Path<'_> {
    fn render(&self) -> String {
        let mut out = self.base.to_string();
        for segment in &self.segments {
            match segment {
                Segment::Key(key) => field::push_child(&mut out, key),
                Segment::Index(i) => field::push_index(&mut out, *i),
            };
        }
        out
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_error(path: &str, value: &Value, expected: &str) -> FieldError {
    let got = json_type(value);
    FieldError::type_invalid(
        path,
        got,
        format!("{path} in body must be of type {expected}: \"{got}\""),
    )
}

/// The quantity pattern, which marks quantity-typed strings (and the Quantity schema).
fn quantity_pattern() -> Option<&'static str> {
    static PATTERN: OnceLock<Option<&'static str>> = OnceLock::new();
    *PATTERN.get_or_init(|| schema::lookup(QUANTITY_SCHEMA)?.get("pattern")?.as_str())
}

fn is_quantity_pattern(node: NodeRef<'_>) -> bool {
    node.pattern.is_some() && node.pattern.as_deref() == quantity_pattern()
}

fn walk<'v>(value: &'v Value, node: NodeRef<'_>, path: &mut Path<'v>, errs: &mut Vec<FieldError>) {
    if value.is_null() {
        return;
    }
    if node.int_or_string {
        if is_quantity_pattern(node) {
            check_quantity(value, path, errs);
        } else if !(value.is_string() || apimachinery::schema::Type::Integer.matches(value)) {
            errs.push(type_error(&path.render(), value, "integer,string"));
        }
        return;
    }
    if !node.types.is_empty() && !node.types.iter().any(|t| t.matches(value)) {
        let expected: Vec<&str> = node.types.iter().map(|t| t.name()).collect();
        errs.push(type_error(&path.render(), value, &expected.join(",")));
        return;
    }
    if value.is_string() && is_quantity_pattern(node) {
        check_quantity(value, path, errs);
    }
    match value {
        Value::Object(map) => {
            for (key, member) in map {
                let sub = node.property(key).or_else(|| node.additional_properties());
                if let Some(sub) = sub {
                    path.segments.push(Segment::Key(key));
                    walk(member, sub, path, errs);
                    path.segments.pop();
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = node.items() {
                for (i, item) in items.iter().enumerate() {
                    path.segments.push(Segment::Index(i));
                    walk(item, sub, path, errs);
                    path.segments.pop();
                }
            }
        }
        _ => {}
    }
}

/// Quantities must parse as Go would decode them, or KubeVirt's decoding would fail.
fn check_quantity(value: &Value, path: &Path<'_>, errs: &mut Vec<FieldError>) {
    if !matches!(value, Value::String(_) | Value::Number(_)) {
        errs.push(type_error(&path.render(), value, "integer,string"));
    } else if Quantity::from_json(value).is_none() {
        errs.push(FieldError::invalid(
            path.render(),
            value.clone(),
            FORMAT_ERROR,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_checked_component_builds() {
        for name in [
            "io.kubevirt.v1.VirtualMachineSpec",
            "io.kubevirt.v1.VirtualMachineInstanceSpec",
            "io.kubevirt.v1.VirtualMachineInstanceMigrationSpec",
        ] {
            assert!(compiled(name).is_some(), "{name}");
        }
    }

    #[test]
    fn reports_wrong_types_with_kubernetes_wording() {
        let spec = json!({
            "running": "yes",
            "template": {"spec": {
                "domain": {"devices": {"disks": [{"name": 3}]}, "cpu": {"cores": 1.0, "sockets": 1.5},
                           "resources": {"requests": {"memory": "lots", "cpu": 2}}},
                "volumes": "none",
                "unknownField": {"anything": [1]},
                "affinity": {"free": "form"}
            }}
        });
        let errs = check(&spec, "io.kubevirt.v1.VirtualMachineSpec", "spec");
        let mut fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "spec.running",
                "spec.template.spec.domain.cpu.sockets",
                "spec.template.spec.domain.devices.disks[0].name",
                "spec.template.spec.domain.resources.requests.memory",
                "spec.template.spec.volumes",
            ]
        );
        let running = errs.iter().find(|e| e.field == "spec.running").unwrap();
        assert_eq!(
            running.message(),
            "spec.running: Invalid value: \"string\": spec.running in body must be of type boolean: \"string\""
        );
        let memory = errs.iter().find(|e| e.field.ends_with("memory")).unwrap();
        assert!(memory.message().ends_with(FORMAT_ERROR));
    }

    #[test]
    fn accepts_well_typed_objects_and_nulls() {
        let spec = json!({"domain": {"devices": {}, "memory": {"guest": "1Gi", "maxGuest": 4294967296_u64},
                                      "firmware": null}, "nodeSelector": {"a": "b"}});
        assert!(check(&spec, "io.kubevirt.v1.VirtualMachineInstanceSpec", "spec").is_empty());
        let bad = json!({"domain": {"devices": {}, "memory": {"guest": "1 Gi"}}, "nodeSelector": {"a": 1}});
        let errs = check(&bad, "io.kubevirt.v1.VirtualMachineInstanceSpec", "spec");
        let mut fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        fields.sort();
        assert_eq!(fields, ["spec.domain.memory.guest", "spec.nodeSelector.a"]);
    }
}
