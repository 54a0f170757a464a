//! DELETE: the Status of an immediate delete, finalizers and deletionTimestamp,
//! DeleteOptions preconditions, deletecollection, and garbage collection of dependents
//! through ownerReferences with background, foreground and orphan propagation.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

const VM: &str = "virtualmachines";
const VMIM: &str = "virtualmachineinstancemigrations";
const WAIT: Duration = Duration::from_secs(20);

fn owned_by(name: &str, owner: &Value, block: bool) -> Value {
    let mut body = vmim(name, "x");
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
    let c = coll(ns, VMIM);
    let path = item(ns, VMIM, "f");
    let mut body = vmim("f", "x");
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
    assert_eq!(marked["kind"], "VirtualMachineInstanceMigration");
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
            "message": "VirtualMachineInstanceMigration.kubevirt.io \"f\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/new\"}",
            "reason": "Invalid",
            "details": {"name": "f", "group": "kubevirt.io", "kind": "VirtualMachineInstanceMigration", "causes": [
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
    let r = api.post(&c, &vmim("f", "x")).await;
    assert_status(
        &r,
        409,
        "AlreadyExists",
        "object is being deleted: virtualmachineinstancemigrations.kubevirt.io \"f\" already exists",
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
    api.create(&c, &vmim("f", "x")).await;
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
async fn delete_preconditions() {
    let api = api().await;
    let ns = "del-pre";
    api.namespace(ns).await;
    let created = api.create(&coll(ns, VMIM), &vmim("p", "x")).await;
    let path = item(ns, VMIM, "p");
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
            "message": format!("Operation cannot be fulfilled on VirtualMachineInstanceMigration.kubevirt.io \"p\": the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match the UID in record ({uid}). The object might have been deleted and then recreated"),
            "reason": "Conflict",
            "details": {"name": "p", "group": "kubevirt.io", "kind": "VirtualMachineInstanceMigration"},
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
            "message": format!("Operation cannot be fulfilled on VirtualMachineInstanceMigration.kubevirt.io \"p\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({current}). The object might have been modified"),
            "reason": "Conflict",
            "details": {"name": "p", "group": "kubevirt.io", "kind": "VirtualMachineInstanceMigration"},
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
    let c = coll(ns, VMIM);
    for (name, group) in [("a", "x"), ("b", "x"), ("c", "y")] {
        let mut body = vmim(name, "v");
        body["metadata"]["labels"] = json!({"group": group});
        api.create(&c, &body).await;
    }
    let r = api
        .delete(&format!("{c}?labelSelector=group%3Dx"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["kind"], "VirtualMachineInstanceMigrationList");
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
    let c = coll(ns, VMIM);
    let owner = api.create(&c, &vmim("owner", "x")).await;
    api.create(&c, &owned_by("dep1", &owner, true)).await;
    api.create(&c, &owned_by("dep2", &owner, false)).await;
    // An object that is not a dependent stays.
    api.create(&c, &vmim("bystander", "x")).await;
    // Owner goes at once; the collector then removes the dependents.
    let r = api
        .delete(
            &item(ns, VMIM, "owner"),
            Some(&json!({"propagationPolicy": "Background"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["kind"], "Status");
    gone(&api, &item(ns, VMIM, "dep1")).await;
    gone(&api, &item(ns, VMIM, "dep2")).await;
    assert_eq!(
        api.get(&item(ns, VMIM, "bystander")).await.status,
        StatusCode::OK
    );

    // The default policy of a custom resource is Background too.
    let owner = api.create(&c, &vmim("owner2", "x")).await;
    api.create(&c, &owned_by("dep3", &owner, true)).await;
    api.delete(&item(ns, VMIM, "owner2"), None).await;
    gone(&api, &item(ns, VMIM, "dep3")).await;

    // A dependent whose owner does not exist is collected.
    let ghost = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-00000000dead"}});
    api.create(&c, &owned_by("orphaned", &ghost, false)).await;
    gone(&api, &item(ns, VMIM, "orphaned")).await;

    // Owners of another kind work the same (VM owning migrations).
    let vm_owner = api.settled_vm(ns, &vm("vm-owner")).await;
    api.create(&c, &owned_by("vm-dep", &vm_owner, true)).await;
    api.delete(&item(ns, VM, "vm-owner"), None).await;
    gone(&api, &item(ns, VMIM, "vm-dep")).await;
    gone(&api, &item(ns, VM, "vm-owner")).await;
}

#[tokio::test]
async fn foreground_propagation() {
    let api = api().await;
    let ns = "gc-foreground";
    api.namespace(ns).await;
    let c = coll(ns, VMIM);
    let owner = api.create(&c, &vmim("owner", "x")).await;
    // A blocking dependent that itself waits on a finalizer.
    let mut held = owned_by("held", &owner, true);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.create(&c, &held).await;
    api.create(&c, &owned_by("free", &owner, true)).await;

    let r = api
        .delete(
            &format!("{}?propagationPolicy=Foreground", item(ns, VMIM, "owner")),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["kind"], "VirtualMachineInstanceMigration",
        "the owner stays for now"
    );
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        r.body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    // Dependents are deleted first; the held one waits, marked.
    gone(&api, &item(ns, VMIM, "free")).await;
    api.eventually(&item(ns, VMIM, "held"), WAIT, |r| {
        r.body["metadata"]["deletionTimestamp"].is_string()
    })
    .await;
    let r = api.get(&item(ns, VMIM, "owner")).await;
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
        &item(ns, VMIM, "held"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await;
    gone(&api, &item(ns, VMIM, "held")).await;
    gone(&api, &item(ns, VMIM, "owner")).await;

    // A dependent that does not block does not hold the owner.
    let owner = api.create(&c, &vmim("owner2", "x")).await;
    let mut lazy = owned_by("lazy", &owner, false);
    lazy["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.create(&c, &lazy).await;
    api.delete(
        &item(ns, VMIM, "owner2"),
        Some(&json!({"propagationPolicy": "Foreground"})),
    )
    .await;
    gone(&api, &item(ns, VMIM, "owner2")).await;
    api.merge(
        &item(ns, VMIM, "lazy"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await;
    gone(&api, &item(ns, VMIM, "lazy")).await;
}

#[tokio::test]
async fn orphan_propagation() {
    let api = api().await;
    let ns = "gc-orphan";
    api.namespace(ns).await;
    let c = coll(ns, VMIM);
    let owner = api.create(&c, &vmim("owner", "x")).await;
    api.create(&c, &owned_by("kid1", &owner, true)).await;
    let mut kid2 = owned_by("kid2", &owner, false);
    // A second owner reference that stays.
    let other = api.create(&c, &vmim("other", "x")).await;
    kid2["metadata"]["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .push(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "name": "other", "uid": other["metadata"]["uid"]}));
    api.create(&c, &kid2).await;

    let r = api
        .delete(
            &item(ns, VMIM, "owner"),
            Some(&json!({"propagationPolicy": "Orphan"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["metadata"]["finalizers"], json!(["orphan"]));
    gone(&api, &item(ns, VMIM, "owner")).await;
    let kid1 = api.get(&item(ns, VMIM, "kid1")).await;
    assert_eq!(kid1.status, StatusCode::OK);
    assert!(
        kid1.body["metadata"].get("ownerReferences").is_none(),
        "{}",
        kid1.text
    );
    let kid2 = api.get(&item(ns, VMIM, "kid2")).await;
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
    let owner = api.create(&c, &vmim("owner3", "x")).await;
    api.create(&c, &owned_by("kid3", &owner, true)).await;
    api.delete(
        &item(ns, VMIM, "owner3"),
        Some(&json!({"orphanDependents": true})),
    )
    .await;
    gone(&api, &item(ns, VMIM, "owner3")).await;
    let kid3 = api.get(&item(ns, VMIM, "kid3")).await;
    assert_eq!(kid3.status, StatusCode::OK);
    assert!(kid3.body["metadata"].get("ownerReferences").is_none());
}
