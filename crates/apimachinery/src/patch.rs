//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902) with the answers kube-apiserver
//! gives when a patch cannot be decoded or applied.

use std::fmt;

use json_patch::jsonptr::Pointer;
use json_patch::{PatchErrorKind, PatchOperation};
use serde_json::{json, Value};

use crate::status::{Status, StatusCause, StatusDetails};

/// kube-apiserver refuses JSON patches with more operations than this.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10000;

/// A patch that cannot be applied, with the Status to answer (boxed: errors stay small).
#[derive(Clone, Debug, PartialEq)]
pub struct PatchError(pub Box<Status>);

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for PatchError {}

/// Applies an `application/merge-patch+json` body to `target`. The body must be a JSON
/// object, as upstream decodes it into a map first (400 otherwise).
pub fn merge_patch(target: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| bad_request(format!("error decoding patch: {}", go_json_error(body, &e))))?;
    match &patch {
        Value::Object(_) => {}
        // Go decodes `null` into an empty map: nothing to do.
        Value::Null => return Ok(target.clone()),
        other => {
            return Err(bad_request(format!(
                "error decoding patch: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                go_kind(other)
            )))
        }
    }
    let mut doc = target.clone();
    json_patch::merge(&mut doc, &patch);
    Ok(doc)
}

/// Applies an `application/json-patch+json` body to `target`, all operations or none.
/// Undecodable bodies are 400, too many operations 413, failing operations 422.
pub fn json_patch(target: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let parsed: Value =
        serde_json::from_slice(body).map_err(|e| bad_request(go_json_error(body, &e)))?;
    let ops = match parsed {
        Value::Array(ops) => ops,
        Value::Null => return Ok(target.clone()),
        other => {
            return Err(bad_request(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                go_kind(&other)
            )))
        }
    };
    if let Some(bad) = ops.iter().find(|op| !(op.is_object() || op.is_null())) {
        return Err(bad_request(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
            go_kind(bad)
        )));
    }
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError(Box::new(Status::failure(
            413,
            "RequestEntityTooLarge",
            format!(
                "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                ops.len()
            ),
        ))));
    }
    // Operations run on a copy that is dropped on failure, which makes the patch atomic
    // without the crate's undo path.
    let mut doc = target.clone();
    for op in &ops {
        let op = decode_operation(op).map_err(unprocessable)?;
        json_patch::patch_unsafe(&mut doc, std::slice::from_ref(&op))
            .map_err(|e| unprocessable(describe_failure(&doc, &op, &e.kind)))?;
    }
    Ok(doc)
}

fn bad_request(message: String) -> PatchError {
    PatchError(Box::new(Status::bad_request(message)))
}

/// Upstream's generic 422 for a patch that does not apply; the reason is in the cause.
fn unprocessable(message: String) -> PatchError {
    let mut status = Status::failure(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
    );
    status.details = Some(Box::new(StatusDetails {
        causes: vec![StatusCause {
            reason: "UnexpectedServerResponse".into(),
            message,
            field: String::new(),
        }],
        ..Default::default()
    }));
    PatchError(Box::new(status))
}

/// Decodes one operation leniently, reporting problems as evanphx/json-patch does when it
/// reaches them.
fn decode_operation(op: &Value) -> Result<PatchOperation, String> {
    let empty = serde_json::Map::new();
    let m = op.as_object().unwrap_or(&empty);
    let kind = m.get("op").and_then(Value::as_str).unwrap_or("unknown");
    if !matches!(
        kind,
        "add" | "remove" | "replace" | "move" | "copy" | "test"
    ) {
        return Err(format!("Unexpected kind: {kind}"));
    }
    let pointer = |name: &str| match m.get(name).and_then(Value::as_str) {
        Some(p) if Pointer::parse(p).is_ok() => Ok(p.to_string()),
        _ => Err(format!(
            "{kind} operation failed to decode {name}: missing value"
        )),
    };
    let mut normalized = json!({"op": kind, "path": pointer("path")?});
    if matches!(kind, "move" | "copy") {
        normalized["from"] = Value::String(pointer("from")?);
    }
    if matches!(kind, "add" | "replace" | "test") {
        normalized["value"] = m.get("value").cloned().unwrap_or(Value::Null);
    }
    serde_json::from_value(normalized).map_err(|e| format!("{kind} operation is invalid: {e}"))
}

/// The evanphx/json-patch wording for a failed operation.
fn describe_failure(doc: &Value, op: &PatchOperation, kind: &PatchErrorKind) -> String {
    let container_exists = |p: &Pointer| match p.parent() {
        None => true,
        Some(parent) => doc
            .pointer(parent.as_str())
            .is_some_and(|v| v.is_object() || v.is_array()),
    };
    let last = |p: &Pointer| {
        p.last()
            .map(|t| t.decoded().into_owned())
            .unwrap_or_default()
    };
    match op {
        PatchOperation::Test(t) if matches!(kind, PatchErrorKind::TestFailed) || container_exists(&t.path) => {
            format!("testing value {} failed: test failed", t.path)
        }
        PatchOperation::Test(t) => format!(
            "test operation does not apply: is missing path: {}: missing value",
            t.path
        ),
        PatchOperation::Remove(r) if container_exists(&r.path) => format!(
            "error in remove for path: '{}': Unable to remove nonexistent key: {}: missing value",
            r.path,
            last(&r.path)
        ),
        PatchOperation::Remove(r) => format!(
            "remove operation does not apply: doc is missing path: {:?}: missing value",
            r.path.as_str()
        ),
        PatchOperation::Replace(r) if container_exists(&r.path) => {
            format!(
                "replace operation does not apply: doc is missing key: {}: missing value",
                r.path
            )
        }
        PatchOperation::Replace(r) => format!(
            "replace operation does not apply: doc is missing path: {}: missing value",
            r.path
        ),
        PatchOperation::Add(a) if container_exists(&a.path) => format!(
            "error in add for path: '{}': Unable to access invalid index: {}: invalid index referenced",
            a.path,
            last(&a.path)
        ),
        PatchOperation::Add(a) => format!(
            "add operation does not apply: doc is missing path: {:?}: missing value",
            a.path.as_str()
        ),
        PatchOperation::Move(m) if matches!(kind, PatchErrorKind::InvalidFromPointer) => {
            format!(
                "move operation does not apply: doc is missing from path: {}: missing value",
                m.from
            )
        }
        PatchOperation::Move(m) if matches!(kind, PatchErrorKind::CannotMoveInsideItself) => {
            format!(
                "move operation does not apply: cannot move {} into its own child {}",
                m.from, m.path
            )
        }
        PatchOperation::Move(m) => format!(
            "move operation does not apply: doc is missing destination path: {}: missing value",
            m.path
        ),
        PatchOperation::Copy(c) if matches!(kind, PatchErrorKind::InvalidFromPointer) => {
            format!(
                "copy operation does not apply: doc is missing from path: {}: missing value",
                c.from
            )
        }
        PatchOperation::Copy(c) => format!(
            "copy operation does not apply: doc is missing destination path: {}: missing value",
            c.path
        ),
    }
}

/// The Go type word in `json: cannot unmarshal <kind> into …`.
fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Approximates Go's `encoding/json` syntax error texts, which clients may show verbatim.
fn go_json_error(body: &[u8], e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let text = e.to_string();
    match e.classify() {
        Category::Eof => "unexpected end of JSON input".into(),
        Category::Syntax if text.contains("recursion limit") => "exceeded max depth".into(),
        Category::Syntax => {
            let offending =
                char_at(body, e.line(), e.column()).map_or_else(String::new, |c| match c {
                    '\'' => "'\\''".into(),
                    c if c.is_control() => format!("'{}'", c.escape_default()),
                    c => format!("'{c}'"),
                });
            if text.starts_with("trailing characters") {
                format!("invalid character {offending} after top-level value")
            } else {
                format!("invalid character {offending} looking for beginning of value")
            }
        }
        _ => text,
    }
}

/// Applies an `application/strategic-merge-patch+json` body to a built-in object
/// (Namespace, Node): kube-apiserver accepts it for compiled-in types, and kubectl sends
/// it for `apply` (after create), `patch`, `label`, `cordon`. Maps merge as in a merge
/// patch and lists replace, except `metadata.finalizers` (merged as a set) and
/// `metadata.ownerReferences` (merged by `uid`), the list strategies ObjectMeta declares.
/// Directives: `$patch: replace|delete` on a map, `$deleteFromPrimitiveList/<list>`;
/// `$setElementOrder/<list>` and `$retainKeys` are accepted and ignored.
pub fn strategic_merge_patch(target: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| bad_request(format!("error decoding patch: {}", go_json_error(body, &e))))?;
    let patch = match patch {
        Value::Object(map) => map,
        Value::Null => return Ok(target.clone()),
        other => {
            return Err(bad_request(format!(
                "error decoding patch: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                go_kind(&other)
            )))
        }
    };
    let merge = strategic_to_merge(Some(target), &patch, "");
    let mut doc = target.clone();
    json_patch::merge(&mut doc, &merge);
    Ok(doc)
}

/// Rewrites one level of a strategic merge patch into the equivalent merge patch,
/// given the original value at the same place.
fn strategic_to_merge(
    original: Option<&Value>,
    patch: &serde_json::Map<String, Value>,
    path: &str,
) -> Value {
    let original_map = original.and_then(Value::as_object);
    match patch.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Value::Null,
        Some("replace") => {
            // Everything the original has and the patch does not is removed.
            let mut out: serde_json::Map<String, Value> = original_map
                .map(|m| m.keys().map(|k| (k.clone(), Value::Null)).collect())
                .unwrap_or_default();
            for (k, v) in patch.iter().filter(|(k, _)| !k.starts_with('$')) {
                out.insert(k.clone(), v.clone());
            }
            return Value::Object(out);
        }
        _ => {}
    }
    let mut out = serde_json::Map::new();
    for (key, value) in patch {
        if key.starts_with("$setElementOrder/") || key == "$retainKeys" || key == "$patch" {
            continue;
        }
        if let Some(list) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let removed = value.as_array().cloned().unwrap_or_default();
            let current = out
                .get(list)
                .cloned()
                .or_else(|| original_map.and_then(|m| m.get(list)).cloned())
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            out.insert(
                list.to_string(),
                Value::Array(
                    current
                        .into_iter()
                        .filter(|v| !removed.contains(v))
                        .collect(),
                ),
            );
            continue;
        }
        let child_path = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        let child_original = original_map.and_then(|m| m.get(key));
        let merged = match (value, child_path.as_str()) {
            (Value::Object(map), _) => strategic_to_merge(child_original, map, &child_path),
            (Value::Array(items), "metadata.finalizers") => {
                let mut all = out
                    .get(key)
                    .or(child_original)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for item in items {
                    if !all.contains(item) {
                        all.push(item.clone());
                    }
                }
                Value::Array(all)
            }
            (Value::Array(items), "metadata.ownerReferences") => {
                let mut all = child_original
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for item in items {
                    let uid = item.get("uid");
                    match all.iter_mut().find(|o| o.get("uid") == uid) {
                        Some(existing)
                            if item.get("$patch").and_then(Value::as_str) == Some("delete") =>
                        {
                            *existing = Value::Null;
                        }
                        Some(existing) => json_patch::merge(existing, item),
                        None => all.push(item.clone()),
                    }
                }
                Value::Array(all.into_iter().filter(|o| !o.is_null()).collect())
            }
            (other, _) => other.clone(),
        };
        out.insert(key.clone(), merged);
    }
    Value::Object(out)
}

/// The character at a 1-based line and column of `body`.
fn char_at(body: &[u8], line: usize, column: usize) -> Option<char> {
    let text = String::from_utf8_lossy(body);
    let line_text = text.split('\n').nth(line.checked_sub(1)?)?;
    line_text.chars().nth(column.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm() -> Value {
        json!({"metadata": {"name": "vm", "labels": {"a": "1"}}, "spec": {"running": false, "list": [1, 2]}})
    }

    #[test]
    fn merge_patch_merges_and_deletes() {
        let out = merge_patch(
            &vm(),
            br#"{"metadata":{"labels":{"a":null,"b":"2"}},"spec":{"list":[3]}}"#,
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "vm", "labels": {"b": "2"}}, "spec": {"running": false, "list": [3]}})
        );
        assert_eq!(merge_patch(&vm(), b"null").unwrap(), vm());
    }

    #[test]
    fn merge_patch_rejects_non_objects() {
        let err = merge_patch(&vm(), br#"[{"op":"add","path":"/x","value":1}]"#).unwrap_err();
        assert_eq!(err.0.code, 400);
        assert_eq!(err.0.reason, "BadRequest");
        assert_eq!(
            err.0.message,
            "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}"
        );
        assert_eq!(
            merge_patch(&vm(), b"{").unwrap_err().0.message,
            "error decoding patch: unexpected end of JSON input"
        );
        assert_eq!(
            merge_patch(&vm(), b"x").unwrap_err().0.message,
            "error decoding patch: invalid character 'x' looking for beginning of value"
        );
        assert_eq!(
            merge_patch(&vm(), b"{}}").unwrap_err().0.message,
            "error decoding patch: invalid character '}' after top-level value"
        );
    }

    #[test]
    fn json_patch_applies_all_or_nothing() {
        let body = br#"[{"op":"test","path":"/spec/running","value":false},{"op":"replace","path":"/spec/running","value":true},
            {"op":"add","path":"/spec/list/-","value":3},{"op":"remove","path":"/metadata/labels/a"},
            {"op":"copy","from":"/metadata/name","path":"/spec/name"},{"op":"move","from":"/spec/name","path":"/spec/moved"}]"#;
        let out = json_patch(&vm(), body).unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "vm", "labels": {}}, "spec": {"running": true, "list": [1, 2, 3], "moved": "vm"}})
        );
    }

    #[test]
    fn json_patch_failures() {
        let cause = |body: &[u8]| {
            let e = json_patch(&vm(), body).unwrap_err().0;
            assert_eq!(e.code, 422);
            assert_eq!(e.reason, "Invalid");
            assert_eq!(
                e.message,
                "the server rejected our request due to an error in our request"
            );
            let c = &e.details.unwrap().causes[0];
            assert_eq!(c.reason, "UnexpectedServerResponse");
            c.message.clone()
        };
        assert_eq!(
            cause(br#"[{"op":"replace","path":"/spec/running","value":true},{"op":"test","path":"/spec/running","value":false}]"#),
            "testing value /spec/running failed: test failed"
        );
        assert_eq!(
            cause(br#"[{"op":"remove","path":"/spec/nope"}]"#),
            "error in remove for path: '/spec/nope': Unable to remove nonexistent key: nope: missing value"
        );
        assert_eq!(
            cause(br#"[{"op":"replace","path":"/spec/nope","value":1}]"#),
            "replace operation does not apply: doc is missing key: /spec/nope: missing value"
        );
        assert_eq!(
            cause(br#"[{"op":"add","path":"/a/b","value":1}]"#),
            "add operation does not apply: doc is missing path: \"/a/b\": missing value"
        );
        assert_eq!(
            cause(br#"[{"op":"frob","path":"/a"}]"#),
            "Unexpected kind: frob"
        );
        assert_eq!(cause(br#"[null]"#), "Unexpected kind: unknown");
        assert_eq!(
            cause(br#"[{"op":"add","value":1}]"#),
            "add operation failed to decode path: missing value"
        );
        assert!(cause(br#"[{"op":"remove","path":"/spec/list/-"}]"#).contains("remove"));
        assert!(cause(br#"[{"op":"move","from":"/spec","path":"/spec/x"}]"#).contains("own child"));
    }

    #[test]
    fn json_patch_bad_bodies() {
        let e = json_patch(&vm(), br#"{"op":"add"}"#).unwrap_err().0;
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
            )
        );
        let e = json_patch(&vm(), br#"["add"]"#).unwrap_err().0;
        assert_eq!(
            e.message,
            "json: cannot unmarshal string into Go value of type jsonpatch.Operation"
        );
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "", "value": 1}))
            .collect();
        let e = json_patch(&vm(), serde_json::to_string(&ops).unwrap().as_bytes())
            .unwrap_err()
            .0;
        assert_eq!(e.code, 413);
        assert_eq!(
            e.message,
            "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
        assert_eq!(json_patch(&vm(), b"[]").unwrap(), vm());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(target in crate::schema::tests::arb_json(), body in crate::schema::tests::arb_json(),
                        raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let bytes = serde_json::to_vec(&body).unwrap_or_default();
            let _ = merge_patch(&target, &bytes);
            let _ = json_patch(&target, &bytes);
            let _ = merge_patch(&target, &raw);
            let _ = json_patch(&target, &raw);
            let ops = json!([
                {"op": "add", "path": "/spec/-", "value": body},
                {"op": "move", "from": "/spec", "path": "/spec/x"},
                {"op": "remove", "path": "/spec/0"},
                {"op": "copy", "from": "", "path": "/metadata"},
                {"op": "test", "path": "/spec", "value": null}
            ]);
            let _ = json_patch(&target, ops.to_string().as_bytes());
        }
    }
}

#[cfg(test)]
mod strategic_tests {
    use super::*;

    #[test]
    fn strategic_merge_for_builtins() {
        let ns = json!({"metadata": {"name": "n", "labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
                        "spec": {"finalizers": ["kubernetes"]}});
        let patched = strategic_merge_patch(
            &ns,
            br#"{"$setElementOrder/finalizers":["x","y"],"metadata":{"labels":{"a":"9","b":null},"finalizers":["y"]}}"#,
        )
        .unwrap();
        assert_eq!(patched["metadata"]["labels"], json!({"a": "9"}));
        assert_eq!(patched["metadata"]["finalizers"], json!(["x", "y"]));
        let removed = strategic_merge_patch(
            &patched,
            br#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["x"]}}"#,
        )
        .unwrap();
        assert_eq!(removed["metadata"]["finalizers"], json!(["y"]));
        let replaced = strategic_merge_patch(
            &ns,
            br#"{"metadata":{"labels":{"$patch":"replace","c":"3"}}}"#,
        )
        .unwrap();
        assert_eq!(replaced["metadata"]["labels"], json!({"c": "3"}));
        assert_eq!(strategic_merge_patch(&ns, b"[1]").unwrap_err().0.code, 400);
    }
}
