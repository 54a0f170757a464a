//! The subresources.kubevirt.io/v1 lifecycle verbs: virt-api's acceptance rules and
//! exact error Statuses per runStrategy and VMI state (start, stop, restart on VMs;
//! pause, unpause, softreboot on VMIs; migrate's preconditions), plus dryRun. Tier A.

mod lifecycle;
mod support;

use std::time::{Duration, Instant};

use lifecycle::{assert_accepted, assert_conflict, vm, Cluster};
use serde_json::{json, Value};
use support::{printable, uid};

const NS: &str = "sub";

async fn cluster() -> Cluster {
    let c = Cluster::start(1, &[]).await;
    c.namespace(NS).await;
    c
}

fn assert_not_found(reply: &support::Reply, resource: &str, name: &str) {
    support::assert_status(
        reply,
        404,
        "NotFound",
        &format!("{resource}.kubevirt.io \"{name}\" not found"),
    );
    assert_eq!(
        reply.body["details"],
        json!({"name": name, "group": "kubevirt.io", "kind": resource}),
        "{}",
        reply.text
    );
}

/// A VMI created on its own (not owned by a VM) that the simulated node fails to start:
/// with a VM of the same name it gives the VM a Failed VMI the VM controller leaves alone.
async fn standalone_failed_vmi(c: &Cluster, name: &str) -> Value {
    let mut vmi = support::vmi(name);
    vmi["metadata"]["annotations"] = json!({"sim.virtplane.io/fail-start": "true"});
    c.api
        .create(&support::coll(NS, "virtualmachineinstances"), &vmi)
        .await;
    c.wait_vmi_phase(NS, name, "Failed").await
}

#[tokio::test]
async fn start_rules_per_strategy() {
    let c = cluster().await;
    assert_not_found(
        &c.vm_verb(NS, "nope", "start").await,
        "virtualmachine",
        "nope",
    );

    // Any strategy: an active VMI means "already running".
    c.create_vm(NS, &vm("always", Some("Always"), json!({})))
        .await;
    c.wait_printable(NS, "always", "Running").await;
    assert_conflict(
        &c.vm_verb(NS, "always", "start").await,
        "virtualmachine",
        "always",
        "VM is already running",
    );

    // Always without a VMI (crash-loop backoff): manual starts are not supported.
    c.create_vm(
        NS,
        &vm(
            "crashing",
            Some("Always"),
            json!({"sim.virtplane.io/fail-start": "true"}),
        ),
    )
    .await;
    c.wait_vm(NS, "crashing", Duration::from_secs(10), |v| {
        printable(v) == "CrashLoopBackOff" && v["status"]["created"] == false
    })
    .await;
    assert_conflict(
        &c.vm_verb(NS, "crashing", "start").await,
        "virtualmachine",
        "crashing",
        "Always does not support manual start requests",
    );
    // Restart with no VMI: virt-api says Halted whatever the strategy.
    assert_conflict(
        &c.vm_verb(NS, "crashing", "restart").await,
        "virtualmachine",
        "crashing",
        "VM is not running: Halted",
    );

    // Once whose guest finished: the same for Once.
    c.create_vm(
        NS,
        &vm(
            "once",
            Some("Once"),
            json!({"sim.virtplane.io/power-off-after": "100ms"}),
        ),
    )
    .await;
    c.wait_vmi_phase(NS, "once", "Succeeded").await;
    assert_conflict(
        &c.vm_verb(NS, "once", "start").await,
        "virtualmachine",
        "once",
        "Once does not support manual start requests",
    );

    // RerunOnFailure with a Failed VMI.
    standalone_failed_vmi(&c, "rerun").await;
    c.create_vm(NS, &vm("rerun", Some("RerunOnFailure"), json!({})))
        .await;
    assert_conflict(
        &c.vm_verb(NS, "rerun", "start").await,
        "virtualmachine",
        "rerun",
        "RerunOnFailure does not support starting VM from failed state",
    );
    // ... and stop of a VM whose VMI is final: not running.
    assert_conflict(
        &c.vm_verb(NS, "rerun", "stop").await,
        "virtualmachine",
        "rerun",
        "VM is not running",
    );

    // Halted: start with dryRun changes nothing; without, it switches to Always.
    c.create_vm(NS, &vm("halted", Some("Halted"), json!({})))
        .await;
    let r = c
        .sub(
            NS,
            "virtualmachines",
            "halted",
            "start",
            &json!({"dryRun": ["All"]}),
        )
        .await;
    assert_accepted(&r, "dry-run start");
    assert_eq!(r.text, "", "202 with an empty body");
    assert_eq!(
        c.get_vm(NS, "halted").await.body["spec"]["runStrategy"],
        "Halted"
    );
    assert_accepted(&c.vm_verb(NS, "halted", "start").await, "start");
    assert_eq!(
        c.get_vm(NS, "halted").await.body["spec"]["runStrategy"],
        "Always"
    );

    // A body that is not a StartOptions.
    let r = c
        .api
        .request(
            reqwest::Method::PUT,
            &format!(
                "/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/halted/start"
            ),
            "application/json",
            Some(b"{not json".to_vec()),
        )
        .await;
    assert_eq!(r.status.as_u16(), 400, "{}", r.text);
    assert_eq!(r.body["reason"], "BadRequest");
    assert!(
        r.body["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("Can not unmarshal Request body to struct, error: "),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn stop_rules_per_strategy() {
    let c = cluster().await;
    assert_not_found(
        &c.vm_verb(NS, "nope", "stop").await,
        "virtualmachine",
        "nope",
    );
    for strategy in ["Halted", "Manual", "RerunOnFailure"] {
        let name = strategy.to_lowercase();
        let mut body = vm(&name, Some(strategy), json!({}));
        if strategy == "RerunOnFailure" {
            // Keep it from starting: no node matches.
            body["spec"]["template"]["spec"]["nodeSelector"] = json!({"no": "such-node"});
        }
        c.create_vm(NS, &body).await;
        if strategy == "RerunOnFailure" {
            // Its VMI exists but is not running yet (Scheduling is not final): stoppable.
            c.wait_printable(NS, &name, "ErrorUnschedulable").await;
            assert_accepted(
                &c.vm_verb(NS, &name, "stop").await,
                "stop of a scheduling VMI",
            );
            c.wait_vmi_gone(NS, &name).await;
        }
        assert_conflict(
            &c.vm_verb(NS, &name, "stop").await,
            "virtualmachine",
            &name,
            "VM is not running",
        );
    }

    // Halted with a VMI still shutting down: only a shorter grace period is accepted.
    let mut body = vm(
        "slow",
        Some("Always"),
        json!({"sim.virtplane.io/stop-delay": "60s"}),
    );
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(30);
    c.create_vm(NS, &body).await;
    c.wait_printable(NS, "slow", "Running").await;
    // Always: a dry-run stop leaves the spec alone.
    let r = c
        .sub(
            NS,
            "virtualmachines",
            "slow",
            "stop",
            &json!({"dryRun": ["All"]}),
        )
        .await;
    assert_accepted(&r, "dry-run stop");
    assert_eq!(
        c.get_vm(NS, "slow").await.body["spec"]["runStrategy"],
        "Always"
    );
    assert_accepted(&c.vm_verb(NS, "slow", "stop").await, "stop");
    assert_eq!(
        c.get_vm(NS, "slow").await.body["spec"]["runStrategy"],
        "Halted"
    );
    c.wait_printable(NS, "slow", "Stopping").await;
    let shorter = "Halted only supports manual stop requests with a shorter graceperiod";
    assert_conflict(
        &c.vm_verb(NS, "slow", "stop").await,
        "virtualmachine",
        "slow",
        shorter,
    );
    let r = c
        .sub(
            NS,
            "virtualmachines",
            "slow",
            "stop",
            &json!({"gracePeriod": 30}),
        )
        .await;
    assert_conflict(&r, "virtualmachine", "slow", shorter);
    let started = Instant::now();
    let r = c
        .sub(
            NS,
            "virtualmachines",
            "slow",
            "stop",
            &json!({"gracePeriod": 0}),
        )
        .await;
    assert_accepted(&r, "force stop");
    c.wait_vmi_gone(NS, "slow").await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "force stop did not cut the 60 s shutdown short"
    );
    c.wait_printable(NS, "slow", "Stopped").await;
}

#[tokio::test]
async fn restart_rules_per_strategy() {
    let c = cluster().await;
    assert_not_found(
        &c.vm_verb(NS, "nope", "restart").await,
        "virtualmachine",
        "nope",
    );
    c.create_vm(
        NS,
        &vm(
            "m",
            Some("Manual"),
            json!({"sim.virtplane.io/stop-delay": "2s"}),
        ),
    )
    .await;
    for (grace, message) in [
        (
            5,
            "For force restart, only gracePeriod=0 is supported for now",
        ),
        (-1, "gracePeriod has to be greater or equal to 0"),
    ] {
        let r = c
            .sub(
                NS,
                "virtualmachines",
                "m",
                "restart",
                &json!({"gracePeriodSeconds": grace}),
            )
            .await;
        support::assert_status(&r, 400, "BadRequest", message);
    }
    for strategy in ["Halted", "Once"] {
        let name = strategy.to_lowercase();
        let mut body = vm(&name, Some(strategy), json!({}));
        body["spec"]["template"]["spec"]["nodeSelector"] = json!({"no": "such-node"});
        c.create_vm(NS, &body).await;
        assert_conflict(
            &c.vm_verb(NS, &name, "restart").await,
            "virtualmachine",
            &name,
            &format!("RunStategy {strategy} does not support manual restart requests"),
        );
    }
    // Manual, stopped.
    assert_conflict(
        &c.vm_verb(NS, "m", "restart").await,
        "virtualmachine",
        "m",
        "VM is not running: Halted",
    );
    assert_accepted(&c.vm_verb(NS, "m", "start").await, "start");
    let first = c.wait_vmi_phase(NS, "m", "Running").await;
    // A restart is underway while the old guest takes 2 s to stop: a second one fails
    // as virt-api fails (500), a start is refused, and a stop replaces the queue.
    assert_accepted(&c.vm_verb(NS, "m", "restart").await, "restart");
    let r = c.vm_verb(NS, "m", "restart").await;
    support::assert_status(
        &r,
        500,
        "InternalError",
        "Internal error occurred: unable to complete request: stop/start already underway",
    );
    assert_conflict(
        &c.vm_verb(NS, "m", "start").await,
        "virtualmachine",
        "m",
        "VM is already running",
    );
    assert_accepted(
        &c.vm_verb(NS, "m", "stop").await,
        "stop replaces a queued restart",
    );
    let state = c.get_vm(NS, "m").await.body;
    assert_eq!(
        state["status"]["stateChangeRequests"],
        json!([{"action": "Stop", "uid": uid(&first)}]),
        "a lone Stop replaces the queue"
    );
    c.wait_vmi_gone(NS, "m").await;
    let deadline = Instant::now() + Duration::from_millis(800);
    while Instant::now() < deadline {
        assert_eq!(
            c.get_vmi(NS, "m").await.status.as_u16(),
            404,
            "the dropped Start ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let state = c.wait_printable(NS, "m", "Stopped").await;
    assert!(
        state["status"].get("stateChangeRequests").is_none(),
        "{}",
        state["status"]
    );

    // Force restart (gracePeriodSeconds 0) of a guest that would take 60 s to stop.
    c.create_vm(
        NS,
        &vm(
            "force",
            Some("Always"),
            json!({"sim.virtplane.io/stop-delay": "60s"}),
        ),
    )
    .await;
    let old = c.wait_vmi_phase(NS, "force", "Running").await;
    let started = Instant::now();
    let r = c
        .sub(
            NS,
            "virtualmachines",
            "force",
            "restart",
            &json!({"gracePeriodSeconds": 0}),
        )
        .await;
    assert_accepted(&r, "force restart");
    let new = c
        .wait_vmi(NS, "force", Duration::from_secs(15), |v| {
            v.is_some_and(|v| uid(v) != uid(&old) && v["status"]["phase"] == "Running")
        })
        .await
        .expect("new VMI");
    assert_ne!(uid(&new), uid(&old));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "force restart waited for the guest"
    );
    // dryRun queues nothing.
    let r = c
        .sub(
            NS,
            "virtualmachines",
            "force",
            "restart",
            &json!({"dryRun": ["All"]}),
        )
        .await;
    assert_accepted(&r, "dry-run restart");
    let vm = c.get_vm(NS, "force").await.body;
    assert!(
        vm["status"].get("stateChangeRequests").is_none(),
        "{}",
        vm["status"]
    );
}

#[tokio::test]
async fn vmi_subresource_rules() {
    let c = cluster().await;
    for verb in ["pause", "unpause", "softreboot"] {
        assert_not_found(
            &c.vmi_verb(NS, "nope", verb).await,
            "virtualmachineinstance",
            "nope",
        );
    }
    // A VMI that is not running (cannot be scheduled).
    let mut body = vm("waiting", Some("Always"), json!({}));
    body["spec"]["template"]["spec"]["nodeSelector"] = json!({"no": "such-node"});
    c.create_vm(NS, &body).await;
    c.wait_printable(NS, "waiting", "ErrorUnschedulable").await;
    for (verb, message) in [
        ("pause", "VM is not running"),
        ("unpause", "VMI is not running"),
        ("softreboot", "VM is not running"),
    ] {
        assert_conflict(
            &c.vmi_verb(NS, "waiting", verb).await,
            "virtualmachineinstance",
            "waiting",
            message,
        );
    }
    assert_conflict(
        &c.vm_verb(NS, "waiting", "migrate").await,
        "virtualmachine",
        "waiting",
        "VM is not running",
    );
    // migrate without any VMI: the VM is not running either.
    c.create_vm(NS, &vm("off", Some("Halted"), json!({}))).await;
    assert_conflict(
        &c.vm_verb(NS, "off", "migrate").await,
        "virtualmachine",
        "off",
        "VM is not running",
    );

    // A running VMI.
    c.create_vm(NS, &vm("run", Some("Always"), json!({}))).await;
    c.wait_printable(NS, "run", "Running").await;
    assert_conflict(
        &c.vmi_verb(NS, "run", "unpause").await,
        "virtualmachineinstance",
        "run",
        "VMI is not paused",
    );
    let r = c.vmi_verb(NS, "run", "softreboot").await;
    assert_eq!(r.status.as_u16(), 200, "softreboot: {}", r.text);
    // dryRun: accepted, nothing changes.
    let r = c
        .sub(
            NS,
            "virtualmachineinstances",
            "run",
            "pause",
            &json!({"dryRun": ["All"]}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    assert_eq!(
        c.wait_printable(NS, "run", "Running").await["status"]["ready"],
        true
    );
    let r = c.vmi_verb(NS, "run", "pause").await;
    assert_eq!(r.status.as_u16(), 200, "pause: {}", r.text);
    c.wait_printable(NS, "run", "Paused").await;
    assert_conflict(
        &c.vmi_verb(NS, "run", "pause").await,
        "virtualmachineinstance",
        "run",
        "VMI is already paused",
    );
    assert_conflict(
        &c.vmi_verb(NS, "run", "softreboot").await,
        "virtualmachineinstance",
        "run",
        "VMI is paused",
    );
    let r = c.vmi_verb(NS, "run", "unpause").await;
    assert_eq!(r.status.as_u16(), 200, "unpause: {}", r.text);
    c.wait_vm(NS, "run", Duration::from_secs(10), |v| {
        printable(v) == "Running" && v["status"]["ready"] == true
    })
    .await;

    // ACPI off and no guest agent: nothing to soft-reboot with.
    let mut body = vm("noacpi", Some("Always"), json!({}));
    body["spec"]["template"]["spec"]["domain"]["features"] = json!({"acpi": {"enabled": false}});
    c.create_vm(NS, &body).await;
    c.wait_printable(NS, "noacpi", "Running").await;
    assert_conflict(
        &c.vmi_verb(NS, "noacpi", "softreboot").await,
        "virtualmachineinstance",
        "noacpi",
        "VMI neither have the agent connected nor the ACPI feature enabled",
    );

    // A migration in progress (its state written as the migration machinery would):
    // the VM says Migrating and pausing is refused until it completes.
    // (VMIs have no status subresource, as in KubeVirt's CRD.)
    let status_path = support::item(NS, "virtualmachineinstances", "noacpi");
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let r = c
        .api
        .merge(
            &status_path,
            &json!({"status": {"migrationState": {"startTimestamp": now, "completed": false,
                                                  "sourceNode": "sim-node-0", "targetNode": "sim-node-0"}}}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    c.wait_printable(NS, "noacpi", "Migrating").await;
    assert_conflict(
        &c.vmi_verb(NS, "noacpi", "pause").await,
        "virtualmachineinstance",
        "noacpi",
        "Cannot pause VM 'noacpi' because it is currently being migrated",
    );
    let r = c
        .api
        .merge(
            &status_path,
            &json!({"status": {"migrationState": {"endTimestamp": now, "completed": true}}}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    c.wait_printable(NS, "noacpi", "Running").await;
    let r = c.vmi_verb(NS, "noacpi", "pause").await;
    assert_eq!(
        r.status.as_u16(),
        200,
        "pause after the migration: {}",
        r.text
    );

    // Only PUT is served.
    let r = c
        .api
        .get(&format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/run/start"
        ))
        .await;
    assert_eq!(r.status.as_u16(), 405, "{}", r.text);
}
