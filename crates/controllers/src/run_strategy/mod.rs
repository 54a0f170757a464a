//! The VM controller's decisions as pure functions of what it observes: which action to
//! take for a runStrategy, which state-change request to consume, crash-loop backoff, and
//! the printable status — KubeVirt's rules (virt-controller `vm.go`), without I/O, so
//! they can be tested exhaustively.

use chrono::{DateTime, Duration, Utc};

pub use kubevirt_api::model::vm::ChangeRequest;
pub use kubevirt_api::model::{RunStrategy, VmiPhase as Phase};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartFailure {
    pub consecutive_fail_count: u32,
    pub last_failed_vmi_uid: String,
    pub retry_after: DateTime<Utc>,
}

/// What the controller knows about the VM's VMI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmiState {
    pub uid: String,
    pub phase: Phase,
    pub deleting: bool,
    /// `status.phaseTransitionTimestamps` has a Running entry.
    pub ever_running: bool,
    pub paused: bool,
    /// VMI condition `PodScheduled=False` with reason `Unschedulable`.
    pub unschedulable: bool,
    /// VMI condition `Synchronized=False` reason, e.g. `ErrImagePull`.
    pub sync_failure: Option<String>,
    /// A migration is in progress (`migrationState` started, not ended).
    pub migrating: bool,
}

impl VmiState {
    fn active(&self) -> bool {
        !self.deleting && !self.phase.is_final()
    }
}

/// What the controller knows about the VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmState {
    pub strategy: RunStrategy,
    pub deleting: bool,
    /// `status.runStrategy`: the strategy in force when a VMI last existed.
    pub last_strategy: Option<RunStrategy>,
    pub requests: Vec<ChangeRequest>,
    pub start_failure: Option<StartFailure>,
}

/// The one action a reconcile pass takes on the VMI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmiAction {
    None,
    Create {
        paused: bool,
    },
    Delete,
    /// Creation is due but crash-loop backoff says wait until then.
    WaitUntil(DateTime<Utc>),
    /// Halted with a queued Start: KubeVirt switches the spec to Always.
    SwitchToAlways,
}

/// The head of the queue, if it should be consumed now (`isTrimFirstChangeRequestNeeded`).
pub fn should_pop_head(requests: &[ChangeRequest], vmi: Option<&VmiState>) -> bool {
    match requests.first() {
        Some(ChangeRequest::Stop { uid }) => match (vmi, uid) {
            (None, _) | (_, None) => true,
            (Some(vmi), Some(uid)) => &vmi.uid != uid,
        },
        Some(ChangeRequest::Start { .. }) => vmi.is_some_and(VmiState::active),
        None => false,
    }
}

/// Drops the Stop requests at the head of the queue whose VMI is already gone. KubeVirt
/// consumes them at the end of a pass; consuming them first lets the same pass act on
/// what follows (the Start of a restart) instead of reporting the VM Stopped in between.
pub fn trim_stale_stops(requests: &mut Vec<ChangeRequest>, vmi: Option<&VmiState>) {
    while let Some(ChangeRequest::Stop { uid }) = requests.first() {
        let stale = match (vmi, uid) {
            (None, _) => true,
            (Some(vmi), Some(uid)) => &vmi.uid != uid,
            (Some(_), None) => false,
        };
        if !stale {
            break;
        }
        requests.remove(0);
    }
}

fn head_start(requests: &[ChangeRequest]) -> Option<bool> {
    match requests.first() {
        Some(ChangeRequest::Start { paused }) => Some(*paused),
        _ => None,
    }
}

fn stop_requested_for(requests: &[ChangeRequest], vmi: &VmiState) -> bool {
    matches!(requests.first(), Some(ChangeRequest::Stop { uid: Some(uid) }) if uid == &vmi.uid)
        || matches!(requests.first(), Some(ChangeRequest::Stop { uid: None }))
}

/// Decides the action on the VMI for one reconcile (KubeVirt's table in §1.2).
pub fn decide(vm: &VmState, vmi: Option<&VmiState>, now: DateTime<Utc>) -> VmiAction {
    if vm.deleting {
        return match vmi {
            Some(vmi) if !vmi.deleting => VmiAction::Delete,
            _ => VmiAction::None,
        };
    }
    let create = |paused: bool| match &vm.start_failure {
        Some(failure) if failure.retry_after > now => VmiAction::WaitUntil(failure.retry_after),
        _ => VmiAction::Create { paused },
    };
    let paused_start = head_start(&vm.requests).unwrap_or(false);
    match vmi {
        Some(vmi) if vmi.deleting => VmiAction::None,
        Some(vmi) => {
            if stop_requested_for(&vm.requests, vmi) {
                return VmiAction::Delete;
            }
            match vm.strategy {
                RunStrategy::Halted => VmiAction::Delete,
                RunStrategy::Always if vmi.phase.is_final() => VmiAction::Delete,
                RunStrategy::RerunOnFailure if vmi.phase.is_final() => VmiAction::Delete,
                _ => VmiAction::None,
            }
        }
        None => match vm.strategy {
            RunStrategy::Halted if head_start(&vm.requests).is_some() => VmiAction::SwitchToAlways,
            RunStrategy::Halted => VmiAction::None,
            // A queued Stop cannot be for a VMI that does not exist: create regardless.
            RunStrategy::Always | RunStrategy::Once => create(paused_start),
            RunStrategy::RerunOnFailure => {
                if head_start(&vm.requests).is_some()
                    || vm.last_strategy != Some(RunStrategy::RerunOnFailure)
                {
                    create(paused_start)
                } else {
                    VmiAction::None
                }
            }
            RunStrategy::Manual => match head_start(&vm.requests) {
                Some(paused) => create(paused),
                None => VmiAction::None,
            },
        },
    }
}

/// RerunOnFailure restarts a failed VMI by queueing a Start when it deletes it.
pub fn start_after_delete(vm: &VmState, vmi: &VmiState) -> bool {
    vm.strategy == RunStrategy::RerunOnFailure
        && vmi.phase == Phase::Failed
        && !stop_requested_for(&vm.requests, vmi)
}

/// Crash-loop delay for the n-th consecutive failure, before jitter: 10 s × n², ≤ 300 s.
pub fn backoff_base(failures: u32) -> Duration {
    let n = i64::from(failures.max(1));
    Duration::seconds((10 * n * n).min(300))
}

/// The start-failure record after seeing `vmi` (`syncStartFailureStatus`): a VMI that
/// ended without ever running counts once; any VMI that runs clears the record.
pub fn next_start_failure(
    vm: &VmState,
    vmi: Option<&VmiState>,
    now: DateTime<Utc>,
    jitter: impl Fn(Duration) -> Duration,
) -> Option<StartFailure> {
    let tracked = matches!(
        vm.strategy,
        RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once
    );
    if !tracked {
        return None;
    }
    let Some(vmi) = vmi else {
        return vm.start_failure.clone();
    };
    if vmi.ever_running {
        return None;
    }
    if !vmi.phase.is_final() {
        return vm.start_failure.clone();
    }
    match &vm.start_failure {
        Some(f) if f.last_failed_vmi_uid == vmi.uid => Some(f.clone()),
        previous => {
            let count = previous.as_ref().map_or(0, |f| f.consecutive_fail_count) + 1;
            let base = backoff_base(count);
            let delay = (base + jitter(base / 2)).min(Duration::seconds(300));
            Some(StartFailure {
                consecutive_fail_count: count,
                last_failed_vmi_uid: vmi.uid.clone(),
                retry_after: now + delay,
            })
        }
    }
}

/// One sync's decision: the VM's state as the sync goes on with it (stale Stop requests
/// trimmed, the start-failure record updated) and the action to take on the VMI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub state: VmState,
    pub action: VmiAction,
}

/// Decides a sync (`vm.go`'s `sync` up to the VMI action): trims stale Stop requests,
/// records a start failure (`jitter` picks the random part of the crash-loop delay, up
/// to the given maximum), and decides the action.
pub fn plan(
    mut vm: VmState,
    vmi: Option<&VmiState>,
    now: DateTime<Utc>,
    jitter: impl Fn(Duration) -> Duration,
) -> Plan {
    trim_stale_stops(&mut vm.requests, vmi);
    vm.start_failure = next_start_failure(&vm, vmi, now, jitter);
    let action = decide(&vm, vmi, now);
    Plan { state: vm, action }
}

/// What carrying out a [`Plan`]'s action came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing was done, or the request failed.
    None,
    /// The VMI was created.
    Created,
    /// The create found a VMI the controller had not seen yet.
    FoundExisting,
    /// The VMI's deletion was issued.
    Deleted,
}

/// What a sync writes into the VM's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The VM's state after the sync: its requests are `status.stateChangeRequests`,
    /// its start failure `status.startFailure` and its last strategy
    /// `status.runStrategy` (left alone when `None`).
    pub state: VmState,
    pub printable_status: &'static str,
}

/// Finishes a sync after its action (`effect`): queues RerunOnFailure's restart, consumes
/// the head request if it is done, records the strategy in force and says the printable
/// status. `vmi` is the VMI as the plan saw it.
pub fn conclude(plan: Plan, vmi: Option<&VmiState>, effect: Effect) -> Outcome {
    let Plan {
        state: mut vm,
        action,
    } = plan;
    if let (VmiAction::Delete, Some(observed)) = (&action, vmi) {
        if start_after_delete(&vm, observed) {
            vm.requests.push(ChangeRequest::Start { paused: false });
        }
    }
    if should_pop_head(&vm.requests, vmi) {
        vm.requests.remove(0);
    }
    let creating = effect == Effect::Created;
    let printable_status = printable_status(&vm, vmi, creating, effect == Effect::Deleted);
    if vmi.is_some() || creating || effect == Effect::FoundExisting || vm.last_strategy.is_some() {
        vm.last_strategy = Some(vm.strategy);
    }
    Outcome {
        state: vm,
        printable_status,
    }
}

/// `status.printableStatus`, first matching rule wins (KubeVirt §2.2). `creating` and
/// `deleting` are the controller's own pending actions.
pub fn printable_status(
    vm: &VmState,
    vmi: Option<&VmiState>,
    creating: bool,
    deleting: bool,
) -> &'static str {
    if vm.deleting {
        return "Terminating";
    }
    if let Some(v) = vmi {
        if !v.phase.is_final() && (v.deleting || deleting) {
            return "Stopping";
        }
        if v.migrating {
            return "Migrating";
        }
        if v.phase == Phase::Running {
            return if v.paused { "Paused" } else { "Running" };
        }
        if v.unschedulable {
            return "ErrorUnschedulable";
        }
        match v.sync_failure.as_deref() {
            Some("ErrImagePull") => return "ErrImagePull",
            Some("ImagePullBackOff") => return "ImagePullBackOff",
            Some("FailedPvcNotFound") => return "ErrorPvcNotFound",
            _ => {}
        }
    }
    let starting_phase = vmi.is_some_and(|v| {
        matches!(
            v.phase,
            Phase::Unset | Phase::Pending | Phase::Scheduling | Phase::Scheduled
        )
    });
    if (vmi.is_none() && creating) || starting_phase {
        return "Starting";
    }
    let final_or_absent = vmi.is_none_or(|v| v.phase.is_final());
    if final_or_absent
        && !creating
        && vm
            .start_failure
            .as_ref()
            .is_some_and(|f| f.consecutive_fail_count > 0)
        && matches!(
            vm.strategy,
            RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once
        )
    {
        return "CrashLoopBackOff";
    }
    if final_or_absent {
        return "Stopped";
    }
    "Unknown"
}

#[cfg(test)]
mod tests;
