//! The checks every write passes: the namespace exists and is not terminating, the
//! body's identity matches the request, unknown fields, metadata, schema and admission
//! (with what a create's admission reads).

use apimachinery::status::Status;
use serde_json::{Map, Value};

use super::{store_failure, Admission, FieldValidation, ListRequest, Registration, Registry};
use crate::object::{self, meta_mut};
use crate::stored;

impl Registry {
    /// Whether the namespace exists, and whether it is being deleted.
    pub async fn namespace_state(&self, namespace: &str) -> Result<Option<bool>, Status> {
        let key = format!("{}{namespace}", super::namespaces::PREFIX);
        match self.store.get(&key).await.map_err(store_failure)? {
            None => Ok(None),
            Some(kv) => Ok(Some(stored::is_deleting(&kv)?)),
        }
    }

    pub(super) async fn require_namespace(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), Status> {
        let Some(ns) = namespace.filter(|_| reg.info.namespaced) else {
            return Ok(());
        };
        if self.namespaces.is_active(ns) {
            return Ok(());
        }
        match self.namespace_state(ns).await? {
            None => Err(Status::not_found(
                &apimachinery::status::GroupResource::new("", "namespaces"),
                ns,
            )),
            Some(true) => {
                let mut status = Status::forbidden(
                    &reg.info.group_resource(),
                    name,
                    &format!("unable to create new content in namespace {ns} because it is being terminated"),
                );
                if let Some(details) = status.details.as_mut() {
                    details.causes.push(apimachinery::status::StatusCause {
                        reason: "NamespaceTerminating".into(),
                        message: format!("namespace {ns} is being terminated"),
                        field: "metadata.namespace".into(),
                    });
                }
                Err(status)
            }
            Some(false) => Ok(()),
        }
    }

    /// Checks apiVersion/kind and the namespace of a body against the request.
    pub(super) fn check_identity(
        reg: &Registration,
        obj: &mut Value,
        namespace: Option<&str>,
    ) -> Result<(), Status> {
        let info = reg.info;
        let Some(root) = obj.as_object_mut() else {
            return Err(Status::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: the body is not a JSON object",
                info.kind, info.version, info.kind
            )));
        };
        if reg.serving.default_type_meta {
            for (field, value) in [
                ("kind", info.kind.to_string()),
                ("apiVersion", info.api_version()),
            ] {
                if root
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    root.insert(field.into(), Value::String(value));
                }
            }
        }
        let kind = root.get("kind").and_then(Value::as_str).unwrap_or("");
        let api_version = root.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        if kind.is_empty() {
            return Err(Status::bad_request(format!(
                "Object 'Kind' is missing in '{}'",
                obj_preview(root)
            )));
        }
        if api_version != info.api_version() {
            return Err(Status::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                info.api_version()
            )));
        }
        if kind != info.kind {
            // The custom resource validator's type-meta check.
            let name = root
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let err = apimachinery::field::FieldError::invalid(
                "kind",
                kind,
                format!("must be {}", info.kind),
            );
            return Err(Status::invalid(&info.group_kind(), &name, &[err]));
        }
        let meta = meta_mut(obj);
        if info.namespaced {
            let body_ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
            if let Some(ns) = namespace {
                if !body_ns.is_empty() && body_ns != ns {
                    return Err(Status::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                meta.insert("namespace".into(), Value::String(ns.to_string()));
            }
        } else {
            meta.remove("namespace");
        }
        Ok(())
    }

    /// Drops unknown fields as `fieldValidation` asks, returning warnings.
    pub(super) fn prune(
        reg: &Registration,
        obj: &mut Value,
        validation: FieldValidation,
        is_patch: bool,
    ) -> Result<Vec<String>, Status> {
        let unknown = reg.schema.prune(obj);
        if unknown.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<String> = unknown
            .iter()
            .map(|p| format!("unknown field {p:?}"))
            .collect();
        match validation {
            FieldValidation::Ignore => Ok(Vec::new()),
            FieldValidation::Warn => Ok(texts),
            FieldValidation::Strict if is_patch => {
                let err = apimachinery::field::FieldError::invalid(
                    "patch",
                    Value::String(obj.to_string()),
                    format!("strict decoding error: {}", texts.join(", ")),
                );
                Err(Status::invalid(
                    &apimachinery::status::GroupKind::new("", ""),
                    "",
                    &[err],
                ))
            }
            FieldValidation::Strict => Err(Status::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: strict decoding error: {}",
                reg.info.kind,
                reg.info.version,
                reg.info.kind,
                texts.join(", ")
            ))),
        }
    }

    /// Metadata, schema and admission validation of an object about to be written.
    pub(super) fn validate(
        reg: &Registration,
        obj: &Value,
        old: Option<&Value>,
        privileged: bool,
        status_write: bool,
    ) -> Result<Vec<String>, Status> {
        let info = reg.info;
        let name = object::name(obj).to_string();
        let rule = reg.hooks.name_rule();
        let meta = obj.get("metadata").unwrap_or(&Value::Null);
        let (mut errors, mut warnings) =
            apimachinery::meta_validation::validate_object_meta(meta, info.namespaced, rule);
        if let Some(old) = old {
            let old_meta = old.get("metadata").unwrap_or(&Value::Null);
            errors.extend(apimachinery::meta_validation::validate_object_meta_update(
                meta, old_meta,
            ));
            // Updates warn only about finalizers they add.
            warnings = apimachinery::meta_validation::finalizer_warnings(meta, Some(old_meta));
        }
        errors.extend(match old {
            Some(old) => reg.schema.validate_update(obj, old),
            None => reg.schema.validate(obj),
        });
        if !errors.is_empty() {
            return Err(Status::invalid(&info.group_kind(), &name, &errors));
        }
        let admission = match old {
            None => reg.hooks.validate_create(obj),
            // A /status write keeps the stored spec and metadata, which passed admission when
            // they were written; KubeVirt's spec admitters do not run on status either.
            Some(_) if status_write => Admission::default(),
            Some(old) => reg.hooks.validate_update(old, obj, privileged),
        };
        if !admission.errors.is_empty() {
            let webhook = if old.is_some() {
                reg.hooks.update_webhook()
            } else {
                reg.hooks.webhook()
            };
            return Err(match webhook {
                Some(webhook) => {
                    Status::denied_by_webhook(&info.group_kind(), &name, webhook, &admission.errors)
                }
                None => Status::invalid(&info.group_kind(), &name, &admission.errors),
            });
        }
        warnings.extend(admission.warnings);
        Ok(warnings)
    }

    /// Create admission that reads other objects (see `ResourceHooks::create_reads`).
    pub(super) async fn admit_reading(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        obj: &Value,
    ) -> Result<(), Status> {
        let reads = reg.hooks.create_reads(obj);
        if reads.is_empty() {
            return Ok(());
        }
        let mut results = Vec::with_capacity(reads.len());
        for read in reads {
            let Some(other) = self.find(read.group, read.version, read.plural) else {
                results.push(Vec::new());
                continue;
            };
            let found = match &read.name {
                Some(name) => match self.get(&other, namespace, name).await {
                    Ok(found) => vec![found],
                    Err(status) if status.code == 404 => Vec::new(),
                    Err(status) => return Err(status),
                },
                None => {
                    let request = ListRequest {
                        namespace: namespace.map(str::to_string),
                        ..Default::default()
                    };
                    let items = self.list(&other, &request).await?.items;
                    items.iter().map(stored::decode).collect::<Result<_, _>>()?
                }
            };
            results.push(found);
        }
        reg.hooks.validate_create_reading(obj, &results)
    }
}

fn obj_preview(root: &Map<String, Value>) -> String {
    let text = Value::Object(root.clone()).to_string();
    text.chars().take(200).collect()
}
