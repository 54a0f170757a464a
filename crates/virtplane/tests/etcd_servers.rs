//! Two `virtplane server` processes on one real etcd, as a user runs them: the second
//! shares the first's PKI (`--pki-dir`), so the first one's admin kubeconfig works
//! against both; a watch on one server sees a VM created through the other; the
//! controllers run on one server only (the Lease holder); and when that server is killed,
//! the other takes the lease over and its controllers act (a deleted VMI of an `Always` VM
//! comes back). Skipped loudly without etcd; failed instead under CI or
//! VIRTPLANE_REQUIRE_QEMU.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use store_etcd::testing::{etcd_or_skip, EtcdServer};
use support::*;

const NS: &str = "default";

async fn running_vmi(api: &Api, name: &str, within: Duration) -> Value {
    api.eventually(&item(NS, "virtualmachineinstances", name), within, |r| {
        r.body["status"]["phase"] == "Running"
    })
    .await
    .body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_serve_one_api_and_the_survivor_takes_over_the_controllers() {
    let Some(binary) = etcd_or_skip("etcd_servers") else {
        return;
    };
    let etcd = EtcdServer::start(&binary).await;
    let store_flag = format!("etcd={}", etcd.url);
    let mut first = TestServer::start_with(&["--no-node", "--store", &store_flag]).await;
    let on_first = api_for(&first);
    on_first
        .eventually(CONTROLLER_LEASE, Duration::from_secs(30), |r| {
            r.status == 200
        })
        .await;
    assert_eq!(holder(&on_first).await, identity(&first));

    let pki = first.data_dir().join("pki");
    let pki_flag = pki.display().to_string();
    let second = TestServer::start_with(&[
        "--no-node",
        "--sim-nodes",
        "2",
        "--store",
        &store_flag,
        "--pki-dir",
        &pki_flag,
    ])
    .await;
    // The first server's credentials, against the second server.
    let on_second = Api::connect(&second.url, first.data_dir());
    assert_eq!(on_second.get("/api/v1/nodes").await.status, 200);
    assert_ne!(identity(&first), identity(&second));

    // A watch on the first server sees what is written through the second.
    let listed = on_first.get(&coll(NS, "virtualmachines")).await.body;
    let from = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let mut watch = on_first
        .watch(&format!(
            "{}?watch=true&resourceVersion={from}",
            coll(NS, "virtualmachines")
        ))
        .await;
    let mut body = vm("always");
    body["spec"].as_object_mut().unwrap().remove("running");
    body["spec"]["runStrategy"] = json!("Always");
    on_second.create(&coll(NS, "virtualmachines"), &body).await;
    let added = watch
        .until(|e| e["type"] == "ADDED" && e["object"]["metadata"]["name"] == "always")
        .await;
    assert_eq!(added["object"]["spec"]["runStrategy"], "Always");

    // The first server's controllers start it on the second server's nodes.
    let vmi = running_vmi(&on_second, "always", Duration::from_secs(60)).await;
    assert!(
        vmi["status"]["nodeName"]
            .as_str()
            .is_some_and(|n| n.starts_with("sim-node-")),
        "{vmi}"
    );
    assert_eq!(holder(&on_second).await, identity(&first));

    // The holder dies: the survivor takes the lease, and its controllers act.
    first.kill9();
    let deadline = Instant::now() + Duration::from_secs(60);
    while holder(&on_second).await != identity(&second) {
        assert!(
            Instant::now() < deadline,
            "the second server never took the lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lease = on_second.get(CONTROLLER_LEASE).await.body;
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");
    let old_uid = uid(&vmi);
    let r = on_second
        .delete(&item(NS, "virtualmachineinstances", "always"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = on_second
            .get(&item(NS, "virtualmachineinstances", "always"))
            .await;
        if r.status == 200 && uid(&r.body) != old_uid && r.body["status"]["phase"] == "Running" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the survivor's controllers never started the VM again: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Each server remembers what it wrote last as a guess of an object's current value
/// (skipping etcd's read on the next update). Patches alternating between two servers,
/// each one's guess stale after the other's write, must all land: none is lost, none is
/// applied to an older object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_through_two_servers_lose_nothing() {
    let Some(binary) = etcd_or_skip("etcd_servers") else {
        return;
    };
    let etcd = EtcdServer::start(&binary).await;
    let store_flag = format!("etcd={}", etcd.url);
    let first = TestServer::start_with(&["--no-node", "--store", &store_flag]).await;
    let pki_flag = first.data_dir().join("pki").display().to_string();
    let second =
        TestServer::start_with(&["--no-node", "--store", &store_flag, "--pki-dir", &pki_flag])
            .await;
    let servers = [api_for(&first), Api::connect(&second.url, first.data_dir())];
    servers[0]
        .create(&coll(NS, "virtualmachines"), &vm("shared"))
        .await;
    let path = item(NS, "virtualmachines", "shared");
    for i in 0..10 {
        let patch = json!({"metadata": {"labels": {format!("step-{i}"): "done"}}}).to_string();
        let reply = servers[i % 2]
            .patch(&path, "application/merge-patch+json", &patch)
            .await;
        assert_eq!(reply.status, 200, "patch {i}: {}", reply.body);
    }
    let stored = servers[1].get(&path).await.body;
    for i in 0..10 {
        assert_eq!(
            stored["metadata"]["labels"][format!("step-{i}")],
            "done",
            "label of patch {i} lost: {}",
            stored["metadata"]["labels"]
        );
    }
    // A stale resourceVersion is still refused, whichever server remembers what.
    let mut stale = stored.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["metadata"]["labels"]["late"] = json!("yes");
    assert_eq!(servers[0].put(&path, &stale).await.status, 409);

    // What a server concludes without writing is checked against etcd, not its guess.
    // The second server wrote last; the first one's guess is stale now.
    let written = servers[1]
        .merge(&path, &json!({"metadata": {"labels": {"by": "second"}}}))
        .await
        .body;
    // A patch that changes nothing answers the current object, not the guess.
    let noop = servers[0]
        .merge(&path, &json!({"metadata": {"labels": {"app": "demo"}}}))
        .await;
    assert_eq!(noop.status, 200, "{}", noop.body);
    assert_eq!(
        noop.body["metadata"]["resourceVersion"], written["metadata"]["resourceVersion"],
        "a no-op patch on the server with a stale guess answered an older object: {}",
        noop.body
    );
    // The current resourceVersion as a precondition is met, though the guess is older.
    let precondition = json!({"metadata": {"resourceVersion": written["metadata"]["resourceVersion"],
                                           "labels": {"checked": "yes"}}});
    let reply = servers[0].merge(&path, &precondition).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Deleted through one server, the object is gone for the other's patches too.
    assert_eq!(servers[1].delete(&path, None).await.status, 200);
    servers[1]
        .eventually(&path, Duration::from_secs(30), |r| r.status == 404)
        .await;
    let reply = servers[0]
        .merge(&path, &json!({"metadata": {"labels": {"after": "delete"}}}))
        .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
}
