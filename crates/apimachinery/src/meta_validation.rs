//! Validation of names, labels, annotations, finalizers and object metadata with the exact
//! messages of `k8s.io/apimachinery/pkg/util/validation` and `pkg/api/validation`: kubectl
//! prints them verbatim inside `Invalid` Status messages, so every character matters.
//!
//! The metadata validators read `serde_json::Value` (the stored form of custom resources) and
//! report wrongly typed fields as field errors instead of panicking.
//!
//! Over 800 lines on purpose: one job (kube's metadata validators), and most of it is the
//! table of kube's exact messages; splitting it would scatter rules that cite each other.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::field::{ErrorType, FieldError};

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MAX: usize = 63;
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MAX: usize = 253;

/// Upper bound of the summed byte length of all annotation keys and values.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
/// The detail of every immutable-field error.
pub const FIELD_IMMUTABLE: &str = "field is immutable";
const FIELD_MANAGER_MAX: usize = 128;
const SUBRESOURCE_MAX: usize = 256;

/// The garbage-collector finalizers, which must not be combined.
const FINALIZER_ORPHAN: &str = "orphan";
const FINALIZER_FOREGROUND: &str = "foregroundDeletion";
/// Finalizers Kubernetes itself owns; only these may lack a domain prefix without a warning.
const STANDARD_FINALIZERS: [&str; 3] = [FINALIZER_ORPHAN, FINALIZER_FOREGROUND, "kubernetes"];

/// `validation.MaxLenError`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `validation.RegexError`, including its odd `',  or '` spacing between examples.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, anchored.
fn matches_qualified_name(s: &[u8]) -> bool {
    match (s.first(), s.last()) {
        (Some(&first), Some(&last)) => {
            is_alnum(first)
                && is_alnum(last)
                && s.iter()
                    .all(|&b| is_alnum(b) || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, anchored.
fn matches_dns1123_label(s: &[u8]) -> bool {
    match (s.first(), s.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first)
                && is_lower_alnum(last)
                && s.iter().all(|&b| is_lower_alnum(b) || b == b'-')
        }
        _ => false,
    }
}

/// Dot-separated DNS-1123 labels, anchored.
fn matches_dns1123_subdomain(s: &[u8]) -> bool {
    s.split(|&b| b == b'.').all(matches_dns1123_label)
}

/// Byte-level `IsDNS1123Subdomain`: generateName masking can leave a string that is not UTF-8.
fn dns1123_subdomain_errors(value: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn dns1123_label_errors(value: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            // A valid subdomain that is not a label can only be failing because of its dots.
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `validation.IsDNS1123Subdomain`: names of custom resources.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    dns1123_subdomain_errors(value.as_bytes())
}

/// `validation.IsDNS1123Label`: namespace names.
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    dns1123_label_errors(value.as_bytes())
}

/// `validation.IsQualifiedName`: label keys, annotation keys and finalizers.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX)));
    }
    if !matches_qualified_name(name.as_bytes()) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `validation.IsValidLabelValue`.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_error(LABEL_VALUE_MAX));
    }
    if !value.is_empty() && !matches_qualified_name(value.as_bytes()) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

const CONFIG_MAP_KEY_ERR: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";
const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";

/// `validation.IsConfigMapKey`: keys of ConfigMap and Secret data, which become file names.
pub fn is_config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    let allowed = |b: u8| is_alnum(b) || matches!(b, b'-' | b'_' | b'.');
    if value.is_empty() || !value.bytes().all(allowed) {
        errs.push(regex_error(
            CONFIG_MAP_KEY_ERR,
            CONFIG_MAP_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    // A key must not name the directory it lives in or climb out of it.
    match value {
        "." => errs.push("must not be '.'".to_string()),
        ".." => errs.push("must not be '..'".to_string()),
        v if v.starts_with("..") => errs.push("must not start with '..'".to_string()),
        _ => {}
    }
    errs
}

/// Go's `strconv.Quote` (the `%q` verb), which Kubernetes uses in many messages.
/// Printability of non-ASCII characters is approximated (controls, separators, format
/// characters and private-use code points are escaped).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if !go_printable(c) => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Approximates Go's `unicode.IsPrint` for the characters that matter in practice.
fn go_printable(c: char) -> bool {
    let u = c as u32;
    !(c.is_control()
        || matches!(u, 0xA0 | 0xAD | 0x1680 | 0x180E | 0x2000..=0x200F | 0x2028..=0x202F | 0x205F..=0x206F | 0x3000)
        || matches!(u, 0xD800..=0xF8FF | 0xFEFF | 0xFFF9..=0xFFFB | 0xFFFE | 0xFFFF)
        || u >= 0xF0000
        || (u & 0xFFFE) == 0xFFFE)
}

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`, or `[]string(nil)` when empty (every
/// empty list Kubernetes prints here is a nil slice).
pub fn go_string_slice(values: &[String]) -> String {
    if values.is_empty() {
        return "[]string(nil)".to_string();
    }
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// An `Invalid value` error whose value Go prints with `%#v`/`String()`, which JSON cannot
/// express: the Go rendering is folded into the detail so the text matches byte for byte.
fn invalid_rendered(field: &str, rendered: &str, detail: &str) -> FieldError {
    FieldError {
        kind: ErrorType::Invalid,
        field: field.to_string(),
        value: None,
        detail: format!("{rendered}: {detail}"),
        verbatim: false,
    }
}

/// Which name format a resource requires (`ValidateNameFunc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain: custom resources.
    Subdomain,
    /// DNS-1123 label: namespaces.
    Label,
    /// A path segment (`IsValidPathSegmentName`): RBAC roles and bindings, whose names
    /// hold colons (`system:discovery`, `kubevirt.io:edit`).
    PathSegment,
}

impl NameRule {
    /// `prefix` is set for generateName, whose trailing dash is masked first exactly like
    /// upstream `maskTrailingDash` (which also drops the character before the dash).
    fn check(self, name: &str, prefix: bool) -> Vec<String> {
        let bytes = name.as_bytes();
        let masked;
        let subject: &[u8] = if prefix && bytes.len() > 1 && bytes.ends_with(b"-") {
            masked = [&bytes[..bytes.len() - 2], b"a"].concat();
            &masked
        } else {
            bytes
        };
        match self {
            NameRule::Subdomain => dns1123_subdomain_errors(subject),
            NameRule::Label => dns1123_label_errors(subject),
            NameRule::PathSegment => path_segment_errors(name, prefix),
        }
    }
}

/// `path.ValidatePathSegmentName`: a prefix (generateName) is only checked for the
/// characters a URL segment cannot hold.
fn path_segment_errors(name: &str, prefix: bool) -> Vec<String> {
    let mut errors = Vec::new();
    if !prefix && (name == "." || name == "..") {
        errors.push(format!("may not be '{name}'"));
        return errors;
    }
    for illegal in ["/", "%"] {
        if name.contains(illegal) {
            errors.push(format!("may not contain '{illegal}'"));
        }
    }
    errors
}

/// The JSON type names the OpenAPI validator uses in its messages.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A wrongly typed field, worded like the schema validator of custom resources.
fn type_error(path: &str, value: &Value, expected: &str) -> FieldError {
    let actual = json_type(value);
    FieldError::type_invalid(
        path,
        actual,
        format!("{path} in body must be of type {expected}: \"{actual}\""),
    )
}

/// Typed, panic-free access to an ObjectMeta in JSON form. A missing or `null` field reads
/// as absent (Go's zero value); a wrongly typed one is reported once and then ignored.
struct MetaReader<'a> {
    meta: Option<&'a Map<String, Value>>,
    errors: Vec<FieldError>,
}

impl<'a> MetaReader<'a> {
    fn new(meta: &'a Value) -> Self {
        match meta {
            Value::Object(map) => MetaReader {
                meta: Some(map),
                errors: Vec::new(),
            },
            Value::Null => MetaReader {
                meta: None,
                errors: Vec::new(),
            },
            other => MetaReader {
                meta: None,
                errors: vec![type_error("metadata", other, "object")],
            },
        }
    }

    fn raw(&self, key: &str) -> Option<&'a Value> {
        self.meta.and_then(|m| m.get(key)).filter(|v| !v.is_null())
    }

    fn string(&mut self, key: &str) -> &'a str {
        match self.raw(key) {
            Some(Value::String(s)) => s,
            Some(other) => {
                self.errors
                    .push(type_error(&format!("metadata.{key}"), other, "string"));
                ""
            }
            None => "",
        }
    }

    fn int(&mut self, key: &str) -> Option<i64> {
        match self.raw(key) {
            Some(Value::Number(n)) if n.is_i64() => n.as_i64(),
            Some(other) => {
                self.errors
                    .push(type_error(&format!("metadata.{key}"), other, "integer"));
                None
            }
            None => None,
        }
    }

    fn string_map(&mut self, key: &str) -> Vec<(&'a str, &'a str)> {
        let path = format!("metadata.{key}");
        match self.raw(key) {
            Some(Value::Object(map)) => {
                let mut out = Vec::with_capacity(map.len());
                for (k, v) in map {
                    match v {
                        Value::String(s) => out.push((k.as_str(), s.as_str())),
                        other => {
                            self.errors
                                .push(type_error(&format!("{path}.{k}"), other, "string"))
                        }
                    }
                }
                out
            }
            Some(other) => {
                self.errors.push(type_error(&path, other, "object"));
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    fn array(&mut self, key: &str) -> &'a [Value] {
        match self.raw(key) {
            Some(Value::Array(items)) => items,
            Some(other) => {
                self.errors
                    .push(type_error(&format!("metadata.{key}"), other, "array"));
                &[]
            }
            None => &[],
        }
    }

    fn string_list(&mut self, key: &str) -> Vec<&'a str> {
        let mut out = Vec::new();
        for (i, item) in self.array(key).iter().enumerate() {
            match item {
                Value::String(s) => out.push(s.as_str()),
                other => {
                    self.errors
                        .push(type_error(&format!("metadata.{key}[{i}]"), other, "string"))
                }
            }
        }
        out
    }

    fn object_list(&mut self, key: &str) -> Vec<(usize, &'a Map<String, Value>)> {
        let mut out = Vec::new();
        for (i, item) in self.array(key).iter().enumerate() {
            match item {
                Value::Object(map) => out.push((i, map)),
                other => {
                    self.errors
                        .push(type_error(&format!("metadata.{key}[{i}]"), other, "object"))
                }
            }
        }
        out
    }
}

/// Reads a string member of a nested object (owner reference, managedFields entry).
fn member_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> &'a str {
    match obj.get(key) {
        Some(Value::String(s)) => s,
        Some(Value::Null) | None => "",
        Some(other) => {
            errors.push(type_error(&format!("{path}.{key}"), other, "string"));
            ""
        }
    }
}

fn member_bool(
    obj: &Map<String, Value>,
    key: &str,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> bool {
    match obj.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::Null) | None => false,
        Some(other) => {
            errors.push(type_error(&format!("{path}.{key}"), other, "boolean"));
            false
        }
    }
}

/// `ValidateLabels`: every error is reported on `metadata.labels` itself.
fn validate_labels(reader: &mut MetaReader) -> Vec<FieldError> {
    let path = "metadata.labels";
    let mut errs = Vec::new();
    for (k, v) in reader.string_map("labels") {
        for msg in is_qualified_name(k) {
            errs.push(FieldError::invalid(path, k, msg));
        }
        for msg in is_valid_label_value(v) {
            errs.push(FieldError::invalid(path, v, msg));
        }
    }
    errs
}

/// `ValidateAnnotations`: keys are qualified names compared case-insensitively, and the
/// total size is bounded.
fn validate_annotations(reader: &mut MetaReader) -> Vec<FieldError> {
    let path = "metadata.annotations";
    let mut errs = Vec::new();
    let mut total = 0usize;
    for (k, v) in reader.string_map("annotations") {
        for msg in is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, k, msg));
        }
        total = total.saturating_add(k.len()).saturating_add(v.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(
            path,
            format!("may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        ));
    }
    errs
}

/// `ValidateOwnerReferences`; field paths are not indexed, as upstream.
fn validate_owner_references(reader: &mut MetaReader) -> Vec<FieldError> {
    let path = "metadata.ownerReferences";
    let mut errs = Vec::new();
    let raw = reader
        .raw("ownerReferences")
        .cloned()
        .unwrap_or(Value::Null);
    let mut first_controller: Option<String> = None;
    for (i, reference) in reader.object_list("ownerReferences") {
        let item_path = format!("{path}[{i}]");
        let api_version = member_str(reference, "apiVersion", &item_path, &mut errs);
        let kind = member_str(reference, "kind", &item_path, &mut errs);
        let name = member_str(reference, "name", &item_path, &mut errs);
        let uid = member_str(reference, "uid", &item_path, &mut errs);
        let controller = member_bool(reference, "controller", &item_path, &mut errs);
        member_bool(reference, "blockOwnerDeletion", &item_path, &mut errs);
        let (group, version) = parse_group_version(api_version);
        if version.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        if kind.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.kind"),
                kind,
                "kind must not be empty",
            ));
        }
        if name.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.name"),
                name,
                "name must not be empty",
            ));
        }
        if uid.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.uid"),
                uid,
                "uid must not be empty",
            ));
        }
        if group.is_empty() && version == "v1" && kind == "Event" {
            // Go prints the reference struct with %#v (pointer addresses included); the JSON
            // form is the closest stable rendering.
            errs.push(FieldError::invalid(
                path,
                Value::Object(reference.clone()),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if controller {
            let current = format!("{kind}/{name}");
            match &first_controller {
                Some(first) => errs.push(FieldError::invalid(
                    path,
                    raw.clone(),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
    errs
}

/// `schema.ParseGroupVersion` as used by `FromAPIVersionAndKind`: more than one slash is
/// an error, which leaves the version empty.
fn parse_group_version(api_version: &str) -> (&str, &str) {
    if api_version.is_empty() || api_version == "/" {
        return ("", "");
    }
    match api_version.matches('/').count() {
        0 => ("", api_version),
        1 => api_version.split_once('/').unwrap_or(("", "")),
        _ => ("", ""),
    }
}

/// `ValidateFinalizers` (names must be qualified; orphan and foregroundDeletion exclude each other).
fn validate_finalizers(finalizers: &[&str]) -> Vec<FieldError> {
    let path = "metadata.finalizers";
    let mut errs = Vec::new();
    for finalizer in finalizers {
        for msg in is_qualified_name(finalizer) {
            errs.push(FieldError::invalid(path, *finalizer, msg));
        }
    }
    if finalizers.contains(&FINALIZER_ORPHAN) && finalizers.contains(&FINALIZER_FOREGROUND) {
        let all: Vec<String> = finalizers.iter().map(|f| f.to_string()).collect();
        errs.push(invalid_rendered(
            path,
            &go_string_slice(&all),
            &format!("finalizer {FINALIZER_ORPHAN} and {FINALIZER_FOREGROUND} cannot be both set"),
        ));
    }
    errs
}

/// `ValidateManagedFields`.
fn validate_managed_fields(reader: &mut MetaReader) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, entry) in reader.object_list("managedFields") {
        let path = format!("metadata.managedFields[{i}]");
        let operation = member_str(entry, "operation", &path, &mut errs);
        if operation != "Apply" && operation != "Update" {
            errs.push(FieldError::invalid(
                format!("{path}.operation"),
                operation,
                "must be `Apply` or `Update`",
            ));
        }
        let fields_type = member_str(entry, "fieldsType", &path, &mut errs);
        if !fields_type.is_empty() && fields_type != "FieldsV1" {
            errs.push(FieldError::invalid(
                format!("{path}.fieldsType"),
                fields_type,
                "must be `FieldsV1`",
            ));
        }
        let manager = member_str(entry, "manager", &path, &mut errs);
        if manager.len() > FIELD_MANAGER_MAX {
            errs.push(FieldError::too_long(
                format!("{path}.manager"),
                format!("may not be more than {FIELD_MANAGER_MAX} bytes"),
            ));
        }
        for (pos, c) in manager.char_indices() {
            if !go_printable(c) {
                errs.push(FieldError::invalid(
                    format!("{path}.manager"),
                    manager,
                    format!("invalid character U+{:04X} (at position {pos})", c as u32),
                ));
            }
        }
        let subresource = member_str(entry, "subresource", &path, &mut errs);
        if subresource.len() > SUBRESOURCE_MAX {
            errs.push(FieldError::too_long(
                format!("{path}.subresource"),
                format!("may not be more than {SUBRESOURCE_MAX} bytes"),
            ));
        }
    }
    errs
}

/// `ValidateObjectMetaAccessor` for a create, plus the finalizer warnings custom resources
/// produce (`WarningsOnCreate`). `meta` is the object's `metadata` value; generateName must
/// already have been turned into a name by the caller.
pub fn validate_object_meta(
    meta: &Value,
    namespaced: bool,
    name_rule: NameRule,
) -> (Vec<FieldError>, Vec<String>) {
    let mut reader = MetaReader::new(meta);
    let mut errs = Vec::new();

    let generate_name = reader.string("generateName");
    if !generate_name.is_empty() {
        for msg in name_rule.check(generate_name, true) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                generate_name,
                msg,
            ));
        }
    }
    let name = reader.string("name");
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for msg in name_rule.check(name, false) {
            errs.push(FieldError::invalid("metadata.name", name, msg));
        }
    }
    let namespace = reader.string("namespace");
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required("metadata.namespace", ""));
        } else {
            for msg in NameRule::Label.check(namespace, false) {
                errs.push(FieldError::invalid("metadata.namespace", namespace, msg));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            "metadata.namespace",
            "not allowed on this type",
        ));
    }
    if let Some(generation) = reader.int("generation") {
        if generation < 0 {
            errs.push(FieldError::invalid(
                "metadata.generation",
                generation,
                "must be greater than or equal to 0",
            ));
        }
    }
    errs.extend(validate_labels(&mut reader));
    errs.extend(validate_annotations(&mut reader));
    errs.extend(validate_owner_references(&mut reader));
    let finalizers = reader.string_list("finalizers");
    errs.extend(validate_finalizers(&finalizers));
    errs.extend(validate_managed_fields(&mut reader));

    let mut all = reader.errors;
    all.extend(errs);
    (all, finalizer_warnings(meta, None))
}

/// Warnings for finalizers added by this write (all of them on create): malformed names and
/// names without a domain prefix (`generateWarningsFromObj` of custom resources).
pub fn finalizer_warnings(new_meta: &Value, old_meta: Option<&Value>) -> Vec<String> {
    let finalizers = |meta: &Value| -> BTreeSet<String> {
        meta.get("finalizers")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut added = finalizers(new_meta);
    if let Some(old) = old_meta {
        added = added.difference(&finalizers(old)).cloned().collect();
    }
    let path = "metadata.finalizers";
    let mut warnings = Vec::new();
    for finalizer in &added {
        let quoted = go_quote(finalizer);
        for msg in is_qualified_name(finalizer) {
            warnings.push(format!("{path}: {quoted}: {msg}"));
        }
        if !finalizer.contains('/') && !STANDARD_FINALIZERS.contains(&finalizer.as_str()) {
            if finalizer.contains('.') {
                warnings.push(format!("{path}: {quoted}: prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers"));
            } else {
                warnings.push(format!("{path}: {quoted}: prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers"));
            }
        }
    }
    warnings
}

/// A `metav1.Time` read through the unstructured accessors: unparseable or empty values read
/// as the zero time (`None`).
fn meta_time(meta: &Value, key: &str) -> Option<DateTime<Utc>> {
    meta.get(key)
        .and_then(Value::as_str)
        .and_then(parse_go_rfc3339)
}

/// Go's `time.Parse(time.RFC3339, s)`: an upper-case `T` separator and `Z` or a numeric offset.
pub(crate) fn parse_go_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    let bytes = s.as_bytes();
    if bytes.get(10) != Some(&b'T') || s.ends_with('z') {
        return None;
    }
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Go's `time.Time.String()` of a time the API server holds in UTC.
fn go_time_string(t: Option<DateTime<Utc>>) -> String {
    match t {
        None => "0001-01-01 00:00:00 +0000 UTC".to_string(),
        Some(t) => {
            let fraction = format!("{:09}", t.timestamp_subsec_nanos());
            let fraction = fraction.trim_end_matches('0');
            let dot = if fraction.is_empty() { "" } else { "." };
            format!("{}{dot}{fraction} +0000 UTC", t.format("%Y-%m-%d %H:%M:%S"))
        }
    }
}

/// `ValidateObjectMetaAccessorUpdate`: immutable system fields, generation monotonicity, no
/// new finalizers once deletion started, and the create-time checks that still apply.
pub fn validate_object_meta_update(new_meta: &Value, old_meta: &Value) -> Vec<FieldError> {
    let mut reader = MetaReader::new(new_meta);
    let mut old_reader = MetaReader::new(old_meta);
    let mut errs = Vec::new();

    if meta_time(old_meta, "deletionTimestamp").is_some() {
        let old: BTreeSet<&str> = old_reader.string_list("finalizers").into_iter().collect();
        let new: BTreeSet<&str> = reader.string_list("finalizers").into_iter().collect();
        let extra: Vec<String> = new.difference(&old).map(|s| s.to_string()).collect();
        if !extra.is_empty() {
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                    go_string_slice(&extra)
                ),
            ));
        }
    }
    // A missing resourceVersion is the transport's concern: PUT requires one, while
    // patches and server-internal writes update the latest object.
    let new_generation = reader.int("generation").unwrap_or(0);
    if new_generation < old_reader.int("generation").unwrap_or(0) {
        errs.push(FieldError::invalid(
            "metadata.generation",
            new_generation,
            "must not be decremented",
        ));
    }
    for key in ["name", "namespace", "uid"] {
        let new = reader.string(key);
        if new != old_reader.string(key) {
            errs.push(FieldError::invalid(
                format!("metadata.{key}"),
                new,
                FIELD_IMMUTABLE,
            ));
        }
    }
    let new_created = meta_time(new_meta, "creationTimestamp");
    if new_created != meta_time(old_meta, "creationTimestamp") {
        errs.push(invalid_rendered(
            "metadata.creationTimestamp",
            &go_time_string(new_created),
            FIELD_IMMUTABLE,
        ));
    }
    let new_deleted = meta_time(new_meta, "deletionTimestamp");
    if new_deleted != meta_time(old_meta, "deletionTimestamp") {
        let rendered = match new_deleted {
            Some(t) => go_time_string(Some(t)),
            None => "null".to_string(),
        };
        errs.push(invalid_rendered(
            "metadata.deletionTimestamp",
            &rendered,
            FIELD_IMMUTABLE,
        ));
    }
    let grace = |meta: &Value| {
        meta.get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
    };
    let new_grace = grace(new_meta);
    if new_grace != grace(old_meta) {
        errs.push(FieldError::invalid(
            "metadata.deletionGracePeriodSeconds",
            new_grace.map(Value::from).unwrap_or(Value::Null),
            FIELD_IMMUTABLE,
        ));
    }
    errs.extend(validate_labels(&mut reader));
    errs.extend(validate_annotations(&mut reader));
    errs.extend(validate_owner_references(&mut reader));
    errs.extend(validate_managed_fields(&mut reader));

    let mut all = reader.errors;
    all.extend(errs);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_map_keys() {
        assert!(is_config_map_key("unattend.xml").is_empty());
        assert!(is_config_map_key("KEY_NAME-1").is_empty());
        assert_eq!(
            is_config_map_key("a b"),
            ["a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"]
        );
        assert_eq!(is_config_map_key(".."), ["must not be '..'"]);
        assert_eq!(is_config_map_key("..x"), ["must not start with '..'"]);
        assert_eq!(
            is_config_map_key(&"k".repeat(254)),
            ["must be no more than 253 characters"]
        );
    }
    use serde_json::json;

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::message).collect()
    }

    #[test]
    fn subdomain_messages() {
        assert!(is_dns1123_subdomain("vm-1.example").is_empty());
        assert!(is_dns1123_subdomain("a").is_empty());
        assert_eq!(is_dns1123_subdomain("Bad_Name"), vec![SUBDOMAIN_MSG]);
        assert_eq!(is_dns1123_subdomain(""), vec![SUBDOMAIN_MSG]);
        assert_eq!(is_dns1123_subdomain("a..b"), vec![SUBDOMAIN_MSG]);
        assert_eq!(is_dns1123_subdomain("-a"), vec![SUBDOMAIN_MSG]);
        assert_eq!(is_dns1123_subdomain("a."), vec![SUBDOMAIN_MSG]);
        assert!(is_dns1123_subdomain(&"a".repeat(253)).is_empty());
        assert_eq!(
            is_dns1123_subdomain(&"a".repeat(254)),
            vec!["must be no more than 253 characters"]
        );
        assert_eq!(is_dns1123_subdomain(&"A".repeat(254)).len(), 2);
    }

    #[test]
    fn label_messages() {
        assert!(is_dns1123_label("default").is_empty());
        assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(
            is_dns1123_label("A"),
            vec!["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]
        );
        assert_eq!(
            is_dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
        assert!(is_dns1123_label(&"a".repeat(63)).is_empty());
    }

    #[test]
    fn qualified_name_messages() {
        assert!(is_qualified_name("kubevirt.io/vm").is_empty());
        assert!(is_qualified_name("A_b.c-D").is_empty());
        assert_eq!(is_qualified_name("a b"), vec![NAME_PART_MSG]);
        assert_eq!(
            is_qualified_name(""),
            vec![
                "name part must be non-empty".to_string(),
                NAME_PART_MSG.to_string()
            ]
        );
        assert_eq!(
            is_qualified_name("/a"),
            vec!["prefix part must be non-empty"],
        );
        assert_eq!(
            is_qualified_name("Foo/a"),
            vec![format!("prefix part {SUBDOMAIN_MSG}")]
        );
        assert_eq!(
            is_qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters"]
        );
        assert_eq!(
            is_qualified_name("a/b/c"),
            vec!["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
        );
    }

    #[test]
    fn label_value_messages() {
        assert!(is_valid_label_value("").is_empty());
        assert!(is_valid_label_value("My_value.1").is_empty());
        assert_eq!(is_valid_label_value("x y"), vec![LABEL_VALUE_MSG]);
        assert_eq!(is_valid_label_value("-a"), vec![LABEL_VALUE_MSG]);
        assert_eq!(
            is_valid_label_value(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
    }

    #[test]
    fn go_quote_matches_strconv() {
        assert_eq!(go_quote("abc"), "\"abc\"");
        assert_eq!(go_quote("a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(
            go_quote("\u{7}\u{8}\u{c}\n\r\t\u{b}"),
            "\"\\a\\b\\f\\n\\r\\t\\v\""
        );
        assert_eq!(go_quote("\0\u{1b}\u{7f}"), "\"\\x00\\x1b\\x7f\"");
        assert_eq!(go_quote("日本語☺"), "\"日本語☺\"");
        assert_eq!(go_quote("\u{200b}\u{feff}"), "\"\\u200b\\ufeff\"");
        assert_eq!(go_quote("\u{10ffff}"), "\"\\U0010ffff\"");
        assert_eq!(go_string_slice(&[]), "[]string(nil)");
        assert_eq!(
            go_string_slice(&["a".into(), "b".into()]),
            "[]string{\"a\", \"b\"}"
        );
    }

    #[test]
    fn name_required_and_invalid() {
        let (errs, warnings) =
            validate_object_meta(&json!({"namespace": "default"}), true, NameRule::Subdomain);
        assert_eq!(
            messages(&errs),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        assert!(warnings.is_empty());
        let (errs, _) = validate_object_meta(
            &json!({"name": "Bad_Name", "namespace": "default"}),
            true,
            NameRule::Subdomain,
        );
        assert_eq!(
            messages(&errs),
            vec![format!(
                "metadata.name: Invalid value: \"Bad_Name\": {SUBDOMAIN_MSG}"
            )]
        );
        let (errs, _) = validate_object_meta(&Value::Null, false, NameRule::Subdomain);
        assert_eq!(errs.len(), 1);
    }

    #[test]
    fn generate_name_allows_trailing_dash() {
        let meta = json!({"generateName": "vm-", "name": "vm-x7k2p", "namespace": "ns"});
        assert!(validate_object_meta(&meta, true, NameRule::Subdomain)
            .0
            .is_empty());
        let meta = json!({"generateName": "VM-", "name": "vm-x7k2p", "namespace": "ns"});
        assert_eq!(
            messages(&validate_object_meta(&meta, true, NameRule::Subdomain).0),
            vec![format!(
                "metadata.generateName: Invalid value: \"VM-\": {SUBDOMAIN_MSG}"
            )]
        );
        // Upstream masking replaces the last two characters with "a": "x.-" passes.
        assert!(NameRule::Subdomain.check("x.-", true).is_empty());
        assert!(NameRule::Subdomain.check("-", true).len() == 1);
        assert!(NameRule::Label.check("ab-", true).is_empty());
        // Non-ASCII before the dash must neither panic nor pass.
        assert_eq!(NameRule::Subdomain.check("é-", true).len(), 1);
    }

    #[test]
    fn namespace_rules() {
        let (errs, _) = validate_object_meta(&json!({"name": "a"}), true, NameRule::Subdomain);
        assert_eq!(messages(&errs), vec!["metadata.namespace: Required value"]);
        let (errs, _) = validate_object_meta(
            &json!({"name": "a", "namespace": "a.b"}),
            true,
            NameRule::Subdomain,
        );
        assert_eq!(
            messages(&errs),
            vec!["metadata.namespace: Invalid value: \"a.b\": must not contain dots"]
        );
        let (errs, _) = validate_object_meta(
            &json!({"name": "a", "namespace": "x"}),
            false,
            NameRule::Subdomain,
        );
        assert_eq!(
            messages(&errs),
            vec!["metadata.namespace: Forbidden: not allowed on this type"]
        );
        let (errs, _) = validate_object_meta(
            &json!({"name": "a", "generation": -1}),
            false,
            NameRule::Label,
        );
        assert_eq!(
            messages(&errs),
            vec!["metadata.generation: Invalid value: -1: must be greater than or equal to 0"]
        );
    }

    #[test]
    fn labels_and_annotations() {
        let meta = json!({"name": "a", "labels": {"ok": "x y", "bad key": "v"}});
        let (errs, _) = validate_object_meta(&meta, false, NameRule::Subdomain);
        assert_eq!(
            messages(&errs),
            vec![
                format!("metadata.labels: Invalid value: \"bad key\": {NAME_PART_MSG}"),
                format!("metadata.labels: Invalid value: \"x y\": {LABEL_VALUE_MSG}"),
            ]
        );
        let meta = json!({"name": "a", "annotations": {"Kubevirt.IO/Upper": "fine", "a b": "v"}});
        let (errs, _) = validate_object_meta(&meta, false, NameRule::Subdomain);
        assert_eq!(
            messages(&errs),
            vec![format!(
                "metadata.annotations: Invalid value: \"a b\": {NAME_PART_MSG}"
            )]
        );
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let meta = json!({"name": "a", "annotations": {"k": big}});
        let (errs, _) = validate_object_meta(&meta, false, NameRule::Subdomain);
        assert_eq!(
            messages(&errs),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
        let exact = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT - 1);
        assert!(validate_object_meta(
            &json!({"name": "a", "annotations": {"k": exact}}),
            false,
            NameRule::Subdomain
        )
        .0
        .is_empty());
    }

    #[test]
    fn type_errors_do_not_panic() {
        let meta = json!({
            "name": 5, "labels": {"a": 1}, "annotations": [], "finalizers": "x",
            "ownerReferences": [3], "generation": "1", "managedFields": {}
        });
        let (errs, _) = validate_object_meta(&meta, false, NameRule::Subdomain);
        let msgs = messages(&errs);
        assert!(msgs.contains(
            &"metadata.name: Invalid value: \"integer\": metadata.name in body must be of type string: \"integer\""
                .to_string()
        ));
        assert!(msgs.contains(&"metadata.labels.a: Invalid value: \"integer\": metadata.labels.a in body must be of type string: \"integer\"".to_string()));
        assert!(msgs.contains(&"metadata.annotations: Invalid value: \"array\": metadata.annotations in body must be of type object: \"array\"".to_string()));
        assert!(msgs.contains(&"metadata.finalizers: Invalid value: \"string\": metadata.finalizers in body must be of type array: \"string\"".to_string()));
        assert!(msgs.contains(&"metadata.ownerReferences[0]: Invalid value: \"integer\": metadata.ownerReferences[0] in body must be of type object: \"integer\"".to_string()));
        assert!(msgs.contains(&"metadata.generation: Invalid value: \"string\": metadata.generation in body must be of type integer: \"string\"".to_string()));
        assert!(msgs.contains(
            &"metadata.name: Required value: name or generateName is required".to_string()
        ));
        let (errs, _) = validate_object_meta(&json!("x"), false, NameRule::Subdomain);
        assert_eq!(
            errs[0].message(),
            "metadata: Invalid value: \"string\": metadata in body must be of type object: \"string\""
        );
        assert!(!validate_object_meta_update(&json!([]), &json!(7)).is_empty());
    }

    #[test]
    fn finalizers() {
        let meta = json!({"name": "a", "finalizers": ["orphan", "foregroundDeletion", "bad name"]});
        let (errs, warnings) = validate_object_meta(&meta, false, NameRule::Subdomain);
        assert_eq!(
            messages(&errs),
            vec![
                format!("metadata.finalizers: Invalid value: \"bad name\": {NAME_PART_MSG}"),
                "metadata.finalizers: Invalid value: []string{\"orphan\", \"foregroundDeletion\", \"bad name\"}: finalizer orphan and foregroundDeletion cannot be both set".to_string(),
            ]
        );
        assert_eq!(
            warnings,
            vec![
                format!("metadata.finalizers: \"bad name\": {NAME_PART_MSG}"),
                "metadata.finalizers: \"bad name\": prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers".to_string(),
            ]
        );
        let meta = json!({"name": "a", "finalizers": ["kubevirt.io/virtualMachineControllerFinalize", "kubernetes", "foregroundDeleteVirtualMachine", "a.b"]});
        let (errs, warnings) = validate_object_meta(&meta, false, NameRule::Subdomain);
        assert!(errs.is_empty());
        assert_eq!(
            warnings,
            vec![
                "metadata.finalizers: \"a.b\": prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers",
                "metadata.finalizers: \"foregroundDeleteVirtualMachine\": prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers",
            ]
        );
        let old = json!({"finalizers": ["a.b"]});
        assert_eq!(
            finalizer_warnings(&json!({"finalizers": ["a.b", "x"]}), Some(&old)).len(),
            1
        );
    }

    #[test]
    fn owner_references() {
        let meta = json!({"name": "a", "ownerReferences": [
            {"apiVersion": "", "kind": "", "name": "", "uid": ""},
        ]});
        let (errs, _) = validate_object_meta(&meta, false, NameRule::Subdomain);
        assert_eq!(
            messages(&errs),
            vec![
                "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty",
                "metadata.ownerReferences.kind: Invalid value: \"\": kind must not be empty",
                "metadata.ownerReferences.name: Invalid value: \"\": name must not be empty",
                "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty",
            ]
        );
        let meta = json!({"name": "a", "ownerReferences": [
            {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "vm1", "uid": "u1", "controller": true},
            {"apiVersion": "a/b/c", "kind": "VirtualMachine", "name": "vm2", "uid": "u2", "controller": true},
        ]});
        let (errs, _) = validate_object_meta(&meta, false, NameRule::Subdomain);
        let msgs = messages(&errs);
        assert_eq!(
            msgs[0],
            "metadata.ownerReferences.apiVersion: Invalid value: \"a/b/c\": version must not be empty"
        );
        assert!(msgs[1].ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for VirtualMachine/vm1 and VirtualMachine/vm2"
        ));
        let meta = json!({"name": "a", "ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "u"}]});
        let (errs, _) = validate_object_meta(&meta, false, NameRule::Subdomain);
        assert!(errs[0]
            .message()
            .ends_with("/v1, Kind=Event is disallowed from being an owner"));
    }

    #[test]
    fn managed_fields() {
        let meta = json!({"name": "a", "managedFields": [
            {"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1"},
            {"manager": "m\u{200b}", "operation": "Patch", "fieldsType": "X", "subresource": "s".repeat(257)},
        ]});
        let (errs, _) = validate_object_meta(&meta, false, NameRule::Subdomain);
        let msgs = messages(&errs);
        assert_eq!(msgs.len(), 4);
        assert_eq!(
            msgs[0],
            "metadata.managedFields[1].operation: Invalid value: \"Patch\": must be `Apply` or `Update`"
        );
        assert_eq!(
            msgs[1],
            "metadata.managedFields[1].fieldsType: Invalid value: \"X\": must be `FieldsV1`"
        );
        assert_eq!(errs[2].field, "metadata.managedFields[1].manager");
        assert_eq!(errs[2].detail, "invalid character U+200B (at position 1)");
        assert_eq!(
            msgs[3],
            "metadata.managedFields[1].subresource: Too long: may not be more than 256 bytes"
        );
    }

    #[test]
    fn update_immutable_fields() {
        let old = json!({"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "5", "generation": 3,
            "creationTimestamp": "2025-01-01T00:00:00Z"});
        let same = json!({"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "5", "generation": 3,
            "creationTimestamp": "2025-01-01T01:00:00+01:00"});
        assert!(validate_object_meta_update(&same, &old).is_empty());
        let new = json!({"name": "b", "namespace": "ns2", "uid": "u2", "resourceVersion": "", "generation": 2,
            "creationTimestamp": "2025-01-02T00:00:00Z", "deletionTimestamp": "2025-01-03T00:00:00Z",
            "deletionGracePeriodSeconds": 0});
        assert_eq!(
            messages(&validate_object_meta_update(&new, &old)),
            vec![
                "metadata.generation: Invalid value: 2: must not be decremented",
                "metadata.name: Invalid value: \"b\": field is immutable",
                "metadata.namespace: Invalid value: \"ns2\": field is immutable",
                "metadata.uid: Invalid value: \"u2\": field is immutable",
                "metadata.creationTimestamp: Invalid value: 2025-01-02 00:00:00 +0000 UTC: field is immutable",
                "metadata.deletionTimestamp: Invalid value: 2025-01-03 00:00:00 +0000 UTC: field is immutable",
                "metadata.deletionGracePeriodSeconds: Invalid value: 0: field is immutable",
            ]
        );
        let cleared = json!({"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "5", "generation": 3});
        assert_eq!(
            messages(&validate_object_meta_update(&cleared, &old)),
            vec!["metadata.creationTimestamp: Invalid value: 0001-01-01 00:00:00 +0000 UTC: field is immutable"]
        );
    }

    #[test]
    fn update_no_new_finalizers_while_deleting() {
        let old = json!({"name": "a", "resourceVersion": "1", "deletionTimestamp": "2025-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 0, "finalizers": ["a.io/x"]});
        let new = json!({"name": "a", "resourceVersion": "1", "deletionTimestamp": "2025-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 0, "finalizers": ["c.io/z", "a.io/x", "b.io/y"]});
        assert_eq!(
            messages(&validate_object_meta_update(&new, &old)),
            vec!["metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"b.io/y\", \"c.io/z\"}"]
        );
        let removed = json!({"name": "a", "resourceVersion": "1", "deletionTimestamp": "2025-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 0});
        assert!(validate_object_meta_update(&removed, &old).is_empty());
    }

    #[test]
    fn go_time_rendering() {
        let t = parse_go_rfc3339("2025-01-01T00:00:00.500Z");
        assert_eq!(go_time_string(t), "2025-01-01 00:00:00.5 +0000 UTC");
        assert!(parse_go_rfc3339("2025-01-01t00:00:00Z").is_none());
        assert!(parse_go_rfc3339("2025-01-01T00:00:00z").is_none());
        assert!(parse_go_rfc3339("").is_none());
        assert!(parse_go_rfc3339("é").is_none());
    }
}
