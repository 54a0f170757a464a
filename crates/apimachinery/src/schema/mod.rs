//! Structural schemas with the semantics kube-apiserver gives CustomResourceDefinitions:
//! pruning of unknown fields, OpenAPI value validation and the list/map topology that
//! server-side apply merges by.
//!
//! A schema is built once from the OpenAPI v3 `components.schemas` we serve, so that what
//! `kubectl explain` shows, what is pruned and what is validated can never disagree.

mod prune;
mod validate;

use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;

use regex::Regex;
use serde_json::{Map, Value};

/// Deepest nesting any walker descends into; deeper values are left alone so that hostile
/// bodies cannot exhaust the stack.
pub(crate) const MAX_DEPTH: usize = 256;

type NodeId = usize;

/// A JSON type named by the OpenAPI `type` keyword.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    fn parse(name: &str) -> Option<Type> {
        Some(match name {
            "object" => Type::Object,
            "array" => Type::Array,
            "string" => Type::String,
            "integer" => Type::Integer,
            "number" => Type::Number,
            "boolean" => Type::Boolean,
            _ => return None,
        })
    }

    /// Whether `value` is of this type; a whole number written as a float is an integer.
    pub fn matches(self, value: &Value) -> bool {
        match self {
            Type::Object => value.is_object(),
            Type::Array => value.is_array(),
            Type::String => value.is_string(),
            Type::Boolean => value.is_boolean(),
            Type::Number => value.is_number(),
            Type::Integer => match value {
                Value::Number(n) => {
                    n.is_i64()
                        || n.is_u64()
                        || n.as_f64()
                            .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
                }
                _ => false,
            },
        }
    }

    /// The name OpenAPI (and the apiextensions error messages) use.
    pub fn name(self) -> &'static str {
        match self {
            Type::Object => "object",
            Type::Array => "array",
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
        }
    }
}

/// How a list merges (`x-kubernetes-list-type`). Lists without a marker are atomic, as in
/// CRDs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ListType {
    #[default]
    Atomic,
    Set,
    /// Items are identified by these fields (`x-kubernetes-list-map-keys`).
    Map(Vec<String>),
}

/// A numeric bound (`minimum`/`maximum`, possibly exclusive).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    pub value: f64,
    pub exclusive: bool,
}

#[derive(Clone, Debug, Default)]
enum Additional {
    /// Absent or `false`: only the declared properties exist.
    #[default]
    Closed,
    /// `true`: anything goes.
    Any,
    Schema(NodeId),
}

/// One schema node. Children are reached through [`NodeRef`], which knows the arena.
#[derive(Clone, Debug, Default)]
pub struct Node {
    pub description: String,
    /// Empty means any type (int-or-string, preserve-unknown-fields, free-form).
    pub types: Vec<Type>,
    pub format: Option<String>,
    pub nullable: bool,
    pub default: Option<Value>,
    pub required: Vec<String>,
    pub enum_values: Vec<Value>,
    pub pattern: Option<String>,
    pub minimum: Option<Bound>,
    pub maximum: Option<Bound>,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub unique_items: bool,
    pub preserve_unknown_fields: bool,
    pub embedded_resource: bool,
    pub int_or_string: bool,
    /// `x-kubernetes-map-type: atomic`: the object is replaced as a whole by apply.
    pub map_atomic: bool,
    list_type: Option<ListType>,
    properties: BTreeMap<String, NodeId>,
    additional: Additional,
    items: Option<NodeId>,
    regex: Option<Regex>,
}

/// An immutable, resolved structural schema for one kind.
#[derive(Clone, Debug)]
pub struct Schema {
    nodes: Vec<Node>,
    root: NodeId,
}

/// A node together with the schema it lives in, so children can be followed.
#[derive(Clone, Copy, Debug)]
pub struct NodeRef<'a> {
    schema: &'a Schema,
    id: NodeId,
}

impl Deref for NodeRef<'_> {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.schema.nodes[self.id]
    }
}

impl<'a> NodeRef<'a> {
    fn at(self, id: NodeId) -> NodeRef<'a> {
        NodeRef {
            schema: self.schema,
            id,
        }
    }

    pub fn node(self) -> &'a Node {
        &self.schema.nodes[self.id]
    }

    /// A declared property (`properties.<name>`).
    pub fn property(self, name: &str) -> Option<NodeRef<'a>> {
        self.node().properties.get(name).map(|&id| self.at(id))
    }

    /// Declared properties in name order.
    pub fn properties(self) -> impl Iterator<Item = (&'a str, NodeRef<'a>)> {
        let schema = self.schema;
        self.node()
            .properties
            .iter()
            .map(move |(k, &id)| (k.as_str(), NodeRef { schema, id }))
    }

    /// The schema of map values (`additionalProperties: {…}`).
    pub fn additional_properties(self) -> Option<NodeRef<'a>> {
        match self.node().additional {
            Additional::Schema(id) => Some(self.at(id)),
            _ => None,
        }
    }

    /// The schema of array items.
    pub fn items(self) -> Option<NodeRef<'a>> {
        self.node().items.map(|id| self.at(id))
    }

    pub fn list_type(self) -> &'a ListType {
        static ATOMIC: ListType = ListType::Atomic;
        self.node().list_type.as_ref().unwrap_or(&ATOMIC)
    }

    /// Whether keys this schema does not declare are kept: preserve-unknown-fields,
    /// `additionalProperties: true`, or an object that declares no structure at all.
    pub fn keeps_unknown_fields(self) -> bool {
        let n = self.node();
        n.preserve_unknown_fields
            || matches!(n.additional, Additional::Any)
            || (n.properties.is_empty() && matches!(n.additional, Additional::Closed))
    }

    /// Whether values here are JSON objects.
    pub fn is_object(self) -> bool {
        let n = self.node();
        n.types.contains(&Type::Object)
            || n.embedded_resource
            || (n.types.is_empty()
                && (!n.properties.is_empty() || !matches!(n.additional, Additional::Closed)))
    }

    /// Whether values here are JSON arrays.
    pub fn is_array(self) -> bool {
        let n = self.node();
        n.types.contains(&Type::Array) || (n.types.is_empty() && n.items.is_some())
    }
}

impl Schema {
    /// Builds the schema of `root` from an OpenAPI v3 `components.schemas` object, resolving
    /// `$ref` and `allOf`. The root's (and every embedded resource's) `metadata` becomes the
    /// full ObjectMeta and `apiVersion`/`kind` are always known, as for every CRD.
    pub fn from_components(components: &Value, root: &str) -> Result<Schema, String> {
        let components = components
            .as_object()
            .ok_or("components.schemas must be an object")?;
        let mut b = Builder {
            components,
            nodes: Vec::new(),
            finished: Vec::new(),
            named: HashMap::new(),
            shared: HashMap::new(),
        };
        let id = b.component(root, "")?;
        let mut node = b.nodes[id].clone();
        b.add_resource_fields(&mut node, "")?;
        let root = b.push(node, true);
        Ok(Schema {
            nodes: b.nodes,
            root,
        })
    }

    pub fn root(&self) -> NodeRef<'_> {
        NodeRef {
            schema: self,
            id: self.root,
        }
    }

    /// Finds the node of a dotted field path (`spec.template.spec.volumes.name`), stepping
    /// through arrays implicitly the way `kubectl explain` does. Empty path = root.
    pub fn lookup(&self, dotted: &str) -> Option<NodeRef<'_>> {
        let mut node = self.root();
        for segment in dotted.split('.').filter(|s| !s.is_empty()) {
            while node.is_array() {
                node = node.items()?;
            }
            node = node
                .property(segment)
                .or_else(|| node.additional_properties())?;
        }
        Some(node)
    }
}

/// Walks the OpenAPI document once, giving every named component one node (so recursion
/// through `$ref` terminates) and inline schemas their own.
struct Builder<'a> {
    components: &'a Map<String, Value>,
    nodes: Vec<Node>,
    finished: Vec<bool>,
    named: HashMap<String, NodeId>,
    /// Built-in nodes (ObjectMeta, plain string) by name.
    shared: HashMap<&'static str, NodeId>,
}

impl Builder<'_> {
    fn push(&mut self, node: Node, finished: bool) -> NodeId {
        self.nodes.push(node);
        self.finished.push(finished);
        self.nodes.len() - 1
    }

    /// A named component, built the first time it is reached (from the field `field`).
    fn component(&mut self, reference: &str, field: &str) -> Result<NodeId, String> {
        let name = ref_name(reference);
        if let Some(&id) = self.named.get(&name) {
            return Ok(id);
        }
        let schema = self
            .components
            .get(&name)
            .ok_or_else(|| format!("unresolved schema reference {reference:?}"))?;
        let id = self.push(Node::default(), false);
        self.named.insert(name.clone(), id);
        let at = At {
            field: field.to_string(),
            schema: name,
        };
        let node = self.node(schema, &at)?;
        self.nodes[id] = node;
        self.finished[id] = true;
        Ok(id)
    }

    fn schema(&mut self, schema: &Value, at: &At) -> Result<NodeId, String> {
        if let Some(reference) = pure_ref(schema) {
            return self.component(reference, &at.field);
        }
        let node = self.node(schema, at)?;
        Ok(self.push(node, true))
    }

    /// Copies a referenced node into `node` where `node` says nothing itself. A node still
    /// being built (a reference cycle) contributes nothing rather than looping.
    fn inherit(&mut self, node: &mut Node, reference: &str, field: &str) -> Result<(), String> {
        let id = self.component(reference, field)?;
        if self.finished[id] {
            let other = self.nodes[id].clone();
            merge_into(node, &other);
        }
        Ok(())
    }

    fn node(&mut self, schema: &Value, at: &At) -> Result<Node, String> {
        let Some(s) = schema.as_object() else {
            // `true` or junk: nothing is known, so anything is kept and accepted.
            return Ok(Node::default());
        };
        let mut node = keywords(s, at)?;
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                let id = self.schema(prop, &at.child(&format!(".{name}"), "properties", name))?;
                node.properties.insert(name.clone(), id);
            }
        }
        node.additional = match s.get("additionalProperties") {
            Some(Value::Bool(true)) => Additional::Any,
            Some(v @ Value::Object(_)) => {
                Additional::Schema(self.schema(v, &at.child("[*]", "additionalProperties", ""))?)
            }
            _ => Additional::Closed,
        };
        node.items = match s.get("items") {
            Some(v @ Value::Object(_)) => Some(self.schema(v, &at.child("[*]", "items", ""))?),
            Some(Value::Array(tuple)) => match tuple.first() {
                Some(first) => Some(self.schema(first, &at.child("[*]", "items", "0"))?),
                None => None,
            },
            _ => None,
        };
        if let Some(reference) = s.get("$ref").and_then(Value::as_str) {
            self.inherit(&mut node, reference, &at.field)?;
        }
        for (i, part) in s
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(reference) = pure_ref(part) {
                self.inherit(&mut node, reference, &at.field)?;
            } else {
                let other = self.node(part, &at.child("", "allOf", &i.to_string()))?;
                merge_into(&mut node, &other);
            }
        }
        if node.embedded_resource {
            self.add_resource_fields(&mut node, &at.field)?;
        }
        Ok(node)
    }

    /// Gives a resource (the root or an embedded one) its TypeMeta and the real ObjectMeta.
    fn add_resource_fields(&mut self, node: &mut Node, field: &str) -> Result<(), String> {
        let string = self.builtin("string", &serde_json::json!({"type": "string"}), field)?;
        node.properties.entry("apiVersion".into()).or_insert(string);
        node.properties.entry("kind".into()).or_insert(string);
        let meta = self.builtin("ObjectMeta", &object_meta_schema(), field)?;
        node.properties.insert("metadata".into(), meta);
        Ok(())
    }

    fn builtin(
        &mut self,
        name: &'static str,
        schema: &Value,
        field: &str,
    ) -> Result<NodeId, String> {
        if let Some(&id) = self.shared.get(name) {
            return Ok(id);
        }
        let at = At {
            field: field.to_string(),
            schema: format!("(built-in {name})"),
        };
        let id = self.schema(schema, &at)?;
        self.shared.insert(name, id);
        Ok(id)
    }
}

/// Where the builder is, for errors: the field path from the root by which the schema
/// was first reached (`spec.template.spec.hostname`, `[*]` for items and map values),
/// and the schema's place in the document (`v1.VirtualMachineSpec.properties.hostname`).
struct At {
    field: String,
    schema: String,
}

impl At {
    fn child(&self, field: &str, keyword: &str, name: &str) -> At {
        let field = if self.field.is_empty() {
            field.trim_start_matches('.').to_string()
        } else {
            format!("{}{field}", self.field)
        };
        let mut schema = format!("{}.{keyword}", self.schema);
        if !name.is_empty() {
            schema = format!("{schema}.{name}");
        }
        At { field, schema }
    }
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let field = if self.field.is_empty() {
            "(root)"
        } else {
            &self.field
        };
        write!(f, "field {field} (schema {})", self.schema)
    }
}

/// `#/components/schemas/X` (or any JSON pointer) → `X`, with `~1`/`~0` unescaped.
fn ref_name(reference: &str) -> String {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    last.replace("~1", "/").replace("~0", "~")
}

/// The target of a schema that is nothing but a reference (`$ref` alone or `allOf: [$ref]`),
/// which can share the component's node instead of copying it.
fn pure_ref(schema: &Value) -> Option<&str> {
    let s = schema.as_object()?;
    if s.len() != 1 {
        return None;
    }
    if let Some(r) = s.get("$ref") {
        return r.as_str();
    }
    match s.get("allOf")?.as_array()?.as_slice() {
        [only] => only
            .as_object()
            .filter(|o| o.len() == 1)?
            .get("$ref")?
            .as_str(),
        _ => None,
    }
}

fn keywords(s: &Map<String, Value>, at: &At) -> Result<Node, String> {
    let flag = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);
    let uint = |k: &str| s.get(k).and_then(Value::as_u64);
    let mut node = Node {
        description: s
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        format: s.get("format").and_then(Value::as_str).map(str::to_string),
        nullable: flag("nullable"),
        default: s.get("default").cloned(),
        required: s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        enum_values: s
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        minimum: bound(s, "minimum", "exclusiveMinimum"),
        maximum: bound(s, "maximum", "exclusiveMaximum"),
        multiple_of: s.get("multipleOf").and_then(Value::as_f64),
        min_length: uint("minLength"),
        max_length: uint("maxLength"),
        min_items: uint("minItems"),
        max_items: uint("maxItems"),
        min_properties: uint("minProperties"),
        max_properties: uint("maxProperties"),
        unique_items: flag("uniqueItems"),
        preserve_unknown_fields: flag("x-kubernetes-preserve-unknown-fields"),
        embedded_resource: flag("x-kubernetes-embedded-resource"),
        int_or_string: flag("x-kubernetes-int-or-string"),
        map_atomic: s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
        ..Node::default()
    };
    match s.get("type") {
        Some(Value::String(t)) => node.types.extend(Type::parse(t)),
        // OpenAPI 3.1: `type: [string, "null"]`.
        Some(Value::Array(ts)) => {
            for t in ts.iter().filter_map(Value::as_str) {
                match Type::parse(t) {
                    Some(t) => node.types.push(t),
                    None if t == "null" => node.nullable = true,
                    None => {}
                }
            }
        }
        _ => {}
    }
    if let Some(pattern) = s.get("pattern").and_then(Value::as_str) {
        // An invalid pattern is a broken schema, not one without the check (a CRD with
        // one is refused by kube-apiserver too).
        let regex =
            Regex::new(pattern).map_err(|e| format!("{at}: invalid pattern {pattern:?}: {e}"))?;
        node.regex = Some(regex);
        node.pattern = Some(pattern.to_string());
    }
    node.list_type = match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => Some(ListType::Set),
        Some("map") => Some(ListType::Map(
            s.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        )),
        Some("atomic") => Some(ListType::Atomic),
        _ => None,
    };
    // A map list without keys cannot identify its items; treat it as atomic.
    if matches!(&node.list_type, Some(ListType::Map(keys)) if keys.is_empty()) {
        node.list_type = Some(ListType::Atomic);
    }
    Ok(node)
}

/// OpenAPI 3.0 spells exclusivity as a boolean beside the bound, 3.1 as the bound itself.
fn bound(s: &Map<String, Value>, key: &str, exclusive_key: &str) -> Option<Bound> {
    match (s.get(key).and_then(Value::as_f64), s.get(exclusive_key)) {
        (_, Some(Value::Number(n))) => n.as_f64().map(|value| Bound {
            value,
            exclusive: true,
        }),
        (Some(value), exclusive) => Some(Bound {
            value,
            exclusive: exclusive.and_then(Value::as_bool).unwrap_or(false),
        }),
        (None, _) => None,
    }
}

/// Fills what `dst` leaves unsaid from `src` (for `$ref` siblings and `allOf`).
fn merge_into(dst: &mut Node, src: &Node) {
    if dst.description.is_empty() {
        dst.description = src.description.clone();
    }
    if dst.types.is_empty() {
        dst.types = src.types.clone();
    }
    fill(&mut dst.format, &src.format);
    fill(&mut dst.default, &src.default);
    fill(&mut dst.minimum, &src.minimum);
    fill(&mut dst.maximum, &src.maximum);
    fill(&mut dst.multiple_of, &src.multiple_of);
    fill(&mut dst.min_length, &src.min_length);
    fill(&mut dst.max_length, &src.max_length);
    fill(&mut dst.min_items, &src.min_items);
    fill(&mut dst.max_items, &src.max_items);
    fill(&mut dst.min_properties, &src.min_properties);
    fill(&mut dst.max_properties, &src.max_properties);
    fill(&mut dst.list_type, &src.list_type);
    fill(&mut dst.items, &src.items);
    if dst.pattern.is_none() {
        dst.pattern = src.pattern.clone();
        dst.regex = src.regex.clone();
    }
    if dst.enum_values.is_empty() {
        dst.enum_values = src.enum_values.clone();
    }
    for r in &src.required {
        if !dst.required.contains(r) {
            dst.required.push(r.clone());
        }
    }
    for (k, &id) in &src.properties {
        dst.properties.entry(k.clone()).or_insert(id);
    }
    if matches!(dst.additional, Additional::Closed) {
        dst.additional = src.additional.clone();
    }
    dst.nullable |= src.nullable;
    dst.unique_items |= src.unique_items;
    dst.preserve_unknown_fields |= src.preserve_unknown_fields;
    dst.embedded_resource |= src.embedded_resource;
    dst.int_or_string |= src.int_or_string;
    dst.map_atomic |= src.map_atomic;
}

fn fill<T: Clone>(dst: &mut Option<T>, src: &Option<T>) {
    if dst.is_none() {
        dst.clone_from(src);
    }
}

/// The fields of `metav1.ObjectMeta` and how apply merges them (finalizers are a set,
/// ownerReferences a map keyed by uid). Values are only type-checked, as upstream coerces
/// metadata through the typed struct.
fn object_meta_schema() -> Value {
    let string = serde_json::json!({"type": "string"});
    let time = serde_json::json!({"type": "string", "format": "date-time"});
    let int = serde_json::json!({"type": "integer", "format": "int64"});
    let boolean = serde_json::json!({"type": "boolean"});
    let string_map =
        serde_json::json!({"type": "object", "additionalProperties": {"type": "string"}});
    serde_json::json!({
        "type": "object",
        "description": "Standard object's metadata.",
        "properties": {
            "name": string, "generateName": string, "namespace": string, "selfLink": string,
            "uid": string, "resourceVersion": string, "generation": int,
            "creationTimestamp": time, "deletionTimestamp": time, "deletionGracePeriodSeconds": int,
            "labels": string_map, "annotations": string_map,
            "ownerReferences": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["uid"],
                "items": {"type": "object", "properties": {
                    "apiVersion": string, "kind": string, "name": string, "uid": string,
                    "controller": boolean, "blockOwnerDeletion": boolean
                }}
            },
            "finalizers": {"type": "array", "x-kubernetes-list-type": "set", "items": string},
            "managedFields": {"type": "array", "items": {"type": "object", "properties": {
                "manager": string, "operation": string, "apiVersion": string, "time": time,
                "fieldsType": string, "subresource": string,
                "fieldsV1": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}}
        }
    })
}

/// JSON equality with numbers compared by value (`1` equals `1.0`), as Go's unstructured
/// comparison does.
pub(crate) fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| values_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| values_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Whether `v` nests deeper than `max` (checked without recursion).
pub(crate) fn too_deep(v: &Value, max: usize) -> bool {
    let mut stack = vec![(v, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        if depth > max {
            return true;
        }
        match v {
            Value::Object(m) => stack.extend(m.values().map(|c| (c, depth + 1))),
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
pub(crate) mod tests;
