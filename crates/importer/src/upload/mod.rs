//! The byte half of CDI's upload server: a request body, raw or a `multipart/form-data`
//! form, spooled into `<uid>.part` in the upload directory and renamed `<uid>.img` once
//! it is whole, so that an import can later take it like any local file. Which claim an
//! upload goes to, tokens and DataVolumes are the API server's business; here are bytes,
//! sizes and files.

mod form;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

pub use form::{FormError, FormReader};

/// How much more than the claim an upload may be: qcow2 metadata, gzip or xz headers.
/// A larger body cannot fit and is refused as CDI refuses it (no capacity).
const SLACK_BYTES: u64 = 16 << 20;
/// Bytes written to the disk at once.
const WRITE_BUFFER: usize = 1 << 20;

/// The most bytes an upload into a claim of `capacity` bytes may take.
pub fn limit(capacity: u64) -> u64 {
    capacity
        .saturating_add(capacity / 8)
        .saturating_add(SLACK_BYTES)
}

/// Why an upload was not spooled. The upload server answers `Refused` with 400 (the
/// client sent something it cannot take) and `Io` with 500 (the server's disk failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpoolError {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Io(String),
}

/// How the image sits in the body.
pub enum Framing {
    /// The body is the image.
    Raw,
    /// The body is a form whose `file` part is the image (the `upload-form` endpoints).
    Form(FormReader),
}

impl Framing {
    /// The framing of a form endpoint's body, from its `Content-Type`.
    pub fn form(content_type: &str) -> Result<Framing, SpoolError> {
        match form::boundary(content_type) {
            Some(Ok(boundary)) => Ok(Framing::Form(FormReader::new(&boundary))),
            Some(Err(e)) => Err(SpoolError::Refused(e.to_string())),
            None => Err(SpoolError::Refused(
                "request Content-Type isn't multipart/form-data".into(),
            )),
        }
    }
}

/// What the client said and what the claim holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Expected {
    /// The body's `Content-Length`, when sent.
    pub declared: Option<u64>,
    /// The claim's capacity, when known: the upload may be at most [`limit`] of it.
    pub capacity: Option<u64>,
}

/// A file that is removed when dropped, unless it was handed over.
#[derive(Debug)]
pub struct Spooled {
    path: PathBuf,
    kept: bool,
}

impl Spooled {
    fn new(path: PathBuf) -> Spooled {
        Spooled { path, kept: false }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file is someone else's now (its name was handed to the import).
    pub fn hand_over(mut self) -> PathBuf {
        self.kept = true;
        std::mem::take(&mut self.path)
    }
}

impl Drop for Spooled {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Streams `body` (or its form's `file` part) into `dir/<uid>.part`, and renames it
/// `dir/<uid>.img` once it is whole. Whatever goes wrong, nothing is left behind.
pub async fn spool<S, E>(
    dir: &Path,
    uid: &str,
    mut framing: Framing,
    expected: Expected,
    body: S,
) -> Result<Spooled, SpoolError>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: std::fmt::Display,
{
    if uid.is_empty() || !uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(SpoolError::Io(format!(
            "the DataVolume's uid {uid:?} cannot name a file"
        )));
    }
    let limit = expected.capacity.map(limit);
    let too_large = |limit: u64| {
        SpoolError::Refused(format!(
            "effective image size is larger than the reported available storage: the upload is more than {limit} bytes, and the claim holds {} bytes: A larger PVC is required",
            expected.capacity.unwrap_or(0)
        ))
    };
    if let (Some(limit), Some(declared), Framing::Raw) = (limit, expected.declared, &framing) {
        if declared > limit {
            return Err(too_large(limit));
        }
    }

    let part = Spooled::new(dir.join(format!("{uid}.part")));
    let io_failed = |e: std::io::Error| SpoolError::Io(format!("{}: {e}", part.path.display()));
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&part.path)
        .await
        .map_err(io_failed)?;
    let mut file = tokio::io::BufWriter::with_capacity(WRITE_BUFFER, file);
    let mut body = std::pin::pin!(body);
    let mut received: u64 = 0;
    let mut written: u64 = 0;
    let mut out = Vec::new();
    while let Some(data) = body.next().await {
        let data =
            data.map_err(|e| SpoolError::Refused(format!("the upload was cut short: {e}")))?;
        received += data.len() as u64;
        let bytes: &[u8] = match &mut framing {
            Framing::Form(reader) => {
                out.clear();
                reader
                    .push(&data, &mut out)
                    .map_err(|e| SpoolError::Refused(e.to_string()))?;
                &out
            }
            Framing::Raw => &data,
        };
        written += bytes.len() as u64;
        if let Some(limit) = limit.filter(|limit| written > *limit) {
            return Err(too_large(limit));
        }
        file.write_all(bytes).await.map_err(io_failed)?;
        if matches!(&framing, Framing::Form(reader) if reader.done()) {
            break;
        }
    }
    match (&framing, expected.declared) {
        (Framing::Form(reader), _) => reader
            .finish()
            .map_err(|e| SpoolError::Refused(e.to_string()))?,
        (Framing::Raw, Some(declared)) if declared != received => {
            return Err(SpoolError::Refused(format!(
                "the upload was cut short: {received} of {declared} bytes"
            )));
        }
        (Framing::Raw, _) => {}
    }
    file.flush().await.map_err(io_failed)?;
    let file = file.into_inner();
    file.sync_all().await.map_err(io_failed)?;
    drop(file);
    let image = Spooled::new(dir.join(format!("{uid}.img")));
    tokio::fs::rename(&part.path, &image.path)
        .await
        .map_err(io_failed)?;
    part.hand_over();
    tracing::debug!("upload of {written} bytes into {}", image.path.display());
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: &[&[u8]]) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
        let owned: Vec<Result<Bytes, std::io::Error>> = parts
            .iter()
            .map(|p| Ok(Bytes::copy_from_slice(p)))
            .collect();
        futures::stream::iter(owned)
    }

    #[test]
    fn the_limit_leaves_room_for_headers_and_metadata() {
        assert_eq!(limit(8 << 20), (9 << 20) + SLACK_BYTES);
        assert_eq!(limit(u64::MAX), u64::MAX);
    }

    #[tokio::test]
    async fn a_whole_raw_upload_ends_as_the_image_and_leaves_no_part() {
        let dir = tempfile::tempdir().unwrap();
        let expected = Expected {
            declared: Some(6),
            capacity: Some(1 << 20),
        };
        let image = spool(
            dir.path(),
            "u-1",
            Framing::Raw,
            expected,
            chunks(&[b"abc", b"def"]),
        )
        .await
        .unwrap();
        assert_eq!(image.path(), dir.path().join("u-1.img"));
        assert_eq!(std::fs::read(image.path()).unwrap(), b"abcdef");
        assert!(!dir.path().join("u-1.part").exists());
        let path = image.hand_over();
        assert!(path.exists(), "a handed-over image stays");
    }

    #[tokio::test]
    async fn an_upload_cut_short_or_too_large_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let short = Expected {
            declared: Some(10),
            capacity: None,
        };
        let err = spool(dir.path(), "u", Framing::Raw, short, chunks(&[b"abc"]))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            SpoolError::Refused("the upload was cut short: 3 of 10 bytes".into())
        );
        let declared_too_large = Expected {
            declared: Some(limit(1) + 1),
            capacity: Some(1),
        };
        let err = spool(
            dir.path(),
            "u",
            Framing::Raw,
            declared_too_large,
            chunks(&[]),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("A larger PVC is required"),
            "{err}"
        );
        let big = vec![0u8; (limit(1) + 1) as usize];
        let streamed_too_large = Expected {
            declared: None,
            capacity: Some(1),
        };
        let err = spool(
            dir.path(),
            "u",
            Framing::Raw,
            streamed_too_large,
            chunks(&[&big]),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("A larger PVC is required"),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn a_form_upload_keeps_only_its_file_part() {
        let dir = tempfile::tempdir().unwrap();
        let body = b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d.img\"\r\n\r\nDISK\r\n--B--\r\n";
        let framing = Framing::form("multipart/form-data; boundary=B").unwrap();
        let image = spool(
            dir.path(),
            "u",
            framing,
            Expected::default(),
            chunks(&[body]),
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read(image.path()).unwrap(), b"DISK");
        assert!(matches!(
            Framing::form("application/octet-stream"),
            Err(SpoolError::Refused(_))
        ));
    }

    #[tokio::test]
    async fn a_uid_that_cannot_name_a_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = spool(
            dir.path(),
            "../x",
            Framing::Raw,
            Expected::default(),
            chunks(&[]),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, SpoolError::Io(_)));
    }
}
