//! `application/vnd.kubernetes.protobuf` bodies. Two modes: arbitrary bytes for each kind
//! read from protobuf (an object or `None`, never a panic), and a ConfigMap built from
//! the input, encoded here and decoded by the server, which must read back what was sent.
#![no_main]

use apiserver::fuzzing::decode_protobuf;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

const KINDS: [&str; 7] = [
    "Namespace",
    "ConfigMap",
    "Secret",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
];

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes_field(out: &mut Vec<u8>, number: u64, payload: &[u8]) {
    varint(out, number << 3 | 2);
    varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

fn entry(key: &str, value: &str) -> Vec<u8> {
    let mut e = Vec::new();
    bytes_field(&mut e, 1, key.as_bytes());
    bytes_field(&mut e, 2, value.as_bytes());
    e
}

/// A ConfigMap with the name and data entries taken from `text` (`name;k=v;k=v`).
fn config_map_round_trip(text: &str) {
    let mut parts = text.split(';');
    let name = parts.next().unwrap_or_default();
    let mut data = Map::new();
    let mut raw = Vec::new();
    let mut meta = Vec::new();
    bytes_field(&mut meta, 1, name.as_bytes());
    bytes_field(&mut raw, 1, &meta);
    for part in parts {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        bytes_field(&mut raw, 2, &entry(k, v));
        data.insert(k.to_string(), json!(v));
    }
    let mut body = b"k8s\0".to_vec();
    bytes_field(&mut body, 2, &raw);
    let decoded = decode_protobuf("ConfigMap", &body).expect("a well-formed ConfigMap decodes");
    let mut expected = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
    });
    if !data.is_empty() {
        expected["data"] = Value::Object(data);
    }
    assert_eq!(decoded, expected);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    if mode == b'C' {
        if let Ok(text) = std::str::from_utf8(body) {
            config_map_round_trip(text);
        }
        return;
    }
    let kind = KINDS[usize::from(mode) % KINDS.len()];
    if let Some(object) = decode_protobuf(kind, body) {
        assert_eq!(object["kind"], kind);
        assert!(object.is_object());
    }
    // The same bytes behind the `k8s\0` magic, so the fuzzer need not find it.
    let mut wrapped = b"k8s\0".to_vec();
    wrapped.extend_from_slice(body);
    let _ = decode_protobuf(kind, &wrapped);
});
