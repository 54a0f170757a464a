//! Writes: create, update (PUT), patch, delete and deletecollection, with the options
//! each one takes from the query and body.

use apimachinery::status::Status;
use axum::response::Response;
use http::{header, HeaderMap, StatusCode};
use serde_json::{json, Value};

use super::read::list_request;
use super::resource::ResourceRequest;
use super::response::{object_response, outcome_response};
use super::ApiServer;
use crate::negotiate;
use crate::registry::{Change, DeleteOptions, DeleteResult, FieldValidation, Propagation};
use crate::request::Query;
use crate::stored;

impl ApiServer {
    pub(super) async fn create(&self, req: &ResourceRequest<'_>) -> Result<Response, Status> {
        let (reg, info, namespace, body) = (&req.reg, req.reg.info, req.namespace(), req.body);
        let (kind, version, content_type) = (info.kind, info.version, &req.content_type);
        let format = req.negotiate(false)?;
        let mut obj = negotiate::decode_body(content_type, body, kind, version)?;
        if crate::certificates::is_csr(info) {
            crate::certificates::set_requester(&mut obj, req.user);
        }
        let outcome = self
            .registry
            .create(reg, namespace, obj, &req.write_options()?)
            .await?;
        Ok(outcome_response(outcome, format))
    }

    pub(super) async fn update(
        &self,
        req: &ResourceRequest<'_>,
        name: &str,
    ) -> Result<Response, Status> {
        let (reg, info, namespace, body) = (&req.reg, req.reg.info, req.namespace(), req.body);
        let (kind, version, content_type) = (info.kind, info.version, &req.content_type);
        let subresource = req.path.subresource.as_deref();
        let format = req.negotiate(false)?;
        let obj = negotiate::decode_body(content_type, body, kind, version)?;
        // The handler checks the namespace, then the name, before storage is asked.
        let body_namespace = crate::object::namespace(&obj);
        if info.namespaced && !body_namespace.is_empty() && Some(body_namespace) != namespace {
            return Err(Status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if crate::object::name(&obj) != name {
            return Err(Status::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                crate::object::name(&obj)
            )));
        }
        let options = req.write_options()?;
        // A PUT body is decoded like a POST body: unknown fields under Strict are a
        // decoding error (400), not the 422 of a patch.
        if options.field_validation == FieldValidation::Strict && subresource.is_none() {
            let unknown = reg.schema.prune(&mut obj.clone());
            if !unknown.is_empty() {
                let texts: Vec<String> = unknown
                    .iter()
                    .map(|p| format!("unknown field {p:?}"))
                    .collect();
                return Err(Status::bad_request(format!(
                    "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
                    texts.join(", ")
                )));
            }
        }
        let outcome = self
            .registry
            .update_with(reg, namespace, name, subresource, &options, |old| {
                // A uid in the body is a storage precondition (checked first).
                let body_uid = crate::object::uid(&obj);
                if !body_uid.is_empty() && body_uid != crate::object::uid(old) {
                    return Err(Status::conflict(
                        &info.group_resource(),
                        name,
                        &format!(
                            "StorageError: invalid object, Code: 4, Key: {}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {body_uid}, UID in object meta: {}",
                            crate::registry::Registry::key(info, namespace, name),
                            crate::object::uid(old)
                        ),
                    ));
                }
                // Checked once the object is known to exist (a missing one is 404),
                // with upstream's resource-as-kind and Go's `%#v` of 0.
                if !reg.hooks.allows_unconditional_update()
                    && crate::object::meta_str(&obj, "resourceVersion").is_none_or(str::is_empty)
                {
                    let err = apimachinery::field::FieldError::webhook(
                        apimachinery::field::ErrorType::Invalid,
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    );
                    let kind = apimachinery::status::GroupKind::new(info.group, info.plural);
                    let mut status = Status::invalid(&kind, name, &[err]);
                    status.message = format!(
                        "{} {name:?} is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                        kind.qualified()
                    );
                    return Err(status);
                }
                Ok(Change::replace(obj.clone()))
            })
            .await?;
        Ok(outcome_response(outcome, format))
    }

    pub(super) async fn patch(
        &self,
        req: &ResourceRequest<'_>,
        name: &str,
    ) -> Result<Response, Status> {
        let (reg, namespace, body, query) = (&req.reg, req.namespace(), req.body, req.query);
        let (content_type, subresource) = (&req.content_type, req.path.subresource.as_deref());
        let format = req.negotiate(false)?;
        crate::patching::patch(
            &self.registry,
            reg,
            namespace,
            name,
            subresource,
            content_type,
            body,
            query,
            &req.write_options()?,
        )
        .await
        .map(|outcome| outcome_response(outcome, format))
    }

    pub(super) async fn delete(
        &self,
        req: &ResourceRequest<'_>,
        name: &str,
    ) -> Result<Response, Status> {
        let (reg, info, namespace) = (&req.reg, req.reg.info, req.namespace());
        let (query, body) = (req.query, req.body);
        let format = req.negotiate(false)?;
        let options = delete_options(query, body)?;
        let outcome = self.registry.delete(reg, namespace, name, &options).await?;
        Ok(match outcome.value {
            DeleteResult::Deleted(obj) => {
                let status =
                    Status::success_deleted(&info.group_resource(), name, crate::object::uid(&obj));
                object_response(StatusCode::OK, &status.to_json(), format)
            }
            DeleteResult::Pending(obj) => object_response(StatusCode::OK, &obj, format),
        })
    }

    pub(super) async fn delete_collection(
        &self,
        req: &ResourceRequest<'_>,
    ) -> Result<Response, Status> {
        let (reg, info, namespace) = (&req.reg, req.reg.info, req.namespace());
        let (query, body) = (req.query, req.body);
        let format = req.negotiate(false)?;
        let options = delete_options(query, body)?;
        let list_request = list_request(reg, namespace, query)?;
        let listed = self.registry.list(reg, &list_request).await?;
        let mut deleted = Vec::new();
        for kv in &listed.items {
            let obj = stored::decode(kv)?;
            let ns = crate::object::namespace(&obj).to_string();
            let ns = (!ns.is_empty()).then_some(ns);
            match self
                .registry
                .delete(reg, ns.as_deref(), crate::object::name(&obj), &options)
                .await
            {
                Ok(outcome) => deleted.push(match outcome.value {
                    DeleteResult::Deleted(o) | DeleteResult::Pending(o) => o,
                }),
                Err(status) if status.code == 404 => {}
                Err(status) => return Err(status),
            }
        }
        let list = json!({"apiVersion": info.api_version(), "kind": info.list_kind,
            "metadata": {"resourceVersion": self.registry.store.current_revision().to_string()}, "items": deleted});
        Ok(object_response(StatusCode::OK, &list, format))
    }
}

/// The manager a write is recorded under: `fieldManager`, else the client's name.
pub(super) fn field_manager(query: &Query, headers: &HeaderMap) -> Result<String, Status> {
    if let Some(manager) = &query.field_manager {
        if manager.len() > 128 || manager.chars().any(|c| c.is_control()) {
            return Err(Status::bad_request(
                "fieldManager: Invalid value: must be at most 128 printable characters",
            ));
        }
        return Ok(manager.clone());
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    Ok(agent
        .split('/')
        .next()
        .unwrap_or(agent)
        .chars()
        .take(128)
        .collect())
}

pub(super) fn field_validation(query: &Query) -> Result<FieldValidation, Status> {
    match query.field_validation.as_deref() {
        None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
        Some("Strict") => Ok(FieldValidation::Strict),
        Some("Ignore") => Ok(FieldValidation::Ignore),
        Some(other) => Err(Status::bad_request(format!(
            "fieldValidation parameter unsupported: {other}. Expected one of \"Ignore\", \"Warn\" or \"Strict\""
        ))),
    }
}

pub(super) fn delete_options(query: &Query, body: &[u8]) -> Result<DeleteOptions, Status> {
    let mut options = DeleteOptions {
        dry_run: query.dry_run,
        ..Default::default()
    };
    let mut policy = query.propagation_policy.clone();
    if !body.is_empty() {
        let parsed: Value = serde_json::from_slice(body)
            .map_err(|e| Status::bad_request(format!("DeleteOptions cannot be decoded: {e}")))?;
        if let Some(p) = parsed.get("propagationPolicy").and_then(Value::as_str) {
            policy = Some(p.to_string());
        }
        if parsed.get("orphanDependents").and_then(Value::as_bool) == Some(true) && policy.is_none()
        {
            policy = Some("Orphan".into());
        }
        if let Some(pre) = parsed.get("preconditions") {
            options.precondition_uid = pre.get("uid").and_then(Value::as_str).map(str::to_string);
            options.precondition_resource_version = pre
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        if let Some(dry) = parsed.get("dryRun").and_then(Value::as_array) {
            let values: Vec<String> = dry
                .iter()
                .map(|d| d.as_str().unwrap_or_default().to_string())
                .collect();
            let errors = crate::options::dry_run_errors(&values);
            if !errors.is_empty() {
                return Err(crate::options::invalid("DeleteOptions", &errors));
            }
            options.dry_run |= !values.is_empty();
        }
    }
    let errors = crate::options::delete_errors(&[], policy.as_deref());
    if !errors.is_empty() {
        return Err(crate::options::invalid("DeleteOptions", &errors));
    }
    options.propagation = match policy.as_deref() {
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        _ => Propagation::Background,
    };
    Ok(options)
}
