//! The status documents a node agent writes for a VMI: phases with their transition
//! timestamps, conditions, where and how the guest runs, and the image digests a start
//! pinned. Built from the VMI as read; the state machine in `super` decides which to write.

use std::collections::HashMap;

use kubevirt_api::model::{Condition, VirtualMachineInstance};
use serde_json::{json, Map, Value};

use crate::hypervisor::{GuestInfo, ImageIds};
use crate::volume_sources::VolumeSources;
use kubevirt_api::meta::now;
use kubevirt_api::model::VmiPhase;
use kubevirt_api::names::conditions::{
    LIVE_MIGRATABLE, MESSAGE_PAUSED_BY_USER, PAUSED, READY, REASON_GUEST_NOT_RUNNING,
    REASON_PAUSED_BY_USER, SYNCHRONIZED,
};

pub(crate) fn conditions(vmi: &VirtualMachineInstance) -> Vec<Condition> {
    vmi.status.conditions.clone().unwrap_or_default()
}

/// Sets the condition of `kind`, its transition time kept while its status stays.
pub(crate) fn set_condition(
    list: &mut Vec<Condition>,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
) {
    kubevirt_api::model::object::set(list, Condition::new(kind, status, reason, message), &now());
}

/// Status fields for entering `phase`, with its transition timestamp.
pub(crate) fn enter_phase(vmi: &VirtualMachineInstance, phase: VmiPhase) -> Map<String, Value> {
    let transitions = vmi.transitions_entering(phase, &now());
    let mut status = Map::new();
    status.insert("phase".into(), json!(phase));
    status.insert("phaseTransitionTimestamps".into(), json!(transitions));
    status
}

/// The status of a guest that runs: phase Running, Ready (or Paused), LiveMigratable, where
/// and how it runs, and its pinned images. `accel`: how the node runs the vCPUs
/// ([`crate::hypervisor::Hypervisor::accel`]).
pub(crate) fn running_status(
    vmi: &VirtualMachineInstance,
    info: &GuestInfo,
    paused: bool,
    accel: Option<&str>,
    sources: &VolumeSources,
) -> Map<String, Value> {
    let mut status = enter_phase(vmi, VmiPhase::Running);
    let mut list = conditions(vmi);
    if paused {
        set_condition(
            &mut list,
            READY,
            "False",
            REASON_GUEST_NOT_RUNNING,
            "the guest is paused",
        );
        set_condition(
            &mut list,
            PAUSED,
            "True",
            REASON_PAUSED_BY_USER,
            MESSAGE_PAUSED_BY_USER,
        );
    } else {
        set_condition(&mut list, READY, "True", "", "");
    }
    match kubevirt_api::migratable::check(vmi, |claim| sources.claim_shared(claim)) {
        Ok(method) => {
            set_condition(&mut list, LIVE_MIGRATABLE, "True", "", "");
            status.insert("migrationMethod".into(), json!(method.as_str()));
        }
        Err(why) => set_condition(
            &mut list,
            LIVE_MIGRATABLE,
            "False",
            why.reason,
            &why.message,
        ),
    }
    list.retain(|c| c.kind() != SYNCHRONIZED);
    status.insert("conditions".into(), json!(list));
    status.extend(guest_status(info, accel));
    status.extend(image_status(vmi, &image_ids(vmi)));
    status
}

/// The status fields that say where and how the guest runs on this node (after a start,
/// and on the target after a migration).
pub(crate) fn guest_status(info: &GuestInfo, accel: Option<&str>) -> Map<String, Value> {
    let mut status = Map::new();
    let interfaces: Vec<Value> = info
        .interfaces
        .iter()
        .map(|(name, mac, ip)| {
            let mut interface = json!({"name": name, "mac": mac, "infoSource": "domain"});
            // No address yet (a simulated node before its subnet): none is reported.
            if !ip.is_empty() {
                interface["ipAddress"] = json!(ip);
                interface["ipAddresses"] = json!([ip]);
            }
            interface
        })
        .collect();
    status.insert("interfaces".into(), json!(interfaces));
    status.insert("machine".into(), json!({"type": info.machine}));
    if let Some(accel) = accel {
        status.insert("accelerator".into(), json!(accel));
    }
    if !info.port_forwards.is_empty() {
        status.insert("portForwards".into(), json!(info.port_forwards));
    }
    status
}

/// The image IDs (`registry/repository@sha256:…`) the VMI's status records: each
/// containerDisk's in `volumeStatus[].containerDiskVolume.imageID`, the kernelBoot
/// container's in `kernelBootStatus.imageID` (a pod's `containerStatuses[].imageID`, put
/// where KubeVirt keeps the rest of a containerDisk's details).
pub(crate) fn image_ids(vmi: &VirtualMachineInstance) -> ImageIds {
    let volumes = vmi
        .status
        .volume_status
        .iter()
        .flatten()
        .filter_map(|v| {
            let id = v.container_disk_volume.as_ref()?.image_id.clone()?;
            Some((v.name.clone()?, id))
        })
        .collect();
    let kernel = vmi
        .status
        .kernel_boot_status
        .as_ref()
        .and_then(|k| k.image_id.clone());
    ImageIds { volumes, kernel }
}

/// `volumeStatus` and, for a kernelBoot image, `kernelBootStatus`, with the image IDs.
fn image_status(vmi: &VirtualMachineInstance, ids: &ImageIds) -> Map<String, Value> {
    let mut status = Map::new();
    let volumes: Vec<Value> = volume_status(vmi)
        .into_iter()
        .map(|mut v| {
            if let Some(id) = v["name"].as_str().and_then(|n| ids.volumes.get(n)) {
                v["containerDiskVolume"] = json!({"imageID": id});
            }
            v
        })
        .collect();
    status.insert("volumeStatus".into(), json!(volumes));
    if let Some(id) = &ids.kernel {
        let mut kernel = vmi.status.kernel_boot_status.clone().unwrap_or_default();
        kernel.image_id = Some(id.clone());
        status.insert("kernelBootStatus".into(), json!(kernel));
    }
    status
}

/// `status.volumeStatus`: every disk's volume with its target device, named in
/// declaration order per prefix (virtio `vda`, `vdb`…; sata, scsi and usb `sda`…; ide
/// `hda`…), as KubeVirt reports them.
fn volume_status(vmi: &VirtualMachineInstance) -> Vec<Value> {
    let mut used: HashMap<&str, u8> = HashMap::new();
    vmi.spec
        .disks()
        .iter()
        .map(|disk| {
            let prefix = match disk.bus.as_str() {
                "virtio" => "vd",
                "ide" => "hd",
                _ => "sd",
            };
            let index = used.entry(prefix).or_insert(0);
            let target = format!("{prefix}{}", char::from(b'a' + (*index % 26)));
            *index += 1;
            json!({"name": disk.name, "target": target})
        })
        .collect()
}

/// Status fields of a VMI that failed to start: phase Failed, why, and conditions that
/// say it (mirrored onto the VM).
pub(crate) fn failed_status(
    vmi: &VirtualMachineInstance,
    reason: &str,
    message: &str,
) -> Map<String, Value> {
    let mut status = enter_phase(vmi, VmiPhase::Failed);
    status.insert("reason".into(), json!(reason));
    let mut list = conditions(vmi);
    set_condition(&mut list, READY, "False", reason, message);
    list.retain(|c| c.kind() != SYNCHRONIZED);
    status.insert("conditions".into(), json!(list));
    status
}

/// The status a prepared VMI enters Scheduled with: the phase, conditions without
/// Synchronized, and the digests its images were pulled as (for the start and any
/// migration).
pub(crate) fn scheduled_status(
    vmi: &VirtualMachineInstance,
    pulled: ImageIds,
) -> Map<String, Value> {
    let mut status = enter_phase(vmi, VmiPhase::Scheduled);
    let mut list = conditions(vmi);
    list.retain(|c| c.kind() != SYNCHRONIZED);
    status.insert("conditions".into(), json!(list));
    let mut pins = image_ids(vmi);
    pins.volumes.extend(pulled.volumes);
    pins.kernel = pulled.kernel.or(pins.kernel);
    if pins != ImageIds::default() {
        status.extend(image_status(vmi, &pins));
    }
    status
}

/// The VMI as a merge patch of `status` would leave it: each of its fields replaces the
/// stored one.
pub(crate) fn with_status(
    vmi: &VirtualMachineInstance,
    status: &Map<String, Value>,
) -> VirtualMachineInstance {
    let mut merged = match serde_json::to_value(&vmi.status) {
        Ok(Value::Object(current)) => current,
        _ => Map::new(),
    };
    merged.extend(status.clone());
    let mut written = vmi.clone();
    // What this agent wrote itself reads back as it was written.
    if let Ok(status) = serde_json::from_value(Value::Object(merged)) {
        written.status = status;
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn vmi(status: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default"},
            "spec": {"domain": {"devices": {"disks": [
                {"name": "root", "disk": {"bus": "virtio"}},
                {"name": "seed", "disk": {"bus": "virtio"}}]}},
                "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/a/b:1"}},
                            {"name": "seed", "cloudInitNoCloud": {"userData": "x"}}]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn image_ids_round_trip_through_the_status() {
        let id = format!("quay.io/a/b@{DIGEST}");
        let ids = ImageIds {
            volumes: [("root".to_string(), id.clone())].into(),
            kernel: Some(format!("quay.io/k@{DIGEST}")),
        };
        let status = image_status(
            &vmi(json!({"kernelBootStatus": {"kernelInfo": {"checksum": 1}}})),
            &ids,
        );
        assert_eq!(
            status["volumeStatus"],
            json!([{"name": "root", "target": "vda", "containerDiskVolume": {"imageID": id}},
                   {"name": "seed", "target": "vdb"}])
        );
        // KubeVirt's own kernelBootStatus fields stay.
        assert_eq!(status["kernelBootStatus"]["kernelInfo"]["checksum"], 1);
        let written = vmi(Value::Object(status));
        assert_eq!(image_ids(&written), ids);
        // A running status keeps them.
        let running = running_status(
            &written,
            &GuestInfo::default(),
            false,
            None,
            &VolumeSources::default(),
        );
        assert_eq!(image_ids(&vmi(Value::Object(running))), ids);
    }
}
