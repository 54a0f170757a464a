//! `virtplane server --store etcd=...` as a user runs it: a real etcd started by the test, a
//! VM created through the API, the server killed and started again, and the VM still there,
//! with lists and watches whose resourceVersions (etcd revisions) keep increasing across the
//! restart. Skipped loudly without etcd; failed instead under CI or VIRTPLANE_REQUIRE_QEMU.

mod support;

use std::time::Duration;

use store::Store;
use store_etcd::testing::{etcd_or_skip, EtcdServer};
use support::*;

const VMS: &str = "virtualmachines";

fn list_rv(list: &serde_json::Value) -> i64 {
    list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("list without a resourceVersion: {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_survives_a_server_restart_on_etcd() {
    let Some(binary) = etcd_or_skip("etcd_store") else {
        return;
    };
    let etcd = EtcdServer::start(&binary).await;
    let store_flag = format!("etcd={}", etcd.url);
    let mut server = TestServer::start_with(&["--no-node", "--store", &store_flag]).await;
    let api = api_for(&server);
    let ns = "on-etcd";
    api.namespace(ns).await;
    let created = api.create(&coll(ns, VMS), &vm("vm1")).await;
    let created_rv = rv(&created);
    let listed = api.get(&coll(ns, VMS)).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(names(&listed.body), ["vm1"]);
    let before_restart = list_rv(&listed.body);
    assert!(before_restart >= created_rv);

    // The object is where kube-apiserver keeps it, under the default prefix.
    let raw = store_etcd::EtcdStore::connect(etcd.config(""))
        .await
        .expect("connect to etcd");
    let key = format!("/registry/kubevirt.io/virtualmachines/{ns}/vm1");
    let stored = raw.get(&key).await.expect("etcd get").expect("VM in etcd");
    assert!(stored.mod_revision >= created_rv);

    server.restart().await;
    let api = api_for(&server);
    let found = api.get(&item(ns, VMS, "vm1")).await;
    assert_eq!(found.status, 200, "acknowledged VM lost: {}", found.body);
    assert_eq!(uid(&found.body), uid(&created));

    // A watch from the pre-restart list sees the writes made after the restart.
    let mut watch = api
        .watch(&format!(
            "{}?watch=true&resourceVersion={before_restart}",
            coll(ns, VMS)
        ))
        .await;
    assert_eq!(watch.status, 200);
    let second = api.create(&coll(ns, VMS), &vm("vm2")).await;
    assert!(
        rv(&second) > before_restart,
        "resourceVersion went backwards across the restart: {} <= {before_restart}",
        rv(&second)
    );
    let mut last = before_restart;
    let added = loop {
        let event = watch.next().await;
        let event_rv = rv(&event["object"]);
        assert!(event_rv > last, "watch revisions must increase: {event}");
        last = event_rv;
        if event["type"] == "ADDED" && event["object"]["metadata"]["name"] == "vm2" {
            break event;
        }
    };
    assert_eq!(rv(&added["object"]), rv(&second));

    let listed = api.get(&coll(ns, VMS)).await;
    assert_eq!(names(&listed.body), ["vm1", "vm2"]);
    assert!(list_rv(&listed.body) >= rv(&second));
    assert!(list_rv(&listed.body) > before_restart);
    drop(watch);
    // Nothing else is expected of etcd here; give the server's watches a moment to close
    // before etcd goes away, so its log stays quiet.
    server.kill9();
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// etcd out of space, then gone: writes fail with etcd's words and `/readyz` says why
/// (`[-]store failed: ...`), while reads of what is there go on until etcd itself goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_reports_an_etcd_that_cannot_write() {
    let Some(binary) = etcd_or_skip("etcd_store") else {
        return;
    };
    let mut etcd = EtcdServer::start_with_quota(&binary, 2 << 20).await;
    let store_flag = format!("etcd={}", etcd.url);
    let server = TestServer::start_with(&["--no-node", "--store", &store_flag]).await;
    let api = api_for(&server);
    let readyz = || async {
        let r = api
            .anonymous
            .get(format!("{}/readyz", api.url))
            .send()
            .await
            .expect("readyz");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    };
    assert_eq!(readyz().await.0, 200);
    let blob = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        (0..512 * 1024u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect::<Vec<u8>>(),
    );
    let mut refused = None;
    for i in 0..40 {
        let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("s-{i}")}, "data": {"blob": blob}});
        let r = api
            .post("/api/v1/namespaces/default/secrets", &secret)
            .await;
        if r.status != 201 {
            refused = Some(r);
            break;
        }
    }
    let refused = refused.expect("etcd's quota never filled");
    assert_eq!(refused.status, 500, "{}", refused.text);
    assert!(
        refused.text.contains("mvcc: database space exceeded"),
        "{}",
        refused.text
    );
    let (code, body) = readyz().await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("[-]store failed: ") && body.contains("database space exceeded"),
        "{body}"
    );
    assert_eq!(
        api.get("/api/v1/namespaces/default/secrets").await.status,
        200
    );

    // No quorum at all: the probe notices without any write.
    etcd.stop();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = readyz().await;
        if code == 500 && body.contains("[-]store failed: ") && !body.contains("space exceeded") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{code} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
