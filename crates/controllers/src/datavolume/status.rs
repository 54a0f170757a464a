//! The status a DataVolume shows for each state of its transfer, as CDI writes it: the
//! phase, `progress`, `restartCount`, `claimName` and the Bound, Ready and Running
//! conditions (CDI's rule: `lastTransitionTime` moves when the status changes,
//! `lastHeartbeatTime` whenever the condition is rewritten with new words).

use event_recorder::EventType;
use kubevirt_api::cdi::conditions::{BOUND, READY, RUNNING};
use kubevirt_api::cdi::model::DataVolumeStatus;
use kubevirt_api::cdi::Phase;
use kubevirt_api::model::object::find;
use kubevirt_api::model::Condition;

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

/// A condition as a state has it, before its times are set.
struct Planned {
    kind: &'static str,
    status: &'static str,
    reason: String,
    message: String,
}

fn condition(kind: &'static str, status: &'static str, reason: &str, message: &str) -> Planned {
    Planned {
        kind,
        status,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

fn bound(claim: &str) -> Planned {
    condition(BOUND, "True", "Bound", &format!("PVC {claim} Bound"))
}

/// The status fields to write for `state`, given the current status (whose condition
/// times are kept where nothing changed) and `restarts` (the restart count to show).
/// The events CDI records when a DataVolume enters `state` (its phase changed):
/// `ImportScheduled` and `ImportInProgress` as its transfer starts (here at once),
/// `ImportSucceeded`, their Clone and Upload forms, and a Warning with the error when an
/// attempt failed.
pub fn events(state: &State) -> Vec<(EventType, String, String)> {
    let mut events = Vec::new();
    if let State::Running {
        transfer, claim, ..
    } = state
    {
        if *transfer != Transfer::Upload {
            let kind = if *transfer == Transfer::Clone {
                "Clone"
            } else {
                "Import"
            };
            events.push((
                EventType::Normal,
                format!("{kind}Scheduled"),
                format!("{kind} into {claim} scheduled"),
            ));
        }
    }
    events.extend(event(state));
    events
}

fn event(state: &State) -> Option<(EventType, String, String)> {
    let kind = |transfer: &Transfer| match transfer {
        Transfer::Import | Transfer::Blank => "Import",
        Transfer::Clone => "Clone",
        Transfer::Upload => "Upload",
    };
    let normal = |reason: String, message: String| Some((EventType::Normal, reason, message));
    match state {
        State::Running {
            transfer, claim, ..
        } if *transfer != Transfer::Upload => normal(
            format!("{}InProgress", kind(transfer)),
            format!("{} into {claim} in progress", kind(transfer)),
        ),
        State::UploadReady { claim } => {
            normal("UploadReady".into(), format!("Upload into {claim} ready"))
        }
        State::Succeeded { transfer, claim } => normal(
            format!("{}Succeeded", kind(transfer)),
            match transfer {
                Transfer::Upload => format!("Successfully uploaded into {claim}"),
                Transfer::Clone => format!("Successfully cloned into {claim}"),
                _ => format!("Successfully imported into PVC {claim}"),
            },
        ),
        State::Retrying {
            transfer, message, ..
        }
        | State::Failed {
            transfer, message, ..
        } => Some((
            EventType::Warning,
            format!("{}Failed", kind(transfer)),
            message.clone(),
        )),
        _ => None,
    }
}

pub fn status(
    state: &State,
    current: &DataVolumeStatus,
    restarts: i64,
    now: &str,
) -> DataVolumeStatus {
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
    let conditions: Vec<Condition> = conditions
        .iter()
        .map(|c| {
            let before = find(&current.conditions, c.kind);
            let same_status = before.is_some_and(|b| b.status.as_deref() == Some(c.status));
            let same_words = same_status
                && before.is_some_and(|b| b.reason() == c.reason && b.message() == c.message);
            let kept = |time: Option<&String>| Some(time.cloned().unwrap_or_else(|| now.into()));
            Condition {
                last_transition_time: if same_status {
                    kept(before.and_then(|b| b.last_transition_time.as_ref()))
                } else {
                    Some(now.into())
                },
                last_heartbeat_time: if same_words {
                    kept(before.and_then(|b| b.last_heartbeat_time.as_ref()))
                } else {
                    Some(now.into())
                },
                ..Condition::new(c.kind, c.status, &c.reason, &c.message)
            }
        })
        .collect();
    DataVolumeStatus {
        phase: Some(phase),
        progress: Some(progress),
        restart_count: Some(restarts),
        conditions: Some(conditions),
        claim_name: claim.cloned(),
        ..DataVolumeStatus::default()
    }
}

/// Whether writing `new` would change what `current` shows.
pub fn changes(current: &DataVolumeStatus, new: &DataVolumeStatus) -> bool {
    current.phase != new.phase
        || current.progress != new.progress
        || current.restart_count != new.restart_count
        || current.claim_name != new.claim_name
        || current.conditions != new.conditions
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn cond(status: &DataVolumeStatus, kind: &str) -> Value {
        json!(find(&status.conditions, kind).unwrap())
    }

    fn json(status: &DataVolumeStatus) -> Value {
        json!(status)
    }

    #[test]
    fn an_import_goes_pending_running_succeeded() {
        let t0 = "2026-01-01T00:00:00Z";
        let pending = status(
            &State::ClaimPending { claim: "d".into() },
            &DataVolumeStatus::default(),
            0,
            t0,
        );
        assert_eq!(json(&pending)["phase"], "Pending");
        assert_eq!(cond(&pending, "Bound")["message"], "PVC d Pending");
        let running = State::Running {
            transfer: Transfer::Import,
            claim: "d".into(),
            progress: "45.20%".into(),
        };
        let t1 = "2026-01-01T00:00:05Z";
        let first = status(&running, &pending, 0, t1);
        assert_eq!(json(&first)["phase"], "ImportInProgress");
        assert_eq!(json(&first)["progress"], "45.20%");
        assert_eq!(json(&first)["claimName"], "d");
        assert_eq!(cond(&first, "Bound")["status"], "True");
        assert_eq!(cond(&first, "Bound")["lastTransitionTime"], t1);
        assert_eq!(cond(&first, "Running")["status"], "True");
        assert_eq!(cond(&first, "Ready")["reason"], "TransferRunning");
        // Ready stayed False: its transition time is kept, its heartbeat moves.
        assert_eq!(cond(&first, "Ready")["lastTransitionTime"], t0);
        assert_eq!(cond(&first, "Ready")["lastHeartbeatTime"], t1);
        let t2 = "2026-01-01T00:00:09Z";
        let again = status(&running, &first, 0, t2);
        assert!(!changes(&first, &again), "nothing new: {again:?}");
        let done = status(
            &State::Succeeded {
                transfer: Transfer::Import,
                claim: "d".into(),
            },
            &first,
            0,
            t2,
        );
        assert_eq!(json(&done)["phase"], "Succeeded");
        assert_eq!(json(&done)["progress"], "100.0%");
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
            &DataVolumeStatus::default(),
            2,
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(json(&failed)["phase"], "Failed");
        assert_eq!(json(&failed)["restartCount"], 2);
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
            &DataVolumeStatus::default(),
            1,
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(json(&retrying)["phase"], "CloneInProgress");
        assert_eq!(json(&retrying)["restartCount"], 1);
    }
}
