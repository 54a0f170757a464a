//! Delete: preconditions, finalizers (the garbage collector's included), and marking an
//! object that must wait for them.

use apimachinery::resource::ResourceInfo;
use apimachinery::status::Status;
use serde_json::{json, Value};
use store::StoreError;

use super::{store_failure, Outcome, Registration, Registry};
use crate::object::{self, meta_mut};
use crate::stored;

impl Registry {
    /// DELETE of one object.
    pub async fn delete(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Outcome<DeleteResult>, Status> {
        let result = self.delete_object(reg, namespace, name, options).await;
        if reg.info.group.is_empty() && reg.info.plural == "namespaces" && !options.dry_run {
            // Whatever the outcome, the write (if any) is in the store by now.
            self.namespaces
                .deleting(name, self.store.current_revision());
        }
        result
    }

    async fn delete_object(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Outcome<DeleteResult>, Status> {
        if let Some(message) = reg.hooks.refuse_delete(name) {
            return Err(Status::forbidden(&reg.info.group_resource(), name, message));
        }
        loop {
            let kv = self.get_kv(reg, namespace, name).await?;
            let old = stored::decode(&kv)?;
            if let Some(uid) = &options.precondition_uid {
                if uid != object::uid(&old) {
                    return Err(Status::conflict(
                        &reg.info.group_resource(),
                        name,
                        &format!(
                            "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                            object::uid(&old)
                        ),
                    )
                    .with_conflict_kind(reg.info));
                }
            }
            if let Some(rv) = &options.precondition_resource_version {
                if rv != &kv.mod_revision.to_string() {
                    return Err(Status::conflict(
                        &reg.info.group_resource(),
                        name,
                        &format!(
                            "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                            kv.mod_revision
                        ),
                    )
                    .with_conflict_kind(reg.info));
                }
            }
            let mut finalizers = object::finalizers(&old);
            let gc_finalizer = match options.propagation {
                Propagation::Foreground => Some("foregroundDeletion"),
                Propagation::Orphan => Some("orphan"),
                Propagation::Background => None,
            };
            if let Some(f) = gc_finalizer {
                // The two GC finalizers exclude each other; the newer request wins.
                finalizers.retain(|x| x != "foregroundDeletion" && x != "orphan");
                finalizers.push(f.to_string());
            }
            let key = Self::key(reg.info, namespace, name);
            if finalizers.is_empty() && !reg.hooks.removed_by_controller() {
                if options.dry_run {
                    return Ok(Outcome {
                        value: DeleteResult::Deleted(old),
                        warnings: vec![],
                        created: false,
                        stored: None,
                    });
                }
                match self.store.delete(&key, Some(kv.mod_revision)).await {
                    Ok(_) => {
                        return Ok(Outcome {
                            value: DeleteResult::Deleted(old),
                            warnings: vec![],
                            created: false,
                            stored: None,
                        })
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(StoreError::NotFound) => {
                        return Err(Status::not_found(&reg.info.group_resource(), name))
                    }
                    Err(e) => return Err(store_failure(e)),
                }
            }
            // Finalizers hold the object: mark it as being deleted instead.
            let mut new = old.clone();
            let changed = {
                let was_deleting = object::is_deleting(&old);
                if !was_deleting {
                    let meta = meta_mut(&mut new);
                    meta.insert(
                        "deletionTimestamp".into(),
                        Value::String(kubevirt_api::meta::now()),
                    );
                    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
                    let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
                    meta.insert("generation".into(), json!(generation + 1));
                    reg.hooks.on_deletion_marked(&mut new);
                }
                object::set_finalizers(&mut new, finalizers.clone());
                !was_deleting || object::finalizers(&old) != finalizers
            };
            if !changed || options.dry_run {
                return Ok(Outcome {
                    value: DeleteResult::Pending(new),
                    warnings: vec![],
                    created: false,
                    stored: None,
                });
            }
            meta_mut(&mut new).remove("resourceVersion");
            match self
                .store
                .update(&key, stored::encode(&new)?, kv.mod_revision)
                .await
            {
                Ok(written) => {
                    meta_mut(&mut new).insert(
                        "resourceVersion".into(),
                        Value::String(written.mod_revision.to_string()),
                    );
                    return Ok(Outcome {
                        value: DeleteResult::Pending(new),
                        warnings: vec![],
                        created: false,
                        stored: None,
                    });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_failure(e)),
            }
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub propagation: Propagation,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
}

/// A delete either removed the object or left it waiting for finalizers.
#[derive(Debug)]
pub enum DeleteResult {
    Deleted(Value),
    Pending(Value),
}

trait StatusExt {
    fn with_conflict_kind(self, info: &ResourceInfo) -> Self;
}

impl StatusExt for Status {
    /// Delete preconditions name the Kind, not the resource, in their message.
    fn with_conflict_kind(mut self, info: &ResourceInfo) -> Self {
        let resource = info.group_resource().qualified();
        let kind = info.group_kind().qualified();
        self.message = self.message.replacen(&resource, &kind, 1);
        // `NewConflict(GroupResource{Group, Resource: Kind}, ...)`: details name the Kind too.
        if let Some(details) = self.details.as_mut() {
            details.kind = info.kind.to_string();
        }
        self
    }
}
