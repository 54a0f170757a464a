//! Which namespaces are active, kept from a watch so that a create need not read its
//! namespace from the store (a quorum read on etcd), as kube-apiserver's
//! NamespaceLifecycle admission keeps an informer.
//!
//! The cache only ever answers "active". Anything else — a namespace it has not seen, one
//! being deleted, one this server deleted lately (its watch may not have caught up) — is
//! read from the store, so a stale cache can only let a create through in the moment
//! another server starts deleting the namespace, which upstream allows too.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use store::{EventKind, KeyValue, ListOptions, Revision, StoreError};

use super::Registry;
use crate::stored;

pub(super) const PREFIX: &str = "/registry/core/namespaces/";

#[derive(Default)]
pub(super) struct NamespaceCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    active: HashSet<String>,
    /// Namespaces this server was asked to delete, with the store's revision after the
    /// delete: read live until the watch shows the namespace at that revision or later
    /// (upstream's force-live-lookup cache, without its 30 s timer).
    deleted_here: HashMap<String, Revision>,
}

impl NamespaceCache {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// True when the namespace is known to exist and not be terminating.
    pub(super) fn is_active(&self, namespace: &str) -> bool {
        let state = self.state();
        state.active.contains(namespace) && !state.deleted_here.contains_key(namespace)
    }

    /// A delete of `namespace` went through this server, and the store was at `revision`
    /// after it: stop trusting the cache for it until the watch has caught up.
    pub(super) fn deleting(&self, namespace: &str, revision: Revision) {
        self.state()
            .deleted_here
            .insert(namespace.to_string(), revision);
    }

    fn replace(&self, items: &[KeyValue], revision: Revision) {
        let mut state = self.state();
        state.active = items
            .iter()
            .filter(|kv| is_active(EventKind::Put, kv))
            .filter_map(|kv| kv.key.strip_prefix(PREFIX).map(str::to_string))
            .collect();
        state.deleted_here.retain(|_, at| *at > revision);
    }

    fn apply(&self, kind: EventKind, kv: &KeyValue) {
        let Some(name) = kv.key.strip_prefix(PREFIX) else {
            return;
        };
        let mut state = self.state();
        if is_active(kind, kv) {
            state.active.insert(name.to_string());
        } else {
            state.active.remove(name);
        }
        if state
            .deleted_here
            .get(name)
            .is_some_and(|at| kv.mod_revision >= *at)
        {
            state.deleted_here.remove(name);
        }
    }
}

fn is_active(kind: EventKind, kv: &KeyValue) -> bool {
    kind == EventKind::Put && matches!(stored::is_deleting(kv), Ok(false))
}

impl Registry {
    /// Keeps the namespace cache from a watch, on a task of its own, for as long as the
    /// registry lives; failures are logged and the namespaces read again with backoff.
    pub fn follow_namespaces(self: &Arc<Self>) {
        let registry = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failures = 0u32;
            loop {
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                let ended = registry.follow_namespaces_once(&mut failures).await;
                failures += 1;
                tracing::warn!("namespace watch ended ({ended}); reading the namespaces again");
                drop(registry);
                let delay = Duration::from_millis(100) * 2u32.pow(failures.min(6));
                tokio::time::sleep(delay).await;
            }
        });
    }

    /// Lists the namespaces, then follows their changes until the watch fails; why it
    /// ended. `failures` starts over once a list succeeds.
    async fn follow_namespaces_once(&self, failures: &mut u32) -> StoreError {
        let listed = match self.store.list(PREFIX, ListOptions::default()).await {
            Ok(listed) => listed,
            Err(e) => return e,
        };
        self.namespaces.replace(&listed.items, listed.revision);
        *failures = 0;
        let mut events = match self.store.watch(PREFIX, listed.revision).await {
            Ok(events) => events,
            Err(e) => return e,
        };
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => self.namespaces.apply(event.kind, &event.kv),
                Err(e) => return e,
            }
        }
        StoreError::Backend("the watch closed".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(name: &str, revision: Revision, deleting: bool) -> KeyValue {
        let meta = if deleting {
            serde_json::json!({"name": name, "deletionTimestamp": "2026-01-01T00:00:00Z"})
        } else {
            serde_json::json!({"name": name})
        };
        KeyValue {
            key: format!("{PREFIX}{name}"),
            value: serde_json::to_vec(&serde_json::json!({ "metadata": meta }))
                .unwrap()
                .into(),
            create_revision: revision,
            mod_revision: revision,
        }
    }

    #[test]
    fn only_seen_active_namespaces_are_trusted() {
        let cache = NamespaceCache::default();
        cache.replace(&[namespace("a", 1, false), namespace("b", 2, true)], 2);
        assert!(cache.is_active("a"));
        assert!(!cache.is_active("b"), "terminating");
        assert!(!cache.is_active("c"), "never seen");
        cache.apply(EventKind::Put, &namespace("c", 3, false));
        assert!(cache.is_active("c"));
        cache.apply(EventKind::Put, &namespace("c", 4, true));
        assert!(!cache.is_active("c"), "now terminating");
        cache.apply(EventKind::Delete, &namespace("a", 5, false));
        assert!(!cache.is_active("a"), "removed");
    }

    #[test]
    fn a_local_delete_is_read_live_until_the_watch_shows_it() {
        let cache = NamespaceCache::default();
        cache.replace(&[namespace("a", 1, false), namespace("b", 2, false)], 2);
        cache.deleting("a", 7);
        assert!(!cache.is_active("a"));
        cache.apply(EventKind::Put, &namespace("b", 8, false));
        assert!(!cache.is_active("a"), "the watch has not shown a since");
        cache.apply(EventKind::Put, &namespace("a", 6, true));
        assert!(!cache.is_active("a"), "terminating");
        cache.apply(EventKind::Delete, &namespace("a", 9, false));
        cache.apply(EventKind::Put, &namespace("a", 10, false));
        assert!(cache.is_active("a"), "created again after the delete");
    }
}
