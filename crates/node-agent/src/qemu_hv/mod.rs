//! The QEMU hypervisor: each VMI is one QEMU process (KVM when usable, software
//! emulation otherwise), with its disks, seeds and console under
//! `DIR/vmi/<namespace>/<name>/` of the node's data dir.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube::ResourceExt;
use kubevirt_api::model::VirtualMachineInstance;
use qemu::{Accel, Instance, RunState, RunStatus};
use serde_json::json;
use tokio::sync::broadcast;

use crate::hypervisor::{
    Arrival, GuestInfo, Hypervisor, ImageIds, Incoming, MigrationSettings, Observed, PauseCause,
    Prepared, Sending, Started, Stopping,
};
use crate::qemu_user::{QemuUsers, RUN_DIR};
use crate::volume_sources::VolumeSources;

mod live_migration;
mod machine;
mod volumes;

use machine::mac_for;

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
}

const OVMF_DIR: &str = "/usr/share/OVMF";

/// A port forward handed out: (interface, ports entry name, node port, guest port).
pub(super) type Forward = (String, String, u16, u16);

/// Files taken out of an image (path inside it, path here) and its image ID, by (VMI uid,
/// image, wanted paths).
type Pulled = HashMap<(String, String, String), (Vec<(String, PathBuf)>, String)>;

struct Running {
    instance: Instance,
    stop_started: Option<Instant>,
}

/// One VMI's QEMU behind a lock of its own: a slow QMP call (a frozen QEMU, a long block
/// job) on one VMI never holds up another.
type Slot = Arc<tokio::sync::Mutex<Option<Running>>>;

pub struct Qemu {
    config: QemuConfig,
    /// The per-VMI QEMU users, when the agent is root.
    users: Option<QemuUsers>,
    puller: oci::Puller,
    /// By VMI uid. The map's lock is held only to find a slot, never across an await.
    slots: Mutex<HashMap<String, Slot>>,
    /// Port forwards handed out, by VMI uid.
    forwards: Mutex<HashMap<String, Vec<Forward>>>,
    /// Files pulled for a VMI, by (uid, image, wanted paths): start asks for what prepare
    /// just pulled, and asking the registry again costs a round trip per image.
    pulled: Mutex<Pulled>,
    /// The image IDs each VMI's disks and kernel were pulled as, by VMI uid.
    image_ids: Mutex<HashMap<String, ImageIds>>,
    changes: broadcast::Sender<(String, String)>,
    /// Outgoing migrations, by VMI uid.
    outbound: Mutex<HashMap<String, live_migration::Outbound>>,
}

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
            users,
            config,
            puller,
            slots: Mutex::new(HashMap::new()),
            forwards: Mutex::new(HashMap::new()),
            pulled: Mutex::new(HashMap::new()),
            image_ids: Mutex::new(HashMap::new()),
            changes,
            outbound: Mutex::new(HashMap::new()),
        }
    }

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

    /// The slot of a VMI, created empty on first use.
    fn slot(&self, vmi: &VirtualMachineInstance) -> Slot {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(vmi.uid().to_string())
            .or_default()
            .clone()
    }

    /// The running instance of a VMI, adopting one a previous agent started.
    async fn instance<'a>(
        &self,
        slot: &'a mut Option<Running>,
        vmi: &VirtualMachineInstance,
    ) -> Option<&'a mut Running> {
        if slot.is_none() {
            let run = self.run_dir(vmi.namespace(), &vmi.name_any());
            let instance = Instance::adopt(&run.join("qemu.pid"), &run.join("qmp.sock")).await?;
            tracing::info!(
                "adopted QEMU {} of {}/{} ({})",
                instance.pid,
                vmi.namespace().to_string(),
                vmi.name_any(),
                instance.run_status().state.as_str()
            );
            self.watch_run_state(vmi, &instance);
            *slot = Some(Running {
                instance,
                stop_started: None,
            });
        }
        slot.as_mut()
    }

    /// Tells the agent as soon as the guest's run state changes or QEMU exits.
    fn watch_run_state(&self, vmi: &VirtualMachineInstance, instance: &Instance) {
        let mut status = instance.run_status_changes();
        let key = (vmi.namespace().to_string(), vmi.name_any());
        let changes = self.changes.clone();
        tokio::spawn(async move {
            loop {
                let ended = status.changed().await.is_err() || status.borrow().closed;
                // No receiver means no agent loop listens yet: nothing to tell.
                let _ = changes.send(key.clone());
                if ended {
                    break;
                }
            }
        });
    }

    /// What `status` reports of a running guest on this node: its interfaces, its port
    /// forwards here, its machine type.
    fn guest_info(&self, vmi: &VirtualMachineInstance) -> GuestInfo {
        let uid = vmi.uid().to_string();
        let forwards = self
            .forwards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&uid)
            .cloned()
            .unwrap_or_default();
        let interfaces = vmi
            .spec
            .interfaces()
            .iter()
            .enumerate()
            .map(|(i, iface)| {
                let mac = iface
                    .mac_address
                    .clone()
                    .unwrap_or_else(|| mac_for(&uid, i));
                (iface.name.clone(), mac, self.config.node_address.clone())
            })
            .collect();
        let port_forwards = forwards
            .iter()
            .map(|(iface, name, host_port, port)| {
                json!({"interface": iface, "name": name, "protocol": "TCP", "port": port,
                       "hostIP": self.config.node_address, "hostPort": host_port})
            })
            .collect();
        let machine = vmi
            .spec
            .domain
            .as_ref()
            .and_then(|d| d.machine.as_ref())
            .and_then(|m| m.type_.clone())
            .unwrap_or_else(|| "q35".into());
        GuestInfo {
            interfaces,
            machine,
            port_forwards,
        }
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

#[async_trait]
impl Hypervisor for Qemu {
    fn kind(&self) -> &'static str {
        "qemu"
    }

    fn accel(&self) -> Option<&'static str> {
        Some(self.config.accel.as_str())
    }

    fn capacity(&self) -> (i64, i64) {
        (self.config.millicpu, self.config.memory)
    }

    fn changes(&self) -> Option<broadcast::Receiver<(String, String)>> {
        Some(self.changes.subscribe())
    }

    fn host_tools(&self) -> &'static [crate::host_tools::HostTool] {
        crate::host_tools::QEMU_NODE
    }

    async fn prepare(&self, vmi: &VirtualMachineInstance, sources: &VolumeSources) -> Prepared {
        let began = Instant::now();
        let dir = match self.checked_dir(vmi) {
            Ok(dir) => dir,
            Err(e) => return failed("FailedCreate", e),
        };
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return failed("FailedCreate", format!("creating {}: {e}", dir.display()));
        }
        if let Err(e) = self.qemu_uid(vmi) {
            return failed("FailedCreate", e);
        }
        for volume in vmi.spec.volumes() {
            if let Err(failure) = self.prepare_volume(vmi, volume, sources).await {
                return failure;
            }
        }
        if let Err(Started::Failed { reason, message }) = self.kernel_boot(vmi, sources).await {
            return Prepared::Failed { reason, message };
        }
        tracing::debug!(
            "prepared {}/{} in {:?}",
            vmi.namespace().to_string(),
            vmi.name_any(),
            began.elapsed()
        );
        let ids = self
            .image_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&vmi.uid().to_string())
            .cloned()
            .unwrap_or_default();
        Prepared::Ready(ids)
    }

    async fn start(&self, vmi: &VirtualMachineInstance, sources: &VolumeSources) -> Started {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        // Never a second QEMU for one VMI: adopt what runs already.
        if self.instance(&mut running, vmi).await.is_none() {
            let began = Instant::now();
            let spec = match self.machine(vmi, sources).await {
                Ok(spec) => spec,
                Err(failure) => return failure,
            };
            let specified = began.elapsed();
            let log = self.dir(vmi).join("qemu.log");
            let instance = match Instance::spawn(&self.config.binary, &spec, &log).await {
                Ok(instance) => instance,
                Err(e) => return start_failed("FailedCreate", e.to_string()),
            };
            let spawned = began.elapsed();
            let paused = spec_paused(vmi);
            if !paused {
                if let Err(e) = instance.resume().await {
                    instance.kill();
                    return start_failed("FailedCreate", format!("starting the guest: {e}"));
                }
            }
            tracing::debug!(
                "started QEMU {} of {}/{}: command line ready after {specified:?}, QMP after {spawned:?}, running after {:?}",
                instance.pid,
                vmi.namespace().to_string(),
                vmi.name_any(),
                began.elapsed()
            );
            self.watch_run_state(vmi, &instance);
            *running = Some(Running {
                instance,
                stop_started: None,
            });
        }
        drop(running);
        Started::Running(self.guest_info(vmi))
    }

    async fn observe(&self, vmi: &VirtualMachineInstance) -> Observed {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        let Some(entry) = self.instance(&mut running, vmi).await else {
            return Observed::Exited {
                succeeded: false,
                reason: "the QEMU process of this VMI is gone".into(),
            };
        };
        if entry.instance.exited() {
            let reason = entry.instance.shutdown_reason();
            let succeeded = reason.as_deref() == Some("guest-shutdown");
            *running = None;
            return Observed::Exited {
                succeeded,
                reason: if succeeded {
                    "GuestShutdown".into()
                } else {
                    format!(
                        "QEMU exited ({})",
                        reason.unwrap_or_else(|| "crashed".into())
                    )
                },
            };
        }
        let mut status = entry.instance.run_status();
        if status.state == RunState::InMigrate {
            // A target started with -S leaves inmigrate for paused without an event, so
            // the followed state may be stale: ask. (Taken for a pause, the guest that
            // just arrived would be reported paused until the next event.)
            if let Ok(state) = entry.instance.qmp.status().await {
                status.state = RunState::parse(&state);
            }
        }
        self.observed(vmi, &status)
    }

    async fn stop(&self, vmi: &VirtualMachineInstance, grace: Duration) -> Stopping {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        let Some(entry) = self.instance(&mut running, vmi).await else {
            return Stopping::Done { succeeded: true };
        };
        if entry.instance.exited() {
            let succeeded = entry.instance.shutdown_reason().as_deref() == Some("guest-shutdown");
            *running = None;
            return Stopping::Done { succeeded };
        }
        let first = entry.stop_started.is_none();
        let started = *entry.stop_started.get_or_insert_with(Instant::now);
        if first && !grace.is_zero() {
            if let Err(e) = entry.instance.power_down().await {
                tracing::warn!(
                    "ACPI power-down of {}/{}: {e}; it is killed when its grace period ends",
                    vmi.namespace().to_string(),
                    vmi.name_any()
                );
            }
        }
        if started.elapsed() >= grace {
            entry.instance.kill();
            *running = None;
            return Stopping::Done { succeeded: false };
        }
        Stopping::Pending(Duration::from_millis(200))
    }

    async fn set_paused(&self, vmi: &VirtualMachineInstance, paused: bool) -> Result<(), String> {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        let entry = self
            .instance(&mut running, vmi)
            .await
            .ok_or("the VMI is not running")?;
        let result = if paused {
            entry.instance.pause().await
        } else {
            entry.instance.resume().await
        };
        result.map_err(|e| e.to_string())
    }

    async fn soft_reboot(&self, vmi: &VirtualMachineInstance) -> Result<(), String> {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        let entry = self
            .instance(&mut running, vmi)
            .await
            .ok_or("the VMI is not running")?;
        // An ACPI-style reboot request the guest's kernel handles like Ctrl+Alt+Del.
        entry
            .instance
            .qmp
            .execute("send-key", Some(json!({"keys": [{"type": "qcode", "data": "ctrl"}, {"type": "qcode", "data": "alt"}, {"type": "qcode", "data": "delete"}]})))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn receive(
        &self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
        settings: &MigrationSettings,
    ) -> Result<Incoming, String> {
        self.receive_guest(vmi, sources, settings).await
    }

    async fn arrival(&self, vmi: &VirtualMachineInstance) -> Arrival {
        self.guest_arrival(vmi).await
    }

    async fn take_over(
        &self,
        vmi: &VirtualMachineInstance,
        paused: bool,
    ) -> Result<GuestInfo, String> {
        self.take_over_guest(vmi, paused).await
    }

    async fn send(
        &self,
        vmi: &VirtualMachineInstance,
        migration: &str,
        to: &Incoming,
        settings: &MigrationSettings,
    ) -> Result<(), String> {
        self.send_guest(vmi, migration, to, settings).await
    }

    fn sending(&self, vmi: &VirtualMachineInstance, migration: &str) -> Option<Sending> {
        self.outgoing(vmi, migration)
    }

    fn abort_sending(&self, vmi: &VirtualMachineInstance, migration: &str) {
        self.abort_outgoing(vmi, migration)
    }

    fn cleanup_sending(&self, vmi: &VirtualMachineInstance) {
        self.forget_outgoing(vmi.uid());
    }

    fn local_vmis(&self) -> Vec<(String, String)> {
        let root = self.config.node_dir.join("vmi");
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
        let dir = self.vmi_dir(namespace, name);
        let run = self.run_dir(namespace, name);
        if let Some(instance) = Instance::adopt(&run.join("qemu.pid"), &run.join("qmp.sock")).await
        {
            tracing::info!(
                "stopping leftover QEMU {} of {namespace}/{name}",
                instance.pid
            );
            instance.kill();
        }
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("removing {}: {e}", dir.display());
            }
        }
    }

    async fn cleanup(&self, vmi: &VirtualMachineInstance) {
        let uid = vmi.uid().to_string();
        self.forget_outgoing(&uid);
        let slot = self.slot(vmi);
        {
            let mut running = slot.lock().await;
            if let Some(entry) = self.instance(&mut running, vmi).await {
                entry.instance.kill();
            }
            *running = None;
        }
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uid);
        self.forwards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uid);
        self.pulled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(owner, _, _), _| *owner != uid);
        self.image_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uid);
        if let Err(e) = std::fs::remove_dir_all(self.dir(vmi)) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(
                    "removing {} of {}/{}: {e}",
                    self.dir(vmi).display(),
                    vmi.namespace().to_string(),
                    vmi.name_any()
                );
            }
        }
    }
}

fn spec_paused(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec.starts_paused()
}
