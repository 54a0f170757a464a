//! What the VM controller does for a VM's disks before it starts one: the DataVolumes of
//! `spec.dataVolumeTemplates` are created, owned by the VM (so they outlive a stop and
//! go with the VM), and a VMI is created only once every DataVolume and claim its
//! volumes use is ready. Until then the VM shows why (printableStatus and a
//! `DataVolumesReady` condition).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::PostParams;
use kube::{Api, Client};
use kubevirt_api::cdi::model::DataVolume;
use kubevirt_api::cdi::Phase as DataVolumePhase;
use kubevirt_api::model::vm::{DataVolumeTemplate, VmiTemplate};
use kubevirt_api::model::{Condition, VirtualMachine};
use kubevirt_api::volumes::Source;

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
    pub fn condition(&self, now: &str) -> Option<Condition> {
        let message = match self {
            Readiness::Ready => return None,
            Readiness::Provisioning(m) | Readiness::Waiting(m) | Readiness::Failed(m) => m,
        };
        Some(Condition {
            last_transition_time: Some(now.into()),
            ..Condition::new("DataVolumesReady", "False", "NotAllDVsReady", message)
        })
    }
}

/// Creates the DataVolumes of `templates` that do not exist yet, owned by `vm`.
pub async fn ensure_templates(
    client: &Client,
    vm: &VirtualMachine,
    templates: &[DataVolumeTemplate],
) -> Result<(), Error> {
    let namespace = vm.namespace();
    let api = Api::<DataVolume>::namespaced(client.clone(), namespace);
    for template in templates {
        let mut metadata = template.metadata.clone().unwrap_or_default();
        let Some(name) = metadata.name.clone() else {
            continue;
        };
        if api.get_opt(&name).await?.is_some() {
            continue;
        }
        metadata.namespace = Some(namespace.to_string());
        metadata.owner_references = Some(vec![vm.controller_reference()]);
        let dv = DataVolume {
            metadata,
            spec: template.spec.clone().unwrap_or_default(),
            status: Default::default(),
        };
        match api.create(&PostParams::default(), &dv).await {
            Ok(_) => tracing::info!(
                "vm {namespace}/{}: created its DataVolume {name}",
                vm.name()
            ),
            // Created meanwhile (a second pass, or the user): readiness looks at it.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The DataVolumes and claims a VMI template's volumes name: (is a DataVolume, name).
fn volume_claims(template: &VmiTemplate) -> Vec<(bool, String)> {
    let volumes = template
        .spec
        .as_ref()
        .map(|s| s.volumes())
        .unwrap_or_default();
    volumes
        .iter()
        .filter_map(|v| match &v.source {
            Source::DataVolume(name) => Some((true, name.clone())),
            Source::PersistentVolumeClaim(name) => Some((false, name.clone())),
            _ => None,
        })
        .collect()
}

/// Whether the volumes of the VMI `template` are ready, reading their DataVolumes and
/// claims in `namespace`. The first volume that is not ready decides.
pub async fn readiness(
    client: &Client,
    namespace: &str,
    template: &VmiTemplate,
) -> Result<Readiness, Error> {
    let claims = volume_claims(template);
    if claims.is_empty() {
        return Ok(Readiness::Ready);
    }
    let dvs = Api::<DataVolume>::namespaced(client.clone(), namespace);
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace);
    for (is_data_volume, name) in claims {
        if is_data_volume {
            let Some(dv) = dvs.get_opt(&name).await? else {
                return Ok(Readiness::Waiting(format!(
                    "DataVolume {namespace}/{name} does not exist"
                )));
            };
            match dv.phase() {
                DataVolumePhase::Succeeded => continue,
                DataVolumePhase::Failed => {
                    return Ok(Readiness::Failed(format!(
                        "DataVolume {namespace}/{name} failed: {}",
                        dv.failure_message()
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
                    let progress = dv.status.progress.as_deref().unwrap_or("N/A");
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
            .is_some_and(|c| c.status.and_then(|s| s.phase).as_deref() != Some("Bound"));
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
    use serde_json::json;

    #[test]
    fn volumes_name_their_data_volumes_and_claims() {
        let template: VmiTemplate = serde_json::from_value(json!({"spec": {"volumes": [
            {"name": "root", "dataVolume": {"name": "fedora"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "scratch"}},
            {"name": "cloud", "cloudInitNoCloud": {"userData": "#cloud-config"}},
        ]}}))
        .unwrap();
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
        assert_eq!(c.reason(), "NotAllDVsReady");
        assert_eq!(c.message(), "DataVolume n/x does not exist");
    }
}
