//! Sources as byte streams, whose errors keep their class through the decoders.

use std::io;

use bytes::Bytes;
use futures::stream::BoxStream;

/// A source's bytes as they arrive (compressed or not).
pub(crate) type ByteStream = BoxStream<'static, io::Result<Bytes>>;

/// A source's own failure, carried inside the `io::Error` that the readers and
/// decoders pass along unchanged, so that it can be told from a decoding error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SourceError {
    #[error("{0}")]
    Transient(String),
}

/// True when `e` is a source failure worth retrying.
pub(crate) fn is_transient(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<SourceError>())
        .is_some()
}

/// The message of `e`: its source's words when it carries them.
pub(crate) fn describe(e: &io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<SourceError>())
    {
        Some(SourceError::Transient(text)) => text.clone(),
        None => crate::error::chain(e),
    }
}
