//! Server-side apply and `managedFields`, following the behaviour of
//! kubernetes-sigs/structured-merge-diff and apimachinery's fieldmanager (our own
//! implementation).
//!
//! Every write records who owns which fields. `apply` merges an applied configuration by
//! the schema, refuses to change fields another manager owns (409) unless forced, and
//! removes what the applier stopped applying; [`record_update`] gives the fields a
//! non-apply write changed to its manager.

mod fieldset;
mod managed;
mod walk;

use std::fmt;

use serde_json::{json, Value};

use fieldset::server_fields;
pub use fieldset::{canonical_json, path_string, FieldSet, PathElement};
use managed::{Entry, Managed, ManagerId, Operation};

use crate::schema::{too_deep, Schema, MAX_DEPTH};
use crate::status::{Status, StatusCause, StatusDetails};

/// The annotation client-side `kubectl apply` keeps its configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Only this manager upgrades client-side-apply ownership and keeps the annotation in sync
/// (upstream hard-codes it too).
const KUBECTL_MANAGER: &str = "kubectl";

#[derive(Clone, Debug)]
struct Conflict {
    manager: ManagerId,
    path: Vec<PathElement>,
}

/// Fields an apply would change that other managers own.
#[derive(Clone, Debug)]
pub struct ApplyConflicts {
    conflicts: Vec<Conflict>,
}

impl ApplyConflicts {
    /// Grouped by manager in identifier order, each manager's paths in set order, which is
    /// how upstream prints them.
    fn new(mut by_manager: Vec<(ManagerId, FieldSet)>) -> ApplyConflicts {
        by_manager.sort_by_key(|(id, _)| id.identifier());
        let conflicts = by_manager
            .into_iter()
            .flat_map(|(manager, set)| {
                set.paths().into_iter().map(move |path| Conflict {
                    manager: manager.clone(),
                    path,
                })
            })
            .collect();
        ApplyConflicts { conflicts }
    }

    fn without(self, allowed: &FieldSet) -> ApplyConflicts {
        ApplyConflicts {
            conflicts: self
                .conflicts
                .into_iter()
                .filter(|c| !allowed.contains(&c.path))
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.conflicts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conflicts.is_empty()
    }

    /// The conflicting paths (`.spec.runStrategy`), for logs and tests.
    pub fn paths(&self) -> Vec<String> {
        self.conflicts
            .iter()
            .map(|c| path_string(&c.path))
            .collect()
    }

    /// `Apply failed with 1 conflict: conflict with "m" using v1: .spec.x`, or the grouped
    /// form for several.
    pub fn message(&self) -> String {
        if let [only] = self.conflicts.as_slice() {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                only.manager.describe(),
                path_string(&only.path)
            );
        }
        let mut lines = Vec::new();
        let mut current: Option<&ManagerId> = None;
        for c in &self.conflicts {
            if current != Some(&c.manager) {
                lines.push(format!("conflicts with {}:", c.manager.describe()));
                current = Some(&c.manager);
            }
            lines.push(format!("- {}", path_string(&c.path)));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            self.conflicts.len(),
            lines.join("\n")
        )
    }

    /// The 409 answer: reason Conflict, one `FieldManagerConflict` cause per path.
    pub fn to_status(&self) -> Status {
        let causes = self
            .conflicts
            .iter()
            .map(|c| StatusCause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with {}", c.manager.describe()),
                field: path_string(&c.path),
            })
            .collect();
        let mut status = Status::failure(409, "Conflict", self.message());
        status.details = Some(Box::new(StatusDetails {
            causes,
            ..Default::default()
        }));
        status
    }
}

impl fmt::Display for ApplyConflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for ApplyConflicts {}

/// Why an apply was refused.
#[derive(Clone, Debug)]
pub enum ApplyError {
    /// 409: fields owned by other managers would change.
    Conflicts(ApplyConflicts),
    /// 400: the request itself is unacceptable (managedFields sent, wrong type).
    BadRequest(String),
    /// 400: the configuration does not fit the schema (`failed to create typed patch
    /// object …`). Upstream answers 500 here, which is its bug (kubernetes#122480,
    /// kubernetes#139253; the proposed fix answers 400 with the same message): the input
    /// is the client's, so it gets a client error.
    Untypable(String),
}

impl ApplyError {
    pub fn to_status(&self) -> Status {
        match self {
            ApplyError::Conflicts(c) => c.to_status(),
            ApplyError::BadRequest(m) | ApplyError::Untypable(m) => Status::bad_request(m.clone()),
        }
    }
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApplyError::Conflicts(c) => write!(f, "{c}"),
            ApplyError::BadRequest(m) | ApplyError::Untypable(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ApplyError {}

/// Server-side apply of `applied` (the decoded apply-patch body) by `manager` onto `live`
/// (`None` creates). Returns the new object with `metadata.managedFields` set; the caller
/// still fills server fields on create and validates the result.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    schema: &Schema,
    now_rfc3339: &str,
) -> Result<Value, ApplyError> {
    if !applied.is_object() {
        return Err(ApplyError::BadRequest(
            "the apply configuration must be an object".into(),
        ));
    }
    if too_deep(applied, MAX_DEPTH) || live.is_some_and(|l| too_deep(l, MAX_DEPTH)) {
        return Err(ApplyError::BadRequest(format!(
            "object nesting exceeds {MAX_DEPTH} levels"
        )));
    }
    if applied
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(ApplyError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let type_meta = |v: &Value| {
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        (s("apiVersion"), s("kind"))
    };
    let (api_version, kind) = type_meta(applied);
    let gvk = gvk_string(&api_version, &kind);
    if api_version.is_empty()
        || kind.is_empty()
        || live.is_some_and(|l| type_meta(l) != (api_version.clone(), kind.clone()))
    {
        return Err(ApplyError::BadRequest(format!(
            "invalid object type: {gvk}"
        )));
    }
    let problems = walk::check_applied(applied, schema);
    if !problems.is_empty() {
        let text = |k: &str| {
            applied
                .get("metadata")
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let detail = if problems.len() == 1 {
            problems[0].clone()
        } else {
            format!("errors:\n  {}", problems.join("\n  "))
        };
        return Err(ApplyError::Untypable(format!(
            "failed to create typed patch object ({}/{}; {gvk}): {detail}",
            text("namespace"),
            text("name")
        )));
    }

    let mut live_obj = live.cloned().unwrap_or_else(|| json!({}));
    let stored = take_managed_fields(&mut live_obj);
    // Our store only holds what we wrote; unreadable entries are dropped, not fatal.
    let managed = stored
        .and_then(|v| Managed::decode(&v).ok())
        .unwrap_or_default();
    let id = ManagerId::new(manager, Operation::Apply, &api_version, "");

    let outcome = match apply_once(&live_obj, &managed, applied, &id, force, schema) {
        Err(conflicts) if manager == KUBECTL_MANAGER && !force => {
            // Upgrading from client-side apply: fields whose last-applied value is still
            // live are taken over silently.
            let remaining = conflicts.without(&allowed_by_last_applied(&live_obj, schema));
            if !remaining.is_empty() {
                return Err(ApplyError::Conflicts(remaining));
            }
            apply_once(&live_obj, &managed, applied, &id, true, schema)
        }
        other => other,
    };
    let (mut obj, mut managed, changed) = outcome.map_err(ApplyError::Conflicts)?;
    if let Some(entry) = managed.get_mut(&id) {
        entry.api_version = api_version;
        if changed || entry.time.is_none() {
            entry.time = Some(now_rfc3339.to_string());
        }
    }
    if manager == KUBECTL_MANAGER && obj.pointer(&annotation_pointer()).is_some() {
        if let Some(annotations) = obj
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.insert(
                LAST_APPLIED_ANNOTATION.into(),
                Value::String(last_applied(applied)),
            );
        }
    }
    managed.cap_updates();
    write_managed_fields(&mut obj, managed);
    Ok(obj)
}

/// One structured-merge-diff apply: merge, remove what the manager stopped applying,
/// then check and transfer ownership. Returns the object, the managers and whether the
/// object changed.
fn apply_once(
    live: &Value,
    managed: &Managed,
    applied: &Value,
    id: &ManagerId,
    force: bool,
    schema: &Schema,
) -> Result<(Value, Managed, bool), ApplyConflicts> {
    let mut managed = managed.clone();
    let merged = walk::merge(live, applied, schema);
    let applied_set = walk::to_set(applied, schema);
    let last = match managed.get_mut(id) {
        Some(entry) => Some(std::mem::replace(&mut entry.set, applied_set)),
        None => {
            managed.entries.push(Entry {
                id: id.clone(),
                api_version: String::new(),
                time: None,
                set: applied_set,
            });
            None
        }
    };
    let new_obj = match last.filter(|s| !s.is_empty()) {
        Some(last) => {
            let owned = managed
                .entries
                .iter()
                .fold(FieldSet::new(), |acc, e| acc.union(&e.set));
            let mut remove = walk::ensure_named_fields(&last, schema)
                .difference(&walk::ensure_named_fields(&owned, schema));
            // The object's identity is never removed, whatever the sets say.
            let mut identity = FieldSet::new();
            for f in ["apiVersion", "kind", "metadata"] {
                identity.insert(&[PathElement::Field(f.into())]);
            }
            remove = remove.difference(&identity);
            let mut pruned = merged;
            walk::remove_items(&mut pruned, &remove, schema);
            pruned
        }
        None => merged,
    };
    let cmp = walk::compare(live, &new_obj, schema);
    let changed = cmp.added.union(&cmp.modified);
    let conflicts: Vec<(ManagerId, FieldSet)> = managed
        .entries
        .iter()
        .filter(|e| e.id != *id)
        .map(|e| (e.id.clone(), e.set.intersection(&changed)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if !force && !conflicts.is_empty() {
        return Err(ApplyConflicts::new(conflicts));
    }
    for entry in managed.entries.iter_mut() {
        entry.set = if entry.id == *id {
            entry.set.difference(server_fields())
        } else {
            entry.set.difference(&changed).difference(&cmp.removed)
        };
    }
    managed.drop_empty();
    Ok((new_obj, managed, !cmp.is_same()))
}

/// Records a non-apply write (create, update, patch, or a subresource write) in
/// `new.metadata.managedFields`: the fields whose value the write set or changed go to
/// `manager`'s `Update` entry and are taken from every other entry.
///
/// Which entries the write starts from, as upstream decides: subresource writes always
/// use the stored ones; otherwise `managedFields` sent by the client replace them, unless
/// absent or undecodable. `[]` or `[{}]` resets them, and an update of an object without
/// entries is not tracked at all (only creates and applies start tracking), so a reset
/// leaves the object without `managedFields`.
pub fn record_update(
    old: Option<Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    now_rfc3339: &str,
    schema: &Schema,
) {
    if !new.is_object() {
        return;
    }
    let sent = take_managed_fields(new);
    if too_deep(new, MAX_DEPTH) || old.as_ref().is_some_and(|o| too_deep(o, MAX_DEPTH)) {
        return;
    }
    let mut old_obj = old.unwrap_or_else(|| json!({}));
    let stored = take_managed_fields(&mut old_obj);
    // Unreadable stored entries count as none, as upstream.
    let decode_stored = || {
        stored
            .as_ref()
            .and_then(|v| Managed::decode(v).ok())
            .unwrap_or_default()
    };
    let (mut managed, from_stored) = match (subresource, sent) {
        (None, Some(sent)) if is_reset(&sent) => (Managed::default(), false),
        (None, Some(sent)) => match Managed::decode(&sent) {
            Ok(m) if !m.entries.is_empty() => (m, false),
            _ => (decode_stored(), true),
        },
        _ => (decode_stored(), true),
    };
    let is_create = old_obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if managed.entries.is_empty() && !is_create {
        return;
    }
    let decoded_count = managed.entries.len();

    let walk::Comparison {
        added,
        modified,
        removed,
    } = walk::compare(&old_obj, new, schema);
    // A create only adds: no set to merge.
    let changed = if modified.is_empty() {
        added
    } else {
        added.union(&modified)
    };
    // Which stored entries this write changes (set or time): only those are encoded again.
    let mut rewritten = vec![false; decoded_count];
    for (entry, rewritten) in managed.entries.iter_mut().zip(rewritten.iter_mut()) {
        let set = entry.set.difference(&changed).difference(&removed);
        *rewritten = set != entry.set;
        entry.set = set;
    }
    let mut sets_changed = rewritten.contains(&true);
    let mut taken = changed;
    taken.subtract(server_fields());
    let mut touched = None;
    if !taken.is_empty() {
        let id = ManagerId::new(
            manager,
            Operation::Update,
            api_version,
            subresource.unwrap_or_default(),
        );
        match managed.entries.iter().position(|e| e.id == id) {
            Some(index) => {
                let entry = &mut managed.entries[index];
                let set = entry.set.union(&taken);
                sets_changed |= set != entry.set;
                entry.set = set;
                entry.time = Some(now_rfc3339.to_string());
                touched = Some(index);
                rewritten[index] = true;
            }
            None => {
                sets_changed = true;
                managed.entries.push(Entry {
                    id,
                    api_version: api_version.to_string(),
                    time: Some(now_rfc3339.to_string()),
                    set: taken,
                })
            }
        }
    }
    let count = managed.entries.len();
    managed.drop_empty();
    managed.cap_updates();
    // Stored lists are as `encode` wrote them, one entry per manager, in decoding order: as
    // long as no entry was dropped or merged, an entry this write left alone keeps its
    // stored JSON. The entry a manager's spec create made (every field of the spec) is the
    // largest, and status writes rarely touch it.
    let reusable = from_stored && managed.entries.len() == count && !managed.entries.is_empty();
    if let (true, Some(Value::Array(mut list))) = (reusable, stored) {
        if list.len() == decoded_count {
            list = match (sets_changed, touched) {
                // Only the writer's time changes (a repeated status write).
                (false, Some(index)) => {
                    managed::touch_encoded(&mut list, index, now_rfc3339);
                    list
                }
                (false, None) => list,
                (true, _) => managed.encode_reusing(list, &rewritten),
            };
            if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("managedFields".into(), Value::Array(list));
            }
            return;
        }
    }
    write_managed_fields(new, managed);
}

/// `[]` or a single entry with nothing set: the client asks to clear managedFields.
fn is_reset(sent: &Value) -> bool {
    match sent.as_array().map(Vec::as_slice) {
        Some([]) => true,
        Some([only]) => only.as_object().is_some_and(|m| {
            m.values().all(|v| match v {
                Value::Null => true,
                Value::String(s) => s.is_empty(),
                Value::Object(o) => o.is_empty(),
                _ => false,
            })
        }),
        _ => false,
    }
}

fn take_managed_fields(obj: &mut Value) -> Option<Value> {
    obj.get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("managedFields"))
}

fn write_managed_fields(obj: &mut Value, managed: Managed) {
    let entries = managed.encode();
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    // `metadata: null` is an absent metadata, as Go decodes it: it still gets the fields.
    if meta.is_null() && !entries.is_empty() {
        *meta = json!({});
    }
    if let Some(meta) = meta.as_object_mut() {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

/// `kubevirt.io/v1, Kind=VirtualMachine` (`/v1, Kind=Pod` for the core group).
fn gvk_string(api_version: &str, kind: &str) -> String {
    let gv = if api_version.contains('/') {
        api_version.to_string()
    } else {
        format!("/{api_version}")
    };
    format!("{gv}, Kind={kind}")
}

fn annotation_pointer() -> String {
    format!(
        "/metadata/annotations/{}",
        LAST_APPLIED_ANNOTATION
            .replace('~', "~0")
            .replace('/', "~1")
    )
}

/// The fields of the last client-side apply whose values are still live: kubectl may take
/// these over from `kubectl-client-side-apply` without a conflict.
fn allowed_by_last_applied(live: &Value, schema: &Schema) -> FieldSet {
    let Some(text) = live.pointer(&annotation_pointer()).and_then(Value::as_str) else {
        return FieldSet::new();
    };
    let last: Value = match serde_json::from_str(text) {
        Ok(v @ Value::Object(_)) if !too_deep(&v, MAX_DEPTH) => v,
        _ => return FieldSet::new(),
    };
    let cmp = walk::compare(&last, live, schema);
    walk::to_set(&last, schema)
        .difference(&cmp.modified)
        .difference(&cmp.added)
        .difference(&cmp.removed)
}

/// The applied configuration as kube-apiserver writes the annotation: itself minus the
/// annotation, as Go `encoding/json` writes it (sorted keys, compact) with a trailing
/// newline.
fn last_applied(applied: &Value) -> String {
    let mut copy = applied.clone();
    if let Some(annotations) = copy
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
    crate::gojson::marshal(&copy, crate::gojson::Escaping::EncodingJson) + "\n"
}

#[cfg(test)]
mod tests;
