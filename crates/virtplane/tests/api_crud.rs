//! Every REST verb on VirtualMachine, VirtualMachineInstance,
//! VirtualMachineInstanceMigration, KubeVirt and Namespace, with the response shapes
//! kube-apiserver gives: create, get, list (namespaced and cluster-wide), replace, patch,
//! delete, watch (namespaced and cluster-wide), and the /status subresource where the kind
//! has one.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

const VM: &str = "virtualmachines";
const VMI: &str = "virtualmachineinstances";
const VMIM: &str = "virtualmachineinstancemigrations";
const KV: &str = "kubevirts";

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

/// `2025-01-01T00:00:00Z`: RFC 3339, whole seconds, UTC.
fn is_k8s_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z'
        && s.chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16, 19].contains(&i) || c.is_ascii_digit())
}

fn check_new_object(obj: &Value, kind: &str, ns: &str, name: &str) {
    assert_eq!(obj["apiVersion"], "kubevirt.io/v1", "{obj}");
    assert_eq!(obj["kind"], kind, "{obj}");
    let meta = &obj["metadata"];
    assert_eq!(meta["name"], name);
    assert_eq!(meta["namespace"], ns);
    assert!(
        is_uuid(meta["uid"].as_str().unwrap_or("")),
        "uid {}",
        meta["uid"]
    );
    assert!(rv(obj) > 0);
    assert!(
        is_k8s_time(meta["creationTimestamp"].as_str().unwrap_or("")),
        "creationTimestamp {}",
        meta["creationTimestamp"]
    );
    assert_eq!(meta["generation"], 1);
    assert!(meta.get("deletionTimestamp").is_none());
    assert!(meta.get("selfLink").is_none());
}

/// The next event for `name` of type `kind` whose resourceVersion is `rv`, skipping the
/// MODIFIED events controllers cause in between.
async fn event_at(watch: &mut Watch, kind: &str, name: &str, rv: i64) -> Value {
    let event = watch
        .until(|e| {
            e["object"]["metadata"]["name"] == name
                && (e["type"] == kind || e["type"] != "MODIFIED")
                && e["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse::<i64>().ok())
                    >= Some(rv)
        })
        .await;
    assert_eq!(event["type"], kind, "{event}");
    event
}

/// list, create, get, replace, patch, delete and watch of one kind in one namespace.
async fn crud_cycle(api: &Api, ns: &str, plural: &str, kind: &str, body: Value) {
    let name = body["metadata"]["name"].as_str().unwrap().to_string();
    let collection = coll(ns, plural);
    let path = item(ns, plural, &name);

    // An empty list first.
    let r = api.get(&collection).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["kind"], format!("{kind}List"));
    assert_eq!(r.body["apiVersion"], "kubevirt.io/v1");
    assert_eq!(
        r.body["items"],
        json!([]),
        "items must be [] (never null): {}",
        r.text
    );
    let empty_rv: i64 = r.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // A watch from that point sees everything that follows.
    let mut watch = api
        .watch(&format!(
            "{collection}?watch=true&resourceVersion={empty_rv}"
        ))
        .await;
    assert_eq!(watch.status, StatusCode::OK);
    assert!(watch.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));

    // Create.
    let r = api.post(&collection, &body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let created = r.body;
    check_new_object(&created, kind, ns, &name);
    assert!(rv(&created) > empty_rv);
    let added = watch.next().await;
    assert_eq!(added["type"], "ADDED", "{added}");
    assert_eq!(
        added["object"], created,
        "the ADDED event carries the stored object"
    );

    // Controllers (KubeVirt's VM controller, the scheduler) may add finalizers and status;
    // from here on work with the settled object.
    let settled = api.settle(&path).await;
    assert_eq!(settled["metadata"]["uid"], created["metadata"]["uid"]);
    if plural != VMI {
        // Only VMI status (no status subresource) travels with the object and bumps it.
        assert_eq!(
            settled["metadata"]["generation"], 1,
            "controllers never change the spec"
        );
    }
    assert_eq!(settled["spec"], created["spec"]);

    // Get returns exactly what is stored.
    let r = api.get(&path).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body, settled);

    // List, namespaced and cluster-wide.
    let r = api.get(&collection).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        r.body["items"][0], settled,
        "list items carry apiVersion/kind and the whole object"
    );
    let list_rv: i64 = r.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(list_rv >= rv(&settled));
    let r = api.get(&format!("{KUBEVIRT}/{plural}")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["kind"], format!("{kind}List"));
    assert!(r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["metadata"]["namespace"] == ns && i["metadata"]["name"] == name.as_str()));

    // Replace (PUT) with a new label.
    let mut replacement = settled.clone();
    replacement["metadata"]["labels"]["replaced"] = json!("yes");
    let r = api.put(&path, &replacement).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let replaced = r.body;
    assert_eq!(replaced["metadata"]["labels"]["replaced"], "yes");
    assert!(
        rv(&replaced) > rv(&settled),
        "every write gets a larger resourceVersion"
    );
    assert_eq!(replaced["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        replaced["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );
    assert_eq!(
        replaced["metadata"]["generation"], settled["metadata"]["generation"],
        "metadata changes do not bump generation"
    );
    let modified = event_at(&mut watch, "MODIFIED", &name, rv(&replaced)).await;
    assert_eq!(modified["object"], replaced);

    // Patch (merge).
    let r = api
        .merge(
            &path,
            &json!({"metadata": {"annotations": {"patched": "true"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let patched = r.body;
    assert_eq!(patched["metadata"]["annotations"]["patched"], "true");
    assert_eq!(patched["metadata"]["labels"]["replaced"], "yes");
    assert!(rv(&patched) > rv(&replaced));
    let modified = event_at(&mut watch, "MODIFIED", &name, rv(&patched)).await;
    assert_eq!(modified["object"], patched);

    // Delete. Without finalizers the object goes at once and the answer is a Status
    // whose details name the plural resource; with finalizers (the VM controller's) it
    // is marked and returned, and goes when its finalizers are removed.
    let finalizers = patched["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let r = api.delete(&path, None).await;
    if finalizers.is_empty() {
        assert_status_body(
            &r,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "kubevirt.io", "kind": plural, "uid": created["metadata"]["uid"]},
                "code": 200
            }),
        );
    } else {
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.body["kind"], kind);
        assert!(
            r.body["metadata"]["deletionTimestamp"].is_string(),
            "{}",
            r.text
        );
        assert_eq!(r.body["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(r.body["metadata"]["finalizers"], json!(finalizers));
        assert_eq!(
            r.body["metadata"]["generation"].as_i64().unwrap(),
            patched["metadata"]["generation"].as_i64().unwrap() + 1,
            "marking for deletion bumps generation"
        );
    }
    let deleted = watch
        .until(|e| e["type"] == "DELETED" && e["object"]["metadata"]["name"] == name.as_str())
        .await;
    assert!(
        rv(&deleted["object"]) > rv(&patched),
        "DELETED carries a new resourceVersion: {deleted}"
    );
    assert_eq!(
        deleted["object"]["metadata"]["uid"],
        created["metadata"]["uid"]
    );
    let r = api.get(&path).await;
    assert_status(
        &r,
        404,
        "NotFound",
        &format!("{plural}.kubevirt.io \"{name}\" not found"),
    );
    let r = api.get(&collection).await;
    assert_eq!(r.body["items"], json!([]));
}

#[tokio::test]
async fn virtual_machine_crud() {
    let api = api().await;
    api.namespace("crud-vm").await;
    crud_cycle(&api, "crud-vm", VM, "VirtualMachine", vm("vm1")).await;
}

#[tokio::test]
async fn virtual_machine_instance_crud() {
    let api = api().await;
    api.namespace("crud-vmi").await;
    crud_cycle(&api, "crud-vmi", VMI, "VirtualMachineInstance", vmi("vmi1")).await;
}

#[tokio::test]
async fn migration_crud() {
    let api = api().await;
    api.namespace("crud-vmim").await;
    // A migration is admitted only for an existing VMI of its namespace; on this --no-node
    // server the VMI stays Pending, and so does the migration. The create mutator adds
    // the migration controller's finalizer, so the delete marks the migration, the
    // controller fails it (canceled before hand-off) and releases it.
    api.create(&coll("crud-vmim", VMI), &vmi("some-vmi")).await;
    crud_cycle(
        &api,
        "crud-vmim",
        VMIM,
        "VirtualMachineInstanceMigration",
        vmim("mig1", "some-vmi"),
    )
    .await;
}

#[tokio::test]
async fn kubevirt_crud() {
    let api = api().await;
    api.namespace("crud-kv").await;
    crud_cycle(&api, "crud-kv", KV, "KubeVirt", kubevirt_obj("kv1")).await;
}

#[tokio::test]
async fn cluster_wide_list_and_watch_span_namespaces() {
    let api = api().await;
    api.namespace("wide-a").await;
    api.namespace("wide-b").await;
    let start = api.get(&format!("{KUBEVIRT}/{VM}")).await;
    assert_eq!(start.status, StatusCode::OK);
    let start_rv = start.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = api
        .watch(&format!(
            "{KUBEVIRT}/{VM}?watch=true&resourceVersion={start_rv}&labelSelector=wide%3Dyes"
        ))
        .await;
    for ns in ["wide-b", "wide-a"] {
        let mut body = vm("wide");
        body["metadata"]["labels"]["wide"] = json!("yes");
        api.create(&coll(ns, VM), &body).await;
    }
    let first = watch.until(|e| e["type"] != "MODIFIED").await;
    let second = watch.until(|e| e["type"] != "MODIFIED").await;
    assert_eq!(
        (&first["type"], &second["type"]),
        (&json!("ADDED"), &json!("ADDED"))
    );
    assert_eq!(first["object"]["metadata"]["namespace"], "wide-b");
    assert_eq!(second["object"]["metadata"]["namespace"], "wide-a");

    // The cluster-wide list is ordered by namespace, then name.
    let r = api
        .get(&format!("{KUBEVIRT}/{VM}?labelSelector=wide%3Dyes"))
        .await;
    let namespaces: Vec<&str> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(namespaces, ["wide-a", "wide-b"]);
    for item in r.body["items"].as_array().unwrap() {
        assert_eq!(item["kind"], "VirtualMachine");
        assert_eq!(item["apiVersion"], "kubevirt.io/v1");
    }

    // Cluster-wide paths cannot address a single namespaced object.
    let r = api.get(&format!("{KUBEVIRT}/{VM}/wide")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

fn has_fields(obj: &Value, fields: &Value) -> bool {
    fields
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| &obj["status"][k] == v)
}

/// GET/PUT/PATCH on /status for a kind with a status subresource: only status changes,
/// generation stays, and status in the main resource is ignored. `fields` are status
/// fields no controller manages.
async fn status_subresource(api: &Api, ns: &str, plural: &str, body: Value, fields: Value) {
    let name = body["metadata"]["name"].as_str().unwrap().to_string();
    let path = item(ns, plural, &name);
    let status_path = format!("{path}/status");

    // status in a POST body is dropped.
    let mut with_status = body.clone();
    with_status["status"] = fields.clone();
    let created = api.create(&coll(ns, plural), &with_status).await;
    for (k, v) in fields.as_object().unwrap() {
        assert_ne!(&created["status"][k], v, "POST must drop status: {created}");
    }
    let settled = api.settle(&path).await;
    assert!(!has_fields(&settled, &fields));

    let r = api.get(&status_path).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body, settled, "GET /status returns the whole object");

    // PUT /status: status changes; label changes are ignored; generation stays.
    let mut update = settled.clone();
    for (k, v) in fields.as_object().unwrap() {
        update["status"][k] = v.clone();
    }
    update["metadata"]["labels"]["sneaky"] = json!("label");
    let r = api.put(&status_path, &update).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let after_put = r.body;
    assert!(has_fields(&after_put, &fields), "{after_put}");
    assert!(
        after_put["metadata"]["labels"].get("sneaky").is_none(),
        "{after_put}"
    );
    assert_eq!(after_put["metadata"]["generation"], 1);
    assert!(rv(&after_put) > rv(&settled));
    let after_put = api.settle(&path).await;
    // A spec or metadata change sent to /status is ignored too: nothing is written.
    let mut spec_change = after_put.clone();
    spec_change["spec"]["extraSpecField"] = json!("x");
    spec_change["metadata"]["annotations"] = json!({"a": "b"});
    let r = api.put(&status_path, &spec_change).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["spec"], after_put["spec"]);
    assert!(r.body["metadata"].get("annotations").is_none());
    assert_eq!(
        r.body["metadata"]["resourceVersion"], after_put["metadata"]["resourceVersion"],
        "no-op write"
    );

    // PATCH /status, merge and JSON patch.
    let r = api
        .merge(&status_path, &json!({"metadata": {"labels": {"x": "y"}}}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.body["metadata"]["labels"].get("x").is_none());
    let removals: Vec<Value> = fields
        .as_object()
        .unwrap()
        .keys()
        .map(|k| json!({"op": "remove", "path": format!("/status/{k}")}))
        .collect();
    let r = api
        .patch(
            &status_path,
            "application/json-patch+json",
            &Value::Array(removals).to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    for k in fields.as_object().unwrap().keys() {
        assert!(r.body["status"].get(k).is_none(), "{}", r.text);
    }
    assert_eq!(
        r.body["metadata"]["generation"], 1,
        "status writes never bump generation"
    );
    let r = api.merge(&status_path, &json!({"status": fields})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(has_fields(&r.body, &fields));
    let with_status = api.settle(&path).await;

    // Status sent to the main resource is ignored (stored status kept).
    let mut main = with_status.clone();
    main["status"] = json!({});
    main["metadata"]["labels"]["main"] = json!("yes");
    let r = api.put(&path, &main).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], with_status["status"]);
    assert_eq!(r.body["metadata"]["labels"]["main"], "yes");
    let mut bogus = fields.clone();
    for (_, v) in bogus.as_object_mut().unwrap() {
        *v = Value::Null;
    }
    let r = api.merge(&path, &json!({"status": bogus})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(has_fields(&r.body, &fields), "{}", r.text);

    // /status of a missing object is a 404 for that object.
    let r = api
        .get(&format!("{}/status", item(ns, plural, "missing")))
        .await;
    assert_status(
        &r,
        404,
        "NotFound",
        &format!("{plural}.kubevirt.io \"missing\" not found"),
    );
}

#[tokio::test]
async fn virtual_machine_status_subresource() {
    let api = api().await;
    api.namespace("status-vm").await;
    status_subresource(
        &api,
        "status-vm",
        VM,
        vm("svm"),
        json!({"volumeSnapshotStatuses": [{"name": "root", "enabled": false, "reason": "test"}]}),
    )
    .await;
}

#[tokio::test]
async fn migration_status_subresource() {
    let api = api().await;
    api.namespace("status-vmim").await;
    api.create(&coll("status-vmim", VMI), &vmi("some-vmi"))
        .await;
    status_subresource(
        &api,
        "status-vmim",
        VMIM,
        vmim("smig", "some-vmi"),
        json!({"synchronizationAddresses": ["10.0.0.1"]}),
    )
    .await;
}

#[tokio::test]
async fn kubevirt_status_subresource() {
    let api = api().await;
    api.namespace("status-kv").await;
    status_subresource(
        &api,
        "status-kv",
        KV,
        kubevirt_obj("skv"),
        json!({"observedKubeVirtVersion": "v1.5.0"}),
    )
    .await;
}

#[tokio::test]
async fn vmi_has_no_status_subresource() {
    let api = api().await;
    api.namespace("status-vmi").await;
    let created = api.create(&coll("status-vmi", VMI), &vmi("v")).await;
    // The mutating webhook records the first phase.
    assert_eq!(created["status"]["phase"], "Pending", "{created}");
    let status_path = format!("{}/status", item("status-vmi", VMI, "v"));
    // A subresource the kind does not have: the object's own NotFound.
    let not_found = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "virtualmachineinstances.kubevirt.io \"v\" not found", "reason": "NotFound",
        "details": {"name": "v", "group": "kubevirt.io", "kind": "virtualmachineinstances"}, "code": 404});
    assert_status_body(&api.get(&status_path).await, not_found.clone());
    assert_status_body(&api.put(&status_path, &created).await, not_found.clone());
    assert_status_body(
        &api.merge(&status_path, &json!({"status": {}})).await,
        not_found.clone(),
    );
    let mut other = not_found.clone();
    other["message"] = json!("virtualmachineinstances.kubevirt.io \"v\" not found");
    assert_status_body(
        &api.get(&format!("{}/bogus", item("status-vmi", VMI, "v")))
            .await,
        other,
    );

    // Status travels with the main resource, and such writes bump generation.
    let settled = api.settle(&item("status-vmi", VMI, "v")).await;
    let generation = settled["metadata"]["generation"].as_i64().unwrap();
    let r = api
        .merge(
            &item("status-vmi", VMI, "v"),
            &json!({"status": {"guestOSInfo": {"id": "test-os"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"]["guestOSInfo"]["id"], "test-os");
    assert_eq!(
        r.body["metadata"]["generation"],
        generation + 1,
        "{}",
        r.text
    );
}

#[tokio::test]
async fn namespaces_list_create_get_delete() {
    let api = api().await;
    let r = api.get(NAMESPACES).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["kind"], "NamespaceList");
    assert_eq!(r.body["apiVersion"], "v1");
    let listed = names(&r.body);
    for system in ["default", "kube-public", "kube-system"] {
        assert!(listed.contains(&system.to_string()), "{listed:?}");
    }

    let r = api.post(NAMESPACES, &namespace("ns-life")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let ns = r.body;
    assert_eq!(ns["kind"], "Namespace");
    assert_eq!(ns["apiVersion"], "v1");
    assert!(ns["metadata"].get("namespace").is_none());
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "ns-life"
    );
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(ns["status"]["phase"], "Active");
    assert!(is_uuid(ns["metadata"]["uid"].as_str().unwrap()));

    let r = api.get(&format!("{NAMESPACES}/ns-life")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, ns);
    let r = api.get(&format!("{NAMESPACES}/default")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["status"]["phase"], "Active");

    let r = api.post(NAMESPACES, &namespace("ns-life")).await;
    assert_status(
        &r,
        409,
        "AlreadyExists",
        "namespaces \"ns-life\" already exists",
    );
    assert_eq!(
        r.body["details"],
        json!({"name": "ns-life", "kind": "namespaces"}),
        "core group: no group in details"
    );
    let r = api.get(&format!("{NAMESPACES}/nope")).await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "namespaces \"nope\" not found", "reason": "NotFound",
            "details": {"name": "nope", "kind": "namespaces"}, "code": 404}),
    );

    // Content in the namespace goes with it.
    api.create(&coll("ns-life", VM), &vm("inside")).await;
    api.create(&coll("ns-life", VMI), &vmi("inside")).await;
    let mut finalized = vm("held");
    finalized["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.create(&coll("ns-life", VM), &finalized).await;

    let r = api.delete(&format!("{NAMESPACES}/ns-life"), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["kind"], "Namespace",
        "a namespace delete returns the namespace"
    );
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(r.body["status"]["phase"], "Terminating");

    // New content is refused while it terminates.
    let r = api.post(&coll("ns-life", VM), &vm("late")).await;
    assert_status(
        &r,
        403,
        "Forbidden",
        "virtualmachines.kubevirt.io \"late\" is forbidden: unable to create new content in namespace ns-life because it is being terminated",
    );
    assert_eq!(
        causes(&r),
        [(
            "NamespaceTerminating".into(),
            "metadata.namespace".into(),
            "namespace ns-life is being terminated".into()
        )]
    );

    // Content without finalizers goes; the finalized VM waits, marked for deletion.
    let within = Duration::from_secs(20);
    api.eventually(&item("ns-life", VM, "inside"), within, |r| r.status == 404)
        .await;
    api.eventually(&item("ns-life", VMI, "inside"), within, |r| r.status == 404)
        .await;
    let held = api
        .eventually(&item("ns-life", VM, "held"), within, |r| {
            r.body["metadata"]["deletionTimestamp"].is_string()
        })
        .await;
    assert_eq!(held.status, StatusCode::OK);
    let r = api.get(&format!("{NAMESPACES}/ns-life")).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the namespace waits for its content: {}",
        r.text
    );
    assert_eq!(r.body["status"]["phase"], "Terminating");

    // Releasing the finalizer lets the VM and then the namespace go.
    let r = api
        .merge(
            &item("ns-life", VM, "held"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    api.eventually(&item("ns-life", VM, "held"), within, |r| r.status == 404)
        .await;
    api.eventually(&format!("{NAMESPACES}/ns-life"), within, |r| {
        r.status == 404
    })
    .await;
    let r = api.get(NAMESPACES).await;
    assert!(!names(&r.body).contains(&"ns-life".to_string()));
}

#[tokio::test]
async fn system_namespaces_cannot_be_deleted() {
    let api = api().await;
    for ns in ["default", "kube-system", "kube-public"] {
        let r = api.delete(&format!("{NAMESPACES}/{ns}"), None).await;
        assert_status(
            &r,
            403,
            "Forbidden",
            &format!("namespaces \"{ns}\" is forbidden: this namespace may not be deleted"),
        );
    }
    let r = api.get(&format!("{NAMESPACES}/default")).await;
    assert_eq!(r.body["status"]["phase"], "Active");
    assert!(r.body["metadata"].get("deletionTimestamp").is_none());
}

#[tokio::test]
async fn namespace_names_are_dns_labels() {
    let api = api().await;
    let r = api.post(NAMESPACES, &namespace("Bad_NS")).await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Namespace \"Bad_NS\" is invalid: metadata.name: Invalid value: \"Bad_NS\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    );
    assert_eq!(r.body["details"]["kind"], "Namespace");
    assert_eq!(r.body["details"]["name"], "Bad_NS");
    assert_eq!(causes(&r)[0].0, "FieldValueInvalid");
    assert_eq!(causes(&r)[0].1, "metadata.name");
    // A valid subdomain that is not a label fails only because of its dots.
    let r = api.post(NAMESPACES, &namespace("has.dot")).await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Namespace \"has.dot\" is invalid: metadata.name: Invalid value: \"has.dot\": must not contain dots",
    );
    let long = "a".repeat(64);
    let r = api.post(NAMESPACES, &namespace(&long)).await;
    assert_status(
        &r,
        422,
        "Invalid",
        // Defaulting has already copied the name into the kubernetes.io/metadata.name
        // label, so upstream reports the label value as well.
        &format!("Namespace \"{long}\" is invalid: [metadata.name: Invalid value: \"{long}\": must be no more than 63 characters, metadata.labels: Invalid value: \"{long}\": must be no more than 63 characters]"),
    );
}
