//! KubeVirt's mutating webhooks: what a VirtualMachine and a VirtualMachineInstance look like
//! after defaulting. Each step mirrors one of KubeVirt's defaulters, in KubeVirt's order, so
//! the stored objects read the same as on a KubeVirt cluster with default configuration.
//!
//! Objects are untrusted JSON: a field of the wrong type is left as it is (admission then
//! rejects it) and nothing here panics.

use serde_json::{json, Value};
use uuid::Uuid;

use crate::access::{
    at, at_mut, bool_at, ensure_obj, ensure_path, get, has, int_at, list_at, set_if_empty, str_at,
};
use crate::quantity::Quantity;

/// Namespace of the name-derived firmware UUIDs; KubeVirt's constant, so a VM gets the same
/// SMBIOS UUID here as it would there.
const FIRMWARE_UUID_NAMESPACE: Uuid = Uuid::from_u128(0x6a1a24a1_4061_4607_8bf4_a3963d0c5895);

/// The architecture of every node we run (x86_64 QEMU).
pub(crate) const DEFAULT_ARCHITECTURE: &str = "amd64";

const PCI_TOPOLOGY_ANNOTATION: &str = "kubevirt.io/pci-topology-version";

/// The label that ties a migration to its VMI; `virtctl migrate-cancel` selects by it.
pub const MIGRATION_SELECTOR_LABEL: &str = crate::names::labels::VMI_NAME;

/// The finalizer KubeVirt's VMI mutator adds. Whoever adds it (the API server on VMI create)
/// needs the VMI controller to remove it once the VMI is final and its pods are gone.
pub const VMI_FOREGROUND_FINALIZER: &str = crate::names::finalizers::VMI_FOREGROUND;

/// The finalizer KubeVirt's migration mutator adds; the migration controller removes it when
/// the migration is final.
pub const MIGRATION_FINALIZER: &str = crate::names::finalizers::MIGRATION;

/// How the default interface (added when a VMI lists no networks) connects to the pod network.
///
/// KubeVirt's own default is `bridge`; many distributions (OpenShift, Harvester) configure
/// `masquerade` instead, which is the one that allows live migration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DefaultNetworkBinding {
    #[default]
    Bridge,
    Masquerade,
}

impl DefaultNetworkBinding {
    fn field(self) -> &'static str {
        match self {
            DefaultNetworkBinding::Bridge => "bridge",
            DefaultNetworkBinding::Masquerade => "masquerade",
        }
    }
}

/// The SMBIOS UUID a VMI started from the VM named `vm_name` gets when the VM's template has
/// none: a UUIDv5 of the name, so it survives restarts and matches KubeVirt's.
pub fn stable_firmware_uuid(vm_name: &str) -> String {
    Uuid::new_v5(&FIRMWARE_UUID_NAMESPACE, vm_name.as_bytes()).to_string()
}

/// KubeVirt's VM mutator on CREATE: random `firmware.uuid` and `firmware.serial` when empty,
/// then the defaults of [`default_vm_on_update`], then the PCI topology annotation on the
/// template. The VM spec is otherwise left as written; full defaults land on each VMI.
pub fn default_vm_on_create(vm: &mut Value) {
    let Some(template) = template_mut(vm) else {
        return;
    };
    if let Some(firmware) = ensure_path(template, &["spec", "domain", "firmware"]) {
        set_if_empty(firmware, "uuid", Uuid::new_v4().to_string());
        set_if_empty(firmware, "serial", Uuid::new_v4().to_string());
    }
    default_vm_on_update(vm);
    let Some(template) = template_mut(vm) else {
        return;
    };
    if template.get("spec").is_some_and(supports_pcie_hotplug) {
        if let Some(annotations) = ensure_path(template, &["metadata", "annotations"]) {
            set_if_empty(annotations, PCI_TOPOLOGY_ANNOTATION, "v3");
        }
    }
}

/// KubeVirt's VM mutator on UPDATE (and the common part of CREATE): the template's
/// `architecture` and `domain.machine.type`.
pub fn default_vm_on_update(vm: &mut Value) {
    let Some(spec) = template_mut(vm).and_then(|t| ensure_obj(t, "spec")) else {
        return;
    };
    set_if_empty(spec, "architecture", DEFAULT_ARCHITECTURE);
    set_default_machine_type(spec);
}

fn template_mut(vm: &mut Value) -> Option<&mut Value> {
    at_mut(vm, &["spec", "template"]).filter(|t| t.is_object())
}

/// KubeVirt's VMI mutator on CREATE, applied to the whole VMI object.
///
/// Writes the spec defaults (KubeVirt's order: architecture, machine type, CPU request from
/// limit, guest memory, CPU topology, containerDisk pull policy, default pod network and
/// interface, a disk per volume, firmware and features, disk targets and CD-ROM settings,
/// inputs, probes, firmware UUID, timers and feature states, amd64 disk bus and watchdog, CPU
/// model), the PCI topology annotation, and the status fields derived from the spec
/// (`status.memory`, `status.currentCPUTopology`).
///
/// The caller adds what belongs to the lifecycle rather than the spec: `status.phase: Pending`
/// and the first `status.phaseTransitionTimestamps` entry (both stamped with the request's
/// time), and [`VMI_FOREGROUND_FINALIZER`] provided the VMI controller removes it when the VMI
/// is done. A VMI started from a VM should already carry [`stable_firmware_uuid`]; a bare VMI
/// gets a random UUID here.
///
/// Not applied: CPU/memory hotplug limits (`maxSockets`, `maxGuest`), Hyper-V feature
/// dependencies, `runtimeUser`, and the arm64/s390x defaults, which our nodes do not need.
pub fn default_vmi(vmi: &mut Value, binding: DefaultNetworkBinding) {
    let Some(spec) = vmi.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    default_vmi_spec(spec, binding);
    set_object_defaults(spec);
    if str_at(spec, &["architecture"]) == DEFAULT_ARCHITECTURE {
        set_amd64_defaults(spec);
    }
    if let Some(cpu) = ensure_path(spec, &["domain", "cpu"]) {
        set_if_empty(cpu, "model", "host-model");
    }
    let guest = at(spec, &["domain", "memory", "guest"]).cloned();
    let topology = at(spec, &["domain", "cpu"]).map(|cpu| {
        let n = |k: &str| int_at(cpu, &[k]).unwrap_or(0);
        json!({"sockets": n("sockets"), "cores": n("cores"), "threads": n("threads")})
    });
    let pcie = supports_pcie_hotplug(spec);

    if let Some(status) = ensure_obj(vmi, "status") {
        if let Some(guest) = guest {
            status["memory"] =
                json!({"guestAtBoot": guest, "guestCurrent": guest, "guestRequested": guest});
        }
        if let (Some(topology), false) = (topology, has(status, &["currentCPUTopology"])) {
            status["currentCPUTopology"] = topology;
        }
    }
    if pcie {
        if let Some(annotations) = ensure_path(vmi, &["metadata", "annotations"]) {
            set_if_empty(annotations, PCI_TOPOLOGY_ANNOTATION, "v3");
        }
    }
}

/// KubeVirt's migration mutator on CREATE: labels the migration with its VMI's name
/// ([`MIGRATION_SELECTOR_LABEL`]) and adds [`MIGRATION_FINALIZER`], which the migration
/// controller removes once the migration is final (so a deleted running migration is
/// aborted before it goes).
pub fn default_vmim_on_create(vmim: &mut Value) {
    let vmi_name = str_at(vmim, &["spec", "vmiName"]).to_string();
    if vmi_name.is_empty() {
        return;
    }
    if let Some(labels) = ensure_path(vmim, &["metadata", "labels"]) {
        labels[MIGRATION_SELECTOR_LABEL] = Value::String(vmi_name);
    }
    if let Some(metadata) = vmim.get_mut("metadata").and_then(Value::as_object_mut) {
        let finalizers = metadata
            .entry("finalizers")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(list) = finalizers.as_array_mut() {
            if !list.iter().any(|f| f == MIGRATION_FINALIZER) {
                list.push(Value::String(MIGRATION_FINALIZER.to_string()));
            }
        }
    }
}

/// The spec part of KubeVirt's defaulting (`SetDefaultVirtualMachineInstanceSpec`): what the
/// VMI mutator writes first, and what the VM validator applies to a copy of the template
/// before validating it.
pub(crate) fn default_vmi_spec(spec: &mut Value, binding: DefaultNetworkBinding) {
    if !spec.is_object() {
        return;
    }
    set_if_empty(spec, "architecture", DEFAULT_ARCHITECTURE);
    set_default_machine_type(spec);
    set_cpu_request_from_limit(spec);
    set_guest_memory(spec);
    set_cpu_topology(spec);
    set_pull_policies(spec);
    set_default_network(spec, binding);
    add_disks_for_volumes(spec);
}

fn default_machine_type(architecture: &str) -> &'static str {
    match architecture {
        "arm64" => "virt",
        "s390x" => "s390-ccw-virtio",
        _ => "q35",
    }
}

fn set_default_machine_type(spec: &mut Value) {
    let machine_type = default_machine_type(str_at(spec, &["architecture"]));
    if let Some(machine) = ensure_path(spec, &["domain", "machine"]) {
        set_if_empty(machine, "type", machine_type);
    }
}

/// Quantities are stored as strings, as Go writes them back.
fn quantity_value(v: &Value) -> Value {
    match v {
        Value::Number(n) => Value::String(n.to_string()),
        other => other.clone(),
    }
}

fn quantity_at(spec: &Value, keys: &[&str]) -> Quantity {
    at(spec, keys)
        .and_then(Quantity::from_json)
        .unwrap_or_default()
}

fn set_cpu_request_from_limit(spec: &mut Value) {
    let limit = at(spec, &["domain", "resources", "limits", "cpu"]).cloned();
    let Some(limit) = limit.filter(|l| !Quantity::from_json(l).unwrap_or_default().is_zero())
    else {
        return;
    };
    if quantity_at(spec, &["domain", "resources", "requests", "cpu"]).is_zero() {
        if let Some(requests) = ensure_path(spec, &["domain", "resources", "requests"]) {
            requests["cpu"] = quantity_value(&limit);
        }
    }
}

fn set_guest_memory(spec: &mut Value) {
    if has(spec, &["domain", "memory", "guest"]) {
        return;
    }
    let nonzero = |keys: &[&str]| {
        at(spec, keys)
            .filter(|v| !Quantity::from_json(v).unwrap_or_default().is_zero())
            .map(quantity_value)
    };
    let guest = nonzero(&["domain", "resources", "requests", "memory"])
        .or_else(|| nonzero(&["domain", "resources", "limits", "memory"]))
        .or_else(|| {
            at(spec, &["domain", "memory", "hugepages", "pageSize"])
                .filter(|p| p.as_str().and_then(Quantity::parse).is_some())
                .cloned()
        });
    if let Some(memory) = ensure_path(spec, &["domain", "memory"]) {
        if let Some(guest) = guest {
            memory["guest"] = guest;
        }
    }
}

fn set_cpu_topology(spec: &mut Value) {
    let count = |k: &str| int_at(spec, &["domain", "cpu", k]).unwrap_or(0);
    if count("cores") != 0 || count("sockets") != 0 || count("threads") != 0 {
        return;
    }
    let whole =
        |keys: &[&str]| at(spec, keys).map(|v| Quantity::from_json(v).unwrap_or_default().value());
    let sockets = whole(&["domain", "resources", "limits", "cpu"])
        .or_else(|| whole(&["domain", "resources", "requests", "cpu"]))
        .unwrap_or(1)
        .clamp(0, i64::from(u32::MAX));
    if let Some(cpu) = ensure_path(spec, &["domain", "cpu"]) {
        cpu["sockets"] = json!(sockets);
        cpu["cores"] = json!(1);
        cpu["threads"] = json!(1);
    }
}

fn set_pull_policies(spec: &mut Value) {
    let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) else {
        return;
    };
    for disk in volumes
        .iter_mut()
        .filter_map(|v| v.get_mut("containerDisk"))
        .filter(|c| c.is_object())
    {
        let image = str_at(disk, &["image"]);
        let policy = if image.ends_with(":latest") || !image.contains([':', '@']) {
            "Always"
        } else {
            "IfNotPresent"
        };
        set_if_empty(disk, "imagePullPolicy", policy);
    }
}

fn set_default_network(spec: &mut Value, binding: DefaultNetworkBinding) {
    if bool_at(spec, &["domain", "devices", "autoattachPodInterface"]) == Some(false)
        || !list_at(spec, &["networks"]).is_empty()
        || !list_at(spec, &["domain", "devices", "interfaces"]).is_empty()
    {
        return;
    }
    // Leave fields of the wrong type for validation to report.
    let writable = |v: Option<&Value>| v.is_none_or(|x| x.is_null() || x.is_array());
    if !writable(get(spec, "networks")) || !writable(at(spec, &["domain", "devices", "interfaces"]))
    {
        return;
    }
    if let Some(devices) = ensure_path(spec, &["domain", "devices"]) {
        devices["interfaces"] = json!([{"name": "default", binding.field(): {}}]);
        spec["networks"] = json!([{"name": "default", "pod": {}}]);
    }
}

fn add_disks_for_volumes(spec: &mut Value) {
    let mut used: Vec<String> = Vec::new();
    for key in ["disks", "filesystems"] {
        for device in list_at(spec, &["domain", "devices", key]) {
            used.push(str_at(device, &["name"]).to_string());
        }
    }
    let missing: Vec<String> = list_at(spec, &["volumes"])
        .iter()
        .map(|v| str_at(v, &["name"]).to_string())
        .filter(|name| !used.contains(name))
        .collect();
    if missing.is_empty() {
        return;
    }
    let Some(devices) = ensure_path(spec, &["domain", "devices"]) else {
        return;
    };
    let disks = devices.as_object_mut().and_then(|d| {
        let slot = d.entry("disks").or_insert(Value::Null);
        if slot.is_null() {
            *slot = Value::Array(Vec::new());
        }
        slot.as_array_mut()
    });
    if let Some(disks) = disks {
        disks.extend(missing.into_iter().map(|name| json!({"name": name})));
    }
}

/// KubeVirt's generated object defaulters (`SetObjectDefaults_VirtualMachineInstance`).
fn set_object_defaults(spec: &mut Value) {
    let Some(domain) = ensure_obj(spec, "domain") else {
        return;
    };
    ensure_obj(domain, "firmware");
    ensure_obj(domain, "features");
    for_each_item(domain, &["devices", "disks"], |disk| {
        if !has(disk, &["disk"]) && !has(disk, &["cdrom"]) && !has(disk, &["lun"]) {
            disk["disk"] = json!({});
        }
    });
    for_each_item(domain, &["devices", "inputs"], |input| {
        set_if_empty(input, "bus", "usb");
        set_if_empty(input, "type", "tablet");
    });
    if let Some(firmware) = at_mut(domain, &["firmware"]).filter(|f| f.is_object()) {
        set_if_empty(firmware, "uuid", Uuid::new_v4().to_string());
    }
    if let Some(timer) = at_mut(domain, &["clock", "timer"]) {
        for name in ["hpet", "kvm", "pit", "rtc", "hyperv"] {
            enable_if_present(timer, name);
        }
    }
    if let Some(features) = at_mut(domain, &["features"]).filter(|f| f.is_object()) {
        if let Some(acpi) = ensure_obj(features, "acpi") {
            default_enabled(acpi);
        }
        for name in ["apic", "smm", "pvspinlock"] {
            enable_if_present(features, name);
        }
        if let Some(hyperv) = at_mut(features, &["hyperv"]) {
            set_hyperv_defaults(hyperv);
        }
    }
    for_each_item(domain, &["devices", "disks"], |disk| {
        if let Some(cdrom) = at_mut(disk, &["cdrom"]).filter(|c| c.is_object()) {
            if let Some(map) = cdrom.as_object_mut() {
                map.entry("readonly").or_insert(Value::Bool(true));
            }
            set_if_empty(cdrom, "tray", "closed");
        }
    });
    for probe in ["readinessProbe", "livenessProbe"] {
        if let Some(probe) = at_mut(spec, &[probe]) {
            set_probe_defaults(probe);
        }
    }
}

fn set_hyperv_defaults(hyperv: &mut Value) {
    for name in [
        "relaxed",
        "vapic",
        "vpindex",
        "runtime",
        "synic",
        "reset",
        "vendorid",
        "frequencies",
        "reenlightenment",
        "ipi",
        "evmcs",
        "tlbflush",
        "synictimer",
        "spinlocks",
    ] {
        enable_if_present(hyperv, name);
    }
    if let Some(spinlocks) = at_mut(hyperv, &["spinlocks"]) {
        if bool_at(spinlocks, &["enabled"]) == Some(true) {
            if let Some(map) = spinlocks.as_object_mut() {
                map.entry("retries").or_insert(json!(4096));
            }
        }
    }
    for (outer, inner) in [
        ("synictimer", "direct"),
        ("tlbflush", "direct"),
        ("tlbflush", "extended"),
    ] {
        if let Some(feature) = at_mut(hyperv, &[outer, inner]) {
            default_enabled(feature);
        }
    }
}

/// A feature struct that is present means "on" unless it says otherwise.
fn default_enabled(feature: &mut Value) {
    if let Some(map) = feature.as_object_mut() {
        if map.get("enabled").is_none_or(Value::is_null) {
            map.insert("enabled".to_string(), Value::Bool(true));
        }
    }
}

fn enable_if_present(parent: &mut Value, name: &str) {
    if let Some(feature) = at_mut(parent, &[name]) {
        default_enabled(feature);
    }
}

fn set_probe_defaults(probe: &mut Value) {
    let Some(map) = probe.as_object_mut() else {
        return;
    };
    for (key, default) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        let current = map.get(key).map_or(Some(0), crate::access::as_int);
        if current.is_some_and(|n| n < 1) {
            map.insert(key.to_string(), json!(default));
        }
    }
}

/// amd64 defaults: SATA for disks without a bus (every guest has a driver for it), and a
/// watchdog that resets the guest.
fn set_amd64_defaults(spec: &mut Value) {
    for_each_item(spec, &["domain", "devices", "disks"], |disk| {
        for target in ["disk", "cdrom", "lun"] {
            if let Some(target) = at_mut(disk, &[target]).filter(|t| t.is_object()) {
                set_if_empty(target, "bus", "sata");
            }
        }
    });
    if let Some(watchdog) =
        at_mut(spec, &["domain", "devices", "watchdog"]).filter(|w| w.is_object())
    {
        if let Some(i6300esb) = ensure_obj(watchdog, "i6300esb") {
            set_if_empty(i6300esb, "action", "reset");
        }
    }
}

/// Whether the machine uses PCIe root ports (q35 on amd64, virt on arm64), which KubeVirt marks
/// with the PCI topology annotation.
fn supports_pcie_hotplug(spec: &Value) -> bool {
    let machine = str_at(spec, &["domain", "machine", "type"]);
    matches!(str_at(spec, &["architecture"]), "" | "amd64" | "arm64")
        && (!has(spec, &["domain", "machine"])
            || machine.contains("q35")
            || machine.starts_with("virt"))
}

fn for_each_item(v: &mut Value, keys: &[&str], mut f: impl FnMut(&mut Value)) {
    if let Some(items) = at_mut(v, keys).and_then(Value::as_array_mut) {
        items
            .iter_mut()
            .filter(|item| item.is_object())
            .for_each(&mut f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_v4(s: &str) -> bool {
        Uuid::parse_str(s).is_ok_and(|u| u.get_version_num() == 4)
    }

    #[test]
    fn stable_uuid_matches_kubevirt() {
        // UUIDv5 of "testvm" in KubeVirt's firmware namespace.
        assert_eq!(
            stable_firmware_uuid("testvm"),
            "5a9fc181-957e-5c32-9e5a-2de5e9673531"
        );
        assert_eq!(
            stable_firmware_uuid("testvm"),
            stable_firmware_uuid("testvm")
        );
        assert_ne!(
            stable_firmware_uuid("testvm"),
            stable_firmware_uuid("testvm2")
        );
    }

    #[test]
    fn vm_mutator() {
        let mut vm = json!({"spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}}});
        default_vm_on_create(&mut vm);
        let template = &vm["spec"]["template"];
        let firmware = &template["spec"]["domain"]["firmware"];
        assert!(is_v4(firmware["uuid"].as_str().unwrap()));
        assert!(is_v4(firmware["serial"].as_str().unwrap()));
        assert_ne!(firmware["uuid"], firmware["serial"]);
        assert_eq!(
            template["spec"]["domain"]["machine"],
            json!({"type": "q35"})
        );
        assert_eq!(template["spec"]["architecture"], "amd64");
        assert_eq!(
            template["metadata"]["annotations"]["kubevirt.io/pci-topology-version"],
            "v3"
        );
        // Only the template is touched; no other VMI defaults land on the VM.
        assert!(template["spec"]["domain"].get("cpu").is_none());

        let mut kept = json!({"spec": {"template": {"spec": {"domain": {
            "devices": {}, "firmware": {"uuid": "given", "serial": "S1"}, "machine": {"type": "pc"}}}}}});
        default_vm_on_create(&mut kept);
        let domain = &kept["spec"]["template"]["spec"]["domain"];
        assert_eq!(domain["firmware"], json!({"uuid": "given", "serial": "S1"}));
        assert_eq!(domain["machine"]["type"], "pc");
        assert!(
            kept["spec"]["template"].get("metadata").is_none(),
            "i440fx has no PCIe topology"
        );

        let mut updated = json!({"spec": {"template": {"spec": {"domain": {"devices": {}}}}}});
        default_vm_on_update(&mut updated);
        assert_eq!(
            updated["spec"]["template"]["spec"]["domain"],
            json!({"devices": {}, "machine": {"type": "q35"}})
        );

        let mut no_template = json!({"spec": {"runStrategy": "Always"}});
        default_vm_on_create(&mut no_template);
        assert_eq!(no_template, json!({"spec": {"runStrategy": "Always"}}));
    }

    fn defaulted(spec: Value, binding: DefaultNetworkBinding) -> Value {
        let mut vmi = json!({"metadata": {"name": "v"}, "spec": spec});
        default_vmi(&mut vmi, binding);
        vmi
    }

    #[test]
    fn vmi_mutator_fills_kubevirt_defaults() {
        let vmi = defaulted(
            json!({
                "domain": {
                    "devices": {
                        "disks": [{"name": "root"}, {"name": "iso", "cdrom": {}}, {"name": "fast", "disk": {"bus": "virtio"}}],
                        "inputs": [{"name": "t"}],
                        "watchdog": {"name": "w"}
                    },
                    "resources": {"requests": {"memory": "1Gi"}, "limits": {"cpu": "1500m"}}
                },
                "volumes": [
                    {"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}},
                    {"name": "iso", "containerDisk": {"image": "registry/iso"}},
                    {"name": "fast", "containerDisk": {"image": "registry/x:latest"}},
                    {"name": "cidata", "cloudInitNoCloud": {"userData": "x"}}
                ],
                "readinessProbe": {"guestAgentPing": {}, "periodSeconds": 5}
            }),
            DefaultNetworkBinding::Bridge,
        );
        let spec = &vmi["spec"];
        let domain = &spec["domain"];
        assert_eq!(spec["architecture"], "amd64");
        assert_eq!(domain["machine"]["type"], "q35");
        assert_eq!(domain["memory"]["guest"], "1Gi");
        assert_eq!(domain["resources"]["requests"]["cpu"], "1500m");
        assert_eq!(
            domain["cpu"],
            json!({"sockets": 2, "cores": 1, "threads": 1, "model": "host-model"})
        );
        let policies: Vec<_> = spec["volumes"].as_array().unwrap()[..3]
            .iter()
            .map(|v| v["containerDisk"]["imagePullPolicy"].clone())
            .collect();
        assert_eq!(policies, ["IfNotPresent", "Always", "Always"]);
        assert_eq!(spec["networks"], json!([{"name": "default", "pod": {}}]));
        assert_eq!(
            domain["devices"]["interfaces"],
            json!([{"name": "default", "bridge": {}}])
        );
        assert_eq!(
            domain["devices"]["disks"],
            json!([
                {"name": "root", "disk": {"bus": "sata"}},
                {"name": "iso", "cdrom": {"bus": "sata", "readonly": true, "tray": "closed"}},
                {"name": "fast", "disk": {"bus": "virtio"}},
                {"name": "cidata", "disk": {"bus": "sata"}}
            ])
        );
        assert_eq!(
            domain["devices"]["inputs"],
            json!([{"name": "t", "bus": "usb", "type": "tablet"}])
        );
        assert_eq!(
            domain["devices"]["watchdog"],
            json!({"name": "w", "i6300esb": {"action": "reset"}})
        );
        assert_eq!(domain["features"], json!({"acpi": {"enabled": true}}));
        assert!(is_v4(domain["firmware"]["uuid"].as_str().unwrap()));
        assert_eq!(
            spec["readinessProbe"],
            json!({"guestAgentPing": {}, "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3})
        );
        assert!(spec.get("terminationGracePeriodSeconds").is_none());
        assert_eq!(
            vmi["status"]["memory"],
            json!({"guestAtBoot": "1Gi", "guestCurrent": "1Gi", "guestRequested": "1Gi"})
        );
        assert_eq!(
            vmi["status"]["currentCPUTopology"],
            json!({"sockets": 2, "cores": 1, "threads": 1})
        );
        assert!(
            vmi["status"].get("phase").is_none(),
            "the caller sets the phase"
        );
        assert_eq!(
            vmi["metadata"]["annotations"]["kubevirt.io/pci-topology-version"],
            "v3"
        );
    }

    #[test]
    fn vmi_mutator_respects_what_is_given() {
        let vmi = defaulted(
            json!({
                "domain": {
                    "devices": {"autoattachPodInterface": false},
                    "cpu": {"cores": 2, "model": "Westmere"},
                    "memory": {"guest": "2Gi"},
                    "firmware": {"uuid": "5a9fc181-957e-5c32-9e5a-2de5e9673531"},
                    "features": {"acpi": {"enabled": false}, "smm": {}, "hyperv": {"spinlocks": {}, "relaxed": {"enabled": false}}},
                    "clock": {"timer": {"rtc": {}}},
                    "resources": {"limits": {"memory": "4Gi"}}
                }
            }),
            DefaultNetworkBinding::Masquerade,
        );
        let domain = &vmi["spec"]["domain"];
        assert_eq!(domain["cpu"], json!({"cores": 2, "model": "Westmere"}));
        assert_eq!(domain["memory"]["guest"], "2Gi");
        assert_eq!(
            domain["firmware"]["uuid"],
            "5a9fc181-957e-5c32-9e5a-2de5e9673531"
        );
        assert_eq!(domain["features"]["acpi"], json!({"enabled": false}));
        assert_eq!(domain["features"]["smm"], json!({"enabled": true}));
        assert_eq!(
            domain["features"]["hyperv"]["spinlocks"],
            json!({"enabled": true, "retries": 4096})
        );
        assert_eq!(
            domain["features"]["hyperv"]["relaxed"],
            json!({"enabled": false})
        );
        assert_eq!(domain["clock"]["timer"]["rtc"], json!({"enabled": true}));
        assert!(vmi["spec"].get("networks").is_none());
        assert!(domain["devices"].get("interfaces").is_none());
        assert_eq!(
            vmi["status"]["currentCPUTopology"],
            json!({"sockets": 0, "cores": 2, "threads": 0})
        );

        let masquerade = defaulted(
            json!({"domain": {"devices": {}}}),
            DefaultNetworkBinding::Masquerade,
        );
        assert_eq!(
            masquerade["spec"]["domain"]["devices"]["interfaces"],
            json!([{"name": "default", "masquerade": {}}])
        );
        // Memory: limits when there is no request, then the huge page size.
        let from_limit = defaulted(
            json!({"domain": {"devices": {}, "resources": {"limits": {"memory": 1073741824}}}}),
            DefaultNetworkBinding::Bridge,
        );
        assert_eq!(
            from_limit["spec"]["domain"]["memory"]["guest"],
            "1073741824"
        );
        let from_pages = defaulted(
            json!({"domain": {"devices": {}, "memory": {"hugepages": {"pageSize": "1Gi"}}}}),
            DefaultNetworkBinding::Bridge,
        );
        assert_eq!(from_pages["spec"]["domain"]["memory"]["guest"], "1Gi");
        let none = defaulted(
            json!({"domain": {"devices": {}}}),
            DefaultNetworkBinding::Bridge,
        );
        assert_eq!(none["spec"]["domain"]["memory"], json!({}));
        assert_eq!(none["spec"]["domain"]["cpu"]["sockets"], 1);
        assert!(none["status"].get("memory").is_none());
    }

    #[test]
    fn migration_mutator_labels_the_vmi() {
        let mut vmim = json!({"metadata": {"name": "m"}, "spec": {"vmiName": "vm1"}});
        default_vmim_on_create(&mut vmim);
        assert_eq!(
            vmim["metadata"]["labels"],
            json!({"kubevirt.io/vmi-name": "vm1"})
        );
        assert_eq!(
            vmim["metadata"]["finalizers"],
            json!(["kubevirt.io/migrationJobFinalize"])
        );
        let mut unnamed = json!({"metadata": {"labels": "odd"}, "spec": {"vmiName": "vm1"}});
        default_vmim_on_create(&mut unnamed);
        assert_eq!(unnamed["metadata"]["labels"], "odd");
        let mut empty = json!({"spec": {}});
        default_vmim_on_create(&mut empty);
        assert_eq!(empty, json!({"spec": {}}));
    }

    #[test]
    fn wrong_types_are_left_for_validation() {
        let vmi = defaulted(
            json!({"domain": {"devices": {"disks": "many"}, "cpu": 4}, "volumes": [{"name": "a"}]}),
            DefaultNetworkBinding::Bridge,
        );
        assert_eq!(vmi["spec"]["domain"]["devices"]["disks"], "many");
        assert_eq!(vmi["spec"]["domain"]["cpu"], 4);
        let mut not_object = json!({"spec": "x"});
        default_vmi(&mut not_object, DefaultNetworkBinding::Bridge);
        assert_eq!(not_object, json!({"spec": "x"}));
    }
}
