//! VirtualMachineInstance: a running (or about to run) guest. Here are the one definition
//! of a VMI's phase ([`VmiPhase`]) and of its migration state ([`MigrationState`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Toleration};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::object::Condition;
use crate::devices::{Disk, Interface, Network};
use crate::volumes::Volume;

crate::kube_object! {
    /// `kubevirt.io/v1` VirtualMachineInstance.
    pub struct VirtualMachineInstance {
        group: "kubevirt.io",
        version: "v1",
        kind: "VirtualMachineInstance",
        plural: "virtualmachineinstances",
        scope: NamespaceResourceScope,
        spec: VmiSpec,
        status: VmiStatus,
    }
}

crate::open_struct! {
    /// What the guest is.
    pub struct VmiSpec {
        domain: Domain = "domain",
        networks: Vec<Network> = "networks",
        volumes: Vec<Volume> = "volumes",
        node_selector: BTreeMap<String, String> = "nodeSelector",
        affinity: Affinity = "affinity",
        tolerations: Vec<Toleration> = "tolerations",
        /// `LiveMigrate`, `LiveMigrateIfPossible`, `External` or `None`.
        eviction_strategy: String = "evictionStrategy",
        termination_grace_period_seconds: i64 = "terminationGracePeriodSeconds",
        /// `Paused`: the guest starts with its vCPUs stopped.
        start_strategy: String = "startStrategy",
        hostname: String = "hostname",
        subdomain: String = "subdomain",
    }
}

impl VmiSpec {
    pub fn volumes(&self) -> &[Volume] {
        self.volumes.as_deref().unwrap_or_default()
    }

    pub fn networks(&self) -> &[Network] {
        self.networks.as_deref().unwrap_or_default()
    }

    pub fn devices(&self) -> Option<&Devices> {
        self.domain.as_ref()?.devices.as_ref()
    }

    pub fn disks(&self) -> &[Disk] {
        self.devices()
            .and_then(|d| d.disks.as_deref())
            .unwrap_or_default()
    }

    pub fn interfaces(&self) -> &[Interface] {
        self.devices()
            .and_then(|d| d.interfaces.as_deref())
            .unwrap_or_default()
    }

    /// The guest's memory as written (`memory.guest`, else the memory request).
    pub fn guest_memory(&self) -> Option<&Value> {
        let domain = self.domain.as_ref()?;
        domain
            .memory
            .as_ref()
            .and_then(|m| m.guest.as_ref())
            .or_else(|| domain.resources.as_ref()?.requests.as_ref()?.get("memory"))
    }

    pub fn firmware(&self) -> Option<&Firmware> {
        self.domain.as_ref()?.firmware.as_ref()
    }

    /// The kernel and initrd image, when the guest boots from one.
    pub fn kernel_boot_container(&self) -> Option<&KernelBootContainer> {
        self.firmware()?.kernel_boot.as_ref()?.container.as_ref()
    }

    pub fn tolerations(&self) -> &[Toleration] {
        self.tolerations.as_deref().unwrap_or_default()
    }

    /// Whether the guest starts with its vCPUs stopped (`startStrategy: Paused`).
    pub fn starts_paused(&self) -> bool {
        self.start_strategy.as_deref() == Some(START_PAUSED)
    }

    /// Whether the interface named `name` is on the pod network.
    pub fn on_pod_network(&self, name: &str) -> bool {
        self.networks().iter().any(|n| n.name == name && n.pod)
    }

    /// The number of the Multus network `name` among the VMI's Multus networks, from 1:
    /// its interface in the Pod is `net{number}`, as Multus names them.
    pub fn multus_number(&self, name: &str) -> Option<usize> {
        self.networks()
            .iter()
            .filter(|n| n.multus.is_some())
            .position(|n| n.name == name)
            .map(|i| i + 1)
    }
}

/// `startStrategy` of a guest that starts paused.
pub const START_PAUSED: &str = "Paused";

crate::open_struct! {
    /// `spec.domain`: the virtual hardware.
    pub struct Domain {
        cpu: Cpu = "cpu",
        memory: Memory = "memory",
        resources: Resources = "resources",
        machine: Machine = "machine",
        firmware: Firmware = "firmware",
        /// By name (`acpi`, `smm`, `hyperv`, ...): see [`Domain::feature_enabled`].
        features: serde_json::Map<String, Value> = "features",
        devices: Devices = "devices",
    }
}

impl Domain {
    /// Whether the feature `name` is on: `default` when the spec leaves it out, on when
    /// it names it without `enabled: false` (KubeVirt's rule).
    pub fn feature_enabled(&self, name: &str, default: bool) -> bool {
        match self.features.as_ref().and_then(|f| f.get(name)) {
            None => default,
            Some(feature) => feature
                .get("enabled")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        }
    }
}

crate::open_struct! {
    pub struct Cpu {
        cores: u32 = "cores",
        sockets: u32 = "sockets",
        threads: u32 = "threads",
        model: String = "model",
    }
}

crate::open_struct! {
    pub struct Memory {
        /// A quantity (`128Mi`), as written.
        guest: Value = "guest",
        hugepages: Hugepages = "hugepages",
    }
}

crate::open_struct! {
    pub struct Hugepages {
        page_size: String = "pageSize",
    }
}

crate::open_struct! {
    /// `requests` and `limits` of `cpu` and `memory`, quantities as written.
    pub struct Resources {
        requests: BTreeMap<String, Value> = "requests",
        limits: BTreeMap<String, Value> = "limits",
    }
}

crate::open_struct! {
    pub struct Machine {
        type_: String = "type",
    }
}

crate::open_struct! {
    pub struct Firmware {
        uuid: String = "uuid",
        serial: String = "serial",
        bootloader: Bootloader = "bootloader",
        kernel_boot: KernelBoot = "kernelBoot",
    }
}

crate::open_struct! {
    pub struct Bootloader {
        efi: Efi = "efi",
        bios: Value = "bios",
    }
}

crate::open_struct! {
    pub struct Efi {
        /// KubeVirt's default is true.
        secure_boot: bool = "secureBoot",
    }
}

crate::open_struct! {
    /// A kernel and initrd taken from a container image instead of a disk.
    pub struct KernelBoot {
        kernel_args: String = "kernelArgs",
        container: KernelBootContainer = "container",
    }
}

crate::open_struct! {
    pub struct KernelBootContainer {
        image: String = "image",
        image_pull_secret: String = "imagePullSecret",
        image_pull_policy: String = "imagePullPolicy",
        kernel_path: String = "kernelPath",
        initrd_path: String = "initrdPath",
    }
}

crate::open_struct! {
    /// `spec.domain.devices`.
    pub struct Devices {
        disks: Vec<Disk> = "disks",
        interfaces: Vec<Interface> = "interfaces",
        autoattach_serial_console: bool = "autoattachSerialConsole",
        autoattach_graphics_device: bool = "autoattachGraphicsDevice",
        /// A virtio memory balloon (default on), which reports the guest's memory stats.
        autoattach_mem_balloon: bool = "autoattachMemBalloon",
        host_devices: Vec<Value> = "hostDevices",
        gpus: Vec<Value> = "gpus",
        watchdog: Watchdog = "watchdog",
        /// A virtio RNG, when present (its settings are QEMU's defaults).
        rng: Value = "rng",
    }
}

crate::open_struct! {
    pub struct Watchdog {
        name: String = "name",
        i6300esb: WatchdogDevice = "i6300esb",
    }
}

crate::open_struct! {
    pub struct WatchdogDevice {
        /// `poweroff`, `reset` (the default) or `shutdown`.
        action: String = "action",
    }
}

crate::string_enum! {
    /// `status.phase` of a VirtualMachineInstance.
    pub enum VmiPhase {
        Unset = "",
        Pending = "Pending",
        Scheduling = "Scheduling",
        Scheduled = "Scheduled",
        Running = "Running",
        Succeeded = "Succeeded",
        Failed = "Failed",
        Unknown = "Unknown",
    }
}

impl VmiPhase {
    /// Succeeded or Failed: the VMI never runs again.
    pub fn is_final(self) -> bool {
        matches!(self, VmiPhase::Succeeded | VmiPhase::Failed)
    }
}

crate::open_struct! {
    /// What the guest does and where.
    pub struct VmiStatus {
        phase: VmiPhase = "phase",
        /// Why it failed, in one word.
        reason: String = "reason",
        node_name: String = "nodeName",
        conditions: Vec<Condition> = "conditions",
        phase_transition_timestamps: Vec<PhaseTransition> = "phaseTransitionTimestamps",
        interfaces: Vec<InterfaceStatus> = "interfaces",
        migration_state: MigrationState = "migrationState",
        /// `LiveMigration` or `BlockMigration`.
        migration_method: String = "migrationMethod",
        volume_status: Vec<VolumeStatus> = "volumeStatus",
        kernel_boot_status: KernelBootStatus = "kernelBootStatus",
        machine: Machine = "machine",
        /// The node a drain is moving it off (KubeVirt's).
        evacuation_node_name: String = "evacuationNodeName",
        /// How the node runs the vCPUs (`kvm`, `tcg`): a virtplane field.
        accelerator: String = "accelerator",
        /// Where the ports of masquerade interfaces are forwarded from on the node (a
        /// virtplane field of the user-mode network).
        port_forwards: Vec<Value> = "portForwards",
    }
}

impl VirtualMachineInstance {
    pub fn phase(&self) -> VmiPhase {
        self.status.phase.unwrap_or_default()
    }

    /// The node it runs on, once bound.
    pub fn node_name(&self) -> Option<&str> {
        self.status.node_name.as_deref().filter(|n| !n.is_empty())
    }

    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        super::object::find(&self.status.conditions, kind)
    }

    pub fn migration_state(&self) -> Option<&MigrationState> {
        self.status.migration_state.as_ref()
    }

    /// The migration in flight, if one is.
    pub fn migration_in_flight(&self) -> Option<&MigrationState> {
        self.migration_state().filter(|m| m.in_flight())
    }

    /// `phaseTransitionTimestamps` with `phase` entered `at`: the one way a VMI's phase
    /// change is recorded, whoever makes it.
    pub fn transitions_entering(&self, phase: VmiPhase, at: &str) -> Vec<PhaseTransition> {
        PhaseTransition::appended(&self.status.phase_transition_timestamps, phase.as_str(), at)
    }

    /// When it entered `phase`, from `phaseTransitionTimestamps`.
    pub fn entered(&self, phase: VmiPhase) -> Option<&str> {
        self.status
            .phase_transition_timestamps
            .iter()
            .flatten()
            .find(|t| t.phase.as_deref() == Some(phase.as_str()))
            .and_then(|t| t.phase_transition_timestamp.as_deref())
    }
}

crate::open_struct! {
    /// One entry of `phaseTransitionTimestamps` (of a VMI or a migration).
    pub struct PhaseTransition {
        phase: String = "phase",
        phase_transition_timestamp: String = "phaseTransitionTimestamp",
    }
}

impl PhaseTransition {
    pub fn new(phase: &str, at: &str) -> PhaseTransition {
        PhaseTransition {
            phase: Some(phase.into()),
            phase_transition_timestamp: Some(at.into()),
            ..PhaseTransition::default()
        }
    }

    /// `transitions` with `phase` entered `at` added: the one way a phase change is
    /// recorded, of a VMI or a migration, whoever makes it.
    pub fn appended(
        transitions: &Option<Vec<PhaseTransition>>,
        phase: &str,
        at: &str,
    ) -> Vec<PhaseTransition> {
        let mut transitions = transitions.clone().unwrap_or_default();
        transitions.push(PhaseTransition::new(phase, at));
        transitions
    }
}

crate::open_struct! {
    /// One guest interface as the guest (or the domain) reports it.
    pub struct InterfaceStatus {
        name: String = "name",
        mac: String = "mac",
        ip_address: String = "ipAddress",
        ip_addresses: Vec<String> = "ipAddresses",
        interface_name: String = "interfaceName",
        /// `domain`, `guest-agent` or both.
        info_source: String = "infoSource",
    }
}

crate::open_struct! {
    pub struct VolumeStatus {
        name: String = "name",
        target: String = "target",
        container_disk_volume: ImagePin = "containerDiskVolume",
    }
}

crate::open_struct! {
    pub struct KernelBootStatus {
        /// The image the kernel was pulled as (`registry/repository@sha256:…`).
        image_id: String = "imageID",
    }
}

crate::open_struct! {
    /// The digest an image was pulled as.
    pub struct ImagePin {
        image_id: String = "imageID",
    }
}

crate::open_struct! {
    /// `status.migrationState`: the one definition of where a migration of the VMI stands.
    pub struct MigrationState {
        migration_uid: String = "migrationUid",
        source_node: String = "sourceNode",
        target_node: String = "targetNode",
        target_node_address: String = "targetNodeAddress",
        start_timestamp: String = "startTimestamp",
        end_timestamp: String = "endTimestamp",
        completed: bool = "completed",
        failed: bool = "failed",
        abort_requested: bool = "abortRequested",
        failure_reason: String = "failureReason",
        abort_status: String = "abortStatus",
        mode: String = "mode",
        /// The target's listening ports (keys) and their roles: [`MIGRATION_PORT_ROLE`] for
        /// the migration stream, [`DISK_PORT_ROLE`] for the disk copy.
        target_direct_migration_node_ports: BTreeMap<String, i64> = "targetDirectMigrationNodePorts",
        target_node_domain_detected: bool = "targetNodeDomainDetected",
        target_node_domain_ready_timestamp: String = "targetNodeDomainReadyTimestamp",
        /// The settings in force, frozen at hand-off.
        migration_configuration: Value = "migrationConfiguration",
        migration_policy_name: String = "migrationPolicyName",
        transfer: Transfer = "transfer",
    }
}

/// KubeVirt's port numbers, used as the roles of `targetDirectMigrationNodePorts`.
pub const MIGRATION_PORT_ROLE: i64 = 49152;
pub const DISK_PORT_ROLE: i64 = 49153;

impl MigrationState {
    /// The one definition of "a migration is in flight": it has not ended, neither
    /// completed nor failed (it may not have started moving memory yet).
    pub fn in_flight(&self) -> bool {
        self.completed != Some(true) && self.failed != Some(true) && self.end_timestamp.is_none()
    }

    /// In flight and the guest's state is moving (QEMU's migration started): the VM shows
    /// `Migrating`.
    pub fn moving(&self) -> bool {
        self.in_flight() && self.start_timestamp.is_some()
    }
}

/// `migrationState.transfer` (a virtplane extension): what a finished migration moved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transfer {
    pub total_time_milliseconds: u64,
    pub downtime_milliseconds: u64,
    pub setup_time_milliseconds: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi() -> Value {
        json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default", "uid": "u1",
                         "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {
                "domain": {"cpu": {"cores": 2}, "memory": {"guest": "128Mi"},
                           "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                                       "interfaces": [{"name": "default", "masquerade": {}}],
                                       "rng": {}},
                           "clock": {"utc": {}}},
                "networks": [{"name": "default", "pod": {}}],
                "volumes": [{"name": "root", "containerDisk": {"image": "r/i:1"}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "priorityClassName": "high"
            },
            "status": {"phase": "Running", "nodeName": "n1",
                       "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null}],
                       "migrationState": {"targetNode": "n2", "targetPod": "p"},
                       "guestOSInfo": {"id": "fedora"}}
        })
    }

    #[test]
    fn a_vmi_reads_typed_and_writes_back_what_it_read() {
        let raw = vmi();
        let vmi: VirtualMachineInstance = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(vmi.phase(), VmiPhase::Running);
        assert_eq!(vmi.node_name(), Some("n1"));
        assert_eq!(vmi.spec.disks()[0].bus, "virtio");
        assert!(vmi.spec.on_pod_network("default"));
        assert_eq!(vmi.spec.volumes()[0].name, "root");
        assert!(vmi
            .condition("Ready")
            .is_some_and(|c| c.is("Ready", "True")));
        assert_eq!(
            vmi.migration_in_flight()
                .and_then(|m| m.target_node.as_deref()),
            Some("n2")
        );
        // managedFields are not kept; everything else is, as written.
        let mut expected = raw;
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        expected["status"]["conditions"][0]
            .as_object_mut()
            .unwrap()
            .remove("lastProbeTime");
        assert_eq!(serde_json::to_value(&vmi).unwrap(), expected);
    }

    #[test]
    fn only_an_unfinished_migration_is_in_flight() {
        let of = |m: Value| serde_json::from_value::<MigrationState>(m).unwrap();
        assert!(of(json!({"targetNode": "b"})).in_flight());
        assert!(!of(json!({"targetNode": "b"})).moving());
        assert!(of(json!({"startTimestamp": "t"})).moving());
        assert!(!of(json!({"completed": true})).in_flight());
        assert!(!of(json!({"failed": true})).in_flight());
        assert!(!of(json!({"startTimestamp": "t", "endTimestamp": "u"})).in_flight());
    }

    #[test]
    fn phases() {
        assert!(VmiPhase::Failed.is_final() && VmiPhase::Succeeded.is_final());
        assert!(!VmiPhase::Running.is_final());
        assert_eq!(VmiPhase::parse("Bogus"), VmiPhase::Unset);
        let empty: VirtualMachineInstance = serde_json::from_value(json!({})).unwrap();
        assert_eq!(empty.phase(), VmiPhase::Unset);
        assert_eq!(
            serde_json::to_value(&empty).unwrap(),
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {}})
        );
    }
}
