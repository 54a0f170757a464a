//! One task per VMI that owns its QEMU (Propolis' instance driver): the process and its
//! QMP connection, its run-state events, the port forwards, images and image IDs it was
//! given, and its migration, source or target. The hypervisor's calls for the VMI are
//! jobs on the driver's queue, run one after another with the driver's state in hand, so
//! no lock is shared between VMIs and nothing waits on one VMI's QMP for another's sake.

use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

use futures::future::BoxFuture;
use kube::ResourceExt;
use kubevirt_api::model::VirtualMachineInstance;
use qemu::{Instance, RunState, RunStatus};
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};

use super::guest_metrics::GuestMetrics;
use super::live_migration::Outbound;
use super::machine::mac_for;
use super::{start_failed, Forward, QemuNode};
use crate::hypervisor::{GuestInfo, ImageIds, Observed, Prepared, Started, Stopping};
use crate::readings::Readings;
use crate::volume_sources::VolumeSources;

/// Files taken out of an image (path inside it, path here) and its image ID, by (image,
/// wanted paths).
pub(super) type Pulled = HashMap<(String, String), (Vec<(String, PathBuf)>, String)>;

/// The VMI's outgoing migration, shared with the handle so that the agent can read its
/// progress (and abort it) without queueing behind a long job.
pub(super) type OutboundCell = Arc<Mutex<Option<Outbound>>>;

/// A job for a driver: runs with the driver's state in hand.
type Job = Box<dyn for<'d> FnOnce(&'d mut Driver) -> BoxFuture<'d, ()> + Send>;

/// How many jobs may wait for one driver; the agent asks one thing at a time per VMI.
const QUEUE: usize = 16;

pub(super) struct Running {
    pub(super) instance: Instance,
    /// QEMU's run-state changes, until QEMU is gone.
    events: Option<watch::Receiver<RunStatus>>,
    pub(super) stop_started: Option<Instant>,
    /// What its metrics keep between scrapes.
    metrics: GuestMetrics,
}

impl Running {
    pub(super) fn new(instance: Instance) -> Running {
        Running {
            events: Some(instance.run_status_changes()),
            instance,
            stop_started: None,
            metrics: GuestMetrics::default(),
        }
    }
}

/// What the hypervisor holds of a VMI's driver: its queue and its outgoing migration.
#[derive(Clone)]
pub(super) struct Handle {
    jobs: mpsc::Sender<Job>,
    pub(super) outbound: OutboundCell,
    /// (namespace, name) of the VMI.
    pub(super) key: (String, String),
    /// The VMI's labels as last seen, for its metrics.
    pub(super) labels: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Handle {
    /// Starts the driver of the VMI with `uid` on `namespace/name`.
    pub(super) fn spawn(node: Arc<QemuNode>, vmi: &VirtualMachineInstance) -> Handle {
        let (jobs, queue) = mpsc::channel(QUEUE);
        let outbound = OutboundCell::default();
        let driver = Driver {
            node,
            key: (vmi.namespace().to_string(), vmi.name_any()),
            running: None,
            pod: None,
            relays: Vec::new(),
            forwards: Vec::new(),
            pulled: HashMap::new(),
            image_ids: ImageIds::default(),
            outbound: outbound.clone(),
            taps: super::pod::taps(vmi),
        };
        tokio::spawn(driver.run(queue).instrument(crate::context::vmi_span(vmi)));
        let handle = Handle {
            jobs,
            outbound,
            key: (vmi.namespace().to_string(), vmi.name_any()),
            labels: Arc::default(),
        };
        handle.saw(vmi);
        handle
    }

    /// Keeps what of the VMI its metrics carry (its labels, which may change).
    pub(super) fn saw(&self, vmi: &VirtualMachineInstance) {
        *self.labels.lock().unwrap_or_else(|p| p.into_inner()) =
            vmi.metadata.labels.clone().unwrap_or_default();
    }

    /// Runs `job` on the driver and returns its answer; `None` when the driver is gone.
    pub(super) async fn ask<T: Send + 'static>(
        &self,
        job: impl for<'d> FnOnce(&'d mut Driver) -> BoxFuture<'d, T> + Send + 'static,
    ) -> Option<T> {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move |driver| {
            Box::pin(async move {
                let _ = answer.send(job(driver).await);
            })
        });
        self.jobs.send(job).await.ok()?;
        answered.await.ok()
    }
}

/// One VMI's driver: its QEMU and what the node keeps about it. The node's side, which
/// every driver shares, is reached through `Deref`.
pub(super) struct Driver {
    node: Arc<QemuNode>,
    /// (namespace, name): what the agent is told changed.
    key: (String, String),
    pub(super) running: Option<Running>,
    /// The VMI's Pod on the node's pod network, when it has one.
    pub(super) pod: Option<network::node::Pod>,
    /// The relays from the node's address to an incoming migration's listeners in the Pod.
    pub(super) relays: Vec<tokio::task::JoinHandle<()>>,
    /// Port forwards handed out, for `status.portForwards`.
    pub(super) forwards: Vec<Forward>,
    /// Files pulled: start asks for what prepare just pulled, and asking the registry
    /// again costs a round trip per image.
    pub(super) pulled: Pulled,
    /// The image IDs the disks and kernel were pulled as.
    pub(super) image_ids: ImageIds,
    pub(super) outbound: OutboundCell,
    /// Each tap in the Pod and the VMI interface it carries, for the metrics.
    taps: Vec<(String, String)>,
}

impl Deref for Driver {
    type Target = QemuNode;

    fn deref(&self) -> &QemuNode {
        &self.node
    }
}

impl Driver {
    /// Runs jobs as they come and tells the agent when QEMU's run state changes, until
    /// the hypervisor lets go of the VMI.
    async fn run(mut self, mut queue: mpsc::Receiver<Job>) {
        loop {
            tokio::select! {
                job = queue.recv() => match job {
                    Some(job) => job(&mut self).await,
                    None => break,
                },
                () = self.run_state_changed() => self.tell_agent(),
            }
        }
    }

    /// Resolves when QEMU's run state changes or QEMU is gone (once); pending without
    /// a QEMU to follow.
    async fn run_state_changed(&mut self) {
        let Some(events) = self.running.as_mut().and_then(|r| r.events.as_mut()) else {
            return std::future::pending().await;
        };
        let ended = events.changed().await.is_err() || events.borrow().closed;
        if ended {
            if let Some(running) = self.running.as_mut() {
                running.events = None;
            }
        }
    }

    /// Tells the agent to look at the VMI now rather than at its next re-check. Nobody
    /// listening (no agent loop yet) is nothing to tell.
    pub(super) fn tell_agent(&self) {
        let _ = self.changes.send(self.key.clone());
    }

    /// The running instance of the VMI, adopting one a previous agent started.
    pub(super) async fn instance(&mut self) -> Option<&mut Running> {
        if self.running.is_none() {
            let run = self.run_dir(&self.key.0, &self.key.1);
            let instance = Instance::adopt(&run.join("qemu.pid"), &run.join("qmp.sock")).await?;
            tracing::info!(
                "adopted QEMU {} of {}/{} ({})",
                instance.pid,
                self.key.0,
                self.key.1,
                instance.run_status().state.as_str()
            );
            self.running = Some(Running::new(instance));
        }
        self.running.as_mut()
    }

    pub(super) async fn prepare(
        &mut self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
    ) -> Prepared {
        let began = Instant::now();
        let dir = match self.checked_dir(vmi) {
            Ok(dir) => dir,
            Err(e) => return super::failed("FailedCreate", e),
        };
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return super::failed("FailedCreate", format!("creating {}: {e}", dir.display()));
        }
        if let Err(e) = self.qemu_uid(vmi) {
            return super::failed("FailedCreate", e);
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
            self.key.0,
            self.key.1,
            began.elapsed()
        );
        Prepared::Ready(self.image_ids.clone())
    }

    pub(super) async fn start(
        &mut self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
    ) -> Started {
        // Never a second QEMU for one VMI: adopt what runs already.
        if self.instance().await.is_none() {
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
            if !vmi.spec.starts_paused() {
                if let Err(e) = instance.resume().await {
                    instance.kill();
                    return start_failed("FailedCreate", format!("starting the guest: {e}"));
                }
            }
            tracing::debug!(
                "started QEMU {} of {}/{}: command line ready after {specified:?}, QMP after {spawned:?}, running after {:?}",
                instance.pid,
                self.key.0,
                self.key.1,
                began.elapsed()
            );
            self.running = Some(Running::new(instance));
        }
        Started::Running(self.guest_info(vmi))
    }

    pub(super) async fn observe(&mut self, vmi: &VirtualMachineInstance) -> Observed {
        if self.instance().await.is_some() {
            self.readopt_pod(vmi);
        }
        let Some(entry) = self.instance().await else {
            return Observed::Exited {
                succeeded: false,
                reason: "the QEMU process of this VMI is gone".into(),
            };
        };
        if entry.instance.exited() {
            let reason = entry.instance.shutdown_reason();
            let succeeded = reason.as_deref() == Some("guest-shutdown");
            self.running = None;
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

    pub(super) async fn stop(&mut self, grace: Duration) -> Stopping {
        let key = self.key.clone();
        let Some(entry) = self.instance().await else {
            return Stopping::Done { succeeded: true };
        };
        if entry.instance.exited() {
            let succeeded = entry.instance.shutdown_reason().as_deref() == Some("guest-shutdown");
            self.running = None;
            return Stopping::Done { succeeded };
        }
        let first = entry.stop_started.is_none();
        let started = *entry.stop_started.get_or_insert_with(Instant::now);
        if first && !grace.is_zero() {
            if let Err(e) = entry.instance.power_down().await {
                tracing::warn!(
                    "ACPI power-down of {}/{}: {e}; it is killed when its grace period ends",
                    key.0,
                    key.1
                );
            }
        }
        if started.elapsed() >= grace {
            entry.instance.kill();
            self.running = None;
            return Stopping::Done { succeeded: false };
        }
        Stopping::Pending(Duration::from_millis(200))
    }

    pub(super) async fn set_paused(&mut self, paused: bool) -> Result<(), String> {
        let entry = self.instance().await.ok_or("the VMI is not running")?;
        let result = if paused {
            entry.instance.pause().await
        } else {
            entry.instance.resume().await
        };
        result.map_err(|e| e.to_string())
    }

    pub(super) async fn soft_reboot(&mut self) -> Result<(), String> {
        let entry = self.instance().await.ok_or("the VMI is not running")?;
        // An ACPI-style reboot request the guest's kernel handles like Ctrl+Alt+Del.
        entry
            .instance
            .qmp
            .execute("send-key", Some(json!({"keys": [{"type": "qcode", "data": "ctrl"}, {"type": "qcode", "data": "alt"}, {"type": "qcode", "data": "delete"}]})))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// The guest's readings, with its (namespace, name); `None` when it does not run.
    pub(super) async fn readings(&mut self) -> Option<((String, String), Readings)> {
        let key = self.key.clone();
        let taps = self.taps.clone();
        let entry = self.instance().await?;
        let readings = entry.metrics.read(&entry.instance, &key, &taps).await;
        Some((key, readings))
    }

    /// Kills the VMI's QEMU and removes its files; the hypervisor then lets the driver go.
    pub(super) async fn cleanup(&mut self, vmi: &VirtualMachineInstance) {
        self.forget_outgoing();
        if let Some(entry) = self.instance().await {
            entry.instance.kill();
        }
        self.running = None;
        self.pod = None;
        self.relays.drain(..).for_each(|relay| relay.abort());
        super::pod::detach_pod(self.config.pod_network.as_ref(), &self.key.0, &self.key.1).await;
        self.forwards.clear();
        self.pulled.clear();
        self.image_ids = ImageIds::default();
        let dir = self.dir(vmi);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(
                    "removing {} of {}/{}: {e}",
                    dir.display(),
                    self.key.0,
                    self.key.1
                );
            }
        }
    }

    /// What `status` reports of a running guest on this node: its interfaces, its port
    /// forwards here, its machine type.
    pub(super) fn guest_info(&self, vmi: &VirtualMachineInstance) -> GuestInfo {
        let uid = vmi.uid().to_string();
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
                let on_pod = self
                    .pod
                    .as_ref()
                    .filter(|_| vmi.spec.on_pod_network(&iface.name));
                // A Multus network's address is the LAN's to give: unknown here.
                let ip = if vmi.spec.multus_number(&iface.name).is_some() {
                    String::new()
                } else {
                    on_pod.map_or_else(
                        || self.config.node_address.clone(),
                        |pod| pod.address.to_string(),
                    )
                };
                (iface.name.clone(), mac, ip)
            })
            .collect();
        let port_forwards = self
            .forwards
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

    /// Forgets a finished outgoing migration, so that a later one starts afresh.
    pub(super) fn forget_outgoing(&self) {
        *self.outbound.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
