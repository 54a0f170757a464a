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
        ChangeRequest::Stop {
            uid: Some("u1".into()),
        },
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
    assert_eq!(
        printable_status(&state, None, false, false),
        "CrashLoopBackOff"
    );
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
        assert_eq!(
            printable_status(&state, Some(&vmi(phase)), false, false),
            "Starting"
        );
    }
    assert_eq!(
        printable_status(&state, Some(&vmi(Phase::Running)), false, false),
        "Running"
    );
    let paused = VmiState {
        paused: true,
        ..vmi(Phase::Running)
    };
    assert_eq!(
        printable_status(&state, Some(&paused), false, false),
        "Paused"
    );
    let stopping = VmiState {
        deleting: true,
        ..vmi(Phase::Running)
    };
    assert_eq!(
        printable_status(&state, Some(&stopping), false, false),
        "Stopping"
    );
    let migrating = VmiState {
        migrating: true,
        ..paused.clone()
    };
    assert_eq!(
        printable_status(&state, Some(&migrating), false, false),
        "Migrating"
    );
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
    assert_eq!(
        printable_status(&state, Some(&pull), false, false),
        "ErrImagePull"
    );
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

/// Gaps the table above leaves: VMIs being deleted, stop requests per strategy, a VM
/// being deleted, RerunOnFailure after it ran, and Halted with a finished VMI.
#[test]
fn strategy_table_more() {
    let deleting = |phase| VmiState {
        deleting: true,
        ..vmi(phase)
    };
    for strategy in [Always, RerunOnFailure, Manual, Halted, Once] {
        // A VMI already on its way out is left alone.
        assert_eq!(
            decide(&vm(strategy), Some(&deleting(Phase::Running)), now()),
            A::None,
            "{strategy:?}"
        );
        // A stop request for the current VMI deletes it whatever the strategy.
        let mut stopping = vm(strategy);
        stopping.requests = vec![ChangeRequest::Stop {
            uid: Some("u1".into()),
        }];
        assert_eq!(
            decide(&stopping, Some(&vmi(Phase::Running)), now()),
            A::Delete,
            "{strategy:?}"
        );
        // A stop request for another VMI does not.
        stopping.requests = vec![ChangeRequest::Stop {
            uid: Some("old".into()),
        }];
        let expected = if strategy == Halted {
            A::Delete
        } else {
            A::None
        };
        assert_eq!(
            decide(&stopping, Some(&vmi(Phase::Running)), now()),
            expected,
            "{strategy:?}"
        );
        // A VM being deleted stops its VMI and never starts one.
        let mut gone = vm(strategy);
        gone.deleting = true;
        gone.requests = vec![ChangeRequest::Start { paused: false }];
        assert_eq!(decide(&gone, Some(&vmi(Phase::Running)), now()), A::Delete);
        assert_eq!(
            decide(&gone, Some(&deleting(Phase::Running)), now()),
            A::None
        );
        assert_eq!(decide(&gone, None, now()), A::None, "{strategy:?}");
    }
    assert_eq!(
        decide(&vm(Halted), Some(&vmi(Phase::Failed)), now()),
        A::Delete
    );
    assert_eq!(
        decide(&vm(Halted), Some(&vmi(Phase::Pending)), now()),
        A::Delete
    );
    // RerunOnFailure that already ran and was stopped stays down until asked.
    assert_eq!(decide(&vm(RerunOnFailure), None, now()), A::None);
    let mut rerun = vm(RerunOnFailure);
    rerun.requests = vec![ChangeRequest::Start { paused: false }];
    assert_eq!(decide(&rerun, None, now()), A::Create { paused: false });
    // Manual starts paused when asked to.
    let mut manual = vm(Manual);
    manual.requests = vec![ChangeRequest::Start { paused: true }];
    assert_eq!(decide(&manual, None, now()), A::Create { paused: true });
    // Always and Once create even with a (stale) Stop queued, as KubeVirt does.
    for strategy in [Always, Once] {
        let mut state = vm(strategy);
        state.requests = vec![ChangeRequest::Stop {
            uid: Some("gone".into()),
        }];
        assert_eq!(decide(&state, None, now()), A::Create { paused: false });
    }
    // Paused start requested through the queue on Always (start paused after a restart).
    let mut always = vm(Always);
    always.requests = vec![ChangeRequest::Start { paused: true }];
    assert_eq!(decide(&always, None, now()), A::Create { paused: true });
}

#[test]
fn stale_stops_are_trimmed_first() {
    let stop = |uid: Option<&str>| ChangeRequest::Stop {
        uid: uid.map(str::to_string),
    };
    let start = ChangeRequest::Start { paused: false };
    // Restart after the old VMI is gone: only the Start is left.
    let mut q = vec![stop(Some("u1")), start.clone()];
    trim_stale_stops(&mut q, None);
    assert_eq!(q, vec![start.clone()]);
    // The Stop of the current VMI stays.
    let mut q = vec![stop(Some("u1")), start.clone()];
    trim_stale_stops(&mut q, Some(&vmi(Phase::Running)));
    assert_eq!(q.len(), 2);
    // A Stop for an older VMI goes; an unqualified one stays while a VMI exists.
    let mut q = vec![stop(Some("u0")), stop(None), start.clone()];
    trim_stale_stops(&mut q, Some(&vmi(Phase::Running)));
    assert_eq!(q, vec![stop(None), start.clone()]);
    // A Start at the head is never trimmed here.
    let mut q = vec![start.clone(), stop(None)];
    trim_stale_stops(&mut q, None);
    assert_eq!(q.len(), 2);
    // Manual restart completes in one pass once the VMI is gone.
    let mut manual = vm(Manual);
    manual.requests = vec![stop(Some("u1")), start];
    trim_stale_stops(&mut manual.requests, None);
    assert_eq!(decide(&manual, None, now()), A::Create { paused: false });
}

#[test]
fn printable_status_more() {
    let state = vm(Always);
    // Stopping beats Migrating and Paused; the controller's own pending delete counts.
    let migrating = VmiState {
        migrating: true,
        paused: true,
        ..vmi(Phase::Running)
    };
    assert_eq!(
        printable_status(&state, Some(&migrating), false, true),
        "Stopping"
    );
    // A finished VMI being deleted is Stopped, not Stopping.
    let done = VmiState {
        deleting: true,
        ..vmi(Phase::Succeeded)
    };
    assert_eq!(
        printable_status(&state, Some(&done), false, false),
        "Stopped"
    );
    let pvc = VmiState {
        sync_failure: Some("FailedPvcNotFound".into()),
        ..vmi(Phase::Pending)
    };
    assert_eq!(
        printable_status(&state, Some(&pvc), false, false),
        "ErrorPvcNotFound"
    );
    let backoff = VmiState {
        sync_failure: Some("ImagePullBackOff".into()),
        ..vmi(Phase::Scheduled)
    };
    assert_eq!(
        printable_status(&state, Some(&backoff), false, false),
        "ImagePullBackOff"
    );
    // Unschedulable beats image pull errors; both beat Starting.
    let both = VmiState {
        unschedulable: true,
        ..backoff.clone()
    };
    assert_eq!(
        printable_status(&state, Some(&both), false, false),
        "ErrorUnschedulable"
    );
    // A phase-less VMI (just created) is Starting.
    assert_eq!(
        printable_status(&state, Some(&vmi(Phase::Unset)), false, false),
        "Starting"
    );
    // CrashLoopBackOff only for Always, RerunOnFailure and Once, and not while creating.
    let failure = StartFailure {
        consecutive_fail_count: 2,
        last_failed_vmi_uid: "u1".into(),
        retry_after: now(),
    };
    for (strategy, expected) in [
        (Always, "CrashLoopBackOff"),
        (RerunOnFailure, "CrashLoopBackOff"),
        (Once, "CrashLoopBackOff"),
        (Manual, "Stopped"),
        (Halted, "Stopped"),
    ] {
        let s = VmState {
            start_failure: Some(failure.clone()),
            ..vm(strategy)
        };
        assert_eq!(
            printable_status(&s, None, false, false),
            expected,
            "{strategy:?}"
        );
        assert_eq!(
            printable_status(&s, Some(&vmi(Phase::Failed)), false, false),
            expected,
            "{strategy:?}"
        );
        assert_eq!(
            printable_status(&s, None, true, false),
            "Starting",
            "{strategy:?}"
        );
    }
}

#[test]
fn start_failure_bookkeeping() {
    let no_jitter = |_| Duration::zero();
    let never_ran = VmiState {
        ever_running: false,
        ..vmi(Phase::Failed)
    };
    // Not tracked for Manual or Halted: any record is dropped.
    for strategy in [Manual, Halted] {
        let state = VmState {
            start_failure: Some(StartFailure {
                consecutive_fail_count: 3,
                last_failed_vmi_uid: "x".into(),
                retry_after: now(),
            }),
            ..vm(strategy)
        };
        assert_eq!(
            next_start_failure(&state, Some(&never_ran), now(), no_jitter),
            None
        );
    }
    // A VMI still on its way up keeps the record as it is.
    let mut state = vm(Always);
    let first = next_start_failure(&state, Some(&never_ran), now(), no_jitter);
    state.start_failure = first.clone();
    let booting = VmiState {
        uid: "u2".into(),
        ever_running: false,
        ..vmi(Phase::Scheduled)
    };
    assert_eq!(
        next_start_failure(&state, Some(&booting), now(), no_jitter),
        first
    );
    // Backoff: 10 s × n², jitter up to half of it, never past 300 s.
    for (n, base) in [
        (1, 10),
        (2, 40),
        (3, 90),
        (4, 160),
        (5, 250),
        (6, 300),
        (30, 300),
    ] {
        assert_eq!(backoff_base(n), Duration::seconds(base), "n={n}");
    }
    let full_jitter = |max: Duration| max;
    state.start_failure = Some(StartFailure {
        consecutive_fail_count: 4,
        last_failed_vmi_uid: "old".into(),
        retry_after: now(),
    });
    let fifth = next_start_failure(&state, Some(&never_ran), now(), full_jitter).unwrap();
    assert_eq!(fifth.consecutive_fail_count, 5);
    assert_eq!(
        fifth.retry_after,
        now() + Duration::seconds(300),
        "250 s + 125 s jitter, capped"
    );
    state.start_failure = None;
    let first = next_start_failure(&state, Some(&never_ran), now(), full_jitter).unwrap();
    assert_eq!(first.retry_after, now() + Duration::seconds(15));
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
    QueueStart(bool),
    QueueStop,
    VmiPhase(Phase),
    /// The VMI being deleted finishes going away (finalizers done).
    VmiGone,
    /// Time passes (seconds).
    Tick(i64),
    Reconcile,
    Delete,
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        arb_strategy().prop_map(Event::SetStrategy),
        any::<bool>().prop_map(Event::QueueStart),
        Just(Event::QueueStop),
        arb_phase().prop_map(Event::VmiPhase),
        Just(Event::VmiGone),
        (1i64..400).prop_map(Event::Tick),
        Just(Event::Reconcile),
        Just(Event::Reconcile),
        Just(Event::Reconcile),
        Just(Event::Delete),
    ]
}

/// A VM and its VMI as the API server holds them, synced by the controller's own
/// decision code ([`plan`] and [`conclude`], what `vm.rs` calls): the model only plays
/// the world (creating and deleting the VMI the way the server would, failing requests
/// when told to) and checks what the controller decided.
struct Model {
    /// The VM as stored: spec (`strategy`), deletion, and the status fields the
    /// controller wrote back (requests, start failure, last strategy).
    vm: VmState,
    vmi: Option<VmiState>,
    now: DateTime<Utc>,
    next_uid: u32,
    /// VMIs the controller created, in order, with the strategy in force then.
    created: Vec<RunStrategy>,
}

impl Model {
    /// One sync. With `fail`, the create or delete the controller asks for is refused.
    fn reconcile(&mut self, fail: bool) -> Result<(VmiAction, &'static str), TestCaseError> {
        let observed = self.vmi.clone();
        let strategy = self.vm.strategy;
        let plan = plan(self.vm.clone(), observed.as_ref(), self.now, |_| {
            Duration::zero()
        });
        let action = plan.action.clone();
        let trimmed = plan.state.requests.clone();
        prop_assert_eq!(plan.state.strategy, strategy, "the plan changed the spec");
        prop_assert!(
            trimmed.len() <= self.vm.requests.len() && self.vm.requests.ends_with(&trimmed),
            "trimming did more than drop requests at the head"
        );
        match &action {
            A::Create { paused } => {
                prop_assert!(observed.is_none(), "created a second VMI");
                prop_assert!(strategy != Halted, "started a Halted VM");
                prop_assert!(!self.vm.deleting, "started a VM being deleted");
                if let Some(f) = &plan.state.start_failure {
                    prop_assert!(
                        f.retry_after <= self.now,
                        "started during crash-loop backoff"
                    );
                }
                let head = trimmed.first().cloned();
                match strategy {
                    Manual => prop_assert!(
                        matches!(head, Some(ChangeRequest::Start { .. })),
                        "Manual started without a Start request"
                    ),
                    RerunOnFailure => prop_assert!(
                        matches!(head, Some(ChangeRequest::Start { .. }))
                            || self.vm.last_strategy != Some(RerunOnFailure),
                        "RerunOnFailure started again without being asked"
                    ),
                    _ => {}
                }
                prop_assert_eq!(
                    *paused,
                    matches!(head, Some(ChangeRequest::Start { paused: true }))
                );
            }
            A::Delete => prop_assert!(
                observed.as_ref().is_some_and(|v| !v.deleting),
                "deleted what is not there"
            ),
            A::SwitchToAlways => {
                prop_assert_eq!(strategy, Halted);
                prop_assert!(observed.is_none());
                prop_assert!(
                    matches!(trimmed.first(), Some(ChangeRequest::Start { .. })),
                    "switched to Always without a Start request"
                );
            }
            A::WaitUntil(t) => {
                prop_assert!(*t > self.now, "waits for the past");
                prop_assert!(observed.is_none());
                prop_assert_eq!(
                    plan.state.start_failure.as_ref().map(|f| f.retry_after),
                    Some(*t)
                );
            }
            A::None => {}
        }
        // Liveness: an Always VM with no VMI and no backoff is always started.
        let backoff = plan
            .state
            .start_failure
            .as_ref()
            .is_some_and(|f| f.retry_after > self.now);
        if strategy == Always && !self.vm.deleting && observed.is_none() && !backoff {
            prop_assert!(
                matches!(action, A::Create { .. }),
                "Always VM left down: {:?}",
                action
            );
        }
        // A VM being deleted stops its VMI.
        if self.vm.deleting && observed.as_ref().is_some_and(|v| !v.deleting) {
            prop_assert_eq!(&action, &A::Delete);
        }
        // Halted with nothing queued never keeps a VMI.
        if strategy == Halted
            && trimmed.is_empty()
            && observed.as_ref().is_some_and(|v| !v.deleting)
        {
            prop_assert_eq!(&action, &A::Delete);
        }

        // The world carries out the action, as the API server would.
        let effect = match &action {
            A::Create { .. } if fail => Effect::None,
            A::Create { .. } => {
                self.next_uid += 1;
                self.vmi = Some(VmiState {
                    uid: format!("u{}", self.next_uid),
                    ever_running: false,
                    ..vmi(Phase::Pending)
                });
                self.created.push(strategy);
                Effect::Created
            }
            A::Delete if fail => Effect::None,
            A::Delete => {
                if let Some(v) = self.vmi.as_mut() {
                    v.deleting = true;
                }
                Effect::Deleted
            }
            A::SwitchToAlways => {
                self.vm.strategy = Always;
                Effect::None
            }
            A::WaitUntil(_) | A::None => Effect::None,
        };
        let outcome = conclude(plan, observed.as_ref(), effect);
        let written = &outcome.state;
        // A RerunOnFailure VM whose failed VMI goes is started again.
        if action == A::Delete
            && strategy == RerunOnFailure
            && observed.as_ref().is_some_and(|v| v.phase == Phase::Failed)
            && !matches!(trimmed.first(), Some(ChangeRequest::Stop { .. }))
        {
            prop_assert_eq!(
                written.requests.last(),
                Some(&ChangeRequest::Start { paused: false }),
                "RerunOnFailure not restarted"
            );
        }
        // The strategy in force is recorded once a VMI existed.
        if observed.is_some() || effect == Effect::Created {
            prop_assert_eq!(written.last_strategy, Some(strategy));
        }
        // The VM's status as the controller wrote it; its spec and deletion stay the
        // world's.
        self.vm.requests = written.requests.clone();
        self.vm.start_failure = written.start_failure.clone();
        self.vm.last_strategy = written.last_strategy;

        let printable = outcome.printable_status;
        prop_assert!(
            printable != "Unknown",
            "no printable status for {:?} / {:?}",
            self.vm,
            observed
        );
        if self.vm.deleting {
            prop_assert_eq!(printable, "Terminating");
        }
        if let Some(v) = observed.as_ref().filter(|v| {
            v.phase == Phase::Running
                && !v.deleting
                && !self.vm.deleting
                && effect != Effect::Deleted
        }) {
            prop_assert_eq!(printable, if v.paused { "Paused" } else { "Running" });
        }
        if observed.is_none() && effect == Effect::Created {
            prop_assert_eq!(printable, "Starting");
        }
        if observed.is_none() && effect == Effect::None && !self.vm.deleting {
            prop_assert!(
                matches!(printable, "Stopped" | "CrashLoopBackOff"),
                "no VMI and none created, yet {}",
                printable
            );
        }
        prop_assert!(self.vm.requests.len() <= 64, "queue grows without bound");
        Ok((action, printable))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Over random event sequences (strategy switches, queued requests, VMI phase
    /// changes, deletions, time passing, refused creates and deletes) the controller
    /// never acts on a VMI that is not there, never creates a second one, never starts a
    /// Halted, deleted or backing-off VM, never starts Manual/RerunOnFailure unasked,
    /// always (re)starts an Always VM, always reports a known printable status, and
    /// brings a deleted VM down for good.
    #[test]
    fn decisions_are_safe(
        events in proptest::collection::vec(arb_event(), 1..80),
        refused in proptest::collection::vec(proptest::bool::weighted(0.2), 80),
    ) {
        let mut model = Model { vm: vm(Halted), vmi: None, now: now(), next_uid: 0, created: vec![] };
        model.vm.last_strategy = None;
        for (i, event) in events.into_iter().enumerate() {
            match event {
                Event::SetStrategy(s) => model.vm.strategy = s,
                Event::QueueStart(paused) => model.vm.requests.push(ChangeRequest::Start { paused }),
                Event::QueueStop => {
                    let uid = model.vmi.as_ref().map(|v| v.uid.clone());
                    model.vm.requests.push(ChangeRequest::Stop { uid });
                }
                Event::VmiPhase(p) => if let Some(v) = model.vmi.as_mut() {
                    // Phases only move forward, and a finished VMI stays finished.
                    if !v.phase.is_final() && (p as u8) >= (v.phase as u8) {
                        v.ever_running |= p == Phase::Running;
                        v.phase = p;
                    }
                },
                Event::VmiGone => if model.vmi.as_ref().is_some_and(|v| v.deleting) {
                    model.vmi = None;
                },
                Event::Tick(s) => model.now += Duration::seconds(s),
                Event::Delete => model.vm.deleting = true,
                Event::Reconcile => { model.reconcile(refused[i])?; }
            }
        }
        // Once deleted, a few rounds of reconcile + VMI teardown leave nothing running.
        if model.vm.deleting {
            for _ in 0..3 {
                model.reconcile(false)?;
                if model.vmi.as_ref().is_some_and(|v| v.deleting) {
                    model.vmi = None;
                }
            }
            prop_assert!(model.vmi.is_none(), "deleted VM kept its VMI");
            let created = model.created.len();
            model.reconcile(false)?;
            prop_assert_eq!(model.created.len(), created, "deleted VM started again");
        }
    }

    /// Without outside requests, a Once VM runs exactly one VMI to completion, and a
    /// RerunOnFailure VM restarts after failures but not after a clean shutdown.
    #[test]
    fn once_and_rerun_follow_the_guest(outcomes in proptest::collection::vec(any::<bool>(), 1..12)) {
        for strategy in [Once, RerunOnFailure] {
            let mut model = Model { vm: vm(strategy), vmi: None, now: now(), next_uid: 0, created: vec![] };
            model.vm.last_strategy = None;
            for succeeded in &outcomes {
                model.reconcile(false)?;
                if let Some(v) = model.vmi.as_mut() {
                    if !v.phase.is_final() {
                        v.phase = Phase::Running;
                        v.ever_running = true;
                        model.reconcile(false)?;
                    }
                }
                if let Some(v) = model.vmi.as_mut() {
                    if !v.phase.is_final() {
                        v.phase = if *succeeded { Phase::Succeeded } else { Phase::Failed };
                    }
                }
                for _ in 0..3 {
                    model.reconcile(false)?;
                    if model.vmi.as_ref().is_some_and(|v| v.deleting) {
                        model.vmi = None;
                    }
                }
            }
            match strategy {
                Once => prop_assert_eq!(model.created.len(), 1),
                _ => {
                    // One start, plus one per failure before the first clean shutdown.
                    let failures = outcomes.iter().take_while(|s| !**s).count();
                    let expected = 1 + failures.min(outcomes.len() - 1);
                    let expected = if outcomes.iter().all(|s| !s) { outcomes.len() + 1 } else { expected };
                    prop_assert_eq!(model.created.len(), expected, "outcomes {:?}", outcomes);
                }
            }
        }
    }
}
