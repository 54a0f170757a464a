//! VM lifecycle through the API with simulated nodes: VM → VMI for every runStrategy,
//! start/stop/restart/pause, printableStatus sequences seen on a watch, deletion of a
//! running VM. Tier A (no QEMU).

mod lifecycle;
mod support;

use std::time::{Duration, Instant};

use lifecycle::{assert_accepted, events_until, printable_trail, vm, Cluster};
use serde_json::{json, Value};
use support::{condition, printable, uid};

const NS: &str = "lc";

async fn cluster() -> Cluster {
    let c = Cluster::start(2, &[]).await;
    c.namespace(NS).await;
    c
}

/// Names of the phases in `status.phaseTransitionTimestamps`, in order.
fn phases(vmi: &Value) -> Vec<String> {
    vmi["status"]["phaseTransitionTimestamps"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["phase"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn always_vm_runs_a_vmi_made_from_its_template() {
    let c = cluster().await;
    let mut watch = c.watch_one(NS, "virtualmachines", "web", "").await;
    let body = vm(
        "web",
        Some("Always"),
        json!({"team": "blue", "sim.virtplane.io/boot-delay": "300ms"}),
    );
    let created = c.create_vm(NS, &body).await;
    let trail = printable_trail(&mut watch, None, Duration::from_secs(20), |e, _| {
        printable(&e["object"]) == "Running"
    })
    .await;
    assert_eq!(trail, ["Starting", "Running"], "printableStatus sequence");

    let vm = c
        .wait_vm(NS, "web", Duration::from_secs(10), |v| {
            v["status"]["ready"] == true
        })
        .await;
    let vmi = c.get_vmi(NS, "web").await.body;
    // Same name, owned by the VM as its controller.
    assert_eq!(vmi["metadata"]["name"], "web");
    assert_eq!(
        vmi["metadata"]["ownerReferences"],
        json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "web",
                "uid": created["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}])
    );
    // Labels and annotations come from the template, not from the VM.
    let labels = &vmi["metadata"]["labels"];
    assert_eq!(labels["kubevirt.io/vm"], "web");
    assert!(
        labels.get("vm-own-label").is_none(),
        "VM labels are not copied: {labels}"
    );
    let node = vmi["status"]["nodeName"]
        .as_str()
        .expect("nodeName")
        .to_string();
    assert!(node.starts_with("sim-node-"), "{node}");
    assert_eq!(labels["kubevirt.io/nodeName"], node.as_str());
    let annotations = &vmi["metadata"]["annotations"];
    assert_eq!(annotations["team"], "blue");
    assert_eq!(annotations["kubevirt.io/vm-generation"], "1");
    // Phases in order with their timestamps; Ready and LiveMigratable conditions.
    assert_eq!(vmi["status"]["phase"], "Running");
    assert_eq!(
        phases(&vmi),
        ["Pending", "Scheduling", "Scheduled", "Running"]
    );
    assert_eq!(condition(&vmi, "Ready").expect("Ready")["status"], "True");
    assert_eq!(
        condition(&vmi, "LiveMigratable").expect("LiveMigratable")["status"],
        "True"
    );
    // VM status mirrors it.
    let status = &vm["status"];
    assert_eq!(status["printableStatus"], "Running");
    assert_eq!(status["created"], true);
    assert_eq!(status["ready"], true);
    assert_eq!(status["runStrategy"], "Always");
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["desiredGeneration"], 1);
    assert!(status.get("stateChangeRequests").is_none(), "{status}");
    assert_eq!(condition(&vm, "Ready").expect("Ready")["status"], "True");
    assert_eq!(
        condition(&vm, "LiveMigratable").expect("LiveMigratable")["status"],
        "True"
    );
    assert!(condition(&vm, "Failure").is_none());
    assert_eq!(
        vm["metadata"]["finalizers"],
        json!(["kubevirt.io/virtualMachineControllerFinalize"])
    );

    // A template change bumps desiredGeneration; the running VMI keeps its generation.
    let r = c
        .api
        .merge(
            &support::item(NS, "virtualmachines", "web"),
            &json!({"spec": {"template": {"metadata": {"labels": {"extra": "x"}}}}}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    let vm = c
        .wait_vm(NS, "web", Duration::from_secs(10), |v| {
            v["status"]["desiredGeneration"] == 2
        })
        .await;
    assert_eq!(vm["status"]["observedGeneration"], 1);
}

/// The phases a VMI's watch events show, repeats folded.
fn phases_seen(events: &[Value]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for e in events {
        let phase = e["object"]["status"]["phase"].as_str().unwrap_or("Pending");
        if seen.last().map(String::as_str) != Some(phase) {
            seen.push(phase.to_string());
        }
    }
    seen
}

/// A guest that boots at once is started in the pass that prepared it: one write takes
/// the VMI from Scheduling to Running (Scheduled stays in its phase history); a guest
/// that takes time to boot is written Scheduled first.
#[tokio::test]
async fn a_guest_that_boots_at_once_skips_the_scheduled_write() {
    let c = cluster().await;
    for (name, delay, expected) in [
        ("instant", "0s", vec!["Pending", "Scheduling", "Running"]),
        (
            "slow",
            "300ms",
            vec!["Pending", "Scheduling", "Scheduled", "Running"],
        ),
    ] {
        let mut watch = c.watch_one(NS, "virtualmachineinstances", name, "").await;
        let body = vm(
            name,
            Some("Always"),
            json!({"sim.virtplane.io/boot-delay": delay}),
        );
        c.create_vm(NS, &body).await;
        let events = events_until(&mut watch, Duration::from_secs(20), |e| {
            e["object"]["status"]["phase"] == "Running"
        })
        .await;
        assert_eq!(
            phases_seen(&events),
            expected,
            "{name}: phases on the watch"
        );
        let running = &events.last().unwrap()["object"];
        assert_eq!(
            phases(running),
            ["Pending", "Scheduling", "Scheduled", "Running"],
            "{name}: phase history"
        );
    }
}

#[tokio::test]
async fn stop_then_start_an_always_vm() {
    let c = cluster().await;
    c.create_vm(
        NS,
        &vm(
            "db",
            Some("Always"),
            json!({"sim.virtplane.io/stop-delay": "400ms"}),
        ),
    )
    .await;
    let running = c.wait_printable(NS, "db", "Running").await;
    let first = c.get_vmi(NS, "db").await.body;
    let rv = running["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut vm_watch = c.watch_one(NS, "virtualmachines", "db", &rv).await;
    let mut vmi_watch = c.watch_one(NS, "virtualmachineinstances", "db", &rv).await;

    assert_accepted(&c.vm_verb(NS, "db", "stop").await, "stop");
    let trail = printable_trail(
        &mut vm_watch,
        Some("Running"),
        Duration::from_secs(20),
        |e, _| printable(&e["object"]) == "Stopped" && e["object"]["status"]["created"] == false,
    )
    .await;
    assert_eq!(trail, ["Running", "Stopping", "Stopped"]);
    // The VMI is shut down gracefully (Succeeded) before it goes away.
    let events = events_until(&mut vmi_watch, Duration::from_secs(10), |e| {
        e["type"] == "DELETED"
    })
    .await;
    let last_state = events
        .iter()
        .rev()
        .find(|e| e["type"] == "MODIFIED")
        .expect("VMI updates before deletion");
    assert_eq!(
        last_state["object"]["status"]["phase"], "Succeeded",
        "{last_state}"
    );
    assert!(last_state["object"]["metadata"]["deletionTimestamp"].is_string());

    let vm = c.get_vm(NS, "db").await.body;
    assert_eq!(
        vm["spec"]["runStrategy"], "Halted",
        "stop of Always switches to Halted"
    );
    assert_eq!(vm["status"]["ready"], false);
    assert_eq!(vm["status"]["runStrategy"], "Halted");
    let ready = condition(&vm, "Ready").expect("Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"], &ready["message"]),
        (
            &json!("False"),
            &json!("VMINotExists"),
            &json!("VMI does not exist")
        )
    );

    assert_accepted(&c.vm_verb(NS, "db", "start").await, "start");
    c.wait_printable(NS, "db", "Running").await;
    let vm = c.get_vm(NS, "db").await.body;
    assert_eq!(
        vm["spec"]["runStrategy"], "Always",
        "start of Halted switches to Always"
    );
    let second = c.get_vmi(NS, "db").await.body;
    assert_ne!(uid(&first), uid(&second), "a new VMI");
}

#[tokio::test]
async fn restart_replaces_the_vmi_without_passing_through_stopped() {
    let c = cluster().await;
    for (name, strategy) in [("ra", "Always"), ("rm", "Manual"), ("rr", "RerunOnFailure")] {
        c.create_vm(NS, &vm(name, Some(strategy), json!({}))).await;
        if strategy == "Manual" {
            assert_accepted(&c.vm_verb(NS, name, "start").await, "start Manual");
        }
        let running = c.wait_printable(NS, name, "Running").await;
        let before = c.get_vmi(NS, name).await.body;
        let rv = running["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let mut watch = c.watch_one(NS, "virtualmachines", name, &rv).await;
        let old_uid = uid(&before);

        assert_accepted(&c.vm_verb(NS, name, "restart").await, "restart");
        let stopping_seen = std::cell::Cell::new(false);
        let events = events_until(&mut watch, Duration::from_secs(20), |e| {
            if printable(&e["object"]) == "Stopping" {
                stopping_seen.set(true);
            }
            stopping_seen.get()
                && printable(&e["object"]) == "Running"
                && e["object"]["status"].get("stateChangeRequests").is_none()
        })
        .await;
        let mut trail = vec!["Running".to_string()];
        for e in &events {
            let s = printable(&e["object"]).to_string();
            if trail.last() != Some(&s) {
                trail.push(s);
            }
        }
        // KubeVirt's order; Stopped only while the old VMI is final but not yet gone.
        assert!(
            trail == ["Running", "Stopping", "Starting", "Running"]
                || trail == ["Running", "Stopping", "Stopped", "Starting", "Running"],
            "{strategy}: restart sequence {trail:?}"
        );
        // The VM is never reported without a VMI: the next one is created in the same
        // pass that sees the old one gone.
        assert!(
            events
                .iter()
                .all(|e| e["object"]["status"]["created"] == true),
            "{strategy}: VM reported created=false during a restart: {events:#?}"
        );
        let after = c.wait_vmi_phase(NS, name, "Running").await;
        assert_ne!(uid(&after), old_uid, "{strategy}: restart makes a new VMI");
        let vm = c.get_vm(NS, name).await.body;
        assert_eq!(
            vm["spec"]["runStrategy"], strategy,
            "restart keeps the strategy"
        );
    }
}

#[tokio::test]
async fn pause_and_unpause() {
    let c = cluster().await;
    c.create_vm(NS, &vm("p", Some("Always"), json!({}))).await;
    let running = c.wait_printable(NS, "p", "Running").await;
    let rv = running["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = c.watch_one(NS, "virtualmachines", "p", &rv).await;

    let r = c.vmi_verb(NS, "p", "pause").await;
    assert_eq!(r.status.as_u16(), 200, "pause: {}", r.text);
    let trail = printable_trail(
        &mut watch,
        Some("Running"),
        Duration::from_secs(10),
        |e, _| printable(&e["object"]) == "Paused",
    )
    .await;
    assert_eq!(trail, ["Running", "Paused"]);
    let vmi = c.get_vmi(NS, "p").await.body;
    let paused = condition(&vmi, "Paused").expect("VMI Paused condition");
    assert_eq!(
        (&paused["status"], &paused["reason"], &paused["message"]),
        (
            &json!("True"),
            &json!("PausedByUser"),
            &json!("VMI was paused by user")
        )
    );
    assert_eq!(
        vmi["status"]["phase"], "Running",
        "a paused VMI is still Running"
    );
    let vm = c
        .wait_vm(NS, "p", Duration::from_secs(5), |v| {
            v["status"]["ready"] == false
        })
        .await;
    assert_eq!(
        condition(&vm, "Paused").expect("mirrored on the VM")["reason"],
        "PausedByUser"
    );
    assert_eq!(condition(&vm, "Ready").expect("Ready")["status"], "False");

    let r = c.vmi_verb(NS, "p", "unpause").await;
    assert_eq!(r.status.as_u16(), 200, "unpause: {}", r.text);
    let trail = printable_trail(
        &mut watch,
        Some("Running"),
        Duration::from_secs(10),
        |e, _| printable(&e["object"]) == "Running" && e["object"]["status"]["ready"] == true,
    )
    .await;
    assert_eq!(trail.last().map(String::as_str), Some("Running"));
    let vm = c.get_vm(NS, "p").await.body;
    assert!(condition(&vm, "Paused").is_none(), "{}", vm["status"]);
    assert!(condition(&c.get_vmi(NS, "p").await.body, "Paused").is_none());
}

/// A VM that starts stopped is stored with the finalizer and the status the controller
/// would write, so the controller's first sync writes nothing.
#[tokio::test]
async fn a_stopped_vm_is_created_with_its_first_status() {
    let c = cluster().await;
    let created = c.create_vm(NS, &vm("h", Some("Halted"), json!({}))).await;
    assert_eq!(printable(&created), "Stopped", "{}", created["status"]);
    assert_eq!(created["status"]["created"], false);
    assert_eq!(
        condition(&created, "Ready").map(|r| r["reason"].clone()),
        Some(json!("VMINotExists"))
    );
    assert_eq!(
        created["metadata"]["finalizers"],
        json!(["kubevirt.io/virtualMachineControllerFinalize"])
    );
    // The controller has synced "h" once a VM created after it is running.
    c.create_vm(NS, &vm("after-h", Some("Always"), json!({})))
        .await;
    c.wait_printable(NS, "after-h", "Running").await;
    let now = c.get_vm(NS, "h").await.body;
    assert_eq!(
        now["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
        "the controller rewrote a VM that needed nothing: {now}"
    );
    // An Always VM gets its status from the controller, as before.
    let always = c.create_vm(NS, &vm("a", Some("Always"), json!({}))).await;
    assert!(always
        .get("status")
        .is_none_or(|s| s.get("printableStatus").is_none()));
}

#[tokio::test]
async fn manual_vm_runs_only_when_asked() {
    let c = cluster().await;
    c.create_vm(NS, &vm("m", Some("Manual"), json!({}))).await;
    let vm = c
        .wait_vm(NS, "m", Duration::from_secs(10), |v| {
            v["status"]["printableStatus"] == "Stopped"
        })
        .await;
    assert_eq!(vm["status"]["created"], false);
    assert_eq!(
        c.get_vmi(NS, "m").await.status.as_u16(),
        404,
        "Manual starts nothing by itself"
    );

    assert_accepted(&c.vm_verb(NS, "m", "start").await, "start");
    c.wait_printable(NS, "m", "Running").await;
    assert_accepted(&c.vm_verb(NS, "m", "stop").await, "stop");
    c.wait_vmi_gone(NS, "m").await;
    // Stopped already while the old VMI is final but not yet gone; once it is gone the
    // Stop request is consumed.
    let vm = c
        .wait_vm(NS, "m", Duration::from_secs(10), |v| {
            printable(v) == "Stopped" && v["status"]["created"] == false
        })
        .await;
    assert_eq!(vm["spec"]["runStrategy"], "Manual", "stop keeps Manual");
    assert!(
        vm["status"].get("stateChangeRequests").is_none(),
        "{}",
        vm["status"]
    );

    // A Manual guest that powers off stays Succeeded; start replaces it.
    c.create_vm(NS, &vm_with_power_off("m2", "Manual")).await;
    assert_accepted(&c.vm_verb(NS, "m2", "start").await, "start");
    let done = c.wait_vmi_phase(NS, "m2", "Succeeded").await;
    c.wait_printable(NS, "m2", "Stopped").await;
    assert_accepted(&c.vm_verb(NS, "m2", "start").await, "start after Succeeded");
    let next = c
        .wait_vmi(NS, "m2", Duration::from_secs(10), |v| {
            v.is_some_and(|v| uid(v) != uid(&done))
        })
        .await
        .expect("new VMI");
    assert_ne!(uid(&next), uid(&done));
}

fn vm_with_power_off(name: &str, strategy: &str) -> Value {
    vm(
        name,
        Some(strategy),
        json!({"sim.virtplane.io/power-off-after": "300ms"}),
    )
}

#[tokio::test]
async fn rerun_on_failure_restarts_after_crashes_not_after_power_off() {
    let c = cluster().await;
    // A guest that crashes shortly after booting: recreated each time, no backoff
    // because it did run.
    c.create_vm(
        NS,
        &vm(
            "crashy",
            Some("RerunOnFailure"),
            json!({"sim.virtplane.io/crash-after": "300ms"}),
        ),
    )
    .await;
    let first = c.wait_vmi_phase(NS, "crashy", "Running").await;
    let failed = c
        .wait_vmi(NS, "crashy", Duration::from_secs(10), |v| {
            v.is_some_and(|v| uid(v) != uid(&first) && v["status"]["phase"] == "Running")
        })
        .await
        .expect("replacement VMI");
    assert_ne!(uid(&failed), uid(&first));
    let vm = c.get_vm(NS, "crashy").await.body;
    assert!(
        vm["status"].get("startFailure").is_none(),
        "{}",
        vm["status"]
    );

    // A guest that powers itself off: Succeeded, removed, and not started again.
    c.create_vm(NS, &vm_with_power_off("clean", "RerunOnFailure"))
        .await;
    c.wait_vmi_phase(NS, "clean", "Running").await;
    c.wait_vmi_gone(NS, "clean").await;
    let vm = c
        .wait_vm(NS, "clean", Duration::from_secs(10), |v| {
            v["status"]["created"] == false
        })
        .await;
    assert_eq!(printable(&vm), "Stopped");
    // Still stopped a little later (nothing recreated it).
    let deadline = Instant::now() + Duration::from_millis(800);
    while Instant::now() < deadline {
        assert_eq!(
            c.get_vmi(NS, "clean").await.status.as_u16(),
            404,
            "RerunOnFailure restarted a clean stop"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_accepted(&c.vm_verb(NS, "clean", "start").await, "start");
    c.wait_vmi_phase(NS, "clean", "Running").await;
}

#[tokio::test]
async fn once_runs_a_single_vmi() {
    let c = cluster().await;
    c.create_vm(NS, &vm_with_power_off("o", "Once")).await;
    let vmi = c.wait_vmi_phase(NS, "o", "Succeeded").await;
    let vm = c.wait_printable(NS, "o", "Stopped").await;
    assert_eq!(vm["status"]["created"], true, "the finished VMI stays");
    let deadline = Instant::now() + Duration::from_millis(800);
    while Instant::now() < deadline {
        let now = c.get_vmi(NS, "o").await.body;
        assert_eq!(uid(&now), uid(&vmi), "Once never runs a second VMI");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // stop switches Once to Halted and removes the finished VMI.
    assert_accepted(&c.vm_verb(NS, "o", "stop").await, "stop");
    c.wait_vmi_gone(NS, "o").await;
    assert_eq!(
        c.get_vm(NS, "o").await.body["spec"]["runStrategy"],
        "Halted"
    );
}

#[tokio::test]
async fn halted_start_paused_switches_to_always_and_boots_paused() {
    let c = cluster().await;
    c.create_vm(NS, &vm("hp", Some("Halted"), json!({}))).await;
    c.wait_printable(NS, "hp", "Stopped").await;
    let r = c
        .sub(
            NS,
            "virtualmachines",
            "hp",
            "start",
            &json!({"paused": true}),
        )
        .await;
    assert_accepted(&r, "start paused");
    let vm = c.wait_printable(NS, "hp", "Paused").await;
    assert_eq!(vm["spec"]["runStrategy"], "Always");
    assert_eq!(vm["status"]["ready"], false);
    let vmi = c.get_vmi(NS, "hp").await.body;
    assert_eq!(vmi["spec"]["startStrategy"], "Paused");
    assert_eq!(condition(&vmi, "Paused").expect("Paused")["status"], "True");
    let r = c.vmi_verb(NS, "hp", "unpause").await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    c.wait_vm(NS, "hp", Duration::from_secs(10), |v| {
        v["status"]["printableStatus"] == "Running" && v["status"]["ready"] == true
    })
    .await;
}

#[tokio::test]
async fn deprecated_running_field_maps_to_always_and_halted() {
    let c = cluster().await;
    let mut body = vm("legacy", None, json!({}));
    body["spec"]["running"] = json!(true);
    let r = c
        .api
        .post(&support::coll(NS, "virtualmachines"), &body)
        .await;
    assert_eq!(r.status.as_u16(), 201, "{}", r.text);
    assert!(
        support::warnings(&r)
            .iter()
            .any(|w| w == "spec.running is deprecated, please use spec.runStrategy instead."),
        "warnings: {:?}",
        support::warnings(&r)
    );
    let vm = c.wait_printable(NS, "legacy", "Running").await;
    assert_eq!(vm["status"]["runStrategy"], "Always");
    // start on running: true is an Always VM that runs.
    lifecycle::assert_conflict(
        &c.vm_verb(NS, "legacy", "start").await,
        "virtualmachine",
        "legacy",
        "VM is already running",
    );
    assert_accepted(&c.vm_verb(NS, "legacy", "stop").await, "stop");
    c.wait_vmi_gone(NS, "legacy").await;
    let vm = c.wait_printable(NS, "legacy", "Stopped").await;
    assert_eq!(
        vm["spec"]["running"], false,
        "stop flips running, not runStrategy"
    );
    assert!(vm["spec"].get("runStrategy").is_none(), "{}", vm["spec"]);
    assert_accepted(&c.vm_verb(NS, "legacy", "start").await, "start");
    let vm = c.wait_printable(NS, "legacy", "Running").await;
    assert_eq!(vm["spec"]["running"], true);
}

/// Deletes VM `name` and returns (VM events, VMI events) until both are gone.
async fn delete_and_follow(c: &Cluster, name: &str) -> (Vec<Value>, Vec<Value>, Duration) {
    let vm = c.get_vm(NS, name).await.body;
    let rv = vm["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut vm_watch = c.watch_one(NS, "virtualmachines", name, &rv).await;
    let mut vmi_watch = c.watch_one(NS, "virtualmachineinstances", name, &rv).await;
    let started = Instant::now();
    let r = c
        .api
        .delete(&support::item(NS, "virtualmachines", name), None)
        .await;
    assert_eq!(r.status.as_u16(), 200, "delete: {}", r.text);
    let vmi_events = events_until(&mut vmi_watch, Duration::from_secs(20), |e| {
        e["type"] == "DELETED"
    })
    .await;
    let vmi_gone_after = started.elapsed();
    let vm_events = events_until(&mut vm_watch, Duration::from_secs(20), |e| {
        e["type"] == "DELETED"
    })
    .await;
    (vm_events, vmi_events, vmi_gone_after)
}

fn rv_of(event: &Value) -> i64 {
    support::rv(&event["object"])
}

#[tokio::test]
async fn deleting_a_running_vm_stops_its_vmi_first() {
    let c = cluster().await;
    let mut body = vm(
        "del",
        Some("Always"),
        json!({"sim.virtplane.io/stop-delay": "700ms"}),
    );
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(20);
    c.create_vm(NS, &body).await;
    c.wait_printable(NS, "del", "Running").await;
    let (vm_events, vmi_events, vmi_gone_after) = delete_and_follow(&c, "del").await;

    // The VM says Terminating while its VMI shuts down.
    assert!(
        vm_events
            .iter()
            .any(|e| e["type"] == "MODIFIED" && printable(&e["object"]) == "Terminating"),
        "no Terminating: {vm_events:#?}"
    );
    // The VMI was asked to stop, ended gracefully (within its grace period), then left;
    // only after that did the VM go.
    let stopped = vmi_events
        .iter()
        .find(|e| e["object"]["status"]["phase"] == "Succeeded")
        .unwrap_or_else(|| panic!("VMI never Succeeded: {vmi_events:#?}"));
    assert!(stopped["object"]["metadata"]["deletionTimestamp"].is_string());
    assert!(
        vmi_gone_after >= Duration::from_millis(600),
        "stop delay not honoured: {vmi_gone_after:?}"
    );
    let vmi_deleted = vmi_events.last().unwrap();
    let vm_deleted = vm_events.last().unwrap();
    assert!(
        rv_of(vm_deleted) > rv_of(vmi_deleted),
        "VM removed before its VMI: VM rv {} VMI rv {}",
        rv_of(vm_deleted),
        rv_of(vmi_deleted)
    );
    assert_eq!(c.get_vm(NS, "del").await.status.as_u16(), 404);
}

#[tokio::test]
async fn a_guest_slower_than_its_grace_period_is_killed() {
    let c = cluster().await;
    let mut body = vm(
        "slow",
        Some("Always"),
        json!({"sim.virtplane.io/stop-delay": "60s"}),
    );
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(1);
    c.create_vm(NS, &body).await;
    c.wait_printable(NS, "slow", "Running").await;
    let (vm_events, vmi_events, vmi_gone_after) = delete_and_follow(&c, "slow").await;
    assert!(
        vmi_events
            .iter()
            .any(|e| e["object"]["status"]["phase"] == "Failed"),
        "killed after the grace period means Failed: {vmi_events:#?}"
    );
    assert!(
        vmi_gone_after >= Duration::from_millis(900) && vmi_gone_after < Duration::from_secs(10),
        "grace period of 1 s not honoured: {vmi_gone_after:?}"
    );
    assert_eq!(vm_events.last().unwrap()["type"], "DELETED");
}

#[tokio::test]
async fn a_vmi_the_api_rejects_sets_the_failure_condition() {
    let c = cluster().await;
    // Valid as a VM, but its VMI has no memory at all: the VMI admission refuses it.
    let mut body = vm("nomem", Some("Always"), json!({}));
    body["spec"]["template"]["spec"]["domain"] = json!({"devices": {}});
    c.create_vm(NS, &body).await;
    let vm = c
        .wait_vm(NS, "nomem", Duration::from_secs(10), |v| {
            condition(v, "Failure").is_some()
        })
        .await;
    let failure = condition(&vm, "Failure").unwrap();
    assert_eq!(failure["status"], "True");
    assert_eq!(failure["reason"], "FailedCreate");
    let message = failure["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("Failure while starting VMI: ")
            && message.contains("no memory requested"),
        "{message}"
    );
    assert_eq!(vm["status"]["created"], false);
    // Fixing the template clears it and the VM runs.
    let r = c
        .api
        .merge(
            &support::item(NS, "virtualmachines", "nomem"),
            &json!({"spec": {"template": {"spec": {"domain": {"memory": {"guest": "64Mi"}}}}}}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    let vm = c.wait_printable(NS, "nomem", "Running").await;
    assert!(condition(&vm, "Failure").is_none(), "{}", vm["status"]);
}
