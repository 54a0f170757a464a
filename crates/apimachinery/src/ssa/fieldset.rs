//! Sets of field paths and their `FieldsV1` wire form (`{"f:spec":{"f:runStrategy":{}}}`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::walk;
use crate::gojson::{self, Escaping};
use crate::schema::{too_deep, Schema, MAX_DEPTH};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A struct field or map key: `f:<name>`.
    Field(String),
    /// An item of a map list, by the canonical JSON of its key fields: `k:{"name":"x"}`.
    Key(String),
    /// An item of a set list, by its canonical JSON value: `v:"x"`.
    Value(String),
    /// An item of a list by position: `i:0` (only seen in sets written by others).
    Index(usize),
}

impl PathElement {
    /// The map-list item whose key fields are `key`.
    pub fn key(key: &Map<String, Value>) -> PathElement {
        // As structured-merge-diff writes it: field names sorted and escaped as
        // json-iterator writes object field names, values as it writes values.
        let mut names: Vec<&String> = key.keys().collect();
        names.sort();
        let mut json = String::from("{");
        for (i, name) in names.into_iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            gojson::push_string(&mut json, name, Escaping::JsonIteratorFieldName);
            json.push(':');
            gojson::write_value(&mut json, &key[name.as_str()], Escaping::JsonIterator);
        }
        json.push('}');
        PathElement::Key(json)
    }

    /// The set item `value`.
    pub fn value(value: &Value) -> PathElement {
        PathElement::Value(canonical_json(value))
    }

    /// The `FieldsV1` object key of this element.
    pub fn fields_v1_key(&self) -> String {
        // Concatenated by hand: `format!` was a fifth of writing a create's managedFields.
        let (prefix, text) = match self {
            PathElement::Field(name) => ("f:", name.as_str()),
            PathElement::Key(json) => ("k:", json.as_str()),
            PathElement::Value(json) => ("v:", json.as_str()),
            PathElement::Index(i) => return format!("i:{i}"),
        };
        let mut key = String::with_capacity(prefix.len() + text.len());
        key.push_str(prefix);
        key.push_str(text);
        key
    }

    /// Parses a `FieldsV1` key; keys and values are re-encoded canonically so that equal
    /// items compare equal whatever the client's spelling.
    pub fn parse_fields_v1_key(key: &str) -> Result<PathElement, String> {
        let (kind, rest) = key
            .split_at_checked(2)
            .ok_or_else(|| format!("invalid field path element {key:?}"))?;
        match kind {
            "f:" => Ok(PathElement::Field(rest.to_string())),
            "k:" => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(m)) => Ok(PathElement::key(&m)),
                _ => Err(format!("invalid key in field path element {key:?}")),
            },
            "v:" => serde_json::from_str::<Value>(rest)
                .map(|v| PathElement::value(&v))
                .map_err(|_| format!("invalid value in field path element {key:?}")),
            "i:" => rest
                .parse()
                .map(PathElement::Index)
                .map_err(|_| format!("invalid index in field path element {key:?}")),
            _ => Err(format!("invalid field path element {key:?}")),
        }
    }
}

/// Prints like structured-merge-diff's `Path.String()`: `.spec.volumes[name="root"]`,
/// `.metadata.finalizers[="x"]`, `[0]`.
impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(json) => {
                let fields = match serde_json::from_str::<Value>(json) {
                    Ok(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                let mut sorted: Vec<(&String, &Value)> = fields.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(b.0));
                let parts: Vec<String> = sorted
                    .iter()
                    .map(|(k, v)| format!("{k}={}", go_string(v)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(json) => {
                let v = serde_json::from_str::<Value>(json).unwrap_or(Value::Null);
                write!(f, "[={}]", go_string(&v))
            }
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path as conflicts print it: `.spec.runStrategy`.
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().fold(String::new(), |mut out, pe| {
        let _ = write!(out, "{pe}");
        out
    })
}

/// A value inside a printed path element: strings quoted, the rest as JSON.
fn go_string(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// A set of field paths, stored as a trie: `members` end here, `children` continue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds a path; the empty path (the object itself) is never a member.
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            // Look up before inserting: cloning path elements for keys already present
            // was most of the cost of building the set of a large object.
            [last] => {
                if !self.members.contains(last) {
                    self.members.insert(last.clone());
                }
            }
            [first, rest @ ..] => match self.children.get_mut(first) {
                Some(child) => child.insert(rest),
                None => {
                    let mut child = FieldSet::new();
                    child.insert(rest);
                    self.children.insert(first.clone(), child);
                }
            },
        }
    }

    pub fn contains(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    /// Adds `path` and, below it, every path of `tree` (the subtree of an object that
    /// appeared whole), descending from the root once rather than once per path.
    pub(crate) fn insert_tree(&mut self, path: &[PathElement], tree: FieldSet) {
        match path {
            [] => *self = self.union(&tree),
            [last] => {
                self.members.insert(last.clone());
                if !tree.is_empty() {
                    match self.children.get_mut(last) {
                        Some(child) => *child = child.union(&tree),
                        None => {
                            self.children.insert(last.clone(), tree);
                        }
                    }
                }
            }
            [first, rest @ ..] => match self.children.get_mut(first) {
                Some(child) => child.insert_tree(rest, tree),
                None => {
                    let mut child = FieldSet::new();
                    child.insert_tree(rest, tree);
                    self.children.insert(first.clone(), child);
                }
            },
        }
    }

    pub(crate) fn has_member(&self, pe: &PathElement) -> bool {
        self.members.contains(pe)
    }

    pub(crate) fn insert_member(&mut self, pe: PathElement) {
        self.members.insert(pe);
    }

    pub(crate) fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    pub(crate) fn children(&self) -> impl Iterator<Item = (&PathElement, &FieldSet)> {
        self.children.iter()
    }

    pub(crate) fn set_child(&mut self, pe: PathElement, child: FieldSet) {
        if child.is_empty() {
            self.children.remove(&pe);
        } else {
            self.children.insert(pe, child);
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.subtract(other);
        out
    }

    /// `difference` in place, for a set the caller owns.
    pub fn subtract(&mut self, other: &FieldSet) {
        self.members.retain(|pe| !other.members.contains(pe));
        self.children.retain(|pe, child| {
            if let Some(theirs) = other.children.get(pe) {
                child.subtract(theirs);
            }
            !child.is_empty()
        });
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.intersection(&other.members).cloned().collect(),
            ..FieldSet::default()
        };
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                out.set_child(pe.clone(), child.intersection(theirs));
            }
        }
        out
    }

    /// Every member path, in structured-merge-diff's iteration order (a level's members,
    /// then each child subtree).
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for pe in &self.members {
            let mut path = prefix.clone();
            path.push(pe.clone());
            out.push(path);
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` JSON of this set; a path that is both a member and a prefix of others
    /// carries `".": {}`.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.fields_v1_map(false))
    }

    fn fields_v1_map(&self, include_self: bool) -> Map<String, Value> {
        let mut entries = Map::new();
        if include_self {
            entries.insert(".".to_string(), Value::Object(Map::new()));
        }
        for pe in self
            .members
            .iter()
            .filter(|pe| !self.children.contains_key(*pe))
        {
            entries.insert(pe.fields_v1_key(), Value::Object(Map::new()));
        }
        for (pe, child) in &self.children {
            entries.insert(
                pe.fields_v1_key(),
                Value::Object(child.fields_v1_map(self.members.contains(pe))),
            );
        }
        entries
    }

    /// Parses `fieldsV1` JSON, as found in `metadata.managedFields[].fieldsV1`.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        if too_deep(v, MAX_DEPTH) {
            return Err(format!("fieldsV1 nests deeper than {MAX_DEPTH} levels"));
        }
        FieldSet::parse_fields_v1(v)
    }

    fn parse_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let map = v.as_object().ok_or("fieldsV1 must be an object")?;
        let mut set = FieldSet::new();
        for (key, child) in map {
            if key == "." {
                continue;
            }
            let pe = PathElement::parse_fields_v1_key(key)?;
            let inner = child
                .as_object()
                .ok_or_else(|| format!("fieldsV1 entry {key:?} must be an object"))?;
            if inner.is_empty() || inner.contains_key(".") {
                set.members.insert(pe.clone());
            }
            set.set_child(pe, FieldSet::parse_fields_v1(child)?);
        }
        Ok(set)
    }

    /// The fields an applied configuration owns: its leaves, map-list and set items, empty
    /// or null objects and map entries — without the fields the server manages itself
    /// (apiVersion, kind, metadata.name, uid, resourceVersion, …).
    pub fn from_object(obj: &Value, schema: &Schema) -> FieldSet {
        if too_deep(obj, MAX_DEPTH) {
            return FieldSet::new();
        }
        walk::to_set(obj, schema).difference(server_fields())
    }
}

/// What upstream strips from every manager's set (`stripmeta.go`).
pub(crate) fn server_fields() -> &'static FieldSet {
    static SERVER_FIELDS: LazyLock<FieldSet> = LazyLock::new(build_server_fields);
    &SERVER_FIELDS
}

fn build_server_fields() -> FieldSet {
    let mut set = FieldSet::new();
    let f = |s: &str| PathElement::Field(s.to_string());
    set.insert(&[f("apiVersion")]);
    set.insert(&[f("kind")]);
    set.insert(&[f("metadata")]);
    for name in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        set.insert(&[f("metadata"), f(name)]);
    }
    set
}

/// JSON with sorted keys, Go's number forms and json-iterator's string escaping (`<`,
/// `>`, `&`, U+2028/9 and control characters as `\u…`): the form of a value in a `v:`
/// element, as structured-merge-diff writes it.
pub fn canonical_json(v: &Value) -> String {
    gojson::marshal(v, Escaping::JsonIterator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trip() {
        let wire = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:finalizers": {".": {}, "v:\"a\\u003cb\"": {}}},
            "f:spec": {
                "f:runStrategy": {},
                "f:template": {"f:spec": {"f:volumes": {
                    "k:{\"name\":\"root\"}": {".": {}, "f:containerDisk": {"f:image": {}}, "f:name": {}}
                }}}
            },
            "f:status": {"i:0": {}}
        });
        let set = FieldSet::from_fields_v1(&wire).unwrap();
        assert_eq!(set.to_fields_v1(), wire);
        let f = |s: &str| PathElement::Field(s.into());
        assert!(set.contains(&[f("metadata"), f("labels")]));
        assert!(!set.contains(&[f("spec"), f("template")]));
        let volume = PathElement::key(json!({"name": "root"}).as_object().unwrap());
        assert!(set.contains(&[
            f("spec"),
            f("template"),
            f("spec"),
            f("volumes"),
            volume.clone(),
            f("name")
        ]));
        assert_eq!(
            path_string(&[f("spec"), f("volumes"), volume, f("name")]),
            ".spec.volumes[name=\"root\"].name"
        );
        assert_eq!(
            path_string(&[
                f("metadata"),
                f("finalizers"),
                PathElement::value(&json!("x"))
            ]),
            ".metadata.finalizers[=\"x\"]"
        );
        assert_eq!(set.paths().len(), 9);
    }

    #[test]
    fn keys_are_canonical() {
        let a = PathElement::parse_fields_v1_key(r#"k:{"port": 80, "protocol":"TCP"}"#).unwrap();
        let b = PathElement::key(json!({"protocol": "TCP", "port": 80}).as_object().unwrap());
        assert_eq!(a, b);
        assert_eq!(a.fields_v1_key(), r#"k:{"port":80,"protocol":"TCP"}"#);
        assert_eq!(a.to_string(), r#"[port=80,protocol="TCP"]"#);
        assert_eq!(
            canonical_json(&json!({"b": "<&>", "a": [1, null]})),
            r#"{"a":[1,null],"b":"\u003c\u0026\u003e"}"#
        );
    }

    /// structured-merge-diff writes k: and v: elements with json-iterator: `\b` and `\f`
    /// as `\u0008` and `\u000c`, k: field names without HTML escaping, and Go's numbers.
    #[test]
    fn elements_are_written_as_structured_merge_diff_writes_them() {
        assert_eq!(
            PathElement::value(&json!("a\u{8}\u{c}<\u{2028}")).fields_v1_key(),
            r#"v:"a\u0008\u000c\u003c\u2028""#
        );
        let key = json!({"port": 1.0, "<\u{8}": "\u{8}&"});
        assert_eq!(
            PathElement::key(key.as_object().unwrap()).fields_v1_key(),
            r#"k:{"<\u0008":"\u0008\u0026","port":1}"#
        );
        assert_eq!(PathElement::value(&json!(1e21)).fields_v1_key(), "v:1e+21");
    }

    #[test]
    fn bad_fields_v1_is_rejected() {
        for bad in [
            json!([]),
            json!({"x:y": {}}),
            json!({"f:a": 1}),
            json!({"k:[1]": {}}),
            json!({"i:x": {}}),
            json!({"f": {}}),
        ] {
            assert!(FieldSet::from_fields_v1(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn set_algebra() {
        let p = |s: &str| {
            s.split('.')
                .map(|f| PathElement::Field(f.into()))
                .collect::<Vec<_>>()
        };
        let mut a = FieldSet::new();
        a.insert(&p("spec.a"));
        a.insert(&p("spec.b"));
        a.insert(&p("spec"));
        let mut b = FieldSet::new();
        b.insert(&p("spec.b"));
        b.insert(&p("spec.c.d"));
        assert_eq!(a.intersection(&b).paths(), vec![p("spec.b")]);
        assert_eq!(a.difference(&b).paths(), vec![p("spec"), p("spec.a")]);
        assert_eq!(
            a.union(&b).paths(),
            vec![p("spec"), p("spec.a"), p("spec.b"), p("spec.c.d")]
        );
        assert!(a.difference(&a).is_empty());
    }
}
