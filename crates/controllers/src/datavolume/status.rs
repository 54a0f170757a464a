//! The status a DataVolume shows for each state of its transfer, as CDI writes it: the
//! phase, `progress`, `restartCount`, `claimName` and the Bound, Ready and Running
//! conditions (CDI's rule: `lastTransitionTime` moves when the status changes,
//! `lastHeartbeatTime` whenever the condition is rewritten with new words).

use kubevirt_api::cdi::conditions::{BOUND, READY, RUNNING};
use kubevirt_api::cdi::Phase;
use serde_json::{json, Value};

/// What the DataVolume's transfer is (the words CDI uses for each kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transfer {
    Import,
    Clone,
    Upload,
    Blank,
}

impl Transfer {
    pub fn in_progress(self) -> Phase {
        match self {
            Transfer::Import | Transfer::Blank => Phase::ImportInProgress,
            Transfer::Clone => Phase::CloneInProgress,
            Transfer::Upload => Phase::UploadReady,
        }
    }

    /// The Running condition's message once the transfer is done.
    fn completed(self) -> &'static str {
        match self {
            Transfer::Import | Transfer::Blank => "Import Complete",
            Transfer::Clone => "Clone Complete",
            Transfer::Upload => "Upload Complete",
        }
    }
}

/// Where a DataVolume stands.
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    /// The claim is not bound yet (or not created).
    ClaimPending {
        claim: String,
    },
    /// A claim of the DataVolume's name exists and belongs to something else.
    ClaimNotOurs {
        claim: String,
    },
    /// The DataSource `sourceRef` names does not exist (or names no claim).
    WaitingForSource {
        message: String,
    },
    /// The transfer runs; `progress` is CDI's text ("N/A", "45.20%").
    Running {
        transfer: Transfer,
        claim: String,
        progress: String,
    },
    /// An upload may start: the upload endpoint takes the image.
    UploadReady {
        claim: String,
    },
    /// The last attempt failed with a transient error; another follows.
    Retrying {
        transfer: Transfer,
        claim: String,
        message: String,
    },
    Succeeded {
        transfer: Transfer,
        claim: String,
    },
    Failed {
        transfer: Transfer,
        claim: Option<String>,
        message: String,
    },
}

struct Condition {
    kind: &'static str,
    status: &'static str,
    reason: String,
    message: String,
}

fn condition(kind: &'static str, status: &'static str, reason: &str, message: &str) -> Condition {
    Condition {
        kind,
        status,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

fn bound(claim: &str) -> Condition {
    condition(BOUND, "True", "Bound", &format!("PVC {claim} Bound"))
}

/// The status fields to write for `state`, given the current status (whose condition
/// times are kept where nothing changed) and `restarts` (the restart count to show).
pub fn status(state: &State, current: &Value, restarts: i64, now: &str) -> Value {
    let (phase, progress, claim, conditions) = match state {
        State::ClaimPending { claim } => (
            Phase::Pending,
            "N/A".to_string(),
            Some(claim),
            [
                condition(BOUND, "False", "Pending", &format!("PVC {claim} Pending")),
                condition(READY, "False", "", ""),
                condition(RUNNING, "False", "", ""),
            ],
        ),
        State::ClaimNotOurs { claim } => (
            Phase::Pending,
            "N/A".to_string(),
            None,
            [
                condition(
                    BOUND,
                    "False",
                    "ErrResourceExists",
                    &format!(
                        "Resource \"{claim}\" already exists and is not managed by DataVolume"
                    ),
                ),
                condition(READY, "False", "", ""),
                condition(RUNNING, "False", "", ""),
            ],
        ),
        State::WaitingForSource { message } => (
            Phase::Pending,
            "N/A".to_string(),
            None,
            [
                condition(BOUND, "False", "NotFound", message),
                condition(READY, "False", "", ""),
                condition(RUNNING, "False", "", ""),
            ],
        ),
        State::Running {
            transfer,
            claim,
            progress,
        } => (
            transfer.in_progress(),
            progress.clone(),
            Some(claim),
            [
                bound(claim),
                condition(READY, "False", "TransferRunning", ""),
                condition(RUNNING, "True", "Pod is running", ""),
            ],
        ),
        State::UploadReady { claim } => (
            Phase::UploadReady,
            "N/A".to_string(),
            Some(claim),
            [
                bound(claim),
                condition(READY, "False", "TransferRunning", ""),
                condition(RUNNING, "True", "Pod is running", ""),
            ],
        ),
        State::Retrying {
            transfer,
            claim,
            message,
        } => (
            transfer.in_progress(),
            "N/A".to_string(),
            Some(claim),
            [
                bound(claim),
                condition(READY, "False", "", ""),
                condition(RUNNING, "False", "Error", message),
            ],
        ),
        State::Succeeded { transfer, claim } => (
            Phase::Succeeded,
            "100.0%".to_string(),
            Some(claim),
            [
                bound(claim),
                condition(READY, "True", "", ""),
                condition(RUNNING, "False", "Completed", transfer.completed()),
            ],
        ),
        State::Failed { claim, message, .. } => (
            Phase::Failed,
            "N/A".to_string(),
            claim.as_ref(),
            [
                match claim {
                    Some(claim) => bound(claim),
                    None => condition(BOUND, "False", "", ""),
                },
                condition(READY, "False", "", ""),
                condition(RUNNING, "False", "Error", message),
            ],
        ),
    };
    let old = current
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|c| {
            let before = old.iter().find(|o| o["type"] == c.kind);
            let same_status = before.is_some_and(|b| b["status"] == c.status);
            let same_words = same_status
                && before.is_some_and(|b| {
                    b["reason"] == c.reason.as_str() && b["message"] == c.message.as_str()
                });
            let kept = |field: &str| {
                before
                    .and_then(|b| b.get(field))
                    .filter(|t| t.is_string())
                    .cloned()
                    .unwrap_or_else(|| json!(now))
            };
            let transition = if same_status {
                kept("lastTransitionTime")
            } else {
                json!(now)
            };
            let heartbeat = if same_words {
                kept("lastHeartbeatTime")
            } else {
                json!(now)
            };
            json!({"type": c.kind, "status": c.status, "reason": c.reason, "message": c.message,
                   "lastTransitionTime": transition, "lastHeartbeatTime": heartbeat})
        })
        .collect();
    let mut status = json!({
        "phase": phase.as_str(),
        "progress": progress,
        "restartCount": restarts,
        "conditions": conditions,
    });
    if let Some(claim) = claim {
        status["claimName"] = json!(claim);
    }
    status
}

/// Whether writing `new` would change what `current` shows.
pub fn changes(current: &Value, new: &Value) -> bool {
    [
        "phase",
        "progress",
        "restartCount",
        "claimName",
        "conditions",
    ]
    .iter()
    .any(|field| current.get(*field) != new.get(*field))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond<'a>(status: &'a Value, kind: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()
    }

    #[test]
    fn an_import_goes_pending_running_succeeded() {
        let t0 = "2026-01-01T00:00:00Z";
        let pending = status(
            &State::ClaimPending { claim: "d".into() },
            &json!({}),
            0,
            t0,
        );
        assert_eq!(pending["phase"], "Pending");
        assert_eq!(cond(&pending, "Bound")["message"], "PVC d Pending");
        let running = State::Running {
            transfer: Transfer::Import,
            claim: "d".into(),
            progress: "45.20%".into(),
        };
        let t1 = "2026-01-01T00:00:05Z";
        let first = status(&running, &pending, 0, t1);
        assert_eq!(first["phase"], "ImportInProgress");
        assert_eq!(first["progress"], "45.20%");
        assert_eq!(first["claimName"], "d");
        assert_eq!(cond(&first, "Bound")["status"], "True");
        assert_eq!(cond(&first, "Bound")["lastTransitionTime"], t1);
        assert_eq!(cond(&first, "Running")["status"], "True");
        assert_eq!(cond(&first, "Ready")["reason"], "TransferRunning");
        // Ready stayed False: its transition time is kept, its heartbeat moves.
        assert_eq!(cond(&first, "Ready")["lastTransitionTime"], t0);
        assert_eq!(cond(&first, "Ready")["lastHeartbeatTime"], t1);
        let t2 = "2026-01-01T00:00:09Z";
        let again = status(&running, &first, 0, t2);
        assert!(!changes(&first, &again), "nothing new: {again}");
        let done = status(
            &State::Succeeded {
                transfer: Transfer::Import,
                claim: "d".into(),
            },
            &first,
            0,
            t2,
        );
        assert_eq!(done["phase"], "Succeeded");
        assert_eq!(done["progress"], "100.0%");
        assert_eq!(cond(&done, "Ready")["status"], "True");
        assert_eq!(cond(&done, "Running")["message"], "Import Complete");
        assert_eq!(cond(&done, "Running")["reason"], "Completed");
        assert_eq!(cond(&done, "Bound")["lastTransitionTime"], t1);
    }

    #[test]
    fn failures_carry_the_message() {
        let failed = status(
            &State::Failed {
                transfer: Transfer::Import,
                claim: Some("d".into()),
                message: "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found".into(),
            },
            &json!({}),
            2,
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(failed["phase"], "Failed");
        assert_eq!(failed["restartCount"], 2);
        assert_eq!(cond(&failed, "Running")["reason"], "Error");
        assert!(cond(&failed, "Running")["message"]
            .as_str()
            .unwrap()
            .contains("404"));
        let retrying = status(
            &State::Retrying {
                transfer: Transfer::Clone,
                claim: "d".into(),
                message: "connection refused".into(),
            },
            &json!({}),
            1,
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(retrying["phase"], "CloneInProgress");
        assert_eq!(retrying["restartCount"], 1);
    }
}
