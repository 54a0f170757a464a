//! A small QMP client: line-delimited JSON over the monitor's unix socket. Replies are
//! matched to requests by id and events are broadcast; replies are kept as JSON so a field
//! a QEMU version adds or drops never breaks decoding.

pub mod wire;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{broadcast, oneshot};

use wire::{Line, Message};

#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("cannot connect to QMP at {path}: {source}")]
    Connect {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("QMP connection lost")]
    Closed,
    #[error("QMP I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("QMP protocol: {0}")]
    Protocol(String),
    /// QEMU refused the command: its error class and description.
    #[error("QEMU says {class}: {desc}")]
    Command { class: String, desc: String },
    #[error("QMP command {0} timed out")]
    Timeout(String),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, QmpError>>>>>;

/// A connected, negotiated QMP session.
pub struct Qmp {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: Pending,
    next_id: AtomicU64,
    events: broadcast::Sender<Value>,
    closed: tokio::sync::watch::Receiver<bool>,
    /// Reads replies and events; aborted on drop so the connection really closes (QEMU
    /// serves one monitor client at a time).
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Qmp {
    fn drop(&mut self) {
        let reader = self.reader.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(reader) = reader.take() {
            reader.abort();
        }
    }
}

/// Events kept for a slow subscriber before it lags (and must read the state back).
const EVENT_BACKLOG: usize = 1024;

impl Qmp {
    /// Connects, retrying while QEMU creates the socket, and leaves capability
    /// negotiation mode.
    pub async fn connect(path: &Path, wait: Duration) -> Result<Qmp, QmpError> {
        let deadline = tokio::time::Instant::now() + wait;
        let stream = loop {
            match crate::socket::connect(path).await {
                Ok(s) => break s,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(QmpError::Connect {
                        path: path.display().to_string(),
                        source: e,
                    })
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let (read, write) = stream.into_split();
        let mut reader = BufReader::new(read);
        // QEMU greets at once; silence means another client holds the monitor.
        let greeting = tokio::time::timeout(
            Duration::from_secs(5),
            wire::read_line(&mut reader, wire::MAX_LINE),
        )
        .await
        .map_err(|_| QmpError::Timeout("greeting".into()))??;
        let greeting = match greeting {
            Line::Text(line) => line,
            Line::TooLong => return Err(QmpError::Protocol("overlong greeting".into())),
            Line::End => return Err(QmpError::Closed),
        };
        if !matches!(wire::parse_message(&greeting), Message::Greeting(_)) {
            return Err(QmpError::Protocol(format!(
                "unexpected greeting {}",
                String::from_utf8_lossy(&greeting)
            )));
        }
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        let (closed_tx, closed) = tokio::sync::watch::channel(false);
        let reader_pending = pending.clone();
        let reader_events = events.clone();
        let reader = tokio::spawn(async move {
            loop {
                let line = match wire::read_line(&mut reader, wire::MAX_LINE).await {
                    Ok(Line::Text(line)) => line,
                    Ok(Line::TooLong) => {
                        tracing::warn!("QMP: skipped a line over {} bytes", wire::MAX_LINE);
                        continue;
                    }
                    Ok(Line::End) | Err(_) => break,
                };
                let (id, reply) = match wire::parse_message(&line) {
                    Message::Event(event) => {
                        let _ = reader_events.send(event);
                        continue;
                    }
                    Message::Reply(id, reply) => (id, reply),
                    Message::Greeting(_) | Message::Other => continue,
                };
                let waiter = reader_pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(reply);
                }
            }
            // Whoever still waits learns that QEMU is gone.
            for (_, waiter) in reader_pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain()
            {
                let _ = waiter.send(Err(QmpError::Closed));
            }
            let _ = closed_tx.send(true);
        });
        let qmp = Qmp {
            writer: tokio::sync::Mutex::new(write),
            pending,
            next_id: AtomicU64::new(1),
            events,
            closed,
            reader: Mutex::new(Some(reader)),
        };
        qmp.execute("qmp_capabilities", None).await?;
        Ok(qmp)
    }

    /// Runs one command and returns its `return` value.
    pub async fn execute(
        &self,
        command: &str,
        arguments: Option<Value>,
    ) -> Result<Value, QmpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        let mut request = json!({"execute": command, "id": id});
        if let Some(arguments) = arguments {
            request["arguments"] = arguments;
        }
        let mut line = request.to_string();
        line.push('\n');
        {
            let mut writer = self.writer.lock().await;
            if let Err(e) = writer.write_all(line.as_bytes()).await {
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                return Err(e.into());
            }
        }
        match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(QmpError::Closed),
            Err(_) => {
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                Err(QmpError::Timeout(command.to_string()))
            }
        }
    }

    /// Closes the monitor connection, so that another client (an agent after a restart)
    /// can take the monitor.
    pub async fn close(&self) {
        let _ = self.writer.lock().await.shutdown().await;
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(reader) = reader {
            reader.abort();
            let _ = reader.await;
        }
    }

    pub fn events(&self) -> broadcast::Receiver<Value> {
        self.events.subscribe()
    }

    /// Resolves when the monitor connection ends (QEMU exited).
    pub async fn closed(&self) {
        let mut closed = self.closed.clone();
        let _ = closed.wait_for(|c| *c).await;
    }

    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// `running`, `paused`, `shutdown`, ... from `query-status`.
    pub async fn status(&self) -> Result<String, QmpError> {
        let reply = self.execute("query-status", None).await?;
        Ok(reply["status"].as_str().unwrap_or("unknown").to_string())
    }
}
