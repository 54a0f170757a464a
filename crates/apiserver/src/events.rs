//! Events: core `v1` Events and `events.k8s.io/v1` Events, two views of the same objects
//! as in kube-apiserver. They are stored once, in the core form; the `events.k8s.io`
//! view is converted at the store's edge (`EventsView`), so every verb, watch and
//! resourceVersion of one view is the other's. Stored with a time to live
//! (`--event-ttl`), after which the store itself deletes them.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::field::FieldError;
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Map, Value};
use store::{KeyValue, ListOptions, ListResult, Result, Revision, Store, StoreError, WatchStream};

use crate::registry::{Admission, Registry, ResourceHooks};

pub const GROUP: &str = "events.k8s.io";

/// kube-apiserver's `--event-ttl` default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

const fn column(
    name: &'static str,
    column_type: &'static str,
    json_path: &'static str,
    description: &'static str,
    priority: i32,
) -> PrinterColumn {
    PrinterColumn {
        name,
        column_type,
        json_path,
        description,
        priority,
    }
}

pub static EVENT: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Event",
    list_kind: "EventList",
    plural: "events",
    singular: "event",
    short_names: &["ev"],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    // kube-apiserver's event printer: no leading Name column (see `printing`).
    printer_columns: &[
        column("Last Seen", "string", ".lastTimestamp", "Time when this Event was last seen", 0),
        column("Type", "string", ".type", "Type of this event (Normal, Warning), new types could be added in the future.", 0),
        column("Reason", "string", ".reason", "A short, machine understandable string that gives the reason for this event being generated.", 0),
        column("Object", "string", ".involvedObject", "The object that this event is about. Mapped to events.Event.regarding", 0),
        column("Subobject", "string", ".involvedObject.fieldPath", "The subobject that this event is about", 1),
        column("Source", "string", ".source", "The component reporting this event. Short machine understandable string.", 1),
        column("Message", "string", ".message", "A human-readable description of the status of this operation.", 0),
        column("First Seen", "string", ".firstTimestamp", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", 1),
        column("Count", "string", ".count", "The number of times this event has occurred.", 1),
        column("Name", "string", ".metadata.name", "Name must be unique within a namespace.", 1),
    ],
    schema_name: "io.k8s.api.core.v1.Event",
};

pub static EVENT_V1: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "Event",
    list_kind: "EventList",
    plural: "events",
    singular: "event",
    short_names: &["ev"],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: EVENT.printer_columns,
    schema_name: "io.k8s.api.events.v1.Event",
};

/// Whether the table of `info` starts with the Name column (every kind but Events).
pub fn leading_name(info: &ResourceInfo) -> bool {
    !(info.kind == "Event" && (info.group.is_empty() || info.group == GROUP))
}

/// Cells kube's event printer computes: ages of the newest and first sighting, the object
/// as `kind/name`, the source as `component, host`, the count.
pub fn computed_cell(column: &str, obj: &Value, read: Value) -> Value {
    let now = chrono::Utc::now();
    let age = |timestamp: Option<&Value>| match timestamp {
        Some(Value::String(t)) => apimachinery::table::cell("date", &[json!(t)], now),
        _ => json!("<unknown>"),
    };
    let series = obj.get("series").filter(|s| s.is_object());
    let first_seen = obj
        .get("firstTimestamp")
        .filter(|t| t.is_string())
        .or_else(|| obj.get("eventTime").filter(|t| t.is_string()));
    match column {
        "Last Seen" => age(series
            .and_then(|s| s.get("lastObservedTime"))
            .or_else(|| obj.get("lastTimestamp").filter(|t| t.is_string()))
            .or(first_seen)),
        "First Seen" => age(first_seen),
        "Object" => {
            let object = &obj["involvedObject"];
            let kind = object["kind"].as_str().unwrap_or("").to_lowercase();
            json!(format!("{kind}/{}", object["name"].as_str().unwrap_or("")))
        }
        "Source" => {
            let source = &obj["source"];
            let component = source["component"]
                .as_str()
                .or_else(|| obj["reportingComponent"].as_str())
                .unwrap_or("");
            match source["host"].as_str() {
                Some(host) if !host.is_empty() => json!(format!("{component}, {host}")),
                _ => json!(component),
            }
        }
        "Count" => {
            let count = series
                .and_then(|s| s["count"].as_i64())
                .or_else(|| obj["count"].as_i64())
                .unwrap_or(1);
            json!(count.to_string())
        }
        "Subobject" | "Type" | "Reason" | "Message" if read.is_null() => json!(""),
        _ => read,
    }
}

/// Field names of `events.k8s.io/v1` and what core `v1` calls them.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedCount", "count"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedSource", "source"),
    ("reportingController", "reportingComponent"),
];

fn rename(obj: &mut Map<String, Value>, from_v1: bool, api_version: &str) {
    for (v1, core) in RENAMED {
        let (from, to) = if from_v1 { (v1, core) } else { (core, v1) };
        if let Some(value) = obj.remove(from) {
            obj.insert(to.to_string(), value);
        }
    }
    if obj.contains_key("apiVersion") {
        obj.insert("apiVersion".into(), json!(api_version));
    }
}

/// An `events.k8s.io/v1` Event in its core `v1` form.
pub fn v1_to_core(mut obj: Value) -> Value {
    if let Value::Object(map) = &mut obj {
        rename(map, true, "v1");
    }
    obj
}

/// A core `v1` Event in its `events.k8s.io/v1` form.
pub fn core_to_v1(mut obj: Value) -> Value {
    if let Value::Object(map) = &mut obj {
        rename(map, false, "events.k8s.io/v1");
    }
    obj
}

pub fn schemas() -> Value {
    let time = json!({"type": "string", "format": "date-time"});
    let reference = json!({"$ref": "#/components/schemas/io.k8s.api.core.v1.ObjectReference"});
    let series = json!({"type": "object", "properties": {
        "count": {"type": "integer", "format": "int32"}, "lastObservedTime": time}});
    let source = json!({"type": "object", "properties": {
        "component": {"type": "string"}, "host": {"type": "string"}}});
    let meta =
        json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"});
    let list = |item: &str, group: &str| {
        json!({"type": "object", "required": ["items"], "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
            "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/{item}")}}},
            "x-kubernetes-group-version-kind": [{"group": group, "kind": "EventList", "version": "v1"}]})
    };
    json!({
        "io.k8s.api.core.v1.ObjectReference": {
            "type": "object",
            "description": "ObjectReference contains enough information to let you inspect or modify the referred object.",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "apiVersion": {"type": "string"}, "fieldPath": {"type": "string"},
                "kind": {"type": "string"}, "name": {"type": "string"},
                "namespace": {"type": "string"}, "resourceVersion": {"type": "string"},
                "uid": {"type": "string"}
            }
        },
        "io.k8s.api.core.v1.Event": {
            "type": "object",
            "description": "Event is a report of an event somewhere in the cluster.  Events have a limited retention time and triggers and messages may evolve with time.  Event consumers should not rely on the timing of an event with a given Reason reflecting a consistent underlying trigger, or the continued existence of events with that Reason.  Events should be treated as informative, best-effort, supplemental data.",
            "required": ["metadata", "involvedObject"],
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Event", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": meta,
                "action": {"type": "string"}, "count": {"type": "integer", "format": "int32"},
                "eventTime": time, "firstTimestamp": time, "involvedObject": reference,
                "lastTimestamp": time, "message": {"type": "string"}, "reason": {"type": "string"},
                "related": reference, "reportingComponent": {"type": "string"},
                "reportingInstance": {"type": "string"}, "series": series, "source": source,
                "type": {"type": "string"}
            }
        },
        "io.k8s.api.core.v1.EventList": list("io.k8s.api.core.v1.Event", ""),
        "io.k8s.api.events.v1.Event": {
            "type": "object",
            "description": "Event is a report of an event somewhere in the cluster. It generally denotes some state change in the system. Events have a limited retention time and triggers and messages may evolve with time.  Event consumers should not rely on the timing of an event with a given Reason reflecting a consistent underlying trigger, or the continued existence of events with that Reason.  Events should be treated as informative, best-effort, supplemental data.",
            "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": "Event", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": meta,
                "action": {"type": "string"}, "deprecatedCount": {"type": "integer", "format": "int32"},
                "deprecatedFirstTimestamp": time, "deprecatedLastTimestamp": time,
                "deprecatedSource": source, "eventTime": time, "note": {"type": "string"},
                "reason": {"type": "string"}, "regarding": reference, "related": reference,
                "reportingController": {"type": "string"}, "reportingInstance": {"type": "string"},
                "series": series, "type": {"type": "string"}
            }
        },
        "io.k8s.api.events.v1.EventList": list("io.k8s.api.events.v1.Event", GROUP),
    })
}

/// How Events are admitted and kept, in either view.
pub struct EventHooks {
    /// `--event-ttl`.
    pub ttl: Duration,
    /// Which view: field paths and rules follow it.
    pub view: &'static ResourceInfo,
}

impl EventHooks {
    fn v1(&self) -> bool {
        self.view.group == GROUP
    }

    /// kube's `ValidateEventCreate`: the strict rules of `events.k8s.io/v1` (and of core
    /// Events that carry an `eventTime`, as the new recorders write), the legacy ones
    /// otherwise.
    fn errors(&self, obj: &Value) -> Vec<FieldError> {
        let v1 = self.v1();
        let core = if v1 {
            v1_to_core(obj.clone())
        } else {
            obj.clone()
        };
        let field = |core_name: &str| -> String {
            if !v1 {
                return core_name.to_string();
            }
            let top = core_name.split('.').next().unwrap_or(core_name);
            let renamed = RENAMED
                .iter()
                .find(|(_, c)| *c == top)
                .map_or(top, |(v, _)| *v);
            format!("{renamed}{}", &core_name[top.len()..])
        };
        let mut errors = Vec::new();
        let namespace = crate::object::namespace(&core);
        let involved = &core["involvedObject"];
        if let Some(theirs) = involved["namespace"].as_str() {
            if !theirs.is_empty() && theirs != namespace {
                errors.push(FieldError::invalid(
                    field("involvedObject.namespace"),
                    json!(theirs),
                    "does not match event.namespace",
                ));
            }
        }
        let strict = v1 || core["eventTime"].is_string();
        if let Some(kind) = core["type"].as_str() {
            if kind != "Normal" && kind != "Warning" {
                errors.push(FieldError::invalid(
                    "type",
                    json!(kind),
                    "has invalid value: ".to_string() + kind,
                ));
            }
        } else if strict {
            errors.push(FieldError::required("type", ""));
        }
        if strict {
            if !core["eventTime"].is_string() {
                errors.push(FieldError::required("eventTime", ""));
            }
            for (name, what) in [
                ("reportingComponent", "reportingController"),
                ("reportingInstance", "reportingInstance"),
                ("action", "action"),
                ("reason", "reason"),
            ] {
                let value = core[name].as_str().unwrap_or("");
                if value.is_empty() {
                    errors.push(FieldError::required(field(name), ""));
                } else if value.len() > 128 {
                    errors.push(FieldError::invalid(
                        field(name),
                        json!(value),
                        format!("can have at most 128 characters ({what})"),
                    ));
                }
            }
        }
        if let Some(message) = core["message"].as_str() {
            if strict && message.len() > 1024 {
                errors.push(FieldError::invalid(
                    field("message"),
                    json!(""),
                    "can have at most 1024 characters",
                ));
            }
        }
        errors
    }
}

impl ResourceHooks for EventHooks {
    fn allows_unconditional_update(&self) -> bool {
        true
    }

    fn validate_create(&self, obj: &Value) -> Admission {
        Admission {
            errors: self.errors(obj),
            warnings: Vec::new(),
        }
    }

    fn validate_update(&self, _old: &Value, new: &Value, _privileged: bool) -> Admission {
        Admission {
            errors: self.errors(new),
            warnings: Vec::new(),
        }
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.ttl)
    }
}

/// The store as the registry sees it: `events.k8s.io` Events read and written as the
/// core Events they are.
pub struct EventsView {
    inner: Arc<dyn Store>,
    /// `/registry/events.k8s.io/events/`
    view: String,
    /// `/registry/core/events/`
    core: String,
}

impl EventsView {
    pub fn wrap(inner: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(EventsView {
            inner,
            view: Registry::resource_prefix(&EVENT_V1),
            core: Registry::resource_prefix(&EVENT),
        })
    }

    /// The core key of a view key; `None` for any other key.
    fn core_key(&self, key: &str) -> Option<String> {
        key.strip_prefix(&self.view)
            .map(|rest| format!("{}{rest}", self.core))
    }

    fn view_kv(&self, mut kv: KeyValue) -> Result<KeyValue> {
        let rest = kv.key.strip_prefix(&self.core).unwrap_or(&kv.key);
        kv.key = format!("{}{rest}", self.view);
        kv.value = convert(&kv.value, core_to_v1)?;
        Ok(kv)
    }

    /// The view's answer to a write of `value` at `key`, from the store's to its core form.
    fn as_view(&self, key: &str, value: Bytes, written: Result<KeyValue>) -> Result<KeyValue> {
        let kv = written.map_err(|e| self.view_error(e))?;
        Ok(KeyValue {
            key: key.into(),
            value,
            ..kv
        })
    }

    fn view_error(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Conflict {
                current: Some(current),
            } => match self.view_kv(current) {
                Ok(current) => StoreError::Conflict {
                    current: Some(current),
                },
                Err(e) => e,
            },
            other => other,
        }
    }
}

fn convert(value: &Bytes, how: fn(Value) -> Value) -> Result<Bytes> {
    let obj: Value = serde_json::from_slice(value)
        .map_err(|e| StoreError::Backend(format!("a stored Event is corrupt: {e}")))?;
    serde_json::to_vec(&how(obj))
        .map(Bytes::from)
        .map_err(|e| StoreError::Backend(format!("encoding an Event: {e}")))
}

#[async_trait]
impl Store for EventsView {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        match self.core_key(key) {
            Some(core) => self
                .inner
                .get(&core)
                .await?
                .map(|kv| self.view_kv(kv))
                .transpose(),
            None => self.inner.get(key).await,
        }
    }

    async fn list(&self, prefix: &str, mut options: ListOptions) -> Result<ListResult> {
        let Some(core) = self.core_key(prefix) else {
            return self.inner.list(prefix, options).await;
        };
        options.start_after = options
            .start_after
            .map(|after| self.core_key(&after).unwrap_or(after));
        let listed = self.inner.list(&core, options).await?;
        Ok(ListResult {
            items: listed
                .items
                .into_iter()
                .map(|kv| self.view_kv(kv))
                .collect::<Result<_>>()?,
            ..listed
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        match self.core_key(key) {
            Some(core) => {
                let stored = convert(&value, v1_to_core)?;
                let written = self.inner.create(&core, stored).await;
                self.as_view(key, value, written)
            }
            None => self.inner.create(key, value).await,
        }
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        match self.core_key(key) {
            Some(core) => {
                let stored = convert(&value, v1_to_core)?;
                let written = self.inner.update(&core, stored, expected).await;
                self.as_view(key, value, written)
            }
            None => self.inner.update(key, value, expected).await,
        }
    }

    async fn create_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<KeyValue> {
        match self.core_key(key) {
            Some(core) => {
                let stored = convert(&value, v1_to_core)?;
                let written = self.inner.create_expiring(&core, stored, ttl).await;
                self.as_view(key, value, written)
            }
            None => self.inner.create_expiring(key, value, ttl).await,
        }
    }

    async fn update_expiring(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
        ttl: Duration,
    ) -> Result<KeyValue> {
        match self.core_key(key) {
            Some(core) => {
                let stored = convert(&value, v1_to_core)?;
                let written = self
                    .inner
                    .update_expiring(&core, stored, expected, ttl)
                    .await;
                self.as_view(key, value, written)
            }
            None => self.inner.update_expiring(key, value, expected, ttl).await,
        }
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        match self.core_key(key) {
            Some(core) => {
                let deleted = self
                    .inner
                    .delete(&core, expected)
                    .await
                    .map_err(|e| self.view_error(e))?;
                self.view_kv(deleted)
            }
            None => self.inner.delete(key, expected).await,
        }
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let Some(core) = self.core_key(prefix) else {
            return self.inner.watch(prefix, after).await;
        };
        let view = EventsView {
            inner: self.inner.clone(),
            view: self.view.clone(),
            core: self.core.clone(),
        };
        let stream = self.inner.watch(&core, after).await?;
        Ok(Box::pin(stream.map(move |event| {
            let event = event?;
            Ok(store::Event {
                kind: event.kind,
                kv: view.view_kv(event.kv)?,
                prev: event.prev.map(|prev| view.view_kv(prev)).transpose()?,
            })
        })))
    }

    fn current_revision(&self) -> Revision {
        self.inner.current_revision()
    }

    fn compacted_revision(&self) -> Revision {
        self.inner.compacted_revision()
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    fn recent(&self, key: &str) -> Option<KeyValue> {
        match self.core_key(key) {
            Some(core) => self
                .inner
                .recent(&core)
                .and_then(|kv| self.view_kv(kv).ok()),
            None => self.inner.recent(key),
        }
    }

    fn write_gauge(&self) -> Option<store::WriteGauge> {
        self.inner.write_gauge()
    }

    fn health(&self) -> std::result::Result<(), String> {
        self.inner.health()
    }
}
