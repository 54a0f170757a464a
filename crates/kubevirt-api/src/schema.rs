//! The OpenAPI v3 component schemas of kubevirt.io/v1 (with KubeVirt's migrations group)
//! and of CDI's cdi.kubevirt.io/v1beta1, kept as YAML in `schema/` and parsed once. They drive pruning and structural validation, `kubectl explain` and the served
//! OpenAPI document.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

const DOCUMENTS: [(&str, &str); 2] = [
    (
        "kubevirt.io_v1.yaml",
        include_str!("../schema/kubevirt.io_v1.yaml"),
    ),
    (
        "cdi.kubevirt.io_v1beta1.yaml",
        include_str!("../schema/cdi.kubevirt.io_v1beta1.yaml"),
    ),
];

/// `components.schemas` of the kubevirt.io/v1 OpenAPI document: a map from schema name
/// (`io.kubevirt.v1.VirtualMachine`, `io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta`, ...)
/// to schema, with `$ref`s of the form `#/components/schemas/<name>`.
pub fn openapi_components() -> &'static Value {
    static COMPONENTS: OnceLock<Value> = OnceLock::new();
    COMPONENTS.get_or_init(|| {
        let mut all = serde_json::Map::new();
        for (file, text) in DOCUMENTS {
            // The documents are compiled in and a unit test parses them, so failure here
            // is a build defect.
            let mut document: Value = apimachinery::yaml::from_str(text)
                .unwrap_or_else(|e| panic!("schema/{file} is not valid YAML: {e}"));
            if let Value::Object(schemas) = document["components"]["schemas"].take() {
                all.extend(schemas);
            }
        }
        Value::Object(all)
    })
}

/// The `$ref` target for a component name. Hashed: admission follows a `$ref` for
/// nearly every field, and the names share long prefixes that slow an ordered lookup.
pub(crate) fn lookup(name: &str) -> Option<&'static Value> {
    static BY_NAME: OnceLock<HashMap<&'static str, &'static Value>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| {
            openapi_components()
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, schema)| (name.as_str(), schema))
                .collect()
        })
        .get(name)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REF_PREFIX: &str = "#/components/schemas/";

    /// Follows `$ref`s and descends through `properties` and `items` (`[]`).
    fn resolve<'a>(root: &str, path: &str) -> &'a Value {
        let follow = |mut s: &'a Value| {
            while let Some(r) = s.get("$ref").and_then(Value::as_str) {
                s = lookup(r.trim_start_matches(REF_PREFIX))
                    .unwrap_or_else(|| panic!("dangling $ref {r}"));
            }
            s
        };
        let mut schema = follow(lookup(root).unwrap_or_else(|| panic!("no schema {root}")));
        for part in path.split('.').filter(|p| !p.is_empty()) {
            schema = if part == "[]" {
                follow(&schema["items"])
            } else {
                follow(
                    schema
                        .get("properties")
                        .and_then(|p| p.get(part))
                        .unwrap_or_else(|| panic!("{root}: no {path}")),
                )
            };
        }
        schema
    }

    fn strings(v: &Value) -> Vec<&str> {
        v.as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    #[track_caller]
    fn has_enum(root: &str, path: &str, seed: &[&str]) {
        let actual = strings(&resolve(root, path)["enum"]);
        for value in seed {
            assert!(
                actual.contains(value),
                "{root}.{path}: enum lacks {value}: {actual:?}"
            );
        }
    }

    #[track_caller]
    fn has_required(root: &str, path: &str, seed: &[&str]) {
        let actual = strings(&resolve(root, path)["required"]);
        for field in seed {
            assert!(
                actual.contains(field),
                "{root}.{path}: {field} not required"
            );
        }
    }

    #[track_caller]
    fn has_type(root: &str, path: &str, ty: &str) {
        assert_eq!(resolve(root, path)["type"], ty, "{root}.{path}");
    }

    #[test]
    fn document_parses_and_refs_resolve() {
        let components = openapi_components().as_object().expect("schemas map");
        assert!(components.len() > 60);
        fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
            match v {
                Value::Object(m) => {
                    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                        out.push(r);
                    }
                    m.values().for_each(|x| refs(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        refs(openapi_components(), &mut all);
        for r in all {
            let name = r
                .strip_prefix(REF_PREFIX)
                .unwrap_or_else(|| panic!("bad $ref {r}"));
            assert!(components.contains_key(name), "dangling $ref {r}");
        }
        // Every schema except the int-or-string quantity says what it is and why.
        for (name, schema) in components {
            assert!(
                schema["description"].is_string(),
                "{name} lacks a description"
            );
            if name != "io.k8s.apimachinery.pkg.api.resource.Quantity" {
                assert_eq!(schema["type"], "object", "{name}");
            }
        }
        // YAML 1.1 booleans must not sneak into enums.
        for (name, schema) in components {
            let mut stack = vec![schema];
            while let Some(s) = stack.pop() {
                if let Some(values) = s.get("enum").and_then(Value::as_array) {
                    assert!(values.iter().all(Value::is_string), "{name}: {values:?}");
                }
                if let Some(map) = s.as_object() {
                    stack.extend(map.values());
                }
            }
        }
    }

    /// Every component builds as a structural schema: its references resolve and every
    /// `pattern` compiles (the server refuses to start otherwise).
    #[test]
    fn every_component_builds() {
        let components = openapi_components();
        let names = components.as_object().expect("schemas map").keys();
        for name in names {
            if let Err(e) = apimachinery::schema::Schema::from_components(components, name) {
                panic!("{name}: {e}");
            }
        }
    }

    #[test]
    fn roots_carry_group_version_kind() {
        for kind in [
            "VirtualMachine",
            "VirtualMachineList",
            "VirtualMachineInstance",
            "VirtualMachineInstanceList",
            "VirtualMachineInstanceMigration",
            "VirtualMachineInstanceMigrationList",
        ] {
            let gvk = &openapi_components()[format!("io.kubevirt.v1.{kind}")]
                ["x-kubernetes-group-version-kind"];
            assert_eq!(
                gvk,
                &serde_json::json!([{"group": "kubevirt.io", "version": "v1", "kind": kind}])
            );
        }
        assert_eq!(
            resolve("io.kubevirt.v1.VirtualMachine", "")["properties"]["metadata"]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
    }

    /// Every enum value, pattern, bound and required field of the seed contract
    /// (spec/virtualmachines.openapi.yaml and spec/migrations.openapi.yaml) still holds.
    #[test]
    fn superset_of_the_seed_contract() {
        let vm = "io.kubevirt.v1.VirtualMachine";
        let vmim = "io.kubevirt.v1.VirtualMachineInstanceMigration";
        let meta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
        let tspec = "spec.template.spec";
        let domain = "spec.template.spec.domain";

        has_required(vm, "", &["apiVersion", "kind", "metadata", "spec"]);
        has_enum(vm, "apiVersion", &["kubevirt.io/v1"]);
        has_enum(vm, "kind", &["VirtualMachine"]);
        has_required(meta, "", &["name"]);
        for (field, ty) in [
            ("name", "string"),
            ("namespace", "string"),
            ("labels", "object"),
            ("annotations", "object"),
            ("resourceVersion", "string"),
            ("uid", "string"),
            ("creationTimestamp", "string"),
        ] {
            has_type(meta, field, ty);
        }
        assert_eq!(resolve(meta, "creationTimestamp")["format"], "date-time");

        has_enum(
            vm,
            "status.printableStatus",
            &[
                "Stopped",
                "Provisioning",
                "Starting",
                "Running",
                "Paused",
                "Migrating",
                "Stopping",
                "Terminating",
                "CrashLoopBackOff",
                "Unknown",
                "WaitingForVolumeBinding",
            ],
        );
        for (field, ty) in [
            ("ready", "boolean"),
            ("created", "boolean"),
            ("conditions", "array"),
            ("volumeSnapshotStatuses", "array"),
        ] {
            has_type(vm, &format!("status.{field}"), ty);
        }
        for field in ["type", "status", "reason", "message", "lastTransitionTime"] {
            has_type(vm, &format!("status.conditions.[].{field}"), "string");
        }
        has_type(vm, "spec.running", "boolean");
        has_enum(
            vm,
            "spec.runStrategy",
            &["Always", "RerunOnFailure", "Manual", "Halted", "Once"],
        );
        has_type(vm, "spec.dataVolumeTemplates.[]", "object");
        has_type(vm, "spec.template.metadata", "object");

        has_required(vm, &format!("{domain}.devices.disks.[]"), &["name"]);
        assert_eq!(
            resolve(vm, &format!("{domain}.devices.disks.[].bootOrder"))["minimum"],
            1
        );
        has_enum(
            vm,
            &format!("{domain}.devices.disks.[].disk.bus"),
            &["virtio", "sata", "scsi", "ide"],
        );
        has_enum(
            vm,
            &format!("{domain}.devices.disks.[].cdrom.bus"),
            &["virtio", "sata", "scsi"],
        );
        has_type(
            vm,
            &format!("{domain}.devices.disks.[].cdrom.readonly"),
            "boolean",
        );
        has_type(vm, &format!("{domain}.devices.disks.[].lun.bus"), "string");

        for field in ["affinity", "nodeSelector"] {
            has_type(vm, &format!("{tspec}.{field}"), "object");
        }
        has_type(vm, &format!("{tspec}.tolerations.[]"), "object");
        has_type(vm, &format!("{tspec}.hostname"), "string");
        has_type(vm, &format!("{tspec}.subdomain"), "string");
        assert_eq!(
            resolve(vm, &format!("{tspec}.terminationGracePeriodSeconds"))["minimum"],
            0
        );
        has_enum(
            vm,
            &format!("{tspec}.evictionStrategy"),
            &["LiveMigrate", "None"],
        );

        let iface = format!("{domain}.devices.interfaces.[]");
        has_required(vm, &iface, &["name"]);
        has_enum(
            vm,
            &format!("{iface}.model"),
            &["virtio", "e1000", "e1000e", "rtl8139"],
        );
        assert_eq!(
            resolve(vm, &format!("{iface}.macAddress"))["pattern"],
            "^([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}$"
        );
        for binding in ["masquerade", "bridge", "sriov"] {
            has_type(vm, &format!("{iface}.{binding}"), "object");
        }
        let port = resolve(vm, &format!("{iface}.ports.[].port"));
        assert_eq!(
            (port["minimum"].as_i64(), port["maximum"].as_i64()),
            (Some(1), Some(65535))
        );
        has_type(vm, &format!("{iface}.ports.[].name"), "string");
        has_enum(vm, &format!("{iface}.ports.[].protocol"), &["TCP", "UDP"]);

        let volume = format!("{tspec}.volumes.[]");
        has_required(vm, &volume, &["name"]);
        has_type(vm, &format!("{volume}.containerDisk.image"), "string");
        has_enum(
            vm,
            &format!("{volume}.containerDisk.imagePullPolicy"),
            &["Always", "Never", "IfNotPresent"],
        );
        has_type(vm, &format!("{volume}.dataVolume.name"), "string");
        has_type(
            vm,
            &format!("{volume}.persistentVolumeClaim.claimName"),
            "string",
        );
        has_type(
            vm,
            &format!("{volume}.persistentVolumeClaim.readOnly"),
            "boolean",
        );
        for source in ["cloudInitNoCloud", "cloudInitConfigDrive"] {
            has_type(vm, &format!("{volume}.{source}.userData"), "string");
            has_type(vm, &format!("{volume}.{source}.networkData"), "string");
        }
        has_type(vm, &format!("{volume}.sysprep.configMap.name"), "string");
        has_type(vm, &format!("{volume}.emptyDisk.capacity"), "string");
        has_type(vm, &format!("{volume}.hostDisk.path"), "string");
        has_enum(
            vm,
            &format!("{volume}.hostDisk.type"),
            &["DiskOrCreate", "Disk"],
        );

        let network = format!("{tspec}.networks.[]");
        has_required(vm, &network, &["name"]);
        has_type(vm, &format!("{network}.pod.vmNetworkCIDR"), "string");
        has_type(vm, &format!("{network}.multus.networkName"), "string");
        has_type(vm, &format!("{network}.multus.default"), "boolean");

        for field in ["cores", "sockets", "threads"] {
            assert_eq!(
                resolve(vm, &format!("{domain}.cpu.{field}"))["minimum"],
                1,
                "{field}"
            );
        }
        has_type(vm, &format!("{domain}.cpu.model"), "string");
        has_type(
            vm,
            &format!("{domain}.cpu.dedicatedCpuPlacement"),
            "boolean",
        );
        has_type(vm, &format!("{domain}.cpu.features.[].name"), "string");
        has_enum(
            vm,
            &format!("{domain}.cpu.features.[].policy"),
            &["force", "require", "optional", "disable", "forbid"],
        );
        has_type(vm, &format!("{domain}.memory.guest"), "string");
        has_type(vm, &format!("{domain}.memory.hugepages.pageSize"), "string");
        for device in ["rng", "watchdog"] {
            has_type(vm, &format!("{domain}.devices.{device}"), "object");
        }
        for feature in ["acpi", "smm", "hyperv"] {
            has_type(vm, &format!("{domain}.features.{feature}"), "object");
        }
        has_type(vm, &format!("{domain}.firmware.bootloader.bios"), "object");
        has_type(
            vm,
            &format!("{domain}.firmware.bootloader.efi.secureBoot"),
            "boolean",
        );
        has_type(vm, &format!("{domain}.firmware.serial"), "string");
        assert_eq!(
            resolve(vm, &format!("{domain}.firmware.uuid"))["format"],
            "uuid"
        );
        has_type(vm, &format!("{domain}.machine.type"), "string");

        has_type("io.kubevirt.v1.VirtualMachineList", "items.[]", "object");

        has_required(vmim, "", &["apiVersion", "kind", "metadata", "spec"]);
        has_enum(vmim, "apiVersion", &["kubevirt.io/v1"]);
        has_enum(vmim, "kind", &["VirtualMachineInstanceMigration"]);
        has_required(vmim, "spec", &["vmiName"]);
        has_type(vmim, "spec.vmiName", "string");
        has_enum(
            vmim,
            "status.phase",
            &[
                "Pending",
                "Scheduling",
                "Scheduled",
                "PreparingTarget",
                "TargetReady",
                "Running",
                "Succeeded",
                "Failed",
            ],
        );
        for (field, ty) in [
            ("startTimestamp", "string"),
            ("endTimestamp", "string"),
            ("targetNode", "string"),
            ("sourceNode", "string"),
            ("completed", "boolean"),
            ("failed", "boolean"),
            ("failureReason", "string"),
        ] {
            has_type(vmim, &format!("status.migrationState.{field}"), ty);
        }
        has_type(
            "io.kubevirt.v1.VirtualMachineInstanceMigrationList",
            "items.[]",
            "object",
        );
    }

    #[test]
    fn kubevirt_extensions_are_present() {
        let vmi = "io.kubevirt.v1.VirtualMachineInstance";
        has_enum(
            vmi,
            "status.phase",
            &[
                "Pending",
                "Scheduling",
                "Scheduled",
                "Running",
                "Succeeded",
                "Failed",
                "WaitingForSync",
                "Unknown",
            ],
        );
        has_enum(
            "io.kubevirt.v1.VirtualMachine",
            "status.printableStatus",
            &[
                "ErrorUnschedulable",
                "ErrImagePull",
                "ImagePullBackOff",
                "ErrorPvcNotFound",
                "DataVolumeError",
                "WaitingForReceiver",
            ],
        );
        let quantity = resolve(vmi, "spec.domain.resources.requests");
        assert_eq!(
            quantity["additionalProperties"]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"
        );
        assert_eq!(
            resolve("io.k8s.apimachinery.pkg.api.resource.Quantity", "")
                ["x-kubernetes-int-or-string"],
            true
        );
        assert_eq!(
            resolve(vmi, "spec.affinity")["x-kubernetes-preserve-unknown-fields"],
            true
        );
        for field in [
            "kernelArgs",
            "container.image",
            "container.kernelPath",
            "container.initrdPath",
            "container.imagePullPolicy",
        ] {
            resolve(vmi, &format!("spec.domain.firmware.kernelBoot.{field}"));
        }
        for field in [
            "disk",
            "cdrom",
            "lun",
            "serial",
            "cache",
            "io",
            "errorPolicy",
            "dedicatedIOThread",
            "cdrom.tray",
        ] {
            resolve(vmi, &format!("spec.domain.devices.disks.[].{field}"));
        }
        for field in [
            "autoattachPodInterface",
            "autoattachSerialConsole",
            "autoattachGraphicsDevice",
            "networkInterfaceMultiqueue",
            "inputs",
            "watchdog.i6300esb.action",
        ] {
            resolve(vmi, &format!("spec.domain.devices.{field}"));
        }
        for field in [
            "userDataBase64",
            "secretRef",
            "networkDataBase64",
            "networkDataSecretRef",
        ] {
            resolve(vmi, &format!("spec.volumes.[].cloudInitNoCloud.{field}"));
        }
        for field in [
            "hostDisk.capacity",
            "hostDisk.shared",
            "sysprep.secret",
            "configMap.name",
            "secret.secretName",
            "serviceAccount.serviceAccountName",
            "ephemeral",
            "downwardMetrics",
            "containerDisk.path",
            "containerDisk.imagePullSecret",
        ] {
            resolve(vmi, &format!("spec.volumes.[].{field}"));
        }
        for field in [
            "reason",
            "nodeName",
            "conditions",
            "phaseTransitionTimestamps",
            "interfaces.[].ipAddress",
            "volumeStatus",
            "migrationState",
            "migrationMethod",
            "guestOSInfo",
            "machine",
            "currentCPUTopology",
            "memory",
            "qosClass",
            "launcherContainerImageVersion",
            "activePods",
            "evacuationNodeName",
        ] {
            resolve(vmi, &format!("status.{field}"));
        }
        for field in [
            "stateChangeRequests",
            "startFailure",
            "observedGeneration",
            "desiredGeneration",
            "runStrategy",
            "volumeRequests",
        ] {
            resolve("io.kubevirt.v1.VirtualMachine", &format!("status.{field}"));
        }
        resolve(
            "io.kubevirt.v1.VirtualMachineInstanceMigration",
            "spec.addedNodeSelector",
        );
        resolve(
            "io.kubevirt.v1.VirtualMachineInstanceMigration",
            "status.phaseTransitionTimestamps",
        );
        resolve(
            "io.kubevirt.v1.VirtualMachineInstanceMigration",
            "status.conditions",
        );
    }
}
