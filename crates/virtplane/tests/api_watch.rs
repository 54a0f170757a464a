//! WATCH: newline-delimited JSON events (ADDED, MODIFIED, DELETED, BOOKMARK), synthetic
//! initial events, resuming from a resourceVersion, bookmarks, timeoutSeconds,
//! sendInitialEvents with the initial-events-end bookmark, selector transitions, and
//! Table watches.
//!
//! Not covered: the ERROR event with 410 Expired for a resourceVersion older than the last
//! compaction. The server compacts every 5 minutes with no way to trigger it from a test.

mod support;

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use support::*;

/// KubeVirt objects: a namespaced kind that no admission or controller touches, so every
/// event a test sees is its own.
const KV: &str = "kubevirts";

fn labelled(name: &str, labels: Value) -> Value {
    let mut body = kubevirt_obj(name);
    body["metadata"]["labels"] = labels;
    body
}

#[tokio::test]
async fn event_stream_format_and_types() {
    let api = api().await;
    let ns = "watch-format";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let start = api.get(&c).await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // Raw bytes: one complete JSON object per line, each ending in '\n'.
    let response = api
        .client
        .get(format!(
            "{}{c}?watch=true&resourceVersion={start}&timeoutSeconds=3",
            api.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    let created = api.create(&c, &kubevirt_obj("w")).await;
    let modified = api
        .merge(
            &item(ns, KV, "w"),
            &json!({"metadata": {"labels": {"m": "1"}}}),
        )
        .await
        .body;
    api.delete(&item(ns, KV, "w"), None).await;
    let body = response.text().await.unwrap();
    assert!(body.ends_with('\n'), "{body:?}");
    let events: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?}: {e}")))
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"], "{body}");
    for e in &events {
        assert_eq!(e.as_object().unwrap().len(), 2, "only type and object: {e}");
        assert_eq!(e["object"]["kind"], "KubeVirt");
        assert_eq!(e["object"]["apiVersion"], "kubevirt.io/v1");
    }
    assert_eq!(events[0]["object"], created);
    assert_eq!(events[1]["object"], modified);
    // DELETED carries the last state with a new resourceVersion.
    assert_eq!(events[2]["object"]["metadata"]["labels"]["m"], "1");
    assert!(rv(&events[2]["object"]) > rv(&modified));
}

#[tokio::test]
async fn initial_state_then_changes() {
    let api = api().await;
    let ns = "watch-initial";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    api.create(&c, &kubevirt_obj("a")).await;
    api.create(&c, &kubevirt_obj("b")).await;
    // Without a resourceVersion, and with "0": synthetic ADDED for what exists, then changes.
    for (i, query) in ["watch=true", "watch=true&resourceVersion=0", "watch=1"]
        .iter()
        .enumerate()
    {
        let mut w = api.watch(&format!("{c}?{query}")).await;
        assert_eq!(w.status, StatusCode::OK);
        let mut first: Vec<String> = Vec::new();
        for _ in 0..2 {
            let e = w.next().await;
            assert_eq!(e["type"], "ADDED", "{e}");
            first.push(
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        first.sort();
        assert_eq!(first, ["a", "b"]);
        w.assert_quiet(Duration::from_millis(300)).await;
        let r = api
            .merge(
                &item(ns, KV, "a"),
                &json!({"metadata": {"labels": {"q": i.to_string()}}}),
            )
            .await;
        let e = w.expect("MODIFIED", "a").await;
        assert_eq!(e["object"], r.body);
    }
}

#[tokio::test]
async fn resume_from_resource_version() {
    let api = api().await;
    let ns = "watch-resume";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let start = api.get(&c).await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    let mut history = Vec::new();
    history.push(("ADDED", api.create(&c, &kubevirt_obj("r1")).await));
    history.push(("ADDED", api.create(&c, &kubevirt_obj("r2")).await));
    history.push((
        "MODIFIED",
        api.merge(
            &item(ns, KV, "r1"),
            &json!({"metadata": {"labels": {"v": "2"}}}),
        )
        .await
        .body,
    ));
    history.push((
        "MODIFIED",
        api.merge(
            &item(ns, KV, "r2"),
            &json!({"metadata": {"labels": {"v": "3"}}}),
        )
        .await
        .body,
    ));
    api.delete(&item(ns, KV, "r1"), None).await;
    // Every resume point replays exactly what came after it, in order.
    let mut points = vec![start];
    points.extend(history.iter().map(|(_, o)| rv(o)));
    for (i, from) in points.iter().enumerate() {
        let mut w = api
            .watch(&format!("{c}?watch=true&resourceVersion={from}"))
            .await;
        let mut last = *from;
        for (kind, obj) in &history[i.min(history.len())..] {
            let e = w.next().await;
            assert_eq!(e["type"], *kind, "from {from}: {e}");
            assert_eq!(&e["object"], obj);
            assert!(rv(&e["object"]) > last);
            last = rv(&e["object"]);
        }
        let e = w.next().await;
        assert_eq!(e["type"], "DELETED");
        assert_eq!(e["object"]["metadata"]["name"], "r1");
        w.assert_quiet(Duration::from_millis(200)).await;
    }
    // A resourceVersion not yet reached: nothing until the store gets past it.
    let current = api.get(&c).await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    let future = current + 3;
    let mut w = api
        .watch(&format!("{c}?watch=true&resourceVersion={future}"))
        .await;
    assert_eq!(w.status, StatusCode::OK);
    let mut first_after = None;
    for i in 0..20 {
        let obj = api.create(&c, &kubevirt_obj(&format!("f{i}"))).await;
        if rv(&obj) > future {
            first_after = Some(obj);
            break;
        }
    }
    let first_after = first_after.expect("the store passed the requested revision");
    let e = w.next().await;
    assert_eq!(
        e["object"], first_after,
        "only events after the requested revision"
    );
}

#[tokio::test]
async fn timeout_seconds_ends_the_watch() {
    let api = api().await;
    let ns = "watch-timeout";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let started = Instant::now();
    let mut w = api.watch(&format!("{c}?watch=true&timeoutSeconds=1")).await;
    let events = w.drain(Duration::from_secs(10)).await;
    let took = started.elapsed();
    assert!(events.is_empty(), "{events:?}");
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn bookmarks() {
    let api = api().await;
    let ns = "watch-bookmarks";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let created = api.create(&c, &kubevirt_obj("b")).await;
    let start = rv(&created);
    // Three watches side by side (each runs 3 seconds): with bookmarks from the create, with
    // bookmarks across a change, and without bookmarks.
    let mut quiet = api
        .watch(&format!("{c}?watch=true&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={start}&fieldSelector=metadata.name%3Dnone"))
        .await;
    let mut busy = api
        .watch(&format!(
            "{c}?watch=true&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={start}"
        ))
        .await;
    let mut plain = api
        .watch(&format!(
            "{c}?watch=true&timeoutSeconds=3&resourceVersion={start}"
        ))
        .await;
    let changed = api
        .merge(
            &item(ns, KV, "b"),
            &json!({"metadata": {"labels": {"x": "1"}}}),
        )
        .await
        .body;
    let within = Duration::from_secs(10);
    let (quiet, busy, plain) =
        tokio::join!(quiet.drain(within), busy.drain(within), plain.drain(within));

    // With allowWatchBookmarks the server bookmarks before closing the watch, even when
    // nothing matched.
    let bookmarks: Vec<&Value> = quiet.iter().filter(|e| e["type"] == "BOOKMARK").collect();
    assert!(!bookmarks.is_empty(), "no bookmark in {quiet:?}");
    assert_eq!(bookmarks.len(), quiet.len(), "{quiet:?}");
    for b in &bookmarks {
        // Only kind, apiVersion and the resourceVersion: no name, nothing else.
        assert_eq!(
            b["object"],
            json!({"kind": "KubeVirt", "apiVersion": "kubevirt.io/v1",
                   "metadata": {"resourceVersion": b["object"]["metadata"]["resourceVersion"]}}),
            "{b}"
        );
        assert!(rv(&b["object"]) >= start);
    }
    // A bookmark after changes is not older than the changes delivered before it.
    assert_eq!(busy[0]["type"], "MODIFIED");
    let bookmark = busy
        .iter()
        .find(|e| e["type"] == "BOOKMARK")
        .expect("bookmark");
    assert!(rv(&bookmark["object"]) >= rv(&changed));
    // Without allowWatchBookmarks: none.
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert_eq!(plain[0]["type"], "MODIFIED");
}

#[tokio::test]
async fn send_initial_events() {
    let api = api().await;
    let ns = "watch-list";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let a = api.create(&c, &kubevirt_obj("a")).await;
    let b = api.create(&c, &kubevirt_obj("b")).await;
    let mut w = api
        .watch(&format!(
            "{c}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        ))
        .await;
    assert_eq!(w.status, StatusCode::OK);
    let mut added = [w.next().await, w.next().await];
    added.sort_by_key(|e| {
        e["object"]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string()
    });
    assert_eq!(added[0]["type"], "ADDED");
    assert_eq!(added[0]["object"], a);
    assert_eq!(added[1]["object"], b);
    let end = w.next().await;
    assert_eq!(end["type"], "BOOKMARK", "{end}");
    assert_eq!(
        end["object"]["metadata"]["annotations"],
        json!({"k8s.io/initial-events-end": "true"})
    );
    assert!(rv(&end["object"]) >= rv(&b));
    assert!(end["object"]["metadata"].get("name").is_none());
    let c2 = api.create(&c, &kubevirt_obj("c")).await;
    let e = w.until(|e| e["type"] != "BOOKMARK").await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"], c2);

    // From a resourceVersion: still the full initial state (not older than it).
    let mut w = api
        .watch(&format!(
            "{c}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={}",
            rv(&a)
        ))
        .await;
    let mut names = Vec::new();
    loop {
        let e = w.next().await;
        if e["type"] == "BOOKMARK" {
            assert_eq!(
                e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
                "true"
            );
            break;
        }
        assert_eq!(e["type"], "ADDED");
        names.push(
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);

    // sendInitialEvents=false: no synthetic events at all, only what happens next.
    let mut w = api
        .watch(&format!(
            "{c}?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(w.status, StatusCode::OK);
    w.assert_quiet(Duration::from_millis(300)).await;
    let d = api.create(&c, &kubevirt_obj("d")).await;
    let e = w.next().await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"], d);
}

#[tokio::test]
async fn selector_transitions() {
    let api = api().await;
    let ns = "watch-selector";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let start = api.get(&c).await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut w = api
        .watch(&format!(
            "{c}?watch=true&resourceVersion={start}&labelSelector=sel%3Dyes"
        ))
        .await;
    let path = item(ns, KV, "t");
    api.create(&c, &labelled("t", json!({"sel": "no"}))).await;
    api.create(&c, &labelled("other", json!({"sel": "no"})))
        .await;
    // Starts matching: ADDED.
    let r = api
        .merge(&path, &json!({"metadata": {"labels": {"sel": "yes"}}}))
        .await;
    let e = w.next().await;
    assert_eq!(e["type"], "ADDED", "{e}");
    assert_eq!(e["object"], r.body);
    // Changes while matching: MODIFIED.
    let r = api
        .merge(&path, &json!({"metadata": {"annotations": {"a": "1"}}}))
        .await;
    let e = w.next().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"], r.body);
    // Stops matching: DELETED with the last matching state at the new resourceVersion,
    // as kube-apiserver's watch cache sends it.
    let mut last_matching = r.body;
    let r = api
        .merge(&path, &json!({"metadata": {"labels": {"sel": "gone"}}}))
        .await;
    let e = w.next().await;
    assert_eq!(e["type"], "DELETED");
    last_matching["metadata"]["resourceVersion"] = r.body["metadata"]["resourceVersion"].clone();
    assert_eq!(e["object"], last_matching);
    // Changes while not matching: nothing; deleting a non-matching object: nothing.
    api.merge(&path, &json!({"metadata": {"annotations": {"a": "2"}}}))
        .await;
    api.delete(&item(ns, KV, "other"), None).await;
    w.assert_quiet(Duration::from_millis(400)).await;
    // Matching again, then deleted while matching.
    api.merge(&path, &json!({"metadata": {"labels": {"sel": "yes"}}}))
        .await;
    assert_eq!(w.next().await["type"], "ADDED");
    api.delete(&path, None).await;
    let e = w.next().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["name"], "t");

    // A field selector on the name follows one object (kubectl wait / delete --wait).
    let x = api.create(&c, &kubevirt_obj("x1")).await;
    let mut w = api
        .watch(&format!(
            "{c}?watch=true&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dx1&resourceVersion={}",
            rv(&x)
        ))
        .await;
    api.create(&c, &kubevirt_obj("x2")).await;
    api.merge(
        &item(ns, KV, "x2"),
        &json!({"metadata": {"labels": {"n": "1"}}}),
    )
    .await;
    api.delete(&item(ns, KV, "x1"), None).await;
    let e = w.until(|e| e["type"] != "BOOKMARK").await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["name"], "x1");
    assert_eq!(e["object"]["metadata"]["uid"], x["metadata"]["uid"]);
}

#[tokio::test]
async fn table_watch() {
    let api = api().await;
    let ns = "watch-table";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    api.create(&c, &kubevirt_obj("t1")).await;
    api.create(&c, &kubevirt_obj("t2")).await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let response = api
        .client
        .request(
            Method::GET,
            format!("{}{c}?watch=true&timeoutSeconds=1", api.url),
        )
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{text}");
    assert_eq!(events[0]["object"]["kind"], "Table");
    let columns: Vec<&str> = events[0]["object"]["columnDefinitions"]
        .as_array()
        .expect("columnDefinitions")
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        ["Name", "Age", "Phase"],
        "KubeVirt's printer columns"
    );
    assert!(
        events[1]["object"]["columnDefinitions"].is_null(),
        "only the first event defines columns"
    );
    assert_eq!(events[1]["object"]["rows"].as_array().unwrap().len(), 1);
}
