//! Writes whose answer a controller needs only the resourceVersion of. The returned
//! object is skipped while it is parsed, not decoded into a tree: at 10,000 VMs starting,
//! decoding the answers to the controllers' own writes took a twentieth of the server's CPU.

use kube::api::{Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, Request};
use kube::{Client, Resource};
use serde::Deserialize;

/// What is read of a written object.
#[derive(Deserialize)]
struct Written {
    #[serde(default)]
    metadata: WrittenMeta,
}

#[derive(Default, Deserialize)]
struct WrittenMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
}

/// PATCH of a namespaced object, or of its `subresource`; returns the resourceVersion
/// the server gave the written object.
pub async fn patch<P: serde::Serialize>(
    client: &Client,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    params: &PatchParams,
    patch: &Patch<P>,
) -> Result<Option<String>, kube::Error> {
    let request = Request::new(DynamicObject::url_path(resource, Some(namespace)));
    let request = match subresource {
        Some(subresource) => request.patch_subresource(subresource, name, params, patch),
        None => request.patch(name, params, patch),
    }
    .map_err(kube::Error::BuildRequest)?;
    let written: Written = client.request(request).await?;
    Ok(written.metadata.resource_version)
}
