//! etcd's errors in the store's terms.

use store::{Revision, StoreError};

/// What an etcd error means for the caller.
pub enum Failure {
    /// The requested revision has been compacted (etcd's `ErrCompacted`).
    Compacted,
    /// The requested revision is newer than etcd's (etcd's `ErrFutureRev`).
    FutureRevision,
    /// Anything else: unreachable endpoints, lost quorum, a full database, ...
    Other(String),
}

pub fn classify(err: &etcd_client::Error) -> Failure {
    if let etcd_client::Error::GRpcStatus(status) = err {
        // etcd reports these as gRPC OutOfRange with fixed messages (rpctypes in etcd's API).
        let message = status.message();
        if message.contains("required revision has been compacted") {
            return Failure::Compacted;
        }
        if message.contains("required revision is a future revision") {
            return Failure::FutureRevision;
        }
        return Failure::Other(format!("etcd: {message} ({:?})", status.code()));
    }
    Failure::Other(format!("etcd: {err}"))
}

/// The error for a failure that is neither compaction nor a future revision.
pub fn backend(err: &etcd_client::Error) -> StoreError {
    match classify(err) {
        Failure::Other(message) => StoreError::Backend(message),
        Failure::Compacted => StoreError::Backend(format!("etcd: unexpected compaction: {err}")),
        Failure::FutureRevision => {
            StoreError::Backend(format!("etcd: unexpected future revision: {err}"))
        }
    }
}

pub fn future(requested: Revision, current: Revision) -> StoreError {
    StoreError::FutureRevision { requested, current }
}
