//! What the VM controller does for a VM's disks before it starts one: the DataVolumes of
//! `spec.dataVolumeTemplates` are created, owned by the VM (so they outlive a stop and
//! go with the VM), and a VMI is created only once every DataVolume and claim its
//! volumes use is ready. Until then the VM shows why (printableStatus and a
//! `DataVolumesReady` condition).

use kube::api::PostParams;
use kube::core::DynamicObject;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::cdi::Phase as DataVolumePhase;
use serde_json::{json, Value};

use crate::datavolume::data_volume_resource;
use crate::volumes::claim_resource;
use crate::Error;

/// Whether a VM's volumes let it start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// An import, clone or upload still runs: `Provisioning`.
    Provisioning(String),
    /// A claim (or a DataVolume's claim) is not bound, or a DataVolume does not exist:
    /// `WaitingForVolumeBinding`.
    Waiting(String),
    /// A DataVolume failed: `DataVolumeError`.
    Failed(String),
}

impl Readiness {
    pub fn printable_status(&self) -> Option<&'static str> {
        match self {
            Readiness::Ready => None,
            Readiness::Provisioning(_) => Some("Provisioning"),
            Readiness::Waiting(_) => Some("WaitingForVolumeBinding"),
            Readiness::Failed(_) => Some("DataVolumeError"),
        }
    }

    /// The VM condition that says what is missing.
    pub fn condition(&self, now: &str) -> Option<Value> {
        let message = match self {
            Readiness::Ready => return None,
            Readiness::Provisioning(m) | Readiness::Waiting(m) | Readiness::Failed(m) => m,
        };
        Some(
            json!({"type": "DataVolumesReady", "status": "False", "reason": "NotAllDVsReady",
                    "message": message, "lastProbeTime": null, "lastTransitionTime": now}),
        )
    }
}

/// Creates the DataVolumes of `templates` that do not exist yet, owned by `vm`.
pub async fn ensure_templates(
    client: &Client,
    vm: &DynamicObject,
    templates: &[Value],
) -> Result<(), Error> {
    let namespace = vm.namespace().unwrap_or_default();
    let api =
        Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &data_volume_resource());
    for template in templates {
        let Some(name) = template.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        if api.get_opt(name).await?.is_some() {
            continue;
        }
        let mut metadata = template
            .get("metadata")
            .cloned()
            .unwrap_or_else(|| json!({}));
        metadata["namespace"] = json!(namespace);
        metadata["ownerReferences"] = json!([{
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "name": vm.name_any(),
            "uid": vm.uid(),
            "controller": true,
            "blockOwnerDeletion": true,
        }]);
        let dv = json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                        "metadata": metadata, "spec": template["spec"]});
        match api
            .create(&PostParams::default(), &serde_json::from_value(dv)?)
            .await
        {
            Ok(_) => tracing::info!(
                "vm {namespace}/{}: created its DataVolume {name}",
                vm.name_any()
            ),
            // Created meanwhile (a second pass, or the user): readiness looks at it.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The DataVolumes and claims a VMI template's volumes name.
fn volume_claims(template: &Value) -> Vec<(bool, String)> {
    template
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(name) = v.pointer("/dataVolume/name").and_then(Value::as_str) {
                return Some((true, name.to_string()));
            }
            v.pointer("/persistentVolumeClaim/claimName")
                .and_then(Value::as_str)
                .map(|name| (false, name.to_string()))
        })
        .collect()
}

/// Whether the volumes of the VMI `template` are ready, reading their DataVolumes and
/// claims in `namespace`. The first volume that is not ready decides.
pub async fn readiness(
    client: &Client,
    namespace: &str,
    template: &Value,
) -> Result<Readiness, Error> {
    let claims = volume_claims(template);
    if claims.is_empty() {
        return Ok(Readiness::Ready);
    }
    let dvs =
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &data_volume_resource());
    let pvcs = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &claim_resource());
    for (is_data_volume, name) in claims {
        if is_data_volume {
            let Some(dv) = dvs.get_opt(&name).await? else {
                return Ok(Readiness::Waiting(format!(
                    "DataVolume {namespace}/{name} does not exist"
                )));
            };
            let phase = DataVolumePhase::of(&dv.data);
            match phase {
                DataVolumePhase::Succeeded => continue,
                DataVolumePhase::Failed => {
                    let why = dv
                        .data
                        .pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .find(|c| c["type"] == "Running")
                        .and_then(|c| c["message"].as_str())
                        .unwrap_or("")
                        .to_string();
                    return Ok(Readiness::Failed(format!(
                        "DataVolume {namespace}/{name} failed: {why}"
                    )));
                }
                DataVolumePhase::Unset
                | DataVolumePhase::Pending
                | DataVolumePhase::WaitForFirstConsumer => {
                    return Ok(Readiness::Waiting(format!(
                        "DataVolume {namespace}/{name} is waiting for its claim"
                    )))
                }
                other => {
                    let progress = dv
                        .data
                        .pointer("/status/progress")
                        .and_then(Value::as_str)
                        .unwrap_or("N/A");
                    return Ok(Readiness::Provisioning(format!(
                        "DataVolume {namespace}/{name} is {} ({progress})",
                        other.as_str()
                    )));
                }
            }
        }
        // A claim that does not exist is the VMI's error to report (ErrorPvcNotFound, as
        // KubeVirt's VMI does); one that exists but is not bound is waited for.
        let pending = pvcs
            .get_opt(&name)
            .await?
            .is_some_and(|c| c.data.pointer("/status/phase") != Some(&json!("Bound")));
        if pending {
            return Ok(Readiness::Waiting(format!(
                "PVC {namespace}/{name} is not bound"
            )));
        }
    }
    Ok(Readiness::Ready)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_name_their_data_volumes_and_claims() {
        let template = json!({"spec": {"volumes": [
            {"name": "root", "dataVolume": {"name": "fedora"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "scratch"}},
            {"name": "cloud", "cloudInitNoCloud": {"userData": "#cloud-config"}},
        ]}});
        assert_eq!(
            volume_claims(&template),
            vec![(true, "fedora".to_string()), (false, "scratch".to_string())]
        );
    }

    #[test]
    fn each_wait_shows_as_kubevirt_prints_it() {
        assert_eq!(Readiness::Ready.printable_status(), None);
        assert_eq!(
            Readiness::Provisioning("x".into()).printable_status(),
            Some("Provisioning")
        );
        assert_eq!(
            Readiness::Waiting("x".into()).printable_status(),
            Some("WaitingForVolumeBinding")
        );
        assert_eq!(
            Readiness::Failed("x".into()).printable_status(),
            Some("DataVolumeError")
        );
        let c = Readiness::Waiting("DataVolume n/x does not exist".into())
            .condition("t")
            .unwrap();
        assert_eq!(c["reason"], "NotAllDVsReady");
        assert_eq!(c["message"], "DataVolume n/x does not exist");
    }
}
