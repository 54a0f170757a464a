//! Namespaces: the scope of names, with kube-apiserver's lifecycle (the system
//! namespaces are immortal; a deleted namespace is Terminating until emptied).

use apimachinery::resource::{PrinterColumn, ResourceInfo};
use serde_json::{json, Value};

use apimachinery::meta_validation::NameRule;

use crate::registry::ResourceHooks;

pub static NAMESPACE: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Namespace",
    list_kind: "NamespaceList",
    plural: "namespaces",
    singular: "namespace",
    short_names: &["ns"],
    categories: &[],
    namespaced: false,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn {
            name: "Status",
            column_type: "string",
            json_path: ".status.phase",
            description: "The phase of the namespace",
            priority: 0,
        },
        PrinterColumn::AGE,
    ],
    schema_name: "io.k8s.api.core.v1.Namespace",
};

/// Namespaces that always exist and may not be deleted.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// Namespaces an installation of KubeVirt brings (its configuration object lives in
/// `kubevirt`): created at start, but not protected like the system ones.
pub const INSTALL_NAMESPACES: [&str; 1] = ["kubevirt"];

pub struct NamespaceHooks;

impl ResourceHooks for NamespaceHooks {
    fn default_on_create(&self, obj: &mut Value) {
        let name = crate::object::name(obj).to_string();
        let meta = crate::object::meta_mut(obj);
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
        if let Some(root) = obj.as_object_mut() {
            root.insert("spec".into(), json!({"finalizers": ["kubernetes"]}));
            root.insert("status".into(), json!({"phase": "Active"}));
        }
    }
    /// Upstream's namespace strategy keeps the name label on every update, whatever
    /// the client sent (e.g. `kubectl apply` dropping all labels).
    fn default_on_update(&self, obj: &mut Value) {
        let name = crate::object::name(obj).to_string();
        let meta = crate::object::meta_mut(obj);
        if !meta.get("labels").is_some_and(Value::is_object) {
            meta.insert("labels".into(), json!({}));
        }
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
    }
    /// A namespace's name is a DNS label: it becomes part of DNS names.
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }
    /// NamespaceLifecycle admission: the system namespaces are immortal.
    fn refuse_delete(&self, name: &str) -> Option<&'static str> {
        SYSTEM_NAMESPACES
            .contains(&name)
            .then_some("this namespace may not be deleted")
    }
    /// The garbage collector deletes a terminating namespace's content, then the namespace.
    fn removed_by_controller(&self) -> bool {
        true
    }
    fn on_deletion_marked(&self, obj: &mut Value) {
        if let Some(root) = obj.as_object_mut() {
            root.insert("status".into(), json!({"phase": "Terminating"}));
        }
    }
}

/// OpenAPI schemas of Namespace and NamespaceList.
pub fn schemas() -> Value {
    json!({
        "io.k8s.api.core.v1.Namespace": {
            "type": "object",
            "description": "Namespace provides a scope for names.",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Namespace", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string", "description": "The versioned schema of this representation of an object."},
                "kind": {"type": "string", "description": "The REST resource this object represents."},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                "spec": {"type": "object", "description": "What the namespace should be.", "properties": {
                    "finalizers": {"type": "array", "items": {"type": "string"},
                                   "description": "Values that must be empty before the namespace is removed from storage."}}},
                "status": {"type": "object", "description": "Where the namespace stands.", "properties": {
                    "phase": {"type": "string", "description": "Active or Terminating."},
                    "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}
            }
        },
        "io.k8s.api.core.v1.NamespaceList": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Namespace"}}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_hooks() {
        assert_eq!(
            NamespaceHooks.refuse_delete("kube-system"),
            Some("this namespace may not be deleted")
        );
        assert_eq!(NamespaceHooks.refuse_delete("tenant"), None);
        assert!(NamespaceHooks.removed_by_controller());
        let mut ns = json!({"metadata": {"name": "tenant"}, "status": {"phase": "Active"}});
        NamespaceHooks.on_deletion_marked(&mut ns);
        assert_eq!(ns["status"], json!({"phase": "Terminating"}));
    }
}
