//! Live migration of a VMI's QEMU, as states of its driver: the target side (a QEMU
//! started with `-incoming defer`, its node-local disks exported over NBD) and the source
//! side (a task of the driver runs `qemu::migration::send` while the agent reads its
//! progress from the driver's outbound cell), so that a migration never holds the
//! driver's queue for longer than one call.

use std::net::TcpListener;
use tracing::Instrument;

use kube::ResourceExt;
use kubevirt_api::model::VirtualMachineInstance;
use qemu::migration::{self as qm, Endpoint, Failure, Plan, Progress, Tuning};
use qemu::{Instance, RunState};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::driver::{Driver, OutboundCell, Running};
use crate::hypervisor::{Arrival, GuestInfo, Incoming, MigrationSettings, Sending, Started};
use crate::volume_sources::VolumeSources;

/// An outgoing migration: what its driver task reports, and the switch that aborts it.
pub(super) struct Outbound {
    /// The VMIM's uid.
    migration: String,
    progress: watch::Receiver<Progress>,
    result: watch::Receiver<Option<Result<Progress, Failure>>>,
    abort: watch::Sender<bool>,
}

/// The target's listeners, kept in the VMI's dir so that an agent that restarts during
/// a migration gives the same answer.
#[derive(Serialize, Deserialize)]
struct Listening {
    address: String,
    migration_port: u16,
    disk_port: Option<u16>,
}

const LISTENING_FILE: &str = "incoming.json";
/// The uid of the migration this node is sending the guest for, in the VMI's dir.
const SENDING_FILE: &str = "outgoing-migration";
/// Where a migration's TLS credentials are written for QEMU, in the VMI's dir.
const TLS_DIR: &str = "migration-tls";

#[derive(Clone, Copy)]
enum Side {
    Source,
    Target,
}

/// Writes a key or certificate readable by the agent's user only.
fn write_private(path: &std::path::Path, contents: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

fn free_port(address: &str) -> Result<u16, String> {
    TcpListener::bind((address, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on {address}: {e}"))
}

impl Driver {
    pub(super) async fn receive_guest(
        &mut self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
        settings: &MigrationSettings,
    ) -> Result<Incoming, String> {
        let dir = self.checked_dir(vmi)?;
        let file = dir.join(LISTENING_FILE);
        if self.instance().await.is_some() {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| format!("the target QEMU runs, but {}: {e}", file.display()))?;
            let listening: Listening =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
            return Ok(Incoming {
                address: listening.address,
                migration_port: listening.migration_port,
                disk_port: listening.disk_port,
            });
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        self.qemu_uid(vmi)?;
        let tuning = &self.tuning_with_credentials(vmi, settings, Side::Target)?;
        let spec = match self.machine(vmi, sources).await {
            Ok(spec) => spec,
            Err(Started::Failed { message, .. }) => return Err(message),
            Err(other) => return Err(format!("{other:?}")),
        };
        let log = dir.join("qemu.log");
        let instance = Instance::spawn_incoming(&self.config.binary, &spec, &log)
            .await
            .map_err(|e| e.to_string())?;
        let address = self.config.node_address.clone();
        // A QEMU in a Pod listens at the Pod IP on KubeVirt's migration ports, which the
        // node relays from ports of its own address (the one the migration's TLS
        // certificate names).
        let pod_ip = self.pod.as_ref().map(|pod| pod.address);
        let listen_host = pod_ip.map_or_else(|| address.clone(), |ip| ip.to_string());
        let mut relays = Vec::new();
        let listen = async {
            let disks = qm::local_disks(&instance.qmp, &dir)
                .await
                .map_err(|e| e.to_string())?;
            let listen_port = |which: usize| match pod_ip {
                Some(_) => Ok(network::masquerade::MIGRATION_PORTS[which]),
                None => free_port(&address),
            };
            let disk_port = if disks.is_empty() {
                None
            } else {
                let port = listen_port(1)?;
                let at = Endpoint {
                    host: listen_host.clone(),
                    port,
                };
                qm::export_disks(&instance.qmp, &at, &disks, tuning.tls.as_ref())
                    .await
                    .map_err(|e| format!("exporting the disks for the copy: {e}"))?;
                Some(port)
            };
            let migration_port = listen_port(0)?;
            let at = Endpoint {
                host: listen_host.clone(),
                port: migration_port,
            };
            qm::receive(&instance.qmp, &at, tuning)
                .await
                .map_err(|e| format!("listening for the guest: {e}"))?;
            let (migration_port, disk_port) = match pod_ip {
                None => (migration_port, disk_port),
                Some(ip) => {
                    let (port, relay) =
                        super::pod::relay_into(&address, ip, migration_port).await?;
                    relays.push(relay);
                    let disk_port = match disk_port {
                        None => None,
                        Some(inside) => {
                            let (port, relay) =
                                super::pod::relay_into(&address, ip, inside).await?;
                            relays.push(relay);
                            Some(port)
                        }
                    };
                    (port, disk_port)
                }
            };
            Ok::<_, String>(Listening {
                address: address.clone(),
                migration_port,
                disk_port,
            })
        };
        let listening = match listen.await {
            Ok(listening) => listening,
            Err(e) => {
                instance.kill();
                relays.iter().for_each(tokio::task::JoinHandle::abort);
                return Err(e);
            }
        };
        self.relays = relays;
        let text = serde_json::to_string(&listening).map_err(|e| e.to_string())?;
        if let Err(e) = std::fs::write(&file, text) {
            instance.kill();
            return Err(format!("writing {}: {e}", file.display()));
        }
        tracing::info!(
            "{}/{}: waiting for the guest on {address}:{} (disks on {:?})",
            vmi.namespace().to_string(),
            vmi.name_any(),
            listening.migration_port,
            listening.disk_port
        );
        self.running = Some(Running::new(instance));
        Ok(Incoming {
            address: listening.address,
            migration_port: listening.migration_port,
            disk_port: listening.disk_port,
        })
    }

    /// Where the source QEMU sends the guest: the target's listeners, or, from a QEMU in
    /// a Pod (whose namespace cannot reach a node's loopback address), relays on this
    /// node's bridge address, with TLS still checked against the target's own name.
    async fn outgoing_plan(
        &self,
        to: &Incoming,
        disks: Vec<String>,
        tuning: &Tuning,
    ) -> Result<(Plan, Vec<tokio::task::JoinHandle<()>>), String> {
        let via = match (
            &self.pod,
            self.config.pod_network.as_ref().and_then(|s| s.get()),
        ) {
            (Some(_), Some(ready)) => Some(ready.network.gateway().to_string()),
            _ => None,
        };
        let Some(via) = via else {
            let plan = Plan {
                migration: Endpoint {
                    host: to.address.clone(),
                    port: to.migration_port,
                },
                nbd: to.disk_port.map(|port| Endpoint {
                    host: to.address.clone(),
                    port,
                }),
                disks,
                tuning: tuning.clone(),
                tls_hostname: None,
            };
            return Ok((plan, Vec::new()));
        };
        let mut relays = Vec::new();
        let (port, relay) = super::pod::relay(&via, to.address.clone(), to.migration_port).await?;
        relays.push(relay);
        let nbd = match to.disk_port {
            None => None,
            Some(disk_port) => {
                let (port, relay) = super::pod::relay(&via, to.address.clone(), disk_port).await?;
                relays.push(relay);
                Some(Endpoint {
                    host: via.clone(),
                    port,
                })
            }
        };
        let plan = Plan {
            migration: Endpoint {
                host: via.clone(),
                port,
            },
            nbd,
            disks,
            tuning: tuning.clone(),
            tls_hostname: Some(to.address.clone()),
        };
        Ok((plan, relays))
    }

    /// The tuning with TLS pointing at this side's credentials, written into the VMI's
    /// dir (the target gets the serving certificate, the source the client one).
    fn tuning_with_credentials(
        &self,
        vmi: &VirtualMachineInstance,
        settings: &MigrationSettings,
        side: Side,
    ) -> Result<Tuning, String> {
        let mut tuning = settings.tuning.clone();
        let Some(credentials) = &settings.credentials else {
            return Ok(tuning);
        };
        let dir = self.dir(vmi).join(TLS_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let wanted: &[&str] = match side {
            Side::Target => &["ca-cert.pem", "server-cert.pem", "server-key.pem"],
            Side::Source => &["ca-cert.pem", "client-cert.pem", "client-key.pem"],
        };
        // Ready-made DH parameters spare the target QEMU from generating them.
        // QEMU reads them (its TLS object loads the dir), the agent writes them.
        self.grant(vmi, &dir, true)?;
        if let (Side::Target, Some(dh)) = (side, credentials.get("dh-params.pem")) {
            write_private(&dir.join("dh-params.pem"), dh)?;
            self.grant(vmi, &dir.join("dh-params.pem"), true)?;
        }
        for file in wanted {
            let pem = credentials
                .get(*file)
                .ok_or_else(|| format!("the migration's TLS credentials have no {file}"))?;
            write_private(&dir.join(file), pem)?;
            self.grant(vmi, &dir.join(file), true)?;
        }
        tuning.tls = Some(qm::Tls { dir });
        Ok(tuning)
    }

    pub(super) async fn guest_arrival(&mut self, vmi: &VirtualMachineInstance) -> Arrival {
        let Some(entry) = self.instance().await else {
            return Arrival::Failed("the target QEMU is gone".into());
        };
        if entry.instance.exited() {
            self.running = None;
            let words = self
                .qemu_words(vmi, &["qemu-system", "error", "Error"])
                .unwrap_or_else(|| "no message in its log".into());
            return Arrival::Failed(format!("the target QEMU exited: {words}"));
        }
        // Asked, not followed: a target started with -S goes from inmigrate to paused
        // without an event.
        match entry
            .instance
            .qmp
            .status()
            .await
            .map(|s| RunState::parse(&s))
        {
            Ok(RunState::InMigrate) => Arrival::Waiting,
            Ok(RunState::Paused | RunState::Running | RunState::Prelaunch) => Arrival::Arrived,
            Ok(other) => Arrival::Failed(format!(
                "the target QEMU is in state {} instead of receiving the guest",
                other.as_str()
            )),
            Err(e) => Arrival::Failed(format!("the target QEMU does not answer: {e}")),
        }
    }

    pub(super) async fn take_over_guest(
        &mut self,
        vmi: &VirtualMachineInstance,
        paused: bool,
    ) -> Result<GuestInfo, String> {
        // The guest is here: nothing more comes through the migration relays.
        self.relays.drain(..).for_each(|relay| relay.abort());
        let entry = self.instance().await.ok_or("the target QEMU is gone")?;
        if let Err(e) = qm::stop_exports(&entry.instance.qmp).await {
            tracing::warn!("stopping the disk exports of {}: {e}", vmi.name_any());
        }
        if !paused {
            entry
                .instance
                .resume()
                .await
                .map_err(|e| format!("running the guest on the target: {e}"))?;
        }
        let _ = std::fs::remove_file(self.dir(vmi).join(LISTENING_FILE));
        // The migration's keys are of no use once it is over.
        let _ = std::fs::remove_dir_all(self.dir(vmi).join(TLS_DIR));
        Ok(self.guest_info(vmi))
    }

    pub(super) async fn send_guest(
        &mut self,
        vmi: &VirtualMachineInstance,
        migration: &str,
        to: &Incoming,
        settings: &MigrationSettings,
    ) -> Result<(), String> {
        if lock(&self.outbound)
            .as_ref()
            .is_some_and(|o| o.migration == migration)
        {
            return Ok(());
        }
        let entry = self.instance().await.ok_or("the source QEMU is gone")?;
        let qmp = entry.instance.qmp.clone();
        let tuning = &self.tuning_with_credentials(vmi, settings, Side::Source)?;
        let (progress_tx, progress) = watch::channel(Progress::default());
        let (result_tx, result) = watch::channel(None);
        let (abort, abort_rx) = watch::channel(false);
        // An agent that restarted during this migration finds QEMU's where it was. Only
        // then: `query-migrate` of a QEMU that received its guest reports that incoming
        // migration as completed, which says nothing about this one.
        let marker = self.dir(vmi).join(SENDING_FILE);
        let resumed = std::fs::read_to_string(&marker).is_ok_and(|m| m.trim() == migration);
        let before = if resumed {
            qm::progress(&qmp).await.map_err(|e| e.to_string())?
        } else {
            Progress::default()
        };
        match before.status {
            Some(qm::Status::Completed) => {
                result_tx.send_replace(Some(Ok(before)));
            }
            Some(qm::Status::None | qm::Status::Failed | qm::Status::Cancelled) | None => {
                std::fs::write(&marker, migration)
                    .map_err(|e| format!("writing {}: {e}", marker.display()))?;
                let disks = qm::local_disks(&qmp, &self.dir(vmi))
                    .await
                    .map_err(|e| e.to_string())?;
                let (plan, relays) = self.outgoing_plan(to, disks, tuning).await?;
                let changes = self.changes.clone();
                let key = (vmi.namespace().to_string(), vmi.name_any());
                tokio::spawn(
                    async move {
                        let result = qm::send(qmp, &plan, &progress_tx, abort_rx).await;
                        relays.iter().for_each(tokio::task::JoinHandle::abort);
                        match &result {
                            Ok(p) => tracing::info!(
                                "{}/{} moved: {} ms, downtime {} ms, {} B of memory, {} B of disk",
                                key.0,
                                key.1,
                                p.total_time_ms,
                                p.downtime_ms,
                                p.transferred,
                                p.disk_copied
                            ),
                            Err(e) => tracing::warn!("{}/{} did not move: {e}", key.0, key.1),
                        }
                        result_tx.send_replace(Some(result));
                        let _ = changes.send(key);
                    }
                    .in_current_span(),
                );
            }
            Some(_) => {
                // Started by an agent before a restart: its driver is gone, so it is
                // cancelled and ends in a defined state — here, unless QEMU finished first.
                let disks = qm::local_disks(&qmp, &self.dir(vmi))
                    .await
                    .map_err(|e| e.to_string())?;
                let ended = qm::abandon(&qmp, &disks).await.map_err(|e| e.to_string())?;
                let result = if ended.status == Some(qm::Status::Completed) {
                    Ok(ended)
                } else {
                    Err(Failure::Qemu(
                        "the source node agent restarted during the migration".into(),
                    ))
                };
                result_tx.send_replace(Some(result));
            }
        }
        *lock(&self.outbound) = Some(Outbound {
            migration: migration.to_string(),
            progress,
            result,
            abort,
        });
        Ok(())
    }
}

fn lock(outbound: &OutboundCell) -> std::sync::MutexGuard<'_, Option<Outbound>> {
    outbound.lock().unwrap_or_else(|p| p.into_inner())
}

/// How the outgoing migration `migration` goes, when it was started here.
pub(super) fn outgoing(outbound: &OutboundCell, migration: &str) -> Option<Sending> {
    let outbound = lock(outbound);
    let entry = outbound.as_ref().filter(|o| o.migration == migration)?;
    let result = entry.result.borrow().clone();
    Some(match result {
        None => Sending::Moving(entry.progress.borrow().clone()),
        Some(Ok(progress)) => Sending::Done(progress),
        Some(Err(failure)) => Sending::Failed(failure.to_string()),
    })
}

/// The progress of the outgoing migration while it moves (none once it ended).
pub(super) fn moving(outbound: &OutboundCell) -> Option<Progress> {
    let outbound = lock(outbound);
    let entry = outbound.as_ref()?;
    let moving = entry.result.borrow().is_none();
    moving.then(|| entry.progress.borrow().clone())
}

/// Asks the outgoing migration `migration` to stop; it then ends as failed.
pub(super) fn abort_outgoing(outbound: &OutboundCell, migration: &str) {
    if let Some(entry) = lock(outbound).as_ref().filter(|o| o.migration == migration) {
        entry.abort.send_replace(true);
    }
}
