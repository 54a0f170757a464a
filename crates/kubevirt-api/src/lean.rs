//! Objects of any kind as the controllers and node agents cache them: decoded without
//! `managedFields`, which are as large as a VMI's spec and which none of them reads.
//!
//! kube-runtime's `DynamicObject` decodes its top-level fields through `#[serde(flatten)]`
//! (every event buffered once more) and its metadata with every managedFields entry. With
//! the controllers' shared VMI informer and the simulated nodes' agent watching every VMI
//! in the server's process, that decoding and the clones of what it built were a sixth of
//! the server's CPU while 10,000 VMs started.

use std::borrow::Cow;
use std::fmt;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicObject, DynamicResourceScope, Resource, TypeMeta};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client};
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

pub use crate::model::object::WithoutManagedFields;

/// A `DynamicObject` decoded without its managedFields (see the module's comment).
#[derive(Clone, Debug)]
pub struct Lean(pub DynamicObject);

impl Resource for Lean {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// Sent as the object it wraps (a create's body).
impl Serialize for Lean {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Lean {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(LeanVisitor).map(Lean)
    }
}

/// Reads the top-level fields in one pass: type, metadata, and the rest as JSON.
struct LeanVisitor;

impl<'de> Visitor<'de> for LeanVisitor {
    type Value = DynamicObject;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DynamicObject, A::Error> {
        let mut api_version = None;
        let mut kind = None;
        let mut metadata = ObjectMeta::default();
        let mut data = Map::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "apiVersion" => api_version = Some(map.next_value::<String>()?),
                "kind" => kind = Some(map.next_value::<String>()?),
                "metadata" => metadata = map.next_value::<WithoutManagedFields>()?.0,
                _ => {
                    data.insert(key.into_owned(), map.next_value::<Value>()?);
                }
            }
        }
        let types = match (api_version, kind) {
            (Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
            _ => None,
        };
        Ok(DynamicObject {
            types,
            metadata,
            data: Value::Object(data),
        })
    }
}

/// A watch on every object of `resource` that `config` selects, decoded lean and handed
/// on as `DynamicObject`s (for a reflector and the code that reads them).
pub fn watch(
    client: &Client,
    resource: &ApiResource,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send + 'static {
    let api = Api::<Lean>::all_with(client.clone(), resource);
    watcher(api, config).map(|event| {
        event.map(|event| match event {
            watcher::Event::Apply(Lean(object)) => watcher::Event::Apply(object),
            watcher::Event::Delete(Lean(object)) => watcher::Event::Delete(object),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitApply(Lean(object)) => watcher::Event::InitApply(object),
            watcher::Event::InitDone => watcher::Event::InitDone,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_as_dynamic_object_does_but_without_managed_fields() {
        let object = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {
                "name": "vm1", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                "labels": {"a": "b"}, "annotations": {"c": "d"}, "finalizers": ["f"],
                "creationTimestamp": "2026-12-04T00:00:00Z",
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                     "name": "vm1", "uid": "u0", "controller": true}],
                "managedFields": [{"manager": "m", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {"domain": {"cpu": {"cores": 1}}},
            "status": {"phase": "Running", "nodeName": "n1"}
        });
        let lean: Lean = serde_json::from_value(object.clone()).unwrap();
        let mut full: DynamicObject = serde_json::from_value(object).unwrap();
        assert!(full.metadata.managed_fields.is_some());
        full.metadata.managed_fields = None;
        assert_eq!(
            serde_json::to_value(&lean.0).unwrap(),
            serde_json::to_value(&full).unwrap()
        );
    }

    #[test]
    fn a_watch_event_decodes() {
        let event: kube::core::WatchEvent<Lean> = serde_json::from_str(
            r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Node",
                "metadata":{"name":"n1","resourceVersion":"3"},"status":{}}}"#,
        )
        .unwrap();
        let kube::core::WatchEvent::Added(Lean(node)) = event else {
            panic!("not an ADDED event: {event:?}");
        };
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(node.types.unwrap().kind, "Node");
        assert_eq!(node.data, json!({"status": {}}));
    }
}
