//! `coordination.k8s.io/v1` Leases: what servers elect their one controller manager
//! with (`kubectl get leases -n kube-system` shows the holder), validated as
//! kube-apiserver validates them.

use apimachinery::field::FieldError;
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use serde_json::{json, Value};

use crate::registry::{Admission, ResourceHooks};

pub const GROUP: &str = "coordination.k8s.io";

pub static LEASE: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "Lease",
    list_kind: "LeaseList",
    plural: "leases",
    singular: "lease",
    short_names: &[],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: &[
        PrinterColumn {
            name: "Holder",
            column_type: "string",
            json_path: ".spec.holderIdentity",
            description: "holderIdentity contains the identity of the holder of a current lease.",
            priority: 0,
        },
        PrinterColumn::AGE,
    ],
    schema_name: "io.k8s.api.coordination.v1.Lease",
};

pub struct LeaseHooks;

impl LeaseHooks {
    /// kube's `ValidateLeaseSpec`.
    fn errors(obj: &Value) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        if let Some(seconds) = spec.get("leaseDurationSeconds").and_then(Value::as_i64) {
            if seconds <= 0 {
                errors.push(FieldError::invalid(
                    "spec.leaseDurationSeconds",
                    seconds,
                    "must be greater than 0",
                ));
            }
        }
        if let Some(transitions) = spec.get("leaseTransitions").and_then(Value::as_i64) {
            if transitions < 0 {
                errors.push(FieldError::invalid(
                    "spec.leaseTransitions",
                    transitions,
                    "must be greater than or equal to 0",
                ));
            }
        }
        errors
    }
}

impl ResourceHooks for LeaseHooks {
    fn allows_unconditional_update(&self) -> bool {
        true
    }
    fn validate_create(&self, obj: &Value) -> Admission {
        Admission {
            errors: Self::errors(obj),
            warnings: Vec::new(),
        }
    }
    fn validate_update(&self, _old: &Value, new: &Value, _privileged: bool) -> Admission {
        Admission {
            errors: Self::errors(new),
            warnings: Vec::new(),
        }
    }
}

/// OpenAPI schemas of the kind, in kube-apiserver's components naming.
pub fn schemas() -> Value {
    let time = |d: &str| json!({"type": "string", "format": "date-time", "description": d});
    json!({
        "io.k8s.api.coordination.v1.Lease": {
            "type": "object",
            "description": "Lease defines a lease concept.",
            "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": "Lease", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
                "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "default": {}},
                "spec": {"type": "object", "default": {}, "description": "spec contains the specification of the Lease.",
                    "properties": {
                        "holderIdentity": {"type": "string", "description": "holderIdentity contains the identity of the holder of a current lease."},
                        "leaseDurationSeconds": {"type": "integer", "format": "int32", "description": "leaseDurationSeconds is a duration that candidates for a lease need to wait to force acquire it."},
                        "acquireTime": time("acquireTime is a time when the current lease was acquired."),
                        "renewTime": time("renewTime is a time when the current holder of a lease has last updated the lease."),
                        "leaseTransitions": {"type": "integer", "format": "int32", "description": "leaseTransitions is the number of transitions of a lease between holders."},
                        "strategy": {"type": "string"},
                        "preferredHolder": {"type": "string"}
                    }}
            }
        },
        "io.k8s.api.coordination.v1.LeaseList": crate::openapi::list_schema("io.k8s.api.coordination.v1.Lease", GROUP, "LeaseList")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_transitions_are_checked() {
        let lease = |spec: Value| json!({"metadata": {"name": "l"}, "spec": spec});
        assert!(LeaseHooks::errors(&lease(json!({"leaseDurationSeconds": 15}))).is_empty());
        let fields: Vec<String> = LeaseHooks::errors(&lease(
            json!({"leaseDurationSeconds": 0, "leaseTransitions": -1}),
        ))
        .into_iter()
        .map(|e| e.field)
        .collect();
        assert_eq!(
            fields,
            ["spec.leaseDurationSeconds", "spec.leaseTransitions"]
        );
    }
}
