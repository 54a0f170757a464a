//! Core (`v1`) kinds served beside KubeVirt's, one module each: namespaces, nodes, pods,
//! persistent volume claims, ConfigMaps and Secrets.

use apimachinery::resource::ResourceInfo;
use serde_json::{json, Value};

use crate::registry::ResourceHooks;

mod config_data;
mod config_map;
mod namespace;
pub(crate) mod node;
mod persistent_volume_claim;
mod pod;
mod secret;
pub(crate) mod service;

pub use config_data::data_count;
pub use namespace::{INSTALL_NAMESPACES, SYSTEM_NAMESPACES};
pub use pod::computed_cell as pod_cell;

/// The core kinds with the hooks that govern their writes.
pub fn registrations(
    service_cidr: ipnet::Ipv4Net,
) -> Vec<(&'static ResourceInfo, Box<dyn ResourceHooks>)> {
    vec![
        (&namespace::NAMESPACE, Box::new(namespace::NamespaceHooks)),
        (&node::NODE, Box::new(node::NodeHooks)),
        (&pod::POD, Box::new(pod::PodHooks)),
        (
            &persistent_volume_claim::PERSISTENT_VOLUME_CLAIM,
            Box::new(persistent_volume_claim::PersistentVolumeClaimHooks),
        ),
        (
            &config_map::CONFIG_MAP,
            Box::new(config_map::ConfigMapHooks),
        ),
        (&secret::SECRET, Box::new(secret::SecretHooks)),
        (
            &service::SERVICE,
            Box::new(service::ServiceHooks {
                range: service_cidr,
            }),
        ),
    ]
}

/// OpenAPI schemas of the core kinds and of `Status`, in the components naming of
/// kube-apiserver.
pub fn schemas() -> Value {
    let mut all = match status_schema() {
        Value::Object(map) => map,
        _ => Default::default(),
    };
    for kind in [
        namespace::schemas(),
        node::schemas(),
        pod::schemas(),
        persistent_volume_claim::schemas(),
        config_map::schemas(),
        secret::schemas(),
        service::schemas(),
    ] {
        if let Value::Object(map) = kind {
            all.extend(map);
        }
    }
    Value::Object(all)
}

fn status_schema() -> Value {
    json!({
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status": {
            "type": "object",
            "description": "The result of an operation that returns no object, and every failure.",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "code": {"type": "integer", "description": "The HTTP status code."},
                "message": {"type": "string", "description": "What happened, for a person."},
                "reason": {"type": "string", "description": "Why, for a program."},
                "status": {"type": "string", "description": "Success or Failure."},
                "details": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        }
    })
}
