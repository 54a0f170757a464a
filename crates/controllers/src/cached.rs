//! Objects as a controller's cache keeps them. Decoded into `serde_json::Value` trees, a
//! VirtualMachine and its managedFields take tens of KiB in memory; a cache of thousands
//! then spends more time growing the heap than syncing. Here the metadata is decoded
//! (without managedFields, which no controller reads) and spec and status stay JSON text
//! until a sync asks for them.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use futures::Stream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::core::{ApiResource, DynamicObject, DynamicResourceScope};
use kube::runtime::reflector::{self, reflector, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Every object of `resource`, watched into a cache: the cache, and the watch events
/// after the cache has taken them.
pub fn watch(
    client: &Client,
    resource: &ApiResource,
) -> (
    Store<Cached>,
    impl Stream<Item = Result<watcher::Event<Cached>, watcher::Error>> + Send + 'static,
) {
    let writer = reflector::store::Writer::new(resource.clone());
    let reader = writer.as_reader();
    let api = Api::<Cached>::all_with(client.clone(), resource);
    (
        reader,
        reflector(writer, watcher(api, watcher::Config::default())),
    )
}

#[derive(Clone, Debug, Deserialize)]
pub struct Cached {
    #[serde(deserialize_with = "metadata_without_managed_fields")]
    pub metadata: ObjectMeta,
    spec: Option<Box<RawValue>>,
    status: Option<Box<RawValue>>,
}

/// Skips `managedFields` unread (for a VM they are as large as its spec), decoding the
/// other fields of `ObjectMeta` in the same pass.
fn metadata_without_managed_fields<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    /// `ObjectMeta` without `managedFields`, which is then an unknown field, skipped.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Metadata {
        annotations: Option<BTreeMap<String, String>>,
        creation_timestamp: Option<Time>,
        deletion_grace_period_seconds: Option<i64>,
        deletion_timestamp: Option<Time>,
        finalizers: Option<Vec<String>>,
        generate_name: Option<String>,
        generation: Option<i64>,
        labels: Option<BTreeMap<String, String>>,
        name: Option<String>,
        namespace: Option<String>,
        owner_references: Option<Vec<OwnerReference>>,
        resource_version: Option<String>,
        self_link: Option<String>,
        uid: Option<String>,
    }
    let m = Metadata::deserialize(deserializer)?;
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

/// The top-level spec fields a sync needs to decide what to do; the rest (a VM's
/// template) is decoded only when acted on, through `Cached::spec_field`.
pub const DECISION_SPEC_FIELDS: &[&str] = &["running", "runStrategy"];

impl Cached {
    /// The object as the controllers' logic reads it: metadata, status and the named
    /// top-level spec fields (all of them when `None`).
    pub fn decode(
        &self,
        resource: &ApiResource,
        spec_fields: Option<&[&str]>,
    ) -> Result<DynamicObject, serde_json::Error> {
        let mut data = Map::new();
        if let Some(raw) = &self.spec {
            let spec = match spec_fields {
                None => serde_json::from_str(raw.get())?,
                Some(fields) => {
                    let all: HashMap<&str, &RawValue> = serde_json::from_str(raw.get())?;
                    let mut spec = Map::new();
                    for field in fields {
                        if let Some(value) = all.get(field) {
                            spec.insert((*field).into(), serde_json::from_str(value.get())?);
                        }
                    }
                    Value::Object(spec)
                }
            };
            data.insert("spec".into(), spec);
        }
        if let Some(raw) = &self.status {
            data.insert("status".into(), serde_json::from_str(raw.get())?);
        }
        let mut object = DynamicObject::new("", resource).data(Value::Object(data));
        object.metadata = self.metadata.clone();
        Ok(object)
    }

    /// One top-level field of the spec, decoded.
    pub fn spec_field(&self, field: &str) -> Result<Option<Value>, serde_json::Error> {
        let Some(raw) = &self.spec else {
            return Ok(None);
        };
        let fields: HashMap<&str, &RawValue> = serde_json::from_str(raw.get())?;
        fields
            .get(field)
            .map(|value| serde_json::from_str(value.get()))
            .transpose()
    }
}

impl kube::Resource for Cached {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources;
    use serde_json::json;

    #[test]
    fn decodes_to_the_object_without_managed_fields() {
        let vm = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                         "managedFields": [{"manager": "kubectl", "operation": "Update",
                                            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}},
            "status": {"printableStatus": "Stopped"}
        });
        let cached: Cached = serde_json::from_value(vm.clone()).unwrap();
        let decoded = cached.decode(&resources::virtual_machine(), None).unwrap();
        assert_eq!(decoded.metadata.managed_fields, None);
        assert_eq!(decoded.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(decoded.data["spec"], vm["spec"]);
        assert_eq!(decoded.data["status"], vm["status"]);
        assert_eq!(decoded.types.unwrap().kind, "VirtualMachine");

        let partial = cached
            .decode(&resources::virtual_machine(), Some(DECISION_SPEC_FIELDS))
            .unwrap();
        assert_eq!(partial.data["spec"], json!({"runStrategy": "Halted"}));
        assert_eq!(partial.data["status"], vm["status"]);
        assert_eq!(
            cached.spec_field("template").unwrap(),
            Some(vm["spec"]["template"].clone())
        );
        assert_eq!(cached.spec_field("running").unwrap(), None);

        let bare: Cached = serde_json::from_value(json!({"metadata": {"name": "b"}})).unwrap();
        let decoded = bare.decode(&resources::virtual_machine(), None).unwrap();
        assert_eq!(decoded.data, json!({}));
        assert_eq!(bare.spec_field("template").unwrap(), None);
    }
}
