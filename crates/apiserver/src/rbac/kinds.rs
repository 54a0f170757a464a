//! The four RBAC kinds as registrations: names, printer columns, schemas, defaulting and
//! kube-apiserver's validation (`pkg/apis/rbac/validation`) with its messages.

use apimachinery::field::{self, FieldError};
use apimachinery::meta_validation::{go_quote, go_string_slice, NameRule};
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use apimachinery::table::AGE_COLUMN_DESCRIPTION;
use serde_json::{json, Value};

use crate::registry::{Admission, ResourceHooks};
use access::rbac::{RoleRef, GROUP};

const ROLE_REF_DESCRIPTION: &str = "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";

const ROLE_COLUMNS: &[PrinterColumn] = &[PrinterColumn {
    name: "Created At",
    column_type: "date",
    json_path: ".metadata.creationTimestamp",
    description: AGE_COLUMN_DESCRIPTION,
    priority: 0,
}];

const BINDING_COLUMNS: &[PrinterColumn] = &[
    PrinterColumn {
        name: "Role",
        column_type: "string",
        json_path: ".roleRef.name",
        description: ROLE_REF_DESCRIPTION,
        priority: 0,
    },
    PrinterColumn::AGE,
    PrinterColumn {
        name: "Users",
        column_type: "string",
        json_path: ".subjects",
        description: "Users in the roleBinding",
        priority: 1,
    },
    PrinterColumn {
        name: "Groups",
        column_type: "string",
        json_path: ".subjects",
        description: "Groups in the roleBinding",
        priority: 1,
    },
    PrinterColumn {
        name: "ServiceAccounts",
        column_type: "string",
        json_path: ".subjects",
        description: "ServiceAccounts in the roleBinding",
        priority: 1,
    },
];

pub static ROLE: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "Role",
    list_kind: "RoleList",
    plural: "roles",
    singular: "role",
    short_names: &[],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: ROLE_COLUMNS,
    schema_name: "io.k8s.api.rbac.v1.Role",
};

pub static CLUSTER_ROLE: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "ClusterRole",
    list_kind: "ClusterRoleList",
    plural: "clusterroles",
    singular: "clusterrole",
    short_names: &[],
    categories: &[],
    namespaced: false,
    status_subresource: false,
    printer_columns: ROLE_COLUMNS,
    schema_name: "io.k8s.api.rbac.v1.ClusterRole",
};

pub static ROLE_BINDING: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "RoleBinding",
    list_kind: "RoleBindingList",
    plural: "rolebindings",
    singular: "rolebinding",
    short_names: &[],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: BINDING_COLUMNS,
    schema_name: "io.k8s.api.rbac.v1.RoleBinding",
};

pub static CLUSTER_ROLE_BINDING: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "ClusterRoleBinding",
    list_kind: "ClusterRoleBindingList",
    plural: "clusterrolebindings",
    singular: "clusterrolebinding",
    short_names: &[],
    categories: &[],
    namespaced: false,
    status_subresource: false,
    printer_columns: BINDING_COLUMNS,
    schema_name: "io.k8s.api.rbac.v1.ClusterRoleBinding",
};

/// The RBAC kinds with the hooks that govern their writes.
pub fn registrations() -> Vec<(&'static ResourceInfo, Box<dyn ResourceHooks>)> {
    vec![
        (&ROLE, Box::new(RoleHooks { namespaced: true })),
        (&CLUSTER_ROLE, Box::new(RoleHooks { namespaced: false })),
        (&ROLE_BINDING, Box::new(BindingHooks { namespaced: true })),
        (
            &CLUSTER_ROLE_BINDING,
            Box::new(BindingHooks { namespaced: false }),
        ),
    ]
}

/// Whether a group and plural name an RBAC kind (whose writes are escalation-checked).
pub fn is_rbac(group: &str, plural: &str) -> bool {
    group == GROUP
        && matches!(
            plural,
            "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings"
        )
}

/// The cells kube-apiserver's RBAC printers compute: the creation time itself (not an
/// age) for roles, `Kind/name` of the role and the subjects by kind for bindings.
pub fn computed_cell(column: &str, obj: &Value, read: Value) -> Value {
    let subjects = || -> Vec<&Value> {
        obj.get("subjects")
            .and_then(Value::as_array)
            .map(|s| s.iter().collect())
            .unwrap_or_default()
    };
    let text = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    let of_kind = |kind: &str| -> Value {
        let names: Vec<String> = subjects()
            .into_iter()
            .filter(|s| s.get("kind").and_then(Value::as_str) == Some(kind))
            .map(|s| match kind {
                "ServiceAccount" => format!("{}/{}", text(s, "namespace"), text(s, "name")),
                _ => text(s, "name"),
            })
            .collect();
        json!(names.join(", "))
    };
    match column {
        "Created At" => obj
            .pointer("/metadata/creationTimestamp")
            .cloned()
            .unwrap_or(Value::Null),
        "Role" => {
            let role = obj.get("roleRef").unwrap_or(&Value::Null);
            json!(format!("{}/{}", text(role, "kind"), text(role, "name")))
        }
        "Users" => of_kind("User"),
        "Groups" => of_kind("Group"),
        "ServiceAccounts" => of_kind("ServiceAccount"),
        _ => read,
    }
}

fn strings_at(obj: &Value, field: &str) -> Vec<String> {
    obj.get(field)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `ValidatePolicyRule`.
fn rule_errors(rule: &Value, namespaced: bool, path: &str, errors: &mut Vec<FieldError>) {
    let verbs = strings_at(rule, "verbs");
    let groups = strings_at(rule, "apiGroups");
    let resources = strings_at(rule, "resources");
    let names = strings_at(rule, "resourceNames");
    let urls = strings_at(rule, "nonResourceURLs");
    if verbs.is_empty() {
        errors.push(FieldError::required(
            field::child(path, "verbs"),
            "verbs must contain at least one value",
        ));
    }
    let invalid_urls = |detail: &str| FieldError {
        kind: apimachinery::field::ErrorType::Invalid,
        field: field::child(path, "nonResourceURLs"),
        value: None,
        detail: format!("{}: {detail}", go_string_slice(&urls)),
        verbatim: false,
    };
    if !urls.is_empty() {
        if namespaced {
            errors.push(invalid_urls(
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if !groups.is_empty() || !resources.is_empty() || !names.is_empty() {
            errors.push(invalid_urls(
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if groups.is_empty() {
        errors.push(FieldError::required(
            field::child(path, "apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if resources.is_empty() {
        errors.push(FieldError::required(
            field::child(path, "resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

fn path_segment_errors(value: &str) -> Vec<String> {
    if value == "." || value == ".." {
        return vec![format!("may not be '{value}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|c| value.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

pub struct RoleHooks {
    namespaced: bool,
}

impl RoleHooks {
    fn errors(&self, obj: &Value) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if let Some(rules) = obj.get("rules").and_then(Value::as_array) {
            for (i, rule) in rules.iter().enumerate() {
                rule_errors(
                    rule,
                    self.namespaced,
                    &field::index("rules", i),
                    &mut errors,
                );
            }
        }
        if !self.namespaced {
            if let Some(rule) = obj.get("aggregationRule").filter(|r| r.is_object()) {
                let selectors = rule
                    .get("clusterRoleSelectors")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if selectors.is_empty() {
                    errors.push(FieldError::required(
                        "aggregationRule.clusterRoleSelectors",
                        "at least one clusterRoleSelector required if aggregationRule is non-nil",
                    ));
                }
                for (i, selector) in selectors.iter().enumerate() {
                    if let Err(message) =
                        apimachinery::selector::LabelSelector::from_label_selector_json(selector)
                    {
                        errors.push(FieldError::invalid(
                            field::index("aggregationRule.clusterRoleSelectors", i),
                            selector.clone(),
                            message,
                        ));
                    }
                }
            }
        }
        errors
    }
}

impl ResourceHooks for RoleHooks {
    fn allows_unconditional_update(&self) -> bool {
        true
    }
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }
    fn validate_create(&self, obj: &Value) -> Admission {
        admission(self.errors(obj))
    }
    fn validate_update(&self, _old: &Value, new: &Value, _privileged: bool) -> Admission {
        admission(self.errors(new))
    }
}

fn admission(errors: Vec<FieldError>) -> Admission {
    Admission {
        errors,
        warnings: Vec::new(),
    }
}

pub struct BindingHooks {
    namespaced: bool,
}

/// `SetDefaults_Subject` and the binding defaults: User and Group subjects and the role
/// reference are in the RBAC group unless they say otherwise.
fn default_binding(obj: &mut Value) {
    if let Some(role_ref) = obj.get_mut("roleRef").and_then(Value::as_object_mut) {
        if role_ref
            .get("apiGroup")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            role_ref.insert("apiGroup".into(), json!(GROUP));
        }
    }
    if let Some(subjects) = obj.get_mut("subjects").and_then(Value::as_array_mut) {
        for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
            let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
            let empty = subject
                .get("apiGroup")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if empty && matches!(kind, "User" | "Group") {
                subject.insert("apiGroup".into(), json!(GROUP));
            }
        }
    }
}

impl BindingHooks {
    fn errors(&self, obj: &Value) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let role_ref: RoleRef = obj
            .get("roleRef")
            .and_then(|r| serde_json::from_value(r.clone()).ok())
            .unwrap_or_default();
        if role_ref.api_group != GROUP {
            errors.push(FieldError::not_supported(
                "roleRef.apiGroup",
                role_ref.api_group.clone(),
                &[GROUP],
            ));
        }
        let kinds: &[&str] = if self.namespaced {
            &["Role", "ClusterRole"]
        } else {
            &["ClusterRole"]
        };
        if !kinds.contains(&role_ref.kind.as_str()) {
            errors.push(FieldError::not_supported(
                "roleRef.kind",
                role_ref.kind.clone(),
                kinds,
            ));
        }
        if role_ref.name.is_empty() {
            errors.push(FieldError::required("roleRef.name", ""));
        } else {
            for message in path_segment_errors(&role_ref.name) {
                errors.push(FieldError::invalid(
                    "roleRef.name",
                    role_ref.name.clone(),
                    message,
                ));
            }
        }
        let subjects = obj
            .get("subjects")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, subject) in subjects.iter().enumerate() {
            let path = field::index("subjects", i);
            let text = |f: &str| subject.get(f).and_then(Value::as_str).unwrap_or("");
            let (kind, name, group) = (text("kind"), text("name"), text("apiGroup"));
            if name.is_empty() {
                errors.push(FieldError::required(field::child(&path, "name"), ""));
            }
            match kind {
                "ServiceAccount" => {
                    if !name.is_empty() {
                        for message in apimachinery::meta_validation::is_dns1123_subdomain(name) {
                            errors.push(FieldError::invalid(
                                field::child(&path, "name"),
                                name,
                                message,
                            ));
                        }
                    }
                    if !group.is_empty() {
                        errors.push(FieldError::not_supported(
                            field::child(&path, "apiGroup"),
                            group,
                            &[""],
                        ));
                    }
                    if !self.namespaced && text("namespace").is_empty() {
                        errors.push(FieldError::required(field::child(&path, "namespace"), ""));
                    }
                }
                "User" | "Group" => {
                    if group != GROUP {
                        errors.push(FieldError::not_supported(
                            field::child(&path, "apiGroup"),
                            group,
                            &[GROUP],
                        ));
                    }
                }
                other => errors.push(FieldError::not_supported(
                    field::child(&path, "kind"),
                    other,
                    &["ServiceAccount", "User", "Group"],
                )),
            }
        }
        errors
    }
}

/// Go's `%#v` of an `rbac.RoleRef`.
fn go_role_ref(role_ref: &RoleRef) -> String {
    format!(
        "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
        go_quote(&role_ref.api_group),
        go_quote(&role_ref.kind),
        go_quote(&role_ref.name)
    )
}

impl ResourceHooks for BindingHooks {
    fn allows_unconditional_update(&self) -> bool {
        true
    }
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }
    /// Defaults are part of decoding, as for kube's built-in kinds: an update that only
    /// omits a defaulted field is no change.
    fn decode(&self, obj: &mut Value) -> Result<(), apimachinery::status::Status> {
        default_binding(obj);
        Ok(())
    }
    fn validate_create(&self, obj: &Value) -> Admission {
        admission(self.errors(obj))
    }
    fn validate_update(&self, old: &Value, new: &Value, _privileged: bool) -> Admission {
        let mut errors = self.errors(new);
        let role_ref = |o: &Value| -> RoleRef {
            o.get("roleRef")
                .and_then(|r| serde_json::from_value(r.clone()).ok())
                .unwrap_or_default()
        };
        let (before, after) = (role_ref(old), role_ref(new));
        if before != after {
            errors.push(FieldError {
                kind: apimachinery::field::ErrorType::Invalid,
                field: "roleRef".into(),
                value: None,
                detail: format!("{}: cannot change roleRef", go_role_ref(&after)),
                verbatim: false,
            });
        }
        admission(errors)
    }
}

fn string_list(description: &str) -> Value {
    json!({"type": "array", "description": description, "items": {"type": "string", "default": ""},
           "x-kubernetes-list-type": "atomic"})
}

/// OpenAPI schemas of the RBAC kinds, in kube-apiserver's components naming.
pub fn schemas() -> Value {
    let meta = json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "default": {}});
    let list_meta = json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta", "default": {}});
    let type_meta = |kind: &str| {
        json!({
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
            "kind": {"type": "string", "description": format!("Kind is a string value representing the REST resource this object represents: {kind}.")},
        })
    };
    let with = |mut base: Value, extra: Value| {
        if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
            b.extend(e);
        }
        base
    };
    let rule_ref =
        json!({"$ref": "#/components/schemas/io.k8s.api.rbac.v1.PolicyRule", "default": {}});
    let rules = json!({"type": "array", "description": "Rules holds all the PolicyRules for this role",
                       "items": rule_ref, "x-kubernetes-list-type": "atomic"});
    let subjects = json!({"type": "array", "description": "Subjects holds references to the objects the role applies to.",
        "items": {"$ref": "#/components/schemas/io.k8s.api.rbac.v1.Subject", "default": {}},
        "x-kubernetes-list-type": "atomic"});
    let role_ref = json!({"description": ROLE_REF_DESCRIPTION, "default": {},
        "allOf": [{"$ref": "#/components/schemas/io.k8s.api.rbac.v1.RoleRef"}]});
    let gvk = |kind: &str| json!([{"group": GROUP, "kind": kind, "version": "v1"}]);
    let root = |kind: &str, description: &str, properties: Value| {
        json!({"type": "object", "description": description, "x-kubernetes-group-version-kind": gvk(kind),
               "properties": with(type_meta(kind), properties)})
    };
    let list = |item: &str| {
        json!({"type": "object", "description": format!("{item}List is a collection of {item}s"),
               "required": ["items"], "x-kubernetes-group-version-kind": gvk(&format!("{item}List")),
               "properties": with(type_meta(&format!("{item}List")), json!({
                   "metadata": list_meta.clone(),
                   "items": {"type": "array", "description": format!("Items is a list of {item}s"),
                             "items": {"$ref": format!("#/components/schemas/io.k8s.api.rbac.v1.{item}"), "default": {}}}}))})
    };
    let selector = json!({"type": "object", "description": "A label query over a set of resources.",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
            "matchExpressions": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "object",
                "required": ["key", "operator"], "properties": {
                    "key": {"type": "string", "default": ""},
                    "operator": {"type": "string", "default": ""},
                    "values": string_list("An array of string values.")}}}},
        "x-kubernetes-map-type": "atomic"});
    json!({
        "io.k8s.api.rbac.v1.PolicyRule": {
            "type": "object",
            "description": "PolicyRule holds information that describes a policy rule, but does not contain information about who the rule applies to or which namespace the rule applies to.",
            "required": ["verbs"],
            "properties": {
                "verbs": string_list("Verbs is a list of Verbs that apply to ALL the ResourceKinds contained in this rule. '*' represents all verbs."),
                "apiGroups": string_list("APIGroups is the name of the APIGroup that contains the resources. If multiple API groups are specified, any action requested against one of the enumerated resources in any API group will be allowed. \"\" represents the core API group and \"*\" represents all API groups."),
                "resources": string_list("Resources is a list of resources this rule applies to. '*' represents all resources."),
                "resourceNames": string_list("ResourceNames is an optional white list of names that the rule applies to.  An empty set means that everything is allowed."),
                "nonResourceURLs": string_list("NonResourceURLs is a set of partial urls that a user should have access to.  *s are allowed, but only as the full, final step in the path Since non-resource URLs are not namespaced, this field is only applicable for ClusterRoles referenced from a ClusterRoleBinding. Rules can either apply to API resources (such as \"pods\" or \"secrets\") or non-resource URL paths (such as \"/api\"),  but not both.")
            }
        },
        "io.k8s.api.rbac.v1.Subject": {
            "type": "object",
            "description": "Subject contains a reference to the object or user identities a role binding applies to.  This can either hold a direct API object reference, or a value for non-objects such as user and group names.",
            "required": ["kind", "name"],
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "kind": {"type": "string", "default": "", "description": "Kind of object being referenced. Values defined by this API group are \"User\", \"Group\", and \"ServiceAccount\". If the Authorizer does not recognized the kind value, the Authorizer should report an error."},
                "apiGroup": {"type": "string", "description": "APIGroup holds the API group of the referenced subject. Defaults to \"\" for ServiceAccount subjects. Defaults to \"rbac.authorization.k8s.io\" for User and Group subjects."},
                "name": {"type": "string", "default": "", "description": "Name of the object being referenced."},
                "namespace": {"type": "string", "description": "Namespace of the referenced object.  If the object kind is non-namespace, such as \"User\" or \"Group\", and this value is not empty the Authorizer should report an error."}
            }
        },
        "io.k8s.api.rbac.v1.RoleRef": {
            "type": "object",
            "description": "RoleRef contains information that points to the role being used",
            "required": ["apiGroup", "kind", "name"],
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "apiGroup": {"type": "string", "default": "", "description": "APIGroup is the group for the resource being referenced"},
                "kind": {"type": "string", "default": "", "description": "Kind is the type of resource being referenced"},
                "name": {"type": "string", "default": "", "description": "Name is the name of resource being referenced"}
            }
        },
        "io.k8s.api.rbac.v1.AggregationRule": {
            "type": "object",
            "description": "AggregationRule describes how to locate ClusterRoles to aggregate into the ClusterRole",
            "properties": {
                "clusterRoleSelectors": {"type": "array", "x-kubernetes-list-type": "atomic",
                    "description": "ClusterRoleSelectors holds a list of selectors which will be used to find ClusterRoles and create the rules. If any of the selectors match, then the ClusterRole's permissions will be added",
                    "items": selector}
            }
        },
        "io.k8s.api.rbac.v1.Role": root("Role",
            "Role is a namespaced, logical grouping of PolicyRules that can be referenced as a unit by a RoleBinding.",
            json!({"metadata": meta.clone(), "rules": rules.clone()})),
        "io.k8s.api.rbac.v1.ClusterRole": root("ClusterRole",
            "ClusterRole is a cluster level, logical grouping of PolicyRules that can be referenced as a unit by a RoleBinding or ClusterRoleBinding.",
            json!({"metadata": meta.clone(), "rules": rules,
                   "aggregationRule": {"description": "AggregationRule is an optional field that describes how to build the Rules for this ClusterRole. If AggregationRule is set, then the Rules are controller managed and direct changes to Rules will be stomped by the controller.",
                                       "allOf": [{"$ref": "#/components/schemas/io.k8s.api.rbac.v1.AggregationRule"}]}})),
        "io.k8s.api.rbac.v1.RoleBinding": with(root("RoleBinding",
            "RoleBinding references a role, but does not contain it.  It can reference a Role in the same namespace or a ClusterRole in the global namespace. It adds who information via Subjects and namespace information by which namespace it exists in.  RoleBindings in a given namespace only have effect in that namespace.",
            json!({"metadata": meta.clone(), "subjects": subjects.clone(), "roleRef": role_ref.clone()})),
            json!({"required": ["roleRef"]})),
        "io.k8s.api.rbac.v1.ClusterRoleBinding": with(root("ClusterRoleBinding",
            "ClusterRoleBinding references a ClusterRole, but not contain it.  It can reference a ClusterRole in the global namespace, and adds who information via Subject.",
            json!({"metadata": meta, "subjects": subjects, "roleRef": role_ref})),
            json!({"required": ["roleRef"]})),
        "io.k8s.api.rbac.v1.RoleList": list("Role"),
        "io.k8s.api.rbac.v1.ClusterRoleList": list("ClusterRole"),
        "io.k8s.api.rbac.v1.RoleBindingList": list("RoleBinding"),
        "io.k8s.api.rbac.v1.ClusterRoleBindingList": list("ClusterRoleBinding"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(FieldError::message).collect()
    }

    #[test]
    fn rules_are_validated_as_upstream() {
        let role = RoleHooks { namespaced: true };
        let bad = json!({"rules": [
            {"verbs": [], "resources": ["pods"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz"], "apiGroups": [""]},
        ]});
        assert_eq!(
            messages(&role.errors(&bad)),
            [
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
                "rules[1].nonResourceURLs: Invalid value: []string{\"/healthz\"}: rules cannot apply to both regular resources and non-resource URLs",
            ]
        );
        let cluster = RoleHooks { namespaced: false };
        assert!(cluster
            .errors(&json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}))
            .is_empty());
        assert_eq!(
            messages(&cluster.errors(&json!({"aggregationRule": {}}))),
            ["aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"]
        );
    }

    #[test]
    fn bindings_are_defaulted_and_validated() {
        let hooks = BindingHooks { namespaced: true };
        let mut binding = json!({"roleRef": {"kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "sa"}]});
        hooks.decode(&mut binding).unwrap();
        assert_eq!(binding["roleRef"]["apiGroup"], GROUP);
        assert_eq!(binding["subjects"][0]["apiGroup"], GROUP);
        assert!(binding["subjects"][1].get("apiGroup").is_none());
        assert!(hooks.errors(&binding).is_empty());
        let bad = json!({"roleRef": {"apiGroup": "x", "kind": "Pod", "name": ""},
            "subjects": [{"kind": "Robot", "name": "r"}, {"kind": "Group", "apiGroup": GROUP}]});
        assert_eq!(
            messages(&hooks.errors(&bad)),
            [
                "roleRef.apiGroup: Unsupported value: \"x\": supported values: \"rbac.authorization.k8s.io\"",
                "roleRef.kind: Unsupported value: \"Pod\": supported values: \"Role\", \"ClusterRole\"",
                "roleRef.name: Required value",
                "subjects[0].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                "subjects[1].name: Required value",
            ]
        );
        let cluster = BindingHooks { namespaced: false };
        let role = json!({"roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa"}]});
        assert_eq!(
            messages(&cluster.errors(&role)),
            [
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].namespace: Required value",
            ]
        );
        let mut changed = binding.clone();
        changed["roleRef"]["name"] = json!("view");
        assert_eq!(
            messages(&hooks.validate_update(&binding, &changed, false).errors),
            ["roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"view\"}: cannot change roleRef"]
        );
    }

    #[test]
    fn printed_cells() {
        let binding = json!({"roleRef": {"kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"},
                         {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]});
        assert_eq!(
            computed_cell("Role", &binding, Value::Null),
            "ClusterRole/edit"
        );
        assert_eq!(computed_cell("Users", &binding, Value::Null), "alice, bob");
        assert_eq!(computed_cell("Groups", &binding, Value::Null), "");
        assert_eq!(
            computed_cell("ServiceAccounts", &binding, Value::Null),
            "ns/sa"
        );
    }
}
