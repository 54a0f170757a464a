//! DELETE: the Status of an immediate delete, finalizers and deletionTimestamp (also those
//! the VM and migration controllers hold), DeleteOptions preconditions, deletecollection,
//! and garbage collection of dependents through ownerReferences with background,
//! foreground and orphan propagation. The generic cases use KubeVirt objects, a kind no
//! admission or controller touches.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

const VM: &str = "virtualmachines";
const VMI: &str = "virtualmachineinstances";
const VMIM: &str = "virtualmachineinstancemigrations";
const KV: &str = "kubevirts";
const WAIT: Duration = Duration::from_secs(20);

fn owned_by(name: &str, owner: &Value, block: bool) -> Value {
    let mut body = kubevirt_obj(name);
    body["metadata"]["ownerReferences"] = json!([{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": block
    }]);
    body
}

async fn gone(api: &Api, path: &str) {
    api.eventually(path, WAIT, |r| r.status == StatusCode::NOT_FOUND)
        .await;
}

#[tokio::test]
async fn finalizers_hold_an_object_marked_for_deletion() {
    let api = api().await;
    let ns = "del-finalizers";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let path = item(ns, KV, "f");
    let mut body = kubevirt_obj("f");
    body["metadata"]["finalizers"] = json!(["example.com/hold", "example.com/second"]);
    let created = api.create(&c, &body).await;
    let mut watch = api
        .watch(&format!("{c}?watch=true&resourceVersion={}", rv(&created)))
        .await;

    // DELETE marks it and answers with the object.
    let r = api
        .delete(&path, Some(&json!({"propagationPolicy": "Background"})))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let marked = r.body;
    assert_eq!(marked["kind"], "KubeVirt");
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(marked["metadata"]["generation"], 2);
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["example.com/hold", "example.com/second"])
    );
    assert!(rv(&marked) > rv(&created));
    let e = watch.expect("MODIFIED", "f").await;
    assert_eq!(e["object"], marked);
    // A repeated DELETE returns it again, unchanged.
    let r = api.delete(&path, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, marked);
    assert_eq!(api.get(&path).await.body, marked);

    // No new finalizers once deleting; other changes are fine; timestamps stay.
    let r = api
        .merge(
            &path,
            &json!({"metadata": {"finalizers": ["example.com/hold", "example.com/second", "example.com/new"]}}),
        )
        .await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "KubeVirt.kubevirt.io \"f\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/new\"}",
            "reason": "Invalid",
            "details": {"name": "f", "group": "kubevirt.io", "kind": "KubeVirt", "causes": [
                {"reason": "FieldValueForbidden", "message": "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/new\"}", "field": "metadata.finalizers"}]},
            "code": 422}),
    );
    let r = api
        .merge(
            &path,
            &json!({"metadata": {"labels": {"still": "editable"}, "deletionTimestamp": null}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["metadata"]["deletionTimestamp"],
        marked["metadata"]["deletionTimestamp"]
    );
    // The name stays taken.
    let r = api.post(&c, &kubevirt_obj("f")).await;
    assert_status(
        &r,
        409,
        "AlreadyExists",
        "object is being deleted: kubevirts.kubevirt.io \"f\" already exists",
    );

    // Removing one finalizer keeps it; removing the last one deletes it.
    let r = api
        .patch(
            &path,
            "application/json-patch+json",
            r#"[{"op":"remove","path":"/metadata/finalizers/0"}]"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["metadata"]["finalizers"],
        json!(["example.com/second"])
    );
    let r = api
        .merge(&path, &json!({"metadata": {"finalizers": null}}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let e = watch.until(|e| e["type"] == "DELETED").await;
    assert_eq!(e["object"]["metadata"]["name"], "f");
    assert_eq!(api.get(&path).await.status, StatusCode::NOT_FOUND);
    // The name is free again.
    api.create(&c, &kubevirt_obj("f")).await;
}

#[tokio::test]
async fn vm_deletion_waits_for_the_vm_controller() {
    let api = api().await;
    let ns = "del-vm";
    api.namespace(ns).await;
    let vm0 = api.settled_vm(ns, &vm("v")).await;
    let path = item(ns, VM, "v");
    let r = api.delete(&path, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(
        r.body["metadata"]["deletionTimestamp"].is_string(),
        "{}",
        r.text
    );
    assert_eq!(r.body["metadata"]["uid"], vm0["metadata"]["uid"]);
    // KubeVirt's controller releases its finalizer, and the VM goes.
    gone(&api, &path).await;
}

#[tokio::test]
async fn migration_deletion_waits_for_the_migration_controller() {
    let api = api().await;
    let ns = "del-vmim";
    api.namespace(ns).await;
    // A migration needs its VMI; on this --no-node server the VMI stays Pending and the
    // migration waits in Pending for it to run.
    api.create(&coll(ns, VMI), &vmi("v")).await;
    let created = api.create(&coll(ns, VMIM), &vmim("m", "v")).await;
    assert_eq!(
        created["metadata"]["finalizers"],
        json!([MIGRATION_FINALIZER]),
        "the create mutator adds the migration controller's finalizer"
    );
    let path = item(ns, VMIM, "m");
    let pending = api
        .settle_until(&path, |m| m["status"]["phase"] == "Pending")
        .await;
    let mut watch = api
        .watch(&format!(
            "{}?watch=true&resourceVersion={}",
            coll(ns, VMIM),
            rv(&pending)
        ))
        .await;

    // DELETE marks it; the finalizer holds it.
    let r = api.delete(&path, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["kind"], "VirtualMachineInstanceMigration");
    assert!(
        r.body["metadata"]["deletionTimestamp"].is_string(),
        "{}",
        r.text
    );
    assert_eq!(
        r.body["metadata"]["finalizers"],
        json!([MIGRATION_FINALIZER])
    );
    assert_eq!(r.body["metadata"]["uid"], created["metadata"]["uid"]);

    // The controller fails a migration deleted before hand-off, then releases it.
    let failed = watch
        .until(|e| e["object"]["status"]["phase"] == "Failed")
        .await;
    assert_eq!(failed["type"], "MODIFIED", "{failed}");
    let status = &failed["object"]["status"];
    assert_eq!(
        status["migrationState"]["failureReason"], "Migration failed due to being canceled",
        "{failed}"
    );
    assert_eq!(
        condition(&failed["object"], "migrationAbortRequested").map(|c| &c["status"]),
        Some(&json!("True")),
        "{failed}"
    );
    let deleted = watch.until(|e| e["type"] == "DELETED").await;
    assert_eq!(deleted["object"]["metadata"]["name"], "m");
    gone(&api, &path).await;
    // The VMI is not the migration's dependent: it stays.
    assert_eq!(api.get(&item(ns, VMI, "v")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn delete_preconditions() {
    let api = api().await;
    let ns = "del-pre";
    api.namespace(ns).await;
    let created = api.create(&coll(ns, KV), &kubevirt_obj("p")).await;
    let path = item(ns, KV, "p");
    let uid = created["metadata"]["uid"].as_str().unwrap();
    let current = rv(&created);

    let r = api
        .delete(
            &path,
            Some(&json!({"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})),
        )
        .await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("Operation cannot be fulfilled on KubeVirt.kubevirt.io \"p\": the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match the UID in record ({uid}). The object might have been deleted and then recreated"),
            "reason": "Conflict",
            "details": {"name": "p", "group": "kubevirt.io", "kind": "KubeVirt"},
            "code": 409}),
    );
    let r = api
        .delete(
            &path,
            Some(&json!({"preconditions": {"resourceVersion": "1"}})),
        )
        .await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("Operation cannot be fulfilled on KubeVirt.kubevirt.io \"p\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({current}). The object might have been modified"),
            "reason": "Conflict",
            "details": {"name": "p", "group": "kubevirt.io", "kind": "KubeVirt"},
            "code": 409}),
    );
    assert_eq!(api.get(&path).await.status, StatusCode::OK);
    let r = api
        .delete(
            &path,
            Some(&json!({"kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": uid, "resourceVersion": current.to_string()}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "Success");
    assert_eq!(r.body["details"]["uid"], uid);
    assert_eq!(api.get(&path).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn delete_collection() {
    let api = api().await;
    let ns = "del-collection";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    for (name, group) in [("a", "x"), ("b", "x"), ("c", "y")] {
        let mut body = kubevirt_obj(name);
        body["metadata"]["labels"] = json!({"group": group});
        api.create(&c, &body).await;
    }
    let r = api
        .delete(&format!("{c}?labelSelector=group%3Dx"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["kind"], "KubeVirtList");
    assert_eq!(names(&r.body), ["a", "b"]);
    assert_eq!(names(&api.get(&c).await.body), ["c"]);
    // dryRun deletes nothing.
    let r = api.delete(&format!("{c}?dryRun=All"), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(names(&api.get(&c).await.body), ["c"]);
}

#[tokio::test]
async fn background_propagation() {
    let api = api().await;
    let ns = "gc-background";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let owner = api.create(&c, &kubevirt_obj("owner")).await;
    api.create(&c, &owned_by("dep1", &owner, true)).await;
    api.create(&c, &owned_by("dep2", &owner, false)).await;
    // An object that is not a dependent stays.
    api.create(&c, &kubevirt_obj("bystander")).await;
    // Owner goes at once; the collector then removes the dependents.
    let r = api
        .delete(
            &item(ns, KV, "owner"),
            Some(&json!({"propagationPolicy": "Background"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["kind"], "Status");
    gone(&api, &item(ns, KV, "dep1")).await;
    gone(&api, &item(ns, KV, "dep2")).await;
    assert_eq!(
        api.get(&item(ns, KV, "bystander")).await.status,
        StatusCode::OK
    );

    // The default policy of a custom resource is Background too.
    let owner = api.create(&c, &kubevirt_obj("owner2")).await;
    api.create(&c, &owned_by("dep3", &owner, true)).await;
    api.delete(&item(ns, KV, "owner2"), None).await;
    gone(&api, &item(ns, KV, "dep3")).await;

    // A dependent whose owner does not exist is collected.
    let ghost = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-00000000dead"}});
    api.create(&c, &owned_by("orphaned", &ghost, false)).await;
    gone(&api, &item(ns, KV, "orphaned")).await;

    // Owners of another kind work the same (a VM owning a KubeVirt).
    let vm_owner = api.settled_vm(ns, &vm("vm-owner")).await;
    api.create(&c, &owned_by("vm-dep", &vm_owner, true)).await;
    api.delete(&item(ns, VM, "vm-owner"), None).await;
    gone(&api, &item(ns, KV, "vm-dep")).await;
    gone(&api, &item(ns, VM, "vm-owner")).await;
}

#[tokio::test]
async fn foreground_propagation() {
    let api = api().await;
    let ns = "gc-foreground";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let owner = api.create(&c, &kubevirt_obj("owner")).await;
    // A blocking dependent that itself waits on a finalizer.
    let mut held = owned_by("held", &owner, true);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.create(&c, &held).await;
    api.create(&c, &owned_by("free", &owner, true)).await;

    let r = api
        .delete(
            &format!("{}?propagationPolicy=Foreground", item(ns, KV, "owner")),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["kind"], "KubeVirt", "the owner stays for now");
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        r.body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    // Dependents are deleted first; the held one waits, marked.
    gone(&api, &item(ns, KV, "free")).await;
    api.eventually(&item(ns, KV, "held"), WAIT, |r| {
        r.body["metadata"]["deletionTimestamp"].is_string()
    })
    .await;
    let r = api.get(&item(ns, KV, "owner")).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the owner waits for its blocking dependent"
    );
    assert_eq!(
        r.body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    // Releasing the dependent lets both go.
    api.merge(
        &item(ns, KV, "held"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await;
    gone(&api, &item(ns, KV, "held")).await;
    gone(&api, &item(ns, KV, "owner")).await;

    // A dependent that does not block does not hold the owner.
    let owner = api.create(&c, &kubevirt_obj("owner2")).await;
    let mut lazy = owned_by("lazy", &owner, false);
    lazy["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.create(&c, &lazy).await;
    api.delete(
        &item(ns, KV, "owner2"),
        Some(&json!({"propagationPolicy": "Foreground"})),
    )
    .await;
    gone(&api, &item(ns, KV, "owner2")).await;
    api.merge(
        &item(ns, KV, "lazy"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await;
    gone(&api, &item(ns, KV, "lazy")).await;
}

#[tokio::test]
async fn orphan_propagation() {
    let api = api().await;
    let ns = "gc-orphan";
    api.namespace(ns).await;
    let c = coll(ns, KV);
    let owner = api.create(&c, &kubevirt_obj("owner")).await;
    api.create(&c, &owned_by("kid1", &owner, true)).await;
    let mut kid2 = owned_by("kid2", &owner, false);
    // A second owner reference that stays.
    let other = api.create(&c, &kubevirt_obj("other")).await;
    kid2["metadata"]["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .push(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "name": "other", "uid": other["metadata"]["uid"]}));
    api.create(&c, &kid2).await;

    let r = api
        .delete(
            &item(ns, KV, "owner"),
            Some(&json!({"propagationPolicy": "Orphan"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["metadata"]["finalizers"], json!(["orphan"]));
    gone(&api, &item(ns, KV, "owner")).await;
    let kid1 = api.get(&item(ns, KV, "kid1")).await;
    assert_eq!(kid1.status, StatusCode::OK);
    assert!(
        kid1.body["metadata"].get("ownerReferences").is_none(),
        "{}",
        kid1.text
    );
    let kid2 = api.get(&item(ns, KV, "kid2")).await;
    assert_eq!(kid2.status, StatusCode::OK);
    assert_eq!(
        kid2.body["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "only the deleted owner's reference goes: {}",
        kid2.text
    );
    assert_eq!(kid2.body["metadata"]["ownerReferences"][0]["name"], "other");

    // The deprecated orphanDependents=true means the same.
    let owner = api.create(&c, &kubevirt_obj("owner3")).await;
    api.create(&c, &owned_by("kid3", &owner, true)).await;
    api.delete(
        &item(ns, KV, "owner3"),
        Some(&json!({"orphanDependents": true})),
    )
    .await;
    gone(&api, &item(ns, KV, "owner3")).await;
    let kid3 = api.get(&item(ns, KV, "kid3")).await;
    assert_eq!(kid3.status, StatusCode::OK);
    assert!(kid3.body["metadata"].get("ownerReferences").is_none());
}
