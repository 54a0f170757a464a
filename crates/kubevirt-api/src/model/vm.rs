//! VirtualMachine: a guest that is kept (stopped or running) and that starts VMIs as its
//! run strategy says. Here is the one definition of the run strategy ([`RunStrategy`],
//! [`SpecStrategy`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

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
        /// DataVolumes the VM owns.
        data_volume_templates: Vec<DataVolumeTemplate> = "dataVolumeTemplates",
    }
}

crate::open_struct! {
    /// A DataVolume a VM owns, made from this when it does not exist.
    pub struct DataVolumeTemplate {
        metadata: ObjectMeta = "metadata",
        spec: crate::cdi::model::DataVolumeSpec = "spec",
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

/// One queued start or stop (`status.stateChangeRequests`), as the start, stop and
/// restart subresources write it and the VM controller consumes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeRequest {
    /// Stop the VMI with this uid (none when the VM had no VMI).
    Stop {
        uid: Option<String>,
    },
    Start {
        paused: bool,
    },
}

impl ChangeRequest {
    /// The request an entry holds; `None` for an action KubeVirt does not know.
    pub fn of(entry: &StateChangeRequest) -> Option<ChangeRequest> {
        match entry.action.as_deref()? {
            "Start" => Some(ChangeRequest::Start {
                paused: entry
                    .data
                    .as_ref()
                    .and_then(|d| d.get("paused"))
                    .is_some_and(|p| p == "true"),
            }),
            "Stop" => Some(ChangeRequest::Stop {
                uid: entry.uid.clone(),
            }),
            _ => None,
        }
    }

    /// The entry virt-api writes: `{"action":"Stop","uid":...}`,
    /// `{"action":"Start","data":{"paused":"true"}}` (the flag is a string).
    pub fn entry(&self) -> StateChangeRequest {
        let (action, uid, data) = match self {
            ChangeRequest::Stop { uid } => ("Stop", uid.clone(), None),
            ChangeRequest::Start { paused: true } => (
                "Start",
                None,
                Some([("paused".to_string(), "true".to_string())].into()),
            ),
            ChangeRequest::Start { paused: false } => ("Start", None, None),
        };
        StateChangeRequest {
            action: Some(action.into()),
            uid,
            data,
            ..StateChangeRequest::default()
        }
    }
}

impl VirtualMachine {
    /// What the spec asks for.
    pub fn spec_strategy(&self) -> SpecStrategy {
        SpecStrategy::of(&self.spec)
    }

    /// The queued start and stop requests, oldest first.
    pub fn change_requests(&self) -> Vec<ChangeRequest> {
        self.status
            .state_change_requests
            .iter()
            .flatten()
            .filter_map(ChangeRequest::of)
            .collect()
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
    use serde_json::{json, Value};

    #[test]
    fn change_requests_read_and_write_as_virt_api_does() {
        let written = [
            (
                json!({"action": "Stop", "uid": "u1"}),
                ChangeRequest::Stop {
                    uid: Some("u1".into()),
                },
            ),
            (json!({"action": "Stop"}), ChangeRequest::Stop { uid: None }),
            (
                json!({"action": "Start", "data": {"paused": "true"}}),
                ChangeRequest::Start { paused: true },
            ),
            (
                json!({"action": "Start"}),
                ChangeRequest::Start { paused: false },
            ),
        ];
        for (json, request) in written {
            let entry: StateChangeRequest = serde_json::from_value(json.clone()).unwrap();
            assert_eq!(ChangeRequest::of(&entry), Some(request.clone()));
            assert_eq!(serde_json::to_value(request.entry()).unwrap(), json);
        }
        let odd: StateChangeRequest = serde_json::from_value(json!({"action": "Dance"})).unwrap();
        assert_eq!(ChangeRequest::of(&odd), None);
    }

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
