//! Create: system fields, defaulting, validation, managedFields, generated names.

use apimachinery::status::Status;
use serde_json::{json, Value};
use store::StoreError;

use super::{store_failure, Outcome, Registration, Registry, WriteOptions};
use crate::object::{self, meta_mut};
use crate::stored;

impl Registry {
    /// POST: create an object in `namespace`.
    pub async fn create(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        obj: Value,
        options: &WriteOptions,
    ) -> Result<Outcome<Value>, Status> {
        self.create_with(reg, namespace, obj, options, true).await
    }

    /// Create; `record_managed_fields` is false when the caller (server-side apply)
    /// has already set `managedFields` for this write.
    pub async fn create_with(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        mut obj: Value,
        options: &WriteOptions,
        record_managed_fields: bool,
    ) -> Result<Outcome<Value>, Status> {
        Self::check_identity(reg, &mut obj, namespace)?;
        let mut warnings = Self::prune(reg, &mut obj, options.field_validation, false)?;
        reg.hooks.decode(&mut obj)?;
        let generate_name = object::meta_str(&obj, "generateName")
            .unwrap_or("")
            .to_string();
        let requested_name = object::name(&obj).to_string();
        self.require_namespace(reg, namespace, &requested_name)
            .await?;

        // System fields are the server's to set.
        {
            let meta = meta_mut(&mut obj);
            for field in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
            ] {
                meta.remove(field);
            }
            meta.insert("generation".into(), json!(1));
            meta.insert(
                "uid".into(),
                Value::String(uuid::Uuid::new_v4().to_string()),
            );
            meta.insert(
                "creationTimestamp".into(),
                Value::String(kubevirt_api::meta::now()),
            );
        }
        if reg.info.status_subresource && !reg.hooks.keeps_status_on_create(options.privileged) {
            if let Some(root) = obj.as_object_mut() {
                root.remove("status");
            }
        }
        reg.hooks.default_on_create(&mut obj);
        let (_allocation, stored) = self.allocation(reg).await?;
        reg.hooks.allocate(None, &mut obj, &stored)?;
        let generated = requested_name.is_empty() && !generate_name.is_empty();
        if generated {
            meta_mut(&mut obj).insert(
                "name".into(),
                Value::String(apimachinery::names::generate_name(&generate_name)),
            );
        }
        warnings.extend(Self::validate(reg, &obj, None, options.privileged, false)?);
        self.admit_reading(reg, namespace, &obj).await?;
        if let Some(guard) = &options.guard {
            (guard.0)(&obj, None)?;
        }
        if record_managed_fields {
            apimachinery::ssa::record_update(
                None,
                &mut obj,
                &options.field_manager,
                None,
                &reg.info.api_version(),
                &kubevirt_api::meta::now(),
                &reg.schema,
            );
        }
        reg.hooks.controller_fields_on_create(&mut obj);
        if options.dry_run {
            // Dry-run storage still refuses a name that is taken.
            let key = Self::key(reg.info, namespace, object::name(&obj));
            if self.store.get(&key).await.map_err(store_failure)?.is_some() {
                return Err(Status::already_exists(
                    &reg.info.group_resource(),
                    object::name(&obj),
                ));
            }
            return Ok(Outcome {
                value: obj,
                warnings,
                created: true,
                stored: None,
            });
        }
        // A generated name may collide; upstream retries a few times with fresh names.
        let attempts = if generated { 8 } else { 1 };
        for attempt in 0..attempts {
            if attempt > 0 {
                meta_mut(&mut obj).insert(
                    "name".into(),
                    Value::String(apimachinery::names::generate_name(&generate_name)),
                );
            }
            let name = object::name(&obj).to_string();
            let key = Self::key(reg.info, namespace, &name);
            let value = stored::encode(&obj)?;
            let created = match reg.hooks.ttl() {
                Some(ttl) => self.store.create_expiring(&key, value, ttl).await,
                None => self.store.create(&key, value).await,
            };
            match created {
                Ok(kv) => {
                    meta_mut(&mut obj).insert(
                        "resourceVersion".into(),
                        Value::String(kv.mod_revision.to_string()),
                    );
                    return Ok(Outcome {
                        value: obj,
                        warnings,
                        created: true,
                        stored: Some(kv),
                    });
                }
                Err(StoreError::AlreadyExists) if attempt + 1 < attempts => continue,
                Err(StoreError::AlreadyExists) => {
                    let existing = self.store.get(&key).await.map_err(store_failure)?;
                    let deleting = existing
                        .as_ref()
                        .and_then(|kv| stored::decode(kv).ok())
                        .is_some_and(|o| object::is_deleting(&o));
                    let mut status = Status::already_exists(&reg.info.group_resource(), &name);
                    if generated {
                        status.message.push_str(
                            ", the server was not able to generate a unique name for the object",
                        );
                        if let Some(d) = status.details.as_mut() {
                            d.retry_after_seconds = Some(1);
                        }
                    } else if deleting {
                        status.message = format!("object is being deleted: {}", status.message);
                    }
                    return Err(status);
                }
                Err(e) => return Err(store_failure(e)),
            }
        }
        Err(Status::internal("name generation exhausted"))
    }
}
