//! virt-api's acceptance rules for the lifecycle verbs, as pure functions: from the
//! request body and the objects as read, either the writes to make ([`Decision`]) or why
//! the request is refused ([`Refusal`]). No registry, no I/O, no HTTP.

use serde_json::Value;

use kubevirt_api::model::vm::{ChangeRequest, StateChangeRequest, VmSpec};
use kubevirt_api::model::{
    RunStrategy as Strategy, SpecStrategy, VirtualMachine, VirtualMachineInstance, VmiPhase,
};
use kubevirt_api::names::annotations::{
    PAUSED as PAUSE_ANNOTATION, SOFT_REBOOT_REQUESTED as SOFT_REBOOT_ANNOTATION, UNPAUSE_REQUESTED,
};
use kubevirt_api::names::conditions::PAUSED;

#[cfg(test)]
mod tests;

/// A verb on `virtualmachines/<name>/<verb>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmVerb {
    Start,
    Stop,
    Restart,
    Migrate,
}

/// A verb on `virtualmachineinstances/<name>/<verb>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmiVerb {
    Pause,
    Unpause,
    SoftReboot,
}

/// The verbs this group serves, by resource and subresource name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Vm(VmVerb),
    Vmi(VmiVerb),
}

impl Verb {
    pub fn parse(resource: &str, subresource: &str) -> Option<Verb> {
        Some(match (resource, subresource) {
            ("virtualmachines", "start") => Verb::Vm(VmVerb::Start),
            ("virtualmachines", "stop") => Verb::Vm(VmVerb::Stop),
            ("virtualmachines", "restart") => Verb::Vm(VmVerb::Restart),
            ("virtualmachines", "migrate") => Verb::Vm(VmVerb::Migrate),
            ("virtualmachineinstances", "pause") => Verb::Vmi(VmiVerb::Pause),
            ("virtualmachineinstances", "unpause") => Verb::Vmi(VmiVerb::Unpause),
            ("virtualmachineinstances", "softreboot") => Verb::Vmi(VmiVerb::SoftReboot),
            _ => return None,
        })
    }
}

/// One write, carried out in order by `apply`.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// `spec.running` (if `uses_running`) or `spec.runStrategy` to Always (`start`) or
    /// Halted, only if the VM spec is still `expected_spec`.
    SetRunStrategy {
        expected_spec: Box<VmSpec>,
        uses_running: bool,
        start: bool,
    },
    /// Drop `status.startFailure` from the VM.
    ClearStartFailure,
    /// Set `status.stateChangeRequests`, only if it is still `expected` (and see
    /// [`check_queue`]).
    QueueStateChanges {
        expected: Option<Vec<StateChangeRequest>>,
        requests: Vec<ChangeRequest>,
    },
    /// `spec.terminationGracePeriodSeconds` of the VMI.
    SetVmiGracePeriod(i64),
    /// A VirtualMachineInstanceMigration of this VMI.
    CreateMigration {
        vmi_name: String,
        added_node_selector: Option<Value>,
    },
    /// VMI annotations to set (`Some`) or remove (`None`).
    Annotate(Vec<(&'static str, Option<String>)>),
}

/// An accepted request: its writes, made as a dry run if asked.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub dry_run: bool,
    pub effects: Vec<Effect>,
}

/// A refused request; the HTTP layer adds the object's name to the conflicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 409 on `virtualmachine.kubevirt.io`.
    VmConflict(String),
    /// 409 on `virtualmachineinstance.kubevirt.io`.
    VmiConflict(String),
    /// 400.
    BadRequest(String),
    /// 500: where virt-api fails to build its patch.
    Internal(String),
}

fn vm_conflict(message: &str) -> Refusal {
    Refusal::VmConflict(message.to_string())
}

fn vmi_conflict(message: &str) -> Refusal {
    Refusal::VmiConflict(message.to_string())
}

/// `dryRun: ["All"]` in the request body.
pub fn dry_run(body: &Value) -> bool {
    body.get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|d| d.iter().any(|x| x == "All"))
}

/// The effective run strategy and whether the VM uses the deprecated `running` field.
fn strategy(vm: &VirtualMachine) -> Result<(Strategy, bool), Refusal> {
    match vm.spec_strategy() {
        SpecStrategy::Running(s) => Ok((s, true)),
        SpecStrategy::Strategy(s) => Ok((s, false)),
        SpecStrategy::Unset => Ok((Strategy::Halted, false)),
        SpecStrategy::Invalid(text) => {
            Err(Refusal::VmConflict(format!("Invalid RunStrategy ({text})")))
        }
    }
}

fn is_final(vmi: &VirtualMachineInstance) -> bool {
    vmi.phase().is_final()
}

fn is_paused(vmi: &VirtualMachineInstance) -> bool {
    vmi.condition(PAUSED).is_some_and(|c| c.is(PAUSED, "True"))
}

/// A request on a VM, with its VMI if there is one.
struct VmRequest<'a> {
    body: &'a Value,
    vm: &'a VirtualMachine,
    vmi: Option<&'a VirtualMachineInstance>,
}

/// Decides a VM verb from the request body, the VM and its VMI (if any) as read.
pub fn decide_vm(
    verb: VmVerb,
    body: &Value,
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
) -> Result<Decision, Refusal> {
    let request = VmRequest { body, vm, vmi };
    let effects = match verb {
        VmVerb::Start => request.start(),
        VmVerb::Stop => request.stop(),
        VmVerb::Restart => request.restart(),
        VmVerb::Migrate => request.migrate(),
    }?;
    Ok(Decision {
        dry_run: dry_run(body),
        effects,
    })
}

impl VmRequest<'_> {
    fn stop_request(&self) -> ChangeRequest {
        ChangeRequest::Stop {
            uid: self.vmi.map(|v| v.uid().to_string()),
        }
    }

    fn queue(&self, requests: Vec<ChangeRequest>) -> Vec<Effect> {
        vec![Effect::QueueStateChanges {
            expected: self.vm.status.state_change_requests.clone(),
            requests,
        }]
    }

    /// The spec switch, then the start failure cleared (a dry run has none to clear).
    fn set_strategy(&self, uses_running: bool, start: bool) -> Vec<Effect> {
        let mut effects = vec![Effect::SetRunStrategy {
            expected_spec: Box::new(self.vm.spec.clone()),
            uses_running,
            start,
        }];
        if self.vm.status.start_failure.is_some() && !dry_run(self.body) {
            effects.push(Effect::ClearStartFailure);
        }
        effects
    }

    fn start(&self) -> Result<Vec<Effect>, Refusal> {
        let paused = self
            .body
            .get("paused")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if let Some(vmi) = self.vmi {
            let phase = vmi.phase();
            if !phase.is_final() && !matches!(phase, VmiPhase::Unset | VmiPhase::Unknown) {
                return Err(vm_conflict("VM is already running"));
            }
        }
        let start = ChangeRequest::Start { paused };
        let (strategy, uses_running) = strategy(self.vm)?;
        match strategy {
            // A paused start cannot be said with the spec: it goes through the queue.
            Strategy::Halted if paused => Ok(self.queue(vec![start])),
            Strategy::Halted => Ok(self.set_strategy(uses_running, true)),
            Strategy::Manual => match self.vmi.filter(|v| is_final(v)) {
                Some(_) => Ok(self.queue(vec![self.stop_request(), start])),
                None => Ok(self.queue(vec![start])),
            },
            Strategy::RerunOnFailure => match self.vmi.map(VirtualMachineInstance::phase) {
                Some(VmiPhase::Succeeded) => Ok(self.queue(vec![self.stop_request(), start])),
                Some(VmiPhase::Failed) => Err(vm_conflict(
                    "RerunOnFailure does not support starting VM from failed state",
                )),
                _ => Ok(self.queue(vec![start])),
            },
            Strategy::Always => Err(vm_conflict("Always does not support manual start requests")),
            Strategy::Once => Err(vm_conflict("Once does not support manual start requests")),
        }
    }

    fn stop(&self) -> Result<Vec<Effect>, Refusal> {
        let grace = self.body.get("gracePeriod").and_then(Value::as_i64);
        let running = self.vmi.filter(|v| !is_final(v));
        let old_grace = running.and_then(|v| v.spec.termination_grace_period_seconds);
        let (strategy, uses_running) = strategy(self.vm)?;
        let queues_stop = matches!(
            strategy,
            Strategy::Halted | Strategy::Manual | Strategy::RerunOnFailure
        );
        if queues_stop && running.is_none() {
            return Err(vm_conflict("VM is not running"));
        }
        if strategy == Strategy::Halted {
            let shorter = match (grace, old_grace) {
                (Some(new), Some(old)) => new < old,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if !shorter {
                return Err(vm_conflict(
                    "Halted only supports manual stop requests with a shorter graceperiod",
                ));
            }
        }
        let mut effects = Vec::new();
        if let (Some(grace), Some(_)) = (grace, running) {
            effects.push(Effect::SetVmiGracePeriod(grace));
        }
        effects.extend(match strategy {
            Strategy::Always | Strategy::Once => self.set_strategy(uses_running, false),
            _ => self.queue(vec![self.stop_request()]),
        });
        Ok(effects)
    }

    fn restart(&self) -> Result<Vec<Effect>, Refusal> {
        let grace = self.body.get("gracePeriodSeconds").and_then(Value::as_i64);
        match grace {
            Some(g) if g > 0 => {
                return Err(Refusal::BadRequest(
                    "For force restart, only gracePeriod=0 is supported for now".into(),
                ))
            }
            Some(g) if g < 0 => {
                return Err(Refusal::BadRequest(
                    "gracePeriod has to be greater or equal to 0".into(),
                ))
            }
            _ => {}
        }
        let (strategy, _) = strategy(self.vm)?;
        match strategy {
            Strategy::Halted => {
                return Err(vm_conflict(
                    "RunStategy Halted does not support manual restart requests",
                ))
            }
            Strategy::Once => {
                return Err(vm_conflict(
                    "RunStategy Once does not support manual restart requests",
                ))
            }
            _ => {}
        }
        if self.vmi.is_none() {
            // virt-api names the strategy Halted here whatever the VM's is.
            return Err(vm_conflict("VM is not running: Halted"));
        }
        let mut effects = Vec::new();
        // A forced restart: the shortest grace period the VMI can have.
        if grace == Some(0) {
            effects.push(Effect::SetVmiGracePeriod(1));
        }
        effects.extend(self.queue(vec![
            self.stop_request(),
            ChangeRequest::Start { paused: false },
        ]));
        Ok(effects)
    }

    fn migrate(&self) -> Result<Vec<Effect>, Refusal> {
        // virt-api looks at the VM: without a running VMI it is not running.
        let Some(vmi) = self.vmi.filter(|vmi| vmi.phase() == VmiPhase::Running) else {
            return Err(vm_conflict("VM is not running"));
        };
        let added_node_selector = self
            .body
            .get("addedNodeSelector")
            .filter(|s| s.is_object())
            .cloned();
        Ok(vec![Effect::CreateMigration {
            vmi_name: vmi.name().to_string(),
            added_node_selector,
        }])
    }
}

/// virt-api's patch of `status.stateChangeRequests`, checked against the queue at write
/// time: onto an empty queue, or a lone Stop replacing whatever is queued; anything else
/// is a patch it fails to build, an internal error.
pub fn check_queue(
    current: Option<&Vec<StateChangeRequest>>,
    requests: &[ChangeRequest],
) -> Result<(), Refusal> {
    let queued = current.is_some_and(|q| !q.is_empty());
    let lone_stop = matches!(requests, [ChangeRequest::Stop { .. }]);
    if queued && !lone_stop {
        return Err(Refusal::Internal(
            "unable to complete request: stop/start already underway".into(),
        ));
    }
    Ok(())
}

/// Decides a VMI verb from the request body and the VMI as read; `now` stamps the
/// unpause and soft reboot requests.
pub fn decide_vmi(
    verb: VmiVerb,
    body: &Value,
    vmi: &VirtualMachineInstance,
    now: &str,
) -> Result<Decision, Refusal> {
    let running = vmi.phase() == VmiPhase::Running;
    let paused = is_paused(vmi);
    let changes = match verb {
        VmiVerb::Pause => {
            if !running {
                return Err(vmi_conflict("VM is not running"));
            }
            if paused {
                return Err(vmi_conflict("VMI is already paused"));
            }
            if vmi.migration_in_flight().is_some() {
                return Err(Refusal::VmiConflict(format!(
                    "Cannot pause VM '{}' because it is currently being migrated",
                    vmi.name()
                )));
            }
            vec![(PAUSE_ANNOTATION, Some("true".to_string()))]
        }
        VmiVerb::Unpause => {
            if !running {
                return Err(vmi_conflict("VMI is not running"));
            }
            if !paused {
                return Err(vmi_conflict("VMI is not paused"));
            }
            vec![
                (PAUSE_ANNOTATION, None),
                (UNPAUSE_REQUESTED, Some(now.to_string())),
            ]
        }
        VmiVerb::SoftReboot => {
            if !running {
                return Err(vmi_conflict("VM is not running"));
            }
            if paused {
                return Err(vmi_conflict("VMI is paused"));
            }
            let acpi_disabled = vmi
                .spec
                .domain
                .as_ref()
                .is_some_and(|d| !d.feature_enabled("acpi", true));
            if acpi_disabled {
                return Err(vmi_conflict(
                    "VMI neither have the agent connected nor the ACPI feature enabled",
                ));
            }
            vec![(SOFT_REBOOT_ANNOTATION, Some(now.to_string()))]
        }
    };
    Ok(Decision {
        dry_run: dry_run(body),
        effects: vec![Effect::Annotate(changes)],
    })
}
