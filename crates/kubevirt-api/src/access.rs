//! Reading and writing untrusted JSON the way Go's typed decoding would see it: a missing field,
//! a `null` and a value of the wrong type all read as the zero value, so rules never panic.
//! Wrong types are reported separately, by `typecheck`, before any rule runs.

use serde_json::{Map, Value};

/// `v[key]`, with `null` treated as absent (Kubernetes drops nulls of non-nullable fields).
pub(crate) fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

/// The value at a chain of object keys.
pub(crate) fn at<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, key| get(cur, key))
}

/// Whether the field is set: Go's "pointer is not nil".
pub(crate) fn has(v: &Value, keys: &[&str]) -> bool {
    at(v, keys).is_some()
}

/// A string field, `""` when unset.
pub(crate) fn str_at<'a>(v: &'a Value, keys: &[&str]) -> &'a str {
    at(v, keys).and_then(Value::as_str).unwrap_or("")
}

/// A boolean field, `None` when unset.
pub(crate) fn bool_at(v: &Value, keys: &[&str]) -> Option<bool> {
    at(v, keys).and_then(Value::as_bool)
}

/// An integer field; a float with no fraction counts, as it does for Kubernetes.
pub(crate) fn int_at(v: &Value, keys: &[&str]) -> Option<i64> {
    at(v, keys).and_then(as_int)
}

/// The integral value of a JSON number.
pub(crate) fn as_int(v: &Value) -> Option<i64> {
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    if let Some(u) = v.as_u64() {
        return Some(i64::try_from(u).unwrap_or(i64::MAX));
    }
    let f = v.as_f64()?;
    // Saturating float-to-int conversion; only whole numbers qualify.
    (f.fract() == 0.0).then_some(f as i64)
}

/// A list field, empty when unset.
pub(crate) fn list_at<'a>(v: &'a Value, keys: &[&str]) -> &'a [Value] {
    at(v, keys)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// An object field.
pub(crate) fn map_at<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Map<String, Value>> {
    at(v, keys).and_then(Value::as_object)
}

/// The object at `key` inside `v`, created empty when absent or null. `None` when `v` is not
/// an object or the field holds something else (validation reports that; defaulting skips it).
pub(crate) fn ensure_obj<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    let map = v.as_object_mut()?;
    let slot = map.entry(key).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.is_object().then_some(slot)
}

/// `ensure_obj` along a chain of keys.
pub(crate) fn ensure_path<'a>(v: &'a mut Value, keys: &[&str]) -> Option<&'a mut Value> {
    keys.iter().try_fold(v, |cur, key| ensure_obj(cur, key))
}

/// The existing object at a chain of keys, for in-place edits.
pub(crate) fn at_mut<'a>(v: &'a mut Value, keys: &[&str]) -> Option<&'a mut Value> {
    keys.iter()
        .try_fold(v, |cur, key| cur.get_mut(*key).filter(|x| !x.is_null()))
}

/// Sets `v[key]` when it is unset or the empty string (Go's zero value).
pub(crate) fn set_if_empty(v: &mut Value, key: &str, value: impl Into<Value>) {
    if let Some(map) = v.as_object_mut() {
        let unset = match map.get(key) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(_) => false,
        };
        if unset {
            map.insert(key.to_string(), value.into());
        }
    }
}

/// Drops `null` and empty-list members recursively, so that two objects compare equal when
/// Kubernetes' semantic equality (which treats nil and empty slices alike) says they are.
pub(crate) fn semantic(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, x)| !x.is_null() && x.as_array().is_none_or(|a| !a.is_empty()))
                .map(|(k, x)| (k.clone(), semantic(x)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(semantic).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_tolerate_wrong_types() {
        let v = json!({"a": {"b": "x", "n": null, "i": 2.0, "f": 2.5}, "s": 3});
        assert_eq!(str_at(&v, &["a", "b"]), "x");
        assert_eq!(str_at(&v, &["s"]), "");
        assert_eq!(str_at(&v, &["s", "deeper"]), "");
        assert!(!has(&v, &["a", "n"]));
        assert_eq!(int_at(&v, &["a", "i"]), Some(2));
        assert_eq!(int_at(&v, &["a", "f"]), None);
        assert!(list_at(&v, &["a"]).is_empty());
    }

    #[test]
    fn writes_skip_wrong_types() {
        let mut v = json!({"a": "text", "b": null});
        assert!(ensure_obj(&mut v, "a").is_none());
        assert!(ensure_path(&mut v, &["b", "c"]).is_some());
        assert_eq!(v, json!({"a": "text", "b": {"c": {}}}));
        let mut s = json!("scalar");
        assert!(ensure_obj(&mut s, "x").is_none());
        set_if_empty(&mut v["b"]["c"], "k", "v");
        set_if_empty(&mut v["b"]["c"], "k", "w");
        assert_eq!(v["b"]["c"]["k"], "v");
        assert_eq!(
            semantic(&json!({"x": null, "y": [{"z": null, "e": []}], "e": []})),
            json!({"y": [{}]})
        );
    }
}
