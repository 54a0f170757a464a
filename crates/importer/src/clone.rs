//! Claim-to-claim copies (CDI's host-assisted clone) of a raw disk file: the source's
//! holes are skipped (SEEK_DATA/SEEK_HOLE) and its zero blocks left as holes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::SeekFrom;
use tokio_util::sync::CancellationToken;

use crate::detect::Format;
use crate::error::{too_small, ImportError};
use crate::pipeline::{prepare_target, ProgressFn};
use crate::progress::{Reporter, INTERVAL};
use crate::writer::{write_sparse, BUFFER};
use crate::{Imported, Target};

const CLONE: &str = "Unable to clone source data to target file";

/// The next data offset at or after `at`, or `len` when only holes remain.
fn next_data(file: &File, at: u64, len: u64) -> io::Result<u64> {
    match rustix::fs::seek(file, SeekFrom::Data(at)) {
        Ok(offset) => Ok(offset.min(len)),
        Err(rustix::io::Errno::NXIO) => Ok(len),
        // A filesystem without SEEK_DATA: everything is data.
        Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::OPNOTSUPP) => Ok(at),
        Err(e) => Err(e.into()),
    }
}

fn next_hole(file: &File, at: u64, len: u64) -> u64 {
    rustix::fs::seek(file, SeekFrom::Hole(at))
        .map(|offset| offset.min(len))
        .unwrap_or(len)
}

fn copy_sparse(
    src: &File,
    dst: &File,
    len: u64,
    done: &AtomicU64,
    cancel: &CancellationToken,
) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    let mut pos = 0;
    while pos < len {
        let data = next_data(src, pos, len)?;
        done.store(data, Ordering::Relaxed);
        if data >= len {
            break;
        }
        let hole = next_hole(src, data, len).max(data + 1);
        let mut at = data;
        while at < hole {
            if cancel.is_cancelled() {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "cancelled"));
            }
            let n = (BUFFER as u64).min(hole - at) as usize;
            src.read_exact_at(&mut buf[..n], at)?;
            write_sparse(dst, at, &buf[..n])?;
            at += n as u64;
            done.store(at, Ordering::Relaxed);
        }
        pos = hole;
    }
    done.store(len, Ordering::Relaxed);
    dst.sync_data()
}

pub(crate) async fn clone_file(
    from: &Path,
    target: &Target,
    progress: ProgressFn<'_>,
    cancel: &CancellationToken,
) -> Result<Imported, ImportError> {
    let src = File::open(from).map_err(|e| {
        ImportError::Permanent(format!("{CLONE}: cannot open {}: {e}", from.display()))
    })?;
    let len = src
        .metadata()
        .map_err(|e| ImportError::Permanent(format!("{CLONE}: {e}")))?
        .len();
    if len > target.capacity_bytes {
        return Err(too_small(len, target.capacity_bytes));
    }
    if std::fs::canonicalize(from).ok() == std::fs::canonicalize(&target.path).ok()
        && target.path.exists()
    {
        return Err(ImportError::Permanent(format!(
            "{CLONE}: the source and the target are the same file"
        )));
    }
    let dst = prepare_target(target).await?;
    let mut reporter = Reporter::new(progress, Some(len));
    reporter.force(0);
    let done = Arc::new(AtomicU64::new(0));
    let mut copying = {
        let done = done.clone();
        let cancel = cancel.clone();
        tokio::task::spawn_blocking(move || copy_sparse(&src, &dst, len, &done, &cancel))
    };
    let mut tick = tokio::time::interval(INTERVAL);
    let result = loop {
        tokio::select! {
            r = &mut copying => break r.unwrap_or_else(|e| Err(io::Error::other(e))),
            _ = tick.tick() => reporter.update(done.load(Ordering::Relaxed)),
        }
    };
    if cancel.is_cancelled() {
        return Err(ImportError::Cancelled);
    }
    result.map_err(|e| ImportError::Permanent(format!("{CLONE}: {}", crate::error::chain(&e))))?;
    reporter.force(len);
    Ok(Imported {
        format: Format::Raw,
        compression: None,
        virtual_size: len,
        bytes_read: len,
    })
}
