//! `metadata.managedFields`: decoding, identity of managers, capping and ordering.

use serde_json::{Map, Value};

use super::fieldset::FieldSet;

/// Upstream keeps at most this many `Update` entries; older ones are merged.
const MAX_UPDATE_MANAGERS: usize = 10;
const ANCIENT_MANAGER: &str = "ancient-changes";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// What makes two entries the same manager. Appliers are one manager whatever apiVersion
/// they use; updaters are per apiVersion (upstream `BuildManagerIdentifier`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ManagerId {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub subresource: String,
}

impl ManagerId {
    pub fn new(
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: &str,
    ) -> ManagerId {
        let api_version = if operation == Operation::Apply {
            ""
        } else {
            api_version
        };
        ManagerId {
            manager: manager.to_string(),
            operation,
            api_version: api_version.to_string(),
            subresource: subresource.to_string(),
        }
    }

    /// The identifier JSON upstream sorts conflicting managers by.
    pub fn identifier(&self) -> String {
        let mut fields = Vec::new();
        let quote = |s: &str| Value::String(s.to_string()).to_string();
        if !self.manager.is_empty() {
            fields.push(format!("\"manager\":{}", quote(&self.manager)));
        }
        fields.push(format!("\"operation\":{}", quote(self.operation.as_str())));
        if !self.api_version.is_empty() {
            fields.push(format!("\"apiVersion\":{}", quote(&self.api_version)));
        }
        if !self.subresource.is_empty() {
            fields.push(format!("\"subresource\":{}", quote(&self.subresource)));
        }
        format!("{{{}}}", fields.join(","))
    }

    /// How a conflict names the manager: `"kubectl"`, `"x" with subresource "status"`,
    /// `"kubectl-edit" using kubevirt.io/v1`.
    pub fn describe(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub id: ManagerId,
    pub api_version: String,
    pub time: Option<String>,
    pub set: FieldSet,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Managed {
    pub entries: Vec<Entry>,
}

impl Managed {
    /// Decodes a `managedFields` list with upstream's rules; a later entry of the same
    /// manager replaces an earlier one.
    pub fn decode(v: &Value) -> Result<Managed, String> {
        let list = v.as_array().ok_or("managedFields must be a list")?;
        let mut managed = Managed::default();
        for (i, item) in list.iter().enumerate() {
            let entry = decode_entry(i, item)?;
            managed.entries.retain(|e| e.id != entry.id);
            managed.entries.push(entry);
        }
        Ok(managed)
    }

    pub fn get(&self, id: &ManagerId) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == *id)
    }

    pub fn get_mut(&mut self, id: &ManagerId) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.id == *id)
    }

    /// Entries that own nothing are dropped, as upstream never records them.
    pub fn drop_empty(&mut self) {
        self.entries.retain(|e| !e.set.is_empty());
    }

    /// Folds the oldest `Update` entries into one `ancient-changes` entry per apiVersion so
    /// that at most ten remain (upstream `capManagers`).
    pub fn cap_updates(&mut self) {
        let update_count = self
            .entries
            .iter()
            .filter(|e| e.id.operation == Operation::Update)
            .count();
        if update_count <= MAX_UPDATE_MANAGERS {
            return;
        }
        let mut updaters: Vec<(i64, String, ManagerId)> = self
            .entries
            .iter()
            .filter(|e| e.id.operation == Operation::Update)
            .map(|e| (seconds(e.time.as_deref()), e.id.identifier(), e.id.clone()))
            .collect();
        updaters.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut remaining = updaters.len();
        let mut first_of_version: Vec<(String, ManagerId)> = Vec::new();
        for (_, _, id) in updaters {
            if remaining <= MAX_UPDATE_MANAGERS {
                break;
            }
            let Some(pos) = self.entries.iter().position(|e| e.id == id) else {
                continue;
            };
            let version = self.entries[pos].api_version.clone();
            let Some((_, first)) = first_of_version
                .iter()
                .find(|(v, _)| *v == version)
                .cloned()
            else {
                first_of_version.push((version, id));
                continue;
            };
            let merged = self.entries.remove(pos);
            let bucket_id = ManagerId::new(ANCIENT_MANAGER, Operation::Update, &version, "");
            if self.get(&bucket_id).is_none() {
                if let Some(first) = self.get_mut(&first) {
                    first.id = bucket_id.clone();
                }
            }
            if let Some(bucket) = self.get_mut(&bucket_id) {
                bucket.set = merged.set.union(&bucket.set);
                bucket.time = merged.time;
            }
            remaining -= 1;
        }
    }

    /// The wire form, ordered like upstream: appliers first, then by time, manager,
    /// apiVersion and subresource.
    pub fn encode(mut self) -> Vec<Value> {
        self.entries
            .sort_by(|a, b| OrderKey::of_entry(a).cmp(&OrderKey::of_entry(b)));
        self.entries.into_iter().map(encode_entry).collect()
    }

    /// As [`Managed::encode`], taking entry `i` from `stored[i]` (the list these entries
    /// were decoded from, without repeated managers) unless `rewritten[i]` says it changed.
    /// Entries past the stored ones are new and encoded.
    pub fn encode_reusing(self, mut stored: Vec<Value>, rewritten: &[bool]) -> Vec<Value> {
        let mut list: Vec<Value> = self
            .entries
            .into_iter()
            .enumerate()
            .map(|(i, entry)| match stored.get_mut(i) {
                Some(json) if rewritten.get(i) == Some(&false) => std::mem::take(json),
                _ => encode_entry(entry),
            })
            .collect();
        sort_encoded(&mut list);
        list
    }
}

fn sort_encoded(list: &mut [Value]) {
    list.sort_by(|a, b| OrderKey::of_encoded(a).cmp(&OrderKey::of_encoded(b)));
}

/// Where an entry goes in the wire form (see [`Managed::encode`]).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct OrderKey<'a> {
    operation: Operation,
    seconds: i64,
    manager: &'a str,
    api_version: &'a str,
    subresource: &'a str,
}

impl<'a> OrderKey<'a> {
    fn of_entry(e: &'a Entry) -> OrderKey<'a> {
        OrderKey {
            operation: e.id.operation,
            seconds: seconds(e.time.as_deref()),
            manager: &e.id.manager,
            api_version: &e.api_version,
            subresource: &e.id.subresource,
        }
    }

    /// The key of an entry in its wire form, as [`Managed::encode`] wrote it.
    fn of_encoded(entry: &'a Value) -> OrderKey<'a> {
        let text = |field: &str| entry.get(field).and_then(Value::as_str).unwrap_or("");
        OrderKey {
            operation: match text("operation") {
                "Apply" => Operation::Apply,
                _ => Operation::Update,
            },
            seconds: seconds(entry.get("time").and_then(Value::as_str)),
            manager: text("manager"),
            api_version: text("apiVersion"),
            subresource: text("subresource"),
        }
    }
}

/// Sets the time of entry `index` of an encoded list and puts the list in encoding order
/// again: what decoding the list, changing that entry's time and encoding it would give,
/// without building any field set.
pub(crate) fn touch_encoded(list: &mut [Value], index: usize, time: &str) {
    if let Some(entry) = list.get_mut(index).and_then(Value::as_object_mut) {
        entry.insert("time".into(), Value::String(time.to_string()));
    }
    sort_encoded(list);
}

fn seconds(time: Option<&str>) -> i64 {
    time.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(0, |t| t.timestamp())
}

fn decode_entry(i: usize, v: &Value) -> Result<Entry, String> {
    let m = v
        .as_object()
        .ok_or_else(|| format!("managed fields entry {i} must be an object"))?;
    let text = |key: &str| -> Result<String, String> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!(
                "{key} of managed fields entry {i} must be a string"
            )),
        }
    };
    let operation = match text("operation")?.as_str() {
        "Apply" => Operation::Apply,
        "Update" => Operation::Update,
        _ => return Err("operation must be `Apply` or `Update`".into()),
    };
    let api_version = text("apiVersion")?;
    if api_version.is_empty() {
        return Err("apiVersion must not be empty".into());
    }
    match text("fieldsType")?.as_str() {
        "FieldsV1" => {}
        "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
        other => {
            return Err(format!(
                "invalid fieldsType {other:?} in managed fields entry {i}"
            ))
        }
    }
    let set = match m.get("fieldsV1") {
        None | Some(Value::Null) => FieldSet::new(),
        Some(f) => FieldSet::from_fields_v1(f).map_err(|e| format!("error decoding set: {e}"))?,
    };
    let time = Some(text("time")?).filter(|t| !t.is_empty());
    Ok(Entry {
        id: ManagerId::new(
            &text("manager")?,
            operation,
            &api_version,
            &text("subresource")?,
        ),
        api_version,
        time,
        set,
    })
}

fn encode_entry(e: Entry) -> Value {
    let mut m = Map::new();
    if !e.id.manager.is_empty() {
        m.insert("manager".into(), Value::String(e.id.manager));
    }
    m.insert(
        "operation".into(),
        Value::String(e.id.operation.as_str().into()),
    );
    m.insert("apiVersion".into(), Value::String(e.api_version));
    if let Some(t) = e.time {
        m.insert("time".into(), Value::String(t));
    }
    m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
    m.insert("fieldsV1".into(), e.set.to_fields_v1());
    if !e.id.subresource.is_empty() {
        m.insert("subresource".into(), Value::String(e.id.subresource));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(manager: &str, time: &str) -> Value {
        json!({"manager": manager, "operation": "Update", "apiVersion": "kubevirt.io/v1", "time": time,
               "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {format!("f:{manager}"): {}}}}})
    }

    #[test]
    fn caps_update_managers_into_ancient_changes() {
        let list: Vec<Value> = (0..12)
            .map(|i| entry(&format!("m{i:02}"), &format!("2025-01-01T00:00:{i:02}Z")))
            .collect();
        let mut managed = Managed::decode(&Value::Array(list)).unwrap();
        managed.cap_updates();
        let out = managed.encode();
        assert_eq!(out.len(), 10);
        assert_eq!(out[0]["manager"], json!("ancient-changes"));
        assert_eq!(out[0]["time"], json!("2025-01-01T00:00:02Z"));
        assert_eq!(
            out[0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:m00": {}, "f:m01": {}, "f:m02": {}}}})
        );
        assert_eq!(out[9]["manager"], json!("m11"));
    }

    #[test]
    fn identity_and_description() {
        let apply = ManagerId::new("kubectl", Operation::Apply, "kubevirt.io/v1", "");
        assert_eq!(
            apply.identifier(),
            r#"{"manager":"kubectl","operation":"Apply"}"#
        );
        assert_eq!(apply.describe(), r#""kubectl""#);
        let status = ManagerId::new(
            "virt-controller",
            Operation::Update,
            "kubevirt.io/v1",
            "status",
        );
        assert_eq!(
            status.describe(),
            r#""virt-controller" with subresource "status" using kubevirt.io/v1"#
        );
        assert!(Managed::decode(&json!([{}])).is_err());
        assert!(Managed::decode(&json!([{"operation": "Update", "apiVersion": "v1"}])).is_err());
    }
}
