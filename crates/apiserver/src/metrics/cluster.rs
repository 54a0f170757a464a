//! What a scrape reads from the store: `apiserver_storage_objects` and KubeVirt's
//! virt-controller series (`kubevirt_vmi_info`, `kubevirt_vm_info`, the migrations'
//! results, times and counts by phase, the last downtime of each VMI's migration).

use std::collections::HashSet;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry as Metrics;
use serde_json::Value;
use store::ListOptions;

use super::phases::parse_time;
use crate::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

/// `apiserver_storage_objects`: how many objects of each kind the store holds.
pub(super) async fn storage_objects(registry: &Registry, out: &mut Metrics) {
    let objects = Family::<ResourceLabels, Gauge>::default();
    let mut counted = HashSet::new();
    for reg in registry.registrations() {
        let prefix = Registry::resource_prefix(reg.info);
        // Two views of one kind (Events) are counted once, under the stored one.
        if !counted.insert(prefix.clone()) || reg.info.group == crate::events::GROUP {
            continue;
        }
        let one = ListOptions {
            limit: Some(1),
            ..ListOptions::default()
        };
        match registry.store.list(&prefix, one).await {
            Ok(listed) => {
                let resource = if reg.info.group.is_empty() {
                    reg.info.plural.to_string()
                } else {
                    format!("{}.{}", reg.info.plural, reg.info.group)
                };
                objects
                    .get_or_create(&ResourceLabels { resource })
                    .set((listed.items.len() + listed.remaining) as i64);
            }
            Err(e) => tracing::warn!("metrics: counting {prefix}: {e}"),
        }
    }
    out.register(
        "apiserver_storage_objects",
        "Number of stored objects at the time of last check split by kind",
        objects,
    );
}

/// Every stored object under `prefix`, decoded.
async fn stored(registry: &Registry, prefix: &str) -> Vec<Value> {
    match registry.store.list(prefix, ListOptions::default()).await {
        Ok(listed) => listed
            .items
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect(),
        Err(e) => {
            tracing::warn!("metrics: reading {prefix}: {e}");
            Vec::new()
        }
    }
}

fn text<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// An annotation KubeVirt reads a VM's os, workload and flavor from, or `<none>`.
fn template_annotation(obj: &Value, pointer: &str, key: &str) -> String {
    obj.pointer(pointer)
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .unwrap_or("<none>")
        .to_string()
}

fn labels(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// `kubevirt_vmi_status_addresses` and `kubevirt_vmi_vnic_info` of the VMIs.
#[derive(Default)]
struct Nics {
    addresses: Family<Vec<(String, String)>, Gauge>,
    vnics: Family<Vec<(String, String)>, Gauge>,
}

impl Nics {
    fn add(&self, vmi: &Value) {
        let (namespace, name) = (
            text(vmi, "/metadata/namespace"),
            text(vmi, "/metadata/name"),
        );
        let node = text(vmi, "/status/nodeName");
        let list = |pointer: &str| {
            vmi.pointer(pointer)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        for status in list("/status/interfaces") {
            let ips = status["ipAddresses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for ip in ips.iter().filter_map(Value::as_str) {
                self.addresses
                    .get_or_create(&labels(&[
                        ("node", node.to_string()),
                        ("namespace", namespace.to_string()),
                        ("name", name.to_string()),
                        ("vnic_name", text(&status, "/name").to_string()),
                        (
                            "interface_name",
                            text(&status, "/interfaceName").to_string(),
                        ),
                        ("address", ip.to_string()),
                        ("type", "InternalIP".to_string()),
                    ]))
                    .set(1);
            }
        }
        let networks = list("/spec/networks");
        for nic in list("/spec/domain/devices/interfaces") {
            let vnic = text(&nic, "/name");
            let binding = ["masquerade", "bridge", "sriov", "slirp", "passt"]
                .into_iter()
                .find(|b| nic.get(*b).is_some());
            let (binding_type, binding_name) = match (binding, text(&nic, "/binding/name")) {
                (Some(core), _) => ("core", core),
                (None, "") => ("core", "bridge"),
                (None, plugin) => ("plugin", plugin),
            };
            let network = networks
                .iter()
                .find(|n| text(n, "/name") == vnic)
                .map(|n| match text(n, "/multus/networkName") {
                    "" => "pod networking".to_string(),
                    multus => multus.to_string(),
                })
                .unwrap_or_default();
            let model = match text(&nic, "/model") {
                "" => "virtio",
                model => model,
            };
            self.vnics
                .get_or_create(&labels(&[
                    ("name", name.to_string()),
                    ("namespace", namespace.to_string()),
                    ("vnic_name", vnic.to_string()),
                    ("binding_type", binding_type.to_string()),
                    ("network", network),
                    ("binding_name", binding_name.to_string()),
                    ("model", model.to_string()),
                ]))
                .set(1);
        }
    }
}

/// What each VM's template asks for, as virt-controller reports it: the guest's memory
/// and CPU topology (`source` "guest" and "domain"), the template's resource requests
/// (`source` "requests") and limits.
#[derive(Default)]
struct VmResources {
    requests: Family<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>>,
    limits: Family<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl VmResources {
    fn add(&self, vm: &Value) {
        use kubevirt_api::quantity::Quantity;
        let domain = "/spec/template/spec/domain";
        let series = |resource: &str, unit: &str, source: &str| {
            labels(&[
                ("name", text(vm, "/metadata/name").to_string()),
                ("namespace", text(vm, "/metadata/namespace").to_string()),
                ("resource", resource.to_string()),
                ("unit", unit.to_string()),
                ("source", source.to_string()),
            ])
        };
        let quantity = |pointer: &str| vm.pointer(pointer).and_then(Quantity::from_json);
        if let Some(guest) = quantity(&format!("{domain}/memory/guest")) {
            self.requests
                .get_or_create(&series("memory", "bytes", "guest"))
                .set(guest.value() as f64);
        }
        for unit in ["cores", "sockets", "threads"] {
            if let Some(count) = vm
                .pointer(&format!("{domain}/cpu/{unit}"))
                .and_then(Value::as_u64)
            {
                self.requests
                    .get_or_create(&series("cpu", unit, "domain"))
                    .set(count as f64);
            }
        }
        // Limits carry no `source`: they come from the template's resources alone.
        let limit = |resource: &str, unit: &str| {
            let mut labels = series(resource, unit, "");
            labels.retain(|(key, _)| key != "source");
            labels
        };
        for (kind, family) in [("requests", &self.requests), ("limits", &self.limits)] {
            let labels = |resource: &str, unit: &str| match kind {
                "requests" => series(resource, unit, "requests"),
                _ => limit(resource, unit),
            };
            if let Some(memory) = quantity(&format!("{domain}/resources/{kind}/memory")) {
                family
                    .get_or_create(&labels("memory", "bytes"))
                    .set(memory.value() as f64);
            }
            if let Some(cpu) = quantity(&format!("{domain}/resources/{kind}/cpu")) {
                family
                    .get_or_create(&labels("cpu", "cores"))
                    .set(cpu.milli_value() as f64 / 1000.0);
            }
        }
    }
}

/// KubeVirt's virt-controller series: `kubevirt_vmi_info`, `kubevirt_vm_info`, and the
/// migrations' results, times and counts by phase.
pub(super) async fn kubevirt_series(registry: &Registry, out: &mut Metrics) {
    use kubevirt_api::resources::{
        VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, VIRTUAL_MACHINE_INSTANCE_MIGRATION,
    };
    let vmi_info = Family::<Vec<(String, String)>, Gauge>::default();
    let downtime =
        Family::<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let nics = Nics::default();
    for vmi in stored(
        registry,
        &Registry::resource_prefix(&VIRTUAL_MACHINE_INSTANCE),
    )
    .await
    {
        let name = text(&vmi, "/metadata/name");
        nics.add(&vmi);
        let transfer = "/status/migrationState/transfer/downtimeMilliseconds";
        if let Some(milliseconds) = vmi.pointer(transfer).and_then(Value::as_u64) {
            downtime
                .get_or_create(&labels(&[
                    ("namespace", text(&vmi, "/metadata/namespace").to_string()),
                    ("name", name.to_string()),
                    ("node", text(&vmi, "/status/nodeName").to_string()),
                ]))
                .set(milliseconds as f64 / 1000.0);
        }
        let annotations = "/metadata/annotations";
        let guest = |field: &str| text(&vmi, &format!("/status/guestOSInfo/{field}")).to_string();
        let evictable = vmi
            .pointer("/spec/evictionStrategy")
            .and_then(Value::as_str)
            .is_some_and(|s| s == "LiveMigrate" || s == "External");
        vmi_info
            .get_or_create(&labels(&[
                ("node", text(&vmi, "/status/nodeName").to_string()),
                ("namespace", text(&vmi, "/metadata/namespace").to_string()),
                ("name", name.to_string()),
                ("phase", text(&vmi, "/status/phase").to_lowercase()),
                (
                    "os",
                    template_annotation(&vmi, annotations, "vm.kubevirt.io/os"),
                ),
                (
                    "workload",
                    template_annotation(&vmi, annotations, "vm.kubevirt.io/workload"),
                ),
                (
                    "flavor",
                    template_annotation(&vmi, annotations, "vm.kubevirt.io/flavor"),
                ),
                (
                    "instance_type",
                    template_annotation(&vmi, annotations, "kubevirt.io/cluster-instancetype-name"),
                ),
                (
                    "preference",
                    template_annotation(&vmi, annotations, "kubevirt.io/cluster-preference-name"),
                ),
                ("guest_os_kernel_release", guest("kernelRelease")),
                ("guest_os_machine", guest("machine")),
                (
                    "guest_os_arch",
                    text(&vmi, "/spec/architecture").to_string(),
                ),
                ("guest_os_name", guest("name")),
                ("guest_os_version_id", guest("versionId")),
                ("evictable", evictable.to_string()),
                ("outdated", "false".into()),
                (
                    "vmi_pod",
                    match text(&vmi, "/status/nodeName") {
                        "" => String::new(),
                        node => kubevirt_api::names::launcher_pod(
                            name,
                            text(&vmi, "/metadata/uid"),
                            node,
                        ),
                    },
                ),
            ]))
            .set(1);
    }
    out.register(
        "kubevirt_vmi_info",
        "Information about VirtualMachineInstances",
        vmi_info,
    );
    out.register(
        "kubevirt_vmi_migration_last_downtime_duration_seconds",
        "How long the guest was paused in the VMI's last live migration",
        downtime,
    );
    out.register(
        "kubevirt_vmi_status_addresses",
        "The addresses of a VirtualMachineInstance. This metric provides the address of an available network interface associated with the VMI in the 'address' label, and about the type of address, such as internal IP, in the 'type' label",
        nics.addresses,
    );
    out.register(
        "kubevirt_vmi_vnic_info",
        "Details of VirtualMachineInstance (VMI) vNIC interfaces, such as vNIC name, binding type, network name, and binding name for each vNIC of a running instance",
        nics.vnics,
    );

    let vm_info = Family::<Vec<(String, String)>, Gauge>::default();
    let resources = VmResources::default();
    for vm in stored(registry, &Registry::resource_prefix(&VIRTUAL_MACHINE)).await {
        resources.add(&vm);
        let annotations = "/spec/template/metadata/annotations";
        let status = text(&vm, "/status/printableStatus").to_lowercase();
        let group = match status.as_str() {
            "running" => "running",
            "starting" | "provisioning" | "waitingforvolumebinding" => "starting",
            "migrating" => "migrating",
            "stopped" | "paused" | "stopping" | "terminating" | "" => "non_running",
            _ => "error",
        };
        vm_info
            .get_or_create(&labels(&[
                ("name", text(&vm, "/metadata/name").to_string()),
                ("namespace", text(&vm, "/metadata/namespace").to_string()),
                (
                    "os",
                    template_annotation(&vm, annotations, "vm.kubevirt.io/os"),
                ),
                (
                    "workload",
                    template_annotation(&vm, annotations, "vm.kubevirt.io/workload"),
                ),
                (
                    "flavor",
                    template_annotation(&vm, annotations, "vm.kubevirt.io/flavor"),
                ),
                (
                    "machine_type",
                    text(&vm, "/spec/template/spec/domain/machine/type").to_string(),
                ),
                (
                    "instance_type",
                    text(&vm, "/spec/instancetype/name").to_string(),
                ),
                ("preference", text(&vm, "/spec/preference/name").to_string()),
                ("status", status.clone()),
                ("status_group", group.to_string()),
            ]))
            .set(1);
    }
    out.register(
        "kubevirt_vm_info",
        "Information about Virtual Machines",
        vm_info,
    );
    out.register(
        "kubevirt_vm_resource_requests",
        "Resources requested by Virtual Machine",
        resources.requests,
    );
    out.register(
        "kubevirt_vm_resource_limits",
        "Resources limit by Virtual Machine",
        resources.limits,
    );

    const BUCKETS: [&str; 4] = ["pending", "scheduling", "running", "unset"];
    let mut in_phase = [0i64; 4];
    let succeeded = Family::<Vec<(String, String)>, Gauge>::default();
    let failed = Family::<Vec<(String, String)>, Gauge>::default();
    let started =
        Family::<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let ended =
        Family::<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    for vmim in stored(
        registry,
        &Registry::resource_prefix(&VIRTUAL_MACHINE_INSTANCE_MIGRATION),
    )
    .await
    {
        let phase = text(&vmim, "/status/phase");
        let bucket = match phase {
            "" => Some("unset"),
            "Pending" => Some("pending"),
            "Scheduling" | "Scheduled" | "PreparingTarget" | "TargetReady" => Some("scheduling"),
            "Running" => Some("running"),
            _ => None,
        };
        if let Some(i) = bucket.and_then(|b| BUCKETS.iter().position(|x| *x == b)) {
            in_phase[i] += 1;
        }
        let namespace = text(&vmim, "/metadata/namespace").to_string();
        let vmi = text(&vmim, "/spec/vmiName").to_string();
        let name = text(&vmim, "/metadata/name").to_string();
        let result = labels(&[
            ("vmi", vmi.clone()),
            ("vmim", name.clone()),
            ("namespace", namespace.clone()),
        ]);
        match phase {
            "Succeeded" => succeeded.get_or_create(&result).set(1),
            "Failed" => failed.get_or_create(&result).set(1),
            _ => 0,
        };
        let state = "/status/migrationState";
        let node = text(&vmim, &format!("{state}/sourceNode")).to_string();
        let timing = labels(&[
            ("node", node),
            ("namespace", namespace),
            ("name", vmi),
            ("migration_name", name),
        ]);
        if let Some(at) = parse_time(text(&vmim, &format!("{state}/startTimestamp"))) {
            started
                .get_or_create(&timing)
                .set(at.timestamp_millis() as f64 / 1000.0);
        }
        if let Some(at) = parse_time(text(&vmim, &format!("{state}/endTimestamp"))) {
            let mut with_status = timing.clone();
            with_status.push(("status".into(), phase.to_lowercase()));
            ended
                .get_or_create(&with_status)
                .set(at.timestamp_millis() as f64 / 1000.0);
        }
    }
    for (bucket, count) in BUCKETS.into_iter().zip(in_phase) {
        let gauge: Gauge = Gauge::default();
        gauge.set(count);
        out.register(
            format!("kubevirt_vmi_migrations_in_{bucket}_phase"),
            format!("Number of current {bucket} migrations"),
            gauge,
        );
    }
    out.register(
        "kubevirt_vmi_migration_succeeded",
        "Indicates if the VMI migration succeeded",
        succeeded,
    );
    out.register(
        "kubevirt_vmi_migration_failed",
        "Indicates if the VMI migration failed",
        failed,
    );
    out.register(
        "kubevirt_vmi_migration_start_time_seconds",
        "The time at which the migration started",
        started,
    );
    out.register(
        "kubevirt_vmi_migration_end_time_seconds",
        "The time at which the migration ended",
        ended,
    );
}
