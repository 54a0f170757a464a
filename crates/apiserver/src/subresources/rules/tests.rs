//! Every rule of [`super`] and its exact message: start, stop and restart per run
//! strategy and VMI state, migrate's precondition, the queue check, and the VMI verbs.

use super::*;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use ChangeRequest::{Start, Stop};

/// An object written as JSON, typed.
fn typed<T: DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).expect("a well-formed object")
}

const NOW: &str = "2024-01-02T03:04:05.000006Z";

/// A VM with this spec (`runStrategy` or `running`) and status.
fn vm(spec: Value, status: Value) -> Value {
    json!({"metadata": {"name": "vm1", "uid": "vm-uid"}, "spec": spec, "status": status})
}

fn vm_with(strategy: &str) -> Value {
    vm(json!({"runStrategy": strategy}), json!({}))
}

/// A VMI in this phase, with its own uid and this grace period (if any).
fn vmi(phase: &str) -> Value {
    json!({"metadata": {"name": "vm1", "uid": "vmi-uid"}, "status": {"phase": phase}})
}

fn vmi_with_grace(phase: &str, grace: i64) -> Value {
    let mut v = vmi(phase);
    v["spec"] = json!({"terminationGracePeriodSeconds": grace});
    v
}

fn decide(verb: VmVerb, body: Value, vm: &Value, vmi: Option<&Value>) -> Result<Decision, Refusal> {
    let vmi: Option<VirtualMachineInstance> = vmi.map(typed);
    decide_vm(verb, &body, &typed(vm), vmi.as_ref())
}

fn effects(verb: VmVerb, body: Value, vm: &Value, vmi: Option<&Value>) -> Vec<Effect> {
    let decision = decide(verb, body, vm, vmi).expect("accepted");
    assert!(!decision.dry_run);
    decision.effects
}

fn refusal(verb: VmVerb, body: Value, vm: &Value, vmi: Option<&Value>) -> Refusal {
    decide(verb, body, vm, vmi).expect_err("refused")
}

fn conflict(message: &str) -> Refusal {
    Refusal::VmConflict(message.to_string())
}

fn queue(vm: &Value, requests: Vec<ChangeRequest>) -> Effect {
    Effect::QueueStateChanges {
        expected: typed::<VirtualMachine>(vm).status.state_change_requests,
        requests,
    }
}

fn set_strategy(vm: &Value, uses_running: bool, start: bool) -> Effect {
    Effect::SetRunStrategy {
        expected_spec: Box::new(typed(&vm["spec"])),
        uses_running,
        start,
    }
}

fn stop_vmi() -> ChangeRequest {
    Stop {
        uid: Some("vmi-uid".into()),
    }
}

const START: ChangeRequest = Start { paused: false };

#[test]
fn verbs_parse_by_resource_and_subresource() {
    assert_eq!(
        Verb::parse("virtualmachines", "start"),
        Some(Verb::Vm(VmVerb::Start))
    );
    assert_eq!(
        Verb::parse("virtualmachines", "migrate"),
        Some(Verb::Vm(VmVerb::Migrate))
    );
    assert_eq!(
        Verb::parse("virtualmachineinstances", "softreboot"),
        Some(Verb::Vmi(VmiVerb::SoftReboot))
    );
    assert_eq!(Verb::parse("virtualmachines", "pause"), None);
    assert_eq!(Verb::parse("virtualmachineinstances", "start"), None);
    assert_eq!(Verb::parse("virtualmachineinstances", "console"), None);
}

#[test]
fn state_change_requests_serialise_as_virt_api_writes_them() {
    let text = |r: ChangeRequest| serde_json::to_string(&r.entry()).unwrap();
    assert_eq!(text(stop_vmi()), r#"{"action":"Stop","uid":"vmi-uid"}"#);
    assert_eq!(text(Stop { uid: None }), r#"{"action":"Stop"}"#);
    assert_eq!(text(START), r#"{"action":"Start"}"#);
    assert_eq!(
        text(Start { paused: true }),
        r#"{"action":"Start","data":{"paused":"true"}}"#
    );
}

#[test]
fn dry_run_is_all_in_the_body() {
    assert!(dry_run(&json!({"dryRun": ["All"]})));
    assert!(!dry_run(&json!({"dryRun": []})));
    assert!(!dry_run(&json!({"dryRun": "All"})));
    assert!(!dry_run(&json!({})));
    let vm = vm_with("Manual");
    let d = decide(VmVerb::Start, json!({"dryRun": ["All"]}), &vm, None).unwrap();
    assert!(d.dry_run);
}

#[test]
fn start_per_strategy_without_a_vmi() {
    let halted = vm_with("Halted");
    assert_eq!(
        effects(VmVerb::Start, json!({}), &halted, None),
        [set_strategy(&halted, false, true)]
    );
    let unset = vm(json!({}), json!({}));
    assert_eq!(
        effects(VmVerb::Start, json!({}), &unset, None),
        [set_strategy(&unset, false, true)]
    );
    let not_running = vm(json!({"running": false}), json!({}));
    assert_eq!(
        effects(VmVerb::Start, json!({}), &not_running, None),
        [set_strategy(&not_running, true, true)]
    );
    let manual = vm_with("Manual");
    assert_eq!(
        effects(VmVerb::Start, json!({}), &manual, None),
        [queue(&manual, vec![START])]
    );
    let rerun = vm_with("RerunOnFailure");
    assert_eq!(
        effects(VmVerb::Start, json!({}), &rerun, None),
        [queue(&rerun, vec![START])]
    );
    for (spec, message) in [
        (
            json!({"runStrategy": "Always"}),
            "Always does not support manual start requests",
        ),
        (
            json!({"running": true}),
            "Always does not support manual start requests",
        ),
        (
            json!({"runStrategy": "Once"}),
            "Once does not support manual start requests",
        ),
        (
            json!({"runStrategy": "Bogus"}),
            "Invalid RunStrategy (Bogus)",
        ),
    ] {
        let vm = vm(spec, json!({}));
        assert_eq!(
            refusal(VmVerb::Start, json!({}), &vm, None),
            conflict(message)
        );
    }
}

#[test]
fn start_with_an_active_vmi_is_already_running_whatever_the_strategy() {
    for strategy in [
        "Always",
        "Halted",
        "Manual",
        "RerunOnFailure",
        "Once",
        "Bogus",
    ] {
        for phase in ["Pending", "Scheduling", "Scheduled", "Running"] {
            let vm = vm_with(strategy);
            assert_eq!(
                refusal(VmVerb::Start, json!({}), &vm, Some(&vmi(phase))),
                conflict("VM is already running"),
                "{strategy} {phase}"
            );
        }
    }
    // A VMI without a phase (or an Unknown one) is not taken as running.
    let manual = vm_with("Manual");
    for phase in ["", "Unknown"] {
        assert_eq!(
            effects(VmVerb::Start, json!({}), &manual, Some(&vmi(phase))),
            [queue(&manual, vec![START])]
        );
    }
}

#[test]
fn start_after_a_finished_vmi() {
    let manual = vm_with("Manual");
    for phase in ["Succeeded", "Failed"] {
        assert_eq!(
            effects(VmVerb::Start, json!({}), &manual, Some(&vmi(phase))),
            [queue(&manual, vec![stop_vmi(), START])]
        );
    }
    let rerun = vm_with("RerunOnFailure");
    assert_eq!(
        effects(VmVerb::Start, json!({}), &rerun, Some(&vmi("Succeeded"))),
        [queue(&rerun, vec![stop_vmi(), START])]
    );
    assert_eq!(
        refusal(VmVerb::Start, json!({}), &rerun, Some(&vmi("Failed"))),
        conflict("RerunOnFailure does not support starting VM from failed state")
    );
    let halted = vm_with("Halted");
    assert_eq!(
        effects(VmVerb::Start, json!({}), &halted, Some(&vmi("Succeeded"))),
        [set_strategy(&halted, false, true)]
    );
    assert_eq!(
        refusal(
            VmVerb::Start,
            json!({}),
            &vm_with("Always"),
            Some(&vmi("Failed"))
        ),
        conflict("Always does not support manual start requests")
    );
}

#[test]
fn paused_start_goes_through_the_queue() {
    let paused = Start { paused: true };
    let halted = vm_with("Halted");
    assert_eq!(
        effects(VmVerb::Start, json!({"paused": true}), &halted, None),
        [queue(&halted, vec![paused.clone()])]
    );
    let manual = vm_with("Manual");
    assert_eq!(
        effects(
            VmVerb::Start,
            json!({"paused": true}),
            &manual,
            Some(&vmi("Failed"))
        ),
        [queue(&manual, vec![stop_vmi(), paused])]
    );
    // Only a boolean true asks for it.
    assert_eq!(
        effects(VmVerb::Start, json!({"paused": "true"}), &halted, None),
        [set_strategy(&halted, false, true)]
    );
}

#[test]
fn queued_requests_are_expected_as_read() {
    let queued = json!([{"action": "Stop", "uid": "old"}]);
    let manual = vm(
        json!({"runStrategy": "Manual"}),
        json!({"stateChangeRequests": queued}),
    );
    assert_eq!(
        effects(VmVerb::Start, json!({}), &manual, None),
        [Effect::QueueStateChanges {
            expected: Some(typed(&queued)),
            requests: vec![START]
        }]
    );
}

#[test]
fn a_spec_switch_clears_the_start_failure_unless_dry_run() {
    let failed = vm(
        json!({"runStrategy": "Halted"}),
        json!({"startFailure": {"retries": 1}}),
    );
    assert_eq!(
        effects(VmVerb::Start, json!({}), &failed, None),
        [
            set_strategy(&failed, false, true),
            Effect::ClearStartFailure
        ]
    );
    let d = decide(VmVerb::Start, json!({"dryRun": ["All"]}), &failed, None).unwrap();
    assert_eq!(d.effects, [set_strategy(&failed, false, true)]);
    let always = vm(
        json!({"runStrategy": "Always"}),
        json!({"startFailure": {"retries": 1}}),
    );
    assert_eq!(
        effects(VmVerb::Stop, json!({}), &always, None),
        [
            set_strategy(&always, false, false),
            Effect::ClearStartFailure
        ]
    );
    // The queue write clears it itself.
    let manual = vm(
        json!({"runStrategy": "Manual"}),
        json!({"startFailure": {"retries": 1}}),
    );
    assert_eq!(
        effects(VmVerb::Start, json!({}), &manual, None),
        [queue(&manual, vec![START])]
    );
}

#[test]
fn stop_per_strategy() {
    let running = vmi("Running");
    for strategy in ["Manual", "RerunOnFailure"] {
        let vm = vm_with(strategy);
        assert_eq!(
            effects(VmVerb::Stop, json!({}), &vm, Some(&running)),
            [queue(&vm, vec![stop_vmi()])]
        );
        for vmi in [None, Some(vmi("Succeeded")), Some(vmi("Failed"))] {
            assert_eq!(
                refusal(VmVerb::Stop, json!({}), &vm, vmi.as_ref()),
                conflict("VM is not running"),
                "{strategy}"
            );
        }
    }
    // Always and Once switch the spec, with or without a VMI.
    for spec in [
        json!({"runStrategy": "Always"}),
        json!({"runStrategy": "Once"}),
    ] {
        let vm = vm(spec, json!({}));
        for vmi in [None, Some(vmi("Running")), Some(vmi("Failed"))] {
            assert_eq!(
                effects(VmVerb::Stop, json!({}), &vm, vmi.as_ref()),
                [set_strategy(&vm, false, false)]
            );
        }
    }
    let running_field = vm(json!({"running": true}), json!({}));
    assert_eq!(
        effects(VmVerb::Stop, json!({}), &running_field, Some(&running)),
        [set_strategy(&running_field, true, false)]
    );
    assert_eq!(
        refusal(VmVerb::Stop, json!({}), &vm_with("Bogus"), Some(&running)),
        conflict("Invalid RunStrategy (Bogus)")
    );
}

#[test]
fn stop_of_a_halted_vm_needs_a_shorter_grace_period() {
    const SHORTER: &str = "Halted only supports manual stop requests with a shorter graceperiod";
    let halted = vm_with("Halted");
    let unset = vm(json!({}), json!({}));
    assert_eq!(
        refusal(VmVerb::Stop, json!({"gracePeriod": 1}), &halted, None),
        conflict("VM is not running")
    );
    let with_grace = vmi_with_grace("Running", 30);
    for body in [
        json!({}),
        json!({"gracePeriod": 30}),
        json!({"gracePeriod": 31}),
    ] {
        for vm in [&halted, &unset] {
            assert_eq!(
                refusal(VmVerb::Stop, body.clone(), vm, Some(&with_grace)),
                conflict(SHORTER),
                "{body}"
            );
        }
    }
    assert_eq!(
        effects(
            VmVerb::Stop,
            json!({"gracePeriod": 29}),
            &halted,
            Some(&with_grace)
        ),
        [
            Effect::SetVmiGracePeriod(29),
            queue(&halted, vec![stop_vmi()])
        ]
    );
    // A VMI without a grace period of its own: any given one is shorter.
    assert_eq!(
        effects(
            VmVerb::Stop,
            json!({"gracePeriod": 100}),
            &halted,
            Some(&vmi("Running"))
        ),
        [
            Effect::SetVmiGracePeriod(100),
            queue(&halted, vec![stop_vmi()])
        ]
    );
    assert_eq!(
        refusal(VmVerb::Stop, json!({}), &halted, Some(&vmi("Running"))),
        conflict(SHORTER)
    );
}

#[test]
fn stop_sets_the_grace_period_of_an_active_vmi_only() {
    let manual = vm_with("Manual");
    assert_eq!(
        effects(
            VmVerb::Stop,
            json!({"gracePeriod": 0}),
            &manual,
            Some(&vmi_with_grace("Running", 30))
        ),
        [
            Effect::SetVmiGracePeriod(0),
            queue(&manual, vec![stop_vmi()])
        ]
    );
    let always = vm_with("Always");
    assert_eq!(
        effects(
            VmVerb::Stop,
            json!({"gracePeriod": 5}),
            &always,
            Some(&vmi("Pending"))
        ),
        [
            Effect::SetVmiGracePeriod(5),
            set_strategy(&always, false, false)
        ]
    );
    for vmi in [None, Some(vmi("Failed"))] {
        assert_eq!(
            effects(
                VmVerb::Stop,
                json!({"gracePeriod": 5}),
                &always,
                vmi.as_ref()
            ),
            [set_strategy(&always, false, false)]
        );
    }
    // Not an integer: no grace period given.
    assert_eq!(
        effects(
            VmVerb::Stop,
            json!({"gracePeriod": "5"}),
            &manual,
            Some(&vmi("Running"))
        ),
        [queue(&manual, vec![stop_vmi()])]
    );
}

#[test]
fn restart_per_strategy() {
    let running = vmi("Running");
    for spec in [
        json!({"runStrategy": "Always"}),
        json!({"running": true}),
        json!({"runStrategy": "Manual"}),
        json!({"runStrategy": "RerunOnFailure"}),
    ] {
        let vm = vm(spec, json!({}));
        for vmi in [vmi("Running"), vmi("Failed"), vmi("")] {
            assert_eq!(
                effects(VmVerb::Restart, json!({}), &vm, Some(&vmi)),
                [queue(&vm, vec![stop_vmi(), START])]
            );
        }
        // virt-api names the strategy Halted whatever it is.
        assert_eq!(
            refusal(VmVerb::Restart, json!({}), &vm, None),
            conflict("VM is not running: Halted")
        );
    }
    for (spec, message) in [
        (
            json!({"runStrategy": "Halted"}),
            "RunStategy Halted does not support manual restart requests",
        ),
        (
            json!({}),
            "RunStategy Halted does not support manual restart requests",
        ),
        (
            json!({"running": false}),
            "RunStategy Halted does not support manual restart requests",
        ),
        (
            json!({"runStrategy": "Once"}),
            "RunStategy Once does not support manual restart requests",
        ),
        (
            json!({"runStrategy": "Bogus"}),
            "Invalid RunStrategy (Bogus)",
        ),
    ] {
        let vm = vm(spec, json!({}));
        for vmi in [None, Some(&running)] {
            assert_eq!(
                refusal(VmVerb::Restart, json!({}), &vm, vmi),
                conflict(message)
            );
        }
    }
}

#[test]
fn restart_grace_period_checks() {
    let always = vm_with("Always");
    let running = vmi("Running");
    assert_eq!(
        effects(
            VmVerb::Restart,
            json!({"gracePeriodSeconds": 0}),
            &always,
            Some(&running)
        ),
        [
            Effect::SetVmiGracePeriod(1),
            queue(&always, vec![stop_vmi(), START])
        ]
    );
    // The grace period is checked before anything else, even an invalid strategy.
    for vm in [always.clone(), vm_with("Bogus"), vm_with("Halted")] {
        assert_eq!(
            refusal(VmVerb::Restart, json!({"gracePeriodSeconds": 5}), &vm, None),
            Refusal::BadRequest(
                "For force restart, only gracePeriod=0 is supported for now".into()
            )
        );
        assert_eq!(
            refusal(
                VmVerb::Restart,
                json!({"gracePeriodSeconds": -1}),
                &vm,
                None
            ),
            Refusal::BadRequest("gracePeriod has to be greater or equal to 0".into())
        );
    }
    // Stop's field name is not restart's.
    assert_eq!(
        effects(
            VmVerb::Restart,
            json!({"gracePeriod": 5}),
            &always,
            Some(&running)
        ),
        [queue(&always, vec![stop_vmi(), START])]
    );
}

#[test]
fn migrate_needs_a_running_vmi() {
    let vm = vm_with("Always");
    for vmi in [
        None,
        Some(vmi("Pending")),
        Some(vmi("Scheduled")),
        Some(vmi("Succeeded")),
    ] {
        assert_eq!(
            refusal(VmVerb::Migrate, json!({}), &vm, vmi.as_ref()),
            conflict("VM is not running")
        );
    }
    let running = vmi("Running");
    assert_eq!(
        effects(VmVerb::Migrate, json!({}), &vm, Some(&running)),
        [Effect::CreateMigration {
            vmi_name: "vm1".into(),
            added_node_selector: None
        }]
    );
    let selector = json!({"zone": "b"});
    assert_eq!(
        effects(
            VmVerb::Migrate,
            json!({"addedNodeSelector": selector}),
            &vm,
            Some(&running)
        ),
        [Effect::CreateMigration {
            vmi_name: "vm1".into(),
            added_node_selector: Some(selector)
        }]
    );
    assert_eq!(
        effects(
            VmVerb::Migrate,
            json!({"addedNodeSelector": "zone=b"}),
            &vm,
            Some(&running)
        ),
        [Effect::CreateMigration {
            vmi_name: "vm1".into(),
            added_node_selector: None
        }]
    );
    // Whatever the strategy, even an invalid one: migrate does not read it.
    let bogus = vm_with("Bogus");
    assert!(decide(VmVerb::Migrate, json!({}), &bogus, Some(&running)).is_ok());
}

#[test]
fn the_queue_takes_a_lone_stop_over_queued_requests_only() {
    const UNDERWAY: &str = "unable to complete request: stop/start already underway";
    let queued: Vec<StateChangeRequest> = typed(&json!([{"action": "Start"}]));
    for current in [None, Some(vec![])] {
        for requests in [vec![START], vec![stop_vmi(), START], vec![stop_vmi()]] {
            assert_eq!(check_queue(current.as_ref(), &requests), Ok(()));
        }
    }
    assert_eq!(check_queue(Some(&queued), &[stop_vmi()]), Ok(()));
    assert_eq!(check_queue(Some(&queued), &[Stop { uid: None }]), Ok(()));
    for requests in [
        vec![START],
        vec![stop_vmi(), START],
        vec![Start { paused: true }],
    ] {
        assert_eq!(
            check_queue(Some(&queued), &requests),
            Err(Refusal::Internal(UNDERWAY.into()))
        );
    }
}

fn vmi_refusal(verb: VmiVerb, vmi: &Value) -> Refusal {
    decide_vmi(verb, &json!({}), &typed(vmi), NOW).expect_err("refused")
}

fn vmi_conflict(message: &str) -> Refusal {
    Refusal::VmiConflict(message.to_string())
}

fn paused(mut vmi: Value) -> Value {
    vmi["status"]["conditions"] =
        json!([{"type": "Ready", "status": "True"}, {"type": "Paused", "status": "True"}]);
    vmi
}

fn annotations(verb: VmiVerb, body: Value, vmi: &Value) -> Decision {
    decide_vmi(verb, &body, &typed(vmi), NOW).expect("accepted")
}

#[test]
fn pause_rules() {
    let running = vmi("Running");
    assert_eq!(
        annotations(VmiVerb::Pause, json!({}), &running),
        Decision {
            dry_run: false,
            effects: vec![Effect::Annotate(vec![(
                PAUSE_ANNOTATION,
                Some("true".into())
            )])]
        }
    );
    assert!(annotations(VmiVerb::Pause, json!({"dryRun": ["All"]}), &running).dry_run);
    for phase in ["", "Pending", "Scheduled", "Succeeded", "Failed"] {
        assert_eq!(
            vmi_refusal(VmiVerb::Pause, &vmi(phase)),
            vmi_conflict("VM is not running")
        );
    }
    assert_eq!(
        vmi_refusal(VmiVerb::Pause, &paused(vmi("Running"))),
        vmi_conflict("VMI is already paused")
    );
    // A condition other than Paused=True is not paused.
    let mut not_paused = vmi("Running");
    not_paused["status"]["conditions"] = json!([{"type": "Paused", "status": "False"}]);
    assert!(decide_vmi(VmiVerb::Pause, &json!({}), &typed(&not_paused), NOW).is_ok());

    let mut migrating = vmi("Running");
    migrating["status"]["migrationState"] = json!({"migrationUid": "m1", "sourceNode": "n1"});
    assert_eq!(
        vmi_refusal(VmiVerb::Pause, &migrating),
        vmi_conflict("Cannot pause VM 'vm1' because it is currently being migrated")
    );
    for ended in [
        json!({"completed": true}),
        json!({"failed": true}),
        json!({"endTimestamp": "2024-01-01T00:00:00Z"}),
    ] {
        let mut migrated = vmi("Running");
        migrated["status"]["migrationState"] = ended;
        assert!(decide_vmi(VmiVerb::Pause, &json!({}), &typed(&migrated), NOW).is_ok());
    }
}

#[test]
fn unpause_rules() {
    assert_eq!(
        annotations(VmiVerb::Unpause, json!({}), &paused(vmi("Running"))).effects,
        [Effect::Annotate(vec![
            (PAUSE_ANNOTATION, None),
            (UNPAUSE_REQUESTED, Some(NOW.into()))
        ])]
    );
    assert_eq!(
        vmi_refusal(VmiVerb::Unpause, &paused(vmi("Scheduled"))),
        vmi_conflict("VMI is not running")
    );
    assert_eq!(
        vmi_refusal(VmiVerb::Unpause, &vmi("Running")),
        vmi_conflict("VMI is not paused")
    );
}

#[test]
fn soft_reboot_rules() {
    let running = vmi("Running");
    assert_eq!(
        annotations(VmiVerb::SoftReboot, json!({}), &running).effects,
        [Effect::Annotate(vec![(
            SOFT_REBOOT_ANNOTATION,
            Some(NOW.into())
        )])]
    );
    assert_eq!(
        vmi_refusal(VmiVerb::SoftReboot, &vmi("Failed")),
        vmi_conflict("VM is not running")
    );
    assert_eq!(
        vmi_refusal(VmiVerb::SoftReboot, &paused(vmi("Running"))),
        vmi_conflict("VMI is paused")
    );
    let mut no_acpi = vmi("Running");
    no_acpi["spec"] = json!({"domain": {"features": {"acpi": {"enabled": false}}}});
    assert_eq!(
        vmi_refusal(VmiVerb::SoftReboot, &no_acpi),
        vmi_conflict("VMI neither have the agent connected nor the ACPI feature enabled")
    );
    // ACPI is on unless turned off.
    let mut acpi = vmi("Running");
    acpi["spec"] = json!({"domain": {"features": {"acpi": {}}}});
    assert!(decide_vmi(VmiVerb::SoftReboot, &json!({}), &typed(&acpi), NOW).is_ok());
}
