//! Whether a claim takes an upload now, decided from its DataVolume and the claim as
//! stored, in the words of CDI's upload proxy (`uploadReady`, `UploadPossibleForPVC`),
//! and how the DataVolume ended once the upload was handed over.

use kubevirt_api::cdi::{Origin, Phase, Source, Spec};
use kubevirt_api::names::annotations::UPLOADED_IMAGE;
use kubevirt_api::quantity::Quantity;
use serde_json::Value;

/// How much more than the claim an upload may be: qcow2 metadata, gzip or xz headers.
/// A larger body cannot fit and is refused as CDI refuses it (no capacity).
const SLACK_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// The upload may start, into the DataVolume with this uid and a claim of
    /// `capacity` bytes (when known).
    Ready { uid: String, capacity: Option<u64> },
    /// Not yet (the claim is not bound): CDI's proxy waits a little.
    NotYet(String),
    /// Never, as things stand (CDI's proxy answers 503 with the message).
    Refused(String),
}

fn text<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Whether claim `name` takes an upload, from its DataVolume of the same name (`dv`) and
/// the claim itself (`claim`), either of which may be missing.
pub fn readiness(name: &str, dv: Option<&Value>, claim: Option<&Value>) -> Readiness {
    let Some(dv) = dv.filter(|dv| dv.pointer("/metadata/deletionTimestamp").is_none()) else {
        return match claim {
            // A claim without a DataVolume is not filled by anyone here.
            Some(_) => Readiness::Refused(format!("PVC {name} is not an upload target")),
            None => Readiness::Refused(format!(
                "rejecting Upload Request for PVC {name} that doesn't exist"
            )),
        };
    };
    let namespace = text(dv, "/metadata/namespace");
    let spec = Spec::of(namespace, dv.get("spec").unwrap_or(&Value::Null));
    if spec.origin != Origin::Source(Source::Upload) {
        return Readiness::Refused(format!("PVC {name} is not an upload target"));
    }
    match Phase::of(dv) {
        Phase::Succeeded => {
            return Readiness::Refused(format!(
                "rejecting Upload Request for PVC {name} that already finished uploading"
            ))
        }
        Phase::Failed => {
            let why = running_message(dv);
            return Readiness::Refused(format!(
                "rejecting Upload Request for PVC {name}: its DataVolume failed: {why}"
            ));
        }
        _ => {}
    }
    if dv
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(UPLOADED_IMAGE))
        .is_some()
    {
        return Readiness::Refused(format!(
            "rejecting Upload Request for PVC {name}: an upload into it is being processed"
        ));
    }
    if Phase::of(dv) != Phase::UploadReady {
        let phase = match Phase::of(dv) {
            Phase::Unset => "Pending",
            phase => phase.as_str(),
        };
        return Readiness::NotYet(format!(
            "rejecting Upload Request for PVC {name}: it is not ready for an upload yet (DataVolume phase {phase})"
        ));
    }
    let capacity = claim
        .and_then(|c| c.pointer("/status/capacity/storage"))
        .and_then(Quantity::from_json)
        .and_then(|q| u64::try_from(q.value()).ok());
    Readiness::Ready {
        uid: text(dv, "/metadata/uid").to_string(),
        capacity,
    }
}

/// The most bytes an upload into a claim of `capacity` bytes may take.
pub fn limit(capacity: u64) -> u64 {
    capacity
        .saturating_add(capacity / 8)
        .saturating_add(SLACK_BYTES)
}

/// The Running condition's message: why a DataVolume failed.
fn running_message(dv: &Value) -> String {
    dv.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kubevirt_api::cdi::conditions::RUNNING)
        .and_then(|c| c["message"].as_str())
        .filter(|m| !m.is_empty())
        .unwrap_or("no reason given")
        .to_string()
}

/// How the DataVolume an upload was handed to stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processing {
    Running,
    Succeeded,
    Failed(String),
    /// Deleted, or replaced by another of its name.
    Gone,
}

pub fn processing(uid: &str, dv: Option<&Value>) -> Processing {
    let Some(dv) = dv.filter(|dv| text(dv, "/metadata/uid") == uid) else {
        return Processing::Gone;
    };
    match Phase::of(dv) {
        Phase::Succeeded => Processing::Succeeded,
        Phase::Failed => Processing::Failed(running_message(dv)),
        _ if dv.pointer("/metadata/deletionTimestamp").is_some() => Processing::Gone,
        _ => Processing::Running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dv(source: Value, phase: &str) -> Value {
        json!({"metadata": {"name": "disk", "namespace": "team", "uid": "u-1"},
               "spec": {"source": source, "storage": {}},
               "status": {"phase": phase}})
    }

    fn claim(capacity: &str) -> Value {
        json!({"metadata": {"name": "disk"}, "status": {"phase": "Bound", "capacity": {"storage": capacity}}})
    }

    #[test]
    fn an_upload_data_volume_that_is_ready_takes_an_upload_sized_to_its_claim() {
        let ready = dv(json!({"upload": {}}), "UploadReady");
        assert_eq!(
            readiness("disk", Some(&ready), Some(&claim("8Mi"))),
            Readiness::Ready {
                uid: "u-1".into(),
                capacity: Some(8 << 20)
            }
        );
        assert_eq!(limit(8 << 20), (9 << 20) + SLACK_BYTES);
    }

    #[test]
    fn cdi_proxy_refusals() {
        let refused = |dv: Option<&Value>, claim: Option<&Value>| match readiness("disk", dv, claim)
        {
            Readiness::Refused(message) => message,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refused(None, None),
            "rejecting Upload Request for PVC disk that doesn't exist"
        );
        assert_eq!(
            refused(None, Some(&claim("1Gi"))),
            "PVC disk is not an upload target"
        );
        let http = dv(json!({"http": {"url": "http://x"}}), "ImportInProgress");
        assert_eq!(
            refused(Some(&http), Some(&claim("1Gi"))),
            "PVC disk is not an upload target"
        );
        let done = dv(json!({"upload": {}}), "Succeeded");
        assert_eq!(
            refused(Some(&done), None),
            "rejecting Upload Request for PVC disk that already finished uploading"
        );
        let mut failed = dv(json!({"upload": {}}), "Failed");
        failed["status"]["conditions"] =
            json!([{"type": "Running", "status": "False", "message": "A larger PVC is required"}]);
        assert!(refused(Some(&failed), None).ends_with("failed: A larger PVC is required"));
        let mut handed_over = dv(json!({"upload": {}}), "UploadReady");
        handed_over["metadata"]["annotations"] = json!({UPLOADED_IMAGE: "/d/uploads/u-1.img"});
        assert!(refused(Some(&handed_over), None).contains("being processed"));
        let mut deleting = dv(json!({"upload": {}}), "UploadReady");
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(refused(Some(&deleting), Some(&claim("1Gi"))).contains("not an upload target"));
    }

    #[test]
    fn a_claim_not_bound_yet_is_waited_for() {
        let pending = dv(json!({"upload": {}}), "Pending");
        assert!(matches!(
            readiness("disk", Some(&pending), None),
            Readiness::NotYet(m) if m.contains("phase Pending")
        ));
    }

    #[test]
    fn processing_ends_as_the_data_volume_does() {
        let mut running = dv(json!({"upload": {}}), "UploadReady");
        assert_eq!(processing("u-1", Some(&running)), Processing::Running);
        assert_eq!(processing("u-2", Some(&running)), Processing::Gone);
        assert_eq!(processing("u-1", None), Processing::Gone);
        running["status"]["phase"] = json!("Succeeded");
        assert_eq!(processing("u-1", Some(&running)), Processing::Succeeded);
        running["status"] = json!({"phase": "Failed", "conditions": [
            {"type": "Running", "message": "A larger PVC is required"}]});
        assert_eq!(
            processing("u-1", Some(&running)),
            Processing::Failed("A larger PVC is required".into())
        );
    }
}
