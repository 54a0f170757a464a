//! What a node may do beyond its RBAC role: kube's Node authorizer and NodeRestriction
//! admission, for this server's kinds. A node (`system:node:NAME` in `system:nodes`)
//! may change only its own Node; read and update only the VMIs that concern it (bound to
//! it, or migrating to or from it), without touching their spec or handing them to
//! another node; list and watch VMIs only for itself; and read only the Secrets,
//! ConfigMaps and claims those VMIs use. Everything else its role decides.

use apimachinery::identity::{NODES_GROUP, NODE_USER_PREFIX};
use apimachinery::status::{GroupResource, Status};
use kubevirt_api::names::labels::MIGRATION_TARGET_NODE;
use serde_json::Value;
use store::ListOptions;

use crate::registry::{Registry, WriteGuard};
use crate::request::Query;
use access::authn::UserInfo;
use access::authz::Attributes;

/// The node a user is, when it is one.
pub fn node_of(user: &UserInfo) -> Option<&str> {
    user.name
        .strip_prefix(NODE_USER_PREFIX)
        .filter(|name| !name.is_empty() && user.in_group(NODES_GROUP))
}

/// The node authorizer's reason for an object the node has nothing to do with.
fn no_relationship(node: &str) -> String {
    format!("no relationship found between node '{node}' and this object")
}

/// Whether a VMI object concerns `node`: it runs there, or moves to or from there.
pub fn concerns(vmi: &Value, node: &str) -> bool {
    let names = |pointer: &str| vmi.pointer(pointer).and_then(Value::as_str) == Some(node);
    names("/status/nodeName")
        || names("/status/migrationState/targetNode")
        || names("/status/migrationState/sourceNode")
        || vmi
            .pointer("/metadata/labels")
            .and_then(|l| l.get(MIGRATION_TARGET_NODE))
            .and_then(Value::as_str)
            == Some(node)
}

/// Whether a selector (terms joined by `,`) requires `key` to equal `value`.
fn requires(selector: Option<&str>, key: &str, value: &str) -> bool {
    selector.is_some_and(|s| {
        s.split(',').any(|term| {
            let term = term.trim();
            let (k, v) = match term.split_once("==") {
                Some(kv) => kv,
                None => match term.split_once('=') {
                    Some(kv) if !kv.0.ends_with('!') => kv,
                    _ => return false,
                },
            };
            k.trim() == key && v.trim() == value
        })
    })
}

/// Decides a node's request; `Err` is the reason for a 403. Requests about one object
/// read it (and, for the objects VMIs use, the VMIs of its namespace).
pub async fn authorize(
    registry: &Registry,
    node: &str,
    attrs: &Attributes,
    query: &Query,
) -> Result<(), String> {
    let Some(r) = &attrs.resource else {
        return Ok(());
    };
    let verb = attrs.verb.as_str();
    match (r.group.as_str(), r.resource.as_str()) {
        ("", "nodes") => match verb {
            "get" | "list" | "watch" | "create" => Ok(()),
            _ if r.name == node => Ok(()),
            _ => Err(format!("node '{node}' cannot modify node '{}'", r.name)),
        },
        ("kubevirt.io", "virtualmachineinstances") => match verb {
            "list" | "watch" if r.name.is_empty() => {
                let own = requires(query.field_selector.as_deref(), "status.nodeName", node)
                    || requires(query.label_selector.as_deref(), MIGRATION_TARGET_NODE, node);
                if own {
                    Ok(())
                } else {
                    Err(format!("can only list/watch virtualmachineinstances with field selector status.nodeName={node} or label selector {MIGRATION_TARGET_NODE}={node}"))
                }
            }
            "get" | "update" | "patch" if !r.name.is_empty() => {
                match stored(registry, attrs).await? {
                    Some(vmi) if !concerns(&vmi, node) => Err(no_relationship(node)),
                    // A VMI that is not there: the handler answers 404.
                    _ => Ok(()),
                }
            }
            _ => Err(no_relationship(node)),
        },
        ("", "secrets" | "configmaps" | "persistentvolumeclaims") => {
            if verb != "get" || r.name.is_empty() {
                return Err(no_relationship(node));
            }
            if used_by_a_vmi_of(registry, node, &r.namespace, &r.resource, &r.name).await? {
                Ok(())
            } else {
                Err(no_relationship(node))
            }
        }
        _ => Ok(()),
    }
}

fn vmi_info() -> &'static apimachinery::resource::ResourceInfo {
    &kubevirt_api::resources::VIRTUAL_MACHINE_INSTANCE
}

async fn stored(registry: &Registry, attrs: &Attributes) -> Result<Option<Value>, String> {
    let Some(r) = &attrs.resource else {
        return Ok(None);
    };
    let key = Registry::key(vmi_info(), Some(&r.namespace), &r.name);
    let kv = registry
        .store
        .get(&key)
        .await
        .map_err(|e| format!("cannot read the object: {e}"))?;
    kv.map(|kv| crate::stored::decode(&kv).map_err(|s| s.message))
        .transpose()
}

/// Whether a VMI in `namespace` that concerns `node` uses the object.
async fn used_by_a_vmi_of(
    registry: &Registry,
    node: &str,
    namespace: &str,
    plural: &str,
    name: &str,
) -> Result<bool, String> {
    let prefix = Registry::list_prefix(vmi_info(), Some(namespace));
    let listed = registry
        .store
        .list(&prefix, ListOptions::default())
        .await
        .map_err(|e| format!("cannot read the VMIs of namespace {namespace}: {e}"))?;
    Ok(listed.items.iter().any(|kv| {
        crate::stored::decode(kv).is_ok_and(|vmi| {
            concerns(&vmi, node)
                && serde_json::from_value::<kubevirt_api::model::VirtualMachineInstance>(vmi)
                    .is_ok_and(|vmi| kubevirt_api::references::uses(&vmi, plural, name))
        })
    }))
}

/// NodeRestriction's part that needs the object being written: a node creates only its
/// own Node, and changes a VMI's status and metadata only, never giving it to another
/// node (a migration target claims it for itself).
pub fn write_guard(node: &str, group: &str, plural: &str) -> Option<WriteGuard> {
    let node = node.to_string();
    match (group, plural) {
        ("", "nodes") => Some(WriteGuard(std::sync::Arc::new(move |new, _old| {
            let name = new
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if name == node {
                return Ok(());
            }
            Err(Status::forbidden(
                &GroupResource::new("", "nodes"),
                name,
                &format!("node {node:?} is not allowed to modify node {name:?}"),
            ))
        }))),
        ("kubevirt.io", "virtualmachineinstances") => {
            Some(WriteGuard(std::sync::Arc::new(move |new, old| {
                let name = new
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let refuse = |why: &str| {
                    Err(Status::forbidden(
                        &GroupResource::new("kubevirt.io", "virtualmachineinstances"),
                        name,
                        &format!("node {node:?} {why}"),
                    ))
                };
                let Some(old) = old else {
                    return refuse("may not create virtualmachineinstances");
                };
                if !concerns(old, &node) {
                    return refuse("can only update virtualmachineinstances that run on it or migrate to or from it");
                }
                if new.get("spec") != old.get("spec") {
                    return refuse("may not change the spec of a virtualmachineinstance");
                }
                let bound = |v: &Value| v.pointer("/status/nodeName").cloned();
                let rebound = bound(new) != bound(old);
                if rebound && new.pointer("/status/nodeName").and_then(Value::as_str) != Some(&node)
                {
                    return refuse("may not bind a virtualmachineinstance to another node");
                }
                Ok(())
            })))
        }
        _ => None,
    }
}
