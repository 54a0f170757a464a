//! The QMP wire format apart from the socket: bounded line framing and what one line says.
//! Kept free of the connection so that the fuzzer (`fuzz/fuzz_targets/qmp.rs`) drives the
//! same code the client runs.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use super::QmpError;

/// Longest line kept. A longer one is dropped whole, so a runaway monitor cannot grow the
/// agent's memory without bound; the replies we ask for are a few KiB.
pub const MAX_LINE: usize = 16 << 20;

/// One line read by [`read_line`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// The bytes up to (not including) the newline.
    Text(Vec<u8>),
    /// A line longer than the limit, skipped.
    TooLong,
    /// The stream ended (a last line without a newline is still returned first).
    End,
}

/// Reads one newline-terminated line as bytes: QMP is JSON, but a stray non-UTF-8 byte
/// must cost one message, not the whole connection.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::End,
                (false, false) => Line::Text(line),
            });
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long && line.len() + chunk.len() <= limit {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line = Vec::new();
        }
        let consumed = done.unwrap_or(available.len());
        reader.consume(consumed);
        if done.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Text(line)
            });
        }
    }
}

/// What one line from the monitor says.
#[derive(Debug)]
pub enum Message {
    /// The greeting (`{"QMP": {...}}`).
    Greeting(Value),
    /// An asynchronous event, passed on whole.
    Event(Value),
    /// The answer to the request with this id.
    Reply(u64, Result<Value, QmpError>),
    /// Not JSON, or JSON we did not ask for (a reply without our numeric id).
    Other,
}

/// Classifies one line. Never fails: whatever QEMU (or something posing as it) writes is
/// at worst [`Message::Other`].
pub fn parse_message(line: &[u8]) -> Message {
    let Ok(message) = serde_json::from_slice::<Value>(line) else {
        return Message::Other;
    };
    if message.get("QMP").is_some() {
        return Message::Greeting(message);
    }
    if message.get("event").is_some() {
        return Message::Event(message);
    }
    let Some(id) = message.get("id").and_then(Value::as_u64) else {
        return Message::Other;
    };
    let reply = match (message.get("return"), message.get("error")) {
        (Some(value), _) => Ok(value.clone()),
        (None, Some(error)) => Err(QmpError::Command {
            class: error
                .get("class")
                .and_then(Value::as_str)
                .unwrap_or("GenericError")
                .to_string(),
            desc: error
                .get("desc")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        }),
        (None, None) => Err(QmpError::Protocol(format!(
            "reply without return or error: {message}"
        ))),
    };
    Message::Reply(id, reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(data: &[u8], capacity: usize, limit: usize) -> Vec<Line> {
        let mut reader = tokio::io::BufReader::with_capacity(capacity, data);
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, limit).await.unwrap() {
                Line::End => return out,
                line => out.push(line),
            }
        }
    }

    #[tokio::test]
    async fn frames_lines_across_buffer_boundaries() {
        let text = |s: &str| Line::Text(s.as_bytes().to_vec());
        for capacity in [1, 2, 3, 64] {
            assert_eq!(
                lines(b"{\"a\":1}\n\n{\"b\"}\nlast", capacity, 100).await,
                vec![text("{\"a\":1}"), text(""), text("{\"b\"}"), text("last")]
            );
        }
    }

    #[tokio::test]
    async fn overlong_lines_are_skipped_and_reading_goes_on() {
        for capacity in [1, 4, 64] {
            assert_eq!(
                lines(b"0123456789\nok\n0123456789", capacity, 5).await,
                vec![Line::TooLong, Line::Text(b"ok".to_vec()), Line::TooLong]
            );
        }
    }

    #[test]
    fn non_utf8_costs_one_line() {
        assert!(matches!(parse_message(b"{\"id\":1,\xff}"), Message::Other));
        assert!(matches!(
            parse_message(b"{\"id\":2,\"return\":{}}"),
            Message::Reply(2, Ok(_))
        ));
    }

    #[test]
    fn errors_of_any_shape_are_command_errors() {
        // Non-string class/desc and a non-object error fall back rather than panic.
        for line in [
            &b"{\"id\":3,\"error\":{\"class\":7}}"[..],
            b"{\"id\":3,\"error\":\"boom\"}",
        ] {
            match parse_message(line) {
                Message::Reply(3, Err(QmpError::Command { class, desc })) => {
                    assert_eq!((class.as_str(), desc.as_str()), ("GenericError", ""));
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
