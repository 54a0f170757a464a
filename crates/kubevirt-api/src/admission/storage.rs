//! Disk, volume and DataVolume-template rules (KubeVirt's storage admitters and the storage
//! parts of the VMI admitter).

use std::collections::HashSet;

use apimachinery::field::ErrorType;
use serde_json::Value;

use super::spec::quantity;
use super::Causes;
use crate::access::{at, bool_at, get, has, int_at, list_at, str_at};
use apimachinery::meta_validation::is_dns1123_label;

use crate::validation::{clean_path, is_pci_address};

const CLOUD_INIT_MAX_LEN: usize = 2048;
const SERIAL_MAX_LEN: usize = 256;
const DISK_TARGETS: [&str; 3] = ["disk", "lun", "cdrom"];

fn volume_named<'a>(volumes: &'a [Value], name: &str) -> Option<&'a Value> {
    volumes.iter().rev().find(|v| str_at(v, &["name"]) == name)
}

/// Disks must have volumes (except empty CD-ROMs, which need a feature gate), LUNs need
/// claims, downward metrics need a virtio disk, and boot orders are unique across disks and
/// interfaces.
pub(super) fn boot_order(spec: &Value, p: &str, out: &mut Causes) {
    let volumes = list_at(spec, &["volumes"]);
    let mut used = HashSet::new();
    for (i, disk) in list_at(spec, &["domain", "devices", "disks"])
        .iter()
        .enumerate()
    {
        let disk_path = format!("{p}.domain.devices.disks[{i}]");
        let name = str_at(disk, &["name"]);
        let volume = volume_named(volumes, name);
        if volume.is_none() {
            if !has(disk, &["cdrom"]) {
                out.add(
                    ErrorType::Invalid,
                    format!("{disk_path}.name"),
                    format!("{disk_path}.Name '{name}' not found."),
                );
            } else {
                out.add(
                    ErrorType::Invalid,
                    format!("{disk_path}.name"),
                    "DeclarativeHotplugVolumes feature gate not enabled, cannot define an empty CD-ROM disk",
                );
            }
        }
        if let Some(volume) = volume {
            if has(disk, &["lun"])
                && !has(volume, &["persistentVolumeClaim"])
                && !has(volume, &["dataVolume"])
            {
                out.add(
                    ErrorType::Invalid,
                    format!("{disk_path}.lun"),
                    format!("{disk_path}.lun can only be mapped to a DataVolume or PersistentVolumeClaim volume."),
                );
            }
            if has(volume, &["downwardMetrics"]) {
                let bus = str_at(disk, &["disk", "bus"]);
                if !has(disk, &["disk"]) {
                    out.add(
                        ErrorType::Required,
                        format!("{disk_path}.disk"),
                        format!(
                            "DownwardMetrics volume must be mapped to a disk, but disk is not set on {disk_path}.disk."
                        ),
                    );
                } else if bus != "virtio" && !bus.is_empty() {
                    out.add(
                        ErrorType::Invalid,
                        format!("{disk_path}.disk.bus"),
                        format!("DownwardMetrics volume must be mapped to virtio bus, but {disk_path}.disk.bus is set to {bus}"),
                    );
                }
            }
        }
        if let Some(order) = int_at(disk, &["bootOrder"]) {
            if !used.insert(order) {
                out.add(
                    ErrorType::Invalid,
                    format!("{disk_path}.bootOrder"),
                    format!(
                        "Boot order for {disk_path}.bootOrder already set for a different device."
                    ),
                );
            }
        }
    }
    for (i, iface) in list_at(spec, &["domain", "devices", "interfaces"])
        .iter()
        .enumerate()
    {
        let Some(order) = int_at(iface, &["bootOrder"]) else {
            continue;
        };
        if order < 1 {
            // KubeVirt indexes the spec path itself here, giving e.g. `spec[0].bootOrder`.
            out.add(
                ErrorType::Invalid,
                format!("{p}[{i}].bootOrder"),
                format!("{p}[{i}] must have a boot order > 0, if supplied"),
            );
        } else if !used.insert(order) {
            let field = format!("{p}.domain.devices.interfaces[{i}].bootOrder");
            out.add(
                ErrorType::Invalid,
                &field,
                format!("Boot order for {field} already set for a different device."),
            );
        }
    }
}

/// The per-disk rules (KubeVirt's `ValidateDisks`).
pub(super) fn disks(spec: &Value, p: &str, out: &mut Causes) {
    let list = list_at(spec, &["domain", "devices", "disks"]);
    let field = format!("{p}.domain.devices.disks");
    for (i, disk) in list.iter().enumerate() {
        let here = format!("{field}[{i}]");
        let name = str_at(disk, &["name"]);
        for (j, other) in list.iter().enumerate().take(i) {
            if str_at(other, &["name"]) == name {
                out.add(
                    ErrorType::Invalid,
                    format!("{here}.name"),
                    format!("{here} and {field}[{j}] must not have the same Name."),
                );
            }
        }
        if DISK_TARGETS.iter().filter(|&&t| has(disk, &[t])).count() > 1 {
            out.add(
                ErrorType::Invalid,
                &here,
                format!("{here} can only have a single target type defined"),
            );
        }
        let pci = str_at(disk, &["disk", "pciAddress"]);
        if !pci.is_empty() {
            // KubeVirt builds these paths from the disks path again, doubling it.
            let quirk = format!("{field}.domain.devices.disks.disk[{i}]");
            if str_at(disk, &["disk", "bus"]) != "virtio" {
                out.add(
                    ErrorType::Invalid,
                    format!("{quirk}.pciAddress"),
                    format!("disk {quirk}.name - setting a PCI address is only possible with bus type virtio."),
                );
            }
            if !is_pci_address(pci) {
                out.add(
                    ErrorType::Invalid,
                    format!("{quirk}.pciAddress"),
                    format!("disk {quirk}.name has malformed PCI address ({pci})."),
                );
            }
        }
        if int_at(disk, &["bootOrder"]).is_some_and(|o| o < 1) {
            out.add(
                ErrorType::Invalid,
                format!("{here}.bootOrder"),
                format!("{here} must have a boot order > 0, if supplied"),
            );
        }
        bus(disk, &field, i, out);
        let serial = str_at(disk, &["serial"]);
        if !serial.is_empty()
            && !serial
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'+' | b'-'))
        {
            out.add(
                ErrorType::Invalid,
                format!("{here}.serial"),
                format!("{here} must be made up of the following characters [A-Za-z0-9_.+-], if specified"),
            );
        }
        if serial.chars().count() > SERIAL_MAX_LEN {
            out.add(
                ErrorType::Invalid,
                format!("{here}.serial"),
                format!(
                    "{here} must be less than or equal to {SERIAL_MAX_LEN} in length, if specified"
                ),
            );
        }
        let cache = str_at(disk, &["cache"]);
        if !matches!(cache, "" | "none" | "writethrough" | "writeback") {
            out.add(
                ErrorType::Invalid,
                format!("{here}.cache"),
                format!("{here}.cache has invalid value {cache}"),
            );
        }
        if !matches!(str_at(disk, &["io"]), "" | "native" | "threads") {
            out.add(
                ErrorType::NotSupported,
                format!("{field}.domain.devices.disks[{i}].io"),
                format!("Disk IO mode for {field} is not supported. Supported modes are: native, threads."),
            );
        }
        if let Some(policy) = get(disk, "errorPolicy") {
            let policy = policy.as_str().unwrap_or("");
            if !matches!(policy, "stop" | "ignore" | "report" | "enospace") {
                out.add(
                    ErrorType::Invalid,
                    format!("{here}.errorPolicy"),
                    format!("{here}.errorPolicy has invalid value \"{policy}\""),
                );
            }
        }
        for message in is_dns1123_label(name) {
            out.add(
                ErrorType::Invalid,
                format!("{field}.domain.devices.disks[{i}].name"),
                message,
            );
        }
    }
}

fn bus(disk: &Value, field: &str, i: usize, out: &mut Causes) {
    let Some(target) = DISK_TARGETS.iter().copied().find(|&t| has(disk, &[t])) else {
        return;
    };
    let bus = str_at(disk, &[target, "bus"]);
    if bus.is_empty() {
        return;
    }
    let here = format!("{field}[{i}]");
    // KubeVirt refuses `ide` ("IDE bus is not supported"); virtplane's QEMU nodes attach
    // it (PIIX IDE on `pc`, the AHCI ports on `q35`), so the seed's `ide` is accepted.
    match bus {
        "virtio" if target == "cdrom" => out.add(
            ErrorType::Invalid,
            format!("{here}.cdrom.bus"),
            format!("Bus type {bus} is invalid for CD-ROM device"),
        ),
        "sata" if target == "disk" && bool_at(disk, &["disk", "readonly"]) == Some(true) => out.add(
            ErrorType::Invalid,
            format!("{here}.disk.bus"),
            format!("{bus} hard-disks do not support read-only."),
        ),
        "virtio" | "sata" | "scsi" | "usb" | "ide" => {}
        other => out.add(
            ErrorType::Invalid,
            format!("{here}.{target}.bus"),
            format!("{here} is set with an unrecognized bus {other}, must be one of: [virtio scsi sata usb]"),
        ),
    }
    if bool_at(disk, &["dedicatedIOThread"]) == Some(true) && bus != "virtio" {
        out.add(
            ErrorType::NotSupported,
            format!("{field}.domain.devices.disks[{i}]"),
            format!("IOThreads are not supported for disks on a {bus} bus"),
        );
    }
}

const VOLUME_SOURCES: [&str; 16] = [
    "persistentVolumeClaim",
    "sysprep",
    "cloudInitNoCloud",
    "cloudInitConfigDrive",
    "containerDisk",
    "ephemeral",
    "emptyDisk",
    "hostDisk",
    "dataVolume",
    "configMap",
    "secret",
    "downwardAPI",
    "serviceAccount",
    "downwardMetrics",
    "memoryDump",
    "containerPath",
];

/// The per-volume rules (KubeVirt's `validateVolumes`).
pub(super) fn volumes(spec: &Value, p: &str, out: &mut Causes) {
    let field = format!("{p}.volumes");
    let list = list_at(spec, &["volumes"]);
    let mut first_index = std::collections::HashMap::new();
    for (i, volume) in list.iter().enumerate() {
        let here = format!("{field}[{i}]");
        let name = str_at(volume, &["name"]);
        if let Some(j) = first_index.get(name) {
            out.add(
                ErrorType::Invalid,
                format!("{here}.name"),
                format!("{here} and {field}[{j}] must not have the same Name."),
            );
        } else {
            first_index.insert(name, i);
        }
        if has(volume, &["dataVolume"]) && str_at(volume, &["dataVolume", "name"]).is_empty() {
            out.add(
                ErrorType::Required,
                format!("{here}.name"),
                "DataVolume 'name' must be set",
            );
        }
        if VOLUME_SOURCES
            .iter()
            .filter(|&&s| has(volume, &[s]))
            .count()
            != 1
        {
            out.add(
                ErrorType::Invalid,
                &here,
                format!("{here} must have exactly one source type set"),
            );
        }
        for kind in ["cloudInitNoCloud", "cloudInitConfigDrive"] {
            if let Some(source) = get(volume, kind) {
                cloud_init(source, &format!("{here}.{kind}"), kind, out);
                break;
            }
        }
        if has(volume, &["downwardMetrics"]) {
            out.add(
                ErrorType::Invalid,
                &here,
                "downwardMetrics disks are not allowed: DownwardMetrics feature gate is not enabled.",
            );
        }
        if let Some(host_disk) = get(volume, "hostDisk") {
            host_disk_rules(host_disk, &here, out);
        }
        if let Some(sysprep) = get(volume, "sysprep") {
            sysprep_rules(sysprep, &format!("{here}.sysprep"), out);
        }
        for (kind, key) in [
            ("configMap", "name"),
            ("secret", "secretName"),
            ("serviceAccount", "serviceAccountName"),
        ] {
            if has(volume, &[kind]) && str_at(volume, &[kind, key]).is_empty() {
                let path = format!("{here}.{kind}.{key}");
                out.add(
                    ErrorType::Invalid,
                    &path,
                    format!("{path} is a required field"),
                );
            }
        }
    }
    for (kind, noun) in [
        ("serviceAccount", "serviceAccount volume"),
        ("downwardMetrics", "downwardMetric volume"),
        ("memoryDump", "memory dump volume"),
    ] {
        if list.iter().filter(|v| has(v, &[kind])).count() > 1 {
            out.add(
                ErrorType::Invalid,
                &field,
                format!("{field} must have max one {noun} set"),
            );
        }
    }
}

/// Inline cloud-init data is capped at 2048 bytes and each of user data and network data
/// comes from at most one place.
fn cloud_init(source: &Value, path: &str, kind: &str, out: &mut Causes) {
    let mut total_sources = 0;
    for (noun, inline, encoded, secret, secret_name) in [
        (
            "userdata",
            "userData",
            "userDataBase64",
            "secretRef",
            "UserDataSecretRef",
        ),
        (
            "networkdata",
            "networkData",
            "networkDataBase64",
            "networkDataSecretRef",
            "NetworkDataSecretRef",
        ),
    ] {
        let mut sources = 0;
        let mut length = 0;
        if !str_at(source, &[secret, "name"]).is_empty() {
            sources += 1;
        }
        let encoded_text = str_at(source, &[encoded]);
        if !encoded_text.is_empty() {
            sources += 1;
            match apimachinery::go_base64::decode(encoded_text) {
                Ok(bytes) => length = bytes.len(),
                Err(_) => {
                    // KubeVirt repeats the data source in this message.
                    let field = format!("{path}.{encoded}");
                    out.add(
                        ErrorType::Invalid,
                        &field,
                        format!("{field}.{kind}.{encoded} is not a valid base64 value."),
                    );
                }
            }
        }
        let inline_text = str_at(source, &[inline]);
        if !inline_text.is_empty() {
            sources += 1;
            length = inline_text.len();
        }
        if sources > 1 {
            let what = if noun == "userdata" {
                "userdatasource"
            } else {
                "networkdata source"
            };
            out.add(
                ErrorType::Invalid,
                path,
                format!("{path} must have only one {what} set."),
            );
        }
        if length > CLOUD_INIT_MAX_LEN {
            out.add(
                ErrorType::Invalid,
                path,
                format!(
                    "{path} {noun} exceeds {CLOUD_INIT_MAX_LEN} byte limit. Should use {secret_name} for larger data."
                ),
            );
        }
        total_sources += sources;
    }
    if total_sources == 0 {
        out.add(
            ErrorType::Invalid,
            path,
            format!("{path} must have at least one userdatasource or one networkdatasource set."),
        );
    }
}

/// Not in KubeVirt's admission (its launcher pod fails later with "Sysprep must have
/// Secret or ConfigMap reference set"): virtplane refuses a source it could never read.
fn sysprep_rules(sysprep: &Value, path: &str, out: &mut Causes) {
    let sources: Vec<&str> = ["configMap", "secret"]
        .into_iter()
        .filter(|s| has(sysprep, &[*s]))
        .collect();
    if sources.len() != 1 {
        out.add(
            ErrorType::Invalid,
            path,
            format!("{path} must have exactly one of configMap or secret set"),
        );
    }
    for source in sources {
        if str_at(sysprep, &[source, "name"]).is_empty() {
            let field = format!("{path}.{source}.name");
            out.add(
                ErrorType::Invalid,
                &field,
                format!("{field} is a required field"),
            );
        }
    }
}

fn host_disk_rules(host_disk: &Value, here: &str, out: &mut Causes) {
    if str_at(host_disk, &["path"]).is_empty() {
        let field = format!("{here}.hostDisk.path");
        out.add(
            ErrorType::NotFound,
            &field,
            format!("{field} is required for hostDisk volume"),
        );
    }
    let kind = str_at(host_disk, &["type"]);
    let type_path = format!("{here}.hostDisk.type");
    if kind != "Disk" && kind != "DiskOrCreate" {
        out.add(
            ErrorType::Invalid,
            &type_path,
            format!("{type_path} has invalid value '{kind}', allowed are 'Disk' or 'DiskOrCreate'"),
        );
    }
    if kind == "Disk" && !quantity(host_disk, &["capacity"]).is_zero() {
        let field = format!("{here}.hostDisk.capacity");
        out.add(
            ErrorType::Invalid,
            &field,
            format!("{field} is allowed to pass only with {type_path} equal to 'DiskOrCreate'"),
        );
    }
}

/// KubeVirt's `ValidatePath`: an absolute path without `.`/`..` parts or doubled slashes.
pub(super) fn absolute_path(field: &str, path: &str, out: &mut Causes) {
    if path == "/" {
        out.add(
            ErrorType::Invalid,
            field,
            format!("{field} must not point to root"),
        );
        return;
    }
    let provided = path.strip_suffix('/').unwrap_or(path);
    if clean_path(&format!("/{path}")) != provided {
        out.add(
            ErrorType::Invalid,
            field,
            format!("{field} must be an absolute path to a file without relative components"),
        );
    }
}

pub(super) fn container_disk_paths(spec: &Value, p: &str, out: &mut Causes) {
    for (i, volume) in list_at(spec, &["volumes"]).iter().enumerate() {
        let path = str_at(volume, &["containerDisk", "path"]);
        if !path.is_empty() {
            absolute_path(&format!("{p}.volumes[{i}].containerDisk"), path, out);
        }
    }
}

/// VMI only: every volume is used by a disk or filesystem (the mutator adds missing disks, so
/// this fires only for VMIs created without defaulting). KubeVirt reports the path as
/// `spec.domain.volumes[i].name`.
pub(super) fn volumes_have_disks(spec: &Value, p: &str, out: &mut Causes) {
    let mut used = HashSet::new();
    for key in ["disks", "filesystems"] {
        for device in list_at(spec, &["domain", "devices", key]) {
            used.insert(str_at(device, &["name"]));
        }
    }
    for (i, volume) in list_at(spec, &["volumes"]).iter().enumerate() {
        let name = str_at(volume, &["name"]);
        if has(volume, &["memoryDump"]) || used.contains(name) {
            continue;
        }
        let field = format!("{p}.domain.volumes[{i}].name");
        out.add(
            ErrorType::Invalid,
            &field,
            format!("{field} '{name}' not found."),
        );
    }
}

/// Each DataVolume template needs a name, exactly one of pvc and storage, a source (or an
/// external populator), and a volume of the template that uses it.
pub(super) fn data_volume_templates(vm_spec: &Value, template_spec: &Value, out: &mut Causes) {
    let volumes = list_at(template_spec, &["volumes"]);
    for (i, template) in list_at(vm_spec, &["dataVolumeTemplates"])
        .iter()
        .enumerate()
    {
        let here = format!("spec.dataVolumeTemplate[{i}]");
        let name = str_at(template, &["metadata", "name"]);
        if name.is_empty() {
            out.add(
                ErrorType::Required,
                format!("{here}.name"),
                format!("'name' field must not be empty for DataVolumeTemplate entry {here}.name."),
            );
            continue;
        }
        let dv = get(template, "spec").unwrap_or(&Value::Null);
        let (pvc, storage) = (get(dv, "pvc"), get(dv, "storage"));
        let target = match (pvc, storage) {
            (None, None) => {
                out.add(
                    ErrorType::Invalid,
                    format!("{here}.PVC.Storage"),
                    "Missing Data volume PVC or Storage",
                );
                continue;
            }
            (Some(_), Some(_)) => {
                out.add(
                    ErrorType::Invalid,
                    format!("{here}.PVC.Storage"),
                    "Duplicate storage definition, both target storage and target pvc defined",
                );
                continue;
            }
            (Some(t), None) | (None, Some(t)) => t,
        };
        let external = has(target, &["dataSourceRef"]) || has(target, &["dataSource"]);
        let sourced = has(dv, &["source"]) || has(dv, &["sourceRef"]);
        if external && sourced {
            out.add(
                ErrorType::Invalid,
                format!("{here}.source"),
                "External population is incompatible with Source and SourceRef",
            );
            continue;
        }
        if !external && !sourced {
            out.add(
                ErrorType::Invalid,
                format!("{here}.source.sourceRef"),
                "Data volume should have either Source, SourceRef, or be externally populated",
            );
            continue;
        }
        if let Some(source) = get(dv, "source") {
            let kinds = source
                .as_object()
                .map_or(0, |m| m.values().filter(|v| !v.is_null()).count());
            if kinds != 1 {
                let message = if kinds == 0 {
                    "Missing dataVolume valid source"
                } else {
                    "Multiple dataVolume sources"
                };
                out.add(ErrorType::Invalid, format!("{here}.source"), message);
                continue;
            }
        }
        let referenced = volumes.iter().any(|v| {
            at(v, &["persistentVolumeClaim"]).is_some_and(|c| str_at(c, &["claimName"]) == name)
                || at(v, &["dataVolume"]).is_some_and(|d| str_at(d, &["name"]) == name)
        });
        if !referenced {
            out.add(
                ErrorType::Required,
                &here,
                format!("DataVolumeTemplate entry {here} must be referenced in the VMI template's 'volumes' list"),
            );
        }
    }
}
