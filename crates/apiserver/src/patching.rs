//! PATCH in its three accepted forms for custom resources: JSON merge patch, JSON patch
//! and server-side apply. Strategic merge patch is refused with 415, as kube-apiserver
//! does for custom resources.

use apimachinery::status::Status;
use serde_json::Value;

use crate::object;
use crate::registry::{Change, Outcome, Registration, Registry, WriteOptions};
use crate::request::Query;

pub const PATCH_TYPES: [&str; 3] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

/// Keeps a resourceVersion only when the patch itself set one, so that a patch without
/// one is retried on concurrent writes while one with a stale one fails with 409.
fn keep_requested_version(old: &Value, mut new: Value) -> Value {
    if object::meta_str(&new, "resourceVersion") == object::meta_str(old, "resourceVersion") {
        object::meta_mut(&mut new).remove("resourceVersion");
    }
    new
}

/// `checkName`: a patch may not move the object to another name or namespace.
fn check_name(new: &Value, name: &str, namespace: Option<&str>) -> Result<(), Status> {
    let got = object::name(new);
    if got != name {
        return Err(Status::bad_request(format!(
            "the name of the object ({got}) does not match the name on the URL ({name})"
        )));
    }
    let got_namespace = object::namespace(new);
    if let Some(namespace) = namespace {
        if !got_namespace.is_empty() && got_namespace != namespace {
            return Err(Status::bad_request(format!(
                "the namespace of the object ({got_namespace}) does not match the namespace on the request ({namespace})"
            )));
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub async fn patch(
    registry: &Registry,
    reg: &Registration,
    namespace: Option<&str>,
    name: &str,
    subresource: Option<&str>,
    content_type: &str,
    body: &[u8],
    query: &Query,
    options: &WriteOptions,
) -> Result<Outcome<Value>, Status> {
    let is_apply = content_type == "application/apply-patch+yaml";
    if query.force.is_some() && !is_apply {
        return Err(invalid_patch_options(
            "force",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    match content_type {
        "application/merge-patch+json" => {
            registry
                .update_with(reg, namespace, name, subresource, options, |old| {
                    let new = apimachinery::patch::merge_patch(old, body).map_err(|e| *e.0)?;
                    check_name(&new, name, namespace)?;
                    Ok(Change::replace(keep_requested_version(old, new)))
                })
                .await
        }
        "application/json-patch+json" => {
            registry
                .update_with(reg, namespace, name, subresource, options, |old| {
                    let new = apimachinery::patch::json_patch(old, body).map_err(|e| *e.0)?;
                    check_name(&new, name, namespace)?;
                    Ok(Change::replace(keep_requested_version(old, new)))
                })
                .await
        }
        "application/apply-patch+yaml" => {
            apply(
                registry,
                reg,
                namespace,
                name,
                subresource,
                body,
                query,
                options,
            )
            .await
        }
        "application/strategic-merge-patch+json" if reg.serving.strategic_merge_patch => {
            registry
                .update_with(reg, namespace, name, subresource, options, |old| {
                    let new =
                        apimachinery::patch::strategic_merge_patch(old, body).map_err(|e| *e.0)?;
                    check_name(&new, name, namespace)?;
                    Ok(Change::replace(keep_requested_version(old, new)))
                })
                .await
        }
        _ if reg.serving.strategic_merge_patch => Err(Status::unsupported_media_type(&[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ])),
        _ => Err(Status::unsupported_media_type(&PATCH_TYPES)),
    }
}

fn invalid_patch_options(field: &str, detail: &str) -> Status {
    let mut status = Status::failure(
        422,
        "Invalid",
        format!("PatchOptions.meta.k8s.io \"\" is invalid: {field}: {detail}"),
    );
    status.details = Some(Box::new(apimachinery::status::StatusDetails {
        group: "meta.k8s.io".into(),
        kind: "PatchOptions".into(),
        causes: vec![apimachinery::status::StatusCause {
            reason: "FieldValueRequired".into(),
            message: detail.to_string(),
            field: field.into(),
        }],
        ..Default::default()
    }));
    status
}

#[allow(clippy::too_many_arguments)]
async fn apply(
    registry: &Registry,
    reg: &Registration,
    namespace: Option<&str>,
    name: &str,
    subresource: Option<&str>,
    body: &[u8],
    query: &Query,
    options: &WriteOptions,
) -> Result<Outcome<Value>, Status> {
    let Some(manager) = query.field_manager.clone().filter(|m| !m.is_empty()) else {
        return Err(invalid_patch_options(
            "fieldManager",
            "Required value: is required for apply patch",
        ));
    };
    let text = std::str::from_utf8(body)
        .map_err(|e| Status::bad_request(format!("error decoding YAML: {e}")))?;
    let applied = match serde_json::from_str::<Value>(text) {
        Ok(v) => v,
        Err(_) => apimachinery::yaml::from_str(text)
            .map_err(|e| Status::bad_request(format!("error decoding YAML: {e}")))?,
    };
    if !applied.is_object() {
        return Err(Status::bad_request(
            "error decoding YAML: the applied configuration is not an object",
        ));
    }
    if object::name(&applied) != name {
        return Err(Status::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            object::name(&applied)
        )));
    }
    let force = query.force.unwrap_or(false);
    let schema = &reg.schema;
    let now = kubevirt_api::meta::now();
    let options = WriteOptions {
        field_manager: manager.clone(),
        ..options.clone()
    };
    match registry.get(reg, namespace, name).await {
        Err(status) if status.code == 404 && subresource.is_none() => {
            // Apply creates what does not exist yet.
            let created = apimachinery::ssa::apply(None, &applied, &manager, force, schema, &now)
                .map_err(|e| e.to_status())?;
            // The apply already recorded this manager's Apply entry.
            let mut outcome = registry
                .create_with(reg, namespace, created, &options, false)
                .await?;
            outcome.created = true;
            Ok(outcome)
        }
        Err(status) => Err(status),
        Ok(_) => {
            registry
                .update_with(reg, namespace, name, subresource, &options, |old| {
                    let new = apimachinery::ssa::apply(
                        Some(old),
                        &applied,
                        &manager,
                        force,
                        schema,
                        &now,
                    )
                    .map_err(|e| e.to_status())?;
                    Ok(Change {
                        object: keep_requested_version(old, new),
                        warnings: Vec::new(),
                        managed_fields_done: Some(()),
                    })
                })
                .await
        }
    }
}
