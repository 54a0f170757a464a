//! Shared informers: one watch and one cache per kind for the controllers that work from
//! a whole-cluster view (the VM controller's VMIs, the scheduler, the migration
//! controller, evacuation). Each watch
//! costs the server an encoding of every event and the client a decoding of it, so with
//! 10,000 VMIs starting, one VMI watch per controller was a large part of the cost.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use kubevirt_api::model::core::Node;
use kubevirt_api::model::VirtualMachineInstance;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

/// What an informer can hold: a typed kind, decoded lean (see `kubevirt_api::model`).
pub trait Informed:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Informed for K where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}

/// A cache of every object of one kind, and who wants to hear of changes.
pub struct Informer<K: Informed> {
    store: Store<K>,
    listeners: Arc<Mutex<Vec<Arc<Notify>>>>,
    followers: Arc<Mutex<Vec<Follower<K>>>>,
}

impl<K: Informed> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            store: self.store.clone(),
            listeners: self.listeners.clone(),
            followers: self.followers.clone(),
        }
    }
}

/// Hears of every object that changed (or was deleted), after the cache took it.
type Follower<K> = Box<dyn FnMut(&K) + Send>;

/// What of an object its listeners act on, as a hash: an update that leaves it unchanged
/// wakes nobody (a node's heartbeat, say, which 1,000 nodes send every few seconds and
/// which would otherwise have the scheduler look at every VMI again each time). `None`
/// (no hash could be made) always wakes them.
pub type Significant<K> = fn(&K) -> Option<u64>;

impl<K: Informed> Informer<K> {
    /// Starts watching every object of the kind; every event wakes the listeners.
    pub fn start(client: &Client) -> Informer<K> {
        Self::start_with(client, None)
    }

    /// As `start`, but an update whose `significant` hash is the one last seen for its
    /// object wakes nobody.
    pub fn start_with(client: &Client, significant: Option<Significant<K>>) -> Informer<K> {
        let writer = reflector::store::Writer::default();
        let store = writer.as_reader();
        let listeners: Arc<Mutex<Vec<Arc<Notify>>>> = Arc::default();
        let followers: Arc<Mutex<Vec<Follower<K>>>> = Arc::default();
        let notify = listeners.clone();
        let follow = followers.clone();
        let cache = store.clone();
        let mut last_seen: HashMap<ObjectRef<K>, u64> = HashMap::new();
        tokio::spawn(
            watcher(Api::<K>::all(client.clone()), watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .for_each(move |event| {
                    let quiet = match (&event, significant) {
                        (Ok(watcher::Event::Apply(object)), Some(significant)) => {
                            let reference = ObjectRef::from_obj(object);
                            match significant(object) {
                                Some(hash) => last_seen.insert(reference, hash) == Some(hash),
                                None => {
                                    last_seen.remove(&reference);
                                    false
                                }
                            }
                        }
                        (Ok(watcher::Event::Delete(object)), Some(_)) => {
                            last_seen.remove(&ObjectRef::from_obj(object));
                            false
                        }
                        // A re-list: objects deleted meanwhile send no Delete.
                        (Ok(watcher::Event::Init), _) => {
                            last_seen.clear();
                            false
                        }
                        _ => false,
                    };
                    if !quiet {
                        for listener in notify.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                            listener.notify_one();
                        }
                    }
                    let mut followers = follow.lock().unwrap_or_else(|p| p.into_inner());
                    match &event {
                        Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                            followers.iter_mut().for_each(|f| f(object));
                        }
                        // The cache takes a re-list's objects only now, all at once.
                        Ok(watcher::Event::InitDone) => {
                            for object in cache.state() {
                                followers.iter_mut().for_each(|f| f(&object));
                            }
                        }
                        _ => {}
                    }
                    futures::future::ready(())
                }),
        );
        Informer {
            store,
            listeners,
            followers,
        }
    }

    /// The cache, without being woken by its changes.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// What `pick` makes of each object that changes from now on (once it is in the
    /// cache), where it makes something: the owner to wake, say.
    pub fn follow<T: Send + 'static>(
        &self,
        pick: fn(&K) -> Option<T>,
    ) -> tokio_stream::wrappers::UnboundedReceiverStream<T> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        self.followers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(move |object| {
                if let Some(picked) = pick(object) {
                    // The receiver is gone only when its controller ended.
                    let _ = sender.send(picked);
                }
            }));
        tokio_stream::wrappers::UnboundedReceiverStream::new(receiver)
    }

    /// The cache, and `changed` notified on every event from now on.
    pub fn subscribe(&self, changed: Arc<Notify>) -> Store<K> {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(changed);
        self.store.clone()
    }
}

/// A node as the controllers see it, without what only its heartbeats change: the
/// resourceVersion, the `kubevirt.io/heartbeat` annotation and the conditions'
/// `lastHeartbeatTime` (managedFields are not decoded at all).
pub fn node_without_heartbeat(node: &Node) -> Option<u64> {
    let mut node = node.clone();
    node.metadata.resource_version = None;
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        annotations.remove(kubevirt_api::names::annotations::HEARTBEAT);
    }
    for condition in node.status.conditions.iter_mut().flatten() {
        condition.last_heartbeat_time = None;
    }
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(&node).ok()?.hash(&mut hasher);
    Some(hasher.finish())
}

/// The informers the controllers share.
#[derive(Clone)]
pub struct Shared {
    pub vmis: Informer<VirtualMachineInstance>,
    pub nodes: Informer<Node>,
}

impl Shared {
    pub fn start(client: &Client) -> Shared {
        Shared {
            vmis: Informer::start(client),
            nodes: Informer::start_with(client, Some(node_without_heartbeat)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(heartbeat: &str, ready: &str, rack: &str, rv: &str) -> Node {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "resourceVersion": rv, "labels": {"rack": rack},
                         "annotations": {"kubevirt.io/heartbeat": heartbeat}},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                                       "lastHeartbeatTime": heartbeat,
                                       "lastTransitionTime": "2026-12-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_heartbeat_alone_is_not_significant() {
        let first = node_without_heartbeat(&node("2026-12-01T00:00:10Z", "True", "r1", "5"));
        let beat = node_without_heartbeat(&node("2026-12-01T00:00:20Z", "True", "r1", "9"));
        assert!(first.is_some());
        assert_eq!(first, beat);
        let not_ready = node_without_heartbeat(&node("2026-12-01T00:00:20Z", "Unknown", "r1", "9"));
        assert_ne!(first, not_ready);
        let relabelled = node_without_heartbeat(&node("2026-12-01T00:00:20Z", "True", "r2", "9"));
        assert_ne!(first, relabelled);
    }
}
