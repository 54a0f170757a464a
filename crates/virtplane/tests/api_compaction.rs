//! Expired history: a server that compacts its store every second
//! (`--compaction-interval 1s`, kube-apiserver's `--etcd-compaction-interval`) answers a
//! continue token, an exact list and a watch from before the compaction with 410 Expired.

mod support;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use support::*;

const KV: &str = "kubevirts";

/// Writes until a compaction has passed `old`: a list at exactly `old` is then refused.
async fn wait_for_compaction(api: &Api, ns: &str, old: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    loop {
        i += 1;
        api.create(&coll(ns, KV), &kubevirt_obj(&format!("noise-{i}")))
            .await;
        let r = api
            .get(&format!(
                "{}?resourceVersion={old}&resourceVersionMatch=Exact",
                coll(ns, KV)
            ))
            .await;
        if r.status == StatusCode::GONE {
            return;
        }
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert!(
            Instant::now() < deadline,
            "history at {old} was never compacted"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn expired_history_is_410() {
    let server = TestServer::start_with(&["--no-node", "--compaction-interval", "1s"]).await;
    let api = api_for(&server);
    let ns = "compacted";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    for name in ["a", "b", "c"] {
        api.create(&c, &kubevirt_obj(name)).await;
    }
    let first = api.get(&format!("{c}?limit=1")).await.body;
    assert_eq!(names(&first), ["a"]);
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let old: i64 = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // Past `old + 1`: a store compacted to exactly `old + 1` still holds the events a
    // watch from `old` needs, and rightly serves it.
    wait_for_compaction(&api, ns, old + 1).await;

    // An exact list at a compacted revision.
    let r = api
        .get(&format!(
            "{c}?resourceVersion={old}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "The resourceVersion for the provided list is too old.",
            "reason": "Expired", "code": 410}),
    );

    // A continue token from before the compaction: 410 with a token that continues,
    // inconsistently, at the latest revision.
    let r = api.get(&format!("{c}?limit=1&continue={token}")).await;
    assert_eq!(r.status, StatusCode::GONE, "{}", r.text);
    assert_eq!(r.body["reason"], "Expired");
    assert_eq!(r.body["code"], 410);
    assert_eq!(
        r.body["message"],
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
    );
    let fresh = r.body["metadata"]["continue"]
        .as_str()
        .expect("a fresh token")
        .to_string();
    let r = api.get(&format!("{c}?limit=2&continue={fresh}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(names(&r.body), ["b", "c"], "the rest, after a");

    // A watch from a compacted revision: 200, one ERROR event with the 410 Status, then the end.
    let mut w = api
        .watch(&format!("{c}?watch=true&resourceVersion={old}"))
        .await;
    assert_eq!(w.status, StatusCode::OK);
    let events = w.drain(Duration::from_secs(10)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "ERROR");
    let status = &events[0]["object"];
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["apiVersion"], "v1");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "Expired");
    assert_eq!(status["code"], 410);
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("too old resource version: {old} (")),
        "{message}"
    );

    // A client recovers by listing again and watching from the new revision.
    let list = api.get(&c).await.body;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut w = api
        .watch(&format!("{c}?watch=true&resourceVersion={rv}"))
        .await;
    let created = api.create(&c, &kubevirt_obj("after")).await;
    let e = w.next().await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"], created);
}
