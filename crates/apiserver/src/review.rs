//! SelfSubjectAccessReview (`kubectl auth can-i`). Until authorization exists, every
//! authenticated user may do everything, and the review says so.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};

use crate::auth::UserInfo;

/// kubectl sends the review as Kubernetes protobuf (`k8s\0` + runtime.Unknown); the
/// Python client sends JSON. Either way the answer is JSON.
pub fn self_subject_access_review(body: &[u8], user: &UserInfo) -> Response {
    let spec = if body.starts_with(b"k8s\0") {
        protobuf_spec(&body[4..]).unwrap_or_else(|| json!({}))
    } else {
        serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("spec").cloned())
            .unwrap_or_else(|| json!({}))
    };
    let review = json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": {"allowed": true, "reason": format!("user {:?} is authenticated; virtplane grants authenticated users every action", user.name)},
    });
    let mut response = (
        StatusCode::CREATED,
        serde_json::to_vec(&review).unwrap_or_default(),
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Reads protobuf fields (number, bytes) of length-delimited and varint wire types.
fn fields(mut data: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let (tag, rest) = varint(data)?;
        data = rest;
        match tag & 7 {
            0 => {
                let (_, rest) = varint(data)?;
                data = rest;
            }
            2 => {
                let (len, rest) = varint(data)?;
                let len = usize::try_from(len).ok()?;
                if rest.len() < len {
                    return None;
                }
                out.push((tag >> 3, &rest[..len]));
                data = &rest[len..];
            }
            _ => return None,
        }
    }
    Some(out)
}

fn varint(data: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, byte) in data.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &data[i + 1..]));
        }
    }
    None
}

/// runtime.Unknown{2: raw SelfSubjectAccessReview{2: spec{1: resourceAttributes, 2: nonResourceAttributes}}}.
fn protobuf_spec(unknown: &[u8]) -> Option<Value> {
    let raw = fields(unknown)?.into_iter().find(|(n, _)| *n == 2)?.1;
    let spec = fields(raw)?.into_iter().find(|(n, _)| *n == 2)?.1;
    let text = |b: &[u8]| Value::String(String::from_utf8_lossy(b).into_owned());
    let mut out = serde_json::Map::new();
    for (number, bytes) in fields(spec)? {
        match number {
            1 => {
                let names = [
                    "",
                    "namespace",
                    "verb",
                    "group",
                    "version",
                    "resource",
                    "subresource",
                    "name",
                ];
                let attrs: serde_json::Map<String, Value> = fields(bytes)?
                    .into_iter()
                    .filter_map(|(n, b)| {
                        names
                            .get(n as usize)
                            .filter(|s| !s.is_empty())
                            .map(|s| (s.to_string(), text(b)))
                    })
                    .collect();
                out.insert("resourceAttributes".into(), Value::Object(attrs));
            }
            2 => {
                let names = ["", "path", "verb"];
                let attrs: serde_json::Map<String, Value> = fields(bytes)?
                    .into_iter()
                    .filter_map(|(n, b)| {
                        names
                            .get(n as usize)
                            .filter(|s| !s.is_empty())
                            .map(|s| (s.to_string(), text(b)))
                    })
                    .collect();
                out.insert("nonResourceAttributes".into(), Value::Object(attrs));
            }
            _ => {}
        }
    }
    Some(Value::Object(out))
}

/// A Namespace sent as Kubernetes protobuf (`kubectl create namespace X` uses the typed
/// client): `k8s\0` + runtime.Unknown{2: raw Namespace{1: ObjectMeta{1 name,
/// 2 generateName, 11 labels, 12 annotations}}}. Spec and status are server-defaulted.
pub fn namespace_from_protobuf(body: &[u8]) -> Option<Value> {
    let unknown = body.strip_prefix(b"k8s\0")?;
    let raw = fields(unknown)?.into_iter().find(|(n, _)| *n == 2)?.1;
    let text = |b: &[u8]| Value::String(String::from_utf8_lossy(b).into_owned());
    let mut metadata = serde_json::Map::new();
    if let Some((_, meta)) = fields(raw)?.into_iter().find(|(n, _)| *n == 1) {
        for (number, bytes) in fields(meta)? {
            match number {
                1 => {
                    metadata.insert("name".into(), text(bytes));
                }
                2 => {
                    metadata.insert("generateName".into(), text(bytes));
                }
                11 | 12 => {
                    let key = if number == 11 {
                        "labels"
                    } else {
                        "annotations"
                    };
                    let map = metadata.entry(key).or_insert_with(|| json!({}));
                    let entry = fields(bytes)?;
                    let k = entry
                        .iter()
                        .find(|(n, _)| *n == 1)
                        .map(|(_, b)| *b)
                        .unwrap_or_default();
                    let v = entry
                        .iter()
                        .find(|(n, _)| *n == 2)
                        .map(|(_, b)| *b)
                        .unwrap_or_default();
                    map[String::from_utf8_lossy(k).as_ref()] = text(v);
                }
                _ => {}
            }
        }
    }
    Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}))
}
