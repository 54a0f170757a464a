//! WATCH: initial state, then every change, translated into Kubernetes watch events with
//! selector transitions (an object that stops matching is DELETED for this watcher).

use apimachinery::status::Status;
use futures::{Stream, StreamExt};
use store::{EventKind, KeyValue, Revision, StoreError};

use crate::registry::{store_failure, ListRequest, Registration, Registry};

/// A change as a watcher sees it. Objects stay as stored (see `stored`) until rendered.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    Added(KeyValue),
    Modified(KeyValue),
    Deleted(KeyValue),
    /// A progress marker carrying only a resourceVersion.
    Bookmark(Revision),
    /// The end of `sendInitialEvents`' initial state, at this revision.
    InitialEventsEnd(Revision),
    Error(Status),
}

impl WatchEvent {
    pub fn revision(&self) -> Option<Revision> {
        match self {
            WatchEvent::Added(kv) | WatchEvent::Modified(kv) | WatchEvent::Deleted(kv) => {
                Some(kv.mod_revision)
            }
            WatchEvent::Bookmark(r) | WatchEvent::InitialEventsEnd(r) => Some(*r),
            WatchEvent::Error(_) => None,
        }
    }
}

/// Where a watch starts.
#[derive(Clone, Debug)]
pub enum WatchStart {
    /// Synthetic ADDED events for the current state first (resourceVersion unset or "0",
    /// or `sendInitialEvents=true`).
    WithInitialState { end_marker: bool },
    /// Only changes after this revision.
    After(Revision),
}

pub type EventStream = std::pin::Pin<Box<dyn Stream<Item = WatchEvent> + Send>>;

impl Registry {
    pub async fn watch(
        &self,
        reg: &Registration,
        request: ListRequest,
        start: WatchStart,
    ) -> Result<EventStream, Status> {
        let prefix = match request.namespace.as_deref() {
            Some(ns) if reg.info.namespaced => {
                format!("{}{ns}/", Registry::resource_prefix(reg.info))
            }
            _ => Registry::resource_prefix(reg.info),
        };
        let (initial, after, end_marker) = match start {
            // The end of the initial state is always marked: the transport shows it only
            // to clients that asked for the initial-events-end bookmark, and takes its
            // revision for later bookmarks.
            WatchStart::WithInitialState { .. } => {
                let list_request = ListRequest {
                    limit: None,
                    continue_token: None,
                    ..request.clone()
                };
                let listed = self.list(reg, &list_request).await?;
                let events: Vec<WatchEvent> =
                    listed.items.into_iter().map(WatchEvent::Added).collect();
                (events, listed.resource_version, true)
            }
            WatchStart::After(revision) => (Vec::new(), revision, false),
        };
        // A revision the store has not reached yet is not an error for a watch (the watch
        // cache simply waits): watch from now and skip events up to the requested one.
        let from = after.min(self.store.current_revision());
        let changes = match self.store.watch(&prefix, from).await {
            Ok(stream) => stream,
            Err(StoreError::Compacted { .. }) => {
                let status = Status::gone(format!(
                    "too old resource version: {after} ({})",
                    self.store.compacted_revision()
                ));
                return Ok(Box::pin(futures::stream::iter(vec![WatchEvent::Error(
                    status,
                )])));
            }
            Err(e) => return Err(store_failure(e)),
        };
        let mut head = initial;
        if end_marker {
            head.push(WatchEvent::InitialEventsEnd(after));
        }
        let filter = request;
        let changes = changes.filter_map(move |item| {
            let event = match item {
                Ok(event) if event.kv.mod_revision <= after => None,
                Ok(event) => translate(&filter, event),
                Err(StoreError::Compacted {
                    requested,
                    compacted,
                }) => Some(WatchEvent::Error(Status::gone(format!(
                    "too old resource version: {requested} ({compacted})"
                )))),
                Err(e) => Some(WatchEvent::Error(Status::internal(e))),
            };
            futures::future::ready(event)
        });
        Ok(Box::pin(futures::stream::iter(head).chain(changes)))
    }
}

/// One store event as this watcher sees it, or nothing when it concerns objects the
/// watcher's selectors exclude before and after. Objects are decoded only for selectors.
fn translate(filter: &ListRequest, event: store::Event) -> Option<WatchEvent> {
    if filter.selects_everything() {
        return Some(match (event.kind, event.prev) {
            (EventKind::Delete, _) => WatchEvent::Deleted(event.kv),
            (EventKind::Put, None) => WatchEvent::Added(event.kv),
            (EventKind::Put, Some(_)) => WatchEvent::Modified(event.kv),
        });
    }
    let matches = |kv: &KeyValue| filter.matches_stored(kv).ok();
    let now = matches(&event.kv)?;
    match event.kind {
        EventKind::Delete => now.then_some(WatchEvent::Deleted(event.kv)),
        EventKind::Put => {
            let before = event.prev.as_ref().and_then(matches);
            match (before, now, event.prev) {
                (None, true, _) | (Some(false), true, _) => Some(WatchEvent::Added(event.kv)),
                (Some(true), true, _) => Some(WatchEvent::Modified(event.kv)),
                // As upstream's cache: the last state this watcher matched, at the event's
                // resourceVersion.
                (Some(true), false, Some(prev)) => Some(WatchEvent::Deleted(KeyValue {
                    mod_revision: event.kv.mod_revision,
                    ..prev
                })),
                _ => None,
            }
        }
    }
}
