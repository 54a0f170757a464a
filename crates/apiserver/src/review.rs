//! The review endpoints: SelfSubjectAccessReview (`kubectl auth can-i`),
//! SubjectAccessReview and LocalSubjectAccessReview (the same question about someone
//! else), SelfSubjectRulesReview (`kubectl auth can-i --list`) and SelfSubjectReview
//! (`kubectl auth whoami`). kubectl sends them as Kubernetes protobuf (`k8s\0` +
//! runtime.Unknown), the Python client as JSON; the answer is JSON either way, 201.

use std::collections::BTreeMap;

use apimachinery::field::FieldError;
use apimachinery::status::{GroupKind, Status};
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Map, Value};

use crate::protobuf::{byte_fields, fields, text, unwrap_unknown, Field};
use access::authn::UserInfo;
use access::authz::{Attributes, Authorizer, ResourceAttributes};

fn created(review: &Value) -> Response {
    let mut response = (
        StatusCode::CREATED,
        serde_json::to_vec(review).unwrap_or_default(),
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The body as JSON: protobuf is read into the JSON shape of `kind`.
fn body_json(body: &[u8], kind: &str) -> Result<Value, Status> {
    if body.starts_with(b"k8s\0") {
        return protobuf_review(body, kind)
            .ok_or_else(|| Status::bad_request(format!("{kind} in version \"v1\" cannot be handled as a {kind}: the protobuf body does not parse")));
    }
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| {
        Status::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: {e}"
        ))
    })
}

fn text_of(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The attributes a review asks about, checked as kube's review validation does:
/// exactly one of `resourceAttributes` and `nonResourceAttributes`.
fn review_attributes(kind: &str, spec: &Value) -> Result<Attributes, Status> {
    let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    let invalid = |error: FieldError| {
        Status::invalid(&GroupKind::new("authorization.k8s.io", kind), "", &[error])
    };
    match (resource, non_resource) {
        (Some(r), None) => Ok(Attributes::resource(
            &text_of(r, "verb"),
            ResourceAttributes {
                namespace: text_of(r, "namespace"),
                group: text_of(r, "group"),
                version: text_of(r, "version"),
                resource: text_of(r, "resource"),
                subresource: text_of(r, "subresource"),
                name: text_of(r, "name"),
            },
        )),
        (None, Some(n)) => Ok(Attributes::non_resource(
            &text_of(n, "verb"),
            &text_of(n, "path"),
        )),
        (None, None) => Err(invalid(FieldError::required(
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ))),
        (Some(_), Some(n)) => Err(invalid(FieldError::invalid(
            "spec.nonResourceAttributes",
            Value::String(format!(
                "&authorization.NonResourceAttributes{{Path:{}, Verb:{}}}",
                apimachinery::meta_validation::go_quote(&text_of(n, "path")),
                apimachinery::meta_validation::go_quote(&text_of(n, "verb"))
            )),
            "cannot be specified in combination with resourceAttributes",
        ))),
    }
}

fn status_of(decision: access::authz::Decision) -> Value {
    let mut status = Map::new();
    status.insert("allowed".into(), json!(decision.allowed));
    if !decision.reason.is_empty() {
        status.insert("reason".into(), json!(decision.reason));
    }
    Value::Object(status)
}

/// SelfSubjectAccessReview: may the requester do this?
pub fn self_subject_access_review(
    authorizer: &Authorizer,
    body: &[u8],
    user: &UserInfo,
) -> Result<Response, Status> {
    let review = body_json(body, "SelfSubjectAccessReview")?;
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let attrs = review_attributes("SelfSubjectAccessReview", &spec)?;
    let decision = authorizer.decide(user, &attrs);
    Ok(created(&json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status_of(decision),
    })))
}

/// SubjectAccessReview (`namespace` `None`) or LocalSubjectAccessReview in `namespace`:
/// may the user of `spec` do this?
pub fn subject_access_review(
    authorizer: &Authorizer,
    body: &[u8],
    namespace: Option<&str>,
) -> Result<Response, Status> {
    let kind = if namespace.is_some() {
        "LocalSubjectAccessReview"
    } else {
        "SubjectAccessReview"
    };
    let review = body_json(body, kind)?;
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let attrs = review_attributes(kind, &spec)?;
    let user = UserInfo {
        name: text_of(&spec, "user"),
        uid: text_of(&spec, "uid"),
        groups: spec
            .get("groups")
            .and_then(Value::as_array)
            .map(|g| {
                g.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        extra: spec
            .get("extra")
            .and_then(|e| serde_json::from_value::<BTreeMap<String, Vec<String>>>(e.clone()).ok())
            .unwrap_or_default(),
    };
    if user.name.is_empty() && user.groups.is_empty() {
        return Err(Status::invalid(
            &GroupKind::new("authorization.k8s.io", kind),
            "",
            &[FieldError::invalid(
                "spec.user",
                "",
                "at least one of user or group must be specified",
            )],
        ));
    }
    if let Some(namespace) = namespace {
        let asked = attrs.namespace();
        if attrs.resource.is_none() || asked != namespace {
            return Err(Status::invalid(
                &GroupKind::new("authorization.k8s.io", kind),
                "",
                &[FieldError::invalid(
                    "spec.resourceAttributes.namespace",
                    asked,
                    "must match metadata.namespace",
                )],
            ));
        }
    }
    let decision = authorizer.decide(&user, &attrs);
    let mut metadata = json!({"creationTimestamp": null});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    Ok(created(&json!({
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": metadata,
        "spec": spec,
        "status": status_of(decision),
    })))
}

/// SelfSubjectRulesReview: everything the requester may do in `spec.namespace`.
pub fn self_subject_rules_review(
    authorizer: &Authorizer,
    body: &[u8],
    user: &UserInfo,
) -> Result<Response, Status> {
    let review = body_json(body, "SelfSubjectRulesReview")?;
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let namespace = text_of(&spec, "namespace");
    if namespace.is_empty() {
        return Err(Status::bad_request("no namespace on request"));
    }
    let (rules, errors) = authorizer.rules_for(user, &namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in rules {
        if !rule.resources.is_empty() {
            let mut r = json!({"verbs": rule.verbs});
            for (field, values) in [
                ("apiGroups", &rule.api_groups),
                ("resources", &rule.resources),
                ("resourceNames", &rule.resource_names),
            ] {
                if !values.is_empty() {
                    r[field] = json!(values);
                }
            }
            resource_rules.push(r);
        }
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
    }
    let mut status = json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                            "incomplete": false});
    if !errors.is_empty() {
        status["evaluationError"] = json!(match errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        });
    }
    Ok(created(&json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    })))
}

/// SelfSubjectReview: who the requester is (after impersonation).
pub fn self_subject_review(user: &UserInfo) -> Response {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    created(&json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": info},
    }))
}

/// The strings of a message's fields, by number (repeated fields in order).
fn strings(raw: &[u8]) -> Option<Vec<(u64, String)>> {
    Some(
        byte_fields(raw)?
            .into_iter()
            .map(|(n, b)| (n, String::from_utf8_lossy(b).into_owned()))
            .collect(),
    )
}

/// A message of string fields as a JSON object, by field names (1-based).
fn string_message(raw: &[u8], names: &[&str]) -> Option<Value> {
    let mut out = Map::new();
    for (number, value) in strings(raw)? {
        if let Some(name) = names.get(number as usize - 1).filter(|_| number >= 1) {
            if !name.is_empty() {
                out.insert(name.to_string(), Value::String(value));
            }
        }
    }
    Some(Value::Object(out))
}

const RESOURCE_ATTRIBUTES: [&str; 7] = [
    "namespace",
    "verb",
    "group",
    "version",
    "resource",
    "subresource",
    "name",
];
const NON_RESOURCE_ATTRIBUTES: [&str; 2] = ["path", "verb"];

/// A review in protobuf, as JSON: SelfSubjectAccessReview and the subject reviews
/// {2: spec{1: resourceAttributes, 2: nonResourceAttributes, 3: user, 4: groups,
/// 5: extra, 6: uid}}, SelfSubjectRulesReview {2: spec{1: namespace}}, and
/// SelfSubjectReview (no fields kubectl sets).
fn protobuf_review(body: &[u8], kind: &str) -> Option<Value> {
    let raw = unwrap_unknown(body)?;
    let spec_bytes = byte_fields(raw)?
        .into_iter()
        .find(|(n, _)| *n == 2)
        .map(|(_, b)| b);
    let Some(spec_bytes) = spec_bytes else {
        return Some(json!({}));
    };
    let mut spec = Map::new();
    if kind == "SelfSubjectRulesReview" {
        for (number, value) in strings(spec_bytes)? {
            if number == 1 {
                spec.insert("namespace".into(), Value::String(value));
            }
        }
        return Some(json!({"spec": spec}));
    }
    for (number, field) in fields(spec_bytes)? {
        let Field::Bytes(bytes) = field else { continue };
        match number {
            1 => {
                _ = spec.insert(
                    "resourceAttributes".into(),
                    string_message(bytes, &RESOURCE_ATTRIBUTES)?,
                )
            }
            2 => {
                _ = spec.insert(
                    "nonResourceAttributes".into(),
                    string_message(bytes, &NON_RESOURCE_ATTRIBUTES)?,
                )
            }
            3 => _ = spec.insert("user".into(), text(bytes)),
            4 => {
                if let Some(groups) = spec
                    .entry("groups")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                {
                    groups.push(text(bytes));
                }
            }
            5 => {
                // map<string, ExtraValue{1: repeated string}>
                let entry = byte_fields(bytes)?;
                let key = entry
                    .iter()
                    .find(|(n, _)| *n == 1)
                    .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                let values: Vec<Value> = match entry.iter().find(|(n, _)| *n == 2) {
                    Some((_, v)) => strings(v)?
                        .into_iter()
                        .filter(|(n, _)| *n == 1)
                        .map(|(_, s)| Value::String(s))
                        .collect(),
                    None => Vec::new(),
                };
                if let Some(extra) = spec
                    .entry("extra")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                {
                    extra.insert(key, Value::Array(values));
                }
            }
            6 => _ = spec.insert("uid".into(), text(bytes)),
            _ => {}
        }
    }
    Some(json!({"spec": spec}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3 | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    fn wrapped(raw: &[u8]) -> Vec<u8> {
        let mut body = b"k8s\0".to_vec();
        body.extend(field(2, raw));
        body
    }

    #[test]
    fn kubectl_protobuf_reviews() {
        let mut attrs = field(1, b"team-a");
        attrs.extend(field(2, b"delete"));
        attrs.extend(field(3, b"kubevirt.io"));
        attrs.extend(field(5, b"virtualmachines"));
        let mut spec = field(1, &attrs);
        spec.extend(field(3, b"alice"));
        spec.extend(field(4, b"devs"));
        spec.extend(field(4, b"ops"));
        let body = wrapped(&field(2, &spec));
        assert_eq!(
            body_json(&body, "SubjectAccessReview").unwrap(),
            json!({"spec": {"resourceAttributes": {"namespace": "team-a", "verb": "delete",
                   "group": "kubevirt.io", "resource": "virtualmachines"},
                   "user": "alice", "groups": ["devs", "ops"]}})
        );
        let rules = wrapped(&field(2, &field(1, b"default")));
        assert_eq!(
            body_json(&rules, "SelfSubjectRulesReview").unwrap(),
            json!({"spec": {"namespace": "default"}})
        );
        assert_eq!(
            body_json(&wrapped(b""), "SelfSubjectReview").unwrap(),
            json!({})
        );
    }

    #[test]
    fn exactly_one_kind_of_attributes() {
        let err = review_attributes("SelfSubjectAccessReview", &json!({})).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified"
        );
    }
}
