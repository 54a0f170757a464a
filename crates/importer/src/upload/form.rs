//! The `file` part of a `multipart/form-data` body (CDI's `upload-form` endpoints, which
//! browsers post to), taken out as the body streams in: chunks go in, the bytes of the
//! part named `file` come out, and nothing but a delimiter's length is held back.

use memchr::memmem;

/// The most a part's header block may take.
const MAX_HEADERS: usize = 16 << 10;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    #[error("the form has no boundary in its Content-Type")]
    NoBoundary,
    #[error("a part's headers are longer than {MAX_HEADERS} bytes")]
    HeadersTooLong,
    #[error("the form ended before its file part did")]
    Truncated,
    #[error("the form has no part named \"file\"")]
    NoFile,
}

/// The boundary of a `multipart/form-data` Content-Type, or `None` for another type.
pub fn boundary(content_type: &str) -> Option<Result<String, FormError>> {
    let (essence, params) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !essence.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let boundary = params.split(';').find_map(|param| {
        let (key, value) = param.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"').to_string())
    });
    Some(
        boundary
            .filter(|b| !b.is_empty())
            .ok_or(FormError::NoBoundary),
    )
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Before the first delimiter (the preamble), or within a part that is not the file.
    Skipping,
    /// Just after a delimiter: `--` ends the form, anything else starts a part.
    AfterDelimiter,
    Headers,
    File,
    /// The file part is complete; the rest of the body is ignored.
    Done,
    /// The closing delimiter came and no part was the file.
    Closed,
}

pub struct FormReader {
    /// `\r\n--BOUNDARY`; the body is read as if it began with `\r\n`, so the first
    /// delimiter looks like the others.
    delimiter: Vec<u8>,
    pending: Vec<u8>,
    state: State,
}

impl FormReader {
    pub fn new(boundary: &str) -> FormReader {
        FormReader {
            delimiter: format!("\r\n--{boundary}").into_bytes(),
            pending: b"\r\n".to_vec(),
            state: State::Skipping,
        }
    }

    /// Whether the file part is complete (the rest of the body may be dropped).
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Takes one more chunk of the body and appends the file's bytes in it to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<(), FormError> {
        if matches!(self.state, State::Done | State::Closed) {
            return Ok(());
        }
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        loop {
            let rest = &self.pending[start..];
            match self.state {
                State::Skipping | State::File => match memmem::find(rest, &self.delimiter) {
                    Some(at) => {
                        if self.state == State::File {
                            out.extend_from_slice(&rest[..at]);
                            self.state = State::Done;
                            break;
                        }
                        start += at + self.delimiter.len();
                        self.state = State::AfterDelimiter;
                    }
                    None => {
                        // Keep what could be the start of a delimiter.
                        let keep = (self.delimiter.len() - 1).min(rest.len());
                        if self.state == State::File {
                            out.extend_from_slice(&rest[..rest.len() - keep]);
                        }
                        start += rest.len() - keep;
                        break;
                    }
                },
                State::AfterDelimiter => {
                    if rest.len() < 2 {
                        break;
                    }
                    if rest.starts_with(b"--") {
                        self.state = State::Closed;
                        break;
                    }
                    self.state = State::Headers;
                }
                State::Headers => match memmem::find(rest, b"\r\n\r\n") {
                    Some(at) => {
                        let headers = String::from_utf8_lossy(&rest[..at]);
                        let is_file = form_name(&headers).as_deref() == Some("file");
                        start += at + 4;
                        // The CRLF before the next delimiter is the delimiter's: an
                        // empty part ends right here.
                        self.state = if is_file {
                            State::File
                        } else {
                            State::Skipping
                        };
                    }
                    None if rest.len() > MAX_HEADERS => return Err(FormError::HeadersTooLong),
                    None => break,
                },
                State::Done | State::Closed => break,
            }
        }
        self.pending.drain(..start);
        Ok(())
    }

    /// The body has ended: was the file part in it, whole?
    pub fn finish(&self) -> Result<(), FormError> {
        match self.state {
            State::Done => Ok(()),
            State::Closed => Err(FormError::NoFile),
            _ => Err(FormError::Truncated),
        }
    }
}

/// The `name` parameter of a part's `Content-Disposition: form-data` header.
fn form_name(headers: &str) -> Option<String> {
    headers.split("\r\n").find_map(|line| {
        let (key, value) = line.split_once(':')?;
        if !key.trim().eq_ignore_ascii_case("content-disposition") {
            return None;
        }
        value.split(';').skip(1).find_map(|param| {
            let (k, v) = param.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("name")
                .then(|| v.trim().trim_matches('"').to_string())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(parts: &[(&str, &[u8])]) -> Vec<u8> {
        let mut body = b"preamble to ignore\r\n".to_vec();
        for (name, content) in parts {
            body.extend_from_slice(b"--XyZ\r\n");
            body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"disk.img\"\r\nContent-Type: application/octet-stream\r\n\r\n")
                    .as_bytes(),
            );
            body.extend_from_slice(content);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"--XyZ--\r\n");
        body
    }

    /// Feeds `body` in chunks of `size` and returns the file and how it ended.
    fn read(body: &[u8], size: usize) -> (Vec<u8>, Result<(), FormError>) {
        let mut reader = FormReader::new("XyZ");
        let mut out = Vec::new();
        for chunk in body.chunks(size) {
            if let Err(e) = reader.push(chunk, &mut out) {
                return (out, Err(e));
            }
        }
        let end = reader.finish();
        (out, end)
    }

    #[test]
    fn the_file_part_comes_out_whatever_the_chunking() {
        // Bytes that look like the start of a delimiter, inside the file (a form's
        // boundary never appears whole in its parts).
        let mut content: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        content.extend_from_slice(b"\r\n--XyQ is not it\r\n-");
        content.extend_from_slice(b"\r\n--Xy");
        let body = form(&[
            ("note", b"hello"),
            ("empty", b""),
            ("file", &content),
            ("after", b"x"),
        ]);
        for size in [1, 2, 3, 7, 64, 4096, body.len()] {
            let (out, end) = read(&body, size);
            assert_eq!(end, Ok(()), "chunks of {size}");
            assert!(out == content, "chunks of {size}: {} bytes out", out.len());
        }
    }

    #[test]
    fn a_form_cut_short_or_without_a_file_is_an_error() {
        let body = form(&[("file", b"0123456789")]);
        let cut = &body[..body.len() - 20];
        assert_eq!(read(cut, 5).1, Err(FormError::Truncated));
        assert_eq!(read(&form(&[("other", b"x")]), 3).1, Err(FormError::NoFile));
        assert_eq!(read(b"", 1).1, Err(FormError::Truncated));
        let mut endless = b"--XyZ\r\n".to_vec();
        endless.extend(std::iter::repeat_n(b'h', MAX_HEADERS + 10));
        assert_eq!(read(&endless, 100).1, Err(FormError::HeadersTooLong));
    }

    #[test]
    fn the_boundary_comes_from_the_content_type() {
        assert_eq!(
            boundary("multipart/form-data; boundary=----WebKit123"),
            Some(Ok("----WebKit123".into()))
        );
        assert_eq!(
            boundary("Multipart/Form-Data;boundary=\"a b\""),
            Some(Ok("a b".into()))
        );
        assert_eq!(
            boundary("multipart/form-data"),
            Some(Err(FormError::NoBoundary))
        );
        assert_eq!(boundary("application/octet-stream"), None);
    }
}
