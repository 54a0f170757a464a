//! Store watches over etcd watches, resumed across connection failures.
//!
//! etcd delivers a watch's events in revision order from `start_revision`, with `prev_kv`
//! when asked. A broken stream (an endpoint restarting, a leader change) is not the end of
//! the store's watch: it is opened again from the revision after the last event delivered,
//! with backoff, so callers see neither a gap nor a duplicate. Only compaction ends it,
//! with [`StoreError::Compacted`], because the history it would need is gone.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{EventType, WatchOptions};
use store::{Event, EventKind, KeyValue, Result, Revision, StoreError, WatchStream};

use crate::layout::Layout;
use crate::members::Members;

const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

pub(crate) struct Watch {
    pub members: Arc<Members>,
    pub layout: Layout,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    /// The next revision to deliver; the stream is (re)opened from here.
    pub next: Revision,
    pub current: Arc<AtomicI64>,
    pub compacted: Arc<AtomicI64>,
}

struct State {
    watch: Watch,
    stream: Option<etcd_client::WatchStream>,
    /// The member the stream is open on.
    member: usize,
    pending: VecDeque<Result<Event>>,
    backoff: Duration,
    done: bool,
}

impl Watch {
    pub fn into_stream(self) -> WatchStream {
        let state = State {
            watch: self,
            stream: None,
            member: 0,
            pending: VecDeque::new(),
            backoff: BACKOFF_FIRST,
            done: false,
        };
        Box::pin(futures::stream::unfold(state, |mut state| async move {
            let item = state.next_item().await?;
            Some((item, state))
        }))
    }
}

impl State {
    async fn next_item(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            let Some(stream) = self.stream.as_mut() else {
                self.open().await;
                continue;
            };
            match stream.message().await {
                Ok(Some(response)) => self.take(response),
                Ok(None) => self.retry("the etcd watch stream ended").await,
                Err(e) => {
                    self.watch.members.failed(self.member, &e);
                    self.retry(&format!("the etcd watch failed: {e}")).await
                }
            }
        }
    }

    async fn open(&mut self) {
        let w = &self.watch;
        let options = WatchOptions::new()
            .with_range(w.range_end.clone())
            .with_start_revision(w.next)
            .with_prev_key();
        let (member, client) = w.members.current();
        let mut watcher = crate::members::watcher(&client);
        match watcher.watch(w.key.clone(), Some(options)).await {
            Ok(stream) => {
                self.member = member;
                self.stream = Some(stream);
            }
            Err(e) => {
                w.members.failed(member, &e);
                self.retry(&format!("cannot open an etcd watch: {e}")).await
            }
        }
    }

    /// Drops the broken stream and waits before the next attempt reopens it.
    async fn retry(&mut self, why: &str) {
        tracing::warn!(
            "{why}; resuming from revision {} in {:?}",
            self.watch.next,
            self.backoff
        );
        self.stream = None;
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }

    fn take(&mut self, response: etcd_client::WatchResponse) {
        if response.canceled() {
            let compacted = response.compact_revision();
            if compacted > 0 {
                self.watch.compacted.fetch_max(compacted, Ordering::Relaxed);
                self.pending.push_back(Err(StoreError::Compacted {
                    requested: self.watch.next - 1,
                    compacted,
                }));
                self.done = true;
            } else {
                // Canceled for another reason (etcd lost its leader, ...): reopen.
                tracing::warn!(
                    "etcd canceled a watch: {}; reopening",
                    response.cancel_reason()
                );
                self.stream = None;
            }
            return;
        }
        if let Some(header) = response.header() {
            self.watch
                .current
                .fetch_max(header.revision(), Ordering::Relaxed);
        }
        for event in response.events() {
            match convert(&self.watch.layout, event) {
                Ok(event) => {
                    // The store writes one key per revision, so resuming after this
                    // revision skips nothing.
                    self.watch.next = event.kv.mod_revision + 1;
                    self.backoff = BACKOFF_FIRST;
                    self.pending.push_back(Ok(event));
                }
                Err(e) => {
                    self.pending.push_back(Err(e));
                    self.done = true;
                    return;
                }
            }
        }
    }
}

fn convert(layout: &Layout, event: &etcd_client::Event) -> Result<Event> {
    let kv = event
        .kv()
        .ok_or_else(|| StoreError::Backend("etcd sent a watch event without a key".into()))?;
    let prev = event
        .prev_kv()
        .map(|prev| crate::key_value(layout, prev))
        .transpose()?;
    match event.event_type() {
        EventType::Put => Ok(Event {
            kind: EventKind::Put,
            kv: crate::key_value(layout, kv)?,
            prev,
        }),
        EventType::Delete => {
            // etcd's delete event carries only the key and the delete's revision; the
            // store's carries the last value (prev_kv, absent only if already compacted).
            let (value, create_revision) = match &prev {
                Some(prev) => (prev.value.clone(), prev.create_revision),
                None => (Bytes::new(), 0),
            };
            Ok(Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key: layout.from_etcd(kv.key())?,
                    value,
                    create_revision,
                    mod_revision: kv.mod_revision(),
                },
                prev,
            })
        }
    }
}
