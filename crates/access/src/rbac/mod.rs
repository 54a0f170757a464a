//! `rbac.authorization.k8s.io/v1`: what Roles, ClusterRoles and their bindings say, the
//! policy rules they hold (`rules`), and the roles and bindings every server starts with
//! (`bootstrap`). Deciding requests with them is `crate::authz`'s job; serving them as
//! kinds is the API server's.

pub mod bootstrap;
pub mod rules;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

pub use rules::PolicyRule;

pub const GROUP: &str = "rbac.authorization.k8s.io";
/// Bootstrap objects with this annotation `"true"` are reconciled at every start.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Who a binding grants its role to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    #[serde(default, deserialize_with = "null_as_default")]
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub api_group: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub namespace: String,
}

/// The role a binding grants.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    #[serde(default, deserialize_with = "null_as_default")]
    pub api_group: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

/// The parts of a stored Role or ClusterRole authorization reads.
#[derive(Clone, Debug, Default)]
pub struct RoleObject {
    pub namespace: String,
    pub name: String,
    pub labels: Map<String, Value>,
    pub rules: Vec<PolicyRule>,
    /// `aggregationRule.clusterRoleSelectors` of a ClusterRole that has one.
    pub aggregation: Option<Vec<Value>>,
}

/// The parts of a stored RoleBinding or ClusterRoleBinding authorization reads.
#[derive(Clone, Debug, Default)]
pub struct BindingObject {
    pub namespace: String,
    pub name: String,
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
}

/// `metadata.<field>` of a stored object, empty when unset.
pub(crate) fn metadata_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn parse_list<T: for<'de> Deserialize<'de>>(value: Option<&Value>) -> Vec<T> {
    match value {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|item| serde_json::from_value(item.clone()).ok())
            .collect(),
        _ => Vec::new(),
    }
}

impl RoleObject {
    pub fn from_json(obj: &Value) -> RoleObject {
        RoleObject {
            namespace: metadata_str(obj, "namespace").to_string(),
            name: metadata_str(obj, "name").to_string(),
            labels: obj
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            rules: parse_list(obj.get("rules")),
            aggregation: obj
                .get("aggregationRule")
                .filter(|a| a.is_object())
                .map(|a| match a.get("clusterRoleSelectors") {
                    Some(Value::Array(selectors)) => selectors.clone(),
                    _ => Vec::new(),
                }),
        }
    }
}

impl BindingObject {
    pub fn from_json(obj: &Value) -> BindingObject {
        BindingObject {
            namespace: metadata_str(obj, "namespace").to_string(),
            name: metadata_str(obj, "name").to_string(),
            role_ref: obj
                .get("roleRef")
                .and_then(|r| serde_json::from_value(r.clone()).ok())
                .unwrap_or_default(),
            subjects: parse_list(obj.get("subjects")),
        }
    }
}

/// The user name of a ServiceAccount (`system:serviceaccount:NS:NAME`).
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}
