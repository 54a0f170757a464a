//! No one grants what they do not hold (kube's policy-based RBAC storage): a Role or
//! ClusterRole may be written only with rules its writer already has in that scope
//! (or with `escalate` on it), a binding only to a role whose rules its writer has
//! (or with `bind` on that role); members of `system:masters` are exempt.

use std::sync::Arc;

use apimachinery::meta_validation::go_quote;
use apimachinery::status::{GroupResource, Status};
use serde_json::Value;

use super::{Attributes, Authorizer, ResourceAttributes};
use crate::authn::{UserInfo, MASTERS_GROUP};
use crate::rbac::rules::{covers, go_quoted_list, missing_descriptions};
use crate::rbac::{PolicyRule, RoleObject, GROUP};

/// `ConfirmNoEscalation`: the rules `user` holds in `namespace` cover `rules`, or the
/// text kube's Forbidden carries.
pub fn confirm_no_escalation(
    authorizer: &Authorizer,
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let (owner, errors) = authorizer.rules_for(user, namespace);
    let (covered, missing) = covers(&owner, rules);
    if covered {
        return Ok(());
    }
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        go_quoted_list(&user.groups),
        missing_descriptions(missing).join("\n")
    );
    if !errors.is_empty() {
        // Go's `%v` of a one-element []error holding the resolver's aggregate.
        let aggregate = match errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        message.push_str(&format!("; resolution errors: [{aggregate}]"));
    }
    Err(message)
}

/// Whether only what the garbage collector changes differs (`IsOnlyMutatingGCFields`).
fn only_gc_fields_differ(new: &Value, old: &Value) -> bool {
    let strip = |o: &Value| {
        let mut o = o.clone();
        let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) else {
            return o;
        };
        for field in [
            "ownerReferences",
            "finalizers",
            "resourceVersion",
            "managedFields",
            "generation",
        ] {
            meta.remove(field);
        }
        o
    };
    strip(new) == strip(old)
}

fn rbac_resource(plural: &str) -> GroupResource {
    GroupResource::new(GROUP, plural)
}

fn full_authority() -> Vec<PolicyRule> {
    vec![
        PolicyRule::resources(&["*"], &["*"], &["*"]),
        PolicyRule::urls(&["*"], &["*"]),
    ]
}

fn has_aggregation_rule(obj: Option<&Value>) -> bool {
    obj.and_then(|o| o.pointer("/aggregationRule/clusterRoleSelectors"))
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty())
}

/// A check of an RBAC object about to be written (new, and the stored one on an update).
pub type WriteCheck = Arc<dyn Fn(&Value, Option<&Value>) -> Result<(), Status> + Send + Sync>;

/// The check a write of RBAC kind `plural` by `user` passes, or `None` when no check
/// applies (a member of `system:masters`, or a role writer allowed to `escalate`).
/// `namespace` and `name` are the request's.
pub fn guard(
    authorizer: &Arc<Authorizer>,
    user: &UserInfo,
    plural: &str,
    namespace: &str,
    name: &str,
) -> Option<WriteCheck> {
    if user.in_group(MASTERS_GROUP) {
        return None;
    }
    let roles = matches!(plural, "roles" | "clusterroles");
    if roles {
        let escalate = Attributes::resource(
            "escalate",
            ResourceAttributes {
                namespace: namespace.into(),
                group: GROUP.into(),
                version: "*".into(),
                resource: plural.into(),
                subresource: String::new(),
                name: name.into(),
            },
        );
        if authorizer.allows(user, &escalate).is_ok() {
            return None;
        }
    }
    let (authorizer, user) = (authorizer.clone(), user.clone());
    let (plural, namespace) = (plural.to_string(), namespace.to_string());
    Some(Arc::new(move |new: &Value, old: Option<&Value>| {
        if old.is_some_and(|old| only_gc_fields_differ(new, old)) {
            return Ok(());
        }
        let name = crate::rbac::metadata_str(new, "name");
        let refuse = |message: &str| Status::forbidden(&rbac_resource(&plural), name, message);
        if roles {
            let rules = RoleObject::from_json(new).rules;
            confirm_no_escalation(&authorizer, &user, &namespace, &rules)
                .map_err(|m| refuse(&m))?;
            if plural == "clusterroles"
                && (has_aggregation_rule(Some(new)) || has_aggregation_rule(old))
                && confirm_no_escalation(&authorizer, &user, &namespace, &full_authority()).is_err()
            {
                return Err(refuse(
                    "must have cluster-admin privileges to use the aggregationRule",
                ));
            }
            return Ok(());
        }
        // A binding: allowed to `bind` the role, or holding everything it grants.
        let role_ref = crate::rbac::BindingObject::from_json(new).role_ref;
        let resource = match role_ref.kind.as_str() {
            "ClusterRole" => "clusterroles",
            "Role" => "roles",
            _ => "",
        };
        let bind = Attributes::resource(
            "bind",
            ResourceAttributes {
                namespace: namespace.clone(),
                group: role_ref.api_group.clone(),
                version: String::new(),
                resource: resource.into(),
                subresource: String::new(),
                name: role_ref.name.clone(),
            },
        );
        if !resource.is_empty() && authorizer.allows(&user, &bind).is_ok() {
            return Ok(());
        }
        let snapshot = authorizer.snapshot();
        let rules = snapshot
            .role_ref_rules(&role_ref.kind, &role_ref.name, &namespace)
            .map_err(|_| {
                let singular = if resource == "roles" {
                    "role"
                } else {
                    "clusterrole"
                };
                Status::not_found(&GroupResource::new(GROUP, singular), &role_ref.name)
            })?;
        confirm_no_escalation(&authorizer, &user, &namespace, &rules).map_err(|m| refuse(&m))
    }))
}
