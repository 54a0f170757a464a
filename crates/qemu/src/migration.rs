//! Live migration with QEMU's own mechanisms, as libvirt drives them: the target waits
//! with `-incoming defer` and exports its node-local disks over NBD; the source mirrors
//! those disks onto the exports (`blockdev-mirror`), sends RAM and device state over TCP
//! (`migrate`), and with `pause-before-switchover` finishes the disk copies while the
//! vCPUs are stopped, so the target's disks are exactly the source's when it takes over.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::qmp::{Qmp, QmpError};

/// Where a listener of the target is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// `tcp:HOST:PORT`, with an IPv6 host in brackets.
    pub fn uri(&self) -> String {
        if self.host.contains(':') {
            format!("tcp:[{}]:{}", self.host, self.port)
        } else {
            format!("tcp:{}:{}", self.host, self.port)
        }
    }

    fn inet(&self) -> Value {
        json!({"type": "inet", "host": self.host, "port": self.port.to_string()})
    }
}

/// TLS credentials for the migration stream and the NBD connections: a directory with
/// `ca-cert.pem`, `server-cert.pem`/`server-key.pem` (target) and
/// `client-cert.pem`/`client-key.pem` (source), as QEMU's `tls-creds-x509` reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    pub dir: std::path::PathBuf,
}

/// The credentials objects: one per side, since a QEMU that received its guest may later
/// send it on.
const TLS_SERVER_ID: &str = "migration-tls-server";
const TLS_CLIENT_ID: &str = "migration-tls-client";

/// Adds this side's credentials object (`server` on the target, which verifies its peer),
/// replacing one an earlier migration left with other credentials; returns its id.
async fn add_tls(qmp: &Qmp, tls: &Tls, server: bool) -> Result<&'static str, QmpError> {
    let id = if server { TLS_SERVER_ID } else { TLS_CLIENT_ID };
    // Fails when there is none, which is the usual case.
    let _ = qmp.execute("object-del", Some(json!({"id": id}))).await;
    let mut args = json!({"qom-type": "tls-creds-x509", "id": id,
        "dir": tls.dir.display().to_string(),
        "endpoint": if server { "server" } else { "client" }});
    if server {
        args["verify-peer"] = json!(true);
    }
    match qmp.execute("object-add", Some(args)).await {
        // Still in use by this migration's own NBD server: the same credentials.
        Err(QmpError::Command { desc, .. })
            if desc.contains("already exists") || desc.contains("duplicate property") =>
        {
            Ok(id)
        }
        other => other.map(|_| id),
    }
}

/// How a migration may go about converging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Bytes per second; `None` lifts QEMU's default cap of 128 MiB/s.
    pub max_bandwidth: Option<u64>,
    /// The pause QEMU may spend on the final switch-over. QEMU spends this budget rather
    /// than aiming below it (measured: 300 ms lets downtime rise to 50–160 ms).
    pub downtime_limit: Duration,
    /// Throttle the guest's vCPUs when it dirties memory faster than it is sent (QEMU
    /// does so only then, so this is the first step of escalation, not a constant cost).
    pub auto_converge: bool,
    /// Allow switching to post-copy when pre-copy does not finish in time (both sides
    /// must have it).
    pub post_copy: bool,
    /// Without post-copy: pause the guest when pre-copy does not finish in time, so that
    /// it converges (KubeVirt's `Paused` mode, `allowWorkloadDisruption`); the guest runs
    /// again on the target, or on the source if the migration fails.
    pub pause_to_converge: bool,
    /// Abort when the data still to send has not shrunk for this long.
    pub progress_timeout: Duration,
    /// Abort (or switch to post-copy, when allowed) after this long.
    pub completion_timeout: Duration,
    pub tls: Option<Tls>,
}

/// `query-migrate`'s status, typed (QAPI `MigrationStatus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    None,
    Setup,
    Active,
    PostcopyActive,
    PreSwitchover,
    Device,
    Completed,
    Failed,
    Cancelling,
    Cancelled,
    Other(String),
}

impl Status {
    fn parse(text: &str) -> Status {
        match text {
            "none" => Status::None,
            "setup" => Status::Setup,
            "active" => Status::Active,
            "postcopy-active" | "postcopy-paused" | "postcopy-recover" => Status::PostcopyActive,
            "pre-switchover" => Status::PreSwitchover,
            "device" => Status::Device,
            "completed" => Status::Completed,
            "failed" => Status::Failed,
            "cancelling" => Status::Cancelling,
            "cancelled" => Status::Cancelled,
            other => Status::Other(other.to_string()),
        }
    }
}

/// Where an outgoing migration stands, from `query-migrate`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub status: Option<Status>,
    pub total_time_ms: u64,
    pub downtime_ms: u64,
    pub setup_time_ms: u64,
    /// RAM bytes sent.
    pub transferred: u64,
    pub remaining: u64,
    /// The guest's RAM, what the migration moves at least once.
    pub ram_total: u64,
    /// How fast the guest dirties RAM (pages per second × page size), bytes per second.
    pub dirty_rate_bytes: u64,
    /// How fast RAM goes over the wire, bytes per second.
    pub transfer_rate_bytes: u64,
    /// Disk bytes copied by the mirrors.
    pub disk_copied: u64,
    /// `PreCopy` or `PostCopy`.
    pub post_copy: bool,
    /// The source paused the guest so that the migration converges.
    pub paused_guest: bool,
    pub error: Option<String>,
}

impl Progress {
    fn from_reply(reply: &Value) -> Progress {
        let u = |p: &str| reply.pointer(p).and_then(Value::as_u64).unwrap_or(0);
        let status = reply["status"].as_str().map(Status::parse);
        Progress {
            post_copy: status == Some(Status::PostcopyActive),
            status,
            total_time_ms: u("/total-time"),
            downtime_ms: u("/downtime"),
            setup_time_ms: u("/setup-time"),
            transferred: u("/ram/transferred"),
            remaining: u("/ram/remaining"),
            ram_total: u("/ram/total"),
            dirty_rate_bytes: u("/ram/dirty-pages-rate") * u("/ram/page-size"),
            // `mbps` is megabits (10^6) per second.
            transfer_rate_bytes: reply
                .pointer("/ram/mbps")
                .and_then(Value::as_f64)
                .map_or(0, |mbps| (mbps * 1e6 / 8.0) as u64),
            disk_copied: 0,
            paused_guest: false,
            error: reply["error-desc"].as_str().map(str::to_string),
        }
    }
}

/// Why an outgoing migration ended without moving the guest.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("Live migration has been aborted")]
    Aborted,
    #[error("Live migration stuck for {0} sec and has been aborted")]
    Stuck(u64),
    #[error("Live migration is not completed after {0} sec and has been aborted")]
    TooSlow(u64),
    /// QEMU's own words.
    #[error("{0}")]
    Qemu(String),
}

impl From<QmpError> for Failure {
    fn from(e: QmpError) -> Failure {
        Failure::Qemu(e.to_string())
    }
}

/// The node names of the disks whose files live under `dir` (the VMI's own files on this
/// node, which the target does not have) and that the guest can write: what a migration
/// must copy. Disks elsewhere are shared (the target opens the same path).
pub async fn local_disks(qmp: &Qmp, dir: &Path) -> Result<Vec<String>, QmpError> {
    let reply = qmp.execute("query-block", None).await?;
    let dir = dir.display().to_string();
    let mut nodes = Vec::new();
    for device in reply.as_array().into_iter().flatten() {
        let Some(inserted) = device.get("inserted") else {
            continue;
        };
        let file = inserted["image"]["filename"]
            .as_str()
            .or_else(|| inserted["file"].as_str())
            .unwrap_or("");
        let writable = inserted["ro"] != json!(true);
        if let (Some(node), true, true) = (
            inserted["node-name"].as_str(),
            writable,
            file.starts_with(&dir),
        ) {
            nodes.push(node.to_string());
        }
    }
    Ok(nodes)
}

/// Target: exports `nodes` writable over NBD at `at`, for the source's mirrors.
pub async fn export_disks(
    qmp: &Qmp,
    at: &Endpoint,
    nodes: &[String],
    tls: Option<&Tls>,
) -> Result<(), QmpError> {
    if nodes.is_empty() {
        return Ok(());
    }
    let mut server =
        json!({"addr": {"type": "inet", "data": {"host": at.host, "port": at.port.to_string()}}});
    if let Some(tls) = tls {
        server["tls-creds"] = json!(add_tls(qmp, tls, true).await?);
    }
    qmp.execute("nbd-server-start", Some(server)).await?;
    for node in nodes {
        qmp.execute(
            "block-export-add",
            Some(
                json!({"type": "nbd", "id": format!("export-{node}"), "node-name": node,
                        "name": node, "writable": true}),
            ),
        )
        .await?;
    }
    Ok(())
}

/// Target: stops the NBD server once the guest has arrived (or the migration failed).
pub async fn stop_exports(qmp: &Qmp) -> Result<(), QmpError> {
    match qmp.execute("nbd-server-stop", None).await {
        Err(QmpError::Command { desc, .. }) if desc.contains("not running") => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Target: listens for the guest at `at`. With post-copy allowed, the target must have
/// the capability too.
pub async fn receive(qmp: &Qmp, at: &Endpoint, tuning: &Tuning) -> Result<(), QmpError> {
    if tuning.post_copy {
        set_capabilities(qmp, &[("postcopy-ram", true)]).await?;
    }
    if let Some(tls) = &tuning.tls {
        let id = add_tls(qmp, tls, true).await?;
        qmp.execute("migrate-set-parameters", Some(json!({"tls-creds": id})))
            .await?;
    }
    qmp.execute("migrate-incoming", Some(json!({"uri": at.uri()})))
        .await
        .map(|_| ())
}

async fn set_capabilities(qmp: &Qmp, caps: &[(&str, bool)]) -> Result<(), QmpError> {
    let list: Vec<Value> = caps
        .iter()
        .map(|(c, on)| json!({"capability": c, "state": on}))
        .collect();
    qmp.execute(
        "migrate-set-capabilities",
        Some(json!({"capabilities": list})),
    )
    .await
    .map(|_| ())
}

/// What the source sends and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub migration: Endpoint,
    /// The target's NBD server, when there are disks to copy.
    pub nbd: Option<Endpoint>,
    /// Node names of the disks to copy (`local_disks`).
    pub disks: Vec<String>,
    pub tuning: Tuning,
    /// The name the target's TLS certificate is checked against, when the endpoints are
    /// relays rather than the target itself (`tls-hostname`; default: their host).
    pub tls_hostname: Option<String>,
}

const POLL: Duration = Duration::from_millis(10);

fn mirror_node(node: &str) -> String {
    format!("migrate-{node}")
}

fn mirror_job(node: &str) -> String {
    format!("mirror-{node}")
}

/// Source: moves the guest. Progress goes to `progress` as it changes; `abort` turning
/// true cancels it. On success the source's vCPUs are stopped for good (`postmigrate`) and
/// the target holds the guest, paused until it is continued; on failure the source runs
/// again as before (QEMU resumes a guest that was running).
pub async fn send(
    qmp: Arc<Qmp>,
    plan: &Plan,
    progress: &watch::Sender<Progress>,
    mut abort: watch::Receiver<bool>,
) -> Result<Progress, Failure> {
    let began = Instant::now();
    let result = drive(&qmp, plan, progress, &mut abort, began).await;
    if result.is_err() {
        let _ = qmp.execute("migrate_cancel", None).await;
        cancel_mirrors(&qmp, &plan.disks, true).await;
        // A cancel during the final stop leaves the vCPUs stopped until cancelled out.
        wait_not_active(&qmp).await;
        // QEMU resumes a guest that ran when the migration began, not one paused to
        // converge: that one is continued here.
        if progress.borrow().paused_guest {
            if let Err(e) = qmp.execute("cont", None).await {
                tracing::warn!("cannot resume the guest paused for its migration: {e}");
            }
        }
    }
    result
}

async fn drive(
    qmp: &Qmp,
    plan: &Plan,
    progress: &watch::Sender<Progress>,
    abort: &mut watch::Receiver<bool>,
    began: Instant,
) -> Result<Progress, Failure> {
    let tuning = &plan.tuning;
    let copy_disks = !plan.disks.is_empty();
    set_capabilities(
        qmp,
        &[
            ("pause-before-switchover", copy_disks),
            ("auto-converge", tuning.auto_converge),
            ("postcopy-ram", tuning.post_copy),
        ],
    )
    .await?;
    let mut parameters = json!({
        "downtime-limit": tuning.downtime_limit.as_millis() as u64,
        // Unlimited unless asked: QEMU's default of 128 MiB/s doubles the total time.
        "max-bandwidth": tuning.max_bandwidth.unwrap_or(10 << 30),
    });
    // Empty turns TLS off, also on a QEMU whose incoming migration set it.
    parameters["tls-creds"] = match &tuning.tls {
        Some(tls) => json!(add_tls(qmp, tls, false).await?),
        None => json!(""),
    };
    if let (Some(_), Some(hostname)) = (&tuning.tls, &plan.tls_hostname) {
        parameters["tls-hostname"] = json!(hostname);
    }
    qmp.execute("migrate-set-parameters", Some(parameters))
        .await?;
    if let (true, Some(nbd)) = (copy_disks, &plan.nbd) {
        for node in &plan.disks {
            let mut target = json!({"driver": "nbd", "node-name": mirror_node(node),
                "server": nbd.inet(), "export": node});
            if tuning.tls.is_some() {
                target["tls-creds"] = json!(TLS_CLIENT_ID);
                if let Some(hostname) = &plan.tls_hostname {
                    target["tls-hostname"] = json!(hostname);
                }
            }
            qmp.execute("blockdev-add", Some(target)).await?;
            qmp.execute(
                "blockdev-mirror",
                Some(json!({"job-id": mirror_job(node), "device": node,
                            "target": mirror_node(node), "sync": "top"})),
            )
            .await?;
        }
        loop {
            let jobs = block_jobs(qmp, &plan.disks).await?;
            progress.send_modify(|p| p.disk_copied = jobs.copied);
            if let Some(error) = jobs.error {
                return Err(Failure::Qemu(error));
            }
            if jobs.ready {
                break;
            }
            check_limits(abort, &jobs.stalled_since(began), tuning, began)?;
            tokio::time::sleep(POLL).await;
        }
    }
    qmp.execute("migrate", Some(json!({"uri": plan.migration.uri()})))
        .await?;
    let mut least_remaining = u64::MAX;
    let mut last_progress = Instant::now();
    let mut post_copy = false;
    let mut paused_guest = false;
    let mut continued = false;
    loop {
        let reply = qmp.execute("query-migrate", None).await?;
        let mut now = Progress::from_reply(&reply);
        now.disk_copied = progress.borrow().disk_copied;
        now.post_copy |= post_copy;
        now.paused_guest = paused_guest;
        progress.send_replace(now.clone());
        match now.status.clone().unwrap_or(Status::None) {
            Status::Completed => return Ok(now),
            Status::Failed | Status::Cancelled => {
                return Err(Failure::Qemu(
                    now.error
                        .unwrap_or_else(|| "QEMU reports the migration failed".into()),
                ))
            }
            // Once only: QEMU reports pre-switchover until its migration thread wakes, and a
            // second continue that finds it completed is an error.
            Status::PreSwitchover if !continued => {
                continued = true;
                // vCPUs stopped: the mirrors catch up and finish, then the last of RAM goes.
                let copied = cancel_mirrors(qmp, &plan.disks, false).await;
                if let Some(copied) = copied {
                    progress.send_modify(|p| p.disk_copied = copied.max(p.disk_copied));
                }
                qmp.execute("migrate-continue", Some(json!({"state": "pre-switchover"})))
                    .await?;
            }
            _ => {}
        }
        if now.remaining < least_remaining {
            least_remaining = now.remaining;
            last_progress = Instant::now();
        }
        // The last step of escalation (pre-copy, then auto-converge's throttling, then
        // post-copy when allowed): a guest that still does not converge with its vCPUs
        // throttled hard, or after half its time, is moved by post-copy rather than aborted.
        let throttled_hard = reply["cpu-throttle-percentage"].as_u64().unwrap_or(0) >= 90;
        let half_time = began.elapsed() > tuning.completion_timeout / 2;
        if !post_copy
            && tuning.post_copy
            && now.status == Some(Status::Active)
            && (throttled_hard || half_time)
        {
            tracing::info!("migration does not converge: switching to post-copy");
            qmp.execute("migrate-start-postcopy", None).await?;
            post_copy = true;
        }
        if !post_copy {
            match check_limits(abort, &last_progress, tuning, began) {
                Err(Failure::TooSlow(_)) if tuning.post_copy => {
                    // Out of time with post-copy allowed: the target runs the guest and
                    // pulls the rest; post-copy is never aborted.
                    tracing::info!("migration did not converge in time: switching to post-copy");
                    qmp.execute("migrate-start-postcopy", None).await?;
                    post_copy = true;
                }
                // Out of time with workload disruption allowed: a paused guest dirties
                // nothing, so what is left goes; only a stall aborts it now.
                Err(Failure::TooSlow(_)) if tuning.pause_to_converge && !paused_guest => {
                    tracing::info!("migration did not converge in time: pausing the guest");
                    qmp.execute("stop", None).await?;
                    paused_guest = true;
                    progress.send_modify(|p| p.paused_guest = true);
                }
                Err(Failure::TooSlow(_)) if paused_guest => {}
                other => other?,
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

fn check_limits(
    abort: &mut watch::Receiver<bool>,
    last_progress: &Instant,
    tuning: &Tuning,
    began: Instant,
) -> Result<(), Failure> {
    if *abort.borrow_and_update() {
        return Err(Failure::Aborted);
    }
    if last_progress.elapsed() > tuning.progress_timeout {
        return Err(Failure::Stuck(tuning.progress_timeout.as_secs()));
    }
    if began.elapsed() > tuning.completion_timeout {
        return Err(Failure::TooSlow(tuning.completion_timeout.as_secs()));
    }
    Ok(())
}

struct Jobs {
    ready: bool,
    copied: u64,
    error: Option<String>,
    /// When the copied total last grew; the start when unknown.
    stalled: Option<Instant>,
}

impl Jobs {
    fn stalled_since(&self, began: Instant) -> Instant {
        self.stalled.unwrap_or(began)
    }
}

async fn block_jobs(qmp: &Qmp, disks: &[String]) -> Result<Jobs, QmpError> {
    let reply = qmp.execute("query-block-jobs", None).await?;
    let mut jobs = Jobs {
        ready: true,
        copied: 0,
        error: None,
        stalled: None,
    };
    for node in disks {
        let job = reply
            .as_array()
            .into_iter()
            .flatten()
            .find(|j| j["device"] == mirror_job(node));
        match job {
            None => {
                jobs.error = Some(format!("the copy of disk {node} to the target ended early"));
                jobs.ready = false;
            }
            Some(job) => {
                jobs.copied += job["offset"].as_u64().unwrap_or(0);
                jobs.ready &= job["ready"] == json!(true);
                if job["io-status"].as_str().is_some_and(|s| s != "ok") {
                    jobs.error = Some(format!(
                        "copying disk {node} to the target: {}",
                        job["error"].as_str().unwrap_or("I/O error")
                    ));
                }
            }
        }
    }
    Ok(jobs)
}

/// Ends the mirror jobs and removes their NBD clients. Without `force` a ready job first
/// copies what is left, so the target is an exact copy; the bytes copied are returned.
async fn cancel_mirrors(qmp: &Qmp, disks: &[String], force: bool) -> Option<u64> {
    let copied = block_jobs(qmp, disks).await.ok().map(|j| j.copied);
    for node in disks {
        let job = mirror_job(node);
        if let Err(e) = qmp
            .execute(
                "block-job-cancel",
                Some(json!({"device": job, "force": force})),
            )
            .await
        {
            tracing::debug!("block-job-cancel {job}: {e}");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let Ok(reply) = qmp.execute("query-block-jobs", None).await else {
            break;
        };
        let left = reply
            .as_array()
            .into_iter()
            .flatten()
            .any(|j| disks.iter().any(|n| j["device"] == mirror_job(n)));
        if !left {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    for node in disks {
        if let Err(e) = qmp
            .execute(
                "blockdev-del",
                Some(json!({"node-name": mirror_node(node)})),
            )
            .await
        {
            tracing::debug!("blockdev-del {}: {e}", mirror_node(node));
        }
    }
    copied
}

async fn wait_not_active(qmp: &Qmp) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match qmp.execute("query-migrate", None).await {
            Ok(reply) => match Status::parse(reply["status"].as_str().unwrap_or("none")) {
                Status::Cancelling | Status::Active | Status::Setup | Status::Device => {}
                Status::PreSwitchover => {
                    let _ = qmp.execute("migrate_cancel", None).await;
                }
                _ => return,
            },
            Err(_) => return,
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Stops an outgoing migration nobody drives any more (its agent restarted): cancels it
/// and its disk copies, waits until QEMU has let go, and says how it ended — it may have
/// completed before the cancel reached it.
pub async fn abandon(qmp: &Qmp, disks: &[String]) -> Result<Progress, QmpError> {
    if let Err(e) = qmp.execute("migrate_cancel", None).await {
        tracing::warn!("cancelling an abandoned migration: {e}");
    }
    cancel_mirrors(qmp, disks, true).await;
    wait_not_active(qmp).await;
    progress(qmp).await
}

/// What `query-migrate` says now (for an agent that restarted during a migration).
pub async fn progress(qmp: &Qmp) -> Result<Progress, QmpError> {
    let reply = qmp.execute("query-migrate", None).await?;
    Ok(Progress::from_reply(&reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_brackets_ipv6() {
        let v4 = Endpoint {
            host: "127.0.0.1".into(),
            port: 49152,
        };
        assert_eq!(v4.uri(), "tcp:127.0.0.1:49152");
        let v6 = Endpoint {
            host: "::1".into(),
            port: 49152,
        };
        assert_eq!(v6.uri(), "tcp:[::1]:49152");
    }

    #[test]
    fn progress_reads_query_migrate() {
        let reply = json!({"status": "completed", "total-time": 420, "downtime": 7,
            "setup-time": 1, "ram": {"transferred": 1048576, "remaining": 0}});
        let p = Progress::from_reply(&reply);
        assert_eq!(p.status, Some(Status::Completed));
        assert_eq!(
            (p.total_time_ms, p.downtime_ms, p.transferred),
            (420, 7, 1048576)
        );
        let active = Progress::from_reply(&json!({"status": "active", "ram": {"total": 134217728,
            "remaining": 4096, "dirty-pages-rate": 100, "page-size": 4096, "mbps": 800.0}}));
        assert_eq!(
            (
                active.ram_total,
                active.dirty_rate_bytes,
                active.transfer_rate_bytes
            ),
            (134217728, 409600, 100_000_000)
        );
        let failed = Progress::from_reply(&json!({"status": "failed", "error-desc": "boom"}));
        assert_eq!(failed.error.as_deref(), Some("boom"));
    }

    #[test]
    fn failures_use_kubevirt_words() {
        assert_eq!(
            Failure::Aborted.to_string(),
            "Live migration has been aborted"
        );
        assert_eq!(
            Failure::Stuck(150).to_string(),
            "Live migration stuck for 150 sec and has been aborted"
        );
        assert_eq!(
            Failure::TooSlow(450).to_string(),
            "Live migration is not completed after 450 sec and has been aborted"
        );
    }
}
