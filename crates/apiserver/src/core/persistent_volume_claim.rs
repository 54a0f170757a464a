//! PersistentVolumeClaims: requests for disks, which the volume controller backs with
//! files in the data dir's volume pool.

use apimachinery::resource::{PrinterColumn, ResourceInfo};
use serde_json::{json, Value};

use crate::registry::ResourceHooks;

pub static PERSISTENT_VOLUME_CLAIM: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "PersistentVolumeClaim",
    list_kind: "PersistentVolumeClaimList",
    plural: "persistentvolumeclaims",
    singular: "persistentvolumeclaim",
    short_names: &["pvc"],
    categories: &[],
    namespaced: true,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn {
            name: "Status",
            column_type: "string",
            json_path: ".status.phase",
            description: "Pending until the volume file exists, then Bound",
            priority: 0,
        },
        PrinterColumn {
            name: "Volume",
            column_type: "string",
            json_path: ".spec.volumeName",
            description: "The volume that backs the claim",
            priority: 0,
        },
        PrinterColumn {
            name: "Capacity",
            column_type: "string",
            json_path: ".status.capacity.storage",
            description: "The size of the volume",
            priority: 0,
        },
        PrinterColumn {
            name: "Access Modes",
            column_type: "string",
            json_path: ".status.accessModes",
            description: "How the volume may be mounted",
            priority: 0,
        },
        PrinterColumn::AGE,
    ],
    schema_name: "io.k8s.api.core.v1.PersistentVolumeClaim",
};

/// The finalizer that keeps a claim (and its file) while the volume controller frees it.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";

/// Claims: a size is required; the volume controller allocates the file.
pub struct PersistentVolumeClaimHooks;

impl ResourceHooks for PersistentVolumeClaimHooks {
    fn default_on_create(&self, obj: &mut Value) {
        let mut finalizers = crate::object::finalizers(obj);
        if !finalizers.iter().any(|f| f == PVC_PROTECTION_FINALIZER) {
            finalizers.push(PVC_PROTECTION_FINALIZER.into());
            crate::object::set_finalizers(obj, finalizers);
        }
        if obj.pointer("/spec/volumeMode").is_none() {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("volumeMode".into(), json!("Filesystem"));
            }
        }
        if let Some(root) = obj.as_object_mut() {
            root.insert("status".into(), json!({"phase": "Pending"}));
        }
    }

    fn validate_create(&self, obj: &Value) -> crate::registry::Admission {
        use apimachinery::field::FieldError;
        let mut errors = Vec::new();
        let modes = obj.pointer("/spec/accessModes").and_then(Value::as_array);
        if modes.is_none_or(|m| m.is_empty()) {
            errors.push(FieldError::required(
                "spec.accessModes",
                "at least 1 access mode is required",
            ));
        }
        match obj.pointer("/spec/resources/requests/storage") {
            None => errors.push(FieldError::required("spec.resources[storage]", "")),
            Some(size)
                if kubevirt_api::quantity::Quantity::from_json(size)
                    .is_none_or(|q| q.value() <= 0) =>
            {
                errors.push(FieldError::invalid(
                    "spec.resources[storage]",
                    size.clone(),
                    "must be greater than zero",
                ))
            }
            Some(_) => {}
        }
        crate::registry::Admission {
            errors,
            warnings: Vec::new(),
        }
    }
}

/// OpenAPI schemas of PersistentVolumeClaim and PersistentVolumeClaimList.
pub fn schemas() -> Value {
    json!({
        "io.k8s.api.core.v1.PersistentVolumeClaim": {
            "type": "object",
            "description": "A request for a disk: the volume controller allocates a file of the requested size in the data dir's volume pool, and frees it when the claim is deleted.",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "PersistentVolumeClaim", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string", "description": "The versioned schema of this representation of an object."},
                "kind": {"type": "string", "description": "The REST resource this object represents."},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                "spec": {"type": "object", "description": "What the claim asks for.", "properties": {
                    "accessModes": {"type": "array", "items": {"type": "string", "enum": ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]},
                                    "description": "How the volume may be mounted."},
                    "resources": {"type": "object", "description": "The size requested.", "properties": {
                        "requests": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}},
                        "limits": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}}}},
                    "storageClassName": {"type": "string", "description": "Accepted and recorded; virtplane has one local pool."},
                    "volumeMode": {"type": "string", "enum": ["Filesystem", "Block"], "description": "Filesystem or Block."},
                    "volumeName": {"type": "string", "description": "The volume bound to the claim."},
                    "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "dataSource": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                "status": {"type": "object", "description": "Where the claim stands.", "properties": {
                    "phase": {"type": "string", "enum": ["Pending", "Bound", "Lost"]},
                    "accessModes": {"type": "array", "items": {"type": "string"}},
                    "capacity": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}},
                    "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}
            }
        },
        "io.k8s.api.core.v1.PersistentVolumeClaimList": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/io.k8s.api.core.v1.PersistentVolumeClaim"}}
            }
        }
    })
}
