//! The store conformance suite against a real etcd the test starts (skipped loudly without
//! etcd, failed when CI or VIRTPLANE_REQUIRE_QEMU is set).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use store::Store;
use store_etcd::testing::{etcd_or_skip, EtcdServer};
use store_etcd::EtcdStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let Some(binary) = etcd_or_skip("store-etcd conformance") else {
        return;
    };
    let etcd = EtcdServer::start(&binary).await;
    // One etcd, one prefix per check: each check sees an empty store, while revisions
    // and compaction are shared (the suite asserts revisions relative to its start).
    let next = AtomicUsize::new(0);
    store::conformance::run_all(|| {
        let config = etcd.config(&format!(
            "/conformance-{}",
            next.fetch_add(1, Ordering::Relaxed)
        ));
        async move {
            Arc::new(EtcdStore::connect(config).await.expect("connect to etcd")) as Arc<dyn Store>
        }
    })
    .await;
}
