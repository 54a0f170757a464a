//! Garbage collection and namespace deletion, run inside the server against the registry.
//!
//! An in-memory graph of owners and dependents is kept from one watch over every
//! object, so each change costs a lookup rather than a scan:
//! - a dependent whose owners are all gone is deleted (background propagation);
//! - dependents of an owner deleted in the foreground are deleted, and the owner's
//!   `foregroundDeletion` finalizer goes once no blocking dependent remains;
//! - dependents of an owner deleted with `orphan` lose that owner reference, then the
//!   owner's `orphan` finalizer goes;
//! - a terminating namespace has its content deleted, then disappears.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use apimachinery::status::Status;
use futures::StreamExt;
use serde_json::Value;
use store::{EventKind, ListOptions};

use crate::object;
use crate::registry::{Change, DeleteOptions, Propagation, Registry, WriteOptions};

const MANAGER: &str = "virtplane-garbage-collector";
const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// What the collector reads of an object's finalizers.
#[derive(Clone, Copy, Debug, Default)]
struct Finalizers {
    foreground: bool,
    orphan: bool,
    any: bool,
}

impl Finalizers {
    fn of(obj: &Value) -> Finalizers {
        let all = object::finalizers(obj);
        Finalizers {
            foreground: all.iter().any(|f| f == FOREGROUND),
            orphan: all.iter().any(|f| f == ORPHAN),
            any: !all.is_empty(),
        }
    }
}

/// One object of the graph. Names are shared (`Arc<str>`) between the maps that
/// index them: with 100,000 VMs stored, each copy of a key or uid costs megabytes.
#[derive(Clone, Debug)]
struct Node {
    uid: Arc<str>,
    namespace: Arc<str>,
    /// Owner uids with their `blockOwnerDeletion`.
    owners: Box<[(Arc<str>, bool)]>,
    deleting: bool,
    finalizers: Finalizers,
    is_namespace: bool,
}

#[derive(Default)]
struct Graph {
    nodes: HashMap<Arc<str>, Node>,
    /// Key of the object with each uid.
    by_uid: HashMap<Arc<str>, Arc<str>>,
    /// Keys of the objects that name each uid as an owner.
    dependents: HashMap<Arc<str>, HashSet<Arc<str>>>,
    /// One copy of each namespace's name, however many objects are in it.
    namespaces: HashSet<Arc<str>>,
}

impl Graph {
    fn remove(&mut self, key: &str) -> Option<Node> {
        let node = self.nodes.remove(key)?;
        self.by_uid.remove(&node.uid);
        for (owner, _) in &node.owners {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
        // The set's copy and this node's: the namespace has nothing else left.
        if Arc::strong_count(&node.namespace) == 2 {
            self.namespaces.remove(&node.namespace);
        }
        Some(node)
    }

    fn insert(&mut self, key: &str, obj: &Value) -> Node {
        let key: Arc<str> = key.into();
        let namespace = self.intern_namespace(object::namespace(obj));
        let owners = object::owner_uids(obj)
            .into_iter()
            .map(|(uid, block)| {
                let uid = match self.by_uid.get_key_value(uid.as_str()) {
                    Some((shared, _)) => shared.clone(),
                    None => uid.into(),
                };
                (uid, block)
            })
            .collect();
        let node = Node {
            uid: object::uid(obj).into(),
            namespace,
            owners,
            deleting: object::is_deleting(obj),
            finalizers: Finalizers::of(obj),
            is_namespace: key.starts_with("/registry/core/namespaces/"),
        };
        self.by_uid.insert(node.uid.clone(), key.clone());
        for (owner, _) in &node.owners {
            self.dependents
                .entry(owner.clone())
                .or_default()
                .insert(key.clone());
        }
        self.nodes.insert(key, node.clone());
        node
    }

    fn intern_namespace(&mut self, namespace: &str) -> Arc<str> {
        if let Some(shared) = self.namespaces.get(namespace) {
            return shared.clone();
        }
        let shared: Arc<str> = namespace.into();
        self.namespaces.insert(shared.clone());
        shared
    }

    fn key_of(&self, uid: &str) -> Option<&Arc<str>> {
        self.by_uid.get(uid)
    }

    fn owner(&self, uid: &str) -> Option<&Node> {
        self.key_of(uid).and_then(|key| self.nodes.get(key))
    }

    fn namespace_key(namespace: &str) -> String {
        format!("/registry/core/namespaces/{namespace}")
    }

    /// Keys whose handling may change when `node` at `key` changes.
    fn affected(&self, key: &str, node: &Node) -> Vec<String> {
        let mut out = vec![key.to_string()];
        out.extend(
            node.owners
                .iter()
                .filter_map(|(uid, _)| self.key_of(uid).map(|key| key.to_string())),
        );
        if let Some(deps) = self.dependents.get(&node.uid) {
            out.extend(deps.iter().map(|key| key.to_string()));
        }
        if !node.namespace.is_empty() {
            out.push(Self::namespace_key(&node.namespace));
        }
        out
    }
}

/// `{"metadata": …}` of a stored object with only the fields the graph reads, without
/// building the rest (spec, status, managedFields) of every object written.
fn decode_metadata(kv: &store::KeyValue) -> Result<Value, Status> {
    #[derive(serde::Deserialize)]
    struct MetadataOnly {
        #[serde(default)]
        metadata: GraphMetadata,
    }
    #[derive(serde::Deserialize, serde::Serialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct GraphMetadata {
        #[serde(default, skip_serializing_if = "Value::is_null")]
        uid: Value,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        namespace: Value,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        owner_references: Value,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        deletion_timestamp: Value,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        finalizers: Value,
    }
    let only: MetadataOnly = serde_json::from_slice(&kv.value)
        .map_err(|e| Status::internal(format!("stored object {} is corrupt: {e}", kv.key)))?;
    Ok(serde_json::json!({ "metadata": only.metadata }))
}

/// Runs until the process ends; a failure rebuilds the graph from a fresh list.
pub async fn run(registry: Arc<Registry>) {
    loop {
        if let Err(e) = run_once(&registry).await {
            tracing::warn!("garbage collector restarting: {e}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Objects read per page when the graph is built: a store of 100,000 VMs read whole
/// held all their values at once beside the graph made from them.
const PAGE: usize = 1000;

async fn run_once(registry: &Registry) -> Result<(), Status> {
    let mut graph = Graph::default();
    let mut queue: BTreeSet<String> = BTreeSet::new();
    let mut options = ListOptions {
        limit: Some(PAGE),
        ..ListOptions::default()
    };
    let revision = loop {
        let page = registry
            .store
            .list("/registry/", options.clone())
            .await
            .map_err(crate::registry::store_failure)?;
        for kv in &page.items {
            let obj = decode_metadata(kv)?;
            graph.insert(&kv.key, &obj);
            queue.insert(kv.key.clone());
        }
        match page.items.last() {
            Some(last) if page.remaining > 0 => {
                options.start_after = Some(last.key.clone());
                options.revision = Some(page.revision);
            }
            _ => break page.revision,
        }
    };
    let mut events = registry
        .store
        .watch("/registry/", revision)
        .await
        .map_err(crate::registry::store_failure)?;
    let mut retry = tokio::time::interval(Duration::from_millis(500));
    loop {
        while let Some(key) = queue.pop_first() {
            if let Err(e) = process(registry, &graph, &key).await {
                tracing::debug!("garbage collection of {key}: {e}");
            }
        }
        tokio::select! {
            event = events.next() => {
                let event = match event {
                    Some(Ok(event)) => event,
                    Some(Err(e)) => return Err(crate::registry::store_failure(e)),
                    None => return Ok(()),
                };
                let key = event.kv.key.clone();
                if let Some(old) = graph.remove(&key) {
                    queue.extend(graph.affected(&key, &old));
                }
                if event.kind == EventKind::Put {
                    let obj = decode_metadata(&event.kv)?;
                    let node = graph.insert(&key, &obj);
                    queue.extend(graph.affected(&key, &node));
                }
            }
            // Work waiting on others (terminating namespaces, blocked finalizers) is
            // looked at again now and then, in case a step failed.
            _ = retry.tick() => {
                for (key, node) in &graph.nodes {
                    if node.deleting {
                        queue.insert(key.to_string());
                    }
                }
            }
        }
    }
}

async fn process(registry: &Registry, graph: &Graph, key: &str) -> Result<(), Status> {
    let Some(node) = graph.nodes.get(key) else {
        return Ok(());
    };
    // Owners first: does this object still belong to anything alive?
    if !node.owners.is_empty() {
        if node
            .owners
            .iter()
            .all(|(uid, _)| graph.owner(uid).is_none())
        {
            return delete(registry, key, node, Propagation::Background).await;
        }
        for (owner_uid, _) in &node.owners {
            let Some(owner) = graph.owner(owner_uid) else {
                continue;
            };
            if owner.deleting && owner.finalizers.foreground && !node.deleting {
                return delete(registry, key, node, Propagation::Foreground).await;
            }
            if owner.deleting && owner.finalizers.orphan {
                return drop_owner(registry, key, owner_uid).await;
            }
        }
    }
    if !node.deleting {
        return Ok(());
    }
    let dependents: Vec<&Node> = graph
        .dependents
        .get(&node.uid)
        .map(|keys| keys.iter().filter_map(|k| graph.nodes.get(k)).collect())
        .unwrap_or_default();
    if node.finalizers.foreground {
        let blocking = dependents.iter().any(|d| {
            d.owners
                .iter()
                .any(|(uid, block)| uid == &node.uid && *block)
        });
        if !blocking {
            remove_finalizer(registry, key, FOREGROUND).await?;
        }
    }
    if node.finalizers.orphan && dependents.is_empty() {
        remove_finalizer(registry, key, ORPHAN).await?;
    }
    if node.is_namespace {
        let namespace = key.trim_start_matches("/registry/core/namespaces/");
        let content: Vec<(&Arc<str>, &Node)> = graph
            .nodes
            .iter()
            .filter(|(_, n)| &*n.namespace == namespace)
            .collect();
        for (content_key, content_node) in &content {
            if !content_node.deleting {
                delete(registry, content_key, content_node, Propagation::Background).await?;
            }
        }
        if content.is_empty() && !node.finalizers.any {
            match registry.store.delete(key, None).await {
                Ok(_) | Err(store::StoreError::NotFound) => {}
                Err(e) => return Err(crate::registry::store_failure(e)),
            }
        }
    }
    Ok(())
}

/// Resolves a store key to its registration, namespace and name.
fn locate(
    registry: &Registry,
    key: &str,
) -> Option<(Arc<crate::registry::Registration>, Option<String>, String)> {
    registry.registrations().iter().find_map(|reg| {
        let rest = key.strip_prefix(&Registry::resource_prefix(reg.info))?;
        if reg.info.namespaced {
            let (ns, name) = rest.split_once('/')?;
            Some((reg.clone(), Some(ns.to_string()), name.to_string()))
        } else {
            Some((reg.clone(), None, rest.to_string()))
        }
    })
}

fn ignore_gone(result: Result<(), Status>) -> Result<(), Status> {
    match result {
        Err(s) if s.code == 404 || s.code == 409 => Ok(()),
        other => other,
    }
}

async fn delete(
    registry: &Registry,
    key: &str,
    node: &Node,
    propagation: Propagation,
) -> Result<(), Status> {
    let Some((reg, ns, name)) = locate(registry, key) else {
        return Ok(());
    };
    let options = DeleteOptions {
        propagation,
        precondition_uid: Some(node.uid.to_string()),
        ..Default::default()
    };
    ignore_gone(
        registry
            .delete(&reg, ns.as_deref(), &name, &options)
            .await
            .map(|_| ()),
    )
}

fn gc_write_options() -> WriteOptions {
    WriteOptions {
        field_manager: MANAGER.into(),
        ..Default::default()
    }
}

async fn remove_finalizer(registry: &Registry, key: &str, finalizer: &str) -> Result<(), Status> {
    let Some((reg, ns, name)) = locate(registry, key) else {
        return Ok(());
    };
    let result = registry
        .update_with(
            &reg,
            ns.as_deref(),
            &name,
            None,
            &gc_write_options(),
            |old| {
                let mut new = old.clone();
                let finalizers = object::finalizers(old)
                    .into_iter()
                    .filter(|f| f != finalizer)
                    .collect();
                object::set_finalizers(&mut new, finalizers);
                object::meta_mut(&mut new).remove("resourceVersion");
                Ok(Change::replace(new))
            },
        )
        .await;
    ignore_gone(result.map(|_| ()))
}

async fn drop_owner(registry: &Registry, key: &str, owner_uid: &str) -> Result<(), Status> {
    let Some((reg, ns, name)) = locate(registry, key) else {
        return Ok(());
    };
    let result = registry
        .update_with(
            &reg,
            ns.as_deref(),
            &name,
            None,
            &gc_write_options(),
            |old| {
                let mut new = old.clone();
                let meta = object::meta_mut(&mut new);
                meta.remove("resourceVersion");
                if let Some(refs) = meta
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
                    if refs.is_empty() {
                        meta.remove("ownerReferences");
                    }
                }
                Ok(Change::replace(new))
            },
        )
        .await;
    ignore_gone(result.map(|_| ()))
}
