//! The generic registry: create, read, update, patch, delete, list and watch for every
//! registered resource, with kube-apiserver's semantics. It knows nothing of HTTP; the
//! transport layer turns requests into calls here and `Status` errors into responses.
//!
//! One module per job: `registration` (what a served kind is), `validation` (the checks
//! every write passes), `create`, `update`, `delete` and `list`; watch is in `crate::watch`.

use std::sync::Arc;

use apimachinery::resource::ResourceInfo;
use apimachinery::status::Status;
use serde_json::Value;
use store::{KeyValue, Store, StoreError};

use crate::stored;

mod create;
mod delete;
mod list;
mod namespaces;
mod registration;
mod update;
mod validation;

pub use delete::{DeleteOptions, DeleteResult, Propagation};
pub use list::{ListRequest, ListResult};
pub use registration::{Admission, Read, Refusals, Registration, ResourceHooks, Serving};
pub use update::Change;

/// How a write treats fields the schema does not know (`fieldValidation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    /// The server default when the parameter is absent.
    #[default]
    Warn,
    Strict,
}

/// Options every write carries.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_manager: String,
    pub field_validation: FieldValidation,
    /// The writer is a virtplane component (controller, node agent), which KubeVirt's
    /// update webhooks let change what users may not (VMI spec, reserved labels).
    pub privileged: bool,
    /// A last check of the object about to be stored (RBAC's escalation check).
    pub guard: Option<WriteGuard>,
}

/// A check a write passes after validation, with the object it would store and, for an
/// update, the stored one; its error is the write's.
#[derive(Clone)]
pub struct WriteGuard(pub Arc<GuardFn>);

/// What a `WriteGuard` runs: (object to store, stored object) → ok, or the write's error.
pub type GuardFn = dyn Fn(&Value, Option<&Value>) -> Result<(), Status> + Send + Sync;

impl WriteGuard {
    /// Both checks, this one first.
    pub fn and(self, then: WriteGuard) -> WriteGuard {
        WriteGuard(Arc::new(move |new, old| {
            (self.0)(new, old)?;
            (then.0)(new, old)
        }))
    }
}

impl std::fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteGuard")
    }
}

/// A successful result with the `Warning` headers it should carry.
#[derive(Debug)]
pub struct Outcome<T> {
    pub value: T,
    pub warnings: Vec<String>,
    /// Whether the write created the object (201 rather than 200).
    pub created: bool,
    /// The object as the write stored it, when it is `value`: JSON answers are spliced
    /// from it (see `stored`) rather than encoded again.
    pub stored: Option<KeyValue>,
}

pub struct Registry {
    pub store: Arc<dyn Store>,
    registrations: Vec<Arc<Registration>>,
    namespaces: namespaces::NamespaceCache,
    /// Held by writes of kinds that allocate (see `ResourceHooks::allocates`).
    allocations: tokio::sync::Mutex<()>,
}

/// Maps store failures that the caller did not anticipate to a Status.
pub(crate) fn store_failure(e: StoreError) -> Status {
    match e {
        StoreError::Compacted { .. } => {
            Status::gone("The resourceVersion for the provided list is too old.")
        }
        StoreError::FutureRevision { requested, current } => {
            Status::too_large_resource_version(requested, current)
        }
        other => Status::internal(other),
    }
}

impl Registry {
    pub fn new(store: Arc<dyn Store>, registrations: Vec<Registration>) -> Self {
        Registry {
            store,
            registrations: registrations.into_iter().map(Arc::new).collect(),
            namespaces: Default::default(),
            allocations: tokio::sync::Mutex::new(()),
        }
    }

    /// For a kind that allocates: the allocation lock, and every stored object of the
    /// kind. (Writes through another server over the same etcd are not serialized with
    /// these; the store's create still refuses a second object of one name.)
    pub(crate) async fn allocation(
        &self,
        reg: &Registration,
    ) -> Result<(Option<tokio::sync::MutexGuard<'_, ()>>, Vec<Value>), Status> {
        if !reg.hooks.allocates() {
            return Ok((None, Vec::new()));
        }
        let guard = self.allocations.lock().await;
        let listed = self
            .store
            .list(
                &Self::list_prefix(reg.info, None),
                store::ListOptions::default(),
            )
            .await
            .map_err(store_failure)?;
        let stored = listed
            .items
            .iter()
            .map(crate::stored::decode)
            .collect::<Result<_, _>>()?;
        Ok((Some(guard), stored))
    }

    pub fn registrations(&self) -> &[Arc<Registration>] {
        &self.registrations
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Registration>> {
        self.registrations
            .iter()
            .find(|r| r.info.group == group && r.info.version == version && r.info.plural == plural)
            .cloned()
    }

    pub fn find_kind(&self, group: &str, kind: &str) -> Option<Arc<Registration>> {
        self.registrations
            .iter()
            .find(|r| r.info.group == group && r.info.kind == kind)
            .cloned()
    }

    /// `/registry/<group>/<plural>/` (`core` for the core group).
    pub fn resource_prefix(info: &ResourceInfo) -> String {
        let group = if info.group.is_empty() {
            "core"
        } else {
            info.group
        };
        format!("/registry/{group}/{}/", info.plural)
    }

    pub fn key(info: &ResourceInfo, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if info.namespaced => format!("{}{ns}/{name}", Self::resource_prefix(info)),
            _ => format!("{}{name}", Self::resource_prefix(info)),
        }
    }

    pub(crate) fn list_prefix(info: &ResourceInfo, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if info.namespaced => format!("{}{ns}/", Self::resource_prefix(info)),
            _ => Self::resource_prefix(info),
        }
    }

    pub async fn get(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, Status> {
        let key = Self::key(reg.info, namespace, name);
        match self.store.get(&key).await.map_err(store_failure)? {
            Some(kv) => stored::decode(&kv),
            None => Err(Status::not_found(&reg.info.group_resource(), name)),
        }
    }

    async fn get_kv(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<KeyValue, Status> {
        let key = Self::key(reg.info, namespace, name);
        self.store
            .get(&key)
            .await
            .map_err(store_failure)?
            .ok_or_else(|| Status::not_found(&reg.info.group_resource(), name))
    }
}
