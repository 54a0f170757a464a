//! What a DataVolume's transfer reads from the API: the claim it fills, the claim it
//! clones, the DataSource it names, and the Secret and ConfigMap of an http source.

use std::path::PathBuf;

use importer::{HttpSource, Target};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
use kube::core::DynamicObject;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::cdi::model::DataSource;
use kubevirt_api::cdi::{ClaimProperties, ClaimRef, Http, Registry, Spec, STORAGE_CLASS};
use kubevirt_api::names::annotations::VOLUME_PATH;
use kubevirt_api::quantity::Quantity;
use serde_json::Value;

use crate::Error;

/// The access and volume modes the StorageProfile of the claim's class gives a
/// `spec.storage` claim (CDI keeps one profile per storage class).
pub async fn claim_properties(client: &Client, spec: &Spec) -> Result<ClaimProperties, Error> {
    if !spec.storage_api {
        return Ok(ClaimProperties::default());
    }
    let class = spec
        .claim
        .get("storageClassName")
        .and_then(Value::as_str)
        .unwrap_or(STORAGE_CLASS);
    let profiles = Api::<DynamicObject>::all_with(client.clone(), &storage_profile_resource());
    Ok(match profiles.get_opt(class).await? {
        Some(profile) => {
            let mut whole = profile.data.clone();
            whole["metadata"] = Value::Null;
            ClaimProperties::of_profile(&whole)
        }
        None => ClaimProperties::default(),
    })
}

fn storage_profile_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "StorageProfile"),
        "storageprofiles",
    )
}

/// The file of a bound claim and its size.
pub fn bound_target(claim: &PersistentVolumeClaim) -> Option<Target> {
    let status = claim.status.as_ref()?;
    let bound = status.phase.as_deref() == Some("Bound");
    let path = claim.annotations().get(VOLUME_PATH).filter(|_| bound)?;
    let capacity = status
        .capacity
        .as_ref()?
        .get("storage")
        .and_then(|q| Quantity::parse(&q.0))
        .map(Quantity::value)?;
    Some(Target {
        path: PathBuf::from(path),
        capacity_bytes: u64::try_from(capacity).ok()?,
    })
}

async fn claim(client: &Client, claim: &ClaimRef) -> Result<Option<PersistentVolumeClaim>, Error> {
    let api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &claim.namespace);
    Ok(api.get_opt(&claim.name).await?)
}

/// The size of the claim to clone (for a DataVolume that asked for none).
pub async fn claim_size(client: &Client, from: &ClaimRef) -> Result<Option<Value>, Error> {
    Ok(claim(client, from).await?.and_then(|c| {
        let capacity = c
            .status
            .and_then(|s| s.capacity)
            .and_then(|c| c.get("storage").cloned());
        let requested = || {
            c.spec
                .and_then(|s| s.resources)
                .and_then(|r| r.requests)
                .and_then(|r| r.get("storage").cloned())
        };
        capacity.or_else(requested).map(|q| Value::String(q.0))
    }))
}

/// The file of the claim to clone, or why it cannot be read yet.
pub async fn claim_file(
    client: &Client,
    from: &ClaimRef,
) -> Result<Result<PathBuf, String>, Error> {
    let ClaimRef { namespace, name } = from;
    Ok(match claim(client, from).await? {
        None => Err(format!("The source pvc {namespace}/{name} doesn't exist")),
        Some(c) => match bound_target(&c) {
            Some(target) => Ok(target.path),
            None => Err(format!(
                "The source pvc {namespace}/{name} is not bound yet"
            )),
        },
    })
}

/// The claim a DataSource names, or why there is none.
pub async fn data_source_claim(
    client: &Client,
    reference: &ClaimRef,
) -> Result<Result<ClaimRef, String>, Error> {
    let api = Api::<DataSource>::namespaced(client.clone(), &reference.namespace);
    let ClaimRef { namespace, name } = reference;
    let Some(source) = api.get_opt(name).await? else {
        return Ok(Err(format!("DataSource {namespace}/{name} not found")));
    };
    let pvc = source.spec.source.and_then(|s| s.pvc).unwrap_or_default();
    let text = |field: Option<String>| field.filter(|s| !s.is_empty());
    Ok(match text(pvc.name) {
        Some(claim) => Ok(ClaimRef {
            namespace: text(pvc.namespace).unwrap_or_else(|| namespace.clone()),
            name: claim,
        }),
        None => Err(format!("DataSource {namespace}/{name} names no pvc")),
    })
}

/// An http source with the credentials and CAs its Secret and ConfigMap hold, or why
/// they cannot be read.
pub async fn http_source(
    client: &Client,
    namespace: &str,
    http: &Http,
) -> Result<Result<HttpSource, String>, Error> {
    let mut source = HttpSource::new(http.url.clone());
    source.extra_headers = http
        .extra_headers
        .iter()
        .filter_map(|h| h.split_once(':'))
        .map(|(name, value)| (name.trim().to_string(), value.trim().to_string()))
        .collect();
    if let Some(secret) = &http.secret_ref {
        let api = Api::<Secret>::namespaced(client.clone(), namespace);
        let Some(secret) = api.get_opt(secret).await? else {
            return Ok(Err(format!("secret {namespace}/{secret} not found")));
        };
        let field = |key: &str| {
            let bytes = secret.data.as_ref()?.get(key)?;
            String::from_utf8(bytes.0.clone()).ok()
        };
        match (field("accessKeyId"), field("secretKey")) {
            (Some(user), Some(password)) => source.basic_auth = Some((user, password)),
            _ => {
                return Ok(Err(format!(
                    "secret {namespace}/{} needs the keys accessKeyId and secretKey",
                    secret.name_any()
                )))
            }
        }
    }
    if let Some(name) = &http.cert_config_map {
        match config_map_pem(client, namespace, name).await? {
            Ok(pem) => source.ca_pem = Some(pem),
            Err(message) => return Ok(Err(message)),
        }
    }
    Ok(Ok(source))
}

/// The image of a `registry` source (`docker://` stripped) and how to pull it: the
/// credentials of its `secretRef` (CDI's `accessKeyId`/`secretKey`, or a docker config
/// Secret as for an imagePullSecret) and the CAs of its `certConfigMap`, or why they
/// cannot be read.
pub async fn registry_pull(
    client: &Client,
    namespace: &str,
    registry: &Registry,
) -> Result<Result<(String, oci::PullOptions), String>, Error> {
    let image = registry
        .url
        .strip_prefix("docker://")
        .unwrap_or(&registry.url)
        .to_string();
    let reference = match oci::Reference::parse(&image) {
        Ok(reference) => reference,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let mut options = oci::PullOptions {
        policy: oci::PullPolicy::default_for(&reference),
        ..Default::default()
    };
    if let Some(name) = &registry.secret_ref {
        let api = Api::<Secret>::namespaced(client.clone(), namespace);
        let Some(secret) = api.get_opt(name).await? else {
            return Ok(Err(format!("secret {namespace}/{name} not found")));
        };
        let data: std::collections::BTreeMap<String, Vec<u8>> = secret
            .data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.clone()).ok())
        };
        options.credentials = match (text("accessKeyId"), text("secretKey")) {
            (Some(user), Some(password)) => vec![oci::Credentials::new(user, password)],
            _ => {
                let kind = secret.type_.as_deref().unwrap_or("");
                match oci::Keyring::from_secret(kind, &data) {
                    Ok(keyring) => keyring.lookup(&reference),
                    Err(e) => return Ok(Err(format!("secret {namespace}/{name}: {e}"))),
                }
            }
        };
    }
    if let Some(name) = &registry.cert_config_map {
        match config_map_pem(client, namespace, name).await? {
            Ok(pem) => options.ca_bundle = Some(pem),
            Err(message) => return Ok(Err(message)),
        }
    }
    Ok(Ok((image, options)))
}

/// The PEM certificates a ConfigMap holds (all its values).
async fn config_map_pem(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Result<Vec<u8>, String>, Error> {
    let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let Some(config_map) = api.get_opt(name).await? else {
        return Ok(Err(format!("configmap {namespace}/{name} not found")));
    };
    let pem: Vec<&str> = config_map
        .data
        .iter()
        .flatten()
        .map(|(_, v)| v.as_str())
        .collect();
    Ok(Ok(pem.join("\n").into_bytes()))
}
