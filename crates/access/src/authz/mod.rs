//! Authorization the Kubernetes way: every request's attributes (verb, API group,
//! resource, subresource, namespace, name, or a non-resource path) are checked against
//! the RBAC roles and bindings, as kube-apiserver's `system:masters` group authorizer
//! followed by its RBAC authorizer would.
//!
//! The roles and bindings are compiled into a `Snapshot` that each change replaces (the
//! API server feeds it from its store); a request costs a few hash lookups and a scan of
//! the rules bound to its user. `wait_for` lets a client that just changed a role or
//! binding see the change on its next request.
//!
//! One module per job: `snapshot` (the compiled view and the RBAC decision),
//! `attributes` (what a request asks for, and the 403 kube writes when it may not),
//! `impersonation` (`Impersonate-*` headers) and `escalation` (no one grants what they
//! do not hold).

mod attributes;
pub mod escalation;
pub mod impersonation;
mod snapshot;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::authn::{UserInfo, MASTERS_GROUP};
use crate::rbac::PolicyRule;
pub use attributes::{forbidden, Attributes, ResourceAttributes};
pub use snapshot::{Objects, Snapshot};

/// Where the store keeps RBAC objects (kube's layout), which `Objects` are keyed by.
pub const STORE_PREFIX: &str = "/registry/rbac.authorization.k8s.io/";

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

    /// Puts `snapshot` in effect: requests from now on are decided by it.
    pub fn publish(&self, snapshot: Snapshot) {
        let revision = snapshot.revision;
        if let Ok(mut current) = self.snapshot.write() {
            *current = Arc::new(snapshot);
        }
        self.revision.send_replace(revision);
    }

    /// The store reached `revision` without an RBAC change: `wait_for` callers waiting
    /// for it may go on.
    pub fn advance(&self, revision: i64) {
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

#[cfg(test)]
mod tests;
