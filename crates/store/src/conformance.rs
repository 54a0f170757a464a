//! The behaviour every [`Store`] backend must have, as async checks that panic on failure.
//!
//! Each check takes a fresh, empty store; [`run_all`] runs them all with a factory:
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn conformance() {
//!     store::conformance::run_all(|| async { Arc::new(MemoryStore::new()) as Arc<dyn Store> }).await;
//! }
//! ```
//!
//! Revisions are asserted relative to the store's revision when a check starts, so a backend
//! whose fresh store does not start at revision 0 still passes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::{EventKind, KeyValue, ListOptions, Revision, Store, StoreError, WatchStream};

/// How long a check waits for an event that must arrive.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a check waits to be confident that no further event arrives.
const QUIET_PERIOD: Duration = Duration::from_millis(200);

/// Runs every check, each on a new store from `factory`.
pub async fn run_all<F, Fut>(mut factory: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    macro_rules! run {
        ($($case:ident),* $(,)?) => {$(
            eprintln!("store conformance: {}", stringify!($case));
            $case(factory().await).await;
        )*};
    }
    run!(
        revisions_increase_by_one,
        create_fails_on_existing_key,
        update_is_compare_and_swap,
        delete_with_and_without_expected,
        get_returns_latest_value,
        list_is_ordered_and_prefix_isolated,
        list_pages_with_start_after_and_limit,
        list_at_old_revision,
        revision_bounds,
        compaction_keeps_current_state,
        watch_replays_from_revision,
        watch_live_events_carry_prev,
        watch_delete_event_carries_last_value,
        watch_filters_by_prefix,
        watch_replay_then_live_has_no_gaps,
        watch_before_compaction_fails,
        concurrent_writers_get_unique_revisions,
        concurrent_cas_has_one_winner,
        expiring_writes_are_deleted_by_the_store,
    );
}

fn val(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn keys(items: &[KeyValue]) -> Vec<&str> {
    items.iter().map(|kv| kv.key.as_str()).collect()
}

fn at(revision: Revision) -> ListOptions {
    ListOptions {
        revision: Some(revision),
        ..ListOptions::default()
    }
}

fn page(start_after: Option<&str>, limit: usize) -> ListOptions {
    ListOptions {
        start_after: start_after.map(str::to_owned),
        limit: Some(limit),
        revision: None,
    }
}

async fn next_event(watch: &mut WatchStream) -> crate::Event {
    match tokio::time::timeout(EVENT_TIMEOUT, watch.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(err))) => panic!("watch failed: {err}"),
        Ok(None) => panic!("watch ended early"),
        Err(_) => panic!("no watch event within {EVENT_TIMEOUT:?}"),
    }
}

async fn assert_quiet(watch: &mut WatchStream) {
    if let Ok(item) = tokio::time::timeout(QUIET_PERIOD, watch.next()).await {
        panic!("expected no further watch item, got {item:?}");
    }
}

/// Every successful write advances the revision by exactly one; failed writes do not.
pub async fn revisions_increase_by_one(store: Arc<dyn Store>) {
    let start = store.current_revision();
    let a = store.create("/rev/a", val("1")).await.expect("create");
    assert_eq!((a.create_revision, a.mod_revision), (start + 1, start + 1));
    assert_eq!(store.current_revision(), start + 1);

    let a2 = store
        .update("/rev/a", val("2"), a.mod_revision)
        .await
        .expect("update");
    assert_eq!(
        (a2.create_revision, a2.mod_revision),
        (start + 1, start + 2)
    );

    assert!(store.create("/rev/a", val("x")).await.is_err());
    assert!(store
        .update("/rev/a", val("x"), a.mod_revision)
        .await
        .is_err());
    assert!(store.delete("/rev/missing", None).await.is_err());
    assert_eq!(
        store.current_revision(),
        start + 2,
        "failed writes take no revision"
    );

    let deleted = store.delete("/rev/a", None).await.expect("delete");
    assert_eq!(deleted.mod_revision, start + 3);
    let b = store.create("/rev/b", val("1")).await.expect("create");
    assert_eq!(b.mod_revision, start + 4);
    assert_eq!(store.current_revision(), start + 4);
}

pub async fn create_fails_on_existing_key(store: Arc<dyn Store>) {
    let first = store.create("/c/k", val("1")).await.expect("create");
    assert_eq!(first.value, val("1"));
    assert_eq!(
        store.create("/c/k", val("2")).await,
        Err(StoreError::AlreadyExists)
    );
    assert_eq!(store.get("/c/k").await, Ok(Some(first.clone())));

    store.delete("/c/k", None).await.expect("delete");
    let again = store
        .create("/c/k", val("3"))
        .await
        .expect("create after delete");
    assert!(again.create_revision > first.create_revision);
    assert_eq!(again.create_revision, again.mod_revision);
}

pub async fn update_is_compare_and_swap(store: Arc<dyn Store>) {
    assert_eq!(
        store.update("/u/k", val("x"), 1).await,
        Err(StoreError::NotFound)
    );
    let created = store.create("/u/k", val("1")).await.expect("create");
    assert_eq!(
        store
            .update("/u/k", val("2"), created.mod_revision + 100)
            .await,
        Err(StoreError::Conflict {
            current: Some(created.clone())
        })
    );
    let updated = store
        .update("/u/k", val("2"), created.mod_revision)
        .await
        .expect("update");
    assert_eq!(updated.value, val("2"));
    assert_eq!(updated.create_revision, created.create_revision);
    assert!(updated.mod_revision > created.mod_revision);
    assert_eq!(store.get("/u/k").await, Ok(Some(updated.clone())));

    assert_eq!(
        store.update("/u/k", val("3"), created.mod_revision).await,
        Err(StoreError::Conflict {
            current: Some(updated.clone())
        }),
        "a stale expected revision must conflict"
    );
    assert_eq!(store.get("/u/k").await, Ok(Some(updated)));
}

pub async fn delete_with_and_without_expected(store: Arc<dyn Store>) {
    assert_eq!(store.delete("/d/k", None).await, Err(StoreError::NotFound));
    assert_eq!(
        store.delete("/d/k", Some(1)).await,
        Err(StoreError::NotFound)
    );
    let created = store.create("/d/k", val("1")).await.expect("create");
    let updated = store
        .update("/d/k", val("2"), created.mod_revision)
        .await
        .expect("update");
    assert_eq!(
        store.delete("/d/k", Some(created.mod_revision)).await,
        Err(StoreError::Conflict {
            current: Some(updated.clone())
        })
    );
    let deleted = store
        .delete("/d/k", Some(updated.mod_revision))
        .await
        .expect("delete with expected");
    assert_eq!(deleted.key, "/d/k");
    assert_eq!(deleted.value, val("2"), "delete returns the last value");
    assert_eq!(deleted.create_revision, created.create_revision);
    assert_eq!(deleted.mod_revision, updated.mod_revision + 1);
    assert_eq!(store.current_revision(), deleted.mod_revision);
    assert_eq!(store.get("/d/k").await, Ok(None));
    assert_eq!(store.delete("/d/k", None).await, Err(StoreError::NotFound));

    store.create("/d/other", val("x")).await.expect("create");
    let deleted = store
        .delete("/d/other", None)
        .await
        .expect("unconditional delete");
    assert_eq!(deleted.value, val("x"));
    assert_eq!(store.get("/d/other").await, Ok(None));
}

pub async fn get_returns_latest_value(store: Arc<dyn Store>) {
    assert_eq!(store.get("/g/k").await, Ok(None));
    let created = store.create("/g/k", val("1")).await.expect("create");
    assert_eq!(store.get("/g/k").await, Ok(Some(created.clone())));
    let updated = store
        .update("/g/k", val("2"), created.mod_revision)
        .await
        .expect("update");
    assert_eq!(store.get("/g/k").await, Ok(Some(updated)));
    assert_eq!(
        store.get("/g/").await,
        Ok(None),
        "get is exact, not a prefix"
    );
}

pub async fn list_is_ordered_and_prefix_isolated(store: Arc<dyn Store>) {
    for key in ["/a/c", "/a/a", "/ab/x", "/a/b", "/a", "/b/a", "/a/b/c"] {
        store.create(key, val(key)).await.expect("create");
    }
    let result = store
        .list("/a/", ListOptions::default())
        .await
        .expect("list");
    assert_eq!(keys(&result.items), ["/a/a", "/a/b", "/a/b/c", "/a/c"]);
    assert_eq!(result.revision, store.current_revision());
    assert_eq!(result.remaining, 0);
    for kv in &result.items {
        assert_eq!(store.get(&kv.key).await, Ok(Some(kv.clone())));
    }

    let result = store
        .list("/ab/", ListOptions::default())
        .await
        .expect("list");
    assert_eq!(keys(&result.items), ["/ab/x"]);
    let result = store.list("/", ListOptions::default()).await.expect("list");
    assert_eq!(
        keys(&result.items),
        ["/a", "/a/a", "/a/b", "/a/b/c", "/a/c", "/ab/x", "/b/a"]
    );
    let result = store
        .list("/z/", ListOptions::default())
        .await
        .expect("list");
    assert!(result.items.is_empty());
    assert_eq!(result.revision, store.current_revision());
}

pub async fn list_pages_with_start_after_and_limit(store: Arc<dyn Store>) {
    for i in 0..10 {
        store
            .create(&format!("/p/{i:02}"), val("v"))
            .await
            .expect("create");
    }
    store.create("/q/x", val("v")).await.expect("create");
    store.create("/o/x", val("v")).await.expect("create");

    let mut seen = Vec::new();
    let mut start_after: Option<String> = None;
    let mut remainders = Vec::new();
    loop {
        let result = store
            .list("/p/", page(start_after.as_deref(), 3))
            .await
            .expect("list page");
        assert!(result.items.len() <= 3);
        remainders.push(result.remaining);
        seen.extend(result.items.iter().map(|kv| kv.key.clone()));
        if result.remaining == 0 {
            break;
        }
        start_after = result.items.last().map(|kv| kv.key.clone());
    }
    let all: Vec<String> = (0..10).map(|i| format!("/p/{i:02}")).collect();
    assert_eq!(seen, all);
    assert_eq!(remainders, [7, 4, 1, 0]);

    let result = store.list("/p/", page(Some("/a"), 2)).await.expect("list");
    assert_eq!(
        keys(&result.items),
        ["/p/00", "/p/01"],
        "start_after before the prefix"
    );
    let result = store
        .list("/p/", page(Some("/p/09"), 2))
        .await
        .expect("list");
    assert!(result.items.is_empty());
    assert_eq!(result.remaining, 0);
    let result = store.list("/p/", page(None, 0)).await.expect("list");
    assert_eq!(result.items.len(), 10, "limit 0 means no limit");

    // Continuing at the first page's revision ignores writes made since.
    let first = store.list("/p/", page(None, 5)).await.expect("list");
    let p06 = store.get("/p/06").await.expect("get").expect("present");
    store
        .delete("/p/06", Some(p06.mod_revision))
        .await
        .expect("delete");
    store.create("/p/10", val("v")).await.expect("create");
    let rest = store
        .list(
            "/p/",
            ListOptions {
                start_after: first.items.last().map(|kv| kv.key.clone()),
                limit: Some(5),
                revision: Some(first.revision),
            },
        )
        .await
        .expect("list at first page's revision");
    assert_eq!(rest.revision, first.revision);
    assert_eq!(
        keys(&rest.items),
        ["/p/05", "/p/06", "/p/07", "/p/08", "/p/09"]
    );
    assert_eq!(rest.remaining, 0);
}

pub async fn list_at_old_revision(store: Arc<dyn Store>) {
    let a1 = store.create("/h/a", val("a1")).await.expect("create");
    let b1 = store.create("/h/b", val("b1")).await.expect("create");
    let a2 = store
        .update("/h/a", val("a2"), a1.mod_revision)
        .await
        .expect("update");
    let b_deleted = store.delete("/h/b", None).await.expect("delete");
    let c1 = store.create("/h/c", val("c1")).await.expect("create");
    store.create("/h/b", val("b2")).await.expect("recreate");

    let list_at = |revision: Revision| {
        let store = store.clone();
        async move {
            let result = store
                .list("/h/", at(revision))
                .await
                .expect("list at revision");
            assert_eq!(result.revision, revision);
            result.items
        }
    };
    assert_eq!(list_at(a1.mod_revision).await, std::slice::from_ref(&a1));
    assert_eq!(list_at(b1.mod_revision).await, [a1.clone(), b1.clone()]);
    assert_eq!(list_at(a2.mod_revision).await, [a2.clone(), b1.clone()]);
    assert_eq!(
        list_at(b_deleted.mod_revision).await,
        std::slice::from_ref(&a2)
    );
    assert_eq!(list_at(c1.mod_revision).await, [a2.clone(), c1.clone()]);
    assert_eq!(
        list_at(store.current_revision()).await,
        store
            .list("/h/", ListOptions::default())
            .await
            .expect("list")
            .items
    );
    assert_eq!(list_at(a1.mod_revision - 1).await, []);
}

pub async fn revision_bounds(store: Arc<dyn Store>) {
    let mut revisions = Vec::new();
    for i in 0..4 {
        let kv = store
            .create(&format!("/r/{i}"), val("v"))
            .await
            .expect("create");
        revisions.push(kv.mod_revision);
    }
    let current = store.current_revision();
    assert_eq!(
        store.list("/r/", at(current + 1)).await,
        Err(StoreError::FutureRevision {
            requested: current + 1,
            current
        })
    );
    assert!(matches!(
        store.watch("/r/", current + 1).await.err(),
        Some(StoreError::FutureRevision { .. })
    ));
    assert!(matches!(
        store.compact(current + 1).await,
        Err(StoreError::FutureRevision { .. })
    ));

    let compact_to = revisions[2];
    store.compact(compact_to).await.expect("compact");
    assert_eq!(store.compacted_revision(), compact_to);
    assert_eq!(
        store.list("/r/", at(compact_to - 1)).await,
        Err(StoreError::Compacted {
            requested: compact_to - 1,
            compacted: compact_to
        })
    );
    let result = store
        .list("/r/", at(compact_to))
        .await
        .expect("list at compacted");
    assert_eq!(keys(&result.items), ["/r/0", "/r/1", "/r/2"]);

    store
        .compact(revisions[0])
        .await
        .expect("compacting backwards is a no-op");
    assert_eq!(store.compacted_revision(), compact_to);
}

pub async fn compaction_keeps_current_state(store: Arc<dyn Store>) {
    let a = store.create("/k/a", val("1")).await.expect("create");
    store
        .update("/k/a", val("2"), a.mod_revision)
        .await
        .expect("update");
    store.create("/k/b", val("1")).await.expect("create");
    store.delete("/k/b", None).await.expect("delete");
    store.create("/k/c", val("1")).await.expect("create");
    let before = store
        .list("/k/", ListOptions::default())
        .await
        .expect("list");

    let current = store.current_revision();
    store.compact(current).await.expect("compact");
    assert_eq!(store.compacted_revision(), current);
    assert_eq!(store.current_revision(), current);
    let after = store
        .list("/k/", ListOptions::default())
        .await
        .expect("list");
    assert_eq!(after, before);
    assert_eq!(store.list("/k/", at(current)).await, Ok(before.clone()));
    for kv in &before.items {
        assert_eq!(store.get(&kv.key).await, Ok(Some(kv.clone())));
    }
    assert_eq!(store.get("/k/b").await, Ok(None));

    let mut watch = store
        .watch("/k/", current)
        .await
        .expect("watch at compacted");
    let d = store.create("/k/d", val("1")).await.expect("create");
    let event = next_event(&mut watch).await;
    assert_eq!(event.kv, d);
    let b = store.create("/k/b", val("2")).await.expect("recreate");
    assert_eq!(b.create_revision, b.mod_revision);
}

pub async fn watch_replays_from_revision(store: Arc<dyn Store>) {
    let start = store.current_revision();
    let a1 = store.create("/w/a", val("1")).await.expect("create");
    let a2 = store
        .update("/w/a", val("2"), a1.mod_revision)
        .await
        .expect("update");
    let b1 = store.create("/w/b", val("1")).await.expect("create");
    let a_deleted = store.delete("/w/a", None).await.expect("delete");

    let mut watch = store.watch("/w/", a1.mod_revision).await.expect("watch");
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Put);
    assert_eq!((event.kv, event.prev), (a2.clone(), Some(a1.clone())));
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Put);
    assert_eq!((event.kv, event.prev), (b1.clone(), None));
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Delete);
    assert_eq!(event.kv, a_deleted);
    assert_eq!(event.prev, Some(a2));
    assert_quiet(&mut watch).await;

    let mut watch = store.watch("/w/", start).await.expect("watch from start");
    let mut revisions = Vec::new();
    for _ in 0..4 {
        revisions.push(next_event(&mut watch).await.kv.mod_revision);
    }
    assert_eq!(revisions, [start + 1, start + 2, start + 3, start + 4]);

    let mut watch = store
        .watch("/w/", store.current_revision())
        .await
        .expect("watch from now");
    assert_quiet(&mut watch).await;
}

pub async fn watch_live_events_carry_prev(store: Arc<dyn Store>) {
    let mut watch = store
        .watch("/l/", store.current_revision())
        .await
        .expect("watch");
    let created = store.create("/l/k", val("1")).await.expect("create");
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Put);
    assert_eq!((event.kv, event.prev), (created.clone(), None));

    let updated = store
        .update("/l/k", val("2"), created.mod_revision)
        .await
        .expect("update");
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Put);
    assert_eq!((event.kv, event.prev), (updated.clone(), Some(created)));

    let deleted = store.delete("/l/k", None).await.expect("delete");
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Delete);
    assert_eq!((event.kv, event.prev), (deleted, Some(updated)));
    assert_quiet(&mut watch).await;
}

pub async fn watch_delete_event_carries_last_value(store: Arc<dyn Store>) {
    let v1 = store.create("/x/k", val("1")).await.expect("create");
    let v2 = store
        .update("/x/k", val("2"), v1.mod_revision)
        .await
        .expect("update");
    let v3 = store
        .update("/x/k", val("3"), v2.mod_revision)
        .await
        .expect("update");
    let mut watch = store
        .watch("/x/", store.current_revision())
        .await
        .expect("watch");
    let deleted = store
        .delete("/x/k", Some(v3.mod_revision))
        .await
        .expect("delete");
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Delete);
    assert_eq!(event.kv.key, "/x/k");
    assert_eq!(event.kv.value, val("3"));
    assert_eq!(event.kv.create_revision, v1.create_revision);
    assert_eq!(event.kv.mod_revision, deleted.mod_revision);
    assert_eq!(event.prev, Some(v3));
}

pub async fn watch_filters_by_prefix(store: Arc<dyn Store>) {
    let start = store.current_revision();
    let mut live = store.watch("/a/", start).await.expect("watch");
    for key in ["/ab/x", "/a/x", "/b/x", "/a", "/a/y"] {
        store.create(key, val(key)).await.expect("create");
    }
    let mut replay = store.watch("/a/", start).await.expect("watch");
    for watch in [&mut live, &mut replay] {
        assert_eq!(next_event(watch).await.kv.key, "/a/x");
        assert_eq!(next_event(watch).await.kv.key, "/a/y");
        assert_quiet(watch).await;
    }
}

/// A watch started while writes are in flight sees each later revision exactly once, in order.
pub async fn watch_replay_then_live_has_no_gaps(store: Arc<dyn Store>) {
    const WRITES: i64 = 300;
    let start = store.current_revision();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..WRITES {
                store
                    .create(&format!("/g/{i:04}"), val("v"))
                    .await
                    .expect("create");
            }
        })
    };
    while store.current_revision() < start + WRITES / 3 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut watch = store.watch("/g/", start).await.expect("watch");
    let mut revisions = Vec::new();
    for _ in 0..WRITES {
        revisions.push(next_event(&mut watch).await.kv.mod_revision);
    }
    writer.await.expect("writer task");
    let expected: Vec<Revision> = (start + 1..=start + WRITES).collect();
    assert_eq!(revisions, expected);
    assert_quiet(&mut watch).await;
}

pub async fn watch_before_compaction_fails(store: Arc<dyn Store>) {
    let mut revisions = Vec::new();
    for i in 0..5 {
        let kv = store
            .create(&format!("/c/{i}"), val("v"))
            .await
            .expect("create");
        revisions.push(kv.mod_revision);
    }
    let compact_to = revisions[2];
    store.compact(compact_to).await.expect("compact");
    assert_eq!(
        store.watch("/c/", compact_to - 2).await.err(),
        Some(StoreError::Compacted {
            requested: compact_to - 2,
            compacted: compact_to
        })
    );
    let mut watch = store
        .watch("/c/", compact_to)
        .await
        .expect("watch at compacted");
    assert_eq!(next_event(&mut watch).await.kv.mod_revision, revisions[3]);
    assert_eq!(next_event(&mut watch).await.kv.mod_revision, revisions[4]);
    assert_quiet(&mut watch).await;
}

pub async fn concurrent_writers_get_unique_revisions(store: Arc<dyn Store>) {
    const TASKS: usize = 32;
    const PER_TASK: usize = 50;
    let start = store.current_revision();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut revisions = Vec::with_capacity(PER_TASK);
                for i in 0..PER_TASK {
                    let kv = store
                        .create(&format!("/cc/{t:02}/{i:02}"), val("v"))
                        .await
                        .expect("concurrent create");
                    revisions.push(kv.mod_revision);
                }
                revisions
            })
        })
        .collect();
    let mut all = Vec::with_capacity(TASKS * PER_TASK);
    for task in tasks {
        let revisions = task.await.expect("writer task");
        assert!(
            revisions.windows(2).all(|w| w[0] < w[1]),
            "one writer's revisions increase"
        );
        all.extend(revisions);
    }
    all.sort_unstable();
    let total = (TASKS * PER_TASK) as Revision;
    let expected: Vec<Revision> = (start + 1..=start + total).collect();
    assert_eq!(all, expected, "revisions are unique and contiguous");
    assert_eq!(store.current_revision(), start + total);
    let listed = store
        .list("/cc/", ListOptions::default())
        .await
        .expect("list");
    assert_eq!(listed.items.len(), TASKS * PER_TASK);
}

pub async fn concurrent_cas_has_one_winner(store: Arc<dyn Store>) {
    let created = store.create("/cas/k", val("0")).await.expect("create");
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            let expected = created.mod_revision;
            tokio::spawn(async move { store.update("/cas/k", val(&i.to_string()), expected).await })
        })
        .collect();
    let mut winners = Vec::new();
    let mut conflicts = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            Ok(kv) => winners.push(kv),
            Err(StoreError::Conflict { current }) => conflicts.push(current),
            Err(err) => panic!("unexpected error: {err}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one CAS succeeds");
    assert_eq!(conflicts.len(), 15);
    for current in conflicts {
        assert_eq!(current.as_ref(), winners.first());
    }
    assert_eq!(store.get("/cas/k").await, Ok(winners.pop()));
}

/// Keys written with a time to live are deleted by the store itself, in deadline order; a
/// later write without one keeps the key, one with a longer one postpones the deletion.
pub async fn expiring_writes_are_deleted_by_the_store(store: Arc<dyn Store>) {
    let second = Duration::from_secs(1);
    let start = store.current_revision();
    let mut watch = store.watch("/ttl/", start).await.unwrap();
    store.create("/ttl/plain", val("p")).await.unwrap();
    store
        .create_expiring("/ttl/a", val("a"), second)
        .await
        .unwrap();
    let kept = store
        .create_expiring("/ttl/kept", val("k"), second)
        .await
        .unwrap();
    store
        .update("/ttl/kept", val("k2"), kept.mod_revision)
        .await
        .unwrap();
    let later = store
        .create_expiring("/ttl/later", val("l"), second)
        .await
        .unwrap();
    store
        .update_expiring("/ttl/later", val("l2"), later.mod_revision, 3 * second)
        .await
        .unwrap();
    let written = tokio::time::Instant::now();
    for _ in 0..6 {
        assert_eq!(next_event(&mut watch).await.kind, EventKind::Put);
    }
    let deleted = next_event(&mut watch).await;
    assert_eq!(
        (deleted.kind, deleted.kv.key.as_str()),
        (EventKind::Delete, "/ttl/a")
    );
    assert!(
        written.elapsed() >= Duration::from_millis(900),
        "{:?}",
        written.elapsed()
    );
    let deleted = next_event(&mut watch).await;
    assert_eq!(
        (deleted.kind, deleted.kv.key.as_str()),
        (EventKind::Delete, "/ttl/later")
    );
    assert!(
        written.elapsed() >= 3 * second - Duration::from_millis(100),
        "{:?}",
        written.elapsed()
    );
    assert_quiet(&mut watch).await;
    let left = store.list("/ttl/", ListOptions::default()).await.unwrap();
    assert_eq!(keys(&left.items), ["/ttl/kept", "/ttl/plain"]);
    assert!(store
        .create_expiring("/ttl/plain", val("again"), second)
        .await
        .is_err_and(|e| e == StoreError::AlreadyExists));
}
