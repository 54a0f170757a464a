//! VirtualMachine: a guest that is kept (stopped or running) and that starts VMIs as its
//! run strategy says. Here is the one definition of the run strategy ([`RunStrategy`],
//! [`SpecStrategy`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::object::Condition;
use super::vmi::VmiSpec;

crate::kube_object! {
    /// `kubevirt.io/v1` VirtualMachine.
    pub struct VirtualMachine {
        group: "kubevirt.io",
        version: "v1",
        kind: "VirtualMachine",
        plural: "virtualmachines",
        scope: NamespaceResourceScope,
        spec: VmSpec,
        status: VmStatus,
    }
}

crate::open_struct! {
    pub struct VmSpec {
        /// Deprecated: `true` is Always, `false` Halted (and wins over `runStrategy`).
        running: bool = "running",
        run_strategy: String = "runStrategy",
        template: VmiTemplate = "template",
        /// DataVolumes the VM owns (`metadata` and `spec` of each).
        data_volume_templates: Vec<Value> = "dataVolumeTemplates",
    }
}

crate::open_struct! {
    /// The VMI a VM starts: its labels and annotations, and its spec.
    pub struct VmiTemplate {
        metadata: ObjectMeta = "metadata",
        spec: VmiSpec = "spec",
    }
}

crate::open_struct! {
    pub struct VmStatus {
        printable_status: String = "printableStatus",
        created: bool = "created",
        ready: bool = "ready",
        /// The strategy last acted on.
        run_strategy: String = "runStrategy",
        conditions: Vec<Condition> = "conditions",
        state_change_requests: Vec<StateChangeRequest> = "stateChangeRequests",
        start_failure: StartFailure = "startFailure",
        desired_generation: i64 = "desiredGeneration",
        observed_generation: i64 = "observedGeneration",
    }
}

crate::open_struct! {
    /// A queued request of the start, stop and restart subresources.
    pub struct StateChangeRequest {
        /// `Start` or `Stop`.
        action: String = "action",
        /// For Stop: the VMI to stop.
        uid: String = "uid",
        data: std::collections::BTreeMap<String, String> = "data",
    }
}

crate::open_struct! {
    /// The crash-loop record of VMIs that failed before they ran.
    pub struct StartFailure {
        consecutive_fail_count: i64 = "consecutiveFailCount",
        last_failed_vmi_uid: String = "lastFailedVMIUID",
        retry_after_timestamp: String = "retryAfterTimestamp",
    }
}

impl VirtualMachine {
    /// What the spec asks for.
    pub fn spec_strategy(&self) -> SpecStrategy {
        SpecStrategy::of(&self.spec)
    }

    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        super::object::find(&self.status.conditions, kind)
    }
}

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
    pub fn of(spec: &VmSpec) -> SpecStrategy {
        if let Some(running) = spec.running {
            return SpecStrategy::Running(if running {
                RunStrategy::Always
            } else {
                RunStrategy::Halted
            });
        }
        match spec.run_strategy.as_deref() {
            None => SpecStrategy::Unset,
            Some(text) => RunStrategy::parse(text).map_or_else(
                || SpecStrategy::Invalid(text.to_string()),
                SpecStrategy::Strategy,
            ),
        }
    }

    /// What a VM spec held as JSON asks for.
    pub fn of_value(spec: &Value) -> SpecStrategy {
        serde_json::from_value::<VmSpec>(spec.clone())
            .map(|spec| SpecStrategy::of(&spec))
            .unwrap_or(SpecStrategy::Unset)
    }

    /// The strategy in force, if the spec names a valid one.
    pub fn strategy(&self) -> Option<RunStrategy> {
        match self {
            SpecStrategy::Running(s) | SpecStrategy::Strategy(s) => Some(*s),
            SpecStrategy::Unset | SpecStrategy::Invalid(_) => None,
        }
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
        let of = |spec: Value| SpecStrategy::of(&serde_json::from_value(spec).unwrap());
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
    fn a_vm_keeps_its_template_as_written() {
        let raw = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "a", "namespace": "ns", "generation": 3},
            "spec": {"runStrategy": "Always", "instancetype": {"name": "u1.small"},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"domain": {"devices": {}}, "evictionStrategy": "LiveMigrate"}}},
            "status": {"printableStatus": "Running", "startFailure": {"consecutiveFailCount": 2}}
        });
        let vm: VirtualMachine = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(vm.spec_strategy().strategy(), Some(RunStrategy::Always));
        let template = vm.spec.template.as_ref().unwrap();
        assert_eq!(
            template.spec.as_ref().unwrap().eviction_strategy.as_deref(),
            Some("LiveMigrate")
        );
        assert_eq!(
            vm.status
                .start_failure
                .as_ref()
                .unwrap()
                .consecutive_fail_count,
            Some(2)
        );
        assert_eq!(serde_json::to_value(&vm).unwrap(), raw);
    }
}
