//! Object metadata semantics: uid, resourceVersion, generation, creationTimestamp,
//! generateName, label/annotation/finalizer/ownerReference validation with upstream's
//! messages, dryRun=All and fieldValidation (Strict/Warn/Ignore with Warning headers).

mod support;

use std::collections::HashSet;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

const VM: &str = "virtualmachines";
/// KubeVirt objects: a namespaced kind that no admission or controller touches.
const KV: &str = "kubevirts";

#[tokio::test]
async fn uids_are_unique_and_resource_versions_one_increasing_counter() {
    let api = api().await;
    api.namespace("meta-rv").await;
    api.namespace("meta-rv2").await;
    let mut uids = HashSet::new();
    let mut last = 0;
    // Writes to different objects, kinds and namespaces share one counter.
    for i in 0..4 {
        let ns = if i % 2 == 0 { "meta-rv" } else { "meta-rv2" };
        let a = api.create(&coll(ns, VM), &vm(&format!("a{i}"))).await;
        let b = api
            .create(&coll(ns, KV), &kubevirt_obj(&format!("b{i}")))
            .await;
        for obj in [&a, &b] {
            assert!(rv(obj) > last, "{} after {last}", rv(obj));
            last = rv(obj);
            assert!(uids.insert(obj["metadata"]["uid"].as_str().unwrap().to_string()));
        }
    }
    let r = api
        .merge(
            &item("meta-rv", KV, "b0"),
            &json!({"metadata": {"labels": {"x": "1"}}}),
        )
        .await;
    assert!(rv(&r.body) > last);
    // The list's resourceVersion is the store's current revision, not older than any item.
    let list = api.get(&format!("{KUBEVIRT}/{KV}")).await.body;
    let list_rv: i64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(list_rv >= rv(&r.body));
    // A deleted and recreated object gets a new uid.
    let old_uid = api.get(&item("meta-rv", KV, "b0")).await.body["metadata"]["uid"].clone();
    api.delete(&item("meta-rv", KV, "b0"), None).await;
    api.eventually(&item("meta-rv", KV, "b0"), Duration::from_secs(10), |r| {
        r.status == 404
    })
    .await;
    let again = api.create(&coll("meta-rv", KV), &kubevirt_obj("b0")).await;
    assert_ne!(again["metadata"]["uid"], old_uid);
    assert!(rv(&again) > rv(&r.body));
}

#[tokio::test]
async fn generation_tracks_spec_changes_only() {
    let api = api().await;
    api.namespace("meta-gen").await;
    let path = item("meta-gen", VM, "g");
    let vm0 = api.settled_vm("meta-gen", &vm("g")).await;
    assert_eq!(vm0["metadata"]["generation"], 1);

    // Metadata changes keep it.
    let r = api
        .merge(
            &path,
            &json!({"metadata": {"labels": {"l": "1"}, "annotations": {"a": "1"}}}),
        )
        .await;
    assert_eq!(r.body["metadata"]["generation"], 1, "{}", r.text);
    // A spec change bumps it by one (merge patch, JSON patch, PUT).
    let r = api
        .merge(&path, &json!({"spec": {"runStrategy": "Manual"}}))
        .await;
    assert_eq!(r.body["metadata"]["generation"], 2, "{}", r.text);
    let r = api
        .patch(
            &path,
            "application/json-patch+json",
            r#"[{"op":"replace","path":"/spec/runStrategy","value":"Halted"}]"#,
        )
        .await;
    assert_eq!(r.body["metadata"]["generation"], 3, "{}", r.text);
    let r = api
        .put_fresh(&path, |o| {
            o["spec"]["template"]["spec"]["domain"]["memory"]["guest"] = json!("256Mi")
        })
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["metadata"]["generation"], 4);
    // Status writes never bump it.
    let r = api
        .merge(
            &format!("{path}/status"),
            &json!({"status": {"volumeSnapshotStatuses": [{"name": "root", "enabled": true}]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["metadata"]["generation"], 4);

    // Requests cannot set generation: it is reset from the stored object.
    for requested in [1, 99] {
        let r = api
            .put_fresh(&path, |o| {
                o["metadata"]["generation"] = json!(requested);
                o["metadata"]["labels"]["try"] = json!(requested.to_string());
            })
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.body["metadata"]["generation"], 4, "{}", r.text);
        assert_eq!(api.get(&path).await.body["metadata"]["generation"], 4);
        let r = api
            .merge(&path, &json!({"metadata": {"generation": requested}}))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.body["metadata"]["generation"], 4, "{}", r.text);
    }
}

#[tokio::test]
async fn unchanged_update_keeps_resource_version_and_emits_nothing() {
    let api = api().await;
    api.namespace("meta-noop").await;
    let path = item("meta-noop", VM, "n");
    let settled = api.settled_vm("meta-noop", &vm("n")).await;
    let mut watch = api
        .watch(&format!(
            "{}?watch=true&resourceVersion={}",
            coll("meta-noop", VM),
            rv(&settled)
        ))
        .await;
    let r = api.put(&path, &settled).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["metadata"]["resourceVersion"],
        settled["metadata"]["resourceVersion"]
    );
    let r = api
        .merge(&path, &json!({"metadata": {"labels": {"app": "demo"}}}))
        .await;
    assert_eq!(
        r.body["metadata"]["resourceVersion"],
        settled["metadata"]["resourceVersion"]
    );
    let r = api.patch(&path, "application/json-patch+json", "[]").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["metadata"]["resourceVersion"],
        settled["metadata"]["resourceVersion"]
    );
    watch.assert_quiet(Duration::from_millis(700)).await;
    // A real change is seen.
    let r = api
        .merge(&path, &json!({"metadata": {"labels": {"app": "other"}}}))
        .await;
    let event = watch.next().await;
    assert_eq!(event["type"], "MODIFIED");
    assert_eq!(
        event["object"]["metadata"]["resourceVersion"],
        r.body["metadata"]["resourceVersion"]
    );
}

#[tokio::test]
async fn system_fields_are_the_servers() {
    let api = api().await;
    api.namespace("meta-sys").await;
    // Client-sent uid, resourceVersion, creationTimestamp and generation are replaced on create.
    let mut body = vm("s");
    body["metadata"]["uid"] = json!("11111111-1111-1111-1111-111111111111");
    body["metadata"]["resourceVersion"] = json!("12345");
    body["metadata"]["creationTimestamp"] = json!("2001-01-01T00:00:00Z");
    body["metadata"]["generation"] = json!(7);
    body["metadata"]["selfLink"] = json!("/some/link");
    let created = api.create(&coll("meta-sys", VM), &body).await;
    assert_ne!(
        created["metadata"]["uid"],
        "11111111-1111-1111-1111-111111111111"
    );
    assert_ne!(created["metadata"]["resourceVersion"], "12345");
    assert_ne!(
        created["metadata"]["creationTimestamp"],
        "2001-01-01T00:00:00Z"
    );
    assert_eq!(created["metadata"]["generation"], 1);
    assert!(created["metadata"].get("selfLink").is_none());

    // Updates cannot move creationTimestamp: it is silently kept.
    let path = item("meta-sys", VM, "s");
    let current = api.settle(&path).await;
    let mut put = current.clone();
    put["metadata"]["creationTimestamp"] = json!("2001-01-01T00:00:00Z");
    put["metadata"]["labels"]["x"] = json!("y");
    let r = api.put(&path, &put).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );
    // Omitting uid keeps it; changing it in a patch is an immutable-field error.
    let r = api
        .merge(
            &path,
            &json!({"metadata": {"uid": "22222222-2222-2222-2222-222222222222"}}),
        )
        .await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "VirtualMachine.kubevirt.io \"s\" is invalid: metadata.uid: Invalid value: \"22222222-2222-2222-2222-222222222222\": field is immutable",
            "reason": "Invalid",
            "details": {"name": "s", "group": "kubevirt.io", "kind": "VirtualMachine", "causes": [
                {"reason": "FieldValueInvalid", "message": "Invalid value: \"22222222-2222-2222-2222-222222222222\": field is immutable", "field": "metadata.uid"}]},
            "code": 422}),
    );
}

#[tokio::test]
async fn generate_name() {
    let api = api().await;
    api.namespace("meta-gen-name").await;
    let c = coll("meta-gen-name", KV);
    let mut body = kubevirt_obj("");
    body["metadata"] = json!({"generateName": "gen-"});
    let mut seen = HashSet::new();
    for _ in 0..5 {
        let created = api.create(&c, &body).await;
        let name = created["metadata"]["name"].as_str().unwrap().to_string();
        assert_eq!(created["metadata"]["generateName"], "gen-");
        assert_eq!(name.len(), 9, "{name}");
        assert!(name.starts_with("gen-"));
        assert!(
            name[4..]
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{name}"
        );
        assert!(seen.insert(name.clone()));
        assert_eq!(
            api.get(&item("meta-gen-name", KV, &name)).await.status,
            StatusCode::OK
        );
    }
    // A long prefix is cut to 58 characters before the 5 random ones.
    let prefix = format!("{}-", "p".repeat(70));
    body["metadata"] = json!({"generateName": prefix});
    let created = api.create(&c, &body).await;
    let name = created["metadata"]["name"].as_str().unwrap();
    assert_eq!(name.len(), 63);
    assert!(name.starts_with(&"p".repeat(58)));
    // An explicit name wins over generateName.
    body["metadata"] = json!({"generateName": "gen-", "name": "explicit"});
    let created = api.create(&c, &body).await;
    assert_eq!(created["metadata"]["name"], "explicit");
    // An invalid prefix is reported on generateName (and on the name made from it).
    body["metadata"] = json!({"generateName": "Bad_"});
    let r = api.post(&c, &body).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    let got = causes(&r);
    assert_eq!(got[0].0, "FieldValueInvalid");
    assert_eq!(got[0].1, "metadata.generateName");
    assert!(
        got[0]
            .2
            .starts_with("Invalid value: \"Bad_\": a lowercase RFC 1123 subdomain"),
        "{got:?}"
    );
    assert!(got.iter().any(|c| c.1 == "metadata.name"), "{got:?}");
}

#[tokio::test]
async fn label_and_annotation_validation() {
    let api = api().await;
    api.namespace("meta-labels").await;
    let c = coll("meta-labels", KV);
    let invalid = |labels: Value, annotations: Value| {
        let mut body = kubevirt_obj("l");
        body["metadata"]["labels"] = labels;
        body["metadata"]["annotations"] = annotations;
        body
    };
    let cases: Vec<(Value, Value, &str, String)> = vec![
        (
            json!({"a b": "v"}),
            json!({}),
            "metadata.labels",
            "Invalid value: \"a b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into(),
        ),
        (
            json!({"k": "x".repeat(64)}),
            json!({}),
            "metadata.labels",
            format!("Invalid value: \"{}\": must be no more than 63 characters", "x".repeat(64)),
        ),
        (
            json!({format!("{}", "k".repeat(64)): "v"}),
            json!({}),
            "metadata.labels",
            format!("Invalid value: \"{}\": name part must be no more than 63 characters", "k".repeat(64)),
        ),
        (
            json!({"Bad_Prefix/k": "v"}),
            json!({}),
            "metadata.labels",
            "Invalid value: \"Bad_Prefix/k\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into(),
        ),
        (
            json!({}),
            json!({"bad key": "anything goes in values"}),
            "metadata.annotations",
            "Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into(),
        ),
    ];
    for (labels, annotations, field, message) in cases {
        let r = api
            .post(&c, &invalid(labels.clone(), annotations.clone()))
            .await;
        assert_status(
            &r,
            422,
            "Invalid",
            &format!("KubeVirt.kubevirt.io \"l\" is invalid: {field}: {message}"),
        );
        assert_eq!(
            causes(&r),
            [(
                "FieldValueInvalid".to_string(),
                field.to_string(),
                message.clone()
            )]
        );
    }
    // Valid edge cases pass: empty value, prefixed keys, free-form annotation values.
    let r = api
        .post(
            &c,
            &invalid(
                json!({"empty": "", "example.com/key": "Value_1.x", "k": "x".repeat(63)}),
                json!({"kubectl.kubernetes.io/last-applied-configuration": "{\"any\": \"thing\"}\n"}),
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

#[tokio::test]
async fn finalizer_and_owner_reference_validation() {
    let api = api().await;
    api.namespace("meta-fin").await;
    let c = coll("meta-fin", KV);
    let with_meta = |name: &str, extra: Value| {
        let mut body = kubevirt_obj(name);
        for (k, v) in extra.as_object().unwrap() {
            body["metadata"][k] = v.clone();
        }
        body
    };
    // Finalizer names must be qualified names.
    let r = api
        .post(
            &c,
            &with_meta("f1", json!({"finalizers": ["bad finalizer"]})),
        )
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(causes(&r)[0].1, "metadata.finalizers");
    assert!(causes(&r)[0]
        .2
        .starts_with("Invalid value: \"bad finalizer\": name part must consist of"));
    // orphan and foregroundDeletion exclude each other.
    let r = api
        .post(
            &c,
            &with_meta(
                "f2",
                json!({"finalizers": ["orphan", "foregroundDeletion"]}),
            ),
        )
        .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "KubeVirt.kubevirt.io \"f2\" is invalid: metadata.finalizers: Invalid value: []string{\"orphan\", \"foregroundDeletion\"}: finalizer orphan and foregroundDeletion cannot be both set",
    );
    // Names without a domain are accepted with a warning (on create, and when added later).
    let r = api
        .post(
            &c,
            &with_meta("f3", json!({"finalizers": ["plain", "example.com/ok"]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        warnings(&r),
        ["metadata.finalizers: \"plain\": prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers"]
    );
    let r = api
        .merge(
            &item("meta-fin", KV, "f3"),
            &json!({"metadata": {"finalizers": ["plain", "example.com/ok", "another"]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        warnings(&r),
        ["metadata.finalizers: \"another\": prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers"],
        "only added finalizers are warned about"
    );
    let r = api
        .merge(
            &item("meta-fin", KV, "f3"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(warnings(&r).is_empty());

    // ownerReferences need apiVersion, kind, name and uid.
    let r = api
        .post(
            &c,
            &with_meta(
                "o1",
                json!({"ownerReferences": [{"apiVersion": "", "kind": "", "name": "", "uid": ""}]}),
            ),
        )
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(
        causes(&r),
        [
            (
                "FieldValueInvalid".into(),
                "metadata.ownerReferences.apiVersion".into(),
                "Invalid value: \"\": version must not be empty".into()
            ),
            (
                "FieldValueInvalid".into(),
                "metadata.ownerReferences.kind".into(),
                "Invalid value: \"\": kind must not be empty".into()
            ),
            (
                "FieldValueInvalid".into(),
                "metadata.ownerReferences.name".into(),
                "Invalid value: \"\": name must not be empty".into()
            ),
            (
                "FieldValueInvalid".into(),
                "metadata.ownerReferences.uid".into(),
                "Invalid value: \"\": uid must not be empty".into()
            ),
        ]
    );
    // At most one controller reference.
    let owner = |name: &str, uid: &str| json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": name, "uid": uid, "controller": true});
    let r = api
        .post(
            &c,
            &with_meta(
                "o2",
                json!({"ownerReferences": [owner("a", "u1"), owner("b", "u2")]}),
            ),
        )
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(causes(&r).len(), 1);
    assert_eq!(causes(&r)[0].1, "metadata.ownerReferences");
    assert!(causes(&r)[0].2.ends_with(": Only one reference can have Controller set to true. Found \"true\" in references for VirtualMachine/a and VirtualMachine/b"), "{:?}", causes(&r));
    let r = api
        .post(
            &c,
            &with_meta("o3", json!({"ownerReferences": [owner("a", "u1")]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

#[tokio::test]
async fn dry_run_persists_nothing() {
    let api = api().await;
    api.namespace("meta-dry").await;
    let c = coll("meta-dry", VM);
    let start = api.get(&c).await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = api
        .watch(&format!("{c}?watch=true&resourceVersion={start}"))
        .await;

    // Create: 201 with what would be stored (defaults, uid, timestamps), no resourceVersion.
    let r = api.post(&format!("{c}?dryRun=All"), &vm("dry")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.body["metadata"]["name"], "dry");
    assert!(r.body["metadata"]["uid"].is_string());
    assert!(r.body["metadata"]["creationTimestamp"].is_string());
    assert_eq!(
        r.body["spec"]["template"]["spec"]["domain"]["machine"]["type"], "q35",
        "defaults applied"
    );
    assert!(
        r.body["metadata"].get("resourceVersion").is_none(),
        "{}",
        r.text
    );
    assert_eq!(
        api.get(&item("meta-dry", VM, "dry")).await.status,
        StatusCode::NOT_FOUND
    );
    // Validation and admission still run.
    let mut bad = vm("Bad_Name");
    let r = api.post(&format!("{c}?dryRun=All"), &bad).await;
    assert_eq!(r.status.as_u16(), 422);
    bad = vm("dry2");
    bad["spec"]["running"] = json!(true);
    let r = api.post(&format!("{c}?dryRun=All"), &bad).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);

    // Update, patch and delete of a real object.
    let real = api.settled_vm("meta-dry", &vm("real")).await;
    let path = item("meta-dry", VM, "real");
    let mut put = real.clone();
    put["metadata"]["labels"]["dry"] = json!("put");
    let r = api.put(&format!("{path}?dryRun=All"), &put).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["metadata"]["labels"]["dry"], "put");
    assert_eq!(
        r.body["metadata"]["resourceVersion"],
        real["metadata"]["resourceVersion"]
    );
    let r = api
        .merge(
            &format!("{path}?dryRun=All"),
            &json!({"spec": {"runStrategy": "Manual"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["spec"]["runStrategy"], "Manual");
    assert_eq!(
        r.body["metadata"]["generation"], 2,
        "the answer is what would be stored"
    );
    let r = api.delete(&format!("{path}?dryRun=All"), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = api.delete(&path, Some(&json!({"dryRun": ["All"]}))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let stored = api.get(&path).await.body;
    assert_eq!(stored, real, "nothing changed");

    // The watch saw only the real object being created and settled.
    loop {
        match watch.poll(Duration::from_millis(700)).await {
            Next::Event(e) => assert_eq!(e["object"]["metadata"]["name"], "real", "{e}"),
            Next::Timeout => break,
            Next::End => panic!("watch ended"),
        }
    }
    // A dry-run create of an existing name is still AlreadyExists.
    let r = api.post(&format!("{c}?dryRun=All"), &vm("real")).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(r.body["reason"], "AlreadyExists");
}

#[tokio::test]
async fn field_validation_strict_warn_ignore() {
    let api = api().await;
    api.namespace("meta-fv").await;
    let c = coll("meta-fv", VM);
    let with_unknown = |name: &str| {
        let mut body = vm(name);
        body["spec"]["bogusField"] = json!(1);
        body["metadata"]["bogusMeta"] = json!("x");
        body["spec"]["template"]["spec"]["domain"]["bogusDomain"] = json!(true);
        body
    };
    // Strict create: 400 naming every unknown field.
    let r = api
        .post(
            &format!("{c}?fieldValidation=Strict"),
            &with_unknown("strict"),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.body["reason"], "BadRequest");
    let message = r.body["message"].as_str().unwrap();
    assert!(
        message.starts_with("VirtualMachine in version \"v1\" cannot be handled as a VirtualMachine: strict decoding error: "),
        "{message}"
    );
    for field in [
        "unknown field \"metadata.bogusMeta\"",
        "unknown field \"spec.bogusField\"",
        "unknown field \"spec.template.spec.domain.bogusDomain\"",
    ] {
        assert!(message.contains(field), "{message}");
    }
    assert_eq!(
        api.get(&item("meta-fv", VM, "strict")).await.status,
        StatusCode::NOT_FOUND
    );

    // Warn (the default without the parameter, and explicitly): created, pruned, warned.
    for (name, query) in [("warn", "?fieldValidation=Warn"), ("default", "")] {
        let r = api.post(&format!("{c}{query}"), &with_unknown(name)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        let mut got = warnings(&r);
        got.sort();
        assert_eq!(
            got,
            [
                "unknown field \"metadata.bogusMeta\"",
                "unknown field \"spec.bogusField\"",
                "unknown field \"spec.template.spec.domain.bogusDomain\""
            ]
        );
        assert!(
            r.body["spec"].get("bogusField").is_none(),
            "pruned: {}",
            r.text
        );
        assert!(r.body["metadata"].get("bogusMeta").is_none());
    }
    // Ignore: created and pruned silently.
    let r = api
        .post(
            &format!("{c}?fieldValidation=Ignore"),
            &with_unknown("ignore"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert!(warnings(&r).is_empty());
    assert!(r.body["spec"].get("bogusField").is_none());

    // PUT: Strict is 400 like create; Warn warns.
    let current = api.settle(&item("meta-fv", VM, "ignore")).await;
    let mut put = current.clone();
    put["spec"]["bogusField"] = json!(2);
    let r = api
        .put(
            &format!("{}?fieldValidation=Strict", item("meta-fv", VM, "ignore")),
            &put,
        )
        .await;
    assert_status(
        &r,
        400,
        "BadRequest",
        "VirtualMachine in version \"v1\" cannot be handled as a VirtualMachine: strict decoding error: unknown field \"spec.bogusField\"",
    );
    let r = api.put(&item("meta-fv", VM, "ignore"), &put).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(warnings(&r), ["unknown field \"spec.bogusField\""]);

    // Patches: Strict is 422 on the patched object with an empty kind and name.
    let path = item("meta-fv", VM, "warn");
    let r = api
        .merge(
            &format!("{path}?fieldValidation=Strict"),
            &json!({"spec": {"bogusField": 3}}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(r.body["reason"], "Invalid");
    let message = r.body["message"].as_str().unwrap();
    assert!(
        message.starts_with(" \"\" is invalid: patch: Invalid value: \""),
        "{message}"
    );
    assert!(
        message.ends_with("\": strict decoding error: unknown field \"spec.bogusField\""),
        "{message}"
    );
    let details = r.body["details"].as_object().unwrap();
    assert_eq!(
        details.keys().collect::<Vec<_>>(),
        ["causes"],
        "no name, group or kind: {}",
        r.text
    );
    assert_eq!(causes(&r)[0].0, "FieldValueInvalid");
    assert_eq!(causes(&r)[0].1, "patch");
    let r = api
        .patch(
            &format!("{path}?fieldValidation=Strict"),
            "application/json-patch+json",
            r#"[{"op":"add","path":"/spec/bogusField","value":3}]"#,
        )
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    let r = api.merge(&path, &json!({"spec": {"bogusField": 3}})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(warnings(&r), ["unknown field \"spec.bogusField\""]);
    assert!(r.body["spec"].get("bogusField").is_none());
    let r = api
        .merge(
            &format!("{path}?fieldValidation=Ignore"),
            &json!({"spec": {"bogusField": 3}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(warnings(&r).is_empty());
}
