use super::*;
use proptest::prelude::*;

fn vm(strategy: RunStrategy) -> VmState {
    VmState {
        strategy,
        deleting: false,
        last_strategy: Some(strategy),
        requests: vec![],
        start_failure: None,
    }
}

fn vmi(phase: Phase) -> VmiState {
    VmiState {
        uid: "u1".into(),
        phase,
        deleting: false,
        ever_running: phase == Phase::Running,
        paused: false,
        unschedulable: false,
        sync_failure: None,
        migrating: false,
    }
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

use RunStrategy::*;
use VmiAction as A;

/// runStrategy × observed VMI → action, as in KubeVirt's table (§1.2).
#[test]
fn strategy_table() {
    let create = A::Create { paused: false };
    let rows: Vec<(RunStrategy, Option<Phase>, VmiAction)> = vec![
        (Always, None, create.clone()),
        (Always, Some(Phase::Running), A::None),
        (Always, Some(Phase::Succeeded), A::Delete),
        (Always, Some(Phase::Failed), A::Delete),
        (RerunOnFailure, Some(Phase::Running), A::None),
        (RerunOnFailure, Some(Phase::Succeeded), A::Delete),
        (RerunOnFailure, Some(Phase::Failed), A::Delete),
        (Manual, None, A::None),
        (Manual, Some(Phase::Running), A::None),
        (Manual, Some(Phase::Succeeded), A::None),
        (Manual, Some(Phase::Failed), A::None),
        (Halted, None, A::None),
        (Halted, Some(Phase::Running), A::Delete),
        (Halted, Some(Phase::Succeeded), A::Delete),
        (Once, None, create.clone()),
        (Once, Some(Phase::Running), A::None),
        (Once, Some(Phase::Succeeded), A::None),
        (Once, Some(Phase::Failed), A::None),
    ];
    for (strategy, phase, expected) in rows {
        let v = phase.map(vmi);
        assert_eq!(
            decide(&vm(strategy), v.as_ref(), now()),
            expected,
            "{strategy:?} with {phase:?}"
        );
    }
}

#[test]
fn rerun_on_failure_starts_once_when_switched_to() {
    let mut state = vm(RerunOnFailure);
    state.last_strategy = Some(Halted);
    assert_eq!(decide(&state, None, now()), A::Create { paused: false });
    state.last_strategy = Some(RerunOnFailure);
    assert_eq!(decide(&state, None, now()), A::None);
    assert!(start_after_delete(&state, &vmi(Phase::Failed)));
    assert!(!start_after_delete(&state, &vmi(Phase::Succeeded)));
}

#[test]
fn requests_drive_manual_and_restart() {
    let mut state = vm(Manual);
    state.requests = vec![ChangeRequest::Start { paused: true }];
    assert_eq!(decide(&state, None, now()), A::Create { paused: true });
    // Restart: stop the current VMI, then start again.
    let mut state = vm(Always);
    state.requests = vec![
        ChangeRequest::Stop { uid: Some("u1".into()) },
        ChangeRequest::Start { paused: false },
    ];
    let running = vmi(Phase::Running);
    assert_eq!(decide(&state, Some(&running), now()), A::Delete);
    assert!(!should_pop_head(&state.requests, Some(&running)));
    assert!(should_pop_head(&state.requests, None));
    state.requests.remove(0);
    assert_eq!(decide(&state, None, now()), A::Create { paused: false });
    assert!(should_pop_head(&state.requests, Some(&vmi(Phase::Pending))));
    // A queued Start on a Halted VM turns it into Always.
    let mut halted = vm(Halted);
    halted.requests = vec![ChangeRequest::Start { paused: true }];
    assert_eq!(decide(&halted, None, now()), A::SwitchToAlways);
}

#[test]
fn crash_loop_backoff() {
    let mut state = vm(Always);
    let failed = VmiState {
        ever_running: false,
        ..vmi(Phase::Failed)
    };
    let no_jitter = |_| Duration::zero();
    let first = next_start_failure(&state, Some(&failed), now(), no_jitter).unwrap();
    assert_eq!(first.consecutive_fail_count, 1);
    assert_eq!(first.retry_after, now() + Duration::seconds(10));
    state.start_failure = Some(first.clone());
    // The same VMI is counted once.
    assert_eq!(
        next_start_failure(&state, Some(&failed), now(), no_jitter),
        Some(first.clone())
    );
    assert_eq!(decide(&state, None, now()), A::WaitUntil(first.retry_after));
    assert_eq!(printable_status(&state, None, false, false), "CrashLoopBackOff");
    let second = VmiState {
        uid: "u2".into(),
        ..failed.clone()
    };
    let next = next_start_failure(&state, Some(&second), now(), no_jitter).unwrap();
    assert_eq!(
        (next.consecutive_fail_count, next.retry_after),
        (2, now() + Duration::seconds(40))
    );
    // A VMI that reaches Running clears it.
    assert_eq!(
        next_start_failure(&state, Some(&vmi(Phase::Running)), now(), no_jitter),
        None
    );
    assert_eq!(backoff_base(9), Duration::seconds(300));
}

#[test]
fn printable_status_order() {
    let state = vm(Always);
    assert_eq!(printable_status(&state, None, false, false), "Stopped");
    assert_eq!(printable_status(&state, None, true, false), "Starting");
    for phase in [Phase::Pending, Phase::Scheduling, Phase::Scheduled] {
        assert_eq!(printable_status(&state, Some(&vmi(phase)), false, false), "Starting");
    }
    assert_eq!(
        printable_status(&state, Some(&vmi(Phase::Running)), false, false),
        "Running"
    );
    let paused = VmiState {
        paused: true,
        ..vmi(Phase::Running)
    };
    assert_eq!(printable_status(&state, Some(&paused), false, false), "Paused");
    let stopping = VmiState {
        deleting: true,
        ..vmi(Phase::Running)
    };
    assert_eq!(printable_status(&state, Some(&stopping), false, false), "Stopping");
    let migrating = VmiState {
        migrating: true,
        ..paused.clone()
    };
    assert_eq!(printable_status(&state, Some(&migrating), false, false), "Migrating");
    let unschedulable = VmiState {
        unschedulable: true,
        ..vmi(Phase::Scheduling)
    };
    assert_eq!(
        printable_status(&state, Some(&unschedulable), false, false),
        "ErrorUnschedulable"
    );
    let pull = VmiState {
        sync_failure: Some("ErrImagePull".into()),
        ..vmi(Phase::Scheduled)
    };
    assert_eq!(printable_status(&state, Some(&pull), false, false), "ErrImagePull");
    assert_eq!(
        printable_status(&state, Some(&vmi(Phase::Succeeded)), false, false),
        "Stopped"
    );
    let deleting_vm = VmState {
        deleting: true,
        ..state
    };
    assert_eq!(
        printable_status(&deleting_vm, Some(&stopping), false, false),
        "Terminating"
    );
}

fn arb_strategy() -> impl Strategy<Value = RunStrategy> {
    prop_oneof![
        Just(Always),
        Just(RerunOnFailure),
        Just(Manual),
        Just(Halted),
        Just(Once)
    ]
}

fn arb_phase() -> impl Strategy<Value = Phase> {
    prop_oneof![
        Just(Phase::Pending),
        Just(Phase::Scheduling),
        Just(Phase::Scheduled),
        Just(Phase::Running),
        Just(Phase::Succeeded),
        Just(Phase::Failed),
    ]
}

/// Events a VM and its VMI go through.
#[derive(Clone, Debug)]
enum Event {
    SetStrategy(RunStrategy),
    QueueStart,
    QueueStop,
    VmiPhase(Phase),
    Reconcile,
    Delete,
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        arb_strategy().prop_map(Event::SetStrategy),
        Just(Event::QueueStart),
        Just(Event::QueueStop),
        arb_phase().prop_map(Event::VmiPhase),
        Just(Event::Reconcile),
        Just(Event::Reconcile),
        Just(Event::Delete),
    ]
}

proptest! {
    /// Over random event sequences the controller never acts on a VMI that is not there,
    /// never creates a second one, never starts a Halted VM, and keeps a deleted VM down.
    #[test]
    fn decisions_are_safe(events in proptest::collection::vec(arb_event(), 1..60)) {
        let mut state = vm(Halted);
        let mut current: Option<VmiState> = None;
        let mut next_uid = 0;
        for event in events {
            match event {
                Event::SetStrategy(s) => state.strategy = s,
                Event::QueueStart => state.requests.push(ChangeRequest::Start { paused: false }),
                Event::QueueStop => state.requests.push(ChangeRequest::Stop { uid: current.as_ref().map(|v| v.uid.clone()) }),
                Event::VmiPhase(p) => if let Some(v) = current.as_mut() {
                    v.ever_running |= p == Phase::Running;
                    v.phase = p;
                },
                Event::Delete => state.deleting = true,
                Event::Reconcile => {
                    let action = decide(&state, current.as_ref(), now());
                    match &action {
                        A::Create { .. } => {
                            prop_assert!(current.is_none(), "created a second VMI");
                            prop_assert!(state.strategy != Halted, "started a Halted VM");
                            prop_assert!(!state.deleting, "started a VM being deleted");
                            next_uid += 1;
                            current = Some(VmiState { uid: format!("u{next_uid}"), ..vmi(Phase::Pending) });
                        }
                        A::Delete => {
                            prop_assert!(current.as_ref().is_some_and(|v| !v.deleting), "deleted what is not there");
                            current = None;
                        }
                        A::SwitchToAlways => {
                            prop_assert_eq!(state.strategy, Halted);
                            state.strategy = Always;
                        }
                        A::None | A::WaitUntil(_) => {}
                    }
                    if should_pop_head(&state.requests, current.as_ref()) {
                        state.requests.remove(0);
                    }
                    if state.strategy == Halted && !state.deleting && state.requests.is_empty() {
                        // A Halted VM with nothing queued is down after one more pass.
                        let again = decide(&state, current.as_ref(), now());
                        prop_assert!(matches!(again, A::None | A::Delete));
                    }
                }
            }
        }
    }
}
