//! The audit log file: events are queued by requests and written, decoded and
//! serialized on a thread of its own, buffered, and flushed whenever the queue runs
//! dry and at shutdown. The queue is unbounded so that a request never waits for the
//! disk and no event is dropped; a write that fails is logged.

use std::io::Write;
use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use super::event::Record;

enum Message {
    Event(Box<Record>),
    /// Write everything queued before this, then answer.
    Flush(std::sync::mpsc::Sender<()>),
}

#[derive(Clone)]
pub struct Log {
    queue: mpsc::UnboundedSender<Message>,
}

impl Log {
    /// Opens `path` for appending (`-`: standard output) and starts its writer.
    pub fn open(path: &Path) -> Result<Log, std::io::Error> {
        let out: Box<dyn Write + Send> = if path == Path::new("-") {
            Box::new(std::io::stdout())
        } else {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            Box::new(file)
        };
        let (queue, events) = mpsc::unbounded_channel();
        let shown = path.to_path_buf();
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_events(events, std::io::BufWriter::new(out), shown))?;
        Ok(Log { queue })
    }

    pub fn send(&self, record: Record) {
        if self.queue.send(Message::Event(Box::new(record))).is_err() {
            tracing::error!("the audit log writer has stopped; an event is lost");
        }
    }

    /// Waits until every event queued so far is written out.
    pub async fn flush(&self) {
        let (done, wait) = std::sync::mpsc::channel();
        if self.queue.send(Message::Flush(done)).is_err() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || wait.recv()).await;
    }
}

fn write_events(
    mut events: mpsc::UnboundedReceiver<Message>,
    mut out: std::io::BufWriter<Box<dyn Write + Send>>,
    path: PathBuf,
) {
    let mut failing = false;
    while let Some(first) = events.blocking_recv() {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Event(record) => {
                    let result = out.write_all(&record.to_line());
                    report(&mut failing, result, &path);
                }
                Message::Flush(done) => {
                    report(&mut failing, out.flush(), &path);
                    let _ = done.send(());
                }
            }
            next = events.try_recv().ok();
        }
        report(&mut failing, out.flush(), &path);
    }
    report(&mut failing, out.flush(), &path);
}

/// Logs the first failure of a run of failures, and the recovery.
fn report(failing: &mut bool, result: std::io::Result<()>, path: &Path) {
    match result {
        Err(e) if !*failing => {
            tracing::error!("cannot write the audit log {}: {e}", path.display());
            *failing = true;
        }
        Err(_) => {}
        Ok(()) if *failing => {
            tracing::warn!("writing the audit log {} again", path.display());
            *failing = false;
        }
        Ok(()) => {}
    }
}
