//! Objects as a controller's cache keeps them. Decoded into `serde_json::Value` trees, a
//! VirtualMachine and its managedFields take tens of KiB in memory; even as decoded
//! metadata (labels and annotations are a B-tree each) plus spec and status text, 100,000
//! cached VMs took 3.6 KiB apiece. Here an object is the few metadata fields kube-runtime
//! keys and routes by, plus the rest as LZ4-packed JSON (managedFields dropped: no
//! controller reads them), unpacked when a sync asks for it. Objects of a kind are packed
//! against the first one cached (its dictionary): they share most of their text, so a
//! cached VM packs to a few hundred bytes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::OnceLock;

use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::NamespaceResourceScope;
#[cfg(test)]
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, reflector, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client};
use kubevirt_api::model::VirtualMachine;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A kind the controllers cache, named by constants so that a cache key carries no copy
/// of its group, version and plural (kube-runtime's `ObjectRef` holds the dynamic type).
pub trait Kind: Clone + fmt::Debug + Send + Sync + 'static {
    const GROUP: &'static str;
    const VERSION: &'static str;
    const API_VERSION: &'static str;
    const KIND: &'static str;
    const PLURAL: &'static str;

    /// The first object of this kind cached in this process, packed text that later
    /// ones are packed against. Set once; a packed object says whether it used it.
    fn dictionary() -> &'static OnceLock<Box<[u8]>>;
}

impl Kind for VirtualMachine {
    const GROUP: &'static str = VirtualMachine::GROUP;
    const VERSION: &'static str = VirtualMachine::VERSION;
    const API_VERSION: &'static str = VirtualMachine::API_VERSION;
    const KIND: &'static str = VirtualMachine::KIND;
    const PLURAL: &'static str = VirtualMachine::PLURAL;

    fn dictionary() -> &'static OnceLock<Box<[u8]>> {
        static DICTIONARY: OnceLock<Box<[u8]>> = OnceLock::new();
        &DICTIONARY
    }
}

/// The events of a watch on every object of one kind, after the cache has taken them.
pub type Events<K> = BoxStream<'static, Result<watcher::Event<Cached<K>>, watcher::Error>>;

/// Every object of kind `K`, watched into a cache: the cache, and the watch events
/// after the cache has taken them.
pub fn watch<K: Kind>(client: &Client) -> (Store<Cached<K>>, Events<K>) {
    let writer = reflector::store::Writer::default();
    let reader = writer.as_reader();
    let api = Api::<Cached<K>>::all(client.clone());
    let events = reflector(writer, watcher(api, watcher::Config::default()));
    (reader, after_the_cache(events).boxed())
}

/// The events of a re-list (`InitApply`) held back until it is complete (`InitDone`).
/// The cache takes a re-list's objects only then, all at once, so a controller woken by
/// each of them as it arrived would look them up in the cache as it was before the
/// re-list: a VM whose VMI became Running while the watch was being re-established read
/// its VMI as Scheduled, and nothing woke it again.
fn after_the_cache<K: Send + 'static>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
    events
        .scan(Vec::new(), |relisted, event| {
            let ready = match event {
                Ok(watcher::Event::InitApply(object)) => {
                    relisted.push(object);
                    Vec::new()
                }
                Ok(watcher::Event::Init) => {
                    // A re-list that did not complete is replaced by the new one.
                    relisted.clear();
                    vec![Ok(watcher::Event::Init)]
                }
                Ok(watcher::Event::InitDone) => relisted
                    .drain(..)
                    .map(|object| Ok(watcher::Event::InitApply(object)))
                    .chain([Ok(watcher::Event::InitDone)])
                    .collect(),
                other => vec![other],
            };
            futures::future::ready(Some(futures::stream::iter(ready)))
        })
        .flatten()
}

/// One cached object of kind `K`.
#[derive(Clone)]
pub struct Cached<K> {
    /// Name, namespace, uid, resourceVersion and ownerReferences: what kube-runtime reads
    /// to key the cache and to map an owned object to its owner. The rest is in `packed`.
    metadata: ObjectMeta,
    /// `{"metadata":…,"spec":…,"status":…}` without managedFields, LZ4 with its size first.
    packed: Box<[u8]>,
    kind: PhantomData<K>,
}

impl<K> fmt::Debug for Cached<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cached")
            .field("metadata", &self.metadata)
            .field("packed_bytes", &self.packed.len())
            .finish()
    }
}

/// An object as the API sends it, with its metadata decoded (without managedFields)
/// and spec and status left as JSON text.
#[derive(Deserialize, Serialize)]
struct Parts {
    #[serde(deserialize_with = "metadata_without_managed_fields")]
    metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Box<RawValue>>,
}

/// Marks packed text by what it was packed against.
const PLAIN: u8 = 0;
const WITH_DICTIONARY: u8 = 1;
/// Smaller objects make a poor dictionary; LZ4 looks back no further than 64 KiB.
const DICTIONARY_SIZES: std::ops::RangeInclusive<usize> = 256..=64 * 1024;

fn pack<K: Kind>(json: &[u8]) -> Box<[u8]> {
    let slot = K::dictionary();
    if slot.get().is_none() && DICTIONARY_SIZES.contains(&json.len()) {
        // Another thread may have set it first; either is as good.
        let _ = slot.set(json.into());
    }
    let (mark, block) = match slot.get() {
        Some(dictionary) => (
            WITH_DICTIONARY,
            lz4_flex::block::compress_prepend_size_with_dict(json, dictionary),
        ),
        None => (PLAIN, lz4_flex::compress_prepend_size(json)),
    };
    let mut packed = Vec::with_capacity(1 + block.len());
    packed.push(mark);
    packed.extend_from_slice(&block);
    packed.into_boxed_slice()
}

fn unpack<K: Kind>(packed: &[u8]) -> Result<Vec<u8>, UnpackError> {
    match packed.split_first() {
        Some((&PLAIN, block)) => Ok(lz4_flex::decompress_size_prepended(block)?),
        Some((&WITH_DICTIONARY, block)) => {
            let dictionary = K::dictionary().get().ok_or(UnpackError::NoDictionary)?;
            Ok(lz4_flex::block::decompress_size_prepended_with_dict(
                block, dictionary,
            )?)
        }
        _ => Err(UnpackError::Mark),
    }
}

impl<'de, K: Kind> Deserialize<'de> for Cached<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let parts = Parts::deserialize(deserializer)?;
        let json = serde_json::to_vec(&parts).map_err(serde::de::Error::custom)?;
        let full = parts.metadata;
        let metadata = ObjectMeta {
            name: full.name,
            namespace: full.namespace,
            uid: full.uid,
            resource_version: full.resource_version,
            owner_references: full.owner_references,
            ..ObjectMeta::default()
        };
        Ok(Cached {
            metadata,
            packed: pack::<K>(&json),
            kind: PhantomData,
        })
    }
}

/// Skips `managedFields` unread (for a VM they are as large as its spec), decoding the
/// other fields of `ObjectMeta` in the same pass.
fn metadata_without_managed_fields<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    kubevirt_api::lean::WithoutManagedFields::deserialize(deserializer).map(|meta| meta.0)
}

/// The top-level spec fields a sync needs to decide what to do; the rest (a VM's
/// template) is decoded only when acted on, through `Unpacked::spec_field`.
pub const DECISION_SPEC_FIELDS: &[&str] = &["running", "runStrategy"];

/// A cached object unpacked for one sync.
pub struct Unpacked {
    parts: Parts,
}

#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("a cached object is damaged: {0}")]
    Damaged(#[from] lz4_flex::block::DecompressError),
    #[error("a cached object is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("a cached object is packed against a dictionary this process does not have")]
    NoDictionary,
    #[error("a cached object has no packing mark")]
    Mark,
}

impl<K: Kind> Cached<K> {
    pub fn unpack(&self) -> Result<Unpacked, UnpackError> {
        let json = unpack::<K>(&self.packed)?;
        Ok(Unpacked {
            parts: serde_json::from_slice(&json)?,
        })
    }

    /// The object as the controllers' logic reads it: metadata, status and the named
    /// top-level spec fields (all of them when `None`). The controllers unpack once and
    /// read what they need (`Unpacked`); the tests read the whole object.
    #[cfg(test)]
    pub fn decode(&self, spec_fields: Option<&[&str]>) -> Result<DynamicObject, UnpackError> {
        self.unpack()?.object::<K>(spec_fields)
    }
}

impl Unpacked {
    /// The object as JSON: metadata, status and the named top-level spec fields (all of
    /// them when `None`).
    #[cfg(test)]
    pub fn object<K: Kind>(
        &self,
        spec_fields: Option<&[&str]>,
    ) -> Result<DynamicObject, UnpackError> {
        let mut data = Map::new();
        if let Some(raw) = &self.parts.spec {
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
        if let Some(raw) = &self.parts.status {
            data.insert("status".into(), serde_json::from_str(raw.get())?);
        }
        let resource = ApiResource {
            group: K::GROUP.into(),
            version: K::VERSION.into(),
            api_version: K::API_VERSION.into(),
            kind: K::KIND.into(),
            plural: K::PLURAL.into(),
        };
        let mut object = DynamicObject::new("", &resource).data(Value::Object(data));
        object.metadata = self.parts.metadata.clone();
        Ok(object)
    }

    /// One top-level field of the spec, decoded.
    pub fn spec_field<T: DeserializeOwned>(
        &self,
        field: &str,
    ) -> Result<Option<T>, serde_json::Error> {
        let Some(raw) = &self.parts.spec else {
            return Ok(None);
        };
        let fields: HashMap<&str, &RawValue> = serde_json::from_str(raw.get())?;
        fields
            .get(field)
            .map(|value| serde_json::from_str(value.get()))
            .transpose()
    }

    /// The VM as the controller decides by: metadata, status and the named top-level
    /// spec fields (the rest, its template above all, through `spec_field`).
    pub fn vm(&self, spec_fields: &[&str]) -> Result<VirtualMachine, UnpackError> {
        let mut spec = Map::new();
        if let Some(raw) = &self.parts.spec {
            let all: HashMap<&str, &RawValue> = serde_json::from_str(raw.get())?;
            for field in spec_fields {
                if let Some(value) = all.get(field) {
                    spec.insert((*field).into(), serde_json::from_str(value.get())?);
                }
            }
        }
        Ok(VirtualMachine {
            metadata: self.parts.metadata.clone(),
            spec: serde_json::from_value(Value::Object(spec))?,
            status: match &self.parts.status {
                Some(raw) => serde_json::from_str(raw.get())?,
                None => Default::default(),
            },
        })
    }
}

impl<K: Kind> kube::Resource for Cached<K> {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::KIND.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        K::GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        K::VERSION.into()
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        K::API_VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        K::PLURAL.into()
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
    use kube::Resource;
    use serde_json::json;

    /// Each object of a re-list reaches the controller only once the cache holds it.
    #[tokio::test]
    async fn a_relisted_object_is_in_the_cache_when_its_event_arrives() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let map = |name: &str, value: &str| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: Some([("v".to_string(), value.to_string())].into()),
            ..ConfigMap::default()
        };
        let writer = reflector::store::Writer::<ConfigMap>::default();
        let reader = writer.as_reader();
        let events = futures::stream::iter(
            [
                watcher::Event::Init,
                watcher::Event::InitApply(map("a", "1")),
                watcher::Event::InitDone,
                // A re-list: `a` changed meanwhile and `b` is new.
                watcher::Event::Init,
                watcher::Event::InitApply(map("a", "2")),
                watcher::Event::InitApply(map("b", "1")),
                watcher::Event::InitDone,
                watcher::Event::Apply(map("b", "2")),
            ]
            .map(Ok),
        );
        let mut events = std::pin::pin!(after_the_cache(reflector(writer, events)));
        let mut seen = Vec::new();
        while let Some(event) = events.next().await {
            let object = match event.expect("no error") {
                watcher::Event::InitApply(o) | watcher::Event::Apply(o) => o,
                _ => continue,
            };
            let cached = reader
                .get(&reflector::ObjectRef::from_obj(&object))
                .expect("in the cache");
            assert_eq!(cached.data, object.data, "{:?}", object.metadata.name);
            seen.push(object.metadata.name.unwrap_or_default());
        }
        assert_eq!(seen, ["a", "a", "b", "b"]);
    }

    #[test]
    fn decodes_to_the_object_without_managed_fields() {
        let vm = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7", "uid": "u-1",
                         "labels": {"app": "web"}, "finalizers": ["f"],
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pool", "name": "p", "uid": "u-0"}],
                         "managedFields": [{"manager": "kubectl", "operation": "Update",
                                            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}},
            "status": {"printableStatus": "Stopped"}
        });
        let cached: Cached<VirtualMachine> = serde_json::from_value(vm.clone()).unwrap();
        // What kube-runtime keys and routes by stays decoded; the rest is packed.
        let meta = cached.meta();
        assert_eq!(meta.name.as_deref(), Some("a"));
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        assert_eq!(meta.uid.as_deref(), Some("u-1"));
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        assert_eq!(meta.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!((&meta.labels, &meta.finalizers), (&None, &None));

        let decoded = cached.decode(None).unwrap();
        assert_eq!(decoded.metadata.managed_fields, None);
        assert_eq!(decoded.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(decoded.metadata.labels.unwrap()["app"], "web");
        assert_eq!(decoded.metadata.finalizers, Some(vec!["f".to_string()]));
        assert_eq!(decoded.data["spec"], vm["spec"]);
        assert_eq!(decoded.data["status"], vm["status"]);
        assert_eq!(decoded.types.unwrap().kind, "VirtualMachine");

        let unpacked = cached.unpack().unwrap();
        let partial = unpacked
            .object::<VirtualMachine>(Some(DECISION_SPEC_FIELDS))
            .unwrap();
        assert_eq!(partial.data["spec"], json!({"runStrategy": "Halted"}));
        assert_eq!(partial.data["status"], vm["status"]);
        assert_eq!(
            unpacked.spec_field::<Value>("template").unwrap(),
            Some(vm["spec"]["template"].clone())
        );
        assert_eq!(unpacked.spec_field::<Value>("running").unwrap(), None);
        let typed = unpacked.vm(DECISION_SPEC_FIELDS).unwrap();
        assert_eq!(typed.spec.run_strategy.as_deref(), Some("Halted"));
        assert!(
            typed.spec.template.is_none(),
            "the template is read when acted on"
        );
        assert_eq!(typed.status.printable_status.as_deref(), Some("Stopped"));
        assert_eq!(typed.metadata.labels.unwrap()["app"], "web");

        let bare: Cached<VirtualMachine> =
            serde_json::from_value(json!({"metadata": {"name": "b"}})).unwrap();
        let decoded = bare.decode(None).unwrap();
        assert_eq!(decoded.data, json!({}));
        assert_eq!(
            bare.unpack()
                .unwrap()
                .spec_field::<Value>("template")
                .unwrap(),
            None
        );
    }

    /// A kind of its own, so that no other test has set its dictionary.
    #[derive(Clone, Debug)]
    struct Packing;

    impl Kind for Packing {
        const GROUP: &'static str = "test.virtplane.io";
        const VERSION: &'static str = "v1";
        const API_VERSION: &'static str = "test.virtplane.io/v1";
        const KIND: &'static str = "Packing";
        const PLURAL: &'static str = "packings";

        fn dictionary() -> &'static OnceLock<Box<[u8]>> {
            static DICTIONARY: OnceLock<Box<[u8]>> = OnceLock::new();
            &DICTIONARY
        }
    }

    fn large(name: &str) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web", "tier": "backend"}},
            "spec": {"runStrategy": "Always", "template": {"spec": {
                "domain": {"cpu": {"cores": 2}, "memory": {"guest": "2Gi"},
                           "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
                "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}}]}}},
            "status": {"printableStatus": "Stopped", "ready": false}
        })
    }

    #[test]
    fn objects_of_a_kind_are_packed_against_the_first_large_one() {
        let small: Cached<Packing> =
            serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
        assert_eq!(small.packed[0], PLAIN);
        assert!(Packing::dictionary().get().is_none());

        let first: Cached<Packing> = serde_json::from_value(large("first")).unwrap();
        let second: Cached<Packing> = serde_json::from_value(large("second")).unwrap();
        assert!(Packing::dictionary().get().is_some());
        assert_eq!(second.packed[0], WITH_DICTIONARY);
        let whole = serde_json::to_vec(&large("second")).unwrap().len();
        assert!(
            second.packed.len() * 4 < whole,
            "{} of {whole} bytes",
            second.packed.len()
        );
        for (cached, name) in [(&first, "first"), (&second, "second")] {
            let decoded = cached.decode(None).unwrap();
            assert_eq!(decoded.metadata.name.as_deref(), Some(name));
            assert_eq!(decoded.data["spec"], large(name)["spec"]);
        }
        assert_eq!(
            small.decode(None).unwrap().metadata.name.as_deref(),
            Some("s")
        );
        assert!(matches!(
            unpack::<Packing>(&[9, 1, 2]),
            Err(UnpackError::Mark)
        ));
    }
}
