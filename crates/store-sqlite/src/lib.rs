//! SQLite store backend.
//!
//! SQLite holds only the current rows and the current revision (see `layout`); the in-memory
//! [`MemoryStore`] loaded at open serves every read and watch, so no read touches the disk.
//! One writer thread owns the connection and commits whatever is queued as one transaction
//! (group commit): one fsync acknowledges many writes. While callers have announced writes
//! that have not arrived yet (see [`WriteGauge`]) it waits up to `MAX_LINGER` for them, so
//! they share the sync. A batch becomes visible to readers and watchers only after its
//! commit, and callers are answered only after that.
//!
//! A failed write (a full disk) is answered as failed and leaves the store unhealthy
//! (`health`) until a write reaches the disk again: the writer probes with an empty
//! transaction every second meanwhile. A commit whose outcome is unknown stops all writes
//! until the writer has read back from disk whether it landed and brought memory to match.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use store::expiry::{self, Deadlines, Expiring};
use store::{
    KeyValue, ListOptions, ListResult, MemoryStore, Result, Revision, StagedBatch, Store,
    StoreError, WatchStream, WriteGauge, WriteOp,
};
use tokio::sync::oneshot;

mod commit_metrics;
mod layout;

/// Most writes committed in one transaction; bounds the latency of the first one queued.
const MAX_BATCH: usize = 1000;
/// Longest a batch waits for announced writes. A commit's sync costs about a millisecond of
/// the writer's time whatever the batch size, so waiting this long at most doubles batches
/// under load, while a lone writer (nothing announced) never waits.
const MAX_LINGER: Duration = Duration::from_millis(1);
/// After this long without writes the WAL is checkpointed and truncated.
const IDLE_CHECKPOINT: Duration = Duration::from_secs(5);
/// How often an unhealthy writer tries whether the disk takes writes again.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// WAL pages (4 KiB each) after which a commit checkpoints.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 10_000;
/// How long open waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
enum SqliteError {
    #[error("{} is in use by another process (is another server running on this data dir?)", path.display())]
    Locked { path: PathBuf },
    #[error("cannot open {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{} has schema version {found}; this build understands up to {}", path.display(), layout::SCHEMA_VERSION)]
    NewerSchema { path: PathBuf, found: i64 },
    #[error("{} cannot use write-ahead logging (journal mode stays {mode})", path.display())]
    NotWal { path: PathBuf, mode: String },
    #[error("cannot start the writer thread")]
    Spawn(#[source] std::io::Error),
    #[error("writing the batch failed")]
    Write(#[source] rusqlite::Error),
    /// The commit may or may not be on disk, so the writer refuses further writes until
    /// it has read back which.
    #[error("committing the batch failed")]
    Commit(#[source] rusqlite::Error),
    #[error("a commit's outcome is not known yet (the writer checks the disk again before taking writes)")]
    Unresolved,
    #[error("the writer thread has stopped")]
    WriterGone,
}

impl From<SqliteError> for StoreError {
    fn from(err: SqliteError) -> Self {
        let mut message = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        StoreError::Backend(message)
    }
}

/// Counters of the writer thread, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Committed SQLite transactions.
    pub transactions: u64,
    /// Successful writes in those transactions.
    pub writes: u64,
}

#[derive(Default)]
struct Counters {
    transactions: AtomicU64,
    writes: AtomicU64,
}

enum Request {
    Write(Queued),
    Shutdown,
}

/// A write waiting for the writer thread.
struct Queued {
    op: WriteOp,
    /// When the write expires (`store::expiry`), if it does.
    expires: Option<u64>,
    /// Who waits for the outcome: nobody for the writer's own deletes of expired keys.
    reply: Option<oneshot::Sender<Result<KeyValue>>>,
}

/// The durable default store: SQLite in WAL mode with `synchronous=FULL`, so an acknowledged
/// write survives a crash of the process or the machine.
pub struct SqliteStore {
    index: Arc<MemoryStore>,
    requests: mpsc::Sender<Request>,
    counters: Arc<Counters>,
    /// Why writes fail now, if they do (see the module comment).
    unhealthy: Arc<std::sync::Mutex<Option<String>>>,
    gauge: WriteGauge,
    writer: Option<JoinHandle<()>>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and loads it into memory. The
    /// connection holds an exclusive lock, so a second store on the same file fails to open.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let conn = open_connection(path)?;
        let (items, revision, dictionaries) =
            layout::load(&conn).map_err(|source| open_error(path, source))?;
        let index = Arc::new(MemoryStore::load(items, revision, dictionaries));
        let mut deadlines = Deadlines::default();
        for expiring in layout::load_expiring(&conn).map_err(|source| open_error(path, source))? {
            deadlines.insert(expiring);
        }
        let counters = Arc::new(Counters::default());
        let (requests, queue) = mpsc::channel();
        let gauge = WriteGauge::default();
        let unhealthy = Arc::new(std::sync::Mutex::new(None));
        let writer = Writer {
            conn,
            index: index.clone(),
            counters: counters.clone(),
            gauge: gauge.clone(),
            unresolved: None,
            unhealthy: unhealthy.clone(),
            deadlines,
        };
        let writer = std::thread::Builder::new()
            .name("store-sqlite-writer".into())
            .spawn(move || writer.run(&queue))
            .map_err(SqliteError::Spawn)?;
        Ok(SqliteStore {
            index,
            requests,
            counters,
            unhealthy,
            gauge,
            writer: Some(writer),
        })
    }

    /// How well group commit is doing: writes per transaction under load.
    pub fn stats(&self) -> WriterStats {
        WriterStats {
            transactions: self.counters.transactions.load(Ordering::Relaxed),
            writes: self.counters.writes.load(Ordering::Relaxed),
        }
    }

    async fn submit(&self, op: WriteOp, expires: Option<u64>) -> Result<KeyValue> {
        let (reply, answer) = oneshot::channel();
        // Queued before it counts as arrived: the arrival may end the writer's wait.
        self.requests
            .send(Request::Write(Queued {
                op,
                expires,
                reply: Some(reply),
            }))
            .map_err(|_| SqliteError::WriterGone)?;
        WriteGauge::arrived();
        answer.await.map_err(|_| SqliteError::WriterGone)?
    }
}

impl Drop for SqliteStore {
    /// Waits for queued writes and closes the database, so it can be reopened at once.
    fn drop(&mut self) {
        // Sending fails only if the writer already stopped; joining then returns at once.
        let _ = self.requests.send(Request::Shutdown);
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::error!("the SQLite writer thread panicked");
            }
        }
    }
}

fn open_error(path: &Path, source: rusqlite::Error) -> SqliteError {
    match source.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => SqliteError::Locked {
            path: path.to_owned(),
        },
        _ => SqliteError::Open {
            path: path.to_owned(),
            source,
        },
    }
}

fn open_connection(path: &Path) -> Result<Connection, SqliteError> {
    let mut conn = Connection::open(path).map_err(|source| open_error(path, source))?;
    let setup = || -> rusqlite::Result<(String, i64)> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // Exclusive locking: the lock is held from the first access until close, and the
        // WAL needs no shared-memory file.
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
        let mode = conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
        // FULL syncs the WAL at every commit: NORMAL may lose acknowledged writes on power loss.
        conn.pragma_update(None, "synchronous", "FULL")?;
        // Checkpoint after ~40 MB of WAL rather than SQLite's 4 MB: a page rewritten by many
        // commits is then copied into the database once, and fewer commits pay for a copy.
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)?;
        let version = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
        Ok((mode, version))
    };
    let (mode, version) = setup().map_err(|source| open_error(path, source))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(SqliteError::NotWal {
            path: path.to_owned(),
            mode,
        });
    }
    match layout::upgrade_from(version) {
        layout::Upgrade::Current => {}
        layout::Upgrade::Apply(step) => {
            layout::apply(&mut conn, step).map_err(|source| open_error(path, source))?
        }
        layout::Upgrade::Newer => {
            return Err(SqliteError::NewerSchema {
                path: path.to_owned(),
                found: version,
            })
        }
    }
    Ok(conn)
}

struct Writer {
    conn: Connection,
    index: Arc<MemoryStore>,
    counters: Arc<Counters>,
    gauge: WriteGauge,
    /// A batch whose commit failed in a way that may or may not have reached the disk:
    /// memory waits for the disk to say which, and no other write is taken meanwhile.
    unresolved: Option<StagedBatch>,
    /// Shared with the store: why writes fail now.
    unhealthy: Arc<std::sync::Mutex<Option<String>>>,
    /// Expiring writes not yet settled, as in the `expiry` table.
    deadlines: Deadlines,
}

impl Writer {
    fn run(mut self, queue: &mpsc::Receiver<Request>) {
        let mut dirty = false;
        loop {
            let wait = if self.is_unhealthy() {
                PROBE_INTERVAL
            } else {
                dirty |= self.reap();
                self.deadlines
                    .wait()
                    .map_or(IDLE_CHECKPOINT, |due| due.min(IDLE_CHECKPOINT))
            };
            let first = match queue.recv_timeout(wait) {
                Ok(request) => request,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if self.is_unhealthy() {
                        self.probe();
                    } else if std::mem::take(&mut dirty) {
                        self.checkpoint();
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut batch = Vec::new();
            let shutdown = self.gather(first, queue, &mut batch);
            if !batch.is_empty() {
                dirty |= self.write_batch(batch, Vec::new());
            }
            if shutdown {
                return;
            }
        }
    }

    fn is_unhealthy(&self) -> bool {
        self.unhealthy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn set_unhealthy(&self, why: Option<String>) {
        *self.unhealthy.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }

    /// Collects `first` and what follows it into `batch`: everything queued, then what
    /// arrives while announced writes are still on their way, within [`MAX_LINGER`].
    /// True if a shutdown was requested.
    fn gather(
        &self,
        first: Request,
        queue: &mpsc::Receiver<Request>,
        batch: &mut Vec<Queued>,
    ) -> bool {
        let deadline = Instant::now() + MAX_LINGER;
        let mut next = Some(first);
        loop {
            while let Some(request) = next.take() {
                match request {
                    Request::Write(queued) => batch.push(queued),
                    Request::Shutdown => return true,
                }
                if batch.len() >= MAX_BATCH {
                    return false;
                }
                next = queue.try_recv().ok();
            }
            if self.gauge.preparing() == 0 || Instant::now() >= deadline {
                return false;
            }
            // Woken by the last announced write to arrive, not by each one.
            self.gauge.linger(deadline);
            next = queue.try_recv().ok();
        }
    }

    /// Deletes the keys whose expiring writes are due (those written again since stay,
    /// their delete's expected revision no longer matching) and settles those writes;
    /// true if anything was committed.
    fn reap(&mut self) -> bool {
        let due = self.deadlines.take_due(expiry::now_millis());
        if due.is_empty() {
            return false;
        }
        let deletes = due
            .iter()
            .map(|expired| Queued {
                op: WriteOp::Delete {
                    key: expired.key.clone(),
                    expected: Some(expired.revision),
                },
                expires: None,
                reply: None,
            })
            .collect();
        self.write_batch(deletes, due)
    }

    /// Stages, persists, publishes and answers one batch, settling the expiring writes
    /// `settled` with it; true if anything was committed. Settled writes of a batch that
    /// failed are due again.
    fn write_batch(&mut self, batch: Vec<Queued>, settled: Vec<Expiring>) -> bool {
        let mut ops = Vec::with_capacity(batch.len());
        let mut expires = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        for queued in batch {
            ops.push(queued.op);
            expires.push(queued.expires);
            replies.push(queued.reply);
        }
        let (outcomes, committed) = match self.resolve() {
            Err(err) => (vec![Err(err); ops.len()], None),
            Ok(()) => {
                let (writes, began) = (ops.len(), Instant::now());
                let commit = self.commit(ops, &expires, &settled);
                commit_metrics::committed(writes, began.elapsed());
                commit
            }
        };
        let wrote = committed.is_some();
        match committed {
            Some(expiring) => expiring.into_iter().for_each(|e| self.deadlines.insert(e)),
            None => settled.into_iter().for_each(|e| self.deadlines.insert(e)),
        }
        for (reply, outcome) in replies.into_iter().zip(outcomes) {
            // The caller may have stopped waiting; its write stands anyway.
            if let Some(reply) = reply {
                let _ = reply.send(outcome);
            }
        }
        wrote
    }

    /// Settles a commit of unknown outcome by the revision on disk: the batch landed
    /// (memory takes it) or it did not (memory is right as it is).
    fn resolve(&mut self) -> Result<()> {
        let Some(staged) = self.unresolved.take() else {
            return Ok(());
        };
        let on_disk = match layout::revision(&self.conn) {
            Ok(revision) => revision,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the SQLite store's revision yet");
                self.unresolved = Some(staged);
                return Err(SqliteError::Unresolved.into());
            }
        };
        if on_disk == staged.revision() && on_disk != self.index.current_revision() {
            tracing::warn!("the batch whose commit failed is on disk after all: publishing it");
            let writes = staged.changes().len() as u64;
            if let Err(err) = self.index.commit(staged) {
                tracing::error!(error = %err, "SQLite store index diverged from disk");
                return Err(err);
            }
            self.counters.transactions.fetch_add(1, Ordering::Relaxed);
            self.counters.writes.fetch_add(writes, Ordering::Relaxed);
        } else if on_disk != self.index.current_revision() {
            tracing::error!(
                on_disk,
                in_memory = self.index.current_revision(),
                "the SQLite store's revision on disk matches no known state"
            );
            self.unresolved = Some(staged);
            return Err(SqliteError::Unresolved.into());
        }
        Ok(())
    }

    /// While unhealthy: settles an unknown commit and tries an empty write transaction,
    /// which needs the disk to take a page again.
    fn probe(&mut self) {
        if self.resolve().is_err() {
            return;
        }
        let mut probe = || -> rusqlite::Result<()> {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute("UPDATE meta SET value = value WHERE name = 'revision'", [])?;
            tx.commit()
        };
        match probe() {
            Ok(()) => {
                tracing::info!("the SQLite store takes writes again");
                self.set_unhealthy(None);
            }
            Err(err) => tracing::debug!(error = %err, "the SQLite store still cannot write"),
        }
    }

    /// Commits `ops`, each expiring at `expires` if it says so, and settles the expiring
    /// writes `settled`: the outcomes, and the batch's expiring writes if it committed.
    fn commit(
        &mut self,
        ops: Vec<WriteOp>,
        expires: &[Option<u64>],
        settled: &[Expiring],
    ) -> (Vec<Result<KeyValue>>, Option<Vec<Expiring>>) {
        let count = ops.len();
        let staged = self.index.stage(ops);
        let expiring: Vec<Expiring> = expires
            .iter()
            .zip(staged.outcomes())
            .filter_map(|(expires, outcome)| match (expires, outcome) {
                (Some(at), Ok(kv)) => Some(Expiring {
                    at: *at,
                    revision: kv.mod_revision,
                    key: kv.key.clone(),
                }),
                _ => None,
            })
            .collect();
        let settled: Vec<Revision> = settled.iter().map(|e| e.revision).collect();
        let writes = staged.changes().len() as u64;
        if writes > 0 || !staged.new_dictionaries().is_empty() || !settled.is_empty() {
            if let Err(err) = persist(&mut self.conn, &staged, &expiring, &settled) {
                tracing::error!(error = %err, "SQLite store write failed");
                let unknown_outcome = matches!(err, SqliteError::Commit(_));
                let err = StoreError::from(err);
                self.set_unhealthy(Some(err.to_string()));
                if unknown_outcome {
                    self.unresolved = Some(staged);
                }
                return (vec![Err(err); count], None);
            }
            self.counters.transactions.fetch_add(1, Ordering::Relaxed);
            self.counters.writes.fetch_add(writes, Ordering::Relaxed);
            self.set_unhealthy(None);
        }
        match self.index.commit(staged) {
            Ok(outcomes) => (outcomes, Some(expiring)),
            Err(err) => {
                // Unreachable while this thread is the index's only writer; if it happens
                // the disk is ahead of memory, and only a restart reloads it.
                tracing::error!(error = %err, "SQLite store index diverged from disk");
                self.set_unhealthy(Some(format!("the store needs a restart: {err}")));
                (vec![Err(err); count], None)
            }
        }
    }

    fn checkpoint(&self) {
        if let Err(err) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        {
            tracing::warn!(error = %err, "SQLite WAL checkpoint failed");
        }
    }
}

/// Writes a staged batch and the new revision in one transaction.
fn persist(
    conn: &mut Connection,
    staged: &StagedBatch,
    expiring: &[Expiring],
    settled: &[Revision],
) -> Result<(), SqliteError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(SqliteError::Write)?;
    layout::write(&tx, staged, expiring, settled).map_err(SqliteError::Write)?;
    // Dropping an uncommitted transaction rolls it back.
    tx.commit().map_err(SqliteError::Commit)
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.index.get(key).await
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListResult> {
        self.index.list(prefix, options).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let key = key.to_owned();
        self.submit(WriteOp::Create { key, value }, None).await
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let key = key.to_owned();
        self.submit(
            WriteOp::Update {
                key,
                value,
                expected,
            },
            None,
        )
        .await
    }

    async fn create_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<KeyValue> {
        let key = key.to_owned();
        let at = expiry::deadline(ttl);
        self.submit(WriteOp::Create { key, value }, Some(at)).await
    }

    async fn update_expiring(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
        ttl: Duration,
    ) -> Result<KeyValue> {
        let key = key.to_owned();
        let at = expiry::deadline(ttl);
        self.submit(
            WriteOp::Update {
                key,
                value,
                expected,
            },
            Some(at),
        )
        .await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        let key = key.to_owned();
        self.submit(WriteOp::Delete { key, expected }, None).await
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        self.index.watch(prefix, after).await
    }

    fn current_revision(&self) -> Revision {
        self.index.current_revision()
    }

    fn compacted_revision(&self) -> Revision {
        self.index.compacted_revision()
    }

    fn write_gauge(&self) -> Option<WriteGauge> {
        Some(self.gauge.clone())
    }

    fn health(&self) -> std::result::Result<(), String> {
        match &*self.unhealthy.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// Only the in-memory history is compacted: SQLite keeps no history.
    async fn compact(&self, revision: Revision) -> Result<()> {
        self.index.compact(revision).await
    }
}
