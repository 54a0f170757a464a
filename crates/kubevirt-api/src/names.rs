//! Labels, annotations, finalizers and condition types that more than one component reads
//! or writes: one definition each, so the server, the controllers and the node agents
//! never disagree on a spelling.

/// Labels KubeVirt sets.
pub mod labels {
    /// The node a VMI runs on.
    pub const NODE_NAME: &str = "kubevirt.io/nodeName";
    /// The VMI a migration moves (set on VMIMs).
    pub const VMI_NAME: &str = "kubevirt.io/vmi-name";
    pub const SCHEDULABLE: &str = "kubevirt.io/schedulable";
    /// On a VMI being migrated: the node it moves to, so that node's agent sees it.
    pub const MIGRATION_TARGET_NODE: &str = "kubevirt.io/migrationTargetNodeName";
    /// On an evacuation VMIM: the node being drained.
    pub const EVACUATION_MIGRATION: &str = "kubevirt.io/evacuationMigration";
    /// Which hypervisor backend a node runs (`qemu`, `sim`).
    pub const HYPERVISOR: &str = "virtplane.io/hypervisor";
    /// How a node runs guests' vCPUs (`kvm`, `tcg`).
    pub const ACCEL: &str = "virtplane.io/accel";
}

/// Annotations, KubeVirt's and our own requests from the subresources to the node agent.
pub mod annotations {
    /// The desired pause state, written by `pause` (`"true"`) and removed by `unpause`.
    pub const PAUSED: &str = "virtplane.io/paused";
    /// Time of the latest `unpause`: also resumes a guest that stopped on its own (a disk
    /// I/O error), which the pause state alone cannot say.
    pub const UNPAUSE_REQUESTED: &str = "virtplane.io/unpause-requested";
    /// The `UNPAUSE_REQUESTED` value the agent last carried out.
    pub const UNPAUSE_DONE: &str = "virtplane.io/unpause-done";
    /// Time of the latest soft-reboot request.
    pub const SOFT_REBOOT_REQUESTED: &str = "virtplane.io/soft-reboot-requested";
    /// The `SOFT_REBOOT_REQUESTED` value the agent last carried out.
    pub const SOFT_REBOOT_DONE: &str = "virtplane.io/soft-reboot-done";
    /// SHA-256 of a node agent's serving certificate, published on its Node.
    pub const AGENT_SERVING_CERT_SHA256: &str = "virtplane.io/agent-serving-cert-sha256";
    /// On a bound PersistentVolumeClaim: the disk file behind it, published by the volume
    /// controller so that node agents learn it from the API (a PersistentVolume's
    /// `hostPath`, in a Kubernetes cluster).
    pub const VOLUME_PATH: &str = "virtplane.io/volume-path";
    /// On an upload DataVolume: the file the upload endpoint received in full, which the
    /// DataVolume controller imports into the claim (and removes).
    pub const UPLOADED_IMAGE: &str = "virtplane.io/uploaded-image";
    /// On a VMIM: how long its target may stay unschedulable before it fails (seconds).
    pub const MIGRATION_UNSCHEDULABLE_TIMEOUT: &str =
        "kubevirt.io/migrationUnschedulablePodTimeoutSeconds";
    /// The node agent's heartbeat, as virt-handler writes it.
    pub const HEARTBEAT: &str = "kubevirt.io/heartbeat";
    /// On a VM's VMI: the VM's generation it was made from.
    pub const VM_GENERATION: &str = "kubevirt.io/vm-generation";
    /// On a Node, beside `spec.podCIDR`: the cluster's address plan, written by node IPAM
    /// so that node agents anywhere learn it from their own Node (as flannel keeps its
    /// node facts in Node annotations).
    pub const CLUSTER_CIDR: &str = "network.virtplane.io/cluster-cidr";
    pub const SERVICE_CIDR: &str = "network.virtplane.io/service-cidr";
    pub const CLUSTER_DOMAIN: &str = "network.virtplane.io/cluster-domain";
    /// How nodes reach each other's subnets: `auto`, `host-gw` or `vxlan`.
    pub const POD_NETWORK_BACKEND: &str = "network.virtplane.io/backend";
}

/// Finalizers.
pub mod finalizers {
    /// On VMIs, removed by the node agent once the guest is gone.
    pub const VMI_FOREGROUND: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
    /// On VMs' VMIs and VMs, removed by the VM controller.
    pub const VM_CONTROLLER: &str = "kubevirt.io/virtualMachineControllerFinalize";
    /// On migrations.
    pub const MIGRATION: &str = "kubevirt.io/migrationJobFinalize";
}

/// VMI condition types and the reasons KubeVirt gives them.
pub mod conditions {
    pub const READY: &str = "Ready";
    pub const PAUSED: &str = "Paused";
    pub const SYNCHRONIZED: &str = "Synchronized";
    pub const LIVE_MIGRATABLE: &str = "LiveMigratable";
    /// A VMI's: whether it found a node (False with reason `Unschedulable`, as a pod's).
    pub const POD_SCHEDULED: &str = "PodScheduled";
    pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
    /// A VM's: a create or delete of its VMI failed, or (virtplane) why its last VMI
    /// failed before it ran.
    pub const FAILURE: &str = "Failure";
    /// A Node's: whether the host has the programs and firmware its guests need beside
    /// QEMU (a virtplane condition; KubeVirt's virt-launcher images carry them).
    pub const HOST_TOOLS_READY: &str = "virtplane.io/HostToolsReady";

    pub const REASON_PAUSED_BY_USER: &str = "PausedByUser";
    pub const MESSAGE_PAUSED_BY_USER: &str = "VMI was paused by user";
    pub const REASON_PAUSED_IO_ERROR: &str = "PausedIOError";
    pub const MESSAGE_PAUSED_IO_ERROR: &str = "VMI was paused, low-level IO error detected";
    /// The vCPUs stopped for another reason than a pause request or a disk error (a
    /// virtplane reason; KubeVirt has none for it).
    pub const REASON_PAUSED_BY_HYPERVISOR: &str = "PausedByHypervisor";
    pub const REASON_GUEST_NOT_RUNNING: &str = "GuestNotRunning";
    /// What a VMI's disks, seeds or QEMU could not be made for (and a VM's VMI).
    pub const REASON_FAILED_CREATE: &str = "FailedCreate";
}

/// The Secret holding the TLS credentials of the migration with this uid (in the VMI's
/// namespace, owned by the migration).
pub fn migration_tls_secret(migration_uid: &str) -> String {
    format!("virtplane-migration-{migration_uid}")
}

/// The letters kube's name generator draws from (no vowels, no look-alikes).
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The launcher Pod's name for the VMI on `node`: the same on every sync (so a create
/// repeated after a crash finds the Pod made), another on another node.
pub fn launcher_pod(vmi: &str, uid: &str, node: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in uid.bytes().chain([0]).chain(node.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let suffix: String = (0..5)
        .map(|i| {
            let index = (hash >> (i * 8)) as usize % ALPHABET.len();
            char::from(ALPHABET[index])
        })
        .collect();
    // kube's generateName keeps the base within 58 characters.
    let mut base = format!("virt-launcher-{vmi}");
    base.truncate(57);
    format!("{}-{suffix}", base.trim_end_matches(['-', '.']))
}
