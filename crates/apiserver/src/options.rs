//! Validation of the options a request carries in its query string (`CreateOptions`,
//! `UpdateOptions`, `PatchOptions`, `DeleteOptions`, `ListOptions`), answered as
//! kube-apiserver does: 422 Invalid for `<Kind>.meta.k8s.io ""` with one cause per problem
//! (`k8s.io/apimachinery/pkg/apis/meta/v1/validation`, `.../internalversion/validation`).

use crate::request::{Query, Verb};
use apimachinery::field::{ErrorType, FieldError};
use apimachinery::status::{GroupKind, Status};

const FIELD_MANAGER_MAX: usize = 128;

/// `NewInvalid(meta.k8s.io <kind>, "", errs)`.
pub fn invalid(kind: &str, errors: &[FieldError]) -> Status {
    Status::invalid(&GroupKind::new("meta.k8s.io", kind), "", errors)
}

/// An Unsupported value error whose value Go prints with `%#v` (not as a quoted string).
fn not_supported_raw(field: &str, printed: String, supported: &[&str]) -> FieldError {
    let list = supported
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    FieldError {
        kind: ErrorType::NotSupported,
        field: field.to_string(),
        value: None,
        detail: format!("{printed}: supported values: {list}"),
        verbatim: false,
    }
}

/// `ValidateDryRun`: every value must be `All`; the list is printed as `[]string{...}`.
pub fn dry_run_errors(values: &[String]) -> Vec<FieldError> {
    if values.iter().all(|v| v == "All") {
        return Vec::new();
    }
    let printed = values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    vec![not_supported_raw(
        "dryRun",
        format!("[]string{{{printed}}}"),
        &["All"],
    )]
}

fn field_manager_errors(manager: Option<&str>) -> Vec<FieldError> {
    let Some(manager) = manager else {
        return Vec::new();
    };
    let mut errs = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX {
        errs.push(FieldError::too_long(
            "fieldManager",
            format!("may not be more than {FIELD_MANAGER_MAX} bytes"),
        ));
    }
    for (i, c) in manager.chars().enumerate() {
        if c.is_control() {
            errs.push(FieldError::invalid(
                "fieldManager",
                manager,
                format!("invalid character U+{:04X} (at position {i})", c as u32),
            ));
        }
    }
    errs
}

fn field_validation_errors(value: Option<&str>) -> Vec<FieldError> {
    match value {
        None | Some("" | "Ignore" | "Warn" | "Strict") => Vec::new(),
        Some(other) => vec![FieldError::not_supported(
            "fieldValidation",
            other,
            &["", "Ignore", "Strict", "Warn"],
        )],
    }
}

/// `ValidateListOptions` for a list or a watch.
pub fn list_errors(query: &Query) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rv_match = query.resource_version_match.as_deref();
    if query.watch {
        if query.send_initial_events.is_some() && rv_match != Some("NotOlderThan") {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if let Some(m) = rv_match {
            if query.send_initial_events.is_none() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    "resourceVersionMatch",
                    m,
                    &["NotOlderThan"],
                ));
            }
            if query.continue_token.is_some() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        return errs;
    }
    if let Some(m) = rv_match {
        if query.resource_version.is_none() {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if query.continue_token.is_some() {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            errs.push(FieldError::not_supported(
                "resourceVersionMatch",
                m,
                &["Exact", "NotOlderThan", ""],
            ));
        }
        if m == "Exact" && query.resource_version.as_deref() == Some("0") {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if query.send_initial_events.is_some() {
        errs.push(FieldError::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    errs
}

/// `ValidateDeleteOptions`: dry run values and the propagation policy.
pub fn delete_errors(dry_run: &[String], propagation: Option<&str>) -> Vec<FieldError> {
    let mut errs = dry_run_errors(dry_run);
    if let Some(p) = propagation {
        if !matches!(p, "Foreground" | "Background" | "Orphan") {
            errs.push(FieldError::not_supported(
                "propagationPolicy",
                p,
                &["Foreground", "Background", "Orphan", "nil"],
            ));
        }
    }
    errs
}

/// Validates the options of a request before anything else looks at it. `named` tells
/// an object path from a collection; `content_type` picks apply patches.
pub fn validate_request(verb: &Verb, content_type: &str, query: &Query) -> Result<(), Status> {
    let common = |errs: &mut Vec<FieldError>| {
        errs.extend(field_manager_errors(query.field_manager.as_deref()));
        errs.extend(dry_run_errors(&query.dry_run_values));
        errs.extend(field_validation_errors(query.field_validation.as_deref()));
    };
    let (kind, errs) = match verb {
        Verb::List | Verb::Watch => {
            let errs = list_errors(query);
            if errs.is_empty()
                && !query.watch
                && query.continue_token.is_some()
                && query
                    .resource_version
                    .as_deref()
                    .is_some_and(|rv| rv != "0")
            {
                return Err(Status::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            ("ListOptions", errs)
        }
        Verb::Create => {
            let mut errs = Vec::new();
            common(&mut errs);
            ("CreateOptions", errs)
        }
        Verb::Update => {
            let mut errs = Vec::new();
            common(&mut errs);
            ("UpdateOptions", errs)
        }
        Verb::Patch => {
            let mut errs = Vec::new();
            if content_type == "application/apply-patch+yaml" {
                if query.field_manager.as_deref().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        "fieldManager",
                        "is required for apply patch",
                    ));
                }
            } else if query.force.is_some() {
                errs.push(FieldError::forbidden(
                    "force",
                    "may not be specified for non-apply patch",
                ));
            }
            common(&mut errs);
            ("PatchOptions", errs)
        }
        Verb::Delete | Verb::DeleteCollection => (
            "DeleteOptions",
            delete_errors(&query.dry_run_values, query.propagation_policy.as_deref()),
        ),
        _ => return Ok(()),
    };
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(kind, &errs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(raw: &str) -> Query {
        Query::parse(Some(raw)).expect("query")
    }

    #[test]
    fn dry_run_is_printed_as_a_go_slice() {
        let s = validate_request(&Verb::Create, "application/json", &query("dryRun=Maybe"))
            .unwrap_err();
        assert_eq!(
            s.message,
            "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Maybe\"}: supported values: \"All\""
        );
        assert!(validate_request(&Verb::Create, "", &query("dryRun=All")).is_ok());
    }

    #[test]
    fn apply_needs_a_manager_and_force_needs_apply() {
        let s =
            validate_request(&Verb::Patch, "application/apply-patch+yaml", &query("")).unwrap_err();
        assert_eq!(
            s.message,
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
        );
        let s = validate_request(
            &Verb::Patch,
            "application/merge-patch+json",
            &query("force=true"),
        )
        .unwrap_err();
        assert_eq!(s.details.unwrap().causes[0].reason, "FieldValueForbidden");
    }

    #[test]
    fn list_options() {
        let s = validate_request(&Verb::List, "", &query("sendInitialEvents=true")).unwrap_err();
        assert_eq!(
            s.message,
            "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"
        );
        assert!(validate_request(
            &Verb::Watch,
            "",
            &query("watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
        )
        .is_ok());
    }
}
