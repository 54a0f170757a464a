//! CDI's validating webhook for DataVolumes (`datavolume-validate.cdi.kubevirt.io`), with its
//! messages and field paths. Like CDI, it reports the first problem it finds; the paths
//! name Go fields (`spec.PVC`, `spec.source.HTTP.url`) because CDI's do.

use apimachinery::field::{ErrorType, FieldError};
use serde_json::Value;

use crate::quantity::Quantity;

pub const DATA_VOLUME_VALIDATOR: &str = "datavolume-validate.cdi.kubevirt.io";

const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
/// The sources CDI knows, in its struct's order.
const SOURCES: [&str; 10] = [
    "http", "s3", "gcs", "registry", "pvc", "upload", "blank", "imageio", "vddk", "snapshot",
];
const MIB: i64 = 1 << 20;

fn invalid(field: &str, message: impl Into<String>) -> Vec<FieldError> {
    vec![FieldError::webhook(ErrorType::Invalid, field, message)]
}

/// A DataVolume create.
pub fn validate_create(dv: &Value) -> Vec<FieldError> {
    let name = dv
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.len() > 253 {
        return invalid("", "Name cannot be longer than 253 characters");
    }
    validate_spec(&dv["spec"])
}

/// A DataVolume update: the spec is immutable.
pub fn validate_update(old: &Value, new: &Value) -> Vec<FieldError> {
    if old.get("spec") != new.get("spec") {
        return vec![FieldError::webhook(
            ErrorType::Duplicate,
            "DataVolume.Spec",
            "Cannot update DataVolume Spec",
        )];
    }
    Vec::new()
}

fn validate_spec(spec: &Value) -> Vec<FieldError> {
    let pvc = spec.get("pvc").filter(|v| v.is_object());
    let storage = spec.get("storage").filter(|v| v.is_object());
    match (pvc, storage) {
        (None, None) => return invalid("spec.PVC", "Missing Data volume PVC"),
        (Some(_), Some(_)) => {
            return invalid(
                "spec.PVC.Storage",
                "Duplicate storage definition, both target storage and target pvc defined",
            )
        }
        _ => {}
    }
    if let Some(pvc) = pvc {
        let modes: Vec<&str> = pvc
            .get("accessModes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match modes.as_slice() {
            [] => {
                return invalid(
                    "spec.PVC.accessModes",
                    "Required value: at least 1 access mode is required",
                )
            }
            [_, _, ..] => return invalid("spec.PVC.accessModes", "PVC multiple accessModes"),
            [mode] if !ACCESS_MODES.contains(mode) => {
                return invalid(
                    "spec.PVC.accessModes",
                    format!(
                        r#"Unsupported value: "{mode}": supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod""#
                    ),
                )
            }
            _ => {}
        }
    }
    let source = spec.get("source").filter(|v| v.is_object());
    let source_ref = spec.get("sourceRef").filter(|v| v.is_object());
    let is_clone = source_ref.is_some()
        || source.is_some_and(|s| s.get("pvc").is_some() || s.get("snapshot").is_some());
    let (claim, label) = match pvc {
        Some(pvc) => (pvc, "PVC"),
        None => (storage.unwrap_or(&Value::Null), "Storage"),
    };
    let size_field = format!("spec.{label}.resources.requests.size");
    match claim.pointer("/resources/requests/storage") {
        Some(size) => match Quantity::from_json(size).map(Quantity::value) {
            Some(bytes) if bytes > 0 && bytes < MIB => {
                return invalid(&size_field, format!("{label} size should be at least 1MiB"))
            }
            Some(bytes) if bytes > 0 => {}
            _ => {
                return invalid(
                    &size_field,
                    format!("{label} size can't be equal or less than zero"),
                )
            }
        },
        None if pvc.is_some() || !is_clone => {
            return invalid(&size_field, format!("{label} size is missing"))
        }
        None => {}
    }
    match (source, source_ref) {
        (Some(source), None) => validate_source(spec, source),
        (None, Some(reference)) => validate_source_ref(reference),
        _ => invalid(
            "spec.source",
            "Data volume should have either Source or SourceRef, or be externally populated",
        ),
    }
}

fn validate_source(spec: &Value, source: &Value) -> Vec<FieldError> {
    let named: Vec<&str> = SOURCES
        .iter()
        .copied()
        .filter(|kind| source.get(*kind).is_some_and(|v| !v.is_null()))
        .collect();
    let kind = match named.as_slice() {
        [] => return invalid("spec.source", "Missing Data volume source"),
        [kind] => *kind,
        _ => return invalid("spec.source", "Multiple Data volume sources"),
    };
    let content_type = spec
        .get("contentType")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !["", "kubevirt", "archive"].contains(&content_type) {
        return invalid(
            "spec.contentType",
            "ContentType not one of: kubevirt, archive",
        );
    }
    let body = &source[kind];
    match kind {
        "http" => check_url(
            body.get("url").and_then(Value::as_str).unwrap_or(""),
            "HTTP",
        ),
        "blank" if content_type == "archive" => invalid(
            "spec.contentType",
            "SourceType cannot be blank and the contentType be archive",
        ),
        "registry" => validate_registry(body, content_type),
        "pvc" => {
            let empty = |key| {
                body.get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
            };
            if empty("namespace") || empty("name") {
                return invalid("spec.source.PVC", "spec.source.PVC source PVC is not valid");
            }
            Vec::new()
        }
        _ => Vec::new(),
    }
}

fn validate_registry(registry: &Value, content_type: &str) -> Vec<FieldError> {
    if content_type == "archive" {
        return invalid(
            "spec.contentType",
            "ContentType must be kubevirt when Source is Registry",
        );
    }
    let url = registry.get("url").and_then(Value::as_str);
    let stream = registry.get("imageStream").and_then(Value::as_str);
    let url = match (url, stream) {
        (Some(url), None) => url,
        _ => {
            return invalid(
                "spec.source.Registry",
                "Source registry should have either URL or ImageStream",
            )
        }
    };
    match url.split_once("://") {
        Some(("docker" | "oci-archive", _)) => {}
        Some(_) => {
            return invalid(
                "spec.source.Registry.URL",
                format!("Illegal registry source URL scheme {url}"),
            )
        }
        None => {
            return invalid(
                "spec.source.Registry.URL",
                format!("Illegal registry source URL {url}"),
            )
        }
    }
    let method = registry
        .get("pullMethod")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !["", "pod", "node"].contains(&method) {
        return invalid(
            "spec.source.Registry.PullMethod",
            format!(r#"ImportMethod {method} is neither pod, node or """#),
        );
    }
    Vec::new()
}

fn check_url(url: &str, source: &str) -> Vec<FieldError> {
    let problem = if url.is_empty() {
        "source URL is empty".to_string()
    } else {
        match url.split_once("://") {
            Some(("http" | "https" | "gs", rest)) if !rest.is_empty() => return Vec::new(),
            Some((_, rest)) if !rest.is_empty() => format!("Invalid source URL scheme: {url}"),
            _ => format!("Invalid source URL: {url}"),
        }
    };
    invalid(
        &format!("spec.source.{source}.url"),
        format!("spec.source {problem}"),
    )
}

fn validate_source_ref(reference: &Value) -> Vec<FieldError> {
    let kind = reference.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() {
        return invalid("spec.sourceRef.Kind", "Missing sourceRef kind");
    }
    if kind != "DataSource" {
        return invalid(
            "spec.sourceRef.Kind",
            format!("Unsupported sourceRef kind {kind}, currently only DataSource is supported"),
        );
    }
    if reference
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        return invalid("spec.sourceRef.Name", "Missing sourceRef name");
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn first(dv: Value) -> (String, String) {
        let errors = validate_create(&dv);
        let e = errors.first().expect("rejected");
        (e.field.clone(), e.message())
    }

    fn dv(spec: Value) -> Value {
        json!({"metadata": {"name": "d", "namespace": "n"}, "spec": spec})
    }

    #[test]
    fn a_good_import_and_a_good_clone_pass() {
        let storage = json!({"resources": {"requests": {"storage": "1Gi"}}});
        assert!(validate_create(&dv(
            json!({"source": {"http": {"url": "https://x/y.qcow2"}}, "storage": storage})
        ))
        .is_empty());
        assert!(validate_create(&dv(
            json!({"source": {"pvc": {"name": "a", "namespace": "b"}}, "storage": {}})
        ))
        .is_empty());
        assert!(validate_create(&dv(
            json!({"sourceRef": {"kind": "DataSource", "name": "f"}, "storage": {}})
        ))
        .is_empty());
        assert!(validate_create(&dv(json!({"source": {"registry": {"url": "docker://quay.io/containerdisks/fedora:40"}}, "storage": storage}))).is_empty());
    }

    #[test]
    fn cdi_messages_and_paths() {
        let storage = json!({"resources": {"requests": {"storage": "1Gi"}}});
        let cases = [
            (
                json!({"source": {"blank": {}}}),
                "spec.PVC",
                "Missing Data volume PVC",
            ),
            (
                json!({"source": {"blank": {}}, "pvc": {}, "storage": {}}),
                "spec.PVC.Storage",
                "Duplicate storage definition, both target storage and target pvc defined",
            ),
            (
                json!({"source": {"blank": {}}, "pvc": {"resources": {"requests": {"storage": "1Gi"}}}}),
                "spec.PVC.accessModes",
                "Required value: at least 1 access mode is required",
            ),
            (
                json!({"source": {"blank": {}}, "storage": {}}),
                "spec.Storage.resources.requests.size",
                "Storage size is missing",
            ),
            (
                json!({"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Ki"}}}}),
                "spec.Storage.resources.requests.size",
                "Storage size should be at least 1MiB",
            ),
            (
                json!({"storage": storage}),
                "spec.source",
                "Data volume should have either Source or SourceRef, or be externally populated",
            ),
            (
                json!({"source": {}, "storage": storage}),
                "spec.source",
                "Missing Data volume source",
            ),
            (
                json!({"source": {"blank": {}, "upload": {}}, "storage": storage}),
                "spec.source",
                "Multiple Data volume sources",
            ),
            (
                json!({"source": {"http": {"url": ""}}, "storage": storage}),
                "spec.source.HTTP.url",
                "spec.source source URL is empty",
            ),
            (
                json!({"source": {"http": {"url": "ftp://x/y"}}, "storage": storage}),
                "spec.source.HTTP.url",
                "spec.source Invalid source URL scheme: ftp://x/y",
            ),
            (
                json!({"source": {"pvc": {"name": "a"}}, "storage": {}}),
                "spec.source.PVC",
                "spec.source.PVC source PVC is not valid",
            ),
            (
                json!({"sourceRef": {"kind": "Pvc", "name": "a"}, "storage": {}}),
                "spec.sourceRef.Kind",
                "Unsupported sourceRef kind Pvc, currently only DataSource is supported",
            ),
            (
                json!({"source": {"registry": {"url": "quay.io/x"}}, "storage": storage}),
                "spec.source.Registry.URL",
                "Illegal registry source URL quay.io/x",
            ),
        ];
        for (spec, field, message) in cases {
            assert_eq!(
                first(dv(spec.clone())),
                (field.to_string(), message.to_string()),
                "{spec}"
            );
        }
    }

    #[test]
    fn the_spec_is_immutable() {
        let old = dv(json!({"source": {"blank": {}}, "storage": {}}));
        let mut new = old.clone();
        assert!(validate_update(&old, &new).is_empty());
        new["spec"]["source"] = json!({"upload": {}});
        assert_eq!(
            validate_update(&old, &new)[0].message(),
            "Cannot update DataVolume Spec"
        );
    }
}
