//! QEMU's run state, kept current from QMP events, so that a guest whose vCPUs stopped
//! (a KVM internal error, a panic, a disk I/O error) is seen as such and never taken for
//! a running one.

use std::sync::Weak;

use serde_json::Value;
use tokio::sync::{broadcast, watch};

use crate::qmp::Qmp;

/// `query-status`'s `status`, typed (QAPI `RunState`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunState {
    Running,
    /// Stopped by a `stop` command.
    Paused,
    /// Started with `-S` and not yet continued.
    Prelaunch,
    /// Waiting for an incoming migration.
    InMigrate,
    /// The guest moved away (outgoing migration done).
    PostMigrate,
    FinishMigrate,
    /// The accelerator could not run the guest (e.g. KVM's emulation failure).
    InternalError,
    /// A disk request failed and the device's error policy stopped the guest.
    IoError,
    GuestPanicked,
    /// The guest powered off but QEMU stays (`-no-shutdown`).
    Shutdown,
    /// A watchdog fired with action `pause`.
    Watchdog,
    Suspended,
    Debug,
    Other(String),
}

impl RunState {
    pub fn parse(text: &str) -> RunState {
        match text {
            "running" => RunState::Running,
            "paused" => RunState::Paused,
            "prelaunch" => RunState::Prelaunch,
            "inmigrate" => RunState::InMigrate,
            "postmigrate" => RunState::PostMigrate,
            "finish-migrate" => RunState::FinishMigrate,
            "internal-error" => RunState::InternalError,
            "io-error" => RunState::IoError,
            "guest-panicked" => RunState::GuestPanicked,
            "shutdown" => RunState::Shutdown,
            "watchdog" => RunState::Watchdog,
            "suspended" => RunState::Suspended,
            "debug" => RunState::Debug,
            other => RunState::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            RunState::Running => "running",
            RunState::Paused => "paused",
            RunState::Prelaunch => "prelaunch",
            RunState::InMigrate => "inmigrate",
            RunState::PostMigrate => "postmigrate",
            RunState::FinishMigrate => "finish-migrate",
            RunState::InternalError => "internal-error",
            RunState::IoError => "io-error",
            RunState::GuestPanicked => "guest-panicked",
            RunState::Shutdown => "shutdown",
            RunState::Watchdog => "watchdog",
            RunState::Suspended => "suspended",
            RunState::Debug => "debug",
            RunState::Other(s) => s,
        }
    }
}

/// What is known of a QEMU's guest, updated as events arrive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunStatus {
    pub state: RunState,
    /// The reason of the last SHUTDOWN event (`guest-shutdown` when the guest powered
    /// itself off).
    pub shutdown_reason: Option<String>,
    /// The last BLOCK_IO_ERROR: device and QEMU's reason.
    pub io_error: Option<String>,
    /// Events that were dropped because this watcher fell behind (the state was then
    /// read again with `query-status`).
    pub events_lost: u64,
    /// The monitor connection ended (QEMU exited or was killed).
    pub closed: bool,
}

impl RunStatus {
    fn new(state: RunState) -> RunStatus {
        RunStatus {
            state,
            shutdown_reason: None,
            io_error: None,
            events_lost: 0,
            closed: false,
        }
    }
}

/// Starts following `qmp`'s events; the receiver always holds the current status. The
/// task ends when the monitor closes (the status then says `closed`).
pub fn follow(qmp: Weak<Qmp>, initial: RunState) -> watch::Receiver<RunStatus> {
    let (tx, rx) = watch::channel(RunStatus::new(initial));
    let Some(events) = qmp.upgrade().map(|q| q.events()) else {
        tx.send_modify(|s| s.closed = true);
        return rx;
    };
    tokio::spawn(run(qmp, events, tx));
    rx
}

async fn run(qmp: Weak<Qmp>, mut events: broadcast::Receiver<Value>, tx: watch::Sender<RunStatus>) {
    loop {
        match events.recv().await {
            Ok(event) => apply(&qmp, &event, &tx).await,
            Err(broadcast::error::RecvError::Lagged(lost)) => {
                // Events were lost: the state they carried is read back from QEMU.
                tx.send_modify(|s| s.events_lost += lost);
                refresh(&qmp, &tx, None).await;
            }
            Err(broadcast::error::RecvError::Closed) => break,
        }
    }
    tx.send_modify(|s| s.closed = true);
}

async fn apply(qmp: &Weak<Qmp>, event: &Value, tx: &watch::Sender<RunStatus>) {
    let data = event.get("data").unwrap_or(&Value::Null);
    match event["event"].as_str().unwrap_or("") {
        "RESUME" => tx.send_modify(|s| s.state = RunState::Running),
        // STOP says only that the vCPUs stopped; query-status says why.
        "STOP" => refresh(qmp, tx, Some(RunState::Other("stopped".into()))).await,
        "GUEST_PANICKED" => tx.send_modify(|s| s.state = RunState::GuestPanicked),
        "SHUTDOWN" => {
            let reason = data["reason"].as_str().unwrap_or("unknown").to_string();
            tx.send_modify(|s| s.shutdown_reason = Some(reason));
        }
        "BLOCK_IO_ERROR" => {
            let device = data["device"]
                .as_str()
                .filter(|d| !d.is_empty())
                .or_else(|| data["node-name"].as_str())
                .unwrap_or("a disk");
            let why = data["reason"].as_str().unwrap_or("I/O error");
            let operation = data["operation"].as_str().unwrap_or("access");
            let text = format!("{operation} on {device} failed: {why}");
            tx.send_modify(|s| s.io_error = Some(text));
        }
        _ => {}
    }
}

/// Reads the state back from QEMU. When QEMU does not answer, `known` (what the event
/// proved, e.g. that the vCPUs stopped) is recorded instead, never a stale `running`.
async fn refresh(qmp: &Weak<Qmp>, tx: &watch::Sender<RunStatus>, known: Option<RunState>) {
    let Some(qmp) = qmp.upgrade() else { return };
    match qmp.status().await {
        Ok(state) => tx.send_modify(|s| s.state = RunState::parse(&state)),
        Err(e) => {
            if !qmp.is_closed() {
                tracing::warn!("query-status of QEMU failed: {e}");
            }
            if let Some(state) = known {
                tx.send_modify(|s| s.state = state);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// A monitor that greets, accepts capabilities, answers query-status with `paused`,
    /// then sends `flood` events the watcher does not care about, then SHUTDOWN.
    async fn fake_qemu(path: std::path::PathBuf, flood: usize) {
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        write
            .write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n")
            .await
            .unwrap();
        while let Ok(Some(line)) = lines.next_line().await {
            let request: Value = serde_json::from_str(&line).unwrap();
            let id = &request["id"];
            let reply = match request["execute"].as_str() {
                Some("query-status") => {
                    serde_json::json!({"return": {"status": "paused", "running": false}, "id": id})
                }
                _ => serde_json::json!({"return": {}, "id": id}),
            };
            write
                .write_all(format!("{reply}\n").as_bytes())
                .await
                .unwrap();
            if request["execute"] == "qmp_capabilities" {
                let mut burst = String::new();
                for i in 0..flood {
                    burst.push_str(&format!(
                        "{{\"event\": \"RTC_CHANGE\", \"data\": {{\"offset\": {i}}}}}\n"
                    ));
                }
                burst.push_str("{\"event\": \"STOP\"}\n");
                burst.push_str(
                    "{\"event\": \"SHUTDOWN\", \"data\": {\"guest\": true, \"reason\": \"guest-shutdown\"}}\n",
                );
                write.write_all(burst.as_bytes()).await.unwrap();
            }
        }
    }

    /// A flood of events larger than the backlog must not end the watch: the power-off
    /// that follows is still seen as the guest's own, not as a crash.
    #[tokio::test(flavor = "current_thread")]
    async fn a_flood_of_events_does_not_hide_a_clean_power_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        let server = tokio::spawn(fake_qemu(path.clone(), 20_000));
        let qmp = Arc::new(Qmp::connect(&path, Duration::from_secs(5)).await.unwrap());
        let mut status = follow(Arc::downgrade(&qmp), RunState::Running);
        let seen = tokio::time::timeout(
            Duration::from_secs(20),
            status.wait_for(|s| s.shutdown_reason.is_some()),
        )
        .await
        .expect("the SHUTDOWN after the flood was never seen")
        .unwrap()
        .clone();
        assert_eq!(seen.shutdown_reason.as_deref(), Some("guest-shutdown"));
        assert!(
            seen.events_lost > 0,
            "the flood should have outrun the watcher, or this test proves nothing"
        );
        drop(qmp);
        server.abort();
    }

    #[test]
    fn states_round_trip() {
        for text in [
            "running",
            "paused",
            "internal-error",
            "io-error",
            "guest-panicked",
            "shutdown",
            "inmigrate",
            "postmigrate",
            "colo",
        ] {
            assert_eq!(RunState::parse(text).as_str(), text);
        }
    }
}
