//! VirtualMachine status that both the server and the VM controller write: the
//! server stores a stopped VM's first status with its create, so the controller's first
//! sync finds nothing to change.

use serde_json::{json, Value};

use crate::model::vm::VmSpec;
use crate::model::{Condition, RunStrategy, SpecStrategy};

/// The VM's Ready condition while it has no VMI (KubeVirt's reason and message).
pub fn vmi_not_exists_condition(now: &str) -> Condition {
    Condition {
        last_transition_time: Some(now.into()),
        ..Condition::new("Ready", "False", "VMINotExists", "VMI does not exist")
    }
}

/// The status the VM controller writes in its first sync of a new VM that stays
/// stopped (runStrategy Halted or Manual, or `running: false`); `None` for a VM the
/// controller starts at once, or whose run strategy admission will refuse.
pub fn initial_stopped_status(vm: &Value, now: &str) -> Option<Value> {
    let spec = vm.get("spec")?;
    // Both set is refused by admission: no status for it.
    let both = spec.get("running").is_some() && spec.get("runStrategy").is_some();
    let stopped = !both
        && matches!(
            serde_json::from_value::<VmSpec>(spec.clone())
                .map_or(SpecStrategy::Unset, |spec| SpecStrategy::of(&spec))
                .strategy(),
            Some(RunStrategy::Halted | RunStrategy::Manual)
        );
    if !stopped {
        return None;
    }
    let generation = vm.pointer("/metadata/generation").cloned()?;
    Some(json!({
        "printableStatus": "Stopped",
        "created": false,
        "ready": false,
        "conditions": [vmi_not_exists_condition(now)],
        "desiredGeneration": generation,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(spec: Value) -> Value {
        json!({"metadata": {"name": "a", "generation": 1}, "spec": spec})
    }

    #[test]
    fn stopped_strategies_get_a_status() {
        for spec in [
            json!({"running": false}),
            json!({"runStrategy": "Halted"}),
            json!({"runStrategy": "Manual"}),
        ] {
            let status = initial_stopped_status(&vm(spec.clone()), "t").expect("a status");
            assert_eq!(status["printableStatus"], "Stopped", "{spec}");
            assert_eq!(status["conditions"][0]["reason"], "VMINotExists");
            assert_eq!(status["desiredGeneration"], 1);
        }
    }

    #[test]
    fn started_or_invalid_strategies_get_none() {
        for spec in [
            json!({"running": true}),
            json!({"runStrategy": "Always"}),
            json!({"runStrategy": "RerunOnFailure"}),
            json!({"runStrategy": "Once"}),
            json!({"running": false, "runStrategy": "Halted"}),
            json!({}),
        ] {
            assert_eq!(
                initial_stopped_status(&vm(spec.clone()), "t"),
                None,
                "{spec}"
            );
        }
    }
}
