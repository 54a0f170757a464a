//! Objects as the store holds them: JSON without `metadata.resourceVersion`, which is the
//! store's revision of the write. Reads that answer in JSON splice the resourceVersion into
//! the stored bytes instead of decoding and re-encoding every object (watch events, LISTs).

use apimachinery::status::Status;
use bytes::Bytes;
use serde_json::Value;
use store::KeyValue;

use crate::object::{meta, meta_mut};

/// The largest stored object: etcd's default `--max-request-bytes` (1.5 MiB). Upstream
/// stores custom resources, KubeVirt's kinds among them, as JSON, so this is the JSON
/// size a VM may reach there.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// The stored form of an object: its JSON without `metadata.resourceVersion`.
pub fn encode(obj: &Value) -> Result<Bytes, Status> {
    let encoded = if meta(obj).is_some_and(|m| !m.contains_key("resourceVersion")) {
        // Nothing to drop: serialize without copying the object.
        serialize(obj)?
    } else {
        let mut copy = obj.clone();
        meta_mut(&mut copy).remove("resourceVersion");
        serialize(&copy)?
    };
    if encoded.len() > MAX_OBJECT_BYTES {
        return Err(too_large(encoded.len()));
    }
    Ok(encoded)
}

/// etcd refuses such a write with "etcdserver: request is too large", which
/// kube-apiserver passes on as a 500 (kubernetes#112152); the client's request is what
/// is wrong, so this is kube's 413 with etcd's words.
fn too_large(size: usize) -> Status {
    Status::failure(
        413,
        "RequestEntityTooLarge",
        format!(
            "Request entity too large: etcdserver: request is too large (the object is {size} bytes stored, the limit is {MAX_OBJECT_BYTES})"
        ),
    )
}

/// JSON written into a buffer the thread keeps, then copied out at its exact size:
/// growing a fresh vector by doubling cost five reallocations for a VM.
fn serialize(obj: &Value) -> Result<Bytes, Status> {
    /// What a thread keeps after encoding a larger object (bodies reach 3 MiB).
    const KEPT: usize = 64 * 1024;
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with_borrow_mut(|buf| {
        buf.clear();
        let encoded = serde_json::to_writer(&mut *buf, obj)
            .map(|()| Bytes::copy_from_slice(buf))
            .map_err(|e| Status::internal(format!("encoding the object for storage: {e}")));
        if buf.capacity() > KEPT {
            buf.clear();
            buf.shrink_to(KEPT);
        }
        encoded
    })
}

/// The object with its resourceVersion, as a value.
pub fn decode(kv: &KeyValue) -> Result<Value, Status> {
    let mut obj: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| Status::internal(format!("stored object {} is corrupt: {e}", kv.key)))?;
    meta_mut(&mut obj).insert(
        "resourceVersion".into(),
        Value::String(kv.mod_revision.to_string()),
    );
    Ok(obj)
}

/// Whether the object has a deletionTimestamp, read without decoding the rest of it.
pub fn is_deleting(kv: &KeyValue) -> Result<bool, Status> {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Metadata,
    }
    #[derive(Default, serde::Deserialize)]
    struct Metadata {
        #[serde(rename = "deletionTimestamp")]
        deletion_timestamp: Option<serde::de::IgnoredAny>,
    }
    let object: Object = serde_json::from_slice(&kv.value)
        .map_err(|e| Status::internal(format!("stored object {} is corrupt: {e}", kv.key)))?;
    Ok(object.metadata.deletion_timestamp.is_some())
}

/// The object's labels, read without decoding the rest of it.
pub fn labels(kv: &KeyValue) -> Result<serde_json::Map<String, Value>, Status> {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Metadata,
    }
    #[derive(Default, serde::Deserialize)]
    struct Metadata {
        #[serde(default)]
        labels: Option<Value>,
    }
    let object: Object = serde_json::from_slice(&kv.value)
        .map_err(|e| Status::internal(format!("stored object {} is corrupt: {e}", kv.key)))?;
    Ok(match object.metadata.labels {
        Some(Value::Object(labels)) => labels,
        _ => serde_json::Map::new(),
    })
}

/// Appends the object's JSON with its resourceVersion to `out`.
pub fn write_json(kv: &KeyValue, out: &mut Vec<u8>) -> Result<(), Status> {
    let stored = &kv.value[..];
    let Some(members) = metadata_members(stored) else {
        // Not the shape the registry writes: take the slow, exact way.
        return serde_json::to_writer(out, &decode(kv)?).map_err(Status::internal);
    };
    out.reserve(stored.len() + 40);
    out.extend_from_slice(&stored[..members]);
    out.extend_from_slice(b"\"resourceVersion\":\"");
    out.extend_from_slice(kv.mod_revision.to_string().as_bytes());
    out.push(b'"');
    if stored.get(skip_whitespace(stored, members)) != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(&stored[members..]);
    Ok(())
}

/// The offset just after the `{` of the top-level `metadata` object.
fn metadata_members(json: &[u8]) -> Option<usize> {
    let mut at = skip_whitespace(json, 0);
    if json.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    loop {
        at = skip_whitespace(json, at);
        match json.get(at)? {
            b',' => {
                at += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = skip_string(json, at)?;
        let key = &json[at + 1..key_end - 1];
        at = skip_whitespace(json, key_end);
        if json.get(at) != Some(&b':') {
            return None;
        }
        at = skip_whitespace(json, at + 1);
        if key == b"metadata" {
            return (json.get(at) == Some(&b'{')).then_some(at + 1);
        }
        at = skip_value(json, at)?;
    }
}

fn skip_whitespace(json: &[u8], mut at: usize) -> usize {
    while json.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// From an opening quote to just after the closing one.
fn skip_string(json: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    loop {
        match json.get(at)? {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
}

/// From the first byte of a value to just after it.
fn skip_value(json: &[u8], start: usize) -> Option<usize> {
    match json.get(start)? {
        b'"' => skip_string(json, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = start;
            loop {
                match json.get(at)? {
                    b'"' => {
                        at = skip_string(json, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        _ => {
            let rest = &json[start..];
            let len = rest
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())
                .unwrap_or(rest.len());
            Some(start + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kv(value: &str, revision: i64) -> KeyValue {
        KeyValue {
            key: "/registry/x".into(),
            value: value.as_bytes().to_vec().into(),
            create_revision: 1,
            mod_revision: revision,
        }
    }

    fn spliced(value: &str, revision: i64) -> Value {
        let mut out = Vec::new();
        write_json(&kv(value, revision), &mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn splicing_gives_what_decoding_gives() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a", "labels": {"x": "y"}}, "spec": {"n": [1, {"m": "}"}]}}),
            json!({"metadata": {}}),
            json!({"a": "quote \" and { brace", "b": [[], {}], "c": -1.5e3, "d": null, "e": true, "metadata": {"name": "b"}}),
        ];
        for object in objects {
            let stored = serde_json::to_string(&object).unwrap();
            assert_eq!(spliced(&stored, 42), decode(&kv(&stored, 42)).unwrap());
            let pretty = serde_json::to_string_pretty(&object).unwrap();
            assert_eq!(spliced(&pretty, 7), decode(&kv(&pretty, 7)).unwrap());
        }
    }

    #[test]
    fn encoding_drops_the_resource_version_that_decoding_restores() {
        let object = json!({"kind": "K", "metadata": {"name": "a", "resourceVersion": "5"}});
        let stored = encode(&object).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&stored).unwrap(),
            json!({"kind": "K", "metadata": {"name": "a"}})
        );
        let mut kv = kv("", 5);
        kv.value = stored;
        assert_eq!(decode(&kv).unwrap(), object);
    }

    #[test]
    fn reads_deletion_without_decoding() {
        assert!(is_deleting(&kv(
            r#"{"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z"},"spec":{}}"#,
            1
        ))
        .unwrap());
        assert!(!is_deleting(&kv(r#"{"metadata":{"deletionTimestamp":null}}"#, 1)).unwrap());
        assert!(!is_deleting(&kv(r#"{"kind":"Namespace"}"#, 1)).unwrap());
        assert!(is_deleting(&kv("{", 1)).is_err());
    }

    #[test]
    fn objects_without_metadata_take_the_slow_way() {
        assert_eq!(
            spliced(r#"{"kind": "K"}"#, 3),
            json!({"kind": "K", "metadata": {"resourceVersion": "3"}})
        );
        assert_eq!(metadata_members(br#"{"metadata": "x"}"#), None);
        assert_eq!(metadata_members(br#"{"a": "unterminated"#), None);
    }
}
