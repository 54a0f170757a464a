//! The kinds the controllers work with, as dynamic resources, and small accessors for
//! the JSON they carry.

use apimachinery::pointer::Pointer;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

pub fn virtual_machine() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    )
}

pub fn virtual_machine_instance() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

pub fn node() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Node"), "nodes")
}

/// A string at a JSON pointer of the object's data (`/status/phase`).
pub fn str_at<'a>(obj: &'a DynamicObject, pointer: &str) -> Option<&'a str> {
    obj.data.at(pointer).and_then(Value::as_str)
}

/// The condition of `kind` in `status.conditions`, if any.
pub fn condition<'a>(obj: &'a DynamicObject, kind: &str) -> Option<&'a Value> {
    obj.data
        .at("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

pub fn condition_is(obj: &DynamicObject, kind: &str, status: &str) -> bool {
    condition(obj, kind).is_some_and(|c| c["status"] == status)
}
