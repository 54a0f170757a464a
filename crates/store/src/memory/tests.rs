use std::time::Duration;

use futures::StreamExt;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    crate::conformance::run_all(|| async { Arc::new(MemoryStore::new()) as Arc<dyn Store> }).await;
}

async fn create_keys(store: &MemoryStore, range: std::ops::Range<usize>) {
    for i in range {
        store
            .create(&format!("/k{i}"), Bytes::from_static(b"v"))
            .await
            .expect("create");
    }
}

async fn next_event(watch: &mut WatchStream) -> Option<Result<Event>> {
    tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("no timeout")
}

/// Falling behind the live batches costs a watcher nothing while the history still
/// holds what it missed: every event arrives, once and in order.
#[tokio::test]
async fn lagging_watcher_catches_up_from_history() {
    let store = MemoryStore::with_watch_buffer(2);
    let mut watch = store.watch("/", 0).await.expect("watch");
    create_keys(&store, 0..5).await;
    for revision in 1..=5 {
        let event = next_event(&mut watch)
            .await
            .expect("an event")
            .expect("no error");
        assert_eq!(event.kv.mod_revision, revision);
    }
    // It is live again after catching up.
    create_keys(&store, 5..6).await;
    let event = next_event(&mut watch)
        .await
        .expect("an event")
        .expect("no error");
    assert_eq!(event.kv.key, "/k5");
}

#[tokio::test]
async fn lagging_watcher_past_the_history_ends_with_compacted() {
    let store = MemoryStore::with_watch_buffer(2);
    let mut watch = store.watch("/", 0).await.expect("watch");
    create_keys(&store, 0..5).await;
    store.compact(4).await.expect("compact");
    match next_event(&mut watch).await {
        Some(Err(StoreError::Compacted {
            requested,
            compacted,
        })) => {
            assert_eq!(requested, 0);
            assert_eq!(compacted, 4);
        }
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(watch.next().await.is_none(), "stream ends after the error");
}

#[test]
fn staged_batch_is_invisible_until_commit() {
    let store = MemoryStore::new();
    let batch = store.stage(vec![
        WriteOp::Create {
            key: "/a".into(),
            value: Bytes::from_static(b"1"),
        },
        WriteOp::Create {
            key: "/a".into(),
            value: Bytes::from_static(b"2"),
        },
        WriteOp::Update {
            key: "/a".into(),
            value: Bytes::from_static(b"3"),
            expected: 1,
        },
        WriteOp::Delete {
            key: "/a".into(),
            expected: Some(1),
        },
    ]);
    assert_eq!(batch.revision(), 2);
    assert_eq!(batch.changes().len(), 2);
    assert_eq!(store.read().latest("/a"), None);
    assert_eq!(store.current_revision(), 0);

    let outcomes = store.commit(batch).expect("commit");
    assert_eq!(outcomes.len(), 4);
    assert_eq!(outcomes[0].as_ref().map(|kv| kv.mod_revision), Ok(1));
    assert_eq!(outcomes[1], Err(StoreError::AlreadyExists));
    assert_eq!(outcomes[2].as_ref().map(|kv| kv.mod_revision), Ok(2));
    match &outcomes[3] {
        Err(StoreError::Conflict { current: Some(kv) }) => assert_eq!(kv.mod_revision, 2),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(store.current_revision(), 2);
    assert_eq!(
        store.read().latest("/a").map(|kv| kv.value.unpack()),
        Some(Ok(Bytes::from_static(b"3")))
    );
}

#[test]
fn stale_batch_is_rejected() {
    let store = MemoryStore::new();
    let op = || WriteOp::Create {
        key: "/a".into(),
        value: Bytes::new(),
    };
    let first = store.stage(vec![op()]);
    let second = store.stage(vec![op()]);
    store.commit(first).expect("first commit");
    assert!(matches!(store.commit(second), Err(StoreError::Backend(_))));
    assert_eq!(store.current_revision(), 1);
}

#[tokio::test]
async fn load_starts_at_persisted_revision() {
    let kv = KeyValue {
        key: "/a".into(),
        value: Bytes::from_static(b"x"),
        create_revision: 3,
        mod_revision: 5,
    };
    let store = MemoryStore::load(vec![PackedKv::pack(&kv, None)], 9, Dictionaries::default());
    assert_eq!(store.current_revision(), 9);
    assert_eq!(store.compacted_revision(), 9);
    assert_eq!(store.get("/a").await, Ok(Some(kv)));
    assert!(matches!(
        store.watch("/", 8).await.err(),
        Some(StoreError::Compacted {
            requested: 8,
            compacted: 9
        })
    ));
    assert!(store.watch("/", 9).await.is_ok());
    let next = store.create("/b", Bytes::new()).await.expect("create");
    assert_eq!(next.mod_revision, 10);
}
