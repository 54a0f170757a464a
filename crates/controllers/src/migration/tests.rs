use super::*;
use serde::de::DeserializeOwned;

/// A typed object from its JSON.
pub(super) fn typed<T: DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).expect("a well-formed object")
}

/// [`super::decide`] of a migration written as JSON.
fn decide(vmim: &Value, view: &View) -> Step {
    super::decide(&typed(vmim), view)
}

static DEFAULTS: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| effective_configuration(None));

fn node(name: &str, ready: bool) -> NodeView {
    let status = if ready { "True" } else { "Unknown" };
    (
        name.to_string(),
        Arc::new(typed(
            &json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
               "status": {"conditions": [{"type": "Ready", "status": status}],
                          "allocatable": {"cpu": "4", "memory": "8Gi"}}}),
        )),
        Resources {
            millicpu: 4000,
            memory: 8 << 30,
        },
    )
}

fn vmim(phase: &str, state: Value) -> Value {
    json!({"metadata": {"name": "m", "uid": "m1", "finalizers": [FINALIZER]},
           "spec": {"vmiName": "vm"},
           "status": {"phase": phase, "migrationState": state}})
}

fn vmi(node: &str, state: Value) -> Value {
    json!({"metadata": {"name": "vm"}, "spec": {"domain": {}},
           "status": {"phase": "Running", "nodeName": node, "migrationState": state}})
}

fn view<'a>(vmi: Option<&'a Value>, nodes: &'a [NodeView]) -> View<'a> {
    View {
        // Leaked: a test's few objects live as long as its views.
        vmi: vmi.map(|v| &*Box::leak(Box::new(typed(v)))),
        nodes,
        active: &[],
        unschedulable_for: None,
        configuration: &DEFAULTS,
    }
}

fn phase_of(step: &Step) -> Option<MigrationPhase> {
    match step {
        Step::Enter { phase, .. } => Some(*phase),
        _ => None,
    }
}

#[test]
fn a_target_other_than_the_source_is_chosen() {
    let nodes = [node("a", true), node("b", true)];
    let v = vmi("a", Value::Null);
    let step = decide(&vmim("Pending", Value::Null), &view(Some(&v), &nodes));
    let Step::Enter { phase, status } = step else {
        panic!("{step:?}")
    };
    assert_eq!(phase, MigrationPhase::Scheduling);
    assert_eq!(status["migrationState"]["targetNode"], "b");
    assert_eq!(status["migrationState"]["sourceNode"], "a");
}

#[test]
fn no_target_says_why_and_fails_after_the_timeout() {
    let nodes = [node("a", true), node("b", false)];
    let v = vmi("a", Value::Null);
    let step = decide(&vmim("Pending", Value::Null), &view(Some(&v), &nodes));
    let Step::Enter { status, .. } = &step else {
        panic!("{step:?}")
    };
    assert_eq!(status["conditions"][0]["type"], UNSCHEDULABLE);
    assert_eq!(
        status["conditions"][0]["message"],
        "0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 1 node(s) were not ready."
    );
    let mut waited = view(Some(&v), &nodes);
    waited.unschedulable_for = Some(UNSCHEDULABLE_TIMEOUT);
    let step = decide(&vmim("Scheduling", json!({"sourceNode": "a"})), &waited);
    assert_eq!(phase_of(&step), Some(MigrationPhase::Failed));
}

#[test]
fn limits_keep_a_migration_pending() {
    let nodes = [node("a", true), node("b", true)];
    let v = vmi("a", Value::Null);
    let active: Vec<(String, String)> =
        (0..2).map(|i| (format!("u{i}"), "a".to_string())).collect();
    let mut busy = view(Some(&v), &nodes);
    busy.active = &active;
    assert_eq!(decide(&vmim("Pending", Value::Null), &busy), Step::Wait);
}

#[test]
fn the_phases_follow_what_the_nodes_report() {
    let nodes = [node("a", true), node("b", true)];
    let m = |phase| vmim(phase, json!({"sourceNode": "a", "targetNode": "b"}));
    let v = vmi("a", Value::Null);
    assert_eq!(
        decide(&m("Scheduling"), &view(Some(&v), &nodes)).clone(),
        Step::Enter {
            phase: MigrationPhase::Scheduled,
            status: json!({})
        }
    );
    assert_eq!(
        decide(&m("Scheduled"), &view(Some(&v), &nodes)),
        Step::HandOff {
            source: "a".into(),
            target: "b".into()
        }
    );
    let handed = json!({"migrationUid": "m1", "sourceNode": "a", "targetNode": "b"});
    let v = vmi("a", handed.clone());
    assert_eq!(
        decide(&m("PreparingTarget"), &view(Some(&v), &nodes)),
        Step::Wait
    );
    let mut ready = handed.clone();
    ready["targetNodeAddress"] = json!("127.0.0.1");
    let v = vmi("a", ready.clone());
    assert_eq!(
        phase_of(&decide(&m("PreparingTarget"), &view(Some(&v), &nodes))),
        Some(MigrationPhase::TargetReady)
    );
    ready["startTimestamp"] = json!("t");
    let v = vmi("a", ready.clone());
    assert_eq!(
        phase_of(&decide(&m("TargetReady"), &view(Some(&v), &nodes))),
        Some(MigrationPhase::Running)
    );
    ready["completed"] = json!(true);
    // Completed, but the target has not taken the VMI yet.
    let v = vmi("a", ready.clone());
    assert_eq!(decide(&m("Running"), &view(Some(&v), &nodes)), Step::Wait);
    let v = vmi("b", ready.clone());
    assert_eq!(
        phase_of(&decide(&m("Running"), &view(Some(&v), &nodes))),
        Some(MigrationPhase::Succeeded)
    );
}

#[test]
fn failures_carry_kubevirt_reasons() {
    let nodes = [node("a", true), node("b", true)];
    let reason = |step: Step| match step {
        Step::Enter { status, .. } => status["migrationState"]["failureReason"].clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        reason(decide(&vmim("Pending", Value::Null), &view(None, &nodes))),
        "Migration failed because vmi does not exist."
    );
    let mut gone = vmi("a", Value::Null);
    gone["status"]["phase"] = json!("Succeeded");
    assert_eq!(
        reason(decide(
            &vmim("Running", Value::Null),
            &view(Some(&gone), &nodes)
        )),
        "Migration failed vmi shutdown during migration."
    );
    let other = vmi(
        "a",
        json!({"migrationUid": "other", "sourceNode": "a", "targetNode": "b"}),
    );
    assert_eq!(
        reason(decide(&vmim("", Value::Null), &view(Some(&other), &nodes))),
        "VMI is not eligible for migration because another migration job is in progress."
    );
    let mut deleted = vmim("Scheduling", Value::Null);
    deleted["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
    let v = vmi("a", Value::Null);
    assert_eq!(
        reason(decide(&deleted, &view(Some(&v), &nodes))),
        "Migration failed due to being canceled"
    );
    let failed = vmi(
        "a",
        json!({"migrationUid": "m1", "targetNode": "b", "failed": true,
                                 "failureReason": "Live migration has been aborted"}),
    );
    assert_eq!(
        reason(decide(
            &vmim("Running", Value::Null),
            &view(Some(&failed), &nodes)
        )),
        "Live migration has been aborted"
    );
}

#[test]
fn a_deleted_running_migration_is_aborted_and_a_lost_target_fails_it() {
    let nodes = [node("a", true), node("b", true)];
    let running = vmi(
        "a",
        json!({"migrationUid": "m1", "sourceNode": "a", "targetNode": "b",
                                  "startTimestamp": "t"}),
    );
    let mut deleted = vmim("Running", Value::Null);
    deleted["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
    assert_eq!(
        decide(&deleted, &view(Some(&running), &nodes)),
        Step::RequestAbort
    );
    let lost = [node("a", true), node("b", false)];
    assert_eq!(
        decide(&vmim("Running", Value::Null), &view(Some(&running), &lost)),
        Step::TargetDown { node: "b".into() }
    );
}

#[test]
fn a_final_migration_copies_the_state_and_lets_go() {
    let nodes = [node("a", true)];
    let state =
        json!({"migrationUid": "m1", "sourceNode": "a", "targetNode": "b", "completed": true});
    let v = vmi("b", state.clone());
    let Step::Finalize {
        state: Some(copied),
    } = decide(&vmim("Succeeded", Value::Null), &view(Some(&v), &nodes))
    else {
        panic!()
    };
    assert_eq!(copied.target_node.as_deref(), Some("b"));
    let mut released = vmim("Succeeded", Value::Null);
    released["metadata"]["finalizers"] = json!([]);
    assert_eq!(decide(&released, &view(Some(&v), &nodes)), Step::Wait);
}

#[test]
fn the_cluster_configuration_overrides_the_defaults() {
    let kv = json!({"spec": {"configuration": {"migrations": {
        "parallelOutboundMigrationsPerNode": 1, "bandwidthPerMigration": "64Mi"}}}});
    let config = effective_configuration(Some(&typed(&kv)));
    assert_eq!(config["bandwidthPerMigration"], "64Mi");
    assert_eq!(config["progressTimeout"], 150);
    let nodes = [node("a", true), node("b", true)];
    let v = vmi("a", Value::Null);
    let active = [("u0".to_string(), "a".to_string())];
    let mut one_out = view(Some(&v), &nodes);
    one_out.active = &active;
    one_out.configuration = &config;
    assert_eq!(decide(&vmim("Pending", Value::Null), &one_out), Step::Wait);
}

mod model {
    use super::super::world::{Copy, Event, World};
    use super::*;
    use proptest::prelude::*;

    fn arb_event() -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => Just(Event::Controller),
            2 => Just(Event::TargetPublishes),
            2 => Just(Event::SourceStarts),
            2 => Just(Event::SourceSends),
            1 => Just(Event::SourceFails),
            2 => Just(Event::TargetTakesOver),
            1 => Just(Event::TargetFails),
            1 => Just(Event::DeleteMigration),
            1 => Just(Event::TargetNodeDown),
            1 => Just(Event::GuestPowersOff),
            2 => Just(Event::SourceReacts),
            1 => Just(Event::TimePasses),
        ]
    }

    fn check(world: &World, after: &str) {
        assert!(
            world.running() <= 1,
            "two running guests after {after}: {world:?}"
        );
        if !world.gone {
            assert!(
                !world.guests.is_empty(),
                "no guest at all after {after}: {world:?}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever happens in whatever order, the guest never runs twice and is never
        /// lost, and once the agents and the controller have done what they do, the
        /// migration is final and let go, with the guest running on exactly one node.
        #[test]
        fn never_two_guests_and_always_final(events in proptest::collection::vec(arb_event(), 0..40)) {
            let mut world = World::new();
            for event in &events {
                world.apply(*event);
                check(&world, &format!("{event:?}"));
            }
            let settle = [
                Event::Controller,
                Event::TargetPublishes,
                Event::SourceStarts,
                Event::SourceSends,
                Event::TargetTakesOver,
                Event::SourceReacts,
                Event::TimePasses,
            ];
            for _ in 0..60 {
                for event in settle {
                    world.apply(event);
                    check(&world, &format!("settling {event:?}"));
                }
            }
            let phase = typed::<VirtualMachineInstanceMigration>(&world.vmim).phase();
            prop_assert!(phase.is_final(), "not final: {:?} {world:?} after {events:?}", phase);
            prop_assert_eq!(&world.vmim["metadata"]["finalizers"], &json!([]));
            if !world.gone {
                prop_assert_eq!(world.running(), 1, "{:?}", world);
                let on = world.guests.iter().find(|(_, c)| **c == Copy::Running).map(|(n, _)| n.clone());
                prop_assert_eq!(json!(on), world.vmi["status"]["nodeName"].clone());
                prop_assert_eq!(phase == MigrationPhase::Succeeded, world.vmi["status"]["nodeName"] == "b");
            }
        }
    }
}
