//! What the agent asks of a hypervisor backend: the steps of a VMI's life, each answered
//! with where things stand, so the agent only writes status and schedules re-checks.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use kubevirt_api::model::VirtualMachineInstance;

use crate::volume_sources::VolumeSources;

/// The images a VMI's disks and kernel were pulled as, each pinned by digest
/// (`registry/repository@sha256:…`): recorded in its status, so that everything after
/// (a start after an agent restart, a migration target) uses exactly those images.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageIds {
    /// By containerDisk volume name.
    pub volumes: BTreeMap<String, String>,
    /// The kernelBoot container's.
    pub kernel: Option<String>,
}

/// Outcome of readying what a VMI needs before it can boot (images, disks, network).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prepared {
    Ready(ImageIds),
    /// A failure the VMI reports as `Synchronized=False` with this reason (e.g. ErrImagePull)
    /// while it is retried.
    Failed {
        reason: String,
        message: String,
    },
    /// This node cannot do it, however often it tries (a host tool is missing): the VMI
    /// fails with this reason, as a virt-launcher that cannot start fails its VMI.
    Unable {
        reason: String,
        message: String,
    },
}

/// What the guest reports once it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestInfo {
    /// (interface name, MAC, IP) of each interface.
    pub interfaces: Vec<(String, String, String)>,
    /// The machine type the hypervisor actually runs.
    pub machine: String,
    /// Where the ports of masquerade interfaces are forwarded from on the node
    /// (`status.portForwards` entries).
    pub port_forwards: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Started {
    Running(GuestInfo),
    /// Still booting; ask again after this long.
    Pending(Duration),
    Failed {
        reason: String,
        message: String,
    },
}

/// Why a guest's vCPUs are stopped while it can still go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseCause {
    /// A pause command (ours: the user's pause, or a start with `startStrategy: Paused`).
    Requested,
    /// A disk request failed and the guest waits for storage to come back.
    IoError,
    /// Anything else that stopped the vCPUs.
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// The vCPUs run; look again after this long (or when the backend signals).
    Running { recheck: Duration },
    /// The vCPUs are stopped, but resuming them can let the guest go on.
    Paused {
        cause: PauseCause,
        message: String,
        recheck: Duration,
    },
    /// The guest cannot go on (its accelerator failed, it panicked): the VMI fails, with
    /// the hypervisor's own words in `message`.
    Halted { reason: String, message: String },
    /// The guest is gone: powered off (`succeeded`) or crashed.
    Exited { succeeded: bool, reason: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopping {
    /// Off: by the guest's own shutdown (`succeeded`) or killed after the grace period.
    Done {
        succeeded: bool,
    },
    Pending(Duration),
}

/// Where the target of a migration listens for the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incoming {
    pub address: String,
    /// The migration stream (RAM and device state).
    pub migration_port: u16,
    /// The NBD server the source copies node-local disks to; `None` when there are none.
    pub disk_port: Option<u16>,
}

/// How a migration runs: QEMU's tuning, and the TLS credentials (file name → PEM, as
/// `tls-creds-x509` names them) when the stream is encrypted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationSettings {
    pub tuning: qemu::migration::Tuning,
    pub credentials: Option<std::collections::BTreeMap<String, String>>,
}

/// How the guest's arrival on the target goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Still coming.
    Waiting,
    /// All of it is here; the target holds it paused until `take_over`.
    Arrived,
    /// The target cannot receive it any more (its hypervisor exited, say why).
    Failed(String),
}

/// How an outgoing migration goes, as the source's driver last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sending {
    Moving(qemu::migration::Progress),
    /// The guest is on the target; the source's vCPUs are stopped for good.
    Done(qemu::migration::Progress),
    /// It did not move; the source runs on. The text is the failure reason.
    Failed(String),
}

#[async_trait]
pub trait Hypervisor: Send + Sync + 'static {
    /// `sim` or `qemu`, shown as a node label.
    fn kind(&self) -> &'static str;
    /// How guests' vCPUs run (`kvm`, `tcg`), shown as a node label and in VMI status;
    /// `None` for backends that run no vCPUs.
    fn accel(&self) -> Option<&'static str> {
        None
    }
    /// CPU (millicores) and memory (bytes) this node offers.
    fn capacity(&self) -> (i64, i64);
    /// What the backend runs on the host beside itself (reported on the Node).
    /// How the node networks its guests, for backends that run guests.
    fn network_report(&self) -> Option<crate::pod_network::Report> {
        None
    }

    /// Where simulated nodes keep their Pods' addresses (followed from their Nodes).
    fn sim_ipam(&self) -> Option<std::sync::Arc<crate::sim_ipam::SimIpam>> {
        None
    }

    /// The node's pod network, for backends whose guests get Pods on it.
    fn pod_network(&self) -> Option<std::sync::Arc<crate::pod_network::PodNetworkSlot>> {
        None
    }

    fn host_tools(&self) -> &'static [crate::host_tools::HostTool] {
        &[]
    }
    /// Readies disks and images; `sources` holds the ConfigMaps and Secrets the VMI's
    /// volumes name, read by the agent.
    async fn prepare(&self, vmi: &VirtualMachineInstance, sources: &VolumeSources) -> Prepared;
    async fn start(&self, vmi: &VirtualMachineInstance, sources: &VolumeSources) -> Started;
    async fn observe(&self, vmi: &VirtualMachineInstance) -> Observed;
    /// Graceful stop (ACPI power-down, then kill after `grace`).
    async fn stop(&self, vmi: &VirtualMachineInstance, grace: Duration) -> Stopping;
    async fn set_paused(&self, vmi: &VirtualMachineInstance, paused: bool) -> Result<(), String>;
    async fn soft_reboot(&self, vmi: &VirtualMachineInstance) -> Result<(), String>;
    /// Releases everything the VMI held on this node; safe to call more than once.
    async fn cleanup(&self, vmi: &VirtualMachineInstance);
    /// Target of a live migration: readies the VMI's disks and a hypervisor waiting for
    /// its guest, and says where the source sends it. Asked again, it answers the same.
    async fn receive(
        &self,
        _vmi: &VirtualMachineInstance,
        _sources: &VolumeSources,
        _settings: &MigrationSettings,
    ) -> Result<Incoming, String> {
        Err(format!(
            "{} nodes cannot receive live migrations",
            self.kind()
        ))
    }
    async fn arrival(&self, _vmi: &VirtualMachineInstance) -> Arrival {
        Arrival::Failed("this node receives no migrations".into())
    }
    /// Target: the guest is here and the source has let go; run it (unless `paused`) and
    /// report it as `start` does.
    async fn take_over(
        &self,
        _vmi: &VirtualMachineInstance,
        _paused: bool,
    ) -> Result<GuestInfo, String> {
        Err("this node receives no migrations".into())
    }
    /// Source: starts moving the guest to `to` for the VMIM with uid `migration` (nothing
    /// when that one is moving already); how it goes is read with `sending`.
    async fn send(
        &self,
        _vmi: &VirtualMachineInstance,
        _migration: &str,
        _to: &Incoming,
        _settings: &MigrationSettings,
    ) -> Result<(), String> {
        Err(format!("{} nodes cannot send live migrations", self.kind()))
    }
    /// Source: the outgoing migration `migration` (a VMIM uid) of a VMI; `None` when it
    /// was not started here.
    fn sending(&self, _vmi: &VirtualMachineInstance, _migration: &str) -> Option<Sending> {
        None
    }
    /// Source: asks the outgoing migration to stop; it then ends as `Sending::Failed`.
    fn abort_sending(&self, _vmi: &VirtualMachineInstance, _migration: &str) {}
    /// Target: lets go of what `receive` readied (the migration failed or was cancelled).
    async fn release_incoming(&self, vmi: &VirtualMachineInstance) {
        self.cleanup(vmi).await
    }
    /// Source: forgets the VMI's last outgoing migration once its end is reported.
    fn cleanup_sending(&self, _vmi: &VirtualMachineInstance) {}
    /// The node's own VMI dirs, as (namespace, name): what a sweep for leftovers checks.
    fn local_vmis(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Releases a VMI's leftovers (a QEMU and files) known only by name, once the API says
    /// this node has nothing to do with it any more.
    async fn release_leftover(&self, _namespace: &str, _name: &str) {}
    /// (namespace, name) of VMIs whose guest changed on its own (exited), so the agent
    /// looks at them at once instead of at the next re-check.
    /// What each guest running here has used so far, by (namespace, name): the node's
    /// metrics. Simulated guests use nothing and report nothing.
    async fn readings(&self) -> Vec<((String, String), crate::readings::Readings)> {
        Vec::new()
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<(String, String)>> {
        None
    }
}
