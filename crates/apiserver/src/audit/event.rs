//! One `audit.k8s.io/v1` Event, written as a JSON line in kube-apiserver's field order.
//! Request and response bodies travel here as bytes and are decoded on the log's own
//! thread, so that the request path only copies a few strings.

use std::collections::BTreeMap;

use apimachinery::status::{Status, StatusDetails};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use access::audit::{Level, Stage};
use access::authn::UserInfo;

/// kube's `authenticationv1.UserInfo`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct User {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&UserInfo> for User {
    fn from(user: &UserInfo) -> User {
        User {
            username: user.name.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
        }
    }
}

/// What the request addressed (`audit.ObjectReference`).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// A body, its media type, and the kind it carries (for protobuf, which does not say).
#[derive(Clone, Debug)]
pub struct Body {
    pub bytes: Bytes,
    pub content_type: String,
    pub kind: &'static str,
}

/// kube's `responseStatus`: the code, and for a failure the whole Status.
#[derive(Clone, Debug)]
pub enum ResponseStatus {
    Code(u16),
    Failure(Status),
}

impl Serialize for ResponseStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            metadata: BTreeMap<String, String>,
            #[serde(skip_serializing_if = "str::is_empty")]
            status: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            message: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            reason: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            details: Option<&'a StatusDetails>,
            code: u16,
        }
        let wire = match self {
            ResponseStatus::Code(code) => Wire {
                metadata: BTreeMap::new(),
                status: "",
                message: "",
                reason: "",
                details: None,
                code: *code,
            },
            ResponseStatus::Failure(status) => Wire {
                metadata: BTreeMap::new(),
                status: &status.status,
                message: &status.message,
                reason: &status.reason,
                details: status.details.as_deref(),
                code: status.code,
            },
        };
        wire.serialize(serializer)
    }
}

/// Everything one event says, before its bodies are decoded.
#[derive(Clone, Debug)]
pub struct Record {
    pub level: Level,
    pub audit_id: String,
    pub stage: Stage,
    pub request_uri: String,
    pub verb: String,
    /// Empty when authentication failed.
    pub user: User,
    pub impersonated_user: Option<User>,
    pub source_ips: Vec<String>,
    pub user_agent: String,
    pub object_ref: Option<ObjectRef>,
    pub response_status: Option<ResponseStatus>,
    /// Kept at Metadata level too: a create's objectRef takes its name from it.
    pub request_body: Option<Body>,
    pub response_body: Option<Body>,
    pub omit_managed_fields: bool,
    pub received: DateTime<Utc>,
    pub at: DateTime<Utc>,
    pub annotations: BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    kind: &'static str,
    api_version: &'static str,
    level: Level,
    #[serde(rename = "auditID")]
    audit_id: &'a str,
    stage: Stage,
    #[serde(rename = "requestURI")]
    request_uri: &'a str,
    verb: &'a str,
    user: &'a User,
    #[serde(skip_serializing_if = "Option::is_none")]
    impersonated_user: Option<&'a User>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "<[String]>::is_empty")]
    source_ips: &'a [String],
    #[serde(skip_serializing_if = "str::is_empty")]
    user_agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_ref: Option<&'a ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_status: Option<&'a ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_object: Option<Value>,
    request_received_timestamp: String,
    stage_timestamp: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: &'a BTreeMap<String, String>,
}

/// `metav1.MicroTime`: RFC 3339 with microseconds, in UTC.
fn micro_time(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// A body as the object it carries: JSON, YAML (an apply patch), or the protobuf of
/// kubectl's typed clients; else nothing.
fn decode(body: &Body) -> Option<Value> {
    if body
        .content_type
        .starts_with("application/vnd.kubernetes.protobuf")
    {
        return crate::protobuf::decode_object(body.kind, &body.bytes);
    }
    if body.content_type.contains("json") {
        return serde_json::from_slice(&body.bytes).ok();
    }
    if body.content_type.contains("yaml") {
        return std::str::from_utf8(&body.bytes)
            .ok()
            .and_then(|text| apimachinery::yaml::from_str(text).ok());
    }
    // Clients that send no media type send JSON.
    serde_json::from_slice(&body.bytes).ok()
}

/// `metadata.managedFields` removed from an object and from a list's items.
fn without_managed_fields(mut value: Value) -> Value {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
    }
    value
}

impl Record {
    /// The event as one line of JSON, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let request = self.request_body.as_ref().and_then(decode);
        let mut object_ref = self.object_ref.clone();
        if let (Some(object_ref), Some(request)) = (&mut object_ref, &request) {
            // A create names its object in the body, as kube's LogRequestObject reads it.
            if object_ref.name.is_empty() {
                if let Some(name) = request.pointer("/metadata/name").and_then(Value::as_str) {
                    object_ref.name = name.to_string();
                }
            }
        }
        let clean = |v: Value| match self.omit_managed_fields {
            true => without_managed_fields(v),
            false => v,
        };
        let request_object = match self.level >= Level::Request {
            true => request.map(clean),
            false => None,
        };
        let response_object = match self.level >= Level::RequestResponse {
            true => self.response_body.as_ref().and_then(decode).map(clean),
            false => None,
        };
        let wire = Wire {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: self.level,
            audit_id: &self.audit_id,
            stage: self.stage,
            request_uri: &self.request_uri,
            verb: &self.verb,
            user: &self.user,
            impersonated_user: self.impersonated_user.as_ref(),
            source_ips: &self.source_ips,
            user_agent: &self.user_agent,
            object_ref: object_ref.as_ref(),
            response_status: self.response_status.as_ref(),
            request_object,
            response_object,
            request_received_timestamp: micro_time(&self.received),
            stage_timestamp: micro_time(&self.at),
            annotations: &self.annotations,
        };
        let mut line = serde_json::to_vec(&wire).unwrap_or_default();
        line.push(b'\n');
        line
    }
}
