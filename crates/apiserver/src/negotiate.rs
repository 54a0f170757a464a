//! Content negotiation: which representation a client accepts and how to read its body.

use apimachinery::status::Status;
use serde_json::Value;

/// How a response body is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
    /// `application/json;as=Table;v=v1;g=meta.k8s.io` — server-side printing.
    Table,
    /// `as=PartialObjectMetadata(List)`: metadata only, for metadata informers.
    Metadata,
}

pub const TABLE_CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
pub const ACCEPTED_MEDIA_TYPES: [&str; 3] = [
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];

struct MediaRange<'a> {
    essence: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

fn media_ranges(header: &str) -> Vec<MediaRange<'_>> {
    header
        .split(',')
        .map(|part| {
            let mut pieces = part.split(';').map(str::trim);
            let essence = pieces.next().unwrap_or("");
            let params = pieces
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim(), v.trim()))
                .collect();
            MediaRange { essence, params }
        })
        .collect()
}

/// Picks the first representation in the client's list that we can produce.
/// `table_allowed` is false where Tables make no sense (e.g. discovery).
pub fn negotiate(accept: Option<&str>, table_allowed: bool) -> Result<Format, Status> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Format::Json);
    };
    for range in media_ranges(accept) {
        let param = |name: &str| {
            range
                .params
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| *v)
        };
        match (range.essence, param("as")) {
            ("application/json", Some("Table")) if table_allowed && param("v") == Some("v1") => {
                return Ok(Format::Table)
            }
            ("application/json", Some("PartialObjectMetadata" | "PartialObjectMetadataList"))
                if table_allowed && param("v") == Some("v1") =>
            {
                return Ok(Format::Metadata)
            }
            ("application/json", Some(_)) => continue,
            ("application/json", None) | ("*/*", _) | ("application/*", _) => {
                return Ok(Format::Json)
            }
            ("application/yaml", None) => return Ok(Format::Yaml),
            _ => continue,
        }
    }
    Err(Status::not_acceptable(&ACCEPTED_MEDIA_TYPES))
}

/// The essence of a Content-Type header (`application/json`), lower-cased.
pub fn content_type_essence(header: Option<&str>) -> String {
    header
        .and_then(|h| h.split(';').next())
        .map(|s| s.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Reads a request body as JSON or YAML into a JSON value.
pub fn decode_body(
    content_type: &str,
    body: &[u8],
    kind: &str,
    version: &str,
) -> Result<Value, Status> {
    let decode_error = |detail: String| {
        Status::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {detail}"
        ))
    };
    match content_type {
        "" | "application/json" | "*/*" => {
            serde_json::from_slice(body).map_err(|e| decode_error(e.to_string()))
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            let text = std::str::from_utf8(body).map_err(|e| decode_error(e.to_string()))?;
            apimachinery::yaml::from_str(text).map_err(decode_error)
        }
        // Built-in kinds arrive as protobuf from kubectl's typed clients (`create
        // namespace`, `create configmap`, `create secret`).
        "application/vnd.kubernetes.protobuf" if crate::protobuf::reads(kind) => {
            crate::protobuf::decode_object(kind, body)
                .ok_or_else(|| decode_error("invalid protobuf body".into()))
        }
        "application/vnd.kubernetes.protobuf" => Err(Status::unsupported_media_type(&[
            "application/json",
            "application/yaml",
        ])),
        _ => Err(Status::unsupported_media_type(&[
            "application/json",
            "application/yaml",
        ])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_table_accept_header() {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(Some(accept), true).unwrap(), Format::Table);
        assert_eq!(negotiate(Some(accept), false).unwrap(), Format::Json);
        assert_eq!(
            negotiate(Some("application/yaml"), true).unwrap(),
            Format::Yaml
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"), true)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(negotiate(None, true).unwrap(), Format::Json);
    }
}
