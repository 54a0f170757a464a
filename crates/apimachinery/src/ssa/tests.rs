use super::*;
use crate::schema::tests::vm_schema;

const T0: &str = "2025-01-01T00:00:00Z";
const T1: &str = "2025-01-01T00:01:00Z";
const T2: &str = "2025-01-01T00:02:00Z";

fn vm(spec: Value) -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
           "metadata": {"name": "vm", "namespace": "default"}, "spec": spec})
}

/// An applied configuration that sets nothing in spec.
fn bare() -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm", "namespace": "default"}})
}

fn with_labels(mut obj: Value, labels: Value) -> Value {
    obj["metadata"]["labels"] = labels;
    obj
}

fn created_by_client_side_apply() -> Value {
    let mut obj = with_labels(
        vm(json!({"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}})),
        json!({"app": "x"}),
    );
    record_update(
        None,
        &mut obj,
        "kubectl-client-side-apply",
        None,
        "kubevirt.io/v1",
        T0,
        &vm_schema(),
    );
    // What the server sets on create; it makes later writes updates.
    obj["metadata"]["uid"] = json!("6a1a2c5e-4b3f-4f7e-9b1e-0e2d3c4b5a69");
    obj
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap().to_string(),
                        e["operation"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn create_records_update_entry_with_structure() {
    let obj = created_by_client_side_apply();
    assert_eq!(
        obj["metadata"]["managedFields"],
        json!([{
            "manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "kubevirt.io/v1",
            "time": T0, "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {".": {}, "f:runStrategy": {}, "f:template": {".": {}, "f:spec": {".": {},
                    "f:domain": {".": {}, "f:devices": {}}}}}
            }
        }])
    );
}

#[test]
fn new_list_items_are_recorded_with_everything_below_them() {
    let s = vm_schema();
    let volume = |name: &str| json!({"name": name, "containerDisk": {"image": "img"}});
    let mut created = vm(json!({"template": {"spec": {
        "volumes": [volume("a")], "tags": ["x"], "nodeSelector": {}}}}));
    record_update(
        None,
        &mut created,
        "creator",
        None,
        "kubevirt.io/v1",
        T0,
        &s,
    );
    assert_eq!(
        created["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:spec": {".": {}, "f:template": {".": {}, "f:spec": {".": {},
            "f:nodeSelector": {},
            "f:tags": {".": {}, "v:\"x\"": {}},
            "f:volumes": {".": {}, "k:{\"name\":\"a\"}": {".": {},
                "f:containerDisk": {".": {}, "f:image": {}}, "f:name": {}}}}}}})
    );

    created["metadata"]["uid"] = json!("6a1a2c5e-4b3f-4f7e-9b1e-0e2d3c4b5a69");
    let mut grown = created.clone();
    grown["spec"]["template"]["spec"]["volumes"] = json!([volume("a"), volume("b")]);
    record_update(
        Some(created.clone()),
        &mut grown,
        "grower",
        None,
        "kubevirt.io/v1",
        T1,
        &s,
    );
    assert_eq!(
        grown["metadata"]["managedFields"][1]["fieldsV1"],
        json!({"f:spec": {"f:template": {"f:spec": {"f:volumes": {
            "k:{\"name\":\"b\"}": {".": {}, "f:containerDisk": {".": {}, "f:image": {}}, "f:name": {}}}}}}})
    );
}

#[test]
fn apply_conflicts_with_client_side_apply_then_force_takes_over() {
    let s = vm_schema();
    let live = created_by_client_side_apply();
    let applied = vm(json!({"runStrategy": "Halted"}));
    let err = apply(Some(&live), &applied, "kubectl", false, &s, T1).unwrap_err();
    let status = err.to_status();
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using kubevirt.io/v1: .spec.runStrategy"#
    );
    assert_eq!(
        status.to_json()["details"],
        json!({"causes": [{"reason": "FieldManagerConflict",
            "message": "conflict with \"kubectl-client-side-apply\" using kubevirt.io/v1", "field": ".spec.runStrategy"}]})
    );

    let obj = apply(Some(&live), &applied, "kubectl", true, &s, T1).unwrap();
    assert_eq!(obj["spec"]["runStrategy"], json!("Halted"));
    let fields = &obj["metadata"]["managedFields"];
    assert_eq!(
        managers(&obj),
        [
            ("kubectl".into(), "Apply".into()),
            ("kubectl-client-side-apply".into(), "Update".into())
        ]
    );
    assert_eq!(
        fields[0]["fieldsV1"],
        json!({"f:spec": {"f:runStrategy": {}}})
    );
    assert_eq!(fields[0]["time"], json!(T1));
    assert_eq!(fields[0]["apiVersion"], json!("kubevirt.io/v1"));
    assert!(FieldSet::from_fields_v1(&fields[1]["fieldsV1"])
        .unwrap()
        .paths()
        .iter()
        .all(|p| path_string(p) != ".spec.runStrategy"));

    // The same value is no conflict: the field becomes shared.
    let same = apply(
        Some(&live),
        &vm(json!({"runStrategy": "Always"})),
        "other",
        false,
        &s,
        T1,
    )
    .unwrap();
    assert_eq!(managers(&same).len(), 2);
}

#[test]
fn kubectl_upgrades_from_client_side_apply_via_last_applied() {
    let s = vm_schema();
    let mut live = created_by_client_side_apply();
    let last =
        vm(json!({"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}}));
    live["metadata"]["annotations"] =
        json!({LAST_APPLIED_ANNOTATION: canonical_json(&with_labels(last, json!({"app": "x"})))});
    let applied = vm(json!({"runStrategy": "Halted"}));
    let obj = apply(Some(&live), &applied, "kubectl", false, &s, T1).unwrap();
    assert_eq!(obj["spec"]["runStrategy"], json!("Halted"));
    assert_eq!(
        obj["metadata"]["annotations"][LAST_APPLIED_ANNOTATION],
        json!(crate::gojson::marshal(&applied, crate::gojson::Escaping::EncodingJson) + "\n"),
        "kubectl keeps the client-side annotation in sync"
    );
    // Written as Go's encoding/json writes it: `\b`, not json-iterator's `\u0008`.
    let odd = with_labels(
        vm(json!({"runStrategy": "Halted"})),
        json!({"app": "a\u{8}<"}),
    );
    let obj = apply(Some(&live), &odd, "kubectl", false, &s, T1).unwrap();
    let annotation = obj["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(annotation.contains(r#""app":"a\b\u003c""#), "{annotation}");
    // Another manager gets no such grace.
    assert!(matches!(
        apply(Some(&live), &applied, "helm", false, &s, T1),
        Err(ApplyError::Conflicts(_))
    ));
}

#[test]
fn several_conflicts_are_grouped_by_manager() {
    let s = vm_schema();
    let live = apply(
        None,
        &with_labels(vm(json!({})), json!({"app": "x"})),
        "bar",
        false,
        &s,
        T0,
    )
    .unwrap();
    let mut next = live.clone();
    next["spec"]["runStrategy"] = json!("Always");
    record_update(
        Some(live.clone()),
        &mut next,
        "foo",
        None,
        "kubevirt.io/v1",
        T1,
        &s,
    );
    let applied = with_labels(vm(json!({"runStrategy": "Halted"})), json!({"app": "y"}));
    let err = apply(Some(&next), &applied, "baz", false, &s, T2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"bar\":\n- .metadata.labels.app\nconflicts with \"foo\" using kubevirt.io/v1:\n- .spec.runStrategy"
    );
}

#[test]
fn dropping_an_applied_label_removes_it_unless_someone_else_owns_it() {
    let s = vm_schema();
    let first = with_labels(
        vm(json!({"runStrategy": "Always"})),
        json!({"app": "x", "tier": "web"}),
    );
    let obj = apply(None, &first, "a", false, &s, T0).unwrap();
    let obj = apply(
        Some(&obj),
        &with_labels(vm(json!({"runStrategy": "Always"})), json!({"app": "x"})),
        "a",
        false,
        &s,
        T1,
    )
    .unwrap();
    assert_eq!(obj["metadata"]["labels"], json!({"app": "x"}));

    // b co-owns app by applying the same value; a dropping it leaves it.
    let obj = apply(
        Some(&obj),
        &with_labels(bare(), json!({"app": "x"})),
        "b",
        false,
        &s,
        T1,
    )
    .unwrap();
    let obj = apply(
        Some(&obj),
        &vm(json!({"runStrategy": "Always"})),
        "a",
        false,
        &s,
        T2,
    )
    .unwrap();
    assert_eq!(obj["metadata"]["labels"], json!({"app": "x"}));
    // Once b drops it too, the label and the emptied map go.
    let obj = apply(Some(&obj), &bare(), "b", false, &s, T2).unwrap();
    assert!(obj["metadata"].get("labels").is_none(), "{obj}");
    assert_eq!(obj["spec"]["runStrategy"], json!("Always"));
    assert_eq!(managers(&obj), [("a".into(), "Apply".into())]);
}

#[test]
fn map_lists_merge_by_key_and_atomic_lists_replace() {
    let s = vm_schema();
    let volumes =
        |v: Value| vm(json!({"template": {"spec": {"volumes": v, "domain": {"devices": {}}}}}));
    let obj = apply(
        None,
        &volumes(json!([{"name": "a", "containerDisk": {"image": "i1"}}, {"name": "b"}])),
        "m1",
        false,
        &s,
        T0,
    )
    .unwrap();
    let obj = apply(
        Some(&obj),
        &volumes(json!([{"name": "c", "containerDisk": {"image": "i3"}}])),
        "m2",
        false,
        &s,
        T1,
    )
    .unwrap();
    assert_eq!(
        obj["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "a", "containerDisk": {"image": "i1"}}, {"name": "b"}, {"name": "c", "containerDisk": {"image": "i3"}}])
    );
    let err = apply(
        Some(&obj),
        &volumes(json!([{"name": "a", "containerDisk": {"image": "i9"}}])),
        "m2",
        false,
        &s,
        T2,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "m1": .spec.template.spec.volumes[name="a"].containerDisk.image"#
    );
    // m2 dropping c removes only c.
    let obj = apply(Some(&obj), &vm(json!({})), "m2", false, &s, T2).unwrap();
    assert_eq!(
        obj["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let disks = |d: Value| vm(json!({"template": {"spec": {"domain": {"devices": {"disks": d}}}}}));
    let obj = apply(None, &disks(json!([{"name": "x"}])), "m1", false, &s, T0).unwrap();
    let err = apply(
        Some(&obj),
        &disks(json!([{"name": "y"}])),
        "m2",
        false,
        &s,
        T1,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "m1": .spec.template.spec.domain.devices.disks"#
    );
    let obj = apply(
        Some(&obj),
        &disks(json!([{"name": "y"}])),
        "m2",
        true,
        &s,
        T1,
    )
    .unwrap();
    assert_eq!(
        obj["spec"]["template"]["spec"]["domain"]["devices"]["disks"],
        json!([{"name": "y"}])
    );
}

#[test]
fn updates_take_fields_from_other_managers() {
    let s = vm_schema();
    let live = created_by_client_side_apply();
    let mut labeled = live.clone();
    labeled["metadata"]["labels"]["app"] = json!("z");
    record_update(
        Some(live.clone()),
        &mut labeled,
        "kubectl-label",
        None,
        "kubevirt.io/v1",
        T1,
        &s,
    );
    assert_eq!(
        managers(&labeled),
        [
            ("kubectl-client-side-apply".into(), "Update".into()),
            ("kubectl-label".into(), "Update".into())
        ]
    );
    assert_eq!(
        labeled["metadata"]["managedFields"][1]["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:app": {}}}})
    );

    // A write that changes nothing leaves managedFields alone.
    let mut same = labeled.clone();
    record_update(
        Some(labeled.clone()),
        &mut same,
        "kubectl-edit",
        None,
        "kubevirt.io/v1",
        T2,
        &s,
    );
    assert_eq!(same, labeled);

    // Status writes are recorded per subresource and ignore client-sent managedFields.
    let mut status = labeled.clone();
    status["status"] = json!({"ready": true});
    status["metadata"]["managedFields"] = json!([{}]);
    record_update(
        Some(labeled.clone()),
        &mut status,
        "virt-controller",
        Some("status"),
        "kubevirt.io/v1",
        T2,
        &s,
    );
    let last = status["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["subresource"], json!("status"));
    assert_eq!(
        last["fieldsV1"],
        json!({"f:status": {".": {}, "f:ready": {}}})
    );
}

#[test]
fn client_sent_managed_fields() {
    let s = vm_schema();
    let live = created_by_client_side_apply();
    let mut reset = live.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    record_update(
        Some(live.clone()),
        &mut reset,
        "kubectl-patch",
        None,
        "kubevirt.io/v1",
        T1,
        &s,
    );
    assert!(
        reset["metadata"].get("managedFields").is_none(),
        "[{{}}] clears them"
    );

    let mut emptied = live.clone();
    emptied["metadata"]["managedFields"] = json!([]);
    emptied["spec"]["runStrategy"] = json!("Halted");
    record_update(
        Some(live.clone()),
        &mut emptied,
        "kubectl-patch",
        None,
        "kubevirt.io/v1",
        T1,
        &s,
    );
    assert!(
        emptied["metadata"].get("managedFields").is_none(),
        "[] clears them; updates do not start tracking"
    );

    let mut garbled = live.clone();
    garbled["metadata"]["managedFields"] = json!([{"manager": "x"}]);
    record_update(
        Some(live.clone()),
        &mut garbled,
        "kubectl-patch",
        None,
        "kubevirt.io/v1",
        T1,
        &s,
    );
    assert_eq!(
        garbled["metadata"]["managedFields"], live["metadata"]["managedFields"],
        "undecodable: stored kept"
    );

    // An object nobody tracks stays untracked by updates, but a create is tracked.
    let mut untracked = emptied.clone();
    untracked["spec"]["runStrategy"] = json!("Always");
    record_update(
        Some(emptied.clone()),
        &mut untracked,
        "kubectl-edit",
        None,
        "kubevirt.io/v1",
        T2,
        &s,
    );
    assert!(untracked["metadata"].get("managedFields").is_none());

    let mut replaced = live.clone();
    replaced["metadata"]["managedFields"] = json!([{"manager": "me", "operation": "Update", "apiVersion": "kubevirt.io/v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:runStrategy": {}}}}]);
    record_update(
        Some(live.clone()),
        &mut replaced,
        "kubectl-patch",
        None,
        "kubevirt.io/v1",
        T1,
        &s,
    );
    assert_eq!(managers(&replaced), [("me".into(), "Update".into())]);
}

#[test]
fn bad_apply_requests() {
    let s = vm_schema();
    let status = |e: ApplyError| e.to_status();
    let mut with_mf = vm(json!({}));
    with_mf["metadata"]["managedFields"] = json!([]);
    assert_eq!(
        status(apply(None, &with_mf, "m", false, &s, T0).unwrap_err()).message,
        "metadata.managedFields must be nil"
    );
    assert_eq!(
        status(apply(None, &json!([1]), "m", false, &s, T0).unwrap_err()).code,
        400
    );
    assert_eq!(
        status(apply(None, &json!({"kind": "VirtualMachine"}), "m", false, &s, T0).unwrap_err())
            .message,
        "invalid object type: /, Kind=VirtualMachine"
    );
    let live = created_by_client_side_apply();
    let mut other_kind = vm(json!({}));
    other_kind["kind"] = json!("VirtualMachineInstance");
    assert_eq!(
        status(apply(Some(&live), &other_kind, "m", false, &s, T0).unwrap_err()).code,
        400
    );
    let unknown = status(apply(None, &vm(json!({"bogus": 1})), "m", false, &s, T0).unwrap_err());
    // A client error, not upstream's 500 (see ApplyError::Untypable).
    assert_eq!(unknown.code, 400);
    assert_eq!(unknown.reason, "BadRequest");
    assert_eq!(
        unknown.message,
        "failed to create typed patch object (default/vm; kubevirt.io/v1, Kind=VirtualMachine): .spec.bogus: field not declared in schema"
    );
    let mut deep = json!("leaf");
    for _ in 0..(MAX_DEPTH + 5) {
        deep = json!({"x": deep});
    }
    assert_eq!(
        status(
            apply(
                None,
                &vm(json!({"template": {"metadata": deep}})),
                "m",
                false,
                &s,
                T0
            )
            .unwrap_err()
        )
        .code,
        400
    );
}

#[test]
fn reapplying_the_same_config_keeps_the_time() {
    let s = vm_schema();
    let applied = vm(json!({"runStrategy": "Always"}));
    let obj = apply(None, &applied, "m", false, &s, T0).unwrap();
    let again = apply(Some(&obj), &applied, "m", false, &s, T1).unwrap();
    assert_eq!(again, obj);
}

mod properties {
    use super::*;
    use crate::schema::tests::arb_json;
    use proptest::prelude::*;

    fn as_vm(mut v: Value) -> Value {
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), json!("kubevirt.io/v1"));
            m.insert("kind".into(), json!("VirtualMachine"));
        }
        v
    }

    /// A proptest case that once failed: a live object whose metadata is `null`
    /// got no managedFields at all.
    #[test]
    fn forced_apply_over_null_metadata_records_the_owner() {
        let s = vm_schema();
        let live = as_vm(json!({"metadata": null}));
        let applied = as_vm(json!({"spec": null}));
        let once = apply(Some(&live), &applied, "m", true, &s, T1).unwrap();
        let twice = apply(Some(&once), &applied, "m", true, &s, T2).unwrap();
        assert_eq!(twice, once);
        let want = FieldSet::from_object(&applied, &s);
        assert!(!want.is_empty(), "the applier sets spec, so it owns it");
        let entry = once["metadata"]["managedFields"][0].clone();
        assert_eq!(entry["manager"], "m", "{once}");
        assert_eq!(FieldSet::from_fields_v1(&entry["fieldsV1"]).unwrap(), want);
    }

    proptest! {
        #[test]
        fn on_arbitrary_objects(live in arb_json(), applied in arb_json(), force in any::<bool>()) {
            let s = vm_schema();
            let (live, applied) = (as_vm(live), as_vm(applied));
            let mut pruned = applied.clone();
            s.prune(&mut pruned);
            s.validate(&applied);
            let _ = walk::check_applied(&applied, &s);
            if let Ok(obj) = apply(Some(&live), &applied, "kubectl", force, &s, T0) {
                let _ = apply(Some(&obj), &applied, "other", force, &s, T1);
            }
            let _ = apply(None, &pruned, "m", force, &s, T0);
            let mut new = applied.clone();
            record_update(Some(live.clone()), &mut new, "m", None, "kubevirt.io/v1", T1, &s);
            let mut again = live.clone();
            record_update(Some(new.clone()), &mut again, "n", Some("status"), "kubevirt.io/v1", T2, &s);
            let _ = FieldSet::from_fields_v1(&live);
            let _ = FieldSet::from_object(&applied, &s);
        }

        #[test]
        fn forced_apply_is_idempotent_and_owned(live in arb_json(), applied in arb_json()) {
            let s = vm_schema();
            let (mut live, applied) = (as_vm(live), as_vm(applied));
            if let Some(m) = live.get_mut("metadata").and_then(Value::as_object_mut) { m.remove("managedFields"); }
            if let Ok(once) = apply(Some(&live), &applied, "m", true, &s, T1) {
                let twice = apply(Some(&once), &applied, "m", true, &s, T2).unwrap();
                prop_assert_eq!(&twice, &once);
                let owned = once["metadata"]["managedFields"].as_array().and_then(|a| a.iter().find(|e| e["manager"] == "m")).cloned();
                let want = FieldSet::from_object(&applied, &s);
                if !want.is_empty() {
                    let owned = FieldSet::from_fields_v1(&owned.unwrap()["fieldsV1"]).unwrap();
                    prop_assert_eq!(owned, want);
                }
            }
        }
    }
}

/// A write that moves no field between managers keeps the stored list, with the writer's
/// time renewed and the list in encoding order: what decoding and encoding it would give.
#[test]
fn a_repeated_status_write_renews_only_the_time() {
    let s = vm_schema();
    let update = |live: &Value, status: Value, manager: &str, time: &str| {
        let mut new = live.clone();
        new["status"] = status;
        record_update(
            Some(live.clone()),
            &mut new,
            manager,
            Some("status"),
            "kubevirt.io/v1",
            time,
            &s,
        );
        new
    };
    let live = created_by_client_side_apply();
    let live = update(&live, json!({"ready": false}), "virt-controller", T1);
    let live = update(&live, json!({"ready": false, "phase": "x"}), "agent", T2);
    let names = |obj: &Value| -> Vec<String> { managers(obj).into_iter().map(|m| m.0).collect() };
    assert_eq!(
        names(&live),
        ["kubectl-client-side-apply", "virt-controller", "agent"]
    );
    let before = live["metadata"]["managedFields"].clone();
    let again = update(
        &live,
        json!({"ready": true, "phase": "x"}),
        "virt-controller",
        "2025-01-01T00:03:00Z",
    );
    // The controller's entry has the new time, and so comes last now; no set changed.
    assert_eq!(
        names(&again),
        ["kubectl-client-side-apply", "agent", "virt-controller"]
    );
    let after = again["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(after[2]["time"], "2025-01-01T00:03:00Z");
    for entry in before.as_array().unwrap() {
        let same = after
            .iter()
            .find(|e| e["manager"] == entry["manager"])
            .unwrap();
        assert_eq!(same["fieldsV1"], entry["fieldsV1"]);
    }
    // Exactly what encoding the decoded list gives.
    let canonical = Value::Array(
        Managed::decode(&again["metadata"]["managedFields"])
            .unwrap()
            .encode(),
    );
    assert_eq!(again["metadata"]["managedFields"], canonical);
}

/// Entries a write leaves alone keep their stored JSON; the result is what decoding and
/// encoding every entry gives. The oracle is the same write on a stored list with one entry
/// repeated: it decodes to the same entries, but cannot be reused, so it is encoded whole.
#[test]
fn stored_entries_a_write_leaves_alone_are_reused_exactly() {
    let s = vm_schema();
    let write = |live: &Value, change: &dyn Fn(&mut Value), manager: &str, sub: Option<&str>| {
        let mut new = live.clone();
        change(&mut new);
        let mut reused = new.clone();
        record_update(
            Some(live.clone()),
            &mut reused,
            manager,
            sub,
            "kubevirt.io/v1",
            T2,
            &s,
        );
        let mut repeated = live.clone();
        let list = repeated["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap();
        list.push(list.last().unwrap().clone());
        let mut encoded = new;
        record_update(
            Some(repeated),
            &mut encoded,
            manager,
            sub,
            "kubevirt.io/v1",
            T2,
            &s,
        );
        assert_eq!(reused, encoded, "{manager} writing");
        reused
    };
    let live = created_by_client_side_apply();
    // A new manager: a new entry, the others kept.
    let live = write(
        &live,
        &|o| o["status"] = json!({"ready": false}),
        "ctl",
        Some("status"),
    );
    // Another takes a field from it: both entries change, the applier's is kept.
    let live = write(
        &live,
        &|o| o["status"] = json!({"ready": true, "phase": "x"}),
        "agent",
        Some("status"),
    );
    // A spec change takes a field from the applier.
    let live = write(
        &live,
        &|o| o["spec"]["runStrategy"] = json!("Halted"),
        "kubectl-edit",
        None,
    );
    // The same manager again, same fields: only its time.
    let live = write(
        &live,
        &|o| o["status"]["phase"] = json!("y"),
        "agent",
        Some("status"),
    );
    // A write that changes nothing any manager owns.
    write(&live, &|_| {}, "agent", Some("status"));
    assert_eq!(
        managers(&live).len(),
        4,
        "{:#}",
        live["metadata"]["managedFields"]
    );
}
