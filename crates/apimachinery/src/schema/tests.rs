use super::*;
use serde_json::json;

/// A cut-down VirtualMachine schema in the shape of our served OpenAPI document.
pub(crate) fn vm_components() -> Value {
    json!({
        "VirtualMachine": {
            "type": "object",
            "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/ObjectMeta"},
                "spec": {"$ref": "#/components/schemas/VirtualMachineSpec"},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        },
        "ObjectMeta": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        "VirtualMachineSpec": {
            "type": "object",
            "description": "Specification of a VirtualMachine.",
            "properties": {
                "running": {"type": "boolean"},
                "runStrategy": {"type": "string", "enum": ["Always", "Halted", "Manual"]},
                "template": {"allOf": [{"$ref": "#/components/schemas/Template"}], "description": "VMI template."},
                "dataVolumeTemplates": {"type": "array", "items": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object"}}}}
            }
        },
        "Template": {
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "spec": {"$ref": "#/components/schemas/VMISpec"}
            }
        },
        "VMISpec": {
            "type": "object",
            "properties": {
                "domain": {"type": "object", "required": ["devices"], "properties": {
                    "devices": {"type": "object", "properties": {
                        "disks": {"type": "array", "items": {"$ref": "#/components/schemas/Disk"}}
                    }},
                    "cpu": {"type": "object", "properties": {"cores": {"type": "integer", "minimum": 1, "maximum": 64}}},
                    "memory": {"type": "object", "properties": {"guest": {"x-kubernetes-int-or-string": true}}}
                }},
                "volumes": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "required": ["name"], "properties": {
                        "name": {"type": "string", "maxLength": 10},
                        "containerDisk": {"type": "object", "properties": {"image": {"type": "string"}}}
                    }}},
                "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                "affinity": {"type": "object"},
                "hostname": {"type": "string", "pattern": "^[a-z0-9-]+$", "minLength": 2},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "uuid": {"type": ["string", "null"], "format": "uuid"},
                "since": {"type": "string", "format": "date-time", "nullable": true}
            }
        },
        "Disk": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"},
            "bootOrder": {"type": "integer", "minimum": 1}
        }}
    })
}

pub(crate) fn vm_schema() -> Schema {
    Schema::from_components(&vm_components(), "VirtualMachine").expect("schema builds")
}

/// Arbitrary JSON whose keys often hit the test schema, for no-panic properties.
pub(crate) fn arb_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let key = prop_oneof![
        Just("spec".to_string()),
        Just("metadata".to_string()),
        Just("template".to_string()),
        Just("volumes".to_string()),
        Just("name".to_string()),
        Just("labels".to_string()),
        Just("runStrategy".to_string()),
        Just("domain".to_string()),
        Just("devices".to_string()),
        Just("disks".to_string()),
        Just("tags".to_string()),
        Just("managedFields".to_string()),
        Just("f:spec".to_string()),
        Just("k:{\"name\":\"a\"}".to_string()),
        "[a-z.:]{0,4}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-z]{0,3}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((key.clone(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

#[test]
fn resolves_refs_all_of_and_object_meta() {
    let s = vm_schema();
    let template = s.lookup("spec.template").unwrap();
    assert_eq!(template.description, "VMI template.");
    assert!(template.property("spec").is_some());
    assert_eq!(
        s.lookup("spec.template.spec.domain.devices.disks.bootOrder")
            .unwrap()
            .types,
        vec![Type::Integer]
    );
    assert!(
        s.lookup("metadata.ownerReferences").is_some(),
        "root metadata is the full ObjectMeta"
    );
    assert!(
        s.lookup("spec.dataVolumeTemplates.metadata.labels")
            .is_some(),
        "embedded resources too"
    );
    assert_eq!(
        s.lookup("spec.template.spec.volumes").unwrap().list_type(),
        &ListType::Map(vec!["name".to_string()])
    );
    assert_eq!(
        s.lookup("spec.template.spec.domain.devices.disks")
            .unwrap()
            .list_type(),
        &ListType::Atomic
    );
    assert!(s.lookup("spec.template.spec.uuid").unwrap().nullable);
    assert!(s.lookup("spec.nope").is_none());
}

#[test]
fn missing_and_cyclic_references() {
    let err = Schema::from_components(&json!({"A": {"$ref": "#/components/schemas/B"}}), "A")
        .unwrap_err();
    assert!(err.contains("\"#/components/schemas/B\""), "{err}");
    assert!(Schema::from_components(&json!({}), "A").is_err());
    let cyclic = json!({"A": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/A"},
        "b": {"allOf": [{"$ref": "#/components/schemas/A"}], "description": "again"}}}});
    let s = Schema::from_components(&cyclic, "A").unwrap();
    assert!(s.lookup("a.a.a.a").is_some());
}

#[test]
fn an_invalid_pattern_fails_the_build_naming_it_and_its_field() {
    let mut components = vm_components();
    components["Disk"]["properties"]["name"]["pattern"] = json!("^[a-z");
    let err = Schema::from_components(&components, "VirtualMachine").unwrap_err();
    assert!(err.contains(r#""^[a-z""#), "{err}");
    assert!(
        err.contains("field spec.template.spec.domain.devices.disks[*].name"),
        "{err}"
    );
    assert!(err.contains("schema Disk.properties.name"), "{err}");
    // In an inline schema, and at the root.
    let inline = json!({"A": {"type": "object", "properties": {"m": {"type": "object",
        "additionalProperties": {"type": "string", "pattern": "("}}}}});
    let err = Schema::from_components(&inline, "A").unwrap_err();
    assert!(
        err.contains("field m[*] (schema A.properties.m.additionalProperties)"),
        "{err}"
    );
    let root = json!({"A": {"type": "string", "pattern": "a{2,1}"}});
    let err = Schema::from_components(&root, "A").unwrap_err();
    assert!(err.contains("field (root) (schema A)"), "{err}");
    // A valid pattern is still enforced.
    let s = vm_schema();
    let hostname = s.lookup("spec.template.spec.hostname").unwrap();
    assert!(hostname.regex.as_ref().is_some_and(|r| !r.is_match("A_B")));
}

#[test]
fn equality_is_numeric() {
    assert!(values_equal(
        &json!({"a": [1, 2.0]}),
        &json!({"a": [1.0, 2]})
    ));
    assert!(!values_equal(&json!(1), &json!("1")));
}

#[test]
fn an_update_validates_only_what_it_changed() {
    let s = vm_schema();
    let vm = |strategy: &str, hostname: &str| {
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "a"},
               "spec": {"runStrategy": strategy,
                        "template": {"spec": {"domain": {"devices": {}}, "hostname": hostname}}}})
    };
    // Stored before a stricter rule, say: the bad hostname is left alone (ratcheting)...
    let old = vm("Always", "BAD_HOST");
    assert_eq!(s.validate(&old).len(), 1);
    assert!(s
        .validate_update(&vm("Halted", "BAD_HOST"), &old)
        .is_empty());
    // ...while what the update changes is checked as on a create.
    let errors = s.validate_update(&vm("Sometimes", "BAD_HOST"), &old);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "spec.runStrategy");
    let errors = s.validate_update(&vm("Always", "ALSO_BAD"), &old);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "spec.template.spec.hostname");
    // A changed object still has its own rules checked (a required field removed).
    let mut no_devices = vm("Always", "BAD_HOST");
    no_devices["spec"]["template"]["spec"]["domain"] = json!({});
    let errors = s.validate_update(&no_devices, &old);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "spec.template.spec.domain.devices");
}
