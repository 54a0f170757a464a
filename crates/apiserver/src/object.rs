//! Small accessors for objects held as JSON: the server treats every resource as
//! unstructured data and reads the few metadata fields it needs through these.

use serde_json::{Map, Value};

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.as_object()
}

/// `metadata`, created as an empty map when absent or not a map.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(root) = obj else {
        unreachable!("just made an object")
    };
    let entry = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(map) => map,
        _ => unreachable!("just made an object"),
    }
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)?.get(field)?.as_str()
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or("")
}

pub fn labels(obj: &Value) -> Map<String, Value> {
    meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, finalizers: Vec<String>) {
    let meta = meta_mut(obj);
    if finalizers.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), Value::from(finalizers));
    }
}

pub fn is_deleting(obj: &Value) -> bool {
    meta(obj).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|t| !t.is_null()))
}

/// `metadata.ownerReferences` as (uid, blockOwnerDeletion) pairs.
pub fn owner_uids(obj: &Value) -> Vec<(String, bool)> {
    meta(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let uid = r.get("uid")?.as_str()?.to_string();
                    let block = r
                        .get("blockOwnerDeletion")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    Some((uid, block))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The object without the fields a write does not change by itself, for "did anything
/// change" comparisons.
pub fn comparable(obj: &Value) -> Value {
    let mut copy = obj.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    copy
}

/// `comparable(a) == comparable(b)`, without copying either object.
pub fn same_but_bookkeeping(a: &Value, b: &Value) -> bool {
    equal_except(a, b, &[], &["resourceVersion", "managedFields"])
}

/// Whether two objects differ only in their status and bookkeeping (resourceVersion,
/// managedFields).
pub fn same_but_status(a: &Value, b: &Value) -> bool {
    equal_except(a, b, &["status"], &["resourceVersion", "managedFields"])
}

/// `spec_part(a, s) == spec_part(b, s)`, without copying either object.
pub fn same_spec_part(a: &Value, b: &Value, without_status: bool) -> bool {
    let skip: &[&str] = if without_status {
        &["metadata", "apiVersion", "kind", "status"]
    } else {
        &["metadata", "apiVersion", "kind"]
    };
    equal_except(a, b, skip, &[])
}

/// Equality of two objects leaving out the top-level keys in `skip` and, when `skip_meta`
/// is not empty, those keys of `metadata`.
fn equal_except(a: &Value, b: &Value, skip: &[&str], skip_meta: &[&str]) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .all(|(k, va)| match b.get(k) {
                Some(vb) if k == "metadata" && !skip_meta.is_empty() => {
                    equal_except(va, vb, skip_meta, &[])
                }
                Some(vb) => va == vb,
                None => false,
            })
}

/// Everything but `metadata` (and `status` when it is a subresource): what bumps generation.
pub fn spec_part(obj: &Value, without_status: bool) -> Value {
    let mut copy = obj.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("apiVersion");
        map.remove("kind");
        if without_status {
            map.remove("status");
        }
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn copy_free_comparisons_agree_with_the_copying_ones() {
        let base = json!({"apiVersion": "v1", "kind": "K",
            "metadata": {"name": "a", "resourceVersion": "1", "managedFields": [{"manager": "x"}]},
            "spec": {"x": 1}, "status": {"y": 2}});
        let variants = [
            json!({"apiVersion": "v1", "kind": "K",
                "metadata": {"name": "a", "resourceVersion": "9"}, "spec": {"x": 1}, "status": {"y": 2}}),
            json!({"apiVersion": "v1", "kind": "K",
                "metadata": {"name": "b", "resourceVersion": "1"}, "spec": {"x": 1}, "status": {"y": 2}}),
            json!({"apiVersion": "v2", "kind": "K", "metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"y": 3}}),
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}, "spec": {"x": 2}, "status": {"y": 2}}),
            json!({"apiVersion": "v1", "kind": "K", "metadata": "odd", "spec": {"x": 1}, "status": {"y": 2}}),
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}, "spec": {"x": 1}}),
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}, "spec": {"x": 1}, "extra": true}),
            json!([1, 2]),
            base.clone(),
        ];
        for v in &variants {
            for (a, b) in [(&base, v), (v, &base), (v, v)] {
                assert_eq!(
                    same_but_bookkeeping(a, b),
                    comparable(a) == comparable(b),
                    "{a} vs {b}"
                );
                for without_status in [false, true] {
                    assert_eq!(
                        same_spec_part(a, b, without_status),
                        spec_part(a, without_status) == spec_part(b, without_status),
                        "{a} vs {b}"
                    );
                }
            }
        }
    }
}
