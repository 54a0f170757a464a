//! Authorization the Kubernetes way: every request's attributes (verb, API group,
//! resource, subresource, namespace, name, or a non-resource path) are checked against
//! the RBAC roles and bindings in the store, as kube-apiserver's `system:masters`
//! group authorizer followed by its RBAC authorizer would.
//!
//! The roles and bindings are watched and compiled into a `Snapshot` that each change
//! replaces; a request costs a few hash lookups and a scan of the rules bound to its
//! user. `wait_for` lets a client that just changed a role or binding see the change
//! on its next request.
//!
//! One module per job: `snapshot` (the compiled view and the RBAC decision),
//! `attributes` (what a request asks for, and the 403 kube writes when it may not),
//! `impersonation` (`Impersonate-*` headers), `escalation` (no one grants what they
//! do not hold) and `node` (a node touches only its own objects).

mod attributes;
pub mod escalation;
pub mod impersonation;
pub mod node_authorizer;
mod snapshot;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use apimachinery::status::Status;
use futures::{FutureExt, StreamExt};
use store::{EventKind, ListOptions};

use crate::auth::{UserInfo, MASTERS_GROUP};
use crate::rbac::PolicyRule;
use crate::registry::{Change, Registry, WriteOptions};
pub use attributes::{forbidden, Attributes, ResourceAttributes};
use snapshot::Objects;
pub use snapshot::Snapshot;

const PREFIX: &str = "/registry/rbac.authorization.k8s.io/";
/// The field manager of the aggregation controller's writes, as upstream.
const AGGREGATION_MANAGER: &str = "clusterrole-aggregation-controller";

/// The answer to "may this user do this", with kube's reason text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

pub struct Authorizer {
    snapshot: RwLock<Arc<Snapshot>>,
    revision: tokio::sync::watch::Sender<i64>,
}

impl Authorizer {
    /// An authorizer over `snapshot` that nothing updates (tests).
    pub fn fixed(snapshot: Snapshot) -> Authorizer {
        let (revision, _) = tokio::sync::watch::channel(snapshot.revision);
        Authorizer {
            snapshot: RwLock::new(Arc::new(snapshot)),
            revision,
        }
    }

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
                match task.follow(&registry, &mut objects, revision).await {
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
        &self,
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
                self.revision.send_replace(last);
                continue;
            }
            let snapshot = Snapshot::build(objects, last);
            let needs_write = snapshot
                .aggregated
                .values()
                .any(|(want, have)| want != have);
            self.publish(snapshot);
            if needs_write {
                let current = self.snapshot();
                write_aggregated(registry, &current).await;
            }
        }
    }

    fn publish(&self, snapshot: Snapshot) {
        let revision = snapshot.revision;
        if let Ok(mut current) = self.snapshot.write() {
            *current = Arc::new(snapshot);
        }
        self.revision.send_replace(revision);
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.snapshot.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Waits (at most a few seconds) until changes up to store revision `revision` are
    /// in effect.
    pub async fn wait_for(&self, revision: i64) {
        let mut seen = self.revision.subscribe();
        let _ =
            tokio::time::timeout(Duration::from_secs(5), seen.wait_for(|r| *r >= revision)).await;
    }

    /// Whether `user` may do `attrs`; the `Err` is the reason of a refusal (empty, or
    /// `RBAC: <resolution errors>`).
    pub fn allows(&self, user: &UserInfo, attrs: &Attributes) -> Result<(), String> {
        if user.in_group(MASTERS_GROUP) {
            return Ok(());
        }
        let snapshot = self.snapshot();
        match snapshot.allows(user, attrs) {
            Ok(_) => Ok(()),
            Err(errors) => Err(resolution_reason(&errors)),
        }
    }

    /// `allows` with the reason kube's SubjectAccessReview reports.
    pub fn decide(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        if user.in_group(MASTERS_GROUP) {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let snapshot = self.snapshot();
        match snapshot.allows(user, attrs) {
            Ok(source) => Decision {
                allowed: true,
                reason: source
                    .map(|s| format!("RBAC: allowed by {}", s.describe(user)))
                    .unwrap_or_default(),
            },
            Err(errors) => Decision {
                allowed: false,
                reason: resolution_reason(&errors),
            },
        }
    }

    /// Every rule `user` holds in `namespace` (members of `system:masters` hold `*` on
    /// everything first), and the errors met resolving them.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let snapshot = self.snapshot();
        let (mut rules, errors) = snapshot.rules_for(user, namespace);
        if user.in_group(MASTERS_GROUP) {
            let mut all = vec![
                PolicyRule::resources(&["*"], &["*"], &["*"]),
                PolicyRule::urls(&["*"], &["*"]),
            ];
            all.append(&mut rules);
            rules = all;
        }
        (rules, errors)
    }
}

/// `RBAC: <aggregate of errors>` (one error bare, several in brackets, repeats once).
fn resolution_reason(errors: &[&str]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let mut unique: Vec<&str> = Vec::new();
    for e in errors {
        if !unique.contains(e) {
            unique.push(e);
        }
    }
    if unique.len() == 1 {
        format!("RBAC: {}", unique[0])
    } else {
        format!("RBAC: [{}]", unique.join(", "))
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
    let Some(reg) = registry.find(crate::rbac::GROUP, "v1", "clusterroles") else {
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

#[cfg(test)]
mod tests;
