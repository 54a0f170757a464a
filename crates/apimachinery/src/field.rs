//! Field errors, rendered exactly as `k8s.io/apimachinery/pkg/util/validation/field` does.

use std::fmt::Write as _;

use serde_json::Value;

/// What is wrong with a field. The variants mirror `field.ErrorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    Invalid,
    NotSupported,
    Duplicate,
    Forbidden,
    TooLong,
    TooMany,
    NotFound,
    TypeInvalid,
    Internal,
}

impl ErrorType {
    /// The `reason` of a `StatusCause`.
    pub fn cause_reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
            ErrorType::Internal => "InternalError",
        }
    }

    /// The words Kubernetes puts between the path and the value.
    pub fn label(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::NotFound => "Not found",
            ErrorType::TypeInvalid => "Invalid value",
            ErrorType::Internal => "Internal error",
        }
    }
}

/// One invalid field: the path (`spec.template.spec.domain`), the offending value when
/// there is one, and a human explanation.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub kind: ErrorType,
    pub field: String,
    pub value: Option<Value>,
    pub detail: String,
    /// KubeVirt's admission webhooks report their own text as the whole message.
    pub verbatim: bool,
}

impl FieldError {
    fn new(
        kind: ErrorType,
        field: impl Into<String>,
        value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
            verbatim: false,
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, field, None, detail)
    }

    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorType::Invalid, field, Some(value.into()), detail)
    }

    pub fn not_supported(
        field: impl Into<String>,
        value: impl Into<Value>,
        supported: &[&str],
    ) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Self::new(
            ErrorType::NotSupported,
            field,
            Some(value.into()),
            format!("supported values: {list}"),
        )
    }

    pub fn duplicate(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::Duplicate, field, Some(value.into()), "")
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, field, None, detail)
    }

    pub fn too_long(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::TooLong, field, None, detail)
    }

    pub fn not_found(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::NotFound, field, Some(value.into()), "")
    }

    pub fn type_invalid(
        field: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorType::TypeInvalid, field, Some(value.into()), detail)
    }

    /// An admission-webhook cause: `message` is shown as it is, `kind` only picks the reason.
    pub fn webhook(kind: ErrorType, field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            kind,
            field: field.into(),
            value: None,
            detail: message.into(),
            verbatim: true,
        }
    }

    /// The text after `<field>: ` in `Error()`: `Invalid value: "x": must be ...`.
    pub fn message_body(&self) -> String {
        if self.verbatim {
            return self.detail.clone();
        }
        let mut out = self.kind.label().to_string();
        if let Some(value) = &self.value {
            if !matches!(
                self.kind,
                ErrorType::Required
                    | ErrorType::Forbidden
                    | ErrorType::TooLong
                    | ErrorType::Internal
            ) {
                out.push_str(": ");
                out.push_str(&go_value(value));
            }
        }
        if !self.detail.is_empty() {
            out.push_str(": ");
            out.push_str(&self.detail);
        }
        out
    }

    /// The whole `field.Error.Error()` text: `spec.x: Invalid value: 3: must be ...`.
    pub fn message(&self) -> String {
        if self.verbatim || self.field.is_empty() {
            return self.message_body();
        }
        format!("{}: {}", self.field, self.message_body())
    }
}

/// Prints a value the way Go's `%v`/`%q` family does in field errors: strings quoted,
/// numbers and booleans bare, anything else as JSON.
fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

/// Joins a parent path and a child key: `spec` + `template` = `spec.template`.
pub fn child(parent: &str, key: &str) -> String {
    let mut path = parent.to_string();
    push_child(&mut path, key);
    path
}

/// `child` in place, for walks that keep one path buffer: returns the length to
/// truncate back to.
pub fn push_child(path: &mut String, key: &str) -> usize {
    let parent = path.len();
    if parent > 0 {
        path.push('.');
    }
    path.push_str(key);
    parent
}

/// `index` in place; returns the length to truncate back to.
pub fn push_index(path: &mut String, i: usize) -> usize {
    let parent = path.len();
    // Writing into a String cannot fail.
    let _ = write!(path, "[{i}]");
    parent
}

/// A list element path: `spec.volumes` + 2 = `spec.volumes[2]`.
pub fn index(parent: &str, i: usize) -> String {
    let mut path = parent.to_string();
    push_index(&mut path, i);
    path
}

/// A map entry path: `metadata.labels` + `a/b` = `metadata.labels[a/b]`.
pub fn key(parent: &str, k: &str) -> String {
    format!("{parent}[{k}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_kubernetes() {
        let e = FieldError::invalid(
            "metadata.name",
            "Bad_Name",
            "a lowercase RFC 1123 subdomain must ...",
        );
        assert_eq!(
            e.message(),
            "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must ..."
        );
        let e = FieldError::required("metadata.name", "name or generateName is required");
        assert_eq!(
            e.message(),
            "metadata.name: Required value: name or generateName is required"
        );
        let e = FieldError::not_supported("spec.runStrategy", "Sometimes", &["Always", "Halted"]);
        assert_eq!(
            e.message(),
            "spec.runStrategy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Halted\""
        );
        let e = FieldError::webhook(
            ErrorType::Invalid,
            "spec.running",
            "RunStrategy must be specified",
        );
        assert_eq!(e.message(), "RunStrategy must be specified");
    }
}
