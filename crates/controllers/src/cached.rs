//! Objects as a controller's cache keeps them. Decoded into `serde_json::Value` trees, a
//! VirtualMachine and its managedFields take tens of KiB in memory; a cache of thousands
//! then spends more time growing the heap than syncing. Here the metadata is decoded
//! (without managedFields, which no controller reads) and spec and status stay JSON text
//! until a sync asks for them.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicObject, DynamicResourceScope};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

#[derive(Clone, Debug, Deserialize)]
pub struct Cached {
    #[serde(deserialize_with = "metadata_without_managed_fields")]
    pub metadata: ObjectMeta,
    spec: Option<Box<RawValue>>,
    status: Option<Box<RawValue>>,
}

fn metadata_without_managed_fields<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    let mut metadata = ObjectMeta::deserialize(deserializer)?;
    metadata.managed_fields = None;
    Ok(metadata)
}

impl Cached {
    /// The object with spec and status decoded, as the controllers' logic reads it.
    pub fn decode(&self, resource: &ApiResource) -> Result<DynamicObject, serde_json::Error> {
        let mut data = Map::new();
        for (field, raw) in [("spec", &self.spec), ("status", &self.status)] {
            if let Some(raw) = raw {
                data.insert(field.into(), serde_json::from_str(raw.get())?);
            }
        }
        let mut object = DynamicObject::new("", resource).data(Value::Object(data));
        object.metadata = self.metadata.clone();
        Ok(object)
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
        let decoded = cached.decode(&resources::virtual_machine()).unwrap();
        assert_eq!(decoded.metadata.managed_fields, None);
        assert_eq!(decoded.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(decoded.data["spec"], vm["spec"]);
        assert_eq!(decoded.data["status"], vm["status"]);
        assert_eq!(decoded.types.unwrap().kind, "VirtualMachine");

        let bare: Cached = serde_json::from_value(json!({"metadata": {"name": "b"}})).unwrap();
        let decoded = bare.decode(&resources::virtual_machine()).unwrap();
        assert_eq!(decoded.data, json!({}));
    }
}
