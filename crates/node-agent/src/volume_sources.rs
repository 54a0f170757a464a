//! The ConfigMaps and Secrets a VMI's volumes name (sysprep answer files, cloud-init user
//! and network data, the imagePullSecrets of containerDisks and kernelBoot), read from
//! the API when the VMI is prepared and again when it starts, as the kubelet mounts them
//! into KubeVirt's launcher pod (and reads the pod's imagePullSecrets).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use base64::Engine;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client, ResourceExt};
use kubevirt_api::model::VirtualMachineInstance;
use kubevirt_api::names::annotations::VOLUME_PATH;
use serde_json::Value;

/// The files a ConfigMap or Secret holds: its keys and their (decoded) values.
pub type Files = BTreeMap<String, Vec<u8>>;

pub use kubevirt_api::references::{Reference, SourceKind};

fn resource(kind: SourceKind) -> ApiResource {
    let (kind, plural) = match kind {
        SourceKind::ConfigMap => ("ConfigMap", "configmaps"),
        SourceKind::Secret | SourceKind::PullSecret => ("Secret", "secrets"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", kind), plural)
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The kubelet's words for a volume whose object is missing.
    #[error("volume {volume}: {} {name:?} not found in namespace {namespace}", kind.noun())]
    Missing {
        kind: SourceKind,
        name: String,
        volume: String,
        namespace: String,
    },
    #[error("volume {volume}: reading {} {name:?}: {source}", kind.noun())]
    Api {
        kind: SourceKind,
        name: String,
        volume: String,
        #[source]
        source: kube::Error,
    },
    /// KubeVirt's words for a Multus network whose definition is missing.
    #[error("failed to locate network attachment definition {namespace}/{name}")]
    MissingNetwork { namespace: String, name: String },
    #[error("reading network attachment definition {namespace}/{name}: {source}")]
    NetworkApi {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading persistentvolumeclaim {name:?}: {source}")]
    ClaimApi {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What the API says about a claim a volume uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    Missing,
    /// It exists but has no disk file yet.
    Unbound,
    Bound(PathBuf),
}

/// Where a bound claim's disk file is, as its volume controller published it.
fn claim_state(claim: Option<&DynamicObject>) -> Claim {
    let Some(claim) = claim else {
        return Claim::Missing;
    };
    let bound = claim.data.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
    match claim.annotations().get(VOLUME_PATH) {
        Some(path) if bound => Claim::Bound(PathBuf::from(path)),
        _ => Claim::Unbound,
    }
}

/// The files of a ConfigMap (`data` as is, `binaryData` decoded) or a Secret (`data`
/// decoded); values the API server let through are valid base64.
fn files_of(kind: SourceKind, object: &DynamicObject) -> Files {
    let decoded = |field: &str| -> Vec<(String, Vec<u8>)> {
        object
            .data
            .get(field)
            .and_then(Value::as_object)
            .map(|map| {
                map.iter()
                    .filter_map(|(key, value)| {
                        let text = value.as_str()?;
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(text)
                            .ok()?;
                        Some((key.clone(), bytes))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    match kind {
        SourceKind::Secret | SourceKind::PullSecret => decoded("data").into_iter().collect(),
        SourceKind::ConfigMap => {
            let mut files: Files = decoded("binaryData").into_iter().collect();
            if let Some(map) = object.data.get("data").and_then(Value::as_object) {
                for (key, value) in map {
                    let text = value.as_str().unwrap_or_default();
                    files.insert(key.clone(), text.as_bytes().to_vec());
                }
            }
            files
        }
    }
}

/// The files of one Secret (its decoded `data` and `stringData`); `None` when it does
/// not exist.
pub async fn read_secret(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Files>, kube::Error> {
    let api = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        namespace,
        &resource(SourceKind::Secret),
    );
    Ok(api
        .get_opt(name)
        .await?
        .map(|secret| files_of(SourceKind::Secret, &secret)))
}

/// What the volumes of one VMI read from ConfigMaps and Secrets.
#[derive(Clone, Debug, Default)]
pub struct VolumeSources {
    objects: HashMap<(SourceKind, String), Files>,
    /// The `type` of each imagePullSecret, by name.
    pull_secret_types: HashMap<String, String>,
    /// Each claim the volumes use, by name.
    claims: HashMap<String, Claim>,
    /// Whether each existing claim is ReadWriteMany (a disk several nodes may open).
    shared: HashMap<String, bool>,
    /// The CNI configuration of each Multus network, by the VMI's network name (`Null`
    /// when the definition has none).
    networks: HashMap<String, Value>,
}

/// The NetworkAttachmentDefinitions of the VMI's Multus networks, by network name.
async fn read_networks(
    client: &Client,
    vmi: &VirtualMachineInstance,
) -> Result<HashMap<String, Value>, SourceError> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition"),
        "network-attachment-definitions",
    );
    let mut networks = HashMap::new();
    for network in vmi.spec.networks() {
        let Some(reference) = &network.multus else {
            continue;
        };
        let (namespace, name) = reference
            .split_once('/')
            .unwrap_or((vmi.namespace(), reference.as_str()));
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource);
        let found = api
            .get_opt(name)
            .await
            .map_err(|source| SourceError::NetworkApi {
                namespace: namespace.into(),
                name: name.into(),
                source,
            })?
            .ok_or_else(|| SourceError::MissingNetwork {
                namespace: namespace.into(),
                name: name.into(),
            })?;
        let config = found
            .data
            .pointer("/spec/config")
            .and_then(Value::as_str)
            .and_then(|c| serde_json::from_str(c).ok())
            .unwrap_or(Value::Null);
        networks.insert(network.name.clone(), config);
    }
    Ok(networks)
}

impl VolumeSources {
    /// Reads every object the VMI's volumes refer to, from the VMI's namespace.
    pub async fn read(client: &Client, vmi: &VirtualMachineInstance) -> Result<Self, SourceError> {
        let namespace = vmi.namespace().to_string();
        let mut objects = HashMap::new();
        let mut pull_secret_types = HashMap::new();
        for reference in kubevirt_api::references::of_vmi(vmi) {
            let key = (reference.kind, reference.name.clone());
            if objects.contains_key(&key) {
                continue;
            }
            let api = Api::<DynamicObject>::namespaced_with(
                client.clone(),
                &namespace,
                &resource(reference.kind),
            );
            let object = api
                .get_opt(&reference.name)
                .await
                .map_err(|source| SourceError::Api {
                    kind: reference.kind,
                    name: reference.name.clone(),
                    volume: reference.volume.clone(),
                    source,
                })?
                .ok_or_else(|| SourceError::Missing {
                    kind: reference.kind,
                    name: reference.name.clone(),
                    volume: reference.volume.clone(),
                    namespace: namespace.clone(),
                })?;
            if reference.kind == SourceKind::PullSecret {
                let kind = object.data["type"].as_str().unwrap_or("Opaque");
                pull_secret_types.insert(reference.name.clone(), kind.to_string());
            }
            objects.insert(key, files_of(reference.kind, &object));
        }
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &namespace,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "PersistentVolumeClaim"),
                "persistentvolumeclaims",
            ),
        );
        let mut claims = HashMap::new();
        let mut shared = HashMap::new();
        for name in kubevirt_api::references::claim_names(&vmi.spec) {
            let claim = api
                .get_opt(&name)
                .await
                .map_err(|source| SourceError::ClaimApi {
                    name: name.clone(),
                    source,
                })?;
            if let Some(claim) = &claim {
                let modes = claim
                    .data
                    .pointer("/spec/accessModes")
                    .and_then(Value::as_array);
                let many = modes.is_some_and(|m| m.iter().any(|m| m == "ReadWriteMany"));
                shared.insert(name.clone(), many);
            }
            claims.insert(name, claim_state(claim.as_ref()));
        }
        let networks = read_networks(client, vmi).await?;
        Ok(VolumeSources {
            objects,
            pull_secret_types,
            claims,
            shared,
            networks,
        })
    }

    /// What the API said about a claim (`Missing` for one that was not asked about).
    pub fn claim(&self, name: &str) -> &Claim {
        self.claims.get(name).unwrap_or(&Claim::Missing)
    }

    /// The CNI configuration of the VMI's Multus network `network` (`Null`: none given).
    pub fn network(&self, network: &str) -> Option<&Value> {
        self.networks.get(network)
    }

    /// Whether a claim is ReadWriteMany; `None` when it was not found.
    pub fn claim_shared(&self, name: &str) -> Option<bool> {
        self.shared.get(name).copied()
    }

    /// Sources given directly, for tests.
    #[cfg(test)]
    pub fn from_objects(objects: impl IntoIterator<Item = (SourceKind, String, Files)>) -> Self {
        VolumeSources {
            objects: objects
                .into_iter()
                .map(|(kind, name, files)| ((kind, name), files))
                .collect(),
            pull_secret_types: HashMap::new(),
            claims: HashMap::new(),
            shared: HashMap::new(),
            networks: HashMap::new(),
        }
    }

    pub fn get(&self, kind: SourceKind, name: &str) -> Option<&Files> {
        self.objects.get(&(kind, name.to_string()))
    }

    /// An imagePullSecret's type and files; `None` when it was not read.
    pub fn pull_secret(&self, name: &str) -> Option<(&str, &Files)> {
        let files = self.get(SourceKind::PullSecret, name)?;
        let kind = self
            .pull_secret_types
            .get(name)
            .map_or("Opaque", String::as_str);
        Some((kind, files))
    }

    /// The files behind a sysprep volume source, with its kind and name.
    pub fn sysprep<'a>(&'a self, sysprep: &'a Value) -> Option<(SourceKind, &'a str, &'a Files)> {
        [
            (SourceKind::ConfigMap, "configMap"),
            (SourceKind::Secret, "secret"),
        ]
        .into_iter()
        .find_map(|(kind, field)| {
            let name = sysprep.get(field)?.get("name")?.as_str()?;
            Some((kind, name, self.get(kind, name)?))
        })
    }
}

/// Why the ConfigMaps and Secrets of a VMI's volumes cannot be used (yet).
pub(crate) enum SourcesUnusable {
    /// An object does not exist: it may still be created. The reason is the condition's:
    /// `FailedMount` (a volume's object) or `ErrImagePull` (an imagePullSecret).
    Missing {
        reason: &'static str,
        message: String,
    },
    /// What they hold cannot become the volume (a sysprep source without an answer file).
    Invalid(String),
}

/// Reads the objects the VMI's volumes name and checks they can become its disks; the
/// outer error is the API failing, which the controller retries.
pub(crate) async fn read_sources(
    client: &Client,
    vmi: &VirtualMachineInstance,
) -> Result<Result<VolumeSources, SourcesUnusable>, kube::Error> {
    let sources = match VolumeSources::read(client, vmi).await {
        Ok(sources) => sources,
        Err(e @ SourceError::Missing { kind, .. }) => {
            let reason = if kind == SourceKind::PullSecret {
                "ErrImagePull"
            } else {
                "FailedMount"
            };
            return Ok(Err(SourcesUnusable::Missing {
                reason,
                message: e.to_string(),
            }));
        }
        Err(e @ SourceError::MissingNetwork { .. }) => {
            return Ok(Err(SourcesUnusable::Missing {
                reason: "FailedCreate",
                message: e.to_string(),
            }));
        }
        Err(
            SourceError::Api { source, .. }
            | SourceError::ClaimApi { source, .. }
            | SourceError::NetworkApi { source, .. },
        ) => return Err(source),
    };
    Ok(crate::sysprep::check(vmi, &sources)
        .map(|()| sources)
        .map_err(SourcesUnusable::Invalid))
}

/// The ConfigMaps, Secrets and claims of a VMI migrating here, or why they cannot be
/// used (which fails the migration).
pub(crate) async fn read_sources_for_target(
    client: &Client,
    vmi: &VirtualMachineInstance,
) -> Result<Result<VolumeSources, String>, kube::Error> {
    Ok(read_sources(client, vmi).await?.map_err(|e| match e {
        SourcesUnusable::Missing { message, .. } | SourcesUnusable::Invalid(message) => message,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn files_decode_per_kind() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"unattend.xml": "<u/>"}, "binaryData": {"blob": "AAE="}
        }))
        .unwrap();
        let files = files_of(SourceKind::ConfigMap, &object);
        assert_eq!(files["unattend.xml"], b"<u/>");
        assert_eq!(files["blob"], [0, 1]);
        let secret: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"userdata": "aGk="}
        }))
        .unwrap();
        assert_eq!(files_of(SourceKind::Secret, &secret)["userdata"], b"hi");
    }

    #[test]
    fn missing_objects_read_like_the_kubelet() {
        let error = SourceError::Missing {
            kind: SourceKind::ConfigMap,
            name: "answers".into(),
            volume: "sysprep".into(),
            namespace: "default".into(),
        };
        assert_eq!(
            error.to_string(),
            "volume sysprep: configmap \"answers\" not found in namespace default"
        );
        let error = SourceError::Missing {
            kind: SourceKind::PullSecret,
            name: "regcred".into(),
            volume: "rootdisk".into(),
            namespace: "default".into(),
        };
        assert_eq!(
            error.to_string(),
            "volume rootdisk: imagePullSecret \"regcred\" not found in namespace default"
        );
    }
}
