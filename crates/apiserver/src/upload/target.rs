//! Whether a claim takes an upload now, decided from its DataVolume and the claim as
//! stored, in the words of CDI's upload proxy (`uploadReady`, `UploadPossibleForPVC`),
//! and how the DataVolume ended once the upload was handed over.

use kubevirt_api::cdi::model::DataVolume;
use kubevirt_api::cdi::Phase;
use kubevirt_api::names::annotations::UPLOADED_IMAGE;
use kubevirt_api::quantity::Quantity;
use serde_json::Value;

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

/// Whether claim `name` takes an upload, from its DataVolume of the same name (`dv`) and
/// the claim itself (`claim`), either of which may be missing.
pub fn readiness(name: &str, dv: Option<&DataVolume>, claim: Option<&Value>) -> Readiness {
    let Some(dv) = dv.filter(|dv| dv.metadata.deletion_timestamp.is_none()) else {
        return match claim {
            // A claim without a DataVolume is not filled by anyone here.
            Some(_) => Readiness::Refused(format!("PVC {name} is not an upload target")),
            None => Readiness::Refused(format!(
                "rejecting Upload Request for PVC {name} that doesn't exist"
            )),
        };
    };
    if !dv.is_upload() {
        return Readiness::Refused(format!("PVC {name} is not an upload target"));
    }
    match dv.phase() {
        Phase::Succeeded => {
            return Readiness::Refused(format!(
                "rejecting Upload Request for PVC {name} that already finished uploading"
            ))
        }
        Phase::Failed => {
            let why = dv.failure_message();
            return Readiness::Refused(format!(
                "rejecting Upload Request for PVC {name}: its DataVolume failed: {why}"
            ));
        }
        _ => {}
    }
    if dv
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(UPLOADED_IMAGE))
    {
        return Readiness::Refused(format!(
            "rejecting Upload Request for PVC {name}: an upload into it is being processed"
        ));
    }
    if dv.phase() != Phase::UploadReady {
        let phase = match dv.phase() {
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
        uid: dv.uid().to_string(),
        capacity,
    }
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

pub fn processing(uid: &str, dv: Option<&DataVolume>) -> Processing {
    let Some(dv) = dv.filter(|dv| dv.uid() == uid) else {
        return Processing::Gone;
    };
    match dv.phase() {
        Phase::Succeeded => Processing::Succeeded,
        Phase::Failed => Processing::Failed(dv.failure_message().to_string()),
        _ if dv.metadata.deletion_timestamp.is_some() => Processing::Gone,
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

    fn typed(dv: &Value) -> DataVolume {
        serde_json::from_value(dv.clone()).unwrap()
    }

    fn readiness(name: &str, dv: Option<&Value>, claim: Option<&Value>) -> Readiness {
        super::readiness(name, dv.map(typed).as_ref(), claim)
    }

    fn processing(uid: &str, dv: Option<&Value>) -> Processing {
        super::processing(uid, dv.map(typed).as_ref())
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
