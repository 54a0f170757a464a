//! VirtualMachineInstanceMigration (a request to move a running VMI to another node) and
//! MigrationPolicy (settings for the migrations of the VMIs it selects). Here is the one
//! definition of a migration's phase ([`MigrationPhase`]).

use std::collections::BTreeMap;

use serde_json::Value;

use super::object::Condition;
use super::vmi::{MigrationState, PhaseTransition};

crate::kube_object! {
    /// `kubevirt.io/v1` VirtualMachineInstanceMigration.
    pub struct VirtualMachineInstanceMigration {
        group: "kubevirt.io",
        version: "v1",
        kind: "VirtualMachineInstanceMigration",
        plural: "virtualmachineinstancemigrations",
        scope: NamespaceResourceScope,
        spec: MigrationSpec,
        status: MigrationStatus,
    }
}

crate::open_struct! {
    pub struct MigrationSpec {
        vmi_name: String = "vmiName",
        /// Labels the target node must have, beside the VMI's own selector.
        added_node_selector: BTreeMap<String, String> = "addedNodeSelector",
    }
}

crate::open_struct! {
    pub struct MigrationStatus {
        phase: MigrationPhase = "phase",
        phase_transition_timestamps: Vec<PhaseTransition> = "phaseTransitionTimestamps",
        conditions: Vec<Condition> = "conditions",
        migration_state: MigrationState = "migrationState",
    }
}

crate::string_enum! {
    /// `status.phase` of a VirtualMachineInstanceMigration, in KubeVirt's order.
    pub enum MigrationPhase {
        Unset = "",
        Pending = "Pending",
        Scheduling = "Scheduling",
        Scheduled = "Scheduled",
        PreparingTarget = "PreparingTarget",
        TargetReady = "TargetReady",
        Running = "Running",
        Succeeded = "Succeeded",
        Failed = "Failed",
    }
}

impl MigrationPhase {
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

impl VirtualMachineInstanceMigration {
    pub fn phase(&self) -> MigrationPhase {
        self.status.phase.unwrap_or_default()
    }

    /// `phaseTransitionTimestamps` with `phase` entered `at`.
    pub fn transitions_entering(&self, phase: MigrationPhase, at: &str) -> Vec<PhaseTransition> {
        PhaseTransition::appended(&self.status.phase_transition_timestamps, phase.as_str(), at)
    }

    pub fn vmi_name(&self) -> &str {
        self.spec.vmi_name.as_deref().unwrap_or("")
    }
}

crate::kube_object! {
    /// `migrations.kubevirt.io/v1alpha1` MigrationPolicy.
    pub struct MigrationPolicy {
        group: "migrations.kubevirt.io",
        version: "v1alpha1",
        kind: "MigrationPolicy",
        plural: "migrationpolicies",
        scope: ClusterResourceScope,
        spec: MigrationPolicySpec,
        status: NoStatus,
    }
}

crate::open_struct! {
    pub struct MigrationPolicySpec {
        selectors: PolicySelectors = "selectors",
        allow_auto_converge: bool = "allowAutoConverge",
        /// A quantity, as written.
        bandwidth_per_migration: Value = "bandwidthPerMigration",
        completion_timeout_per_gib: i64 = "completionTimeoutPerGiB",
        allow_post_copy: bool = "allowPostCopy",
        allow_workload_disruption: bool = "allowWorkloadDisruption",
    }
}

crate::open_struct! {
    pub struct PolicySelectors {
        virtual_machine_instance_selector: BTreeMap<String, String> = "virtualMachineInstanceSelector",
        namespace_selector: BTreeMap<String, String> = "namespaceSelector",
    }
}

crate::open_struct! {
    /// The status of a kind whose status nothing reads.
    pub struct NoStatus {}
}
