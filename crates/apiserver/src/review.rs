//! SelfSubjectAccessReview (`kubectl auth can-i`). Until authorization exists, every
//! authenticated user may do everything, and the review says so.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};

use crate::auth::UserInfo;
use crate::protobuf::{byte_fields, text, unwrap_unknown};

/// kubectl sends the review as Kubernetes protobuf (`k8s\0` + runtime.Unknown); the
/// Python client sends JSON. Either way the answer is JSON.
pub fn self_subject_access_review(body: &[u8], user: &UserInfo) -> Response {
    let spec = if body.starts_with(b"k8s\0") {
        protobuf_spec(body).unwrap_or_else(|| json!({}))
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

/// runtime.Unknown{2: raw SelfSubjectAccessReview{2: spec{1: resourceAttributes, 2: nonResourceAttributes}}}.
fn protobuf_spec(body: &[u8]) -> Option<Value> {
    let raw = unwrap_unknown(body)?;
    let spec = byte_fields(raw)?.into_iter().find(|(n, _)| *n == 2)?.1;
    let mut out = serde_json::Map::new();
    for (number, bytes) in byte_fields(spec)? {
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
                let attrs: serde_json::Map<String, Value> = byte_fields(bytes)?
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
                let attrs: serde_json::Map<String, Value> = byte_fields(bytes)?
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
