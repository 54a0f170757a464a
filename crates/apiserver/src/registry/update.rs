//! Update (PUT, patch, apply and /status writes): a change applied to the stored object
//! and written with compare-and-swap.

use apimachinery::status::Status;
use serde_json::{json, Map, Value};
use store::StoreError;

use super::{store_failure, Outcome, Registration, Registry, WriteOptions};
use crate::object::{self, meta_mut};
use crate::stored;

impl Registry {
    /// Applies a change to the stored object and writes it with compare-and-swap.
    /// `change` gets the current object (with its resourceVersion) and returns the
    /// desired one. When it returns an object carrying a resourceVersion that differs
    /// from the stored one, the write fails with 409; otherwise conflicts with
    /// concurrent writers are retried against the newer object.
    pub async fn update_with<F>(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        options: &WriteOptions,
        change: F,
    ) -> Result<Outcome<Value>, Status>
    where
        F: Fn(&Value) -> Result<Change, Status>,
    {
        let key = Self::key(reg.info, namespace, name);
        // The store's recent copy saves a read (etcd); a stale one fails the write's
        // compare, and what is concluded without writing is checked against a fresh read.
        let mut start = self.store.recent(&key).map(|kv| (kv, false));
        let (_allocation, stored) = match subresource {
            None => self.allocation(reg).await?,
            Some(_) => (None, Vec::new()),
        };
        let request = UpdateRequest {
            reg,
            namespace,
            name,
            subresource,
            options,
            stored: &stored,
        };
        loop {
            let (kv, current) = match start.take() {
                Some(known) => known,
                None => (self.get_kv(reg, namespace, name).await?, true),
            };
            let (mut new, warnings, requested_rv) = match self.plan_update(&request, &change, &kv) {
                // Perhaps only because the copy was stale: read and decide again.
                Err(_) | Ok(Planned::Done(_)) if !current => continue,
                Err(status) => return Err(status),
                Ok(Planned::Done(outcome)) => return Ok(outcome),
                Ok(Planned::Write {
                    object,
                    warnings,
                    requested_rv,
                }) => (object, warnings, requested_rv),
            };
            // The store keeps no resourceVersion; the written one is set below.
            meta_mut(&mut new).remove("resourceVersion");
            let deleted = object::is_deleting(&new) && object::finalizers(&new).is_empty();
            let result = if deleted {
                self.store.delete(&key, Some(kv.mod_revision)).await
            } else {
                let value = stored::encode(&new)?;
                match reg.hooks.ttl() {
                    Some(ttl) => {
                        self.store
                            .update_expiring(&key, value, kv.mod_revision, ttl)
                            .await
                    }
                    None => self.store.update(&key, value, kv.mod_revision).await,
                }
            };
            match result {
                Ok(written) => {
                    meta_mut(&mut new).insert(
                        "resourceVersion".into(),
                        Value::String(written.mod_revision.to_string()),
                    );
                    return Ok(Outcome {
                        value: new,
                        warnings,
                        created: false,
                        // A delete's stored value is the object before this write.
                        stored: (!deleted).then_some(written),
                    });
                }
                // The conflict's answer is the current value: start again from it.
                Err(StoreError::Conflict { current: latest }) if requested_rv.is_none() => {
                    start = latest.map(|kv| (kv, true));
                }
                Err(StoreError::Conflict { .. }) if !current => {}
                Err(StoreError::Conflict { .. }) => {
                    return Err(Status::modified(&reg.info.group_resource(), name))
                }
                Err(StoreError::NotFound) if !current => {}
                Err(StoreError::NotFound) => {
                    return Err(Status::not_found(&reg.info.group_resource(), name))
                }
                Err(e) => return Err(store_failure(e)),
            }
        }
    }

    /// What an update of the stored `kv` writes, or its outcome when it writes nothing
    /// (no change, a dry run).
    fn plan_update<F>(
        &self,
        request: &UpdateRequest<'_>,
        change: &F,
        kv: &store::KeyValue,
    ) -> Result<Planned, Status>
    where
        F: Fn(&Value) -> Result<Change, Status>,
    {
        let UpdateRequest {
            reg,
            namespace,
            name,
            subresource,
            options,
            ..
        } = *request;
        let old = stored::decode(kv)?;
        let Change {
            object: mut new,
            mut warnings,
            managed_fields_done,
        } = change(&old)?;
        if !new.is_object() {
            return Err(Status::bad_request("the body is not a JSON object"));
        }
        let requested_rv = object::meta_str(&new, "resourceVersion").map(str::to_string);
        if let Some(rv) = &requested_rv {
            if rv != &kv.mod_revision.to_string() {
                return Err(Status::modified(&reg.info.group_resource(), name));
            }
        }
        reg.hooks.decode(&mut new)?;
        new = self.prepare_update(reg, namespace, &old, new, subresource)?;
        if subresource.is_none() {
            reg.hooks.default_on_update(&mut new);
            reg.hooks.allocate(Some(&old), &mut new, request.stored)?;
        }
        warnings.extend(Self::prune(
            reg,
            &mut new,
            options.field_validation,
            subresource.is_none() && managed_fields_done.is_none(),
        )?);
        warnings.extend(Self::validate(
            reg,
            &new,
            Some(&old),
            options.privileged,
            subresource == Some("status"),
        )?);
        if let Some(guard) = &options.guard {
            (guard.0)(&new, Some(&old))?;
        }
        let unchanged = if managed_fields_done.is_some() {
            // Server-side apply may change only managedFields (a new co-owner of a
            // value); that is still a write.
            let strip = |o: &Value| {
                let mut c = o.clone();
                meta_mut(&mut c).remove("resourceVersion");
                c
            };
            strip(&new) == strip(&old)
        } else {
            object::same_but_bookkeeping(&new, &old)
        };
        if unchanged {
            return Ok(Planned::Done(Outcome {
                value: old,
                warnings,
                created: false,
                stored: None,
            }));
        }
        if managed_fields_done.is_none() {
            apimachinery::ssa::record_update(
                Some(old),
                &mut new,
                &options.field_manager,
                subresource,
                &reg.info.api_version(),
                &kubevirt_api::meta::now(),
                &reg.schema,
            );
        }
        if options.dry_run {
            // Nothing is written, so the object keeps the stored resourceVersion.
            meta_mut(&mut new).insert(
                "resourceVersion".into(),
                Value::String(kv.mod_revision.to_string()),
            );
            return Ok(Planned::Done(Outcome {
                value: new,
                warnings,
                created: false,
                stored: None,
            }));
        }
        Ok(Planned::Write {
            object: new,
            warnings,
            requested_rv,
        })
    }

    /// Carries over what a write may not change and bumps generation on spec changes.
    fn prepare_update(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        old: &Value,
        mut new: Value,
        subresource: Option<&str>,
    ) -> Result<Value, Status> {
        Self::check_identity(reg, &mut new, namespace)?;
        if subresource == Some("status") {
            // Only status changes through /status; everything else stays as stored.
            if object::same_but_status(&new, old) {
                // The usual case (a patch of the status alone): the written object is the
                // stored one already, but for its status and bookkeeping; no copy of it.
                let meta = meta_mut(&mut new);
                match object::meta(old).and_then(|m| m.get("resourceVersion")) {
                    Some(version) => meta.insert("resourceVersion".into(), version.clone()),
                    None => meta.remove("resourceVersion"),
                };
                if !meta.contains_key("managedFields") {
                    if let Some(mf) = object::meta(old).and_then(|m| m.get("managedFields")) {
                        meta.insert("managedFields".into(), mf.clone());
                    }
                }
                return Ok(new);
            }
            let mut merged = old.clone();
            if let Some(root) = merged.as_object_mut() {
                match new.as_object_mut().and_then(|r| r.remove("status")) {
                    Some(status) => root.insert("status".into(), status),
                    None => root.remove("status"),
                };
            }
            let managed_fields = new
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
                .and_then(|m| m.remove("managedFields"));
            if let Some(mf) = managed_fields {
                meta_mut(&mut merged).insert("managedFields".into(), mf);
            }
            return Ok(merged);
        }
        if reg.info.status_subresource {
            if let Some(root) = new.as_object_mut() {
                match old.get("status") {
                    Some(status) => root.insert("status".into(), status.clone()),
                    None => root.remove("status"),
                };
            }
        }
        let no_meta = Map::new();
        let old_meta = object::meta(old).unwrap_or(&no_meta);
        let new_meta = meta_mut(&mut new);
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "name",
            "namespace",
        ] {
            if !new_meta.contains_key(field) {
                if let Some(v) = old_meta.get(field) {
                    new_meta.insert(field.into(), v.clone());
                }
            }
        }
        if !new_meta.contains_key("managedFields") {
            if let Some(v) = old_meta.get("managedFields") {
                new_meta.insert("managedFields".into(), v.clone());
            }
        }
        // rest.BeforeUpdate: requests cannot change generation, creationTimestamp or an
        // existing deletionTimestamp; they are reset from the stored object. A different
        // uid is left for validation (immutable field); PUT checks it as a precondition.
        for field in ["creationTimestamp", "deletionTimestamp"] {
            if let Some(v) = old_meta.get(field).filter(|v| !v.is_null()) {
                new_meta.insert(field.into(), v.clone());
            }
        }
        let old_generation = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let spec_changed = !object::same_spec_part(old, &new, reg.info.status_subresource);
        let generation = if spec_changed {
            old_generation + 1
        } else {
            old_generation
        };
        meta_mut(&mut new).insert("generation".into(), json!(generation));
        Ok(new)
    }
}

/// What an update names: the resource, the object, the part written and how.
#[derive(Clone, Copy)]
struct UpdateRequest<'a> {
    reg: &'a Registration,
    namespace: Option<&'a str>,
    name: &'a str,
    subresource: Option<&'a str>,
    options: &'a WriteOptions,
    /// Every stored object of the kind, for kinds that allocate.
    stored: &'a [Value],
}

/// What `plan_update` decided.
enum Planned {
    /// Nothing to write: the answer as it is.
    Done(Outcome<Value>),
    Write {
        object: Value,
        warnings: Vec<String>,
        /// The resourceVersion the request asked to update, if any.
        requested_rv: Option<String>,
    },
}

/// What a change function produced for `update_with`.
pub struct Change {
    pub object: Value,
    pub warnings: Vec<String>,
    /// Set when the change already computed managedFields (server-side apply).
    pub managed_fields_done: Option<()>,
}

impl Change {
    pub fn replace(object: Value) -> Self {
        Change {
            object,
            warnings: Vec::new(),
            managed_fields_done: None,
        }
    }
}
