//! The import itself: detect, decompress, and either stream raw data into the target or
//! spool qcow2 to scratch and convert it.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_compression::tokio::bufread::{GzipDecoder, XzDecoder};
use futures::TryStreamExt;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::io::StreamReader;
use tokio_util::sync::CancellationToken;

use crate::detect::{self, Compression, Format, Qcow2Header, PREFIX_LEN};
use crate::error::{too_small, ImportError};
use crate::progress::{Progress, Reporter};
use crate::qemu_img;
use crate::source::{self, ByteStream};
use crate::writer::Writer;
use crate::{Imported, Target};

pub(crate) type ProgressFn<'a> = &'a (dyn Fn(Progress) + Send + Sync);

const INFO: &str = "Unable to obtain information about data source";
const TO_TARGET: &str = "Unable to transfer source data to target file";
const TO_SCRATCH: &str = "Unable to transfer source data to scratch space";

/// A source's bytes, and their number when known beforehand.
pub(crate) struct Input {
    pub stream: ByteStream,
    pub total: Option<u64>,
}

/// A read failure: the source's own (retry) or the data's (a corrupt gzip, say).
fn read_error(phase: &str, e: &io::Error) -> ImportError {
    let text = format!("{phase}: {}", source::describe(e));
    if source::is_transient(e) {
        ImportError::Transient(text)
    } else {
        ImportError::Permanent(text)
    }
}

fn write_error(phase: &str, e: &io::Error) -> ImportError {
    ImportError::Permanent(format!("{phase}: {}", crate::error::chain(e)))
}

/// Runs blocking file work off the runtime's threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// Opens the target and makes it `capacity` bytes of zeros (holes), keeping its inode.
pub(crate) async fn prepare_target(target: &Target) -> Result<File, ImportError> {
    let path = target.path.clone();
    let capacity = target.capacity_bytes;
    blocking(move || {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        file.set_len(0)?;
        file.set_len(capacity)?;
        Ok(file)
    })
    .await
    .map_err(|e| {
        ImportError::Permanent(format!(
            "{TO_TARGET}: cannot prepare {}: {}",
            target.path.display(),
            crate::error::chain(&e)
        ))
    })
}

/// Whether `path` can be opened with O_DIRECT (not on tmpfs, for one), as CDI checks
/// before choosing qemu-img's cache mode.
async fn supports_direct_io(path: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let path = path.to_path_buf();
    blocking(move || {
        OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(&path)
    })
    .await
    .is_ok()
}

/// Reads until `want` bytes or the end.
async fn read_prefix<R: AsyncRead + Unpin + ?Sized>(
    reader: &mut R,
    want: usize,
) -> io::Result<Vec<u8>> {
    let mut prefix = vec![0; want];
    let n = fill(reader, &mut prefix, 0).await?;
    prefix.truncate(n);
    Ok(prefix)
}

/// Fills `buf` from `filled` on, stopping early only at the end of the stream.
async fn fill<R: AsyncRead + Unpin + ?Sized>(
    reader: &mut R,
    buf: &mut [u8],
    mut filled: usize,
) -> io::Result<usize> {
    while filled < buf.len() {
        let n = reader.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

/// Where the copy loop stands for progress.
struct Flow<'a, 'p> {
    counter: &'a AtomicU64,
    reporter: &'a mut Reporter<'p>,
    cancel: &'a CancellationToken,
    /// The source's size, when it said.
    total: Option<u64>,
}

impl Flow<'_, '_> {
    /// The source has been read to its end in `phase`: the bytes read, or a transient
    /// error when it ended short of the size it announced.
    fn done(&mut self, phase: &str) -> Result<u64, ImportError> {
        let read = self.counter.load(Ordering::Relaxed);
        if let Some(total) = self.total {
            if read < total {
                return Err(ImportError::Transient(format!(
                    "{phase}: the source ended after {read} of {total} bytes"
                )));
            }
        }
        self.reporter.force(read);
        Ok(read)
    }
}

/// Copies `head` and then the rest of `reader` into `writer`; past `limit` bytes it
/// only counts. Returns the number of bytes the reader yielded.
async fn copy(
    head: &[u8],
    reader: &mut (dyn AsyncRead + Unpin + Send),
    writer: &mut Writer,
    limit: Option<u64>,
    flow: &mut Flow<'_, '_>,
    phase: &str,
) -> Result<u64, ImportError> {
    let mut total = 0u64;
    let mut buf = writer.buffer();
    buf[..head.len()].copy_from_slice(head);
    let mut filled = head.len();
    loop {
        let n = tokio::select! {
            r = fill(reader, &mut buf, filled) => r.map_err(|e| read_error(phase, &e))?,
            _ = flow.cancel.cancelled() => return Err(ImportError::Cancelled),
        };
        filled = 0;
        if n == 0 {
            break;
        }
        let end = n < buf.len();
        let writable = match limit {
            Some(limit) => limit.saturating_sub(total).min(n as u64) as usize,
            None => n,
        };
        total += n as u64;
        if writable > 0 {
            buf.truncate(writable);
            writer
                .write(buf)
                .await
                .map_err(|e| write_error(phase, &e))?;
            buf = writer.buffer();
        }
        flow.reporter.update(flow.counter.load(Ordering::Relaxed));
        if end {
            break;
        }
    }
    Ok(total)
}

/// Imports from `input` into `target`, spooling qcow2 in `scratch`.
pub(crate) async fn import(
    input: Input,
    target: &Target,
    scratch: &Path,
    progress: ProgressFn<'_>,
    cancel: &CancellationToken,
) -> Result<Imported, ImportError> {
    let result = import_inner(input, target, scratch, progress, cancel).await;
    match result {
        Err(_) if cancel.is_cancelled() => Err(ImportError::Cancelled),
        other => other,
    }
}

async fn import_inner(
    input: Input,
    target: &Target,
    scratch: &Path,
    progress: ProgressFn<'_>,
    cancel: &CancellationToken,
) -> Result<Imported, ImportError> {
    let counter = Arc::new(AtomicU64::new(0));
    let counting = {
        let counter = counter.clone();
        input.stream.inspect_ok(move |chunk| {
            counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        })
    };
    let mut reporter = Reporter::new(progress, input.total);
    reporter.force(0);
    let (compression, mut decoded, head) =
        decompressed(StreamReader::new(counting), cancel).await?;
    let format = detect::format(&head);
    tracing::debug!(?compression, ?format, "import: detected");
    let mut flow = Flow {
        counter: &counter,
        reporter: &mut reporter,
        cancel,
        total: input.total,
    };
    let source = Decoded {
        head: &head,
        reader: &mut decoded,
        compressed: compression.is_some(),
    };
    let (virtual_size, bytes_read) = match format {
        Format::Raw => import_raw(source, target, &mut flow).await?,
        Format::Qcow2 => import_qcow2(source, target, scratch, &mut flow).await?,
    };
    Ok(Imported {
        format,
        compression,
        virtual_size,
        bytes_read,
    })
}

/// The source's bytes, decompressed when they are gzip or xz, with their first
/// `PREFIX_LEN` bytes read (to tell the format by).
async fn decompressed(
    mut raw: impl tokio::io::AsyncBufRead + Unpin + Send + 'static,
    cancel: &CancellationToken,
) -> Result<(Option<Compression>, Pin<Box<dyn AsyncRead + Send>>, Vec<u8>), ImportError> {
    let prefix = tokio::select! {
        r = read_prefix(&mut raw, PREFIX_LEN) => r.map_err(|e| read_error(INFO, &e))?,
        _ = cancel.cancelled() => return Err(ImportError::Cancelled),
    };
    let compression = detect::compression(&prefix);
    let chained = std::io::Cursor::new(prefix).chain(raw);
    let mut decoded: Pin<Box<dyn AsyncRead + Send>> = match compression {
        None => Box::pin(chained),
        Some(Compression::Gzip) => {
            let mut d = GzipDecoder::new(chained);
            d.multiple_members(true);
            Box::pin(d)
        }
        Some(Compression::Xz) => {
            let mut d = XzDecoder::new(chained);
            d.multiple_members(true);
            Box::pin(d)
        }
    };
    let head = tokio::select! {
        r = read_prefix(&mut decoded, PREFIX_LEN) => r.map_err(|e| read_error(INFO, &e))?,
        _ = cancel.cancelled() => return Err(ImportError::Cancelled),
    };
    Ok((compression, decoded, head))
}

/// The decoded image: its first bytes, already read, and the rest.
struct Decoded<'a> {
    head: &'a [u8],
    reader: &'a mut Pin<Box<dyn AsyncRead + Send>>,
    /// Whether it came compressed (so the source's size says nothing of the image's).
    compressed: bool,
}

/// A raw image, written straight into the target. Returns (virtual size, bytes read).
async fn import_raw(
    source: Decoded<'_>,
    target: &Target,
    flow: &mut Flow<'_, '_>,
) -> Result<(u64, u64), ImportError> {
    if !source.compressed {
        if let Some(total) = flow.total {
            if total > target.capacity_bytes {
                return Err(too_small(total, target.capacity_bytes));
            }
        }
    }
    let file = prepare_target(target).await?;
    let mut writer = Writer::new(file, true, flow.cancel.clone());
    let copied = copy(
        source.head,
        source.reader,
        &mut writer,
        Some(target.capacity_bytes),
        flow,
        TO_TARGET,
    )
    .await;
    let virtual_size = match copied {
        Ok(n) => n,
        Err(e) => {
            writer.abandon().await;
            return Err(e);
        }
    };
    let file = writer
        .finish()
        .await
        .map_err(|e| write_error(TO_TARGET, &e))?;
    let read = flow.done(TO_TARGET)?;
    if virtual_size > target.capacity_bytes {
        return Err(too_small(virtual_size, target.capacity_bytes));
    }
    blocking(move || file.sync_data())
        .await
        .map_err(|e| write_error(TO_TARGET, &e))?;
    Ok((virtual_size, read))
}

/// A qcow2 image, spooled whole to scratch space, checked and converted into the
/// target. Returns (virtual size, bytes read).
async fn import_qcow2(
    source: Decoded<'_>,
    target: &Target,
    scratch: &Path,
    flow: &mut Flow<'_, '_>,
) -> Result<(u64, u64), ImportError> {
    if let Some(header) = Qcow2Header::parse(source.head) {
        if header.virtual_size > target.capacity_bytes {
            return Err(too_small(header.virtual_size, target.capacity_bytes));
        }
        if header.has_backing_file {
            return Err(ImportError::Permanent(format!(
                "{INFO}: the qcow2 image has a backing file, which an import does not follow"
            )));
        }
    }
    let spool = tempfile::Builder::new()
        .prefix("import-")
        .suffix(".qcow2")
        .tempfile_in(scratch)
        .map_err(|e| {
            ImportError::Permanent(format!(
                "{TO_SCRATCH}: cannot create a file in {}: {e}",
                scratch.display()
            ))
        })?;
    let file = spool
        .as_file()
        .try_clone()
        .map_err(|e| write_error(TO_SCRATCH, &e))?;
    let mut writer = Writer::new(file, false, flow.cancel.clone());
    let copied = copy(
        source.head,
        source.reader,
        &mut writer,
        None,
        flow,
        TO_SCRATCH,
    )
    .await;
    if let Err(e) = copied {
        writer.abandon().await;
        return Err(e);
    }
    drop(
        writer
            .finish()
            .await
            .map_err(|e| write_error(TO_SCRATCH, &e))?,
    );
    let read = flow.done(TO_SCRATCH)?;
    let virtual_size = convert_qcow2(spool.path(), target, flow.cancel).await?;
    // `spool` is removed here, as on every earlier return.
    drop(spool);
    Ok((virtual_size, read))
}

/// Checks the complete qcow2 at `path` and converts it into the target; returns its
/// virtual size.
pub(crate) async fn convert_qcow2(
    path: &Path,
    target: &Target,
    cancel: &CancellationToken,
) -> Result<u64, ImportError> {
    let info = qemu_img::info(path, Format::Qcow2, cancel).await?;
    if info.format != "qcow2" {
        return Err(ImportError::Permanent(format!(
            "Unable to convert source data to target format: Invalid format {} for image",
            info.format
        )));
    }
    if let Some(backing) = info.backing_file.as_deref().or(info.data_file.as_deref()) {
        return Err(ImportError::Permanent(format!(
            "Unable to convert source data to target format: the image refers to the file {backing:?} (a backing or data file), which an import does not follow"
        )));
    }
    if info.virtual_size > target.capacity_bytes {
        return Err(too_small(info.virtual_size, target.capacity_bytes));
    }
    qemu_img::check(path, cancel).await?;
    let file = prepare_target(target).await?;
    let direct = supports_direct_io(&target.path).await;
    qemu_img::convert(path, Format::Qcow2, &target.path, direct, cancel).await?;
    let capacity = target.capacity_bytes;
    blocking(move || {
        if file.metadata()?.len() != capacity {
            file.set_len(capacity)?;
        }
        file.sync_data()
    })
    .await
    .map_err(|e| write_error(TO_TARGET, &e))?;
    Ok(info.virtual_size)
}
