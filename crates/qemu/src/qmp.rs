//! A small QMP client: line-delimited JSON over the monitor's unix socket. Replies are
//! matched to requests by id and events are broadcast; replies are kept as JSON so a field
//! a QEMU version adds or drops never breaks decoding.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{broadcast, oneshot};

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
        let mut lines = BufReader::new(read).lines();
        // QEMU greets at once; silence means another client holds the monitor.
        let greeting = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
            .await
            .map_err(|_| QmpError::Timeout("greeting".into()))??
            .ok_or(QmpError::Closed)?;
        let greeting: Value =
            serde_json::from_str(&greeting).map_err(|e| QmpError::Protocol(e.to_string()))?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Protocol(format!(
                "unexpected greeting {greeting}"
            )));
        }
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        let (closed_tx, closed) = tokio::sync::watch::channel(false);
        let reader_pending = pending.clone();
        let reader_events = events.clone();
        let reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if message.get("event").is_some() {
                    let _ = reader_events.send(message);
                    continue;
                }
                let Some(id) = message.get("id").and_then(Value::as_u64) else {
                    continue;
                };
                let reply = match (message.get("return"), message.get("error")) {
                    (Some(value), _) => Ok(value.clone()),
                    (None, Some(error)) => Err(QmpError::Command {
                        class: error["class"]
                            .as_str()
                            .unwrap_or("GenericError")
                            .to_string(),
                        desc: error["desc"].as_str().unwrap_or("").to_string(),
                    }),
                    (None, None) => Err(QmpError::Protocol(format!(
                        "reply without return or error: {message}"
                    ))),
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
