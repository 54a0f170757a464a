//! Checks that a client's JSON has the types our schema declares before any admission rule
//! looks at it, reporting mismatches the way the Kubernetes schema validator words them.
//! Unknown fields are left alone: pruning them is the structural-schema engine's job.

use std::collections::HashMap;
use std::sync::OnceLock;

use apimachinery::field::{self, FieldError};
use serde_json::Value;

use crate::quantity::{Quantity, FORMAT_ERROR};
use crate::schema;

const QUANTITY_SCHEMA: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const REF_PREFIX: &str = "#/components/schemas/";

/// Type errors of `value` against the named component schema, with paths below `path`.
pub(crate) fn check(value: &Value, schema_name: &str, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let checks = Checks::get();
    if let Some(&root) = checks.by_name.get(schema_name) {
        let mut at = Path {
            base: path,
            segments: Vec::new(),
        };
        walk(value, checks, root, &mut at, &mut errs);
    }
    errs
}

/// The component schemas reduced to what the check reads, `$ref`s resolved to indexes:
/// walking the JSON schema itself took several map lookups per field.
struct Checks {
    nodes: Vec<Check>,
    by_name: HashMap<&'static str, usize>,
}

#[derive(Default)]
struct Check {
    rule: Rule,
    properties: HashMap<&'static str, usize>,
    additional: Option<usize>,
    items: Option<usize>,
}

#[derive(Default)]
enum Rule {
    /// A `$ref` to a schema we do not have: nothing is checked.
    #[default]
    Nothing,
    /// A component that is a `$ref` to another.
    Same(usize),
    Quantity,
    IntOrString,
    /// A JSON type (`None`: any), then the members' and items' schemas.
    Typed {
        expected: Option<&'static str>,
        quantity_text: bool,
    },
}

impl Checks {
    fn get() -> &'static Checks {
        static CHECKS: OnceLock<Checks> = OnceLock::new();
        CHECKS.get_or_init(|| {
            let mut checks = Checks {
                nodes: Vec::new(),
                by_name: HashMap::new(),
            };
            let names = schema::openapi_components()
                .as_object()
                .map(|all| all.keys().map(String::as_str).collect::<Vec<_>>())
                .unwrap_or_default();
            for name in names {
                checks.named(name);
            }
            checks
        })
    }

    /// The node of a component, compiled once; its slot is taken before its content so
    /// that recursive schemas end.
    fn named(&mut self, name: &'static str) -> usize {
        if let Some(&index) = self.by_name.get(name) {
            return index;
        }
        let index = self.nodes.len();
        self.nodes.push(Check::default());
        self.by_name.insert(name, index);
        self.nodes[index] = match schema::lookup(name) {
            None => Check::default(),
            Some(_) if name == QUANTITY_SCHEMA => Check::rule(Rule::Quantity),
            Some(target) => match reference(target) {
                Some(other) => Check::rule(Rule::Same(self.named(other))),
                None => self.content(target),
            },
        };
        index
    }

    fn compile(&mut self, schema: &'static Value) -> usize {
        if let Some(name) = reference(schema) {
            return self.named(name);
        }
        let check = self.content(schema);
        self.nodes.push(check);
        self.nodes.len() - 1
    }

    /// A schema that is not a `$ref` (the siblings of a `$ref` are never read).
    fn content(&mut self, schema: &'static Value) -> Check {
        if schema
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            == Some(true)
        {
            return Check::rule(Rule::IntOrString);
        }
        let expected = schema.get("type").and_then(Value::as_str);
        let quantity_text = expected == Some("string")
            && schema.get("pattern").and_then(Value::as_str) == quantity_pattern();
        let mut check = Check::rule(Rule::Typed {
            expected,
            quantity_text,
        });
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (key, sub) in props {
                let index = self.compile(sub);
                check.properties.insert(key.as_str(), index);
            }
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|s| s.is_object()) {
            check.additional = Some(self.compile(extra));
        }
        if let Some(items) = schema.get("items") {
            check.items = Some(self.compile(items));
        }
        check
    }
}

impl Check {
    fn rule(rule: Rule) -> Check {
        Check {
            rule,
            ..Check::default()
        }
    }
}

/// The component a `$ref` schema names.
fn reference(schema: &'static Value) -> Option<&'static str> {
    let reference = schema.get("$ref").and_then(Value::as_str)?;
    Some(reference.strip_prefix(REF_PREFIX).unwrap_or(reference))
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

fn walk<'v>(
    value: &'v Value,
    checks: &Checks,
    node: usize,
    path: &mut Path<'v>,
    errs: &mut Vec<FieldError>,
) {
    if value.is_null() {
        return;
    }
    let check = &checks.nodes[node];
    let (expected, quantity_text) = match check.rule {
        Rule::Nothing => return,
        Rule::Same(other) => return walk(value, checks, other, path, errs),
        Rule::Quantity => return check_quantity(value, path, errs),
        Rule::IntOrString => {
            if !matches!(json_type(value), "integer" | "string") {
                errs.push(type_error(&path.render(), value, "integer,string"));
            }
            return;
        }
        Rule::Typed {
            expected,
            quantity_text,
        } => (expected.unwrap_or(""), quantity_text),
    };
    let ok = match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "integer" => crate::access::as_int(value).is_some(),
        _ => true,
    };
    if !ok {
        errs.push(type_error(&path.render(), value, expected));
        return;
    }
    if quantity_text {
        check_quantity(value, path, errs);
    }
    match value {
        Value::Object(map) => {
            for (key, member) in map {
                let sub = check.properties.get(key.as_str()).copied();
                if let Some(sub) = sub.or(check.additional) {
                    path.segments.push(Segment::Key(key));
                    walk(member, checks, sub, path, errs);
                    path.segments.pop();
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = check.items {
                for (i, item) in items.iter().enumerate() {
                    path.segments.push(Segment::Index(i));
                    walk(item, checks, sub, path, errs);
                    path.segments.pop();
                }
            }
        }
        _ => {}
    }
}

/// The quantity pattern, shared by every quantity-typed string in the schema.
fn quantity_pattern() -> Option<&'static str> {
    static PATTERN: OnceLock<Option<&'static str>> = OnceLock::new();
    *PATTERN.get_or_init(|| schema::lookup(QUANTITY_SCHEMA)?.get("pattern")?.as_str())
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
