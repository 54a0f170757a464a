//! Writing answers: JSON, YAML, Tables, metadata-only objects and Status errors, with
//! the headers kube-apiserver sends.

use apimachinery::status::Status;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};

use crate::negotiate::{self, Format};
use crate::registry::Outcome;
use crate::stored;

pub(super) fn json_response(code: StatusCode, body: &Value) -> Response {
    json_bytes_response(code, serde_json::to_vec(body).unwrap_or_default())
}

pub(super) fn json_bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (code, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A failure as kube-apiserver writes it, with `Retry-After` when the Status says when.
pub fn status_response(status: &Status) -> Response {
    let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(code, &status.to_json());
    let retry_after = status.details.as_ref().and_then(|d| d.retry_after_seconds);
    if let Some(seconds) = retry_after.filter(|s| *s > 0) {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

pub(super) fn not_found_path() -> Status {
    Status::failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
    .with_empty_details()
}

pub(super) trait EmptyDetails {
    fn with_empty_details(self) -> Self;
}

impl EmptyDetails for Status {
    fn with_empty_details(mut self) -> Self {
        self.details = Some(Default::default());
        self
    }
}

pub(super) fn add_warnings(response: &mut Response, warnings: &[String]) {
    for warning in warnings {
        let text = format!(
            "299 - {}",
            serde_json::to_string(warning).unwrap_or_default()
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
}

/// Writes `body` as JSON or YAML.
pub(super) fn object_response(code: StatusCode, body: &Value, format: Format) -> Response {
    match format {
        Format::Yaml => {
            let mut response = (code, apimachinery::yaml::to_string(body)).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/yaml"),
            );
            response
        }
        _ => json_response(code, body),
    }
}

/// An object reduced to its metadata, as `meta.k8s.io/v1` PartialObjectMetadata.
pub(super) fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
           "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({}))})
}

/// A JSON list of stored objects, written without decoding them.
pub(super) fn stored_list_response(
    info: &apimachinery::resource::ResourceInfo,
    metadata: Value,
    items: &[store::KeyValue],
) -> Result<Response, Status> {
    let head =
        json!({"apiVersion": info.api_version(), "kind": info.list_kind, "metadata": metadata});
    let mut body = serde_json::to_vec(&head).map_err(Status::internal)?;
    // Replace the head's closing brace with the items.
    body.pop();
    body.extend_from_slice(b",\"items\":[");
    for (i, kv) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        stored::write_json(kv, &mut body)?;
    }
    body.extend_from_slice(b"]}");
    Ok(json_bytes_response(StatusCode::OK, body))
}

pub(super) fn table_response(table: &Value) -> Response {
    let mut response = json_response(StatusCode::OK, table);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(negotiate::TABLE_CONTENT_TYPE),
    );
    response
}

pub(super) fn outcome_response(outcome: Outcome<Value>, format: Format) -> Response {
    let code = if outcome.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut body = Vec::new();
    let mut response = match &outcome.stored {
        Some(kv) if format == Format::Json && stored::write_json(kv, &mut body).is_ok() => {
            json_bytes_response(code, body)
        }
        _ => object_response(code, &outcome.value, format),
    };
    add_warnings(&mut response, &outcome.warnings);
    response
}
