//! Failures: a guest that never starts (CrashLoopBackOff with KubeVirt's backoff), a
//! guest that crashes after running (restarted at once), and a node agent killed with
//! SIGKILL (node NotReady, its VMIs Failed/NodeUnresponsive, no VM stuck). The node is a
//! separate `virtplane node` process joined with the server's node-join.kubeconfig. Tier A.

mod lifecycle;
mod support;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use lifecycle::{events_until, node_ready, printable_trail, vm, Cluster};
use serde_json::{json, Value};
use support::{condition, printable, uid, NodeProcess};

const NS: &str = "fail";

fn time(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("no timestamp: {v}")))
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

/// When the VMI entered `phase`, from its phaseTransitionTimestamps.
fn entered(vmi: &Value, phase: &str) -> Option<DateTime<Utc>> {
    vmi["status"]["phaseTransitionTimestamps"]
        .as_array()?
        .iter()
        .find(|t| t["phase"] == phase)
        .map(|t| time(&t["phaseTransitionTimestamp"]))
}

#[tokio::test]
async fn a_vm_that_never_starts_backs_off_like_kubevirt() {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    let mut watch = c.watch_one(NS, "virtualmachines", "bad", "").await;
    let mut vmi_watch = c.watch_one(NS, "virtualmachineinstances", "bad", "").await;
    c.create_vm(
        NS,
        &vm(
            "bad",
            Some("Always"),
            json!({"sim.virtplane.io/fail-start": "true"}),
        ),
    )
    .await;
    let trail = printable_trail(&mut watch, None, Duration::from_secs(10), |e, _| {
        printable(&e["object"]) == "CrashLoopBackOff"
    })
    .await;
    assert_eq!(trail, ["Starting", "CrashLoopBackOff"]);

    // The first VMI failed without ever running.
    let events = events_until(&mut vmi_watch, Duration::from_secs(10), |e| {
        e["object"]["status"]["phase"] == "Failed"
    })
    .await;
    let first = &events.last().unwrap()["object"];
    assert!(entered(first, "Running").is_none(), "it never ran");
    let failed_at = entered(first, "Failed").expect("Failed timestamp");

    let vm = c
        .wait_vm(NS, "bad", Duration::from_secs(10), |v| {
            v["status"]["created"] == false
        })
        .await;
    assert_eq!(printable(&vm), "CrashLoopBackOff");
    let sf = &vm["status"]["startFailure"];
    assert_eq!(sf["consecutiveFailCount"], 1, "{sf}");
    assert_eq!(sf["lastFailedVMIUID"], uid(first).as_str());
    // 10 s × 1², plus up to half of that in jitter (timestamps have 1 s resolution).
    let retry = time(&sf["retryAfterTimestamp"]);
    let delay = (retry - failed_at).num_seconds();
    assert!((9..=16).contains(&delay), "first backoff {delay}s");

    // Nothing is started before retryAfter; the next VMI comes soon after it (and
    // fails at once, so it is followed on the watch rather than polled).
    let events = events_until(&mut vmi_watch, Duration::from_secs(20), |e| {
        e["type"] == "ADDED" && uid(&e["object"]) != uid(first)
    })
    .await;
    let now = Utc::now();
    assert!(
        now >= retry - chrono::Duration::seconds(1) && now <= retry + chrono::Duration::seconds(4),
        "second VMI at {now}, retry at {retry}"
    );
    let second = events.last().unwrap()["object"].clone();
    let events = events_until(&mut vmi_watch, Duration::from_secs(10), |e| {
        uid(&e["object"]) == uid(&second) && e["object"]["status"]["phase"] == "Failed"
    })
    .await;
    let failed_again =
        entered(&events.last().unwrap()["object"], "Failed").expect("Failed timestamp");
    let vm = c
        .wait_vm(NS, "bad", Duration::from_secs(10), |v| {
            v["status"]["startFailure"]["consecutiveFailCount"] == 2
        })
        .await;
    let sf = &vm["status"]["startFailure"];
    assert_eq!(sf["lastFailedVMIUID"], uid(&second).as_str());
    let delay = (time(&sf["retryAfterTimestamp"]) - failed_again).num_seconds();
    assert!(
        (38..=61).contains(&delay),
        "second backoff {delay}s (40–60 s)"
    );
    assert_eq!(printable(&vm), "CrashLoopBackOff");
    assert_eq!(vm["status"]["ready"], false);

    // A manual stop clears the record; a start tries again at once.
    let r = c.vm_verb(NS, "bad", "stop").await;
    assert_eq!(r.status.as_u16(), 202, "{}", r.text);
    let vm = c.wait_printable(NS, "bad", "Stopped").await;
    assert!(
        vm["status"].get("startFailure").is_none(),
        "{}",
        vm["status"]
    );
    let started = Instant::now();
    let r = c.vm_verb(NS, "bad", "start").await;
    assert_eq!(r.status.as_u16(), 202, "{}", r.text);
    let vm = c
        .wait_vm(NS, "bad", Duration::from_secs(10), |v| {
            v["status"]["startFailure"]["consecutiveFailCount"] == 1
        })
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "start after stop waited for the old backoff"
    );
    assert_eq!(printable(&vm), "CrashLoopBackOff");
}

#[tokio::test]
async fn a_guest_that_crashes_after_running_is_restarted_at_once() {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    c.create_vm(
        NS,
        &vm(
            "flaky",
            Some("Always"),
            json!({"sim.virtplane.io/crash-after": "300ms"}),
        ),
    )
    .await;
    let first = c.wait_vmi_phase(NS, "flaky", "Running").await;
    let mut watch = c
        .watch_one(
            NS,
            "virtualmachineinstances",
            "flaky",
            first["metadata"]["resourceVersion"].as_str().unwrap(),
        )
        .await;
    let events = events_until(&mut watch, Duration::from_secs(10), |e| {
        uid(&e["object"]) != uid(&first) && e["object"]["status"]["phase"] == "Running"
    })
    .await;
    let crashed = events
        .iter()
        .find(|e| uid(&e["object"]) == uid(&first) && e["object"]["status"]["phase"] == "Failed")
        .unwrap_or_else(|| panic!("the crash was not reported: {events:#?}"));
    assert_eq!(crashed["object"]["status"]["reason"], "GuestCrashed");
    let vm = c.get_vm(NS, "flaky").await.body;
    assert!(
        vm["status"].get("startFailure").is_none(),
        "a guest that ran is no start failure"
    );
}

#[tokio::test]
async fn a_vmi_that_fails_to_prepare_the_same_way_fails_and_its_vm_backs_off() {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    let mut vmi_watch = c
        .watch_one(NS, "virtualmachineinstances", "unmakeable", "")
        .await;
    c.create_vm(
        NS,
        &vm(
            "unmakeable",
            Some("Always"),
            json!({"sim.virtplane.io/fail-prepare": "FailedCreate"}),
        ),
    )
    .await;
    let message = "simulated failure to prepare the VMI (FailedCreate)";
    // Retried (Synchronized=False) until the same failure came three times in a row, then
    // Failed with it, as a virt-launcher that cannot start fails its VMI.
    let events = events_until(&mut vmi_watch, Duration::from_secs(45), |e| {
        e["object"]["status"]["phase"] == "Failed"
    })
    .await;
    assert!(
        events
            .iter()
            .any(|e| condition(&e["object"], "Synchronized")
                .is_some_and(|c| c["status"] == "False" && c["message"] == message)),
        "not retried before failing: {events:#?}"
    );
    let failed = &events.last().unwrap()["object"];
    assert!(entered(failed, "Running").is_none(), "it never ran");
    let ready = condition(failed, "Ready").unwrap_or_else(|| panic!("{}", failed["status"]));
    assert_eq!(ready["reason"], "FailedCreate", "{ready}");
    assert_eq!(ready["message"], message, "{ready}");
    let vm = c
        .wait_vm(NS, "unmakeable", Duration::from_secs(10), |v| {
            printable(v) == "CrashLoopBackOff" && v["status"]["created"] == false
        })
        .await;
    let failure = condition(&vm, "Failure").unwrap_or_else(|| panic!("{}", vm["status"]));
    assert_eq!(failure["reason"], "FailedCreate", "{failure}");
    assert_eq!(failure["message"], message, "{failure}");
    assert_eq!(vm["status"]["startFailure"]["consecutiveFailCount"], 1);
}

#[tokio::test]
async fn a_vmi_waiting_for_its_image_is_not_failed() {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    c.create_vm(
        NS,
        &vm(
            "no-image",
            Some("Always"),
            json!({"sim.virtplane.io/fail-prepare": "ErrImagePull"}),
        ),
    )
    .await;
    c.wait_printable(NS, "no-image", "ErrImagePull").await;
    // Longer than three retries of a failure to create.
    tokio::time::sleep(Duration::from_secs(35)).await;
    let vmi = c.get_vmi(NS, "no-image").await.body;
    assert_eq!(vmi["status"]["phase"], "Scheduling", "{}", vmi["status"]);
    assert_eq!(
        printable(&c.get_vm(NS, "no-image").await.body),
        "ErrImagePull"
    );
}

fn pinned(name: &str, strategy: &str) -> Value {
    let mut body = vm(name, Some(strategy), json!({}));
    body["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "edge-1"});
    body
}

#[tokio::test]
async fn a_lost_node_fails_its_vmis_and_no_vm_is_stuck() {
    let grace = Duration::from_secs(2);
    let c = Cluster::start(
        1,
        &[
            "--node-monitor-grace-period",
            "2s",
            "--heartbeat-interval",
            "300ms",
        ],
    )
    .await;
    c.namespace(NS).await;
    let mut agent = NodeProcess::start(&c.server, "edge-1");
    c.wait_nodes_ready(2).await;
    let node = c.api.get("/api/v1/nodes/edge-1").await.body;
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"],
        "edge-1"
    );
    assert_eq!(node_ready(&node), "True");

    c.create_vm(NS, &pinned("always", "Always")).await;
    c.create_vm(NS, &pinned("manual", "Manual")).await;
    c.create_vm(NS, &pinned("doomed", "Always")).await;
    assert_eq!(c.vm_verb(NS, "manual", "start").await.status.as_u16(), 202);
    for name in ["always", "manual", "doomed"] {
        let vmi = c.wait_vmi_phase(NS, name, "Running").await;
        assert_eq!(vmi["status"]["nodeName"], "edge-1");
    }
    let always_vmi = c.get_vmi(NS, "always").await.body;
    let rv = always_vmi["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut vmi_watch = c
        .api
        .watch(&format!(
            "{}?watch=true&resourceVersion={rv}",
            support::coll(NS, "virtualmachineinstances")
        ))
        .await;

    agent.kill9();
    let killed = Instant::now();
    // Deleted while its node is already gone (but not yet known to be): Terminating
    // until the node is declared lost, then gone.
    let r = c
        .api
        .delete(&support::item(NS, "virtualmachines", "doomed"), None)
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);

    // The node goes NotReady once the grace period has passed.
    let node = c
        .api
        .eventually("/api/v1/nodes/edge-1", Duration::from_secs(15), |r| {
            node_ready(&r.body) == "Unknown"
        })
        .await
        .body;
    // Not before the grace period, give or take the one-second resolution of heartbeat
    // timestamps (the last one the controller saw may predate the kill by that much).
    assert!(
        killed.elapsed() >= grace - Duration::from_secs(1),
        "NotReady after {:?}, before the grace period",
        killed.elapsed()
    );
    let ready = condition(&node, "Ready").unwrap();
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    let table = c
        .api
        .send(
            reqwest::Method::GET,
            "/api/v1/nodes/edge-1",
            &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
            None,
        )
        .await;
    assert_eq!(
        table.body["rows"][0]["cells"][1], "NotReady",
        "{}",
        table.text
    );

    // Each of its VMIs fails with reason NodeUnresponsive.
    let failed = std::cell::RefCell::new(std::collections::BTreeSet::new());
    events_until(&mut vmi_watch, Duration::from_secs(15), |e| {
        let o = &e["object"];
        if o["status"]["phase"] == "Failed" && o["status"]["reason"] == "NodeUnresponsive" {
            failed
                .borrow_mut()
                .insert(o["metadata"]["name"].as_str().unwrap_or("").to_string());
        }
        failed.borrow().len() == 3
    })
    .await;

    // Manual leaves its failed VMI in place: it says so.
    let vmi = c.get_vmi(NS, "manual").await.body;
    assert_eq!(vmi["status"]["phase"], "Failed");
    assert_eq!(vmi["status"]["reason"], "NodeUnresponsive");
    assert_eq!(
        condition(&vmi, "Ready").unwrap()["reason"],
        "NodeUnresponsive"
    );
    c.wait_printable(NS, "manual", "Stopped").await;

    // Always replaces it; the replacement has nowhere to go.
    let vm = c.wait_printable(NS, "always", "ErrorUnschedulable").await;
    assert_eq!(
        condition(&vm, "PodScheduled").unwrap()["message"],
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were not ready."
    );
    let replacement = c.get_vmi(NS, "always").await.body;
    assert_ne!(uid(&replacement), uid(&always_vmi));

    // Nothing is stuck: the VM deleted during the outage is gone, and the others go.
    let gone = |name: &'static str| {
        let api = &c.api;
        async move {
            api.eventually(
                &support::item(NS, "virtualmachines", name),
                Duration::from_secs(10),
                |r| r.status.as_u16() == 404,
            )
            .await;
        }
    };
    gone("doomed").await;
    for name in ["always", "manual"] {
        let r = c
            .api
            .delete(&support::item(NS, "virtualmachines", name), None)
            .await;
        assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    }
    gone("always").await;
    gone("manual").await;
    assert_eq!(c.get_vmi(NS, "manual").await.status.as_u16(), 404);
}
