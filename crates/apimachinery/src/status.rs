//! `metav1.Status` failures, with the reasons, codes and messages of
//! `k8s.io/apimachinery/pkg/api/errors`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::field::FieldError;

/// A resource and its API group, printed as `virtualmachines.kubevirt.io`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> Self {
        GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }

    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// A kind and its API group, printed as `VirtualMachine.kubevirt.io`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupKind {
    pub group: String,
    pub kind: String,
}

impl GroupKind {
    pub fn new(group: &str, kind: &str) -> Self {
        GroupKind {
            group: group.to_string(),
            kind: kind.to_string(),
        }
    }

    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusCause {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<i32>,
}

/// A Kubernetes `Status` object. Failures are returned as the body of every non-2xx
/// answer and as the object of watch `ERROR` events.
///
/// `kind`, `apiVersion` and `metadata` are always `Status`, `v1` and `{}`, so they are
/// written on output rather than stored: that keeps the error small enough to return by
/// value everywhere.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub status: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub details: Option<Box<StatusDetails>>,
    pub code: u16,
    /// `metadata.continue`: the token a 410 for a compacted continue token offers.
    #[serde(skip)]
    pub continue_token: Option<String>,
}

/// The wire form, in kube-apiserver's field order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: serde_json::Map<String, Value>,
    status: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a StatusDetails>,
    code: u16,
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireStatus {
            kind: "Status",
            api_version: "v1",
            metadata: self
                .continue_token
                .iter()
                .map(|token| ("continue".to_string(), Value::String(token.clone())))
                .collect(),
            status: &self.status,
            message: &self.message,
            reason: &self.reason,
            details: self.details.as_deref(),
            code: self.code,
        }
        .serialize(serializer)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for Status {}

impl Status {
    pub fn failure(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Status {
            status: "Failure".into(),
            message: message.into(),
            reason: reason.into(),
            details: None,
            code,
            continue_token: None,
        }
    }

    /// The body of a successful delete of a custom resource (`details.kind` is the resource).
    pub fn success_deleted(resource: &GroupResource, name: &str, uid: &str) -> Self {
        Status {
            status: "Success".into(),
            code: 200,
            reason: String::new(),
            details: Some(Box::new(StatusDetails {
                name: name.into(),
                group: resource.group.clone(),
                kind: resource.resource.clone(),
                uid: uid.into(),
                ..Default::default()
            })),
            ..Status::failure(200, "", "")
        }
    }

    fn with_details(mut self, details: StatusDetails) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    fn resource_details(resource: &GroupResource, name: &str) -> StatusDetails {
        StatusDetails {
            name: name.into(),
            group: resource.group.clone(),
            kind: resource.resource.clone(),
            ..Default::default()
        }
    }

    pub fn not_found(resource: &GroupResource, name: &str) -> Self {
        Status::failure(
            404,
            "NotFound",
            format!("{} {:?} not found", resource.qualified(), name),
        )
        .with_details(Self::resource_details(resource, name))
    }

    pub fn already_exists(resource: &GroupResource, name: &str) -> Self {
        Status::failure(
            409,
            "AlreadyExists",
            format!("{} {:?} already exists", resource.qualified(), name),
        )
        .with_details(Self::resource_details(resource, name))
    }

    /// 409 Conflict: `Operation cannot be fulfilled on <resource> "<name>": <why>`.
    pub fn conflict(resource: &GroupResource, name: &str, why: &str) -> Self {
        Status::failure(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {:?}: {}",
                resource.qualified(),
                name,
                why
            ),
        )
        .with_details(Self::resource_details(resource, name))
    }

    /// The conflict of a stale `resourceVersion`.
    pub fn modified(resource: &GroupResource, name: &str) -> Self {
        Self::conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with one cause per field error.
    pub fn invalid(kind: &GroupKind, name: &str, errors: &[FieldError]) -> Self {
        let messages: Vec<String> = errors.iter().map(FieldError::message).collect();
        let joined = if messages.len() == 1 {
            messages[0].clone()
        } else {
            format!("[{}]", messages.join(", "))
        };
        // Upstream causes carry `ErrorBody()`: the text without the field path, which
        // kubectl prints after `<field>: ` itself.
        let causes = errors
            .iter()
            .map(|e| StatusCause {
                reason: e.kind.cause_reason().into(),
                message: e.message_body(),
                field: e.field.clone(),
            })
            .collect();
        Status::failure(
            422,
            "Invalid",
            format!("{} {:?} is invalid: {}", kind.qualified(), name, joined),
        )
        .with_details(StatusDetails {
            name: name.into(),
            group: kind.group.clone(),
            kind: kind.kind.clone(),
            causes,
            ..Default::default()
        })
    }

    /// 422 from an admission webhook: KubeVirt's messages joined with ", ".
    pub fn denied_by_webhook(
        _kind: &GroupKind,
        _name: &str,
        webhook: &str,
        errors: &[FieldError],
    ) -> Self {
        let shown: Vec<&FieldError> = errors.iter().take(10).collect();
        let mut message = shown
            .iter()
            .map(|e| e.message())
            .collect::<Vec<_>>()
            .join(", ");
        if errors.len() > shown.len() {
            message.push_str(&format!(
                ", and {} more validation errors",
                errors.len() - shown.len()
            ));
        }
        let causes = shown
            .iter()
            .map(|e| StatusCause {
                reason: e.kind.cause_reason().into(),
                message: e.message(),
                field: e.field.clone(),
            })
            .collect();
        Status::failure(
            422,
            "Invalid",
            format!("admission webhook {webhook:?} denied the request: {message}"),
        )
        // KubeVirt's webhook answers a Status whose details hold only the causes;
        // kube-apiserver passes it on as it is (kubectl: `The request is invalid: ...`).
        .with_details(StatusDetails {
            causes,
            ..Default::default()
        })
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Status::failure(400, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        Status::failure(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(resource: &GroupResource, name: &str, why: &str) -> Self {
        let subject = if name.is_empty() {
            resource.qualified()
        } else {
            format!("{} {:?}", resource.qualified(), name)
        };
        Status::failure(403, "Forbidden", format!("{subject} is forbidden: {why}"))
            .with_details(Self::resource_details(resource, name))
    }

    pub fn method_not_allowed(resource: &GroupResource, action: &str) -> Self {
        Status::failure(
            405,
            "MethodNotAllowed",
            format!(
                "{action} is not supported on resources of kind {:?}",
                resource.qualified()
            ),
        )
        .with_details(Self::resource_details(resource, ""))
    }

    pub fn not_acceptable(accepted: &[&str]) -> Self {
        Status::failure(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: {}",
                accepted.join(", ")
            ),
        )
    }

    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Status::failure(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Status::failure(410, "Expired", message)
    }

    pub fn request_too_large(limit: usize) -> Self {
        Status::failure(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// `NewTooManyRequests`: the message as given, and when to try again.
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: i32) -> Self {
        Status::failure(429, "TooManyRequests", message).with_details(StatusDetails {
            retry_after_seconds: Some(retry_after_seconds),
            ..Default::default()
        })
    }

    /// `NewTimeoutError(message, 0)`: "Timeout: " and the message, with empty details.
    pub fn timeout(message: &str) -> Self {
        Status::failure(504, "Timeout", format!("Timeout: {message}"))
            .with_details(StatusDetails::default())
    }

    pub fn too_large_resource_version(requested: i64, current: i64) -> Self {
        Status::failure(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        )
        .with_details(StatusDetails {
            causes: vec![StatusCause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            retry_after_seconds: Some(1),
            ..Default::default()
        })
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        Status::failure(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(StatusDetails {
            causes: vec![StatusCause {
                message: message.to_string(),
                ..Default::default()
            }],
            ..Default::default()
        })
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn not_found_has_the_upstream_shape() {
        let s = Status::not_found(&GroupResource::new("kubevirt.io", "virtualmachines"), "x");
        assert_eq!(
            s.to_json(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"virtualmachines.kubevirt.io \"x\" not found","reason":"NotFound",
                   "details":{"name":"x","group":"kubevirt.io","kind":"virtualmachines"},"code":404})
        );
    }

    #[test]
    fn invalid_joins_several_errors() {
        let errors = [
            FieldError::required("a", "x"),
            FieldError::required("b", "y"),
        ];
        let s = Status::invalid(
            &GroupKind::new("kubevirt.io", "VirtualMachine"),
            "vm",
            &errors,
        );
        assert_eq!(
            s.message,
            "VirtualMachine.kubevirt.io \"vm\" is invalid: [a: Required value: x, b: Required value: y]"
        );
        assert_eq!(s.details.unwrap().causes[1].field, "b");
    }
}
