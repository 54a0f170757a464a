//! An in-memory MVCC store.
//!
//! Used on its own in tests and as the read index of durable backends: a backend stages a
//! batch of writes here ([`MemoryStore::stage`]), persists the staged changes, and only then
//! makes them visible ([`MemoryStore::commit`]), so readers and watchers never see a write
//! that is not durable. Values are kept packed (see `packed`), history and broadcast
//! batches too; readers and watchers unpack what they take.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{
    Arc, Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak,
};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::broadcast;

use crate::expiry::{deadline, now_millis, Deadlines, Expiring};
use crate::packed::{Change, Dictionaries, Dictionary, Packed, PackedKv};
use crate::{
    Event, EventKind, KeyValue, ListOptions, ListResult, Result, Revision, Store, StoreError,
    WatchStream,
};

/// Committed batches a watcher may fall behind the live broadcast by before it catches up
/// from the history instead.
const DEFAULT_WATCH_BUFFER: usize = 4096;

/// One write of a batch, checked against the state left by the writes before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOp {
    Create {
        key: String,
        value: Bytes,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Revision,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
    },
}

impl WriteOp {
    fn key(&self) -> &str {
        match self {
            WriteOp::Create { key, .. }
            | WriteOp::Update { key, .. }
            | WriteOp::Delete { key, .. } => key,
        }
    }

    fn value(&self) -> Option<&[u8]> {
        match self {
            WriteOp::Create { value, .. } | WriteOp::Update { value, .. } => Some(value),
            WriteOp::Delete { .. } => None,
        }
    }
}

/// A batch of writes checked against the current state and given consecutive revisions, not
/// yet visible to readers. Valid only until another batch is committed.
#[derive(Debug)]
pub struct StagedBatch {
    /// The store's revision when the batch was staged.
    base: Revision,
    /// The successful writes, one per revision from `base + 1`.
    changes: Vec<Change>,
    /// The result of every op, in submission order.
    outcomes: Vec<Result<KeyValue>>,
    /// Dictionaries first made for this batch's values.
    dictionaries: Vec<Arc<Dictionary>>,
}

impl StagedBatch {
    /// The successful writes in revision order: what a durable backend must persist.
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// The result of every op, in submission order: what a durable backend learns of
    /// each op before persisting (which revision it got, or why it failed).
    pub fn outcomes(&self) -> &[Result<KeyValue>] {
        &self.outcomes
    }

    /// The store revision once this batch is committed.
    pub fn revision(&self) -> Revision {
        self.base + self.changes.len() as Revision
    }

    /// Dictionaries the changes are packed against that the store does not hold yet: a
    /// durable backend must persist them with the changes.
    pub fn new_dictionaries(&self) -> &[Arc<Dictionary>] {
        &self.dictionaries
    }
}

/// One version of a key. `value: None` is a tombstone: the key was deleted at `mod_revision`.
#[derive(Clone, Debug)]
struct Version {
    mod_revision: Revision,
    create_revision: Revision,
    value: Option<Packed>,
}

impl Version {
    fn to_kv(&self, key: &str) -> Option<PackedKv> {
        self.value.as_ref().map(|value| PackedKv {
            key: key.to_owned(),
            value: value.clone(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
        })
    }
}

#[derive(Default)]
struct State {
    /// Every key's versions newer than the compacted revision, plus the one visible at it;
    /// ascending by `mod_revision`.
    keys: BTreeMap<String, Vec<Version>>,
    current: Revision,
    compacted: Revision,
    /// One change per revision, contiguous up to `current`.
    history: VecDeque<Change>,
    dictionaries: Dictionaries,
}

impl State {
    fn latest(&self, key: &str) -> Option<PackedKv> {
        self.keys.get(key)?.last()?.to_kv(key)
    }

    /// The first revision the history can replay; `current + 1` when it is empty.
    fn history_start(&self) -> Revision {
        self.history
            .front()
            .map_or(self.current + 1, |event| event.kv.mod_revision)
    }

    /// The changes under `prefix` after revision `after`, or `None` when the history no
    /// longer reaches back to `after + 1`.
    fn replay(&self, prefix: &str, after: Revision) -> Option<VecDeque<Change>> {
        let start = self.history_start();
        if after + 1 < start {
            return None;
        }
        let skip = usize::try_from(after + 1 - start).unwrap_or(0);
        Some(
            self.history
                .iter()
                .skip(skip)
                .filter(|e| e.kv.key.starts_with(prefix))
                .cloned()
                .collect(),
        )
    }

    fn stage(&self, ops: Vec<WriteOp>) -> StagedBatch {
        // Keys written earlier in this batch: `None` means deleted.
        let mut overlay: HashMap<String, Option<PackedKv>> = HashMap::new();
        let mut changes = Vec::new();
        let mut outcomes = Vec::with_capacity(ops.len());
        let mut dictionaries = Vec::new();
        for op in ops {
            let (dictionary, made) = self.dictionary_for(&op, &dictionaries);
            let key = op.key().to_owned();
            let current = match overlay.get(&key) {
                Some(kv) => kv.clone(),
                None => self.latest(&key),
            };
            let revision = self.current + changes.len() as Revision + 1;
            match resolve(op, current, revision, dictionary.as_ref()) {
                Ok((change, outcome)) => {
                    // Only a change persists a dictionary: one made for a refused op
                    // would be taken up by the store without ever reaching the disk.
                    if let Some(made) = dictionary.filter(|_| made) {
                        dictionaries.push(made);
                    }
                    let after = (change.kind == EventKind::Put).then(|| change.kv.clone());
                    overlay.insert(key, after);
                    outcomes.push(Ok(outcome));
                    changes.push(change);
                }
                Err(err) => outcomes.push(Err(err)),
            }
        }
        StagedBatch {
            base: self.current,
            changes,
            outcomes,
            dictionaries,
        }
    }

    /// The dictionary `op`'s value is packed against: its class's, one made earlier in
    /// the batch (`made`), or one made of this value (then `true`).
    fn dictionary_for(
        &self,
        op: &WriteOp,
        made: &[Arc<Dictionary>],
    ) -> (Option<Arc<Dictionary>>, bool) {
        let key = op.key();
        if let Some(dictionary) = self.dictionaries.for_key(key) {
            return (Some(dictionary.clone()), false);
        }
        let class = Dictionaries::class(key);
        if let Some(dictionary) = made.iter().find(|d| d.class == class) {
            return (Some(dictionary.clone()), false);
        }
        let id = self.dictionaries.next_id() + made.len() as u32;
        let new = op
            .value()
            .and_then(|value| self.dictionaries.propose(key, value, id));
        (new.map(Arc::new), true)
    }

    /// Applies a staged batch; returns the committed changes for broadcasting.
    fn apply(&mut self, batch: StagedBatch) -> Result<(Vec<Change>, Vec<Result<KeyValue>>)> {
        if batch.base != self.current {
            return Err(StoreError::Backend(format!(
                "staged batch is stale: staged at revision {}, store is at {}",
                batch.base, self.current
            )));
        }
        self.current = batch.revision();
        for dictionary in batch.dictionaries {
            self.dictionaries.add(dictionary);
        }
        for change in &batch.changes {
            let value = (change.kind == EventKind::Put).then(|| change.kv.value.clone());
            self.keys
                .entry(change.kv.key.clone())
                .or_default()
                .push(Version {
                    mod_revision: change.kv.mod_revision,
                    create_revision: change.kv.create_revision,
                    value,
                });
            self.history.push_back(change.clone());
        }
        Ok((batch.changes, batch.outcomes))
    }

    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let revision = options.revision.unwrap_or(self.current);
        self.check_readable(revision)?;
        let lower = match &options.start_after {
            Some(after) if after.as_str() >= prefix => Bound::Excluded(after.as_str()),
            _ => Bound::Included(prefix),
        };
        let limit = options.limit.filter(|&n| n > 0).unwrap_or(usize::MAX);
        let mut live = self
            .keys
            .range::<str, _>((lower, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .filter_map(|(key, versions)| {
                let visible = versions.partition_point(|v| v.mod_revision <= revision);
                visible.checked_sub(1).and_then(|i| versions[i].to_kv(key))
            });
        let items = live
            .by_ref()
            .take(limit)
            .map(|kv| kv.unpack())
            .collect::<Result<Vec<KeyValue>>>()?;
        Ok(ListResult {
            items,
            revision,
            remaining: live.count(),
        })
    }

    fn check_readable(&self, revision: Revision) -> Result<()> {
        if revision < self.compacted {
            return Err(StoreError::Compacted {
                requested: revision,
                compacted: self.compacted,
            });
        }
        if revision > self.current {
            return Err(StoreError::FutureRevision {
                requested: revision,
                current: self.current,
            });
        }
        Ok(())
    }

    fn compact(&mut self, revision: Revision) -> Result<()> {
        if revision > self.current {
            return Err(StoreError::FutureRevision {
                requested: revision,
                current: self.current,
            });
        }
        if revision <= self.compacted {
            return Ok(());
        }
        self.keys.retain(|_, versions| {
            // Keep the version visible at `revision` (unless it is a tombstone) and newer ones.
            let visible = versions.partition_point(|v| v.mod_revision <= revision);
            if let Some(last) = visible.checked_sub(1) {
                let drop = if versions[last].value.is_some() {
                    last
                } else {
                    visible
                };
                versions.drain(..drop);
            }
            !versions.is_empty()
        });
        while self
            .history
            .front()
            .is_some_and(|event| event.kv.mod_revision < revision)
        {
            self.history.pop_front();
        }
        self.compacted = revision;
        Ok(())
    }
}

/// Checks one op against the key's current value and builds its change at `revision`,
/// with the op's outcome.
fn resolve(
    op: WriteOp,
    current: Option<PackedKv>,
    revision: Revision,
    dictionary: Option<&Arc<Dictionary>>,
) -> Result<(Change, KeyValue)> {
    let conflict = |current: PackedKv| {
        Err(StoreError::Conflict {
            current: Some(current.unpack()?),
        })
    };
    match (op, current) {
        (WriteOp::Create { .. }, Some(_)) => Err(StoreError::AlreadyExists),
        (WriteOp::Create { key, value }, None) => {
            let written = KeyValue {
                key,
                value,
                create_revision: revision,
                mod_revision: revision,
            };
            let change = Change {
                kind: EventKind::Put,
                kv: PackedKv::pack(&written, dictionary),
                prev: None,
            };
            Ok((change, written))
        }
        (WriteOp::Update { .. } | WriteOp::Delete { .. }, None) => Err(StoreError::NotFound),
        (
            WriteOp::Update {
                key,
                value,
                expected,
            },
            Some(prev),
        ) => {
            if prev.mod_revision != expected {
                return conflict(prev);
            }
            let written = KeyValue {
                key,
                value,
                create_revision: prev.create_revision,
                mod_revision: revision,
            };
            let change = Change {
                kind: EventKind::Put,
                kv: PackedKv::pack(&written, dictionary),
                prev: Some(prev),
            };
            Ok((change, written))
        }
        (WriteOp::Delete { expected, .. }, Some(prev)) => {
            if expected.is_some_and(|expected| expected != prev.mod_revision) {
                return conflict(prev);
            }
            let deleted = PackedKv {
                mod_revision: revision,
                ..prev.clone()
            };
            let outcome = deleted.unpack()?;
            let change = Change {
                kind: EventKind::Delete,
                kv: deleted,
                prev: Some(prev),
            };
            Ok((change, outcome))
        }
    }
}

struct Shared {
    state: RwLock<State>,
    /// Committed batches, sent while the state's write lock is held so that a watcher that
    /// subscribes under the read lock sees every later batch and no earlier one.
    events: broadcast::Sender<Arc<[Change]>>,
    /// Expiring writes, and whether their reaper thread runs (it holds only a weak
    /// reference, so it stops once the store is dropped).
    expiring: Mutex<(Deadlines, bool)>,
    expiring_changed: Condvar,
}

impl Shared {
    // A panic while holding the lock cannot leave the state half-updated (writes are
    // validated before anything is mutated), so a poisoned lock is still usable.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The in-memory MVCC store. Old versions and the event history are kept until
/// [`Store::compact`], so callers must compact periodically to bound memory.
pub struct MemoryStore {
    shared: Arc<Shared>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store at revision 0.
    pub fn new() -> Self {
        Self::with_watch_buffer(DEFAULT_WATCH_BUFFER)
    }

    /// An empty store whose watchers catch up from the history once they lag the live
    /// broadcast by more than `batches` committed batches.
    pub fn with_watch_buffer(batches: usize) -> Self {
        Self::from_state(State::default(), batches)
    }

    /// A store holding `items` at `revision`, as a durable backend finds them on restart.
    /// No history is kept, so reads and watches before `revision` get `Compacted`. The
    /// revision is raised to the newest item's if it is older, so it never goes backwards.
    pub fn load(items: Vec<PackedKv>, revision: Revision, dictionaries: Dictionaries) -> Self {
        let mut state = State {
            dictionaries,
            ..State::default()
        };
        for kv in items {
            state.current = state.current.max(kv.mod_revision);
            state.keys.insert(
                kv.key,
                vec![Version {
                    mod_revision: kv.mod_revision,
                    create_revision: kv.create_revision,
                    value: Some(kv.value),
                }],
            );
        }
        state.current = state.current.max(revision);
        state.compacted = state.current;
        Self::from_state(state, DEFAULT_WATCH_BUFFER)
    }

    fn from_state(state: State, watch_buffer: usize) -> Self {
        let (events, _) = broadcast::channel(watch_buffer.max(1));
        Self {
            shared: Arc::new(Shared {
                state: RwLock::new(state),
                events,
                expiring: Mutex::new((Deadlines::default(), false)),
                expiring_changed: Condvar::new(),
            }),
        }
    }

    // See `Shared::read` for why a poisoned lock is still usable.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.shared.read()
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.shared
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks `ops` in order against the current state (each op sees the ones before it) and
    /// assigns consecutive revisions to the successful ones, without making them visible.
    /// Only one stager/committer may run at a time; a batch is stale once another commits.
    pub fn stage(&self, ops: Vec<WriteOp>) -> StagedBatch {
        self.read().stage(ops)
    }

    /// Makes a staged batch visible, broadcasts its events to watchers, and returns the result
    /// of every op in submission order. Fails if another batch was committed since staging.
    pub fn commit(&self, batch: StagedBatch) -> Result<Vec<Result<KeyValue>>> {
        let mut state = self.write();
        let (events, outcomes) = state.apply(batch)?;
        self.broadcast(events);
        Ok(outcomes)
    }

    /// Must be called with the state's write lock held (see [`Shared::events`]).
    fn broadcast(&self, changes: Vec<Change>) {
        if !changes.is_empty() {
            // An error only means nobody is watching.
            let _ = self.shared.events.send(changes.into());
        }
    }

    /// Queues the deletion of `written` at `at`, starting the reaper on first use.
    fn expire(&self, written: &KeyValue, at: u64) {
        let mut expiring = self
            .shared
            .expiring
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        expiring.0.insert(Expiring {
            at,
            revision: written.mod_revision,
            key: written.key.clone(),
        });
        if !std::mem::replace(&mut expiring.1, true) {
            let shared = Arc::downgrade(&self.shared);
            std::thread::Builder::new()
                .name("store-memory-expiry".into())
                .spawn(move || reap(shared))
                .expect("spawn the memory store's expiry thread");
        }
        self.shared.expiring_changed.notify_one();
    }

    fn write_one(&self, op: WriteOp) -> Result<KeyValue> {
        let mut state = self.write();
        let batch = state.stage(vec![op]);
        let (events, outcomes) = state.apply(batch)?;
        self.broadcast(events);
        outcomes
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(StoreError::Backend("write produced no outcome".into())))
    }
}

/// Deletes expired writes until the store is dropped.
fn reap(shared: Weak<Shared>) {
    // Checked at least this often, so the thread notices a dropped store.
    const LONGEST_SLEEP: Duration = Duration::from_secs(1);
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let due = {
            let expiring = strong
                .expiring
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let wait = expiring
                .0
                .wait()
                .unwrap_or(LONGEST_SLEEP)
                .min(LONGEST_SLEEP);
            let (mut expiring, _) = strong
                .expiring_changed
                .wait_timeout(expiring, wait)
                .unwrap_or_else(PoisonError::into_inner);
            expiring.0.take_due(now_millis())
        };
        let store = MemoryStore { shared: strong };
        for expired in due {
            // Conflict or NotFound: written again or deleted since, nothing to do.
            let _ = store.write_one(WriteOp::Delete {
                key: expired.key,
                expected: Some(expired.revision),
            });
        }
    }
}

/// Where a watch stream is: events it still has to send, then live batches.
struct WatchCursor {
    shared: Arc<Shared>,
    prefix: String,
    /// The highest revision already considered (sent or filtered out).
    position: Revision,
    pending: VecDeque<Change>,
    live: broadcast::Receiver<Arc<[Change]>>,
    ended: bool,
}

impl WatchCursor {
    async fn next(mut self) -> Option<(Result<Event>, Self)> {
        loop {
            if self.ended {
                return None;
            }
            if let Some(change) = self.pending.pop_front() {
                let event = change.unpack();
                // A value that cannot be read ends the stream, as compacted history does.
                self.ended = event.is_err();
                return Some((event, self));
            }
            match self.live.recv().await {
                Ok(batch) => {
                    let prefix = &self.prefix;
                    let position = self.position;
                    self.pending.extend(
                        batch
                            .iter()
                            .filter(|e| {
                                e.kv.mod_revision > position && e.kv.key.starts_with(prefix)
                            })
                            .cloned(),
                    );
                    if let Some(last) = batch.last() {
                        self.position = self.position.max(last.kv.mod_revision);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // The live batches went on without this watcher, but the history may
                    // still hold what it missed: it catches up from there, as a watch
                    // started at its position would. Only history compacted past its
                    // position ends it.
                    let state = self.shared.read();
                    match state.replay(&self.prefix, self.position) {
                        Some(missed) => {
                            // Under the read lock, as in `watch`: no batch falls between.
                            self.live = self.shared.events.subscribe();
                            self.pending.extend(missed);
                            self.position = state.current;
                        }
                        None => {
                            let err = StoreError::Compacted {
                                requested: self.position,
                                compacted: state.compacted,
                            };
                            drop(state);
                            self.ended = true;
                            return Some((Err(err), self));
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let latest = self.read().latest(key);
        latest.map(|kv| kv.unpack()).transpose()
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListResult> {
        self.read().list(prefix, &options)
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.write_one(WriteOp::Create {
            key: key.to_owned(),
            value,
        })
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        self.write_one(WriteOp::Update {
            key: key.to_owned(),
            value,
            expected,
        })
    }

    async fn create_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<KeyValue> {
        let at = deadline(ttl);
        let created = self.create(key, value).await?;
        self.expire(&created, at);
        Ok(created)
    }

    async fn update_expiring(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
        ttl: Duration,
    ) -> Result<KeyValue> {
        let at = deadline(ttl);
        let updated = self.update(key, value, expected).await?;
        self.expire(&updated, at);
        Ok(updated)
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        self.write_one(WriteOp::Delete {
            key: key.to_owned(),
            expected,
        })
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let state = self.read();
        if after > state.current {
            return Err(StoreError::FutureRevision {
                requested: after,
                current: state.current,
            });
        }
        let Some(pending) = state.replay(prefix, after) else {
            return Err(StoreError::Compacted {
                requested: after,
                compacted: state.compacted,
            });
        };
        // Subscribing under the read lock: every batch committed later reaches `live`.
        let live = self.shared.events.subscribe();
        let cursor = WatchCursor {
            shared: self.shared.clone(),
            prefix: prefix.to_owned(),
            position: state.current,
            pending,
            live,
            ended: false,
        };
        drop(state);
        Ok(Box::pin(futures::stream::unfold(cursor, WatchCursor::next)))
    }

    fn current_revision(&self) -> Revision {
        self.read().current
    }

    fn compacted_revision(&self) -> Revision {
        self.read().compacted
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.write().compact(revision)
    }
}

#[cfg(test)]
mod tests;
