//! CDI's kinds (cdi.kubevirt.io/v1beta1) plugged into the generic registry: DataVolumes
//! with CDI's validating webhook, DataSources, StorageProfiles and CDIConfig stored as
//! written, and the objects made at start: the StorageProfile of the one storage class and
//! the CDIConfig `config` that tells clients where the upload proxy is.

use apimachinery::field::{ErrorType, FieldError};
use apimachinery::resource::ResourceInfo;
use apimachinery::status::Status;
use kubevirt_api::cdi::{admission, resources};
use kubevirt_api::names::annotations::UPLOADED_IMAGE;
use serde_json::{json, Value};

use crate::registry::{Admission, Change, Read, Registry, ResourceHooks, WriteOptions};

struct DataVolumeHooks;

fn rejected(errors: Vec<FieldError>) -> Admission {
    Admission {
        errors,
        warnings: Vec::new(),
    }
}

/// The annotation that hands an uploaded file to the DataVolume controller, which imports
/// and then removes it: only the upload proxy (a privileged update) may set it, never a
/// create (a VM's dataVolumeTemplates are created by a privileged controller too).
fn uploaded_image(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/annotations")?.get(UPLOADED_IMAGE)
}

fn upload_annotation_refused() -> FieldError {
    FieldError::webhook(
        ErrorType::Forbidden,
        format!("metadata.annotations[{UPLOADED_IMAGE}]"),
        format!("the annotation {UPLOADED_IMAGE} is set by the upload proxy only (virtplane image-upload, or CDI's upload API)"),
    )
}

impl ResourceHooks for DataVolumeHooks {
    fn webhook(&self) -> Option<&'static str> {
        Some(admission::DATA_VOLUME_VALIDATOR)
    }
    fn validate_create(&self, obj: &Value) -> Admission {
        let mut errors = admission::validate_create(obj);
        if uploaded_image(obj).is_some() {
            errors.push(upload_annotation_refused());
        }
        rejected(errors)
    }
    fn validate_update(&self, old: &Value, new: &Value, privileged: bool) -> Admission {
        let mut errors = admission::validate_update(old, new);
        let set = uploaded_image(new).is_some_and(|v| Some(v) != uploaded_image(old));
        if set && !privileged {
            errors.push(upload_annotation_refused());
        }
        rejected(errors)
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

/// DataSources, StorageProfiles and CDIConfig: stored and served as written; the
/// DataVolume controller reads the first two, upload clients the last.
struct StoredAsWritten;

impl ResourceHooks for StoredAsWritten {}

pub fn registrations() -> Vec<(&'static ResourceInfo, Box<dyn ResourceHooks>)> {
    vec![
        (&resources::DATA_VOLUME, Box::new(DataVolumeHooks)),
        (&resources::DATA_SOURCE, Box::new(StoredAsWritten)),
        (&resources::STORAGE_PROFILE, Box::new(StoredAsWritten)),
        (&resources::CDI_CONFIG, Box::new(StoredAsWritten)),
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

/// The one CDIConfig, as CDI names it.
pub const CDI_CONFIG_NAME: &str = "config";

/// Creates CDIConfig `config` if missing and writes where the upload proxy is into its
/// status: this server's URL and CA (virtctl's image-upload reads `uploadProxyURL`).
pub async fn publish_upload_proxy(
    registry: &Registry,
    url: &str,
    ca_pem: &str,
) -> Result<(), Status> {
    let Some(reg) = registry.find(resources::GROUP, resources::VERSION, "cdiconfigs") else {
        return Ok(());
    };
    let options = WriteOptions {
        field_manager: "virtplane".into(),
        ..Default::default()
    };
    let config = json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDIConfig",
                        "metadata": {"name": CDI_CONFIG_NAME}, "spec": {}});
    match registry.create(&reg, None, config, &options).await {
        Ok(_) => {}
        Err(status) if status.code == 409 => {}
        Err(status) => return Err(status),
    }
    let published = json!({"uploadProxyURL": url, "uploadProxyCA": ca_pem});
    registry
        .update_with(
            &reg,
            None,
            CDI_CONFIG_NAME,
            Some("status"),
            &options,
            |old| {
                let mut new = old.clone();
                crate::object::meta_mut(&mut new).remove("resourceVersion");
                let mut status = new["status"].as_object().cloned().unwrap_or_default();
                if let Some(fields) = published.as_object() {
                    status.extend(fields.clone());
                }
                new["status"] = Value::Object(status);
                Ok(Change::replace(new))
            },
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod upload_annotation_tests {
    use super::*;

    #[test]
    fn only_the_upload_proxy_names_an_uploaded_image() {
        let dv = json!({"metadata": {"name": "disk"},
                        "spec": {"source": {"upload": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}}});
        let mut annotated = dv.clone();
        annotated["metadata"]["annotations"] = json!({UPLOADED_IMAGE: "/etc/shadow"});
        let hooks = DataVolumeHooks;
        assert!(hooks.validate_create(&dv).errors.is_empty());
        assert_eq!(hooks.validate_create(&annotated).errors.len(), 1);
        assert_eq!(
            hooks.validate_update(&dv, &annotated, false).errors.len(),
            1
        );
        assert!(hooks
            .validate_update(&dv, &annotated, true)
            .errors
            .is_empty());
        // Unchanged, or taken away, it is no one's concern.
        assert!(hooks
            .validate_update(&annotated, &annotated, false)
            .errors
            .is_empty());
        assert!(hooks
            .validate_update(&annotated, &dv, false)
            .errors
            .is_empty());
    }
}
