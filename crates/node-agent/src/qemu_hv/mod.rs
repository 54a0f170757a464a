//! The QEMU hypervisor: each VMI is one QEMU process (KVM when usable, software
//! emulation otherwise), with its disks, seeds and console under
//! `DIR/vmi/<namespace>/<name>/` of the node's data dir.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kube::ResourceExt;
use kubevirt_api::model::VirtualMachineInstance;
use qemu::{Accel, Instance, RunState, RunStatus};
use tokio::sync::broadcast;

use crate::hypervisor::{
    Arrival, GuestInfo, Hypervisor, Incoming, MigrationSettings, Observed, PauseCause, Prepared,
    Sending, Started, Stopping,
};
use crate::qemu_user::{QemuUsers, RUN_DIR};
use crate::volume_sources::VolumeSources;

mod driver;
mod guest_metrics;
mod live_migration;
mod machine;
mod pod;
mod volumes;

use driver::{Driver, Handle};

#[derive(Clone, Debug)]
pub struct QemuConfig {
    /// The node's data dir: `DIR/node/<node>`.
    pub node_dir: PathBuf,
    /// Where pulled images are cached (shared by the nodes of one host).
    pub image_cache: PathBuf,
    pub binary: PathBuf,
    pub insecure_registries: Vec<String>,
    pub host_disk_dirs: Vec<PathBuf>,
    /// Where the files behind PersistentVolumeClaims may be (the volume pool,
    /// `DIR/volumes`); a claim whose published path leads elsewhere is not opened.
    pub claim_dirs: Vec<PathBuf>,
    /// The address port forwards listen on.
    pub node_address: String,
    pub millicpu: i64,
    pub memory: i64,
    /// How guests' vCPUs run on this node (chosen with `qemu::accel::choose`).
    pub accel: Accel,
    /// Whether QEMU runs under its seccomp sandbox (`qemu::sandbox::probe` said it can).
    pub sandbox: bool,
    /// `--qemu-uid-base`: each VMI's QEMU runs as its own uid above it when the agent is
    /// root (see `crate::qemu_user`); 0 keeps QEMU as the agent's user.
    pub qemu_uid_base: u32,
    /// The node's pod network, when guests get Pods on it (the agent can make network
    /// namespaces); `None`: QEMU's user-mode network, reached through port forwards.
    pub pod_network: Option<Arc<crate::pod_network::PodNetworkSlot>>,
    /// Why the node networks its guests as it does (for its Node's condition).
    pub network_note: String,
}

const OVMF_DIR: &str = "/usr/share/OVMF";

/// A port forward handed out: (interface, ports entry name, node port, guest port).
pub(super) type Forward = (String, String, u16, u16);

/// The node's side of its VMIs' QEMUs, which every driver shares: the configuration,
/// the per-VMI QEMU users, the image puller, and the channel that tells the agent of
/// guests that changed on their own.
pub struct QemuNode {
    config: QemuConfig,
    /// The per-VMI QEMU users, when the agent is root.
    users: Option<QemuUsers>,
    puller: oci::Puller,
    changes: broadcast::Sender<(String, String)>,
}

/// The QEMU hypervisor: a driver task per VMI (`driver`), by VMI uid. The map's lock is
/// held only to find a driver, never across an await.
pub struct Qemu {
    node: Arc<QemuNode>,
    drivers: Mutex<HashMap<String, Handle>>,
}

/// What a call answers when the VMI's driver could not take it.
const DRIVER_GONE: &str = "the VMI's driver on this node stopped";

fn failed(reason: &str, message: impl Into<String>) -> Prepared {
    Prepared::Failed {
        reason: reason.into(),
        message: message.into(),
    }
}

/// `tool` is missing on this node: the VMI fails at once, naming it.
fn unable(tool: crate::host_tools::HostTool) -> Prepared {
    Prepared::Unable {
        reason: "FailedCreate".into(),
        message: tool.missing_message(),
    }
}

fn start_failed(reason: &str, message: impl Into<String>) -> Started {
    Started::Failed {
        reason: reason.into(),
        message: message.into(),
    }
}

impl Qemu {
    pub fn new(config: QemuConfig) -> Qemu {
        let puller = oci::Puller::new(oci::Config::new(
            config.image_cache.clone(),
            config.insecure_registries.clone(),
        ));
        let (changes, _) = broadcast::channel(256);
        let users = QemuUsers::new(config.qemu_uid_base);
        match &users {
            Some(u) => tracing::info!(
                "QEMU runs as one uid per VMI above {} (group {})",
                config.qemu_uid_base,
                u.group()
            ),
            None => tracing::info!("QEMU runs as the agent's own user"),
        }
        Qemu {
            node: Arc::new(QemuNode {
                users,
                config,
                puller,
                changes,
            }),
            drivers: Mutex::new(HashMap::new()),
        }
    }

    /// `DIR/vmi/<namespace>/<name>/`: the runtime files of one VMI.
    pub fn vmi_dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.node.vmi_dir(namespace, name)
    }

    fn lock_drivers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Handle>> {
        self.drivers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The driver of a VMI, started on first use.
    fn driver(&self, vmi: &VirtualMachineInstance) -> Handle {
        let handle = self
            .lock_drivers()
            .entry(vmi.uid().to_string())
            .or_insert_with(|| Handle::spawn(self.node.clone(), vmi))
            .clone();
        handle.saw(vmi);
        handle
    }

    /// Runs `job` on the VMI's driver. A driver that is gone (it ended with a cleanup
    /// just now) is started anew once.
    async fn ask<T: Send + 'static>(
        &self,
        vmi: &VirtualMachineInstance,
        job: impl for<'d> FnOnce(&'d mut Driver) -> futures::future::BoxFuture<'d, T>
            + Send
            + Clone
            + 'static,
    ) -> Option<T> {
        if let Some(answer) = self.driver(vmi).ask(job.clone()).await {
            return Some(answer);
        }
        self.lock_drivers().remove(vmi.uid());
        self.driver(vmi).ask(job).await
    }

    /// The driver's outgoing migration cell, when the VMI has a driver here.
    fn outbound(&self, vmi: &VirtualMachineInstance) -> Option<driver::OutboundCell> {
        self.lock_drivers()
            .get(vmi.uid())
            .map(|handle| handle.outbound.clone())
    }
}

impl QemuNode {
    /// `DIR/vmi/<namespace>/<name>/`: the runtime files of one VMI.
    pub fn vmi_dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.config.node_dir.join("vmi").join(namespace).join(name)
    }

    fn dir(&self, vmi: &VirtualMachineInstance) -> PathBuf {
        self.vmi_dir(vmi.namespace(), &vmi.name_any())
    }

    /// [`Self::dir`], checked before anything is created in it: the namespace and name
    /// must each be one path component. The API server admits only DNS-1123 names; the
    /// agent, which writes there as root, does not rely on it.
    fn checked_dir(&self, vmi: &VirtualMachineInstance) -> Result<PathBuf, String> {
        let namespace = vmi.namespace().to_string();
        let name = vmi.name_any();
        crate::host_paths::component("namespace", &namespace)?;
        crate::host_paths::component("VMI name", &name)?;
        Ok(self.vmi_dir(&namespace, &name))
    }

    /// Where QEMU keeps its sockets, pidfile and serial log: the one dir it may write.
    fn run_dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.vmi_dir(namespace, name).join(RUN_DIR)
    }

    /// The VMI's own QEMU uid, its dir laid out for it (`None`: QEMU runs as the agent).
    fn qemu_uid(&self, vmi: &VirtualMachineInstance) -> Result<Option<u32>, String> {
        let dir = self.checked_dir(vmi)?;
        let Some(users) = &self.users else {
            // The same layout, as the agent's own user.
            let run = dir.join(RUN_DIR);
            std::fs::create_dir_all(&run)
                .map_err(|e| format!("creating {}: {e}", run.display()))?;
            return Ok(None);
        };
        users
            .assign(&dir, vmi.uid())
            .map(Some)
            .map_err(|e| format!("giving the VMI its QEMU user: {e}"))
    }

    /// Gives `path` to the VMI's QEMU (see `QemuUsers::grant`); nothing without users.
    fn grant(
        &self,
        vmi: &VirtualMachineInstance,
        path: &std::path::Path,
        read_only: bool,
    ) -> Result<(), String> {
        let (Some(users), Some(uid)) = (&self.users, self.qemu_uid(vmi)?) else {
            return Ok(());
        };
        users
            .grant(path, uid, read_only)
            .map_err(|e| format!("giving {} to the VMI's QEMU: {e}", path.display()))
    }

    /// What QEMU's own log says about a failure (the lines that name it).
    fn qemu_words(&self, vmi: &VirtualMachineInstance, needles: &[&str]) -> Option<String> {
        let log = std::fs::read_to_string(self.dir(vmi).join("qemu.log")).ok()?;
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| needles.iter().any(|n| l.contains(n)))
            .map(str::trim)
            .collect();
        let mut unique: Vec<&str> = Vec::new();
        for line in lines {
            if !unique.contains(&line) {
                unique.push(line);
            }
        }
        (!unique.is_empty()).then(|| unique.join(" / "))
    }

    /// Turns QEMU's run state into what the agent reports.
    fn observed(&self, vmi: &VirtualMachineInstance, status: &RunStatus) -> Observed {
        let recheck = Duration::from_secs(10);
        match &status.state {
            RunState::Running | RunState::Suspended => Observed::Running { recheck },
            RunState::Paused | RunState::Prelaunch => Observed::Paused {
                cause: PauseCause::Requested,
                message: "the guest's vCPUs are stopped".into(),
                recheck,
            },
            RunState::IoError => Observed::Paused {
                cause: PauseCause::IoError,
                message: status
                    .io_error
                    .clone()
                    .unwrap_or_else(|| "a disk reported an I/O error".into()),
                recheck,
            },
            RunState::InternalError => Observed::Halted {
                reason: "InternalError".into(),
                message: format!(
                    "the guest's vCPUs stopped: QEMU run state internal-error ({} could not run the guest): {}",
                    self.config.accel,
                    self.qemu_words(vmi, &["internal error", "emulation failure", "Suberror"])
                        .unwrap_or_else(|| "no message in QEMU's log".into())
                ),
            },
            RunState::GuestPanicked => Observed::Halted {
                reason: "GuestPanicked".into(),
                message: "the guest kernel panicked (QEMU run state guest-panicked)".into(),
            },
            RunState::Shutdown => Observed::Halted {
                reason: "GuestShutdown".into(),
                message: format!(
                    "the guest shut down ({}) and QEMU kept it stopped",
                    status.shutdown_reason.as_deref().unwrap_or("unknown reason")
                ),
            },
            other => Observed::Paused {
                cause: PauseCause::Other,
                message: format!(
                    "the guest's vCPUs are stopped (QEMU run state {})",
                    other.as_str()
                ),
                recheck,
            },
        }
    }
}

/// A job for a driver (see [`Qemu::ask`]), with what it needs moved in: gives the
/// closure the lifetime that ties its future to the driver it borrows.
fn job<T, F>(f: F) -> F
where
    F: for<'d> FnOnce(&'d mut Driver) -> futures::future::BoxFuture<'d, T>,
{
    f
}

#[async_trait]
impl Hypervisor for Qemu {
    fn kind(&self) -> &'static str {
        "qemu"
    }

    fn accel(&self) -> Option<&'static str> {
        Some(self.node.config.accel.as_str())
    }

    fn capacity(&self) -> (i64, i64) {
        (self.node.config.millicpu, self.node.config.memory)
    }

    fn changes(&self) -> Option<broadcast::Receiver<(String, String)>> {
        Some(self.node.changes.subscribe())
    }

    fn host_tools(&self) -> &'static [crate::host_tools::HostTool] {
        crate::host_tools::QEMU_NODE
    }

    fn pod_network(&self) -> Option<Arc<crate::pod_network::PodNetworkSlot>> {
        self.node.config.pod_network.clone()
    }

    fn network_report(&self) -> Option<crate::pod_network::Report> {
        Some(crate::pod_network::Report {
            pod: self.node.config.pod_network.is_some(),
            message: self.node.config.network_note.clone(),
        })
    }

    async fn prepare(&self, vmi: &VirtualMachineInstance, sources: &VolumeSources) -> Prepared {
        let (owned, sources) = (vmi.clone(), sources.clone());
        self.ask(
            vmi,
            job(move |d| Box::pin(async move { d.prepare(&owned, &sources).await })),
        )
        .await
        .unwrap_or_else(|| failed("FailedCreate", DRIVER_GONE))
    }

    async fn start(&self, vmi: &VirtualMachineInstance, sources: &VolumeSources) -> Started {
        let (owned, sources) = (vmi.clone(), sources.clone());
        self.ask(
            vmi,
            job(move |d| Box::pin(async move { d.start(&owned, &sources).await })),
        )
        .await
        .unwrap_or_else(|| start_failed("FailedCreate", DRIVER_GONE))
    }

    async fn observe(&self, vmi: &VirtualMachineInstance) -> Observed {
        let owned = vmi.clone();
        self.ask(
            vmi,
            job(move |d| Box::pin(async move { d.observe(&owned).await })),
        )
        .await
        .unwrap_or_else(|| Observed::Exited {
            succeeded: false,
            reason: DRIVER_GONE.into(),
        })
    }

    async fn stop(&self, vmi: &VirtualMachineInstance, grace: Duration) -> Stopping {
        self.ask(
            vmi,
            job(move |d| Box::pin(async move { d.stop(grace).await })),
        )
        .await
        .unwrap_or(Stopping::Pending(Duration::from_millis(200)))
    }

    async fn set_paused(&self, vmi: &VirtualMachineInstance, paused: bool) -> Result<(), String> {
        self.ask(
            vmi,
            job(move |d| Box::pin(async move { d.set_paused(paused).await })),
        )
        .await
        .unwrap_or_else(|| Err(DRIVER_GONE.into()))
    }

    async fn soft_reboot(&self, vmi: &VirtualMachineInstance) -> Result<(), String> {
        self.ask(
            vmi,
            job(move |d| Box::pin(async move { d.soft_reboot().await })),
        )
        .await
        .unwrap_or_else(|| Err(DRIVER_GONE.into()))
    }

    async fn receive(
        &self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
        settings: &MigrationSettings,
    ) -> Result<Incoming, String> {
        let (owned, sources, settings) = (vmi.clone(), sources.clone(), settings.clone());
        self.ask(
            vmi,
            job(move |d| {
                Box::pin(async move { d.receive_guest(&owned, &sources, &settings).await })
            }),
        )
        .await
        .unwrap_or_else(|| Err(DRIVER_GONE.into()))
    }

    async fn arrival(&self, vmi: &VirtualMachineInstance) -> Arrival {
        let owned = vmi.clone();
        self.ask(
            vmi,
            job(move |d| Box::pin(async move { d.guest_arrival(&owned).await })),
        )
        .await
        .unwrap_or_else(|| Arrival::Failed(DRIVER_GONE.into()))
    }

    async fn take_over(
        &self,
        vmi: &VirtualMachineInstance,
        paused: bool,
    ) -> Result<GuestInfo, String> {
        let owned = vmi.clone();
        self.ask(
            vmi,
            job(move |d| Box::pin(async move { d.take_over_guest(&owned, paused).await })),
        )
        .await
        .unwrap_or_else(|| Err(DRIVER_GONE.into()))
    }

    async fn send(
        &self,
        vmi: &VirtualMachineInstance,
        migration: &str,
        to: &Incoming,
        settings: &MigrationSettings,
    ) -> Result<(), String> {
        let (owned, migration, to, settings) = (
            vmi.clone(),
            migration.to_string(),
            to.clone(),
            settings.clone(),
        );
        self.ask(
            vmi,
            job(move |d| {
                Box::pin(async move { d.send_guest(&owned, &migration, &to, &settings).await })
            }),
        )
        .await
        .unwrap_or_else(|| Err(DRIVER_GONE.into()))
    }

    fn sending(&self, vmi: &VirtualMachineInstance, migration: &str) -> Option<Sending> {
        live_migration::outgoing(&self.outbound(vmi)?, migration)
    }

    fn abort_sending(&self, vmi: &VirtualMachineInstance, migration: &str) {
        if let Some(outbound) = self.outbound(vmi) {
            live_migration::abort_outgoing(&outbound, migration);
        }
    }

    fn cleanup_sending(&self, vmi: &VirtualMachineInstance) {
        if let Some(outbound) = self.outbound(vmi) {
            *outbound.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }

    async fn readings(&self) -> Vec<((String, String), crate::readings::Readings)> {
        let drivers: Vec<Handle> = self.lock_drivers().values().cloned().collect();
        // A driver busy with a long job (a migration's hand-over) is left out of this
        // scrape rather than holding it up; its migration's progress is read all the same.
        let asked = drivers.iter().map(|driver| {
            tokio::time::timeout(
                Duration::from_secs(1),
                driver.ask(|d| Box::pin(d.readings())),
            )
        });
        let answers = futures::future::join_all(asked).await;
        drivers
            .iter()
            .zip(answers)
            .filter_map(|(driver, answer)| {
                let migration =
                    live_migration::moving(&driver.outbound).map(|p| crate::readings::Migration {
                        processed_bytes: p.transferred,
                        remaining_bytes: p.remaining,
                        total_bytes: p.ram_total,
                        dirty_rate_bytes: p.dirty_rate_bytes,
                        transfer_rate_bytes: p.transfer_rate_bytes,
                    });
                let mut readings = match answer.ok().flatten().flatten() {
                    Some((_, readings)) => readings,
                    None if migration.is_some() => crate::readings::Readings::default(),
                    None => return None,
                };
                readings.migration = migration;
                readings.labels = driver
                    .labels
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                Some((driver.key.clone(), readings))
            })
            .collect()
    }

    fn local_vmis(&self) -> Vec<(String, String)> {
        let root = self.node.config.node_dir.join("vmi");
        let mut found = Vec::new();
        for namespace in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            for vmi in std::fs::read_dir(namespace.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                found.push((
                    namespace.file_name().to_string_lossy().into_owned(),
                    vmi.file_name().to_string_lossy().into_owned(),
                ));
            }
        }
        found
    }

    async fn release_leftover(&self, namespace: &str, name: &str) {
        let dir = self.node.vmi_dir(namespace, name);
        let run = self.node.run_dir(namespace, name);
        if let Some(instance) = Instance::adopt(&run.join("qemu.pid"), &run.join("qmp.sock")).await
        {
            tracing::info!(
                "stopping leftover QEMU {} of {namespace}/{name}",
                instance.pid
            );
            instance.kill();
        }
        pod::detach_pod(self.node.config.pod_network.as_ref(), namespace, name).await;
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("removing {}: {e}", dir.display());
            }
        }
    }

    async fn cleanup(&self, vmi: &VirtualMachineInstance) {
        let owned = vmi.clone();
        if self
            .ask(
                vmi,
                job(move |d| Box::pin(async move { d.cleanup(&owned).await })),
            )
            .await
            .is_none()
        {
            tracing::warn!(
                "the driver of {}/{} is gone: its files stay until the next sweep",
                vmi.namespace(),
                vmi.name_any()
            );
        }
        // The driver ends once no handle is left.
        self.lock_drivers().remove(vmi.uid());
    }
}
