//! One consistent view of every role and binding, compiled for the questions asked on
//! every request: the bindings of a subject are found by hash lookups (by user name and
//! by group, cluster-wide and per namespace), and each binding holds its role's rules,
//! already resolved (aggregated ClusterRoles included).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use apimachinery::meta_validation::go_quote;
use serde_json::Value;

use crate::authn::UserInfo;
use crate::rbac::{service_account_user, BindingObject, PolicyRule, RoleObject, Subject};

use super::Attributes;

/// A binding, compiled.
pub(super) struct Binding {
    pub object: BindingObject,
    /// The rules of the role it refers to, or the error kube's resolver reports.
    pub rules: Result<Arc<Vec<PolicyRule>>, String>,
}

/// Which bindings name a subject: by user name (ServiceAccounts as their user names)
/// and by group.
#[derive(Default)]
struct SubjectIndex {
    users: HashMap<String, Vec<usize>>,
    groups: HashMap<String, Vec<usize>>,
}

impl SubjectIndex {
    fn add(&mut self, subject: &Subject, binding_namespace: &str, index: usize) {
        match subject.kind.as_str() {
            "User" => self
                .users
                .entry(subject.name.clone())
                .or_default()
                .push(index),
            "Group" => self
                .groups
                .entry(subject.name.clone())
                .or_default()
                .push(index),
            "ServiceAccount" => {
                let namespace = if subject.namespace.is_empty() {
                    binding_namespace
                } else {
                    &subject.namespace
                };
                if !namespace.is_empty() {
                    self.users
                        .entry(service_account_user(namespace, &subject.name))
                        .or_default()
                        .push(index);
                }
            }
            _ => {}
        }
    }

    /// The indexes of the bindings naming `user` (a binding naming it twice is listed
    /// twice; checking it again is harmless).
    fn of<'a>(&'a self, user: &'a UserInfo) -> impl Iterator<Item = usize> + 'a {
        let by_name = self.users.get(&user.name).into_iter().flatten();
        let by_group = user
            .groups
            .iter()
            .filter_map(|g| self.groups.get(g))
            .flatten();
        by_name.chain(by_group).copied()
    }
}

/// A scope's bindings and their index.
#[derive(Default)]
struct Scope {
    bindings: Vec<Binding>,
    index: SubjectIndex,
}

impl Scope {
    fn push(&mut self, binding: Binding) {
        let i = self.bindings.len();
        for subject in &binding.object.subjects {
            self.index.add(subject, &binding.object.namespace, i);
        }
        self.bindings.push(binding);
    }
}

/// Where an allowing rule came from, for `RBAC: allowed by ...`.
pub(super) struct Source<'a> {
    pub binding: &'a BindingObject,
    pub cluster: bool,
}

impl Source<'_> {
    /// kube's binding describer: `ClusterRoleBinding "b" of ClusterRole "r" to Group "g"`.
    pub fn describe(&self, user: &UserInfo) -> String {
        let b = self.binding;
        let subject = b
            .subjects
            .iter()
            .find(|s| applies_to(user, s, &b.namespace))
            .map(|s| match s.kind.as_str() {
                "ServiceAccount" => {
                    let ns = if s.namespace.is_empty() {
                        &b.namespace
                    } else {
                        &s.namespace
                    };
                    format!("{} {}", s.kind, go_quote(&format!("{}/{ns}", s.name)))
                }
                _ => format!("{} {}", s.kind, go_quote(&s.name)),
            })
            .unwrap_or_default();
        if self.cluster {
            format!(
                "ClusterRoleBinding {} of {} {} to {subject}",
                go_quote(&b.name),
                b.role_ref.kind,
                go_quote(&b.role_ref.name)
            )
        } else {
            format!(
                "RoleBinding {} of {} {} to {subject}",
                go_quote(&format!("{}/{}", b.name, b.namespace)),
                b.role_ref.kind,
                go_quote(&b.role_ref.name)
            )
        }
    }
}

fn applies_to(user: &UserInfo, subject: &Subject, binding_namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user.name,
        "Group" => user.in_group(&subject.name),
        "ServiceAccount" => {
            let ns = if subject.namespace.is_empty() {
                binding_namespace
            } else {
                &subject.namespace
            };
            !ns.is_empty() && service_account_user(ns, &subject.name) == user.name
        }
        _ => false,
    }
}

/// Every role and binding at one store revision, compiled.
#[derive(Default)]
pub struct Snapshot {
    pub revision: i64,
    cluster_roles: HashMap<String, Arc<Vec<PolicyRule>>>,
    roles: HashMap<(String, String), Arc<Vec<PolicyRule>>>,
    cluster: Scope,
    namespaces: HashMap<String, Scope>,
    /// The rules each aggregated ClusterRole should hold, against what it holds.
    pub aggregated: BTreeMap<String, (Vec<PolicyRule>, Vec<PolicyRule>)>,
}

/// What the store holds under `/registry/rbac.authorization.k8s.io/`, by key.
pub type Objects = BTreeMap<String, Value>;

/// `clusterroles`, `roles`, ... from a key.
pub(super) fn kind_of(key: &str) -> Option<&str> {
    key.strip_prefix("/registry/rbac.authorization.k8s.io/")?
        .split('/')
        .next()
}

/// The rules of aggregated ClusterRole `name`: those of every other ClusterRole one of
/// its selectors matches, in name order, without repeats (the aggregation controller's
/// result once it has settled, also for roles aggregating aggregated roles).
fn aggregate(
    name: &str,
    all: &BTreeMap<String, RoleObject>,
    done: &mut HashMap<String, Vec<PolicyRule>>,
    visiting: &mut Vec<String>,
) -> Vec<PolicyRule> {
    if let Some(rules) = done.get(name) {
        return rules.clone();
    }
    let Some(role) = all.get(name) else {
        return Vec::new();
    };
    let Some(selectors) = &role.aggregation else {
        return role.rules.clone();
    };
    if visiting.iter().any(|v| v == name) {
        // A cycle: take what is stored, as the controller would read it.
        return role.rules.clone();
    }
    visiting.push(name.to_string());
    let mut out: Vec<PolicyRule> = Vec::new();
    for selector in selectors {
        let Ok(selector) =
            apimachinery::selector::LabelSelector::from_label_selector_json(selector)
        else {
            continue;
        };
        for (other, candidate) in all {
            if other == name || !selector.matches(&candidate.labels) {
                continue;
            }
            for rule in aggregate(other, all, done, visiting) {
                if !out.contains(&rule) {
                    out.push(rule);
                }
            }
        }
    }
    visiting.pop();
    done.insert(name.to_string(), out.clone());
    out
}

impl Snapshot {
    pub fn build(objects: &Objects, revision: i64) -> Snapshot {
        let mut cluster_objects: BTreeMap<String, RoleObject> = BTreeMap::new();
        let mut roles = HashMap::new();
        let mut bindings = Vec::new();
        let mut cluster_bindings = Vec::new();
        for (key, obj) in objects {
            match kind_of(key) {
                Some("clusterroles") => {
                    let role = RoleObject::from_json(obj);
                    cluster_objects.insert(role.name.clone(), role);
                }
                Some("roles") => {
                    let role = RoleObject::from_json(obj);
                    roles.insert((role.namespace, role.name), Arc::new(role.rules));
                }
                Some("rolebindings") => bindings.push(BindingObject::from_json(obj)),
                Some("clusterrolebindings") => cluster_bindings.push(BindingObject::from_json(obj)),
                _ => {}
            }
        }
        let mut done = HashMap::new();
        let mut aggregated = BTreeMap::new();
        let mut cluster_roles = HashMap::new();
        for (name, role) in &cluster_objects {
            let rules = aggregate(name, &cluster_objects, &mut done, &mut Vec::new());
            if role.aggregation.is_some() {
                aggregated.insert(name.clone(), (rules.clone(), role.rules.clone()));
            }
            cluster_roles.insert(name.clone(), Arc::new(rules));
        }
        let mut snapshot = Snapshot {
            revision,
            cluster_roles,
            roles,
            aggregated,
            ..Default::default()
        };
        for object in cluster_bindings {
            let rules = snapshot.role_ref_rules(&object.role_ref.kind, &object.role_ref.name, "");
            snapshot.cluster.push(Binding { object, rules });
        }
        for object in bindings {
            let rules = snapshot.role_ref_rules(
                &object.role_ref.kind,
                &object.role_ref.name,
                &object.namespace,
            );
            snapshot
                .namespaces
                .entry(object.namespace.clone())
                .or_default()
                .push(Binding { object, rules });
        }
        snapshot
    }

    /// `GetRoleReferenceRules`: the rules of a binding's role, or the lister's NotFound
    /// text (`clusterrole.rbac.authorization.k8s.io "x" not found`).
    pub fn role_ref_rules(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
    ) -> Result<Arc<Vec<PolicyRule>>, String> {
        match kind {
            "ClusterRole" => {
                self.cluster_roles.get(name).cloned().ok_or_else(|| {
                    format!("clusterrole.rbac.authorization.k8s.io {name:?} not found")
                })
            }
            "Role" => self
                .roles
                .get(&(namespace.to_string(), name.to_string()))
                .cloned()
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io {name:?} not found")),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    /// Calls `visit` with every rule that applies to `user` in `namespace` (cluster-wide
    /// bindings first, then the namespace's), and with every resolution error; stops when
    /// it returns false.
    pub(super) fn visit<'a>(
        &'a self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(Option<(&'a PolicyRule, Source<'a>)>, Option<&'a str>) -> bool,
    ) {
        let scopes = std::iter::once((&self.cluster, true)).chain(
            (!namespace.is_empty())
                .then(|| self.namespaces.get(namespace))
                .flatten()
                .map(|s| (s, false)),
        );
        for (scope, cluster) in scopes {
            for i in scope.index.of(user) {
                let binding = &scope.bindings[i];
                match &binding.rules {
                    Ok(rules) => {
                        for rule in rules.iter() {
                            let source = Source {
                                binding: &binding.object,
                                cluster,
                            };
                            if !visit(Some((rule, source)), None) {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        if !visit(None, Some(e)) {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Whether some rule for `user` allows `attrs`; else the resolution errors met.
    pub(super) fn allows<'a>(
        &'a self,
        user: &UserInfo,
        attrs: &Attributes,
    ) -> Result<Option<Source<'a>>, Vec<&'a str>> {
        let mut allowed = None;
        let mut errors = Vec::new();
        self.visit(user, attrs.namespace(), |rule, error| {
            if let Some((rule, source)) = rule {
                if attrs.allowed_by(rule) {
                    allowed = Some(source);
                    return false;
                }
            }
            if let Some(e) = error {
                errors.push(e);
            }
            true
        });
        match allowed {
            Some(source) => Ok(Some(source)),
            None => Err(errors),
        }
    }

    /// Every rule for `user` in `namespace`, and the resolution errors.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        self.visit(user, namespace, |rule, error| {
            if let Some((rule, _)) = rule {
                rules.push(rule.clone());
            }
            if let Some(e) = error {
                errors.push(e.to_string());
            }
            true
        });
        (rules, errors)
    }
}
