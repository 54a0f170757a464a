//! CDI's kinds (cdi.kubevirt.io/v1beta1) plugged into the generic registry: DataVolumes
//! with CDI's validating webhook, DataSources and StorageProfiles stored as written.

use apimachinery::resource::ResourceInfo;
use apimachinery::status::Status;
use kubevirt_api::cdi::{admission, resources};
use serde_json::{json, Value};

use crate::registry::{Admission, Change, Read, Registry, ResourceHooks, WriteOptions};

struct DataVolumeHooks;

fn rejected(errors: Vec<apimachinery::field::FieldError>) -> Admission {
    Admission {
        errors,
        warnings: Vec::new(),
    }
}

impl ResourceHooks for DataVolumeHooks {
    fn webhook(&self) -> Option<&'static str> {
        Some(admission::DATA_VOLUME_VALIDATOR)
    }
    fn validate_create(&self, obj: &Value) -> Admission {
        rejected(admission::validate_create(obj))
    }
    fn validate_update(&self, old: &Value, new: &Value, _privileged: bool) -> Admission {
        rejected(admission::validate_update(old, new))
    }
    /// The claim of the same name: a DataVolume may not take over a claim it does not own.
    fn create_reads(&self, obj: &Value) -> Vec<Read> {
        let Some(name) = obj.pointer("/metadata/name").and_then(Value::as_str) else {
            return Vec::new();
        };
        vec![Read {
            group: "",
            version: "v1",
            plural: "persistentvolumeclaims",
            name: Some(name.to_string()),
        }]
    }
    fn validate_create_reading(&self, obj: &Value, read: &[Vec<Value>]) -> Result<(), Status> {
        let Some(claim) = read.first().and_then(|found| found.first()) else {
            return Ok(());
        };
        let owned_by_data_volume = claim
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|o| o["controller"] == true && o["kind"] == "DataVolume");
        if owned_by_data_volume {
            return Ok(());
        }
        let text = |p| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
        Err(Status::bad_request(format!(
            "admission webhook \"{}\" denied the request: Destination PVC {}/{} already exists",
            admission::DATA_VOLUME_VALIDATOR,
            text("/metadata/namespace"),
            text("/metadata/name")
        )))
    }
}

/// DataSources and StorageProfiles: stored and served as written; the DataVolume
/// controller reads them.
struct StoredAsWritten;

impl ResourceHooks for StoredAsWritten {}

pub fn registrations() -> Vec<(&'static ResourceInfo, Box<dyn ResourceHooks>)> {
    vec![
        (&resources::DATA_VOLUME, Box::new(DataVolumeHooks)),
        (&resources::DATA_SOURCE, Box::new(StoredAsWritten)),
        (&resources::STORAGE_PROFILE, Box::new(StoredAsWritten)),
    ]
}

/// The StorageProfile of virtplane's one storage class, as CDI's controller keeps one per
/// class: what `spec.storage` of a DataVolume defaults to. Created at start (an
/// administrator's `spec.claimPropertySets` override it, as in CDI).
pub async fn ensure_storage_profile(registry: &Registry) -> Result<(), Status> {
    use kubevirt_api::cdi::{DEFAULT_ACCESS_MODE, DEFAULT_VOLUME_MODE, STORAGE_CLASS};
    let Some(reg) = registry.find(resources::GROUP, resources::VERSION, "storageprofiles") else {
        return Ok(());
    };
    let options = WriteOptions {
        field_manager: "virtplane".into(),
        ..Default::default()
    };
    let profile = json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "StorageProfile",
                         "metadata": {"name": STORAGE_CLASS}, "spec": {}});
    match registry.create(&reg, None, profile, &options).await {
        Ok(_) => {}
        Err(status) if status.code == 409 => return Ok(()),
        Err(status) => return Err(status),
    }
    let status = json!({
        "storageClass": STORAGE_CLASS,
        "provisioner": "virtplane.io/local-pool",
        "claimPropertySets": [{"accessModes": [DEFAULT_ACCESS_MODE], "volumeMode": DEFAULT_VOLUME_MODE}],
        "cloneStrategy": "copy",
    });
    registry
        .update_with(&reg, None, STORAGE_CLASS, Some("status"), &options, |old| {
            let mut new = old.clone();
            crate::object::meta_mut(&mut new).remove("resourceVersion");
            new["status"] = status.clone();
            Ok(Change::replace(new))
        })
        .await?;
    Ok(())
}
