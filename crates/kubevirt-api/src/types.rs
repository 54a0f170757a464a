//! Typed kubevirt.io/v1 concepts that several components decide by: one definition each
//! of the run strategy a VM asks for, the VMI phase, and a VMI's migration state. Fields
//! these types do not model are kept (`other`), so reading and writing one back loses
//! nothing.

use apimachinery::pointer::Pointer;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `spec.runStrategy` of a VirtualMachine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RunStrategy {
    Always,
    RerunOnFailure,
    Manual,
    Halted,
    Once,
}

impl RunStrategy {
    pub const ALL: [RunStrategy; 5] = [
        RunStrategy::Always,
        RunStrategy::Halted,
        RunStrategy::Manual,
        RunStrategy::RerunOnFailure,
        RunStrategy::Once,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        RunStrategy::ALL.into_iter().find(|r| r.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStrategy::Always => "Always",
            RunStrategy::RerunOnFailure => "RerunOnFailure",
            RunStrategy::Manual => "Manual",
            RunStrategy::Halted => "Halted",
            RunStrategy::Once => "Once",
        }
    }
}

/// What a VM spec asks for, as virt-controller reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecStrategy {
    /// Neither `running` nor `runStrategy` is set.
    Unset,
    /// From the deprecated `running` (which wins when both are set): Always or Halted.
    Running(RunStrategy),
    Strategy(RunStrategy),
    /// A `runStrategy` KubeVirt does not know (admission refuses it; stored objects may
    /// still hold one from before).
    Invalid(String),
}

impl SpecStrategy {
    pub fn of(vm_spec: &Value) -> SpecStrategy {
        if let Some(running) = vm_spec.get("running").and_then(Value::as_bool) {
            return SpecStrategy::Running(if running {
                RunStrategy::Always
            } else {
                RunStrategy::Halted
            });
        }
        match vm_spec.get("runStrategy").and_then(Value::as_str) {
            None => SpecStrategy::Unset,
            Some(text) => RunStrategy::parse(text).map_or_else(
                || SpecStrategy::Invalid(text.to_string()),
                SpecStrategy::Strategy,
            ),
        }
    }

    /// The strategy in force, if the spec names a valid one.
    pub fn strategy(&self) -> Option<RunStrategy> {
        match self {
            SpecStrategy::Running(s) | SpecStrategy::Strategy(s) => Some(*s),
            SpecStrategy::Unset | SpecStrategy::Invalid(_) => None,
        }
    }
}

/// `status.phase` of a VirtualMachineInstance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VmiPhase {
    Unset,
    Pending,
    Scheduling,
    Scheduled,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl VmiPhase {
    pub fn parse(s: &str) -> Self {
        match s {
            "Pending" => VmiPhase::Pending,
            "Scheduling" => VmiPhase::Scheduling,
            "Scheduled" => VmiPhase::Scheduled,
            "Running" => VmiPhase::Running,
            "Succeeded" => VmiPhase::Succeeded,
            "Failed" => VmiPhase::Failed,
            "Unknown" => VmiPhase::Unknown,
            _ => VmiPhase::Unset,
        }
    }

    /// The phase of a VMI object (`Unset` when it has none).
    pub fn of(vmi: &Value) -> Self {
        VmiPhase::parse(
            vmi.at("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or(""),
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VmiPhase::Unset => "",
            VmiPhase::Pending => "Pending",
            VmiPhase::Scheduling => "Scheduling",
            VmiPhase::Scheduled => "Scheduled",
            VmiPhase::Running => "Running",
            VmiPhase::Succeeded => "Succeeded",
            VmiPhase::Failed => "Failed",
            VmiPhase::Unknown => "Unknown",
        }
    }

    /// Succeeded or Failed: the VMI never runs again.
    pub fn is_final(self) -> bool {
        matches!(self, VmiPhase::Succeeded | VmiPhase::Failed)
    }
}

/// `status.migrationState` of a VirtualMachineInstance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_requested: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The target's listening ports (keys) and their roles: [`MIGRATION_PORT_ROLE`] for the
    /// migration stream, [`DISK_PORT_ROLE`] for the disk copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_direct_migration_node_ports: Option<std::collections::BTreeMap<String, i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node_domain_detected: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node_domain_ready_timestamp: Option<String>,
    /// The settings in force, frozen at hand-off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_configuration: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<Transfer>,
    /// Everything else the object holds, kept as it was.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// KubeVirt's port numbers, used as the roles of `targetDirectMigrationNodePorts`.
pub const MIGRATION_PORT_ROLE: i64 = 49152;
pub const DISK_PORT_ROLE: i64 = 49153;

/// `migrationState.transfer` (a virtplane extension): what a finished migration moved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transfer {
    pub total_time_milliseconds: u64,
    pub downtime_milliseconds: u64,
    pub setup_time_milliseconds: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
}

/// `status.phase` of a VirtualMachineInstanceMigration, in KubeVirt's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MigrationPhase {
    Unset,
    Pending,
    Scheduling,
    Scheduled,
    PreparingTarget,
    TargetReady,
    Running,
    Succeeded,
    Failed,
}

impl MigrationPhase {
    pub fn parse(text: &str) -> MigrationPhase {
        match text {
            "Pending" => MigrationPhase::Pending,
            "Scheduling" => MigrationPhase::Scheduling,
            "Scheduled" => MigrationPhase::Scheduled,
            "PreparingTarget" => MigrationPhase::PreparingTarget,
            "TargetReady" => MigrationPhase::TargetReady,
            "Running" => MigrationPhase::Running,
            "Succeeded" => MigrationPhase::Succeeded,
            "Failed" => MigrationPhase::Failed,
            _ => MigrationPhase::Unset,
        }
    }

    /// The phase of a VMIM object.
    pub fn of(vmim: &Value) -> MigrationPhase {
        vmim.at("/status/phase")
            .and_then(Value::as_str)
            .map_or(MigrationPhase::Unset, MigrationPhase::parse)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MigrationPhase::Unset => "",
            MigrationPhase::Pending => "Pending",
            MigrationPhase::Scheduling => "Scheduling",
            MigrationPhase::Scheduled => "Scheduled",
            MigrationPhase::PreparingTarget => "PreparingTarget",
            MigrationPhase::TargetReady => "TargetReady",
            MigrationPhase::Running => "Running",
            MigrationPhase::Succeeded => "Succeeded",
            MigrationPhase::Failed => "Failed",
        }
    }

    pub fn is_final(self) -> bool {
        matches!(self, MigrationPhase::Succeeded | MigrationPhase::Failed)
    }

    /// The VMI has been handed to the nodes (its `migrationState` names this migration).
    pub fn handed_off(self) -> bool {
        matches!(
            self,
            MigrationPhase::PreparingTarget | MigrationPhase::TargetReady | MigrationPhase::Running
        )
    }
}

impl MigrationState {
    /// The migration state of a VMI object; `None` when it has none or it is not an
    /// object of this shape.
    pub fn of(vmi: &Value) -> Option<MigrationState> {
        let state = vmi.at("/status/migrationState")?;
        serde_json::from_value(state.clone()).ok()
    }

    /// The one definition of "a migration is in flight": it has not ended, neither
    /// completed nor failed (it may not have started moving memory yet).
    pub fn in_flight(&self) -> bool {
        self.completed != Some(true) && self.failed != Some(true) && self.end_timestamp.is_none()
    }

    /// In flight and the guest's state is moving (QEMU's migration started): the VM shows
    /// `Migrating`.
    pub fn moving(&self) -> bool {
        self.in_flight() && self.start_timestamp.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn run_strategies_round_trip() {
        for s in RunStrategy::ALL {
            assert_eq!(RunStrategy::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        assert_eq!(RunStrategy::parse("always"), None);
    }

    #[test]
    fn running_wins_over_run_strategy() {
        let of = |spec: Value| SpecStrategy::of(&spec);
        assert_eq!(of(json!({})), SpecStrategy::Unset);
        assert_eq!(
            of(json!({"running": true})),
            SpecStrategy::Running(RunStrategy::Always)
        );
        assert_eq!(
            of(json!({"running": false, "runStrategy": "Always"})),
            SpecStrategy::Running(RunStrategy::Halted)
        );
        assert_eq!(
            of(json!({"runStrategy": "Once"})).strategy(),
            Some(RunStrategy::Once)
        );
        assert_eq!(
            of(json!({"runStrategy": "Sometimes"})),
            SpecStrategy::Invalid("Sometimes".into())
        );
    }

    #[test]
    fn phases() {
        assert_eq!(
            VmiPhase::of(&json!({"status": {"phase": "Failed"}})),
            VmiPhase::Failed
        );
        assert!(VmiPhase::Failed.is_final() && VmiPhase::Succeeded.is_final());
        assert!(!VmiPhase::Running.is_final());
        assert_eq!(VmiPhase::of(&json!({})), VmiPhase::Unset);
        assert_eq!(
            VmiPhase::parse(VmiPhase::Scheduled.as_str()),
            VmiPhase::Scheduled
        );
    }

    #[test]
    fn migration_state_keeps_what_it_does_not_model() {
        let raw = json!({"migrationUid": "u1", "sourceNode": "a", "targetNode": "b",
                         "startTimestamp": "2026-01-01T00:00:00Z", "targetPod": "p", "completed": false});
        let state: MigrationState = serde_json::from_value(raw.clone()).unwrap();
        assert!(state.in_flight() && state.moving());
        assert_eq!(state.other["targetPod"], "p");
        assert_eq!(serde_json::to_value(&state).unwrap(), raw);
    }

    #[test]
    fn only_an_unfinished_migration_is_in_flight() {
        let of = |m: Value| MigrationState::of(&json!({"status": {"migrationState": m}}));
        assert!(of(json!({"targetNode": "b"})).unwrap().in_flight());
        assert!(!of(json!({"targetNode": "b"})).unwrap().moving());
        assert!(!of(json!({"completed": true})).unwrap().in_flight());
        assert!(!of(json!({"failed": true})).unwrap().in_flight());
        assert!(!of(json!({"startTimestamp": "t", "endTimestamp": "u"}))
            .unwrap()
            .in_flight());
        assert_eq!(of(json!("garbage")), None);
        assert_eq!(MigrationState::of(&json!({"status": {}})), None);
    }
}
