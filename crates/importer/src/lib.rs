//! The byte work of KubeVirt CDI's DataVolume population, without Kubernetes types:
//! importing a disk image from HTTP(S) or a local file (an upload spooled by the
//! server) into a claim's raw disk file, copying one claim's disk into another, and
//! spooling an upload's body into a file for an import to take ([`upload`]).
//!
//! - The format is told by magic bytes: gzip and xz are decompressed on the fly, qcow2
//!   (`QFI\xfb`) is spooled to a scratch file and converted by `qemu-img convert`, and
//!   anything else is raw, streamed straight into the target with its zero blocks left
//!   as holes.
//! - The target ends exactly `capacity_bytes` long, the image at offset 0. An image
//!   whose virtual size exceeds the capacity fails with CDI's message.
//! - Errors are [`ImportError::Transient`] (retry with backoff) or
//!   [`ImportError::Permanent`], worded like CDI's; [`ImportError::Cancelled`] when the
//!   token fires, which also kills a running qemu-img.
//! - Scratch files are removed on every return, and on drop of the future.
//!
//! reqwest is built without a TLS crypto provider; the ring provider is installed as
//! the process default if none is (as the binary does at start).

mod clone;
mod detect;
mod error;
mod http;
mod pipeline;
mod progress;
mod qemu_img;
mod source;
pub mod upload;
mod writer;

use std::path::{Path, PathBuf};

use futures::StreamExt;
use tokio::io::AsyncReadExt;
use tokio_util::io::ReaderStream;

pub use detect::{Compression, Format};
pub use error::{ImportError, LARGER_PVC_REQUIRED};
pub use http::HttpSource;
pub use progress::Progress;
pub use tokio_util::sync::CancellationToken;

/// The claim's disk file, and the claim's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub path: PathBuf,
    pub capacity_bytes: u64,
}

/// What an import found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    pub format: Format,
    pub compression: Option<Compression>,
    /// The image's size as a disk: qcow2's virtual size, a raw image's (decompressed)
    /// length.
    pub virtual_size: u64,
    /// Bytes read from the source, as received (compressed).
    pub bytes_read: u64,
}

/// Imports the image at `source.url` into `target`, spooling qcow2 in `scratch`.
///
/// `progress` is called at the start, at most every 250 ms while data flows, and at the
/// end of the transfer (100% when the server sent a Content-Length).
pub async fn import_http(
    source: &HttpSource,
    target: &Target,
    scratch: &Path,
    progress: &(dyn Fn(Progress) + Send + Sync),
    cancel: &CancellationToken,
) -> Result<Imported, ImportError> {
    let (stream, total) = http::open(source, cancel).await?;
    pipeline::import(
        pipeline::Input { stream, total },
        target,
        scratch,
        progress,
        cancel,
    )
    .await
}

/// Imports the image in the local file `path` (an upload, for instance) into `target`.
/// An uncompressed qcow2 is converted in place, without a scratch copy; a compressed
/// one is decompressed into `scratch` first.
pub async fn import_file(
    path: &Path,
    target: &Target,
    scratch: &Path,
    progress: &(dyn Fn(Progress) + Send + Sync),
    cancel: &CancellationToken,
) -> Result<Imported, ImportError> {
    let unreadable = |e: std::io::Error| {
        ImportError::Permanent(format!(
            "Unable to obtain information about data source: cannot read {}: {e}",
            path.display()
        ))
    };
    let mut file = tokio::fs::File::open(path).await.map_err(unreadable)?;
    let len = file.metadata().await.map_err(unreadable)?.len();
    let mut head = vec![0u8; 8];
    let n = file.read(&mut head).await.map_err(unreadable)?;
    head.truncate(n);
    if detect::compression(&head).is_none() && detect::format(&head) == Format::Qcow2 {
        let report = |read| {
            progress(Progress {
                read_bytes: read,
                total_bytes: Some(len),
            })
        };
        report(0);
        let virtual_size = pipeline::convert_qcow2(path, target, cancel)
            .await
            .map_err(|e| {
                if cancel.is_cancelled() {
                    ImportError::Cancelled
                } else {
                    e
                }
            })?;
        report(len);
        return Ok(Imported {
            format: Format::Qcow2,
            compression: None,
            virtual_size,
            bytes_read: len,
        });
    }
    // Start again from the beginning for the streaming path.
    let file = tokio::fs::File::open(path).await.map_err(unreadable)?;
    let stream = ReaderStream::with_capacity(file, writer::BUFFER).boxed();
    pipeline::import(
        pipeline::Input {
            stream,
            total: Some(len),
        },
        target,
        scratch,
        progress,
        cancel,
    )
    .await
}

/// Copies the raw disk file `from` (another claim's) into `target`, sparsely; the
/// source must not be larger than the target's capacity.
pub async fn clone_file(
    from: &Path,
    target: &Target,
    progress: &(dyn Fn(Progress) + Send + Sync),
    cancel: &CancellationToken,
) -> Result<Imported, ImportError> {
    clone::clone_file(from, target, progress, cancel).await
}
