//! Durability: kill -9 the server in the middle of a stream of concurrent writes, start it
//! again on the same data dir, and find every acknowledged write with the resourceVersion
//! it was acknowledged with (or, for an object whose next write was in flight, that one
//! write more and nothing else).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

/// KubeVirt objects: a namespaced kind that no admission or controller writes, so every
/// stored write is one a test made.
const KV: &str = "kubevirts";
const WRITERS: usize = 8;

/// What the server acknowledged for one object: its uid and, per step, the resourceVersion.
#[derive(Default, Debug, Clone)]
struct Acked {
    uid: String,
    /// `steps[i]` = resourceVersion acknowledged for the write that set label step=i.
    steps: Vec<i64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_during_concurrent_writes_loses_nothing_acknowledged() {
    let mut server = TestServer::start().await;
    let api = Arc::new(api_for(&server));
    let ns = "durable";
    api.namespace(ns).await;
    let c = coll(ns, KV);

    let acked: Arc<Mutex<HashMap<String, Acked>>> = Arc::default();
    let total = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let api = api.clone();
        let acked = acked.clone();
        let total = total.clone();
        let c = c.clone();
        writers.push(tokio::spawn(async move {
            // Each writer creates objects and steps each one through a few label updates,
            // one request at a time, until the server goes away.
            for n in 0.. {
                let name = format!("w{w}-{n}");
                let mut body = kubevirt_obj(&name);
                body["metadata"]["labels"] = json!({"step": "0"});
                let Ok(r) = api
                    .client
                    .post(format!("{}{c}", api.url))
                    .json(&body)
                    .send()
                    .await
                else {
                    return;
                };
                if r.status() != StatusCode::CREATED {
                    return;
                }
                let Ok(obj) = r.json::<Value>().await else {
                    return;
                };
                acked.lock().unwrap().insert(
                    name.clone(),
                    Acked {
                        uid: obj["metadata"]["uid"].as_str().unwrap().to_string(),
                        steps: vec![rv(&obj)],
                    },
                );
                total.fetch_add(1, Ordering::SeqCst);
                for step in 1..=3 {
                    let patch = json!({"metadata": {"labels": {"step": step.to_string()}}});
                    let Ok(r) = api
                        .client
                        .patch(format!("{}{c}/{name}", api.url))
                        .header("content-type", "application/merge-patch+json")
                        .body(patch.to_string())
                        .send()
                        .await
                    else {
                        return;
                    };
                    if r.status() != StatusCode::OK {
                        return;
                    }
                    let Ok(obj) = r.json::<Value>().await else {
                        return;
                    };
                    acked
                        .lock()
                        .unwrap()
                        .get_mut(&name)
                        .unwrap()
                        .steps
                        .push(rv(&obj));
                    total.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    // Let the writes flow, then kill the server while they are still coming.
    let deadline = Instant::now() + Duration::from_secs(60);
    while total.load(Ordering::SeqCst) < 400 {
        assert!(
            Instant::now() < deadline,
            "writes too slow: {}",
            total.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9();
    for writer in writers {
        writer.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let max_acked = acked
        .values()
        .flat_map(|a| a.steps.iter())
        .copied()
        .max()
        .unwrap();

    server.restart().await;
    let api = api_for(&server);
    let list = api.get(&c).await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.text);
    let stored: HashMap<String, Value> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o.clone(),
            )
        })
        .collect();
    assert!(acked.len() >= WRITERS, "{}", acked.len());
    for (name, a) in &acked {
        let obj = stored
            .get(name)
            .unwrap_or_else(|| panic!("acknowledged object {name} is gone"));
        assert_eq!(obj["metadata"]["uid"], a.uid.as_str(), "{name}");
        let step: usize = obj["metadata"]["labels"]["step"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let last = a.steps.len() - 1;
        if step == last {
            // Exactly the acknowledged state.
            assert_eq!(
                rv(obj),
                a.steps[last],
                "{name}: resourceVersion of the last acknowledged write"
            );
        } else {
            // The next write was in flight when the server died: it may have landed.
            assert_eq!(
                step,
                last + 1,
                "{name}: acknowledged step {last}, stored {step}"
            );
            assert!(rv(obj) > a.steps[last]);
        }
        // The object reads the same by name.
        let r = api.get(&item(ns, KV, name)).await;
        assert_eq!(&r.body, obj);
    }
    // Objects the server stored but never acknowledged can only be in-flight creates.
    let unacked: Vec<&String> = stored.keys().filter(|n| !acked.contains_key(*n)).collect();
    assert!(unacked.len() <= WRITERS, "{unacked:?}");

    // Revisions keep growing after the restart.
    let list_rv: i64 = list.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(list_rv >= max_acked);
    let after = api.create(&c, &kubevirt_obj("after-restart")).await;
    assert!(rv(&after) > list_rv);
    // Watch history starts afresh with the new process (as kube-apiserver's watch cache
    // does): a watch from before the crash is told to relist (410), one from the relist
    // sees what follows.
    let first = acked.values().map(|a| a.steps[0]).min().unwrap();
    let mut w = api
        .watch(&format!("{c}?watch=true&resourceVersion={first}"))
        .await;
    assert_eq!(w.status, StatusCode::OK);
    let e = w.next().await;
    if e["type"] == "ERROR" {
        assert_eq!(e["object"]["code"], 410, "{e}");
        assert_eq!(e["object"]["reason"], "Expired");
    } else {
        assert!(rv(&e["object"]) > first, "{e}");
    }
    let mut w = api
        .watch(&format!("{c}?watch=true&resourceVersion={list_rv}"))
        .await;
    let e = w.next().await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"], after);
}

#[tokio::test]
async fn restart_keeps_everything() {
    let mut server = TestServer::start().await;
    let api = api_for(&server);
    api.namespace("restart").await;
    let vm_obj = api.settled_vm("restart", &vm("keep")).await;
    let mut held = kubevirt_obj("held");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.create(&coll("restart", KV), &held).await;
    let marked = api.delete(&item("restart", KV, "held"), None).await.body;
    let namespaces = api.get(NAMESPACES).await.body;
    // Keep the credentials issued before the restart.
    let before = tempfile::tempdir().unwrap();
    std::fs::copy(
        server.data_dir().join("admin.kubeconfig"),
        before.path().join("admin.kubeconfig"),
    )
    .unwrap();
    std::fs::create_dir(before.path().join("pki")).unwrap();
    std::fs::copy(
        server.data_dir().join("pki/tokens.json"),
        before.path().join("pki/tokens.json"),
    )
    .unwrap();
    let old_token = api.token("admin");

    server.restart().await;
    let api = api_for(&server);
    let r = api.get(&item("restart", "virtualmachines", "keep")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["metadata"]["uid"], vm_obj["metadata"]["uid"]);
    assert_eq!(r.body["spec"], vm_obj["spec"]);
    assert_eq!(api.get(&item("restart", KV, "held")).await.body, marked);
    assert_eq!(names(&api.get(NAMESPACES).await.body), names(&namespaces));
    // The same CA: credentials issued before the restart still work.
    let old = Api::connect(&server.url, before.path());
    assert_eq!(old.get(NAMESPACES).await.status, StatusCode::OK);
    let r = old
        .anonymous
        .get(format!("{}{NAMESPACES}", old.url))
        .header("authorization", format!("Bearer {old_token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
