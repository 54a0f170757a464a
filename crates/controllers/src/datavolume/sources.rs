//! What a DataVolume's transfer reads from the API: the claim it fills, the claim it
//! clones, the DataSource it names, and the Secret and ConfigMap of an http source.

use std::path::PathBuf;

use base64::Engine as _;
use importer::{HttpSource, Target};
use kube::core::DynamicObject;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::cdi::{ClaimProperties, ClaimRef, Http, Registry, Spec, STORAGE_CLASS};
use kubevirt_api::names::annotations::VOLUME_PATH;
use kubevirt_api::quantity::Quantity;
use serde_json::Value;

use super::data_source_resource;
use crate::volumes::claim_resource;
use crate::Error;

fn core(kind: &str, plural: &str) -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("", "v1", kind),
        plural,
    )
}

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
pub fn bound_target(claim: &DynamicObject) -> Option<Target> {
    let bound = claim.data.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
    let path = claim.annotations().get(VOLUME_PATH).filter(|_| bound)?;
    let capacity = claim
        .data
        .pointer("/status/capacity/storage")
        .and_then(Quantity::from_json)
        .map(Quantity::value)?;
    Some(Target {
        path: PathBuf::from(path),
        capacity_bytes: u64::try_from(capacity).ok()?,
    })
}

async fn claim(client: &Client, claim: &ClaimRef) -> Result<Option<DynamicObject>, Error> {
    let api =
        Api::<DynamicObject>::namespaced_with(client.clone(), &claim.namespace, &claim_resource());
    Ok(api.get_opt(&claim.name).await?)
}

/// The size of the claim to clone (for a DataVolume that asked for none).
pub async fn claim_size(client: &Client, from: &ClaimRef) -> Result<Option<Value>, Error> {
    Ok(claim(client, from).await?.and_then(|c| {
        c.data
            .pointer("/status/capacity/storage")
            .or_else(|| c.data.pointer("/spec/resources/requests/storage"))
            .cloned()
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
    let api = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &reference.namespace,
        &data_source_resource(),
    );
    let ClaimRef { namespace, name } = reference;
    let Some(source) = api.get_opt(name).await? else {
        return Ok(Err(format!("DataSource {namespace}/{name} not found")));
    };
    let Some(pvc) = source.data.pointer("/spec/source/pvc") else {
        return Ok(Err(format!("DataSource {namespace}/{name} names no pvc")));
    };
    let text = |key: &str| {
        pvc.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    Ok(match text("name") {
        Some(claim) => Ok(ClaimRef {
            namespace: text("namespace").unwrap_or(namespace).to_string(),
            name: claim.to_string(),
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
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            namespace,
            &core("Secret", "secrets"),
        );
        let Some(secret) = api.get_opt(secret).await? else {
            return Ok(Err(format!("secret {namespace}/{secret} not found")));
        };
        let field = |key: &str| {
            let encoded = secret
                .data
                .pointer(&format!("/data/{key}"))
                .and_then(Value::as_str)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
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
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            namespace,
            &core("Secret", "secrets"),
        );
        let Some(secret) = api.get_opt(name).await? else {
            return Ok(Err(format!("secret {namespace}/{name} not found")));
        };
        let data: std::collections::BTreeMap<String, Vec<u8>> = secret
            .data
            .get("data")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str()?)
                    .ok()?;
                Some((k.clone(), bytes))
            })
            .collect();
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.clone()).ok())
        };
        options.credentials = match (text("accessKeyId"), text("secretKey")) {
            (Some(user), Some(password)) => vec![oci::Credentials::new(user, password)],
            _ => {
                let kind = secret
                    .data
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("");
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
    let api = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        namespace,
        &core("ConfigMap", "configmaps"),
    );
    let Some(config_map) = api.get_opt(name).await? else {
        return Ok(Err(format!("configmap {namespace}/{name} not found")));
    };
    let pem: Vec<&str> = config_map
        .data
        .get("data")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(_, v)| v.as_str())
        .collect();
    Ok(Ok(pem.join("\n").into_bytes()))
}
