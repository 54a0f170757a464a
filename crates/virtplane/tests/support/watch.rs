//! A watch response read line by line, event by event, with deadlines.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

/// A watch response read line by line.
pub struct Watch {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    response: reqwest::Response,
    buf: Vec<u8>,
    ended: bool,
}

pub enum Next {
    Event(Value),
    End,
    Timeout,
}

impl Watch {
    pub async fn open(client: &reqwest::Client, url: &str) -> Watch {
        // Watches may outlive the client's default request timeout.
        let response = client
            .get(url)
            .timeout(Duration::from_secs(600))
            .send()
            .await
            .expect("watch request");
        Watch {
            status: response.status(),
            headers: response.headers().clone(),
            response,
            buf: Vec::new(),
            ended: false,
        }
    }

    /// The next event, the end of the stream, or a timeout.
    pub async fn poll(&mut self, within: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let text = String::from_utf8_lossy(&line[..line.len() - 1]).to_string();
                let event: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("watch line {text:?} is not JSON: {e}"));
                return Next::Event(event);
            }
            if self.ended {
                assert!(
                    self.buf.is_empty(),
                    "watch ended inside a line: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return Next::End;
            }
            match tokio::time::timeout_at(deadline, self.response.chunk()).await {
                Err(_) => return Next::Timeout,
                Ok(Ok(Some(chunk))) => self.buf.extend_from_slice(&chunk),
                Ok(Ok(None)) => self.ended = true,
                Ok(Err(e)) => panic!("watch stream failed: {e}"),
            }
        }
    }

    /// The next event; panics on end or timeout.
    pub async fn next(&mut self) -> Value {
        match self.poll(Duration::from_secs(10)).await {
            Next::Event(e) => e,
            Next::End => panic!("watch ended while an event was expected"),
            Next::Timeout => panic!("no watch event within 10s"),
        }
    }

    /// The next event, which must be `kind` for object `name`.
    pub async fn expect(&mut self, kind: &str, name: &str) -> Value {
        let event = self.next().await;
        assert_eq!(event["type"], kind, "event {event}");
        assert_eq!(event["object"]["metadata"]["name"], name, "event {event}");
        event
    }

    /// Skips events until one satisfies `pred`.
    pub async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.poll(left).await {
                Next::Event(e) if pred(&e) => return e,
                Next::Event(_) => {}
                Next::End => panic!("watch ended before the expected event"),
                Next::Timeout => panic!("expected watch event never came"),
            }
        }
    }

    /// Asserts that nothing arrives for `quiet`.
    pub async fn assert_quiet(&mut self, quiet: Duration) {
        match self.poll(quiet).await {
            Next::Timeout => {}
            Next::Event(e) => panic!("unexpected watch event {e}"),
            Next::End => panic!("watch ended unexpectedly"),
        }
    }

    /// Reads until the server closes the stream (within `within`), returning the events.
    pub async fn drain(&mut self, within: Duration) -> Vec<Value> {
        let deadline = Instant::now() + within;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.poll(left).await {
                Next::Event(e) => out.push(e),
                Next::End => return out,
                Next::Timeout => panic!("watch not closed within {within:?}; got {out:?}"),
            }
        }
    }
}
