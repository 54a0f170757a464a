//! Shared informers: one watch and one cache per kind for the controllers that work from
//! a whole-cluster view (the scheduler, the migration controller, evacuation). Each watch
//! costs the server an encoding of every event and the client a decoding of it, so with
//! 10,000 VMIs starting, one VMI watch per controller was a large part of the cost.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::Notify;

/// A cache of every object of one kind, and who wants to hear of changes.
#[derive(Clone)]
pub struct Informer {
    store: Store<DynamicObject>,
    listeners: Arc<Mutex<Vec<Arc<Notify>>>>,
}

impl Informer {
    /// Starts watching `resource` in every namespace.
    pub fn start(client: &Client, resource: ApiResource) -> Informer {
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let listeners: Arc<Mutex<Vec<Arc<Notify>>>> = Arc::default();
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let notify = listeners.clone();
        tokio::spawn(
            watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .for_each(move |_| {
                    for listener in notify.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                        listener.notify_one();
                    }
                    futures::future::ready(())
                }),
        );
        Informer { store, listeners }
    }

    /// The cache, and `changed` notified on every event from now on.
    pub fn subscribe(&self, changed: Arc<Notify>) -> Store<DynamicObject> {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(changed);
        self.store.clone()
    }
}

/// The informers the controllers share.
#[derive(Clone)]
pub struct Shared {
    pub vmis: Informer,
    pub nodes: Informer,
}

impl Shared {
    pub fn start(client: &Client) -> Shared {
        Shared {
            vmis: Informer::start(client, crate::resources::virtual_machine_instance()),
            nodes: Informer::start(client, crate::resources::node()),
        }
    }
}
