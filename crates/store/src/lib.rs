//! The revisioned store contract that every backend implements.
//!
//! Keys are strings ordered bytewise; every successful write advances one global
//! revision (Kubernetes' `resourceVersion`). Values are opaque bytes.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

mod announce;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod expiry;
mod memory;
mod packed;

pub use announce::WriteGauge;
pub use memory::{MemoryStore, StagedBatch, WriteOp};
pub use packed::{Change, Dictionaries, Dictionary, Packed, PackedKv};

/// A store-wide, strictly increasing write counter. The first write gets revision 1.
pub type Revision = i64;

/// One key with the value it has at some revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    /// Revision of the write that created this key (unchanged by updates).
    pub create_revision: Revision,
    /// Revision of the write that produced this value (for a delete event: the delete).
    pub mod_revision: Revision,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// A change seen by a watcher. For `Delete`, `kv.value` is the last value the key had
/// and `kv.mod_revision` is the revision of the delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
    /// The value before this event (absent for a create).
    pub prev: Option<KeyValue>,
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    #[error("key already exists")]
    AlreadyExists,
    #[error("key not found")]
    NotFound,
    /// The compare-and-swap revision did not match; `current` is what the key holds now.
    #[error("revision mismatch")]
    Conflict { current: Option<KeyValue> },
    /// The requested revision is older than the oldest one still kept.
    #[error("revision {requested} has been compacted (oldest kept: {compacted})")]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },
    /// The requested revision is newer than the store's current one.
    #[error("revision {requested} is newer than the current revision {current}")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },
    #[error("storage backend failure: {0}")]
    Backend(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How to read a range of keys.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Only keys strictly greater than this one (continue tokens).
    pub start_after: Option<String>,
    /// At most this many keys; `Some(0)` means no limit, as in etcd and Kubernetes.
    pub limit: Option<usize>,
    /// Read as of this revision instead of the current one.
    pub revision: Option<Revision>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListResult {
    pub items: Vec<KeyValue>,
    /// The revision the list was read at.
    pub revision: Revision,
    /// How many more keys under the prefix follow the last returned one.
    pub remaining: usize,
}

/// A stream of changes in revision order. It ends with an error (`Compacted`) when the
/// watcher fell too far behind to be served without a gap; clients then re-list.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<Event>> + Send>>;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Keys starting with `prefix`, in key order.
    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListResult>;

    /// Fails with `AlreadyExists` when the key holds a value.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue>;

    /// Replaces the value only if the key's current `mod_revision` equals `expected`.
    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue>;

    /// [`Store::create`], and the store deletes the key `ttl` after this write unless a
    /// later write changed it (Events' `--event-ttl`): a lease in etcd, a persisted
    /// deadline in the embedded stores. Deletion may lag the deadline by a second or so.
    async fn create_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<KeyValue>;

    /// [`Store::update`], with the key's deletion moved to `ttl` after this write.
    async fn update_expiring(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
        ttl: Duration,
    ) -> Result<KeyValue>;

    /// Deletes the key, if `expected` is given only when it matches the current
    /// `mod_revision`. Returns the deleted value with the revision of the delete.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue>;

    /// Every change under `prefix` with a revision greater than `after`: first the history,
    /// then live changes, without gaps or duplicates. Fails with `Compacted` when that history
    /// is gone and with `FutureRevision` when `after` is newer than the current revision.
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream>;

    /// The revision of the latest write.
    fn current_revision(&self) -> Revision;

    /// The oldest revision that reads and watches may still ask for.
    fn compacted_revision(&self) -> Revision;

    /// Forget history older than `revision`; afterwards reads at `revision` and watches from
    /// it still work. Compacting to an already compacted revision does nothing.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// A copy of the key's value this store saw lately (written or read), possibly stale:
    /// an update may start from it instead of a `get`, since its compare of mod revisions
    /// fails on a stale copy; what it concludes without writing (nothing to change, a
    /// precondition or validation failure) it must check against a `get`. `None` when the
    /// backend reads as cheaply as it would keep copies (the embedded store reads memory).
    fn recent(&self, _key: &str) -> Option<KeyValue> {
        None
    }

    /// Where callers announce writes they are preparing, for a backend that batches them
    /// (see [`WriteGauge`]); `None` when announcing would gain nothing.
    fn write_gauge(&self) -> Option<WriteGauge> {
        None
    }

    /// Whether the store can take writes now: the reason when it cannot (a full disk, a
    /// commit whose outcome is not known yet, an unreachable quorum), for `/readyz`.
    fn health(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}
