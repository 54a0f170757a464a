//! Black-box tests of the SQLite backend: the shared conformance suite, persistence across
//! reopen, durability across `kill -9`, and group commit under concurrency.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use store::{ListOptions, Store, StoreError};
use store_sqlite::SqliteStore;

/// Set only in the child process of `acknowledged_writes_survive_kill_9`.
const CRASH_CHILD_DB: &str = "STORE_SQLITE_CRASH_CHILD_DB";

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path).expect("open SQLite store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut n = 0;
    store::conformance::run_all(|| {
        n += 1;
        let path = dir.path().join(format!("case-{n}.db"));
        async move { Arc::new(open(&path)) as Arc<dyn Store> }
    })
    .await;
}

/// An expiring write outlives a restart of the store: the reopened store deletes the key
/// at its deadline, and has no expiring write left after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiring_writes_expire_after_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("expiry.db");
    let ttl = std::time::Duration::from_secs(2);
    {
        let store = open(&path);
        store
            .create_expiring("/e/event", Bytes::from_static(b"seen"), ttl)
            .await
            .expect("create");
        store
            .create("/e/vm", Bytes::from_static(b"kept"))
            .await
            .expect("create");
    }
    let store = open(&path);
    assert!(store.get("/e/event").await.unwrap().is_some());
    let deadline = std::time::Instant::now() + 5 * ttl;
    while store.get("/e/event").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "not expired after a reopen"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(store.get("/e/vm").await.unwrap().is_some());
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let left: i64 = conn
        .query_row("SELECT count(*) FROM expiry", [], |row| row.get(0))
        .unwrap();
    assert_eq!(left, 0, "settled expiring writes stay in the table");
}

#[tokio::test]
async fn reopen_preserves_state_and_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = open(&path);
    let a = store
        .create("/r/a", Bytes::from_static(b"a1"))
        .await
        .expect("create");
    let b = store
        .create("/r/b", Bytes::from_static(b"b1"))
        .await
        .expect("create");
    let a = store
        .update("/r/a", Bytes::from_static(b"a2"), a.mod_revision)
        .await
        .expect("update");
    store
        .create("/r/c", Bytes::from_static(b"c1"))
        .await
        .expect("create");
    store.delete("/r/c", None).await.expect("delete");
    store
        .create("/r/newest", Bytes::from_static(b"n"))
        .await
        .expect("create");
    // Deleting the newest key must not let the revision go back on reopen.
    let deleted = store.delete("/r/newest", None).await.expect("delete");
    let revision = store.current_revision();
    assert_eq!(revision, deleted.mod_revision);
    let before = store.list("/", ListOptions::default()).await.expect("list");
    drop(store);

    let store = open(&path);
    assert_eq!(store.current_revision(), revision);
    assert_eq!(store.compacted_revision(), revision);
    assert_eq!(store.get("/r/a").await, Ok(Some(a)));
    assert_eq!(store.get("/r/b").await, Ok(Some(b)));
    assert_eq!(store.get("/r/c").await, Ok(None));
    assert_eq!(store.get("/r/newest").await, Ok(None));
    assert_eq!(store.list("/", ListOptions::default()).await, Ok(before));

    assert!(matches!(
        store.watch("/", revision - 1).await.err(),
        Some(StoreError::Compacted { .. })
    ));
    assert!(store.watch("/", revision).await.is_ok());
    let next = store
        .create("/r/d", Bytes::from_static(b"d"))
        .await
        .expect("create after reopen");
    assert_eq!(next.mod_revision, revision + 1);
    drop(store);
    let store = open(&path);
    assert_eq!(store.current_revision(), revision + 1);

    // The newest revision on an old row (an update of the first key) survives too.
    let a = store.get("/r/a").await.expect("get").expect("a exists");
    let updated = store
        .update("/r/a", Bytes::from_static(b"a3"), a.mod_revision)
        .await
        .expect("update");
    assert_eq!(updated.mod_revision, revision + 2);
    drop(store);
    assert_eq!(open(&path).current_revision(), revision + 2);
}

/// Rows are keyed by create revision, so a key deleted and created again must leave only
/// its new row, also when both happen in one group commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_created_again_after_delete_reopens_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = Arc::new(open(&path));
    store
        .create("/r/k", Bytes::from_static(b"first"))
        .await
        .expect("create");
    let (deleted, created) = tokio::join!(
        store.delete("/r/k", None),
        store.create("/r/other", Bytes::from_static(b"o"))
    );
    deleted.expect("delete");
    created.expect("create other");
    let again = store
        .create("/r/k", Bytes::from_static(b"second"))
        .await
        .expect("create again");
    drop(store);

    let store = open(&path);
    let keys: Vec<_> = store
        .list("/r/", ListOptions::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|kv| (kv.key, kv.value))
        .collect();
    assert_eq!(
        keys,
        [
            ("/r/k".to_string(), Bytes::from_static(b"second")),
            ("/r/other".to_string(), Bytes::from_static(b"o")),
        ]
    );
    assert_eq!(store.get("/r/k").await, Ok(Some(again)));
}

/// A data dir written by a build with schema version 1 (`kv` WITHOUT ROWID) opens with
/// every object, its revisions and the store revision intact, and is upgraded in place.
#[tokio::test]
async fn a_version_1_database_is_upgraded_with_its_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let big = vec![b'x'; 6000];
    {
        let v1 = rusqlite::Connection::open(&path).expect("create v1 database");
        v1.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL,
                 create_rev INTEGER NOT NULL, mod_rev INTEGER NOT NULL) WITHOUT ROWID;
             CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
             INSERT INTO meta (name, value) VALUES ('revision', 9);
             INSERT INTO kv VALUES ('/r/a', X'6131', 2, 7), ('/r/c', X'63', 5, 5);
             PRAGMA user_version = 1;",
        )
        .expect("write v1 layout");
        v1.execute("INSERT INTO kv VALUES ('/r/b', ?1, 3, 3)", [&big[..]])
            .expect("write a large v1 row");
    }
    let store = open(&path);
    assert_eq!(store.current_revision(), 9);
    let list = store
        .list("/r/", ListOptions::default())
        .await
        .expect("list");
    let rows: Vec<_> = list
        .items
        .iter()
        .map(|kv| {
            (
                kv.key.as_str(),
                kv.value.len(),
                kv.create_revision,
                kv.mod_revision,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [("/r/a", 2, 2, 7), ("/r/b", 6000, 3, 3), ("/r/c", 1, 5, 5)]
    );
    // Writes after the upgrade keep the key unique and go on from the stored revision.
    assert_eq!(
        store.create("/r/a", Bytes::from_static(b"dup")).await,
        Err(StoreError::AlreadyExists)
    );
    let updated = store
        .update("/r/b", Bytes::from_static(b"b2"), 3)
        .await
        .expect("update after upgrade");
    assert_eq!(updated.mod_revision, 10);
    drop(store);

    let store = open(&path);
    assert_eq!(store.current_revision(), 10);
    assert_eq!(
        store.get("/r/b").await.expect("get").map(|kv| kv.value),
        Some(Bytes::from_static(b"b2"))
    );
    drop(store);
    let version: i64 = rusqlite::Connection::open(&path)
        .and_then(|db| db.query_row("PRAGMA user_version", [], |row| row.get(0)))
        .expect("read user_version");
    assert_eq!(version, 4);
}

/// Version 2 packed every value on its own and had no `dict`: its rows read as before,
/// and values written after the upgrade are packed against a dictionary.
#[tokio::test]
async fn a_version_2_database_is_upgraded_and_keeps_its_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let old = vm_value("old");
    {
        let v2 = rusqlite::Connection::open(&path).expect("create v2 database");
        v2.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE kv (create_rev INTEGER PRIMARY KEY, key TEXT NOT NULL,
                 value BLOB NOT NULL, mod_rev INTEGER NOT NULL);
             CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
             INSERT INTO meta (name, value) VALUES ('revision', 4);
             PRAGMA user_version = 2;",
        )
        .expect("write v2 layout");
        v2.execute(
            "INSERT INTO kv VALUES (4, '/registry/g/vms/ns/old', ?1, 4)",
            [store::Packed::pack(&old).as_bytes()],
        )
        .expect("write a v2 row");
    }
    let store = open(&path);
    let got = store.get("/registry/g/vms/ns/old").await.expect("get");
    assert_eq!(got.map(|kv| kv.value), Some(Bytes::from(old.clone())));
    // A refused create is the first value of its class this build sees: no dictionary
    // may come of it that the next write relies on but the disk never got.
    assert_eq!(
        store
            .create("/registry/g/vms/ns/old", vm_value("old").into())
            .await,
        Err(StoreError::AlreadyExists)
    );
    store
        .create("/registry/g/vms/ns/new", vm_value("new").into())
        .await
        .expect("create after upgrade");
    drop(store);
    let store = open(&path);
    for name in ["old", "new"] {
        let got = store.get(&format!("/registry/g/vms/ns/{name}")).await;
        assert_eq!(
            got.expect("get").map(|kv| kv.value),
            Some(Bytes::from(vm_value(name)))
        );
    }
}

/// An object a few hundred bytes long, like a small VM.
fn vm_value(name: &str) -> Vec<u8> {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"ns","labels":{{"app":"demo"}}}},"spec":{{"runStrategy":"Always","template":{{"spec":{{"domain":{{"devices":{{"disks":[{{"name":"root","disk":{{"bus":"virtio"}}}}]}},"memory":{{"guest":"128Mi"}}}},"volumes":[{{"name":"root","containerDisk":{{"image":"quay.io/containerdisks/fedora:40"}}}}]}}}}}}}}"#
    )
    .into_bytes()
}

/// Values of one resource are packed against the first one stored, kept in `dict` in the
/// same transaction: after a reopen every value reads back whole, and the rows are small.
#[tokio::test]
async fn values_packed_against_a_dictionary_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = open(&path);
    for i in 0..20 {
        store
            .create(
                &format!("/registry/g/vms/ns/vm-{i}"),
                vm_value(&format!("vm-{i}")).into(),
            )
            .await
            .expect("create");
    }
    drop(store);
    let db = rusqlite::Connection::open(&path).expect("open");
    let dictionaries: Vec<String> = db
        .prepare("SELECT class FROM dict")
        .and_then(|mut q| q.query_map([], |row| row.get(0))?.collect())
        .expect("read dict");
    assert_eq!(dictionaries, ["/registry/g/vms/"]);
    let last_row: i64 = db
        .query_row(
            "SELECT length(value) FROM kv WHERE key = '/registry/g/vms/ns/vm-19'",
            [],
            |row| row.get(0),
        )
        .expect("row size");
    let whole = vm_value("vm-19").len() as i64;
    assert!(last_row * 4 < whole, "{last_row} of {whole} bytes");
    drop(db);
    let store = open(&path);
    for i in 0..20 {
        let got = store.get(&format!("/registry/g/vms/ns/vm-{i}")).await;
        assert_eq!(
            got.expect("get").map(|kv| kv.value),
            Some(Bytes::from(vm_value(&format!("vm-{i}"))))
        );
    }
}

/// A damaged value (a size prefix of 4 GiB on 3 bytes, a truncated block, no prefix)
/// fails the open with a message naming the file.
#[tokio::test]
async fn a_damaged_value_fails_the_open_with_a_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = open(&path);
    store
        .create("/r/a", Bytes::from_static(b"a"))
        .await
        .expect("create");
    drop(store);
    for damage in [
        &b"\xff\xff\xff\xff\x10\x61\x00"[..],
        &b"\x05\x00\x00\x00\xf0"[..],
        &b"\x01"[..],
    ] {
        rusqlite::Connection::open(&path)
            .and_then(|db| db.execute("UPDATE kv SET value = ?1", [damage]))
            .expect("damage the row");
        match SqliteStore::open(&path) {
            Err(StoreError::Backend(message)) => {
                assert!(message.contains("cannot open"), "{message}");
                assert!(message.contains("state.db"), "{message}");
            }
            Err(other) => panic!("unexpected error: {other}"),
            Ok(_) => panic!("a damaged value {damage:?} was loaded"),
        }
    }
}

#[tokio::test]
async fn second_open_of_same_file_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let first = open(&path);
    first
        .create("/k", Bytes::from_static(b"v"))
        .await
        .expect("create");
    match SqliteStore::open(&path) {
        Err(StoreError::Backend(message)) => assert!(message.contains("in use"), "{message}"),
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("a second store opened the same database"),
    }
    drop(first);
    assert_eq!(open(&path).current_revision(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_share_commits() {
    const TASKS: usize = 32;
    const PER_TASK: usize = 50;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(open(&dir.path().join("state.db")));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..PER_TASK {
                    store
                        .create(&format!("/c/{t:02}/{i:02}"), Bytes::from_static(b"v"))
                        .await
                        .expect("create");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer task");
    }
    let stats = store.stats();
    println!(
        "{} writes in {} transactions ({:.1} writes per commit)",
        stats.writes,
        stats.transactions,
        stats.writes as f64 / stats.transactions.max(1) as f64
    );
    assert_eq!(stats.writes, (TASKS * PER_TASK) as u64);
    assert!(stats.transactions >= 1 && stats.transactions <= stats.writes);
    assert_eq!(store.current_revision(), (TASKS * PER_TASK) as i64);
}

/// Runs in a child process only: writes until killed, printing each acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_writer() {
    let Some(path) = std::env::var_os(CRASH_CHILD_DB) else {
        return;
    };
    let store = Arc::new(open(Path::new(&path)));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0.. {
                    let key = format!("/crash/{t}/{i:06}");
                    let kv = store
                        .create(&key, Bytes::from(key.clone()))
                        .await
                        .expect("create");
                    println!("put {key} {}", kv.mod_revision);
                    if i % 3 == 0 {
                        let kv = store.delete(&key, None).await.expect("delete");
                        println!("del {key} {}", kv.mod_revision);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer task");
    }
}

#[tokio::test]
async fn acknowledged_writes_survive_kill_9() {
    const ACKS_BEFORE_KILL: usize = 600;
    let dir = tempfile::tempdir().expect("tempdir");
    let path: PathBuf = dir.path().join("state.db");
    let mut child = Command::new(std::env::current_exe().expect("test binary path"))
        .args(["crash_child_writer", "--exact", "--nocapture"])
        .env(CRASH_CHILD_DB, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");

    // key -> (kind of the last acknowledged write, its revision)
    let mut acked: HashMap<String, (String, i64)> = HashMap::new();
    let mut max_revision = 0;
    let mut lines = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read child output");
        let mut fields = line.split(' ');
        let (Some(kind @ ("put" | "del")), Some(key), Some(revision)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let revision: i64 = revision.parse().expect("revision");
        max_revision = max_revision.max(revision);
        acked.insert(key.to_owned(), (kind.to_owned(), revision));
        lines += 1;
        if lines == ACKS_BEFORE_KILL {
            // SIGKILL; lines already printed are still read below.
            child.kill().expect("kill child");
        }
    }
    child.wait().expect("reap child");
    assert!(
        lines >= ACKS_BEFORE_KILL,
        "child acknowledged only {lines} writes"
    );

    let store = open(&path);
    assert!(store.current_revision() >= max_revision);
    for (key, (kind, revision)) in &acked {
        let stored = store.get(key).await.expect("get");
        match kind.as_str() {
            "del" => assert_eq!(stored, None, "{key} was deleted at {revision}"),
            _ => match stored {
                Some(kv) => {
                    assert_eq!(kv.mod_revision, *revision, "{key}");
                    assert_eq!(kv.value, Bytes::from(key.clone()));
                }
                // Only keys written with i % 3 == 0 have a delete that may have committed
                // without being acknowledged.
                None => assert!(
                    key.rsplit('/')
                        .next()
                        .and_then(|i| i.parse::<u64>().ok())
                        .is_some_and(|i| i % 3 == 0),
                    "acknowledged {key} at {revision} is lost"
                ),
            },
        }
    }
    println!(
        "{} keys checked after kill -9 at revision {}",
        acked.len(),
        store.current_revision()
    );
}
