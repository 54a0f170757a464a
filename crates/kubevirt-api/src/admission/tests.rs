//! One accepted and one rejected example per rule, asserting KubeVirt's field path and text.

use std::path::PathBuf;

use apimachinery::field::{ErrorType, FieldError};
use serde_json::{json, Value};

use super::*;
use crate::defaults::{default_vm_on_create, default_vmi, DefaultNetworkBinding};

/// A small but complete VMI spec that every rule accepts.
fn base_spec() -> Value {
    json!({
        "domain": {
            "devices": {
                "disks": [
                    {"name": "root", "disk": {"bus": "virtio"}},
                    {"name": "cloudinit", "disk": {"bus": "virtio"}}
                ],
                "interfaces": [{"name": "default", "masquerade": {}}]
            },
            "resources": {"requests": {"memory": "128Mi"}}
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [
            {"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}},
            {"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config\n"}}
        ]
    })
}

/// Sets the value at a JSON pointer, creating objects on the way.
fn set(v: &mut Value, pointer: &str, x: Value) {
    let mut cur = v;
    let tokens: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, token) in tokens.iter().enumerate() {
        let last = i + 1 == tokens.len();
        cur = match cur {
            Value::Array(items) => {
                let idx: usize = token.parse().expect("array index");
                if idx == items.len() {
                    items.push(Value::Null);
                }
                &mut items[idx]
            }
            other => {
                if !other.is_object() {
                    *other = json!({});
                }
                other
                    .as_object_mut()
                    .unwrap()
                    .entry(token.to_string())
                    .or_insert(Value::Null)
            }
        };
        if last {
            *cur = x;
            return;
        }
    }
}

fn spec_with(edits: &[(&str, Value)]) -> Value {
    let mut spec = base_spec();
    for (pointer, value) in edits {
        set(&mut spec, pointer, value.clone());
    }
    spec
}

fn errors(edits: &[(&str, Value)]) -> Vec<FieldError> {
    validate_vmi_spec(&spec_with(edits), "spec")
}

#[track_caller]
fn expect(errs: &[FieldError], field: &str, message: &str) {
    assert!(
        errs.iter()
            .any(|e| e.field == field && e.detail == message && e.verbatim),
        "expected {field:?}: {message:?}\n got {:#?}",
        errs.iter()
            .map(|e| (&e.field, &e.detail))
            .collect::<Vec<_>>()
    );
}

#[track_caller]
fn expect_kind(errs: &[FieldError], field: &str, kind: ErrorType) {
    assert!(
        errs.iter().any(|e| e.field == field && e.kind == kind),
        "expected {kind:?} at {field}: {errs:#?}"
    );
}

#[track_caller]
fn clean(edits: &[(&str, Value)]) {
    let errs = errors(edits);
    assert!(errs.is_empty(), "unexpected errors: {errs:#?}");
}

fn vm(template_spec: Value) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": {"runStrategy": "Always", "template": {"metadata": {"labels": {"app": "vm1"}}, "spec": template_spec}}
    })
}

fn vmi(spec: Value) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi1", "namespace": "default"},
        "spec": spec
    })
}

// ---------------------------------------------------------------- VirtualMachine

#[test]
fn base_objects_are_accepted() {
    clean(&[]);
    let mut machine = vm(base_spec());
    default_vm_on_create(&mut machine);
    assert_eq!(validate_vm_create(&machine), Admission::default());
    let mut instance = vmi(base_spec());
    default_vmi(&mut instance, DefaultNetworkBinding::Bridge);
    assert_eq!(validate_vmi_create(&instance), Admission::default());
}

#[test]
fn rule_01_template_required() {
    let mut machine = vm(base_spec());
    machine["spec"].as_object_mut().unwrap().remove("template");
    let admission = validate_vm(&machine);
    expect(
        &admission.errors,
        "spec.template",
        "missing virtual machine template.",
    );
    assert_eq!(admission.errors[0].kind, ErrorType::Required);
    assert!(validate_vm(&vm(base_spec())).allowed());
}

#[test]
fn rules_02_to_04_run_strategy() {
    let mut both = vm(base_spec());
    both["spec"]["running"] = json!(true);
    expect(
        &validate_vm(&both).errors,
        "spec.running",
        "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead",
    );
    let mut neither = vm(base_spec());
    neither["spec"]
        .as_object_mut()
        .unwrap()
        .remove("runStrategy");
    expect(
        &validate_vm(&neither).errors,
        "spec.running",
        "RunStrategy must be specified",
    );
    let mut bad = vm(base_spec());
    bad["spec"]["runStrategy"] = json!("Sometimes");
    expect(
        &validate_vm(&bad).errors,
        "spec.runStrategy",
        "Invalid RunStrategy (Sometimes)",
    );
    bad["spec"]["runStrategy"] = json!("WaitAsReceiver");
    expect(
        &validate_vm(&bad).errors,
        "spec.runStrategy",
        "Invalid RunStrategy (WaitAsReceiver), DecentralizedLiveMigration feature gate is not enabled in kubevirt resource",
    );
    let mut running = neither.clone();
    running["spec"]["running"] = json!(false);
    let admission = validate_vm(&running);
    assert!(admission.allowed());
    assert_eq!(
        admission.warnings,
        ["spec.running is deprecated, please use spec.runStrategy instead."]
    );
    for strategy in ["Always", "Halted", "Manual", "RerunOnFailure", "Once"] {
        let mut ok = vm(base_spec());
        ok["spec"]["runStrategy"] = json!(strategy);
        assert!(validate_vm(&ok).allowed(), "{strategy}");
    }
}

#[test]
fn vm_rules_use_template_paths_and_defaults() {
    // A volume without a disk and a template without networks are fine: defaults fill them.
    let mut spec = base_spec();
    spec["domain"]["devices"] = json!({});
    spec.as_object_mut().unwrap().remove("networks");
    assert!(validate_vm(&vm(spec)).allowed());
    let mut spec = base_spec();
    spec["domain"]["devices"]["disks"][0]["bootOrder"] = json!(0);
    let errs = validate_vm(&vm(spec)).errors;
    expect(
        &errs,
        "spec.template.spec.domain.devices.disks[0].bootOrder",
        "spec.template.spec.domain.devices.disks[0] must have a boot order > 0, if supplied",
    );
    // A VM being deleted is always let through.
    let mut deleting = vm(json!({"domain": {"devices": {"disks": [{"name": "x"}]}}}));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert!(validate_vm(&deleting).allowed());
}

#[test]
fn rule_33_data_volume_templates() {
    let mut machine = vm(spec_with(&[(
        "/volumes/1",
        json!({"name": "cloudinit", "cloudInitNoCloud": {"userData": "x"}}),
    )]));
    let dv = |name: &str| json!({"metadata": {"name": name}, "spec": {"source": {"http": {"url": "http://x/y.img"}}, "storage": {}}});
    machine["spec"]["dataVolumeTemplates"] = json!([dv("data")]);
    expect(
        &validate_vm(&machine).errors,
        "spec.dataVolumeTemplate[0]",
        "DataVolumeTemplate entry spec.dataVolumeTemplate[0] must be referenced in the VMI template's 'volumes' list",
    );
    let mut referenced = machine.clone();
    let spec = &mut referenced["spec"]["template"]["spec"];
    spec["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "data", "dataVolume": {"name": "data"}}));
    spec["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "data"}));
    assert!(validate_vm(&referenced).allowed());

    let mut unnamed = machine.clone();
    unnamed["spec"]["dataVolumeTemplates"][0]["metadata"] = json!({});
    expect(
        &validate_vm(&unnamed).errors,
        "spec.dataVolumeTemplate[0].name",
        "'name' field must not be empty for DataVolumeTemplate entry spec.dataVolumeTemplate[0].name.",
    );
    let mut no_target = machine.clone();
    no_target["spec"]["dataVolumeTemplates"][0]["spec"] = json!({"source": {"blank": {}}});
    expect(
        &validate_vm(&no_target).errors,
        "spec.dataVolumeTemplate[0].PVC.Storage",
        "Missing Data volume PVC or Storage",
    );
    let mut no_source = machine.clone();
    no_source["spec"]["dataVolumeTemplates"][0]["spec"] = json!({"pvc": {}});
    expect(
        &validate_vm(&no_source).errors,
        "spec.dataVolumeTemplate[0].source.sourceRef",
        "Data volume should have either Source, SourceRef, or be externally populated",
    );
    let mut two_sources = machine;
    two_sources["spec"]["dataVolumeTemplates"][0]["spec"]["source"] =
        json!({"blank": {}, "http": {"url": "u"}});
    expect(
        &validate_vm(&two_sources).errors,
        "spec.dataVolumeTemplate[0].source",
        "Multiple dataVolume sources",
    );
}

#[test]
fn rule_55_sockets_beyond_max_sockets() {
    let errs = validate_vm(&vm(spec_with(&[(
        "/domain/cpu",
        json!({"sockets": 4, "maxSockets": 2}),
    )])))
    .errors;
    // Reported by the shared spec rules and again by the LiveUpdate check, as KubeVirt does.
    let message = "Number of sockets in CPU topology is greater than the maximum sockets allowed";
    assert_eq!(errs.iter().filter(|e| e.detail == message).count(), 2);
    expect(&errs, "spec.template.spec.domain.cpu.sockets", message);
    clean(&[("/domain/cpu", json!({"sockets": 2, "maxSockets": 2}))]);
}

#[test]
fn memory_hotplug_limits() {
    let with_guest = |guest: &str, max: &str| {
        vm(spec_with(&[(
            "/domain/memory",
            json!({"guest": guest, "maxGuest": max}),
        )]))
    };
    assert!(validate_vm(&with_guest("2Gi", "8Gi")).allowed());
    expect(
        &validate_vm(&with_guest("4Gi", "2Gi")).errors,
        "spec.template.spec.domain.memory.guest",
        "Guest memory is greater than the configured maxGuest memory",
    );
    expect(
        &validate_vm(&with_guest("512Mi", "2Gi")).errors,
        "spec.template.spec.domain.memory.guest",
        "Memory hotplug is only available for VMs with at least 1Gi of guest memory",
    );
    expect(
        &validate_vm(&with_guest("1025Mi", "4Gi")).errors,
        "spec.template.spec.domain.memory.guest",
        "Guest memory must be 2Mi aligned",
    );
}

#[test]
fn rule_65_reserved_labels() {
    let mut machine = vm(base_spec());
    machine["spec"]["template"]["metadata"]["labels"]["kubevirt.io/nodeName"] = json!("n1");
    let errs = validate_vm(&machine).errors;
    expect(
        &errs,
        "spec.template.metadata.labels",
        "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
    );
    assert_eq!(errs[0].kind, ErrorType::NotSupported);
    let mut instance = vmi(base_spec());
    instance["spec"]["architecture"] = json!("amd64");
    instance["metadata"]["labels"] =
        json!({"kubevirt.io/created-by": "x", "kubevirt.io/other": "ok"});
    expect(
        &validate_vmi_create(&instance).errors,
        "metadata.labels",
        "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
    );
    instance["metadata"]["labels"] = json!({"kubevirt.io/other": "ok"});
    assert!(validate_vmi_create(&instance).allowed());
}

#[test]
fn wrong_types_are_field_errors() {
    let mut machine = vm(base_spec());
    machine["spec"]["running"] = json!("yes");
    machine["spec"]["template"]["spec"]["domain"]["cpu"] = json!({"cores": "two"});
    let errs = validate_vm(&machine).errors;
    assert_eq!(errs.len(), 2, "{errs:#?}");
    expect_kind(&errs, "spec.running", ErrorType::TypeInvalid);
    expect_kind(
        &errs,
        "spec.template.spec.domain.cpu.cores",
        ErrorType::TypeInvalid,
    );
    let errs = validate_vmi_create(&vmi(json!({"domain": "big"}))).errors;
    expect_kind(&errs, "spec.domain", ErrorType::TypeInvalid);
    let errs = validate_vmi_create(
        &json!({"spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "lots"}}}}}),
    )
    .errors;
    assert_eq!(errs[0].field, "spec.domain.resources.requests.memory");
    assert!(validate_vm(&json!("not an object")).errors[0].field == "spec.template");
}

// ---------------------------------------------------------------- disks and volumes

#[test]
fn rules_05_06_duplicate_names() {
    let errs = errors(&[("/domain/devices/disks/1/name", json!("root"))]);
    expect(
        &errs,
        "spec.domain.devices.disks[1].name",
        "spec.domain.devices.disks[1] and spec.domain.devices.disks[0] must not have the same Name.",
    );
    let errs = errors(&[("/volumes/1/name", json!("root"))]);
    expect(
        &errs,
        "spec.volumes[1].name",
        "spec.volumes[1] and spec.volumes[0] must not have the same Name.",
    );
}

#[test]
fn rules_07_08_disks_need_volumes() {
    let errs = errors(&[("/domain/devices/disks/2", json!({"name": "data"}))]);
    expect(
        &errs,
        "spec.domain.devices.disks[2].name",
        "spec.domain.devices.disks[2].Name 'data' not found.",
    );
    let errs = errors(&[(
        "/domain/devices/disks/2",
        json!({"name": "iso", "cdrom": {"bus": "sata"}}),
    )]);
    expect(
        &errs,
        "spec.domain.devices.disks[2].name",
        "DeclarativeHotplugVolumes feature gate not enabled, cannot define an empty CD-ROM disk",
    );
}

#[test]
fn rule_09_vmi_volume_without_disk() {
    let mut instance = vmi(base_spec());
    instance["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "scratch", "emptyDisk": {"capacity": "1Gi"}}));
    expect(
        &validate_vmi_create(&instance).errors,
        "spec.domain.volumes[2].name",
        "spec.domain.volumes[2].name 'scratch' not found.",
    );
    default_vmi(&mut instance, DefaultNetworkBinding::Bridge);
    assert!(validate_vmi_create(&instance).allowed());
}

#[test]
fn rules_10_to_16_targets_and_buses() {
    let disk = |target: Value| errors(&[("/domain/devices/disks/0", target)]);
    expect(
        &disk(json!({"name": "root", "disk": {}, "cdrom": {}})),
        "spec.domain.devices.disks[0]",
        "spec.domain.devices.disks[0] can only have a single target type defined",
    );
    assert!(
        disk(json!({"name": "root", "disk": {"bus": "ide"}})).is_empty(),
        "virtplane attaches IDE disks"
    );
    expect(
        &disk(json!({"name": "root", "lun": {"bus": "floppy"}})),
        "spec.domain.devices.disks[0].lun.bus",
        "spec.domain.devices.disks[0] is set with an unrecognized bus floppy, must be one of: [virtio scsi sata usb]",
    );
    expect(
        &disk(json!({"name": "root", "cdrom": {"bus": "virtio"}})),
        "spec.domain.devices.disks[0].cdrom.bus",
        "Bus type virtio is invalid for CD-ROM device",
    );
    expect(
        &disk(json!({"name": "root", "disk": {"bus": "sata", "readonly": true}})),
        "spec.domain.devices.disks[0].disk.bus",
        "sata hard-disks do not support read-only.",
    );
    let errs = disk(json!({"name": "root", "disk": {"bus": "sata"}, "dedicatedIOThread": true}));
    expect(
        &errs,
        "spec.domain.devices.disks.domain.devices.disks[0]",
        "IOThreads are not supported for disks on a sata bus",
    );
    expect_kind(
        &errs,
        "spec.domain.devices.disks.domain.devices.disks[0]",
        ErrorType::NotSupported,
    );
    let errs = disk(json!({"name": "root", "disk": {"bus": "sata", "pciAddress": "0000:00:10"}}));
    expect(
        &errs,
        "spec.domain.devices.disks.domain.devices.disks.disk[0].pciAddress",
        "disk spec.domain.devices.disks.domain.devices.disks.disk[0].name - setting a PCI address is only possible with bus type virtio.",
    );
    expect(
        &errs,
        "spec.domain.devices.disks.domain.devices.disks.disk[0].pciAddress",
        "disk spec.domain.devices.disks.domain.devices.disks.disk[0].name has malformed PCI address (0000:00:10).",
    );
    for ok in [
        json!({"name": "root", "disk": {"bus": "scsi", "readonly": true}}),
        json!({"name": "root", "cdrom": {"bus": "sata", "readonly": true}}),
        json!({"name": "root", "disk": {"bus": "virtio", "pciAddress": "0000:00:10.0"}, "dedicatedIOThread": true}),
        json!({"name": "root", "disk": {"bus": "usb"}}),
        json!({"name": "root"}),
    ] {
        assert!(disk(ok.clone()).is_empty(), "{ok}");
    }
}

#[test]
fn rules_17_to_19_boot_order() {
    expect(
        &errors(&[("/domain/devices/disks/0/bootOrder", json!(0))]),
        "spec.domain.devices.disks[0].bootOrder",
        "spec.domain.devices.disks[0] must have a boot order > 0, if supplied",
    );
    let errs = errors(&[
        ("/domain/devices/disks/0/bootOrder", json!(1)),
        ("/domain/devices/disks/1/bootOrder", json!(1)),
        ("/domain/devices/interfaces/0/bootOrder", json!(1)),
    ]);
    expect(
        &errs,
        "spec.domain.devices.disks[1].bootOrder",
        "Boot order for spec.domain.devices.disks[1].bootOrder already set for a different device.",
    );
    expect(
        &errs,
        "spec.domain.devices.interfaces[0].bootOrder",
        "Boot order for spec.domain.devices.interfaces[0].bootOrder already set for a different device.",
    );
    // KubeVirt reports an interface boot order below 1 at the spec path itself.
    expect(
        &errors(&[("/domain/devices/interfaces/0/bootOrder", json!(0))]),
        "spec[0].bootOrder",
        "spec[0] must have a boot order > 0, if supplied",
    );
    clean(&[
        ("/domain/devices/disks/0/bootOrder", json!(1)),
        ("/domain/devices/disks/1/bootOrder", json!(2)),
        ("/domain/devices/interfaces/0/bootOrder", json!(3)),
    ]);
}

#[test]
fn rules_20_to_24_disk_fields() {
    expect(
        &errors(&[("/domain/devices/disks/0/serial", json!("bad serial!"))]),
        "spec.domain.devices.disks[0].serial",
        "spec.domain.devices.disks[0] must be made up of the following characters [A-Za-z0-9_.+-], if specified",
    );
    expect(
        &errors(&[("/domain/devices/disks/0/serial", json!("a".repeat(257)))]),
        "spec.domain.devices.disks[0].serial",
        "spec.domain.devices.disks[0] must be less than or equal to 256 in length, if specified",
    );
    expect(
        &errors(&[("/domain/devices/disks/0/cache", json!("unsafe"))]),
        "spec.domain.devices.disks[0].cache",
        "spec.domain.devices.disks[0].cache has invalid value unsafe",
    );
    let errs = errors(&[("/domain/devices/disks/0/io", json!("io_uring"))]);
    expect(
        &errs,
        "spec.domain.devices.disks.domain.devices.disks[0].io",
        "Disk IO mode for spec.domain.devices.disks is not supported. Supported modes are: native, threads.",
    );
    expect(
        &errors(&[("/domain/devices/disks/0/errorPolicy", json!("panic"))]),
        "spec.domain.devices.disks[0].errorPolicy",
        "spec.domain.devices.disks[0].errorPolicy has invalid value \"panic\"",
    );
    let errs = errors(&[
        ("/domain/devices/disks/0/name", json!("Root_Disk")),
        ("/volumes/0/name", json!("Root_Disk")),
    ]);
    expect(
        &errs,
        "spec.domain.devices.disks.domain.devices.disks[0].name",
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    );
    clean(&[
        ("/domain/devices/disks/0/serial", json!("SN-1.2+x_y")),
        ("/domain/devices/disks/0/cache", json!("writeback")),
        ("/domain/devices/disks/0/io", json!("threads")),
        ("/domain/devices/disks/0/errorPolicy", json!("report")),
    ]);
}

#[test]
fn rules_25_26_sources() {
    expect(
        &errors(&[("/domain/devices/disks/0", json!({"name": "root", "lun": {}}))]),
        "spec.domain.devices.disks[0].lun",
        "spec.domain.devices.disks[0].lun can only be mapped to a DataVolume or PersistentVolumeClaim volume.",
    );
    clean(&[
        (
            "/domain/devices/disks/0",
            json!({"name": "root", "lun": {}}),
        ),
        (
            "/volumes/0",
            json!({"name": "root", "persistentVolumeClaim": {"claimName": "pvc"}}),
        ),
    ]);
    let msg = "spec.volumes[0] must have exactly one source type set";
    expect(
        &errors(&[("/volumes/0", json!({"name": "root"}))]),
        "spec.volumes[0]",
        msg,
    );
    expect(
        &errors(&[("/volumes/0/emptyDisk", json!({"capacity": "1Gi"}))]),
        "spec.volumes[0]",
        msg,
    );
}

#[test]
fn rules_27_28_cloud_init() {
    let path = "spec.volumes[1].cloudInitNoCloud";
    expect(
        &errors(&[("/volumes/1/cloudInitNoCloud/userData", json!("x".repeat(2049)))]),
        path,
        "spec.volumes[1].cloudInitNoCloud userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data.",
    );
    expect(
        &errors(&[("/volumes/1/cloudInitNoCloud/networkData", json!("x".repeat(2049)))]),
        path,
        "spec.volumes[1].cloudInitNoCloud networkdata exceeds 2048 byte limit. Should use NetworkDataSecretRef for larger data.",
    );
    expect(
        &errors(&[(
            "/volumes/1/cloudInitNoCloud/secretRef",
            json!({"name": "s"}),
        )]),
        path,
        "spec.volumes[1].cloudInitNoCloud must have only one userdatasource set.",
    );
    expect(
        &errors(&[("/volumes/1/cloudInitNoCloud", json!({}))]),
        path,
        "spec.volumes[1].cloudInitNoCloud must have at least one userdatasource or one networkdatasource set.",
    );
    expect(
        &errors(&[("/volumes/1/cloudInitConfigDrive", json!({"userDataBase64": "not base64"})), ("/volumes/1/cloudInitNoCloud", Value::Null)]),
        "spec.volumes[1].cloudInitConfigDrive.userDataBase64",
        "spec.volumes[1].cloudInitConfigDrive.userDataBase64.cloudInitConfigDrive.userDataBase64 is not a valid base64 value.",
    );
    clean(&[(
        "/volumes/1/cloudInitNoCloud",
        json!({"userDataBase64": "I2Nsb3VkLWNv\nbmZpZwo=", "networkData": "version: 2"}),
    )]);
    clean(&[(
        "/volumes/1/cloudInitNoCloud",
        json!({"secretRef": {"name": "s"}}),
    )]);
}

#[test]
fn rule_29_host_disk() {
    let host = |disk: Value| errors(&[("/volumes/0", json!({"name": "root", "hostDisk": disk}))]);
    expect(
        &host(json!({"type": "Disk"})),
        "spec.volumes[0].hostDisk.path",
        "spec.volumes[0].hostDisk.path is required for hostDisk volume",
    );
    expect_kind(
        &host(json!({"type": "Disk"})),
        "spec.volumes[0].hostDisk.path",
        ErrorType::NotFound,
    );
    expect(
        &host(json!({"path": "/d/x.img", "type": "File"})),
        "spec.volumes[0].hostDisk.type",
        "spec.volumes[0].hostDisk.type has invalid value 'File', allowed are 'Disk' or 'DiskOrCreate'",
    );
    expect(
        &host(json!({"path": "/d/x.img", "type": "Disk", "capacity": "1Gi"})),
        "spec.volumes[0].hostDisk.capacity",
        "spec.volumes[0].hostDisk.capacity is allowed to pass only with spec.volumes[0].hostDisk.type equal to 'DiskOrCreate'",
    );
    assert!(
        host(json!({"path": "/d/x.img", "type": "DiskOrCreate", "capacity": "1Gi"})).is_empty()
    );
}

#[test]
fn host_disk_paths_stay_in_allowed_dirs() {
    let dirs = [PathBuf::from("/var/lib/vp-disks/")];
    assert_eq!(
        validate_host_disk_path("/var/lib/vp-disks/a/b.img", &dirs),
        None
    );
    let outside = validate_host_disk_path("/etc/shadow", &dirs).unwrap();
    assert_eq!(
        outside,
        "hostDisk path \"/etc/shadow\" is not inside an allowed host disk directory (/var/lib/vp-disks)"
    );
    assert!(validate_host_disk_path("/var/lib/vp-disks/../x", &dirs)
        .unwrap()
        .contains("'..'"));
    assert!(validate_host_disk_path("rel.img", &dirs)
        .unwrap()
        .contains("absolute"));
    assert!(validate_host_disk_path("/var/lib/vp-disks", &dirs).is_some());
    assert!(validate_host_disk_path("/var/lib/vp-disks-evil/x", &dirs).is_some());
    assert!(validate_host_disk_path("/var/lib/vp-disks/x", &[])
        .unwrap()
        .contains("--host-disk-dir"));
    let spec = spec_with(&[(
        "/volumes/0",
        json!({"name": "root", "hostDisk": {"path": "/etc/x", "type": "Disk"}}),
    )]);
    let errs = validate_host_disks(&spec, "spec.template.spec", &dirs);
    expect_kind(
        &errs,
        "spec.template.spec.volumes[0].hostDisk.path",
        ErrorType::Forbidden,
    );
    assert!(validate_host_disks(&base_spec(), "spec", &dirs).is_empty());
}

#[test]
fn sysprep_needs_one_named_source() {
    clean(&[(
        "/volumes/1",
        json!({"name": "cloudinit", "sysprep": {"configMap": {"name": "unattend"}}}),
    )]);
    clean(&[(
        "/volumes/1",
        json!({"name": "cloudinit", "sysprep": {"secret": {"name": "unattend"}}}),
    )]);
    let message = "spec.volumes[1].sysprep must have exactly one of configMap or secret set";
    expect(
        &errors(&[("/volumes/1", json!({"name": "cloudinit", "sysprep": {}}))]),
        "spec.volumes[1].sysprep",
        message,
    );
    expect(
        &errors(&[(
            "/volumes/1",
            json!({"name": "cloudinit", "sysprep": {"configMap": {"name": "a"}, "secret": {"name": "b"}}}),
        )]),
        "spec.volumes[1].sysprep",
        message,
    );
    expect(
        &errors(&[(
            "/volumes/1",
            json!({"name": "cloudinit", "sysprep": {"configMap": {}}}),
        )]),
        "spec.volumes[1].sysprep.configMap.name",
        "spec.volumes[1].sysprep.configMap.name is a required field",
    );
}

#[test]
fn rules_30_to_32_volume_references() {
    expect(
        &errors(&[("/volumes/0", json!({"name": "root", "configMap": {}}))]),
        "spec.volumes[0].configMap.name",
        "spec.volumes[0].configMap.name is a required field",
    );
    expect(
        &errors(&[("/volumes/0", json!({"name": "root", "secret": {}}))]),
        "spec.volumes[0].secret.secretName",
        "spec.volumes[0].secret.secretName is a required field",
    );
    let errs = errors(&[
        (
            "/volumes/0",
            json!({"name": "root", "serviceAccount": {"serviceAccountName": "a"}}),
        ),
        ("/volumes/2", json!({"name": "sa", "serviceAccount": {}})),
        ("/domain/devices/disks/2", json!({"name": "sa"})),
    ]);
    expect(
        &errs,
        "spec.volumes[2].serviceAccount.serviceAccountName",
        "spec.volumes[2].serviceAccount.serviceAccountName is a required field",
    );
    expect(
        &errs,
        "spec.volumes",
        "spec.volumes must have max one serviceAccount volume set",
    );
    expect(
        &errors(&[(
            "/volumes/0",
            json!({"name": "root", "dataVolume": {"name": ""}}),
        )]),
        "spec.volumes[0].name",
        "DataVolume 'name' must be set",
    );
    expect(
        &errors(&[("/volumes/0", json!({"name": "root", "downwardMetrics": {}}))]),
        "spec.volumes[0]",
        "downwardMetrics disks are not allowed: DownwardMetrics feature gate is not enabled.",
    );
    clean(&[(
        "/volumes/0",
        json!({"name": "root", "configMap": {"name": "cm"}}),
    )]);
}

#[test]
fn container_disk_path_must_be_absolute() {
    expect(
        &errors(&[("/volumes/0/containerDisk/path", json!("disk/../x.img"))]),
        "spec.volumes[0].containerDisk",
        "spec.volumes[0].containerDisk must be an absolute path to a file without relative components",
    );
    expect(
        &errors(&[("/volumes/0/containerDisk/path", json!("/"))]),
        "spec.volumes[0].containerDisk",
        "spec.volumes[0].containerDisk must not point to root",
    );
    clean(&[("/volumes/0/containerDisk/path", json!("/disk/image.qcow2"))]);
}

// ---------------------------------------------------------------- networks and interfaces

#[test]
fn rules_34_to_39_network_wiring() {
    let errs = errors(&[(
        "/domain/devices/interfaces/1",
        json!({"name": "extra", "bridge": {}}),
    )]);
    expect(
        &errs,
        "spec.domain.devices.interfaces[1].name",
        "spec.domain.devices.interfaces[1].name 'extra' not found.",
    );
    let errs = errors(&[(
        "/networks/1",
        json!({"name": "extra", "multus": {"networkName": "br"}}),
    )]);
    expect(
        &errs,
        "spec.networks[1].name",
        "spec.networks[1].name 'extra' not found.",
    );
    expect_kind(&errs, "spec.networks[1].name", ErrorType::Required);
    let errs = errors(&[(
        "/networks/1",
        json!({"name": "default", "multus": {"networkName": "br"}}),
    )]);
    expect(
        &errs,
        "spec.networks[1].name",
        "Network with name \"default\" already exists, every network must have a unique name",
    );
    let errs = errors(&[(
        "/domain/devices/interfaces/1",
        json!({"name": "default", "masquerade": {}}),
    )]);
    expect(
        &errs,
        "spec.domain.devices.interfaces[1].name",
        "Only one interface can be connected to one specific network",
    );
    let errs = errors(&[
        ("/networks/1", json!({"name": "second", "pod": {}})),
        (
            "/domain/devices/interfaces/1",
            json!({"name": "second", "masquerade": {}}),
        ),
    ]);
    expect(
        &errs,
        "spec.interfaces",
        "more than one interface is connected to a pod network in spec.interfaces",
    );
    expect(
        &errors(&[("/networks/0", json!({"name": "default"}))]),
        "spec.networks[0]",
        "should have a network type",
    );
    expect(
        &errors(&[("/networks/0/multus", json!({"networkName": "x"}))]),
        "spec.networks[0]",
        "should have only one network type",
    );
    clean(&[
        (
            "/networks/1",
            json!({"name": "extra", "multus": {"networkName": "br"}}),
        ),
        (
            "/domain/devices/interfaces/1",
            json!({"name": "extra", "bridge": {}}),
        ),
    ]);
}

#[test]
fn rules_40_to_43_interface_bindings() {
    let errs = errors(&[
        ("/domain/devices/interfaces/0/name", json!("eth 0")),
        ("/networks/0/name", json!("eth 0")),
    ]);
    expect(
        &errs,
        "spec.domain.devices.interfaces[0].name",
        "Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)",
    );
    expect(
        &errors(&[("/domain/devices/interfaces/0/bridge", json!({}))]),
        "spec.domain.devices.interfaces[0]",
        "logical default interface must have exactly one binding method or binding plugin",
    );
    let errs = errors(&[
        (
            "/networks/1",
            json!({"name": "extra", "multus": {"networkName": "br"}}),
        ),
        (
            "/domain/devices/interfaces/1",
            json!({"name": "extra", "masquerade": {}}),
        ),
    ]);
    expect(
        &errs,
        "spec.domain.devices.interfaces[1].name",
        "Masquerade interface only implemented with pod network",
    );
    expect(
        &errors(&[(
            "/domain/devices/interfaces/0/macAddress",
            json!("02:00:00:00:00:00"),
        )]),
        "spec.domain.devices.interfaces[0].macAddress",
        "The requested MAC address is reserved for the in-pod bridge. Please choose another one.",
    );
    clean(&[(
        "/domain/devices/interfaces/0/macAddress",
        json!("02:00:00:00:00:01"),
    )]);
    clean(&[(
        "/domain/devices/interfaces/0",
        json!({"name": "default", "binding": {"name": "plugin"}}),
    )]);
}

#[test]
fn rule_45_discontinued_bindings_on_create() {
    let mut spec = base_spec();
    spec["domain"]["devices"]["interfaces"][0] = json!({"name": "default", "slirp": {}});
    let errs = validate_vm_create(&vm(spec.clone())).errors;
    // KubeVirt validates the template with the VM's `spec` as its path here.
    expect(
        &errs,
        "spec.domain.devices.interfaces[0].slirp",
        "Slirp interface support has been discontinued since v1.3",
    );
    assert_eq!(errs.len(), 1);
    assert!(!validate_vm(&vm(spec.clone()))
        .errors
        .iter()
        .any(|e| e.field.ends_with("slirp")));
    expect(
        &validate_vmi_create(&vmi(spec)).errors,
        "spec.domain.devices.interfaces[0].slirp",
        "Slirp interface support has been discontinued since v1.3",
    );
}

#[test]
fn rules_46_47_model_and_mac() {
    let errs = errors(&[("/domain/devices/interfaces/0/model", json!("virtio-net"))]);
    expect(
        &errs,
        "spec.domain.devices.interfaces[0].model",
        "interface spec.domain.devices.interfaces[0].name uses model virtio-net that is not supported.",
    );
    expect_kind(
        &errs,
        "spec.domain.devices.interfaces[0].model",
        ErrorType::NotSupported,
    );
    expect(
        &errors(&[(
            "/domain/devices/interfaces/0/macAddress",
            json!("de:ad:be:ef"),
        )]),
        "spec.domain.devices.interfaces[0].macAddress",
        "interface spec.domain.devices.interfaces[0].name has malformed MAC address (de:ad:be:ef).",
    );
    expect(
        &errors(&[(
            "/domain/devices/interfaces/0/macAddress",
            json!("02:00:5e:10:00:00:00:01"),
        )]),
        "spec.domain.devices.interfaces[0].macAddress",
        "interface spec.domain.devices.interfaces[0].name has too long MAC address (02:00:5e:10:00:00:00:01).",
    );
    expect(
        &errors(&[(
            "/domain/devices/interfaces/0/pciAddress",
            json!("0000:00:02"),
        )]),
        "spec.domain.devices.interfaces[0].pciAddress",
        "interface spec.domain.devices.interfaces[0].name has malformed PCI address (0000:00:02).",
    );
    clean(&[
        ("/domain/devices/interfaces/0/model", json!("e1000e")),
        (
            "/domain/devices/interfaces/0/macAddress",
            json!("DE-AD-00-00-BE-AF"),
        ),
        (
            "/domain/devices/interfaces/0/pciAddress",
            json!("0000:00:02.0"),
        ),
    ]);
}

#[test]
fn rule_48_ports() {
    let ports = |list: Value| errors(&[("/domain/devices/interfaces/0/ports", list)]);
    let errs = ports(
        json!([{"port": 0}, {"port": 70000, "protocol": "SCTP"}, {"name": "Web", "port": 80}, {"name": "http", "port": 8080}, {"name": "http", "port": 8081}]),
    );
    let path = "spec.domain.devices.interfaces[0].ports";
    expect(
        &errs,
        &format!("{path}[0].port"),
        "Port field is mandatory.",
    );
    expect_kind(&errs, &format!("{path}[0].port"), ErrorType::Required);
    expect(
        &errs,
        &format!("{path}[1].port"),
        "Port field must be in range 0 < x < 65536.",
    );
    expect(
        &errs,
        &format!("{path}[1].protocol"),
        "Unknown protocol, only TCP or UDP allowed",
    );
    expect(
        &errs,
        &format!("{path}[2].name"),
        "Invalid name of the port: Web",
    );
    expect(
        &errs,
        &format!("{path}[4].name"),
        "Duplicate name of the port: http",
    );
    assert!(
        ports(json!([{"name": "ssh", "port": 22}, {"port": 53, "protocol": "UDP"}])).is_empty()
    );
}

// ---------------------------------------------------------------- compute

#[test]
fn rules_49_50_memory_requests() {
    let path = "spec.domain.resources.requests.memory";
    expect(
        &errors(&[("/domain/resources/requests/memory", json!("-1Gi"))]),
        path,
        "spec.domain.resources.requests.memory '-1Gi': must be greater than or equal to 0.",
    );
    expect(
        &errors(&[("/domain/resources/requests/memory", json!("512Ki"))]),
        path,
        "spec.domain.resources.requests.memory '512Ki': must be greater than or equal to 1M.",
    );
    expect(
        &errors(&[("/domain/resources/limits/memory", json!("64Mi"))]),
        path,
        "spec.domain.resources.requests.memory '128Mi' is greater than spec.domain.resources.limits.memory '64Mi'",
    );
    expect(
        &errors(&[("/domain/resources/limits/memory", json!("-1"))]),
        "spec.domain.resources.limits.memory",
        "spec.domain.resources.limits.memory '-1': must be greater than or equal to 0.",
    );
    clean(&[("/domain/resources/limits/memory", json!("128Mi"))]);
}

#[test]
fn rule_52_hugepages() {
    let req = "spec.domain.resources.requests.memory";
    expect(
        &errors(&[("/domain/memory/hugepages/pageSize", json!("1Gi"))]),
        req,
        "spec.domain.resources.requests.memory '128Mi' must be equal to or larger than page size spec.domain.memory.hugepages.pageSize '1Gi'",
    );
    expect(
        &errors(&[("/domain/memory/hugepages/pageSize", json!("3Mi"))]),
        req,
        "spec.domain.resources.requests.memory '128Mi' is not a multiple of the page size spec.domain.memory.hugepages.pageSize '3Mi'",
    );
    expect(
        &errors(&[("/domain/memory/hugepages/pageSize", json!("big"))]),
        "spec.domain.memory.hugepages.pageSize",
        "spec.domain.memory.hugepages.pageSize 'big': quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    );
    // A zero page size must not divide by zero.
    assert!(errors(&[("/domain/memory/hugepages/pageSize", json!("0"))]).is_empty());
    clean(&[("/domain/memory/hugepages/pageSize", json!("2Mi"))]);
}

#[test]
fn rule_53_vmi_needs_memory() {
    let mut spec = base_spec();
    spec["domain"]["resources"] = json!({});
    let mut instance = vmi(spec.clone());
    default_vmi(&mut instance, DefaultNetworkBinding::Bridge);
    let errs = validate_vmi_create(&instance).errors;
    expect(
        &errs,
        "",
        "no memory requested, at least one of 'spec.domain.memory.guest', 'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' must be set",
    );
    spec["domain"]["memory"] = json!({"guest": "1Gi"});
    let mut instance = vmi(spec);
    default_vmi(&mut instance, DefaultNetworkBinding::Bridge);
    assert!(validate_vmi_create(&instance).allowed());
}

#[test]
fn rule_54_cpu_requests() {
    expect(
        &errors(&[("/domain/resources/requests/cpu", json!("-100m"))]),
        "spec.domain.resources.requests.cpu",
        "spec.domain.resources.requests.cpu '-100m': must be greater than or equal to 0.",
    );
    expect(
        &errors(&[("/domain/resources/limits/cpu", json!("-1"))]),
        "spec.domain.resources.limits.cpu",
        "spec.domain.resources.limits.cpu '-1': must be greater than or equal to 0.",
    );
    expect(
        &errors(&[
            ("/domain/resources/requests/cpu", json!(2)),
            ("/domain/resources/limits/cpu", json!("1500m")),
        ]),
        "spec.domain.resources.requests.cpu",
        "spec.domain.resources.requests.cpu '2' is greater than spec.domain.resources.limits.cpu '1500m'",
    );
    clean(&[
        ("/domain/resources/requests/cpu", json!("500m")),
        ("/domain/resources/limits/cpu", json!(1)),
    ]);
}

#[test]
fn dedicated_cpu_placement() {
    let errs = errors(&[
        ("/domain/cpu/dedicatedCpuPlacement", json!(true)),
        ("/domain/resources/requests/cpu", json!("1")),
        ("/domain/resources/limits/cpu", json!("2")),
    ]);
    expect(
        &errs,
        "spec.domain.cpu.dedicatedCpuPlacement",
        "spec.domain.resources.requests.cpu or spec.domain.resources.limits.cpu must be equal when DedicatedCPUPlacement is true ",
    );
    expect(
        &errors(&[
            ("/domain/cpu/dedicatedCpuPlacement", json!(true)),
            ("/domain/resources/requests/cpu", json!("1500m")),
        ]),
        "spec.domain.resources.requests.cpu",
        "provided resources CPU requests must be an interger",
    );
    expect(
        &errors(&[("/domain/cpu/isolateEmulatorThread", json!(true))]),
        "spec.domain.cpu.isolateEmulatorThread",
        "IsolateEmulatorThread should be only set in combination with DedicatedCPUPlacement",
    );
    clean(&[
        (
            "/domain/cpu",
            json!({"cores": 2, "dedicatedCpuPlacement": true, "isolateEmulatorThread": true}),
        ),
        ("/domain/resources/requests/cpu", json!(2)),
        ("/domain/resources/limits/cpu", json!(2)),
    ]);
}

#[test]
fn cpu_feature_policies() {
    let errs = errors(&[(
        "/domain/cpu/features",
        json!([{"name": "vmx", "policy": "maybe"}]),
    )]);
    expect(
        &errs,
        "spec.domain.cpu.features[0].policy",
        "CPU feature vmx uses policy maybe that is not supported.",
    );
    clean(&[(
        "/domain/cpu/features",
        json!([{"name": "vmx", "policy": "require"}, {"name": "pcid"}]),
    )]);
}

#[test]
fn rule_56_machine_types() {
    expect(
        &errors(&[("/domain/machine/type", json!("microvm"))]),
        "spec.domain.machine.type",
        "spec.domain.machine.type is not supported: microvm (allowed values: [q35* pc-q35* pc pc-i440fx*])",
    );
    for ok in ["q35", "pc-q35-rhel9.4.0", "pc", "pc-i440fx-8.2"] {
        clean(&[("/domain/machine/type", json!(ok))]);
    }
    // The globs match these too; they would set QEMU machine properties.
    for bad in ["q35,memory-backend=x", "pc-q35 -device x", "q35\n"] {
        expect(
            &errors(&[("/domain/machine/type", json!(bad))]),
            "spec.domain.machine.type",
            &format!("spec.domain.machine.type is not supported: {bad} (allowed values: [q35* pc-q35* pc pc-i440fx*])"),
        );
    }
}

#[test]
fn rules_57_58_firmware() {
    expect(
        &errors(&[(
            "/domain/firmware/bootloader",
            json!({"bios": {}, "efi": {"secureBoot": false}}),
        )]),
        "spec.domain.firmware.bootloader",
        "spec.domain.firmware.bootloader has both EFI and BIOS configured, but they are mutually exclusive.",
    );
    expect(
        &errors(&[("/domain/firmware/bootloader", json!({"efi": {}}))]),
        "spec.domain",
        "spec.domain has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled.",
    );
    clean(&[
        ("/domain/firmware/bootloader", json!({"efi": {}})),
        ("/domain/features/smm", json!({})),
    ]);
    clean(&[(
        "/domain/firmware/bootloader",
        json!({"efi": {"secureBoot": false}}),
    )]);
}

#[test]
fn kernel_boot() {
    expect(
        &errors(&[(
            "/domain/firmware/kernelBoot",
            json!({"kernelArgs": "console=ttyS0"}),
        )]),
        "spec.domain.firmware.kernelBoot.kernelArgs",
        "kernel arguments cannot be provided without an external kernel",
    );
    let errs = errors(&[(
        "/domain/firmware/kernelBoot",
        json!({"container": {"image": "", "kernelPath": "boot/vmlinuz"}}),
    )]);
    expect(
        &errs,
        "spec.domain.firmware.kernelBoot.container.image",
        "spec.domain.firmware.kernelBoot.container must be defined with an image",
    );
    expect(
        &errs,
        "spec.domain.firmware.kernelBoot.container.kernelPath",
        "spec.domain.firmware.kernelBoot.container.kernelPath must be an absolute path to a file without relative components",
    );
    clean(&[(
        "/domain/firmware/kernelBoot",
        json!({"kernelArgs": "console=ttyS0", "container": {"image": "k:1", "kernelPath": "/boot/vmlinuz"}}),
    )]);
}

#[test]
fn rule_59_hostname_and_subdomain() {
    expect(
        &errors(&[("/hostname", json!("my.host"))]),
        "spec.hostname",
        "spec.hostname does not conform to the kubernetes DNS_LABEL rules : must not contain dots",
    );
    let errs = errors(&[("/subdomain", json!("Sub_Domain"))]);
    assert!(errs[0].detail.starts_with(
        "spec.subdomain does not conform to the kubernetes DNS_SUBDOMAIN rules : a lowercase RFC 1123 subdomain"
    ));
    clean(&[
        ("/hostname", json!("my-host")),
        ("/subdomain", json!("svc.group")),
    ]);
}

#[test]
fn rule_60_probes() {
    expect(
        &errors(&[(
            "/readinessProbe",
            json!({"httpGet": {"port": 80}, "tcpSocket": {"port": 80}}),
        )]),
        "spec.readinessProbe",
        "spec.readinessProbe must have exactly one probe type set",
    );
    let errs = errors(&[("/livenessProbe", json!({"periodSeconds": 5}))]);
    expect(
        &errs,
        "spec.livenessProbe",
        "either spec.livenessProbe.tcpSocket, spec.livenessProbe.exec or spec.livenessProbe.httpGet must be set if a spec.livenessProbe is specified",
    );
    expect_kind(&errs, "spec.livenessProbe", ErrorType::Required);
    let errs = errors(&[
        ("/readinessProbe", json!({"tcpSocket": {"port": 22}})),
        (
            "/networks/0",
            json!({"name": "default", "multus": {"networkName": "br"}}),
        ),
        (
            "/domain/devices/interfaces/0",
            json!({"name": "default", "bridge": {}}),
        ),
    ]);
    expect(
        &errs,
        "spec.readinessProbe.tcpSocket",
        "spec.readinessProbe.tcpSocket is only allowed if the Pod Network is attached",
    );
    clean(&[
        ("/readinessProbe", json!({"guestAgentPing": {}})),
        ("/livenessProbe", json!({"httpGet": {"port": 80}})),
    ]);
}

#[test]
fn rules_61_62_strategies() {
    expect(
        &errors(&[("/startStrategy", json!("Running"))]),
        "spec.startStrategy",
        "spec.startStrategy is set with an unrecognized option: Running",
    );
    expect(
        &errors(&[("/startStrategy", json!("Paused")), ("/livenessProbe", json!({"exec": {"command": ["true"]}}))]),
        "spec.startStrategy",
        "either spec.startStrategy or spec.livenessProbe should be provided.Pausing VMI with LivenessProbe is not supported",
    );
    expect(
        &errors(&[("/evictionStrategy", json!("Shrug"))]),
        "spec.evictionStrategy",
        "spec.evictionStrategy is set with an unrecognized option: Shrug",
    );
    clean(&[
        ("/startStrategy", json!("Paused")),
        ("/evictionStrategy", json!("LiveMigrate")),
    ]);
}

#[test]
fn rule_63_inputs() {
    let errs = errors(&[(
        "/domain/devices/inputs",
        json!([{"name": "kbd", "type": "keyboard", "bus": "ps2"}]),
    )]);
    expect(
        &errs,
        "spec.domain.devices.inputs[0].bus",
        "Input device can have only virtio or usb bus.",
    );
    expect(
        &errs,
        "spec.domain.devices.inputs[0].type",
        "Input device can have only tablet type.",
    );
    clean(&[(
        "/domain/devices/inputs",
        json!([{"name": "tablet", "type": "tablet", "bus": "virtio"}]),
    )]);
}

#[test]
fn rules_64_66_architecture() {
    let mut spec = base_spec();
    spec["architecture"] = json!("riscv64");
    expect(
        &validate_vmi_create(&vmi(spec.clone())).errors,
        "spec.architecture",
        "unsupported architecture: riscv64",
    );
    spec["architecture"] = json!("amd64");
    spec["domain"]["devices"]["watchdog"] = json!({"name": "w", "diag288": {"action": "reset"}});
    let errs = validate_vmi_create(&vmi(spec.clone())).errors;
    expect(
        &errs,
        "spec.domain.devices.watchdog",
        "amd64 only supports I6300ESB watchdog device",
    );
    expect_kind(
        &errs,
        "spec.domain.devices.watchdog",
        ErrorType::NotSupported,
    );
    spec["domain"]["devices"]["watchdog"] = json!({"name": "w", "i6300esb": {}});
    assert!(validate_vmi_create(&vmi(spec)).allowed());
}

#[test]
fn io_threads_and_access_credentials() {
    expect(
        &errors(&[("/domain/ioThreadsPolicy", json!("many"))]),
        "spec.domain.ioThreadsPolicy",
        "Invalid IOThreadsPolicy (many)",
    );
    clean(&[("/domain/ioThreadsPolicy", json!("auto"))]);
    let errs = errors(&[(
        "/accessCredentials",
        json!([{"sshPublicKey": {"propagationMethod": {"configDrive": {}}}}]),
    )]);
    expect(
        &errs,
        "spec.accessCredentials[0].sshPublicKey.propagationMethod",
        "spec.accessCredentials[0] requires a configDrive volume to exist when the configDrive propagationMethod is in use.",
    );
    expect(
        &errs,
        "spec.accessCredentials[0].sshPublicKey.source",
        "spec.accessCredentials[0] must have exactly one source set",
    );
    clean(&[(
        "/accessCredentials",
        json!([{"sshPublicKey": {"source": {"secret": {"secretName": "keys"}}, "propagationMethod": {"noCloud": {}}}}]),
    )]);
}

// ---------------------------------------------------------------- updates and migrations

#[test]
fn vmi_update_is_restricted() {
    let old = vmi(base_spec());
    let mut new = old.clone();
    new["spec"]["domain"]["cpu"] = json!({"cores": 2});
    let admission = validate_vmi_update(&old, &new);
    expect(&admission.errors, "", "update of VMI object is restricted");
    assert_eq!(admission.errors[0].kind, ErrorType::NotSupported);
    let mut relabelled = old.clone();
    relabelled["metadata"]["labels"] = json!({"kubevirt.io/nodeName": "other"});
    expect(
        &validate_vmi_update(&old, &relabelled).errors,
        "",
        "modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
    );
    let mut harmless = old.clone();
    harmless["metadata"]["labels"] = json!({"team": "a"});
    harmless["spec"]["hostname"] = Value::Null;
    harmless["spec"]["tolerations"] = json!([]);
    harmless["status"] = json!({"phase": "Running"});
    assert!(validate_vmi_update(&old, &harmless).allowed());
}

fn vmim(spec: Value) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "m1", "namespace": "default", "uid": "u1", "labels": {"kubevirt.io/vmi-name": "vmi1"}},
        "spec": spec
    })
}

#[test]
fn vmim_create() {
    assert!(validate_vmim_create(&vmim(json!({"vmiName": "vmi1"}))).allowed());
    let errs = validate_vmim_create(&vmim(json!({}))).errors;
    expect(&errs, "spec.vmiName", "vmiName is missing");
    assert_eq!(errs[0].kind, ErrorType::Required);
    let errs = validate_vmim_create(&vmim(
        json!({"vmiName": "vmi1", "priority": "system-critical"}),
    ))
    .errors;
    expect(
        &errs,
        "spec.migrationPriority",
        "Migration priority queue, only virt-controller is allowed to set priority field",
    );
    expect_kind(&errs, "spec.migrationPriority", ErrorType::Forbidden);
    expect_kind(
        &validate_vmim_create(&vmim(json!({"vmiName": 7}))).errors,
        "spec.vmiName",
        ErrorType::TypeInvalid,
    );
}

#[test]
fn vmim_target_checks() {
    let migration = vmim(json!({"vmiName": "vmi1"}));
    assert_eq!(
        check_migration_target(&migration, None, &[]).unwrap(),
        "the VMI \"default/vmi1\" does not exist"
    );
    let mut target = vmi(base_spec());
    target["status"] = json!({"phase": "Succeeded"});
    assert_eq!(
        check_migration_target(&migration, Some(&target), &[]).unwrap(),
        "Cannot migrate VMI in finalized state."
    );
    target["status"] = json!({"phase": "Running", "conditions": [
        {"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable", "message": "cannot migrate VMI with non-shared HostDisk"}]});
    assert_eq!(
        check_migration_target(&migration, Some(&target), &[]).unwrap(),
        "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: cannot migrate VMI with non-shared HostDisk"
    );
    target["status"]["conditions"][0]["status"] = json!("True");
    assert_eq!(check_migration_target(&migration, Some(&target), &[]), None);
    let mut running = migration.clone();
    running["status"] = json!({"phase": "Running"});
    assert_eq!(
        check_migration_target(&migration, Some(&target), &[running.clone()]).unwrap(),
        "in-flight migration detected. Active migration job (u1) is currently already in progress for VMI vmi1."
    );
    running["status"]["phase"] = json!("Failed");
    assert_eq!(
        check_migration_target(&migration, Some(&target), &[running]),
        None
    );
}

#[test]
fn vmim_update() {
    let old = vmim(json!({"vmiName": "vmi1"}));
    let mut changed = old.clone();
    changed["spec"]["vmiName"] = json!("vmi2");
    expect(
        &validate_vmim_update(&old, &changed).errors,
        "",
        "update of Migration object's spec is restricted",
    );
    let mut unlabelled = old.clone();
    unlabelled["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    expect(
        &validate_vmim_update(&old, &unlabelled).errors,
        "",
        "selector label can't be removed from an in-flight migration",
    );
    let mut relabelled = old.clone();
    relabelled["metadata"]["labels"]["kubevirt.io/vmi-name"] = json!("other");
    expect(
        &validate_vmim_update(&old, &relabelled).errors,
        "",
        "selector label can't be modified on an in-flight migration",
    );
    relabelled["status"] = json!({"phase": "Succeeded"});
    assert!(validate_vmim_update(&old, &relabelled).allowed());
    let mut status_only = old.clone();
    status_only["status"] = json!({"phase": "Running"});
    assert!(validate_vmim_update(&old, &status_only).allowed());
}

// ---------------------------------------------------------------- robustness

/// Replaces every node of a fully populated VM, one at a time, with values of every JSON
/// type and runs all defaulters and validators: none may panic.
#[test]
fn no_input_panics() {
    let mut full = base_spec();
    for (pointer, value) in [
        (
            "/domain/cpu",
            json!({"sockets": 2, "cores": 1, "threads": 1, "maxSockets": 4, "model": "host-model", "dedicatedCpuPlacement": true, "features": [{"name": "vmx", "policy": "require"}]}),
        ),
        (
            "/domain/memory",
            json!({"guest": "1Gi", "maxGuest": "4Gi", "hugepages": {"pageSize": "2Mi"}}),
        ),
        (
            "/domain/resources/limits",
            json!({"cpu": "2", "memory": "1Gi"}),
        ),
        (
            "/domain/firmware",
            json!({"uuid": "u", "serial": "s", "bootloader": {"efi": {"secureBoot": true}}, "kernelBoot": {"kernelArgs": "a", "container": {"image": "i", "kernelPath": "/k"}}}),
        ),
        (
            "/domain/features",
            json!({"acpi": {}, "smm": {"enabled": true}, "hyperv": {"spinlocks": {}, "synictimer": {"direct": {}}}}),
        ),
        ("/domain/clock", json!({"utc": {}, "timer": {"hpet": {}}})),
        (
            "/domain/devices/inputs",
            json!([{"name": "t", "type": "tablet"}]),
        ),
        (
            "/domain/devices/watchdog",
            json!({"name": "w", "i6300esb": {}}),
        ),
        (
            "/domain/devices/interfaces/0/ports",
            json!([{"name": "ssh", "port": 22}]),
        ),
        ("/domain/devices/disks/0/cdrom", json!({})),
        (
            "/volumes/2",
            json!({"name": "h", "hostDisk": {"path": "/d", "type": "Disk", "capacity": "1Gi"}}),
        ),
        (
            "/accessCredentials",
            json!([{"sshPublicKey": {"source": {"secret": {"secretName": "k"}}, "propagationMethod": {"qemuGuestAgent": {"users": ["u"]}}}}]),
        ),
        (
            "/readinessProbe",
            json!({"httpGet": {}, "timeoutSeconds": 0}),
        ),
        ("/startStrategy", json!("Paused")),
    ] {
        set(&mut full, pointer, value);
    }
    let replacements = [
        Value::Null,
        json!("s"),
        json!(-1),
        json!(1.5),
        json!(true),
        json!([]),
        json!({}),
        json!([1, "x"]),
    ];
    let mut pointers = Vec::new();
    collect_pointers(&full, String::new(), &mut pointers);
    for pointer in &pointers {
        for replacement in &replacements {
            let mut spec = full.clone();
            *spec.pointer_mut(pointer).unwrap() = replacement.clone();
            let mut machine = vm(spec.clone());
            machine["spec"]["dataVolumeTemplates"] =
                json!([{"metadata": {"name": "d"}, "spec": replacement}]);
            default_vm_on_create(&mut machine);
            let _ = validate_vm_create(&machine);
            let _ = validate_vm(&machine);
            let mut instance = vmi(spec.clone());
            default_vmi(&mut instance, DefaultNetworkBinding::Masquerade);
            let _ = validate_vmi_create(&instance);
            let _ = validate_vmi_create(&vmi(spec.clone()));
            let _ = validate_vmi_spec(&spec, "spec");
            let _ = validate_vmi_update(&instance, &vmi(spec));
        }
    }
    for odd in [
        Value::Null,
        json!(1),
        json!("x"),
        json!([]),
        json!({"spec": 1}),
        json!({"spec": {"template": 1}}),
    ] {
        let mut v = odd.clone();
        default_vm_on_create(&mut v);
        default_vmi(&mut v, DefaultNetworkBinding::Bridge);
        let _ = (
            validate_vm(&v),
            validate_vmi_create(&v),
            validate_vmim_create(&v),
            validate_vmim_update(&v, &odd),
        );
        let _ = check_migration_target(&v, Some(&odd), std::slice::from_ref(&odd));
    }
}

fn collect_pointers(v: &Value, prefix: String, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                let p = format!("{prefix}/{k}");
                out.push(p.clone());
                collect_pointers(x, p, out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                let p = format!("{prefix}/{i}");
                out.push(p.clone());
                collect_pointers(x, p, out);
            }
        }
        _ => {}
    }
}
