//! API paths, the objects the tests create, and readers of the objects they get back.

use serde_json::{json, Value};

pub const KUBEVIRT: &str = "/apis/kubevirt.io/v1";
pub const NAMESPACES: &str = "/api/v1/namespaces";
/// The finalizer KubeVirt's VM controller keeps on every VM.
pub const VM_FINALIZER: &str = "kubevirt.io/virtualMachineControllerFinalize";
/// The finalizer the migration create mutator adds; the migration controller removes it
/// once the migration is final.
pub const MIGRATION_FINALIZER: &str = "kubevirt.io/migrationJobFinalize";

/// `/apis/kubevirt.io/v1/namespaces/<ns>/<plural>`
pub fn coll(ns: &str, plural: &str) -> String {
    format!("{KUBEVIRT}/namespaces/{ns}/{plural}")
}

/// `/apis/kubevirt.io/v1/namespaces/<ns>/<plural>/<name>`
pub fn item(ns: &str, plural: &str, name: &str) -> String {
    format!("{KUBEVIRT}/namespaces/{ns}/{plural}/{name}")
}

/// A small valid VirtualMachine.
pub fn vm(name: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {"app": "demo"}},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}},
                "spec": {
                    "domain": {
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                        "memory": {"guest": "128Mi"}
                    },
                    "volumes": [{"name": "root", "containerDisk": {"image": "registry.local/guest:1"}}]
                }
            }
        }
    })
}

/// A small valid VirtualMachineInstance.
pub fn vmi(name: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "labels": {"app": "demo"}},
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                "memory": {"guest": "128Mi"}
            },
            "volumes": [{"name": "root", "containerDisk": {"image": "registry.local/guest:1"}}]
        }
    })
}

/// A VirtualMachineInstanceMigration of `vmi`.
pub fn vmim(name: &str, vmi: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name},
        "spec": {"vmiName": vmi}
    })
}

/// A KubeVirt (kubevirt.io/v1, `kv`): a plain namespaced kind with a status subresource
/// that no admission checks and no controller writes (the migration controller only reads
/// the one named `kubevirt` in namespace `kubevirt`), so the API machinery tests use it as
/// "some namespaced custom resource". Its spec keeps unknown fields.
pub fn kubevirt_obj(name: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": name},
        "spec": {"configuration": {"migrations": {"bandwidthPerMigration": "64Mi"}}}
    })
}

pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// metadata.resourceVersion as a number (it is a decimal string).
pub fn rv(obj: &Value) -> i64 {
    let text = obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no resourceVersion string in {obj}"));
    text.parse()
        .unwrap_or_else(|_| panic!("resourceVersion {text:?} is not decimal"))
}

pub fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The condition of `kind` in `status.conditions`.
pub fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

pub fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

pub fn printable(vm: &Value) -> &str {
    vm["status"]["printableStatus"].as_str().unwrap_or("")
}
