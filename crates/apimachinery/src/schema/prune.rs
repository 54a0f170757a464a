//! Pruning: what the apiextensions decoder does to every request body and stored object.

use serde_json::Value;

use super::{NodeRef, Schema, MAX_DEPTH};
use crate::field;

impl Schema {
    /// Removes fields the schema does not know, in place, and returns their paths as
    /// `fieldValidation` reports them (`spec.bogusField`, `spec.disks[0].foo`, map keys
    /// dotted). Also drops `null` values of non-nullable properties without a default, which
    /// upstream does silently before defaulting.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        prune_value(obj, self.root(), &mut String::new(), &mut unknown, 0);
        unknown.sort();
        unknown.dedup();
        unknown
    }
}

/// `path` is one buffer for the whole walk, extended for each child and cut back after it.
fn prune_value(
    value: &mut Value,
    node: NodeRef<'_>,
    path: &mut String,
    unknown: &mut Vec<String>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            // A scalar schema holding an object is a type error for validation to report.
            if !(node.is_object() || node.types.is_empty()) {
                return;
            }
            let keep_unknown = node.keeps_unknown_fields();
            map.retain(|key, v| {
                let parent = field::push_child(path, key);
                let keep = if let Some(child) = node.property(key) {
                    let drop_null = v.is_null() && !child.nullable && child.default.is_none();
                    if !drop_null {
                        prune_value(v, child, path, unknown, depth + 1);
                    }
                    !drop_null
                } else if let Some(values) = node.additional_properties() {
                    prune_value(v, values, path, unknown, depth + 1);
                    true
                } else if !keep_unknown {
                    unknown.push(path.clone());
                    false
                } else {
                    true
                };
                path.truncate(parent);
                keep
            });
        }
        Value::Array(items) => {
            if let Some(item) = node.items() {
                for (i, v) in items.iter_mut().enumerate() {
                    let parent = field::push_index(path, i);
                    prune_value(v, item, path, unknown, depth + 1);
                    path.truncate(parent);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::vm_schema;
    use serde_json::json;

    #[test]
    fn prunes_unknown_fields_with_kubernetes_paths() {
        let s = vm_schema();
        let mut vm = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "bogusTop": 1,
            "metadata": {"name": "vm", "labels": {"a": "b"}, "clusterName": "x", "creationTimestamp": null},
            "spec": {
                "bogusField": true,
                "runStrategy": "Always",
                "running": null,
                "template": {
                    "metadata": {"labels": {"x": "y"}, "anything": {"goes": 1}},
                    "spec": {
                        "domain": {"devices": {"disks": [{"name": "a"}, {"name": "b", "foo": 1}]}},
                        "nodeSelector": {"k": "v"},
                        "affinity": {"podAffinity": {"deep": [1]}},
                        "volumes": [{"name": "v", "containerDisk": {"image": "i", "pull": 1}}],
                        "uuid": null
                    }
                }
            },
            "status": {"whatever": {"kept": true}}
        });
        let unknown = s.prune(&mut vm);
        assert_eq!(
            unknown,
            vec![
                "bogusTop",
                "metadata.clusterName",
                "spec.bogusField",
                "spec.template.spec.domain.devices.disks[1].foo",
                "spec.template.spec.volumes[0].containerDisk.pull",
            ]
        );
        assert_eq!(
            vm["metadata"],
            json!({"name": "vm", "labels": {"a": "b"}}),
            "null timestamp dropped silently"
        );
        assert!(
            vm["spec"].get("running").is_none(),
            "non-nullable null dropped"
        );
        assert_eq!(
            vm["spec"]["template"]["spec"]["uuid"],
            json!(null),
            "nullable null kept"
        );
        assert_eq!(
            vm["spec"]["template"]["metadata"]["anything"],
            json!({"goes": 1})
        );
        assert_eq!(
            vm["spec"]["template"]["spec"]["affinity"],
            json!({"podAffinity": {"deep": [1]}})
        );
        assert_eq!(vm["status"], json!({"whatever": {"kept": true}}));
        assert_eq!(vm["apiVersion"], json!("kubevirt.io/v1"));
    }

    #[test]
    fn embedded_resources_keep_type_meta_and_prune_metadata() {
        let s = vm_schema();
        let mut vm = json!({"spec": {"dataVolumeTemplates": [{
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": "dv", "bogus": 1}, "spec": {"source": {}}, "extra": 1
        }]}});
        let unknown = s.prune(&mut vm);
        assert_eq!(
            unknown,
            vec![
                "spec.dataVolumeTemplates[0].extra",
                "spec.dataVolumeTemplates[0].metadata.bogus"
            ]
        );
        assert_eq!(
            vm["spec"]["dataVolumeTemplates"][0]["kind"],
            json!("DataVolume")
        );
        assert_eq!(
            vm["spec"]["dataVolumeTemplates"][0]["spec"],
            json!({"source": {}})
        );
    }

    #[test]
    fn wrong_shapes_are_left_for_validation() {
        let s = vm_schema();
        let mut vm = json!({"spec": {"runStrategy": {"a": 1}, "template": {"spec": {"tags": "x", "domain": [{"a": 1}]}}}});
        let before = vm.clone();
        assert!(s.prune(&mut vm).is_empty());
        assert_eq!(vm, before);
    }
}
