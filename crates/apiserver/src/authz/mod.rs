//! Authorization as the API server wires it: `access::authz` decides, fed here with the
//! RBAC objects of the store (and writing aggregated ClusterRoles back, as kube's
//! aggregation controller); what a request asks for in RBAC's terms
//! (`request_attributes`); and the node authorizer (`node_authorizer`: a node touches
//! only its own objects), which reads the store.

pub mod node_authorizer;
pub mod request_attributes;

use std::sync::Arc;
use std::time::Duration;

use access::authz::{Authorizer, Objects, Snapshot, STORE_PREFIX as PREFIX};
use apimachinery::status::Status;
use futures::{FutureExt, StreamExt};
use store::{EventKind, ListOptions};

use crate::registry::{Change, Registry, WriteOptions};

/// The field manager of the aggregation controller's writes, as upstream.
const AGGREGATION_MANAGER: &str = "clusterrole-aggregation-controller";

/// Reads every role and binding, then keeps the snapshot up to date (and the
/// aggregated ClusterRoles' stored rules) on a task of its own.
pub async fn start(registry: Arc<Registry>) -> Result<Arc<Authorizer>, Status> {
    let (objects, revision) = list(&registry).await?;
    let snapshot = Snapshot::build(&objects, revision);
    write_aggregated(&registry, &snapshot).await;
    let authorizer = Arc::new(Authorizer::fixed(snapshot));
    let task = authorizer.clone();
    tokio::spawn(async move {
        let mut objects = objects;
        let mut revision = revision;
        loop {
            match follow(&task, &registry, &mut objects, revision).await {
                Ok(()) => return,
                Err(e) => tracing::warn!("RBAC watch ended ({e}); reading again"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            match list(&registry).await {
                Ok((listed, at)) => {
                    objects = listed;
                    revision = at;
                    task.publish(Snapshot::build(&objects, revision));
                }
                Err(e) => tracing::warn!("cannot list RBAC objects: {e}"),
            }
        }
    });
    Ok(authorizer)
}

/// Applies watch events from `revision` on; returns when the watch fails.
///
/// Every write of the store is watched, not only RBAC's, so that the revision
/// `wait_for` compares with is the store's: other writes only advance it.
async fn follow(
    authorizer: &Authorizer,
    registry: &Registry,
    objects: &mut Objects,
    revision: i64,
) -> Result<(), Status> {
    let mut events = registry
        .store
        .watch("/registry/", revision)
        .await
        .map_err(crate::registry::store_failure)?;
    let mut last = revision;
    loop {
        let Some(first) = events.next().await else {
            return Err(Status::internal("watch closed"));
        };
        let mut batch = vec![first];
        // Everything already waiting goes into one new snapshot.
        while let Some(Some(next)) = events.next().now_or_never() {
            batch.push(next);
        }
        let mut changed = false;
        for event in batch {
            let event = event.map_err(crate::registry::store_failure)?;
            last = event.kv.mod_revision;
            if !event.kv.key.starts_with(PREFIX) {
                continue;
            }
            changed = true;
            match event.kind {
                EventKind::Put => match crate::stored::decode(&event.kv) {
                    Ok(obj) => {
                        objects.insert(event.kv.key.clone(), obj);
                    }
                    Err(e) => tracing::warn!("RBAC object {}: {e}", event.kv.key),
                },
                EventKind::Delete => {
                    objects.remove(&event.kv.key);
                }
            }
        }
        if !changed {
            authorizer.advance(last);
            continue;
        }
        let snapshot = Snapshot::build(objects, last);
        let needs_write = snapshot
            .aggregated
            .values()
            .any(|(want, have)| want != have);
        authorizer.publish(snapshot);
        if needs_write {
            let current = authorizer.snapshot();
            write_aggregated(registry, &current).await;
        }
    }
}

async fn list(registry: &Registry) -> Result<(Objects, i64), Status> {
    let listed = registry
        .store
        .list(PREFIX, ListOptions::default())
        .await
        .map_err(crate::registry::store_failure)?;
    let mut objects = Objects::new();
    for kv in &listed.items {
        objects.insert(kv.key.clone(), crate::stored::decode(kv)?);
    }
    Ok((objects, listed.revision))
}

/// The ClusterRole aggregation controller: writes each aggregated ClusterRole's rules
/// when they are not what its selectors gather (the authorizer already uses those).
async fn write_aggregated(registry: &Registry, snapshot: &Snapshot) {
    let Some(reg) = registry.find(access::rbac::GROUP, "v1", "clusterroles") else {
        return;
    };
    let options = WriteOptions {
        field_manager: AGGREGATION_MANAGER.into(),
        ..Default::default()
    };
    for (name, (want, have)) in &snapshot.aggregated {
        if want == have {
            continue;
        }
        let rules = match serde_json::to_value(want) {
            Ok(rules) => rules,
            Err(_) => continue,
        };
        let result = registry
            .update_with(&reg, None, name, None, &options, |current| {
                let mut new = current.clone();
                new["rules"] = rules.clone();
                Ok(Change::replace(new))
            })
            .await;
        if let Err(status) = result {
            if status.code != 404 {
                tracing::warn!("aggregating ClusterRole {name}: {status}");
            }
        }
    }
}
