//! Schema-guided walks over objects: the field set an object owns, the difference of two
//! objects, the structured merge of an applied configuration, and removal of fields.
//!
//! Where the schema says nothing (preserve-unknown-fields, free-form objects) values are
//! "deduced" as structured-merge-diff does: objects are granular maps, lists are atomic.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

use super::fieldset::{path_string, FieldSet, PathElement};
use crate::schema::{values_equal, ListType, NodeRef, Schema};

/// How a node merges.
#[derive(Clone, Copy)]
enum Class<'a> {
    /// A scalar (or int-or-string): replaced as a whole.
    Scalar,
    /// An atomic list or map: replaced as a whole.
    Atomic,
    /// A granular object; `None` when the schema says nothing about its keys.
    Map(Option<NodeRef<'a>>),
    /// A set (`keys == None`) or map list.
    List {
        item: Option<NodeRef<'a>>,
        keys: Option<&'a [String]>,
    },
}

fn classify(node: Option<NodeRef<'_>>) -> Class<'_> {
    let Some(n) = node else {
        return Class::Map(None);
    };
    if n.int_or_string {
        return Class::Scalar;
    }
    if n.is_object() {
        return if n.map_atomic {
            Class::Atomic
        } else {
            Class::Map(Some(n))
        };
    }
    if n.is_array() {
        return match n.list_type() {
            ListType::Atomic => Class::Atomic,
            ListType::Set => Class::List {
                item: n.items(),
                keys: None,
            },
            ListType::Map(keys) => Class::List {
                item: n.items(),
                keys: Some(keys.as_slice()),
            },
        };
    }
    if n.types.is_empty() {
        Class::Map(None)
    } else {
        Class::Scalar
    }
}

/// The schema of `key` inside a map node, and whether it is a declared property.
fn child_of<'a>(node: Option<NodeRef<'a>>, key: &str) -> (Option<NodeRef<'a>>, bool) {
    match node {
        None => (None, false),
        Some(n) => match n.property(key) {
            Some(p) => (Some(p), true),
            None => (n.additional_properties(), false),
        },
    }
}

/// The path element of a list item: its value in a set, its key fields in a map list
/// (missing keys fall back to the schema default, as upstream).
fn item_element(
    item: &Value,
    keys: Option<&[String]>,
    item_node: Option<NodeRef<'_>>,
) -> Result<PathElement, String> {
    let Some(keys) = keys else {
        return Ok(PathElement::value(item));
    };
    let obj = item
        .as_object()
        .ok_or("associative list with keys has an element that is not a map")?;
    let mut key = Map::new();
    for k in keys {
        let v = obj.get(k).cloned().or_else(|| {
            item_node
                .and_then(|n| n.property(k))
                .and_then(|p| p.default.clone())
        });
        match v {
            Some(v) => {
                key.insert(k.clone(), v);
            }
            None => {
                return Err(format!(
                "associative list with keys has an element that omits key field {k:?} (and doesn't have default value)"
            ))
            }
        }
    }
    Ok(PathElement::key(&key))
}

/// Path elements of all items, or `None` if some item cannot be identified (the list is
/// then handled as atomic).
fn item_elements(
    items: &[Value],
    keys: Option<&[String]>,
    item_node: Option<NodeRef<'_>>,
) -> Option<Vec<PathElement>> {
    items
        .iter()
        .map(|i| item_element(i, keys, item_node).ok())
        .collect()
}

/// Items by path element, first occurrence winning, in list order.
fn index_items<'v>(
    items: &'v [Value],
    keys: Option<&[String]>,
    item_node: Option<NodeRef<'_>>,
) -> Option<Vec<(PathElement, &'v Value)>> {
    let elements = item_elements(items, keys, item_node)?;
    let mut seen = HashSet::new();
    Some(
        elements
            .into_iter()
            .zip(items)
            .filter(|(pe, _)| seen.insert(pe.clone()))
            .collect(),
    )
}

fn as_map(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object)
}

fn as_list(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// Both sides can be walked as maps: absent, null or objects, and not both empty (two
/// empty sides compare as a leaf so `{}` vs absent stays visible).
fn walk_as_maps(l: Option<&Value>, r: Option<&Value>) -> bool {
    let fits = |v: Option<&Value>| matches!(v, None | Some(Value::Null | Value::Object(_)));
    let empty = |v: Option<&Value>| as_map(v).is_none_or(Map::is_empty);
    fits(l) && fits(r) && !(empty(l) && empty(r))
}

fn walk_as_lists(l: Option<&Value>, r: Option<&Value>) -> bool {
    let fits = |v: Option<&Value>| matches!(v, None | Some(Value::Null | Value::Array(_)));
    fits(l) && fits(r) && !(as_list(l).is_empty() && as_list(r).is_empty())
}

fn non_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

/// The set of fields `obj` sets, before the server-managed ones are stripped.
pub(crate) fn to_set(obj: &Value, schema: &Schema) -> FieldSet {
    let mut set = FieldSet::new();
    to_set_at(obj, Some(schema.root()), &mut Vec::new(), &mut set);
    set
}

fn to_set_at(
    v: &Value,
    node: Option<NodeRef<'_>>,
    path: &mut Vec<PathElement>,
    set: &mut FieldSet,
) {
    match (classify(node), v) {
        (Class::Map(n), Value::Object(m)) => {
            for (k, child) in m {
                let (child_node, declared) = child_of(n, k);
                path.push(PathElement::Field(k.clone()));
                to_set_at(child, child_node, path, set);
                if child.is_null() || child.as_object().is_some_and(Map::is_empty) || !declared {
                    set.insert(path);
                }
                path.pop();
            }
        }
        (Class::List { item, keys }, Value::Array(items)) => match index_items(items, keys, item) {
            Some(indexed) => {
                for (pe, child) in indexed {
                    path.push(pe);
                    to_set_at(child, item, path, set);
                    set.insert(path);
                    path.pop();
                }
            }
            None => set.insert(path),
        },
        _ => set.insert(path),
    }
}

/// What changed between two versions of an object, by path.
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    pub fn is_same(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }
}

pub(crate) fn compare(old: &Value, new: &Value, schema: &Schema) -> Comparison {
    let mut out = Comparison::default();
    compare_at(
        Some(old),
        Some(new),
        Some(schema.root()),
        &mut Vec::new(),
        &mut out,
    );
    out
}

fn compare_at(
    l: Option<&Value>,
    r: Option<&Value>,
    node: Option<NodeRef<'_>>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) {
    match (l, r) {
        (None, Some(r)) => {
            out.added.insert_tree(path, added_tree(r, node));
            return;
        }
        // Nothing below changed: no walk (an update usually touches one small part).
        (Some(l), Some(r)) if l == r => return,
        _ => {}
    }
    match classify(node) {
        Class::Map(n) if walk_as_maps(l, r) => {
            let (lm, rm) = (as_map(l), as_map(r));
            let keys: BTreeSet<&String> = lm.into_iter().chain(rm).flat_map(Map::keys).collect();
            for k in keys {
                path.push(PathElement::Field(k.clone()));
                compare_at(
                    lm.and_then(|m| m.get(k)),
                    rm.and_then(|m| m.get(k)),
                    child_of(n, k).0,
                    path,
                    out,
                );
                path.pop();
            }
            record_presence(l, r, path, out);
        }
        Class::List { item, keys } if walk_as_lists(l, r) => {
            match (
                index_items(as_list(l), keys, item),
                index_items(as_list(r), keys, item),
            ) {
                (Some(li), Some(ri)) => {
                    let rmap: HashMap<&PathElement, &Value> =
                        ri.iter().map(|(pe, v)| (pe, *v)).collect();
                    let lmap: HashMap<&PathElement, &Value> =
                        li.iter().map(|(pe, v)| (pe, *v)).collect();
                    let order = li
                        .iter()
                        .chain(ri.iter().filter(|(pe, _)| !lmap.contains_key(pe)));
                    for (pe, _) in order {
                        path.push(pe.clone());
                        compare_at(
                            lmap.get(pe).copied(),
                            rmap.get(pe).copied(),
                            item,
                            path,
                            out,
                        );
                        path.pop();
                    }
                    record_presence(l, r, path, out);
                }
                _ => compare_leaf(l, r, path, out),
            }
        }
        _ => compare_leaf(l, r, path, out),
    }
}

/// What `compare_at` records below a value that is new as a whole: every map entry and
/// list item it holds, at any depth (the value itself is the caller's to add).
fn added_tree(r: &Value, node: Option<NodeRef<'_>>) -> FieldSet {
    let mut set = FieldSet::new();
    match classify(node) {
        Class::Map(n) if walk_as_maps(None, Some(r)) => {
            for (k, child) in as_map(Some(r)).into_iter().flatten() {
                let pe = PathElement::Field(k.clone());
                set.set_child(pe.clone(), added_tree(child, child_of(n, k).0));
                set.insert_member(pe);
            }
        }
        Class::List { item, keys } if walk_as_lists(None, Some(r)) => {
            for (pe, child) in index_items(as_list(Some(r)), keys, item)
                .into_iter()
                .flatten()
            {
                set.set_child(pe.clone(), added_tree(child, item));
                set.insert_member(pe);
            }
        }
        _ => {}
    }
    set
}

/// After the children of a map or list: the container itself appeared or went away.
fn record_presence(
    l: Option<&Value>,
    r: Option<&Value>,
    path: &[PathElement],
    out: &mut Comparison,
) {
    if l.is_none() {
        out.added.insert(path);
    } else if r.is_none() {
        out.removed.insert(path);
    }
}

fn compare_leaf(l: Option<&Value>, r: Option<&Value>, path: &[PathElement], out: &mut Comparison) {
    match (l, r) {
        (None, _) => out.added.insert(path),
        (_, None) => out.removed.insert(path),
        (Some(a), Some(b)) if !values_equal(a, b) => out.modified.insert(path),
        _ => {}
    }
}

/// The structured merge of an applied configuration into the live object: maps merge,
/// sets and map lists merge by item, everything else is replaced by the applied value.
pub(crate) fn merge(live: &Value, applied: &Value, schema: &Schema) -> Value {
    merge_at(Some(live), applied, Some(schema.root()))
}

fn merge_at(l: Option<&Value>, r: &Value, node: Option<NodeRef<'_>>) -> Value {
    match classify(node) {
        Class::Map(n) if walk_as_maps(l, Some(r)) => {
            let mut out = as_map(l).cloned().unwrap_or_default();
            for (k, rv) in r.as_object().into_iter().flatten() {
                let merged = merge_at(out.get(k), rv, child_of(n, k).0);
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        Class::List { item, keys } if walk_as_lists(l, Some(r)) => {
            match (
                index_items(as_list(l), keys, item),
                index_items(as_list(Some(r)), keys, item),
            ) {
                (Some(li), Some(ri)) => Value::Array(merge_lists(&li, &ri, item)),
                _ => r.clone(),
            }
        }
        _ => r.clone(),
    }
}

/// Orders merged list items like structured-merge-diff: live order is kept, applied items
/// new to the list go where the applied list puts them relative to the shared ones.
fn merge_lists(
    l: &[(PathElement, &Value)],
    r: &[(PathElement, &Value)],
    item: Option<NodeRef<'_>>,
) -> Vec<Value> {
    let lmap: HashMap<&PathElement, &Value> = l.iter().map(|(pe, v)| (pe, *v)).collect();
    let rset: HashSet<&PathElement> = r.iter().map(|(pe, _)| pe).collect();
    let mut shared = r
        .iter()
        .map(|(pe, _)| pe)
        .filter(|pe| lmap.contains_key(pe));
    let mut next_shared = shared.next();
    let (mut li, mut ri) = (0, 0);
    let mut out = Vec::with_capacity(l.len().max(r.len()));
    while li < l.len() || ri < r.len() {
        if li < l.len() && ri < r.len() {
            let lpe = &l[li].0;
            if *lpe == r[ri].0 {
                out.push(merge_at(Some(l[li].1), r[ri].1, item));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if rset.contains(lpe) && next_shared != Some(lpe) {
                // Shared, but the applied list places it later: emitted from there.
                li += 1;
                continue;
            }
        }
        if li < l.len() && !rset.contains(&l[li].0) {
            out.push(l[li].1.clone());
            li += 1;
            continue;
        }
        if ri < r.len() {
            let rpe = &r[ri].0;
            out.push(merge_at(lmap.get(rpe).copied(), r[ri].1, item));
            ri += 1;
            if next_shared == Some(rpe) {
                next_shared = shared.next();
            }
            continue;
        }
        // Only live items the applied list already placed remain.
        li += 1;
    }
    out
}

/// Removes the fields of `set` (with everything below them). A map or list emptied by the
/// removal goes as well, as upstream turns it into a null that pruning drops.
pub(crate) fn remove_items(obj: &mut Value, set: &FieldSet, schema: &Schema) {
    remove_at(obj, set, Some(schema.root()));
}

fn remove_at(v: &mut Value, set: &FieldSet, node: Option<NodeRef<'_>>) {
    match (classify(node), v) {
        (Class::Map(n), Value::Object(m)) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let pe = PathElement::Field(k.clone());
                if set.has_member(&pe) {
                    m.remove(&k);
                } else if let (Some(sub), Some(child)) = (set.child(&pe), m.get_mut(&k)) {
                    let had_content = non_empty_container(child);
                    remove_at(child, sub, child_of(n, &k).0);
                    if had_content && !non_empty_container(child) {
                        m.remove(&k);
                    }
                }
            }
        }
        (Class::List { item, keys }, Value::Array(items)) => {
            let Some(elements) = item_elements(items, keys, item) else {
                return;
            };
            let old = std::mem::take(items);
            for (mut child, pe) in old.into_iter().zip(elements) {
                if set.has_member(&pe) {
                    continue;
                }
                if let Some(sub) = set.child(&pe) {
                    remove_at(&mut child, sub, item);
                }
                items.push(child);
            }
        }
        _ => {}
    }
}

/// Adds, as members, the declared struct fields that lead to members of `set`, so that a
/// field nobody owns anything under any more is removed as a whole (upstream's
/// `EnsureNamedFieldsAreMembers`).
pub(crate) fn ensure_named_fields(set: &FieldSet, schema: &Schema) -> FieldSet {
    ensure_at(set, Some(schema.root()))
}

fn ensure_at(set: &FieldSet, node: Option<NodeRef<'_>>) -> FieldSet {
    let mut out = set.clone();
    let class = classify(node);
    for (pe, child) in set.children() {
        let child_node = match (pe, class) {
            (PathElement::Field(k), Class::Map(n)) => {
                let (child_node, declared) = child_of(n, k);
                if declared {
                    out.insert_member(pe.clone());
                }
                child_node
            }
            (PathElement::Field(_), _) => None,
            (_, Class::List { item, .. }) => item,
            _ => None,
        };
        out.set_child(pe.clone(), ensure_at(child, child_node));
    }
    out
}

/// The checks structured-merge-diff makes when it types an applied configuration:
/// undeclared fields, unidentifiable or duplicate list items, wrong shapes.
pub(crate) fn check_applied(obj: &Value, schema: &Schema) -> Vec<String> {
    let mut errors = Vec::new();
    check_at(obj, Some(schema.root()), &mut Vec::new(), &mut errors);
    errors
}

fn check_at(
    v: &Value,
    node: Option<NodeRef<'_>>,
    path: &mut Vec<PathElement>,
    errors: &mut Vec<String>,
) {
    if v.is_null() {
        return;
    }
    match classify(node) {
        Class::Scalar => {
            if let Some(n) = node {
                let ok = if n.int_or_string {
                    v.is_string() || v.is_number()
                } else {
                    n.types.iter().any(|t| match t {
                        crate::schema::Type::String => v.is_string(),
                        crate::schema::Type::Integer | crate::schema::Type::Number => v.is_number(),
                        crate::schema::Type::Boolean => v.is_boolean(),
                        _ => true,
                    })
                };
                if !ok {
                    let expected = n.types.first().map_or("scalar", |t| t.name());
                    errors.push(format!(
                        "{}: expected {expected}, got {v}",
                        path_string(path)
                    ));
                }
            }
        }
        Class::Atomic => {
            if let Some(n) = node {
                if n.is_object() && !v.is_object() {
                    errors.push(format!("{}: expected map, got {v}", path_string(path)));
                } else if n.is_array() && !n.is_object() && !v.is_array() {
                    errors.push(format!("{}: expected list, got {v}", path_string(path)));
                }
            }
        }
        Class::Map(n) => match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let (child_node, declared) = child_of(n, k);
                    path.push(PathElement::Field(k.clone()));
                    match n {
                        Some(n)
                            if !declared && child_node.is_none() && !n.keeps_unknown_fields() =>
                        {
                            errors.push(format!(
                                "{}: field not declared in schema",
                                path_string(path)
                            ));
                        }
                        _ => check_at(child, child_node, path, errors),
                    }
                    path.pop();
                }
            }
            _ if n.is_some() => {
                errors.push(format!("{}: expected map, got {v}", path_string(path)))
            }
            _ => {}
        },
        Class::List { item, keys } => match v {
            Value::Array(items) => {
                let mut seen = HashSet::new();
                for (i, child) in items.iter().enumerate() {
                    match item_element(child, keys, item) {
                        Err(e) => errors.push(format!("{}: element {i}: {e}", path_string(path))),
                        Ok(pe) => {
                            if !seen.insert(pe.clone()) {
                                errors.push(format!(
                                    "{}: duplicate entries for key {pe}",
                                    path_string(path)
                                ));
                            }
                            path.push(pe);
                            check_at(child, item, path, errors);
                            path.pop();
                        }
                    }
                }
            }
            _ => errors.push(format!("{}: expected list, got {v}", path_string(path))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::vm_schema;
    use serde_json::json;

    #[test]
    fn applied_sets_own_leaves_items_and_empty_objects() {
        let s = vm_schema();
        let applied = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm", "labels": {"app": "x"}, "finalizers": ["a"]},
            "spec": {"runStrategy": "Always", "template": {
                "metadata": {"labels": {"k": "v"}},
                "spec": {
                    "domain": {"devices": {"disks": [{"name": "d"}]}, "cpu": {}},
                    "volumes": [{"name": "root", "containerDisk": {"image": "img"}}],
                    "tags": ["t"]
                }
            }}
        });
        assert_eq!(
            FieldSet::from_object(&applied, &s).to_fields_v1(),
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"a\"": {}}},
                "f:spec": {"f:runStrategy": {}, "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:k": {}}},
                    "f:spec": {
                        "f:domain": {"f:cpu": {}, "f:devices": {"f:disks": {}}},
                        "f:tags": {"v:\"t\"": {}},
                        "f:volumes": {"k:{\"name\":\"root\"}": {".": {}, "f:containerDisk": {"f:image": {}}, "f:name": {}}}
                    }
                }}
            })
        );
    }

    #[test]
    fn merge_orders_map_lists_like_upstream() {
        let s = vm_schema();
        let wrap = |names: &[&str]| {
            let volumes: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
            json!({"spec": {"template": {"spec": {"volumes": volumes}}}})
        };
        let names = |v: &Value| -> Vec<String> {
            v["spec"]["template"]["spec"]["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            names(&merge(&wrap(&["a", "b"]), &wrap(&["c"]), &s)),
            ["a", "b", "c"]
        );
        assert_eq!(
            names(&merge(&wrap(&["a", "b"]), &wrap(&["b", "a"]), &s)),
            ["b", "a"]
        );
        assert_eq!(
            names(&merge(&wrap(&["a", "x", "b"]), &wrap(&["c", "b", "a"]), &s)),
            ["x", "c", "b", "a"]
        );
        assert_eq!(
            names(&merge(&wrap(&["y", "x"]), &wrap(&["z", "x", "y"]), &s)),
            ["z", "x", "y"]
        );
    }

    #[test]
    fn compare_reports_structure() {
        let s = vm_schema();
        let old = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"running": true}});
        let new = json!({"metadata": {"labels": {"a": "1", "c": "3"}}, "spec": {"running": false, "template": {"metadata": {}}}});
        let c = compare(&old, &new, &s);
        let strings = |set: &FieldSet| {
            set.paths()
                .iter()
                .map(|p| path_string(p))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            strings(&c.added),
            [
                ".metadata.labels.c",
                ".spec.template",
                ".spec.template.metadata"
            ]
        );
        assert_eq!(strings(&c.modified), [".spec.running"]);
        assert_eq!(strings(&c.removed), [".metadata.labels.b"]);
        assert!(compare(&old, &old, &s).is_same());
    }

    #[test]
    fn applied_config_checks() {
        let s = vm_schema();
        let bad = json!({
            "metadata": {"name": "x", "bogus": 1},
            "spec": {"runStrategy": 1, "template": {"spec": {"volumes": [{"name": "a"}, {"name": "a"}, {"image": "x"}],
                "affinity": {"anything": [1]}}}}
        });
        assert_eq!(
            check_applied(&bad, &s),
            vec![
                ".metadata.bogus: field not declared in schema",
                ".spec.runStrategy: expected string, got 1",
                ".spec.template.spec.volumes: duplicate entries for key [name=\"a\"]",
                ".spec.template.spec.volumes: element 2: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)",
            ]
        );
    }
}
