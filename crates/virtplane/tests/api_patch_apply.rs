//! PATCH in every accepted form: JSON merge patch (RFC 7386), JSON patch (RFC 6902, incl.
//! `test`), server-side apply with managedFields, conflicts and force; plus the managers
//! recorded for ordinary writes.

mod support;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use support::*;

const VM: &str = "virtualmachines";
/// KubeVirt objects: a namespaced kind that no admission or controller touches.
const KV: &str = "kubevirts";
const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    if let Some(d) = details {
        s["details"] = d;
    }
    s
}

#[tokio::test]
async fn merge_patch_semantics() {
    let api = api().await;
    api.namespace("patch-merge").await;
    let path = item("patch-merge", VM, "m");
    let mut body = vm("m");
    body["metadata"]["labels"] = json!({"keep": "1", "drop": "2"});
    body["spec"]["template"]["spec"]["domain"]["devices"]["disks"] = json!([{"name": "root", "disk": {"bus": "virtio"}}, {"name": "data", "disk": {"bus": "virtio"}}]);
    body["spec"]["template"]["spec"]["volumes"] = json!([
        {"name": "root", "containerDisk": {"image": "registry.local/guest:1"}},
        {"name": "data", "emptyDisk": {"capacity": "1Gi"}}
    ]);
    api.create(&coll("patch-merge", VM), &body).await;

    // Objects merge recursively; null deletes; untouched fields stay.
    let r = api
        .merge(
            &path,
            &json!({"metadata": {"labels": {"drop": null, "new": "3"}, "annotations": {"a": "b"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["metadata"]["labels"],
        json!({"keep": "1", "new": "3"})
    );
    assert_eq!(r.body["metadata"]["annotations"], json!({"a": "b"}));
    assert_eq!(r.body["spec"]["runStrategy"], "Halted");
    // Arrays are replaced wholesale.
    let r = api
        .merge(
            &path,
            &json!({"spec": {"template": {"spec": {
                "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "sata"}}]}},
                "volumes": [{"name": "root", "containerDisk": {"image": "registry.local/guest:2"}}]}}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["spec"]["template"]["spec"]["domain"]["devices"]["disks"],
        json!([{"name": "root", "disk": {"bus": "sata"}}])
    );
    assert_eq!(
        r.body["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        r.body["spec"]["template"]["spec"]["domain"]["memory"]["guest"],
        "128Mi"
    );
    assert_eq!(r.body["metadata"]["generation"], 2);
    // A merge patch that makes the object invalid is refused as a whole.
    let r = api.merge(&path, &json!({"spec": {"template": null}})).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert!(api.get(&path).await.body["spec"]["template"].is_object());

    // A non-object body (what the Python CustomObjectsApi sends for list patches).
    let r = api
        .patch(
            &path,
            MERGE,
            r#"[{"op":"add","path":"/metadata/labels/x","value":"y"}]"#,
        )
        .await;
    assert_status_body(
        &r,
        status(
            400,
            "BadRequest",
            "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}",
            None,
        ),
    );
    let r = api.patch(&path, MERGE, "{not json").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.body["reason"], "BadRequest");
    // The name (or namespace) in a patch cannot move the object.
    let r = api
        .merge(&path, &json!({"metadata": {"namespace": "default"}}))
        .await;
    assert_status_body(
        &r,
        status(
            400,
            "BadRequest",
            "the namespace of the object (default) does not match the namespace on the request (patch-merge)",
            None,
        ),
    );
    let r = api
        .merge(&path, &json!({"metadata": {"name": "elsewhere"}}))
        .await;
    assert_status_body(
        &r,
        status(
            400,
            "BadRequest",
            "the name of the object (elsewhere) does not match the name on the URL (m)",
            None,
        ),
    );
}

#[tokio::test]
async fn json_patch_semantics() {
    let api = api().await;
    api.namespace("patch-json").await;
    let path = item("patch-json", VM, "j");
    api.create(&coll("patch-json", VM), &vm("j")).await;
    let ops = json!([
        {"op": "test", "path": "/spec/runStrategy", "value": "Halted"},
        {"op": "add", "path": "/metadata/labels/added", "value": "a"},
        {"op": "copy", "from": "/metadata/labels/added", "path": "/metadata/labels/copied"},
        {"op": "move", "from": "/metadata/labels/app", "path": "/metadata/labels/moved"},
        {"op": "replace", "path": "/spec/runStrategy", "value": "Manual"},
        {"op": "add", "path": "/spec/template/spec/volumes/-", "value": {"name": "extra", "emptyDisk": {"capacity": "1Gi"}}},
        {"op": "add", "path": "/spec/template/spec/domain/devices/disks/0", "value": {"name": "extra", "disk": {"bus": "virtio"}}},
        {"op": "remove", "path": "/metadata/labels/added"}
    ]);
    let r = api.patch(&path, JSON_PATCH, &ops.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["metadata"]["labels"],
        json!({"copied": "a", "moved": "demo"})
    );
    assert_eq!(r.body["spec"]["runStrategy"], "Manual");
    let disks = &r.body["spec"]["template"]["spec"]["domain"]["devices"]["disks"];
    assert_eq!(disks[0]["name"], "extra");
    assert_eq!(disks[1]["name"], "root");
    assert_eq!(
        r.body["spec"]["template"]["spec"]["volumes"][1]["name"],
        "extra"
    );

    // A failing test op, or an op on a missing path: 422, and nothing is applied.
    let before = api.get(&path).await.body;
    for ops in [
        json!([{"op": "add", "path": "/metadata/labels/partial", "value": "x"},
               {"op": "test", "path": "/spec/runStrategy", "value": "Always"}]),
        json!([{"op": "remove", "path": "/metadata/labels/nope"}]),
        json!([{"op": "replace", "path": "/spec/nothing/here", "value": 1}]),
        // Operations are only checked when applied.
        json!([{"op": "frobnicate", "path": "/a"}]),
    ] {
        let r = api.patch(&path, JSON_PATCH, &ops.to_string()).await;
        assert_eq!(r.status.as_u16(), 422, "{ops}: {}", r.text);
        assert_eq!(r.body["reason"], "Invalid");
        assert_eq!(
            r.body["message"], "the server rejected our request due to an error in our request",
            "{}",
            r.text
        );
        let c = causes(&r);
        assert_eq!(c.len(), 1, "{}", r.text);
        assert_eq!(c[0].0, "UnexpectedServerResponse");
        assert!(!c[0].2.is_empty());
    }
    let after = api.get(&path).await.body;
    assert_eq!(after["metadata"]["labels"], before["metadata"]["labels"]);
    assert_eq!(after["spec"], before["spec"]);

    // Undecodable patches are 400.
    for bad in [r#"{"op":"add"}"#, "[{]", "not json"] {
        let r = api.patch(&path, JSON_PATCH, bad).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text);
        assert_eq!(r.body["reason"], "BadRequest");
    }
    // An empty patch changes nothing.
    let r = api.patch(&path, JSON_PATCH, "[]").await;
    assert_eq!(r.status, StatusCode::OK);
}

/// The managedFields entry of `manager` (optionally for a subresource).
fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

#[tokio::test]
async fn managed_fields_of_ordinary_writes() {
    let api = api().await;
    api.namespace("patch-managers").await;
    let c = coll("patch-managers", KV);
    let r = api
        .post(&format!("{c}?fieldManager=creator"), &kubevirt_obj("w"))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let e = entry(&r.body, "creator", "Update").expect("creator entry");
    assert_eq!(e["apiVersion"], "kubevirt.io/v1");
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert!(e["time"].is_string());
    assert!(
        e["fieldsV1"]["f:spec"]["f:configuration"]["f:migrations"]["f:bandwidthPerMigration"]
            .is_object(),
        "{e}"
    );
    // Without fieldManager the manager is the User-Agent up to its first '/'.
    let path = item("patch-managers", KV, "w");
    let r = api
        .send(
            Method::PATCH,
            &path,
            &[
                ("content-type", MERGE),
                ("user-agent", "my-client/1.2.3 (linux)"),
            ],
            Some(br#"{"metadata":{"labels":{"by":"ua"}}}"#.to_vec()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let e = entry(&r.body, "my-client", "Update").expect("user-agent manager");
    assert!(
        e["fieldsV1"]["f:metadata"]["f:labels"]["f:by"].is_object(),
        "{e}"
    );
    // Status writes are recorded with their subresource.
    let r = api
        .merge(
            &format!("{path}/status?fieldManager=statuser"),
            &json!({"status": {"phase": "Deploying"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let e = entry(&r.body, "statuser", "Update").expect("status manager");
    assert_eq!(e["subresource"], "status");
    assert!(e["fieldsV1"]["f:status"]["f:phase"].is_object(), "{e}");
    // A fieldManager over 128 bytes is refused.
    let long = "m".repeat(129);
    let r = api
        .merge(&format!("{path}?fieldManager={long}"), &json!({}))
        .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes",
    );
}

#[tokio::test]
async fn server_side_apply() {
    let api = api().await;
    api.namespace("patch-apply").await;
    let path = item("patch-apply", KV, "a");
    let apply = |manager: &str, force: bool, body: &Value| {
        let url = format!(
            "{path}?fieldManager={manager}{}",
            if force { "&force=true" } else { "" }
        );
        let body = body.to_string();
        let api = &api;
        async move { api.patch(&url, APPLY, &body).await }
    };
    let mut manifest = kubevirt_obj("a");
    manifest["metadata"]["labels"] = json!({"team": "a", "extra": "1"});

    // Apply creates (201) and records an Apply entry.
    let r = apply("mgr-a", false, &manifest).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let e = entry(&r.body, "mgr-a", "Apply").expect("apply entry");
    assert!(
        e["fieldsV1"]["f:metadata"]["f:labels"]["f:team"].is_object(),
        "{e}"
    );
    assert!(
        e["fieldsV1"]["f:spec"]["f:configuration"]["f:migrations"]["f:bandwidthPerMigration"]
            .is_object(),
        "{e}"
    );
    // Applying the same again changes nothing.
    let again = apply("mgr-a", false, &manifest).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(
        again.body["metadata"]["resourceVersion"],
        r.body["metadata"]["resourceVersion"]
    );

    // YAML bodies work; fields this manager no longer applies are removed.
    let yaml = "apiVersion: kubevirt.io/v1\nkind: KubeVirt\nmetadata:\n  name: a\n  labels:\n    team: a\nspec:\n  configuration:\n    migrations:\n      bandwidthPerMigration: 64Mi\n";
    let r = api
        .patch(&format!("{path}?fieldManager=mgr-a"), APPLY, yaml)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(
        r.body["metadata"]["labels"].get("extra").is_none(),
        "{}",
        r.text
    );
    assert_eq!(r.body["metadata"]["labels"]["team"], "a");

    // Another applier setting the same field differently conflicts.
    let mut other = kubevirt_obj("a");
    other["metadata"]["labels"] = json!({"team": "b"});
    let r = apply("mgr-b", false, &other).await;
    assert_status_body(
        &r,
        status(
            409,
            "Conflict",
            "Apply failed with 1 conflict: conflict with \"mgr-a\": .metadata.labels.team",
            Some(
                json!({"causes": [{"reason": "FieldManagerConflict", "message": "conflict with \"mgr-a\"",
                "field": ".metadata.labels.team"}]}),
            ),
        ),
    );
    // Agreeing on a value is not a conflict: both share it.
    let mut same = kubevirt_obj("a");
    same["metadata"]["labels"] = json!({"team": "a"});
    let r = apply("mgr-c", false, &same).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(entry(&r.body, "mgr-c", "Apply").is_some());

    // A field last written by an Update manager names it with its apiVersion (manager
    // identifiers never carry the time).
    let r = api
        .merge(
            &format!("{path}?fieldManager=patcher"),
            &json!({"metadata": {"labels": {"owner": "p"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(entry(&r.body, "patcher", "Update").is_some());
    let mut take = kubevirt_obj("a");
    take["metadata"]["labels"] = json!({"team": "a", "owner": "a"});
    let r = apply("mgr-a", false, &take).await;
    assert_status_body(
        &r,
        status(
            409,
            "Conflict",
            "Apply failed with 1 conflict: conflict with \"patcher\" using kubevirt.io/v1: .metadata.labels.owner",
            Some(json!({"causes": [{"reason": "FieldManagerConflict",
                "message": "conflict with \"patcher\" using kubevirt.io/v1",
                "field": ".metadata.labels.owner"}]})),
        ),
    );
    // Several conflicts with several managers: grouped by sorted manager, one line each.
    let mut both = kubevirt_obj("a");
    both["metadata"]["labels"] = json!({"team": "z", "owner": "z"});
    let r = apply("mgr-d", false, &both).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(
        r.body["message"],
        "Apply failed with 3 conflicts: conflicts with \"mgr-a\":\n- .metadata.labels.team\nconflicts with \"mgr-c\":\n- .metadata.labels.team\nconflicts with \"patcher\" using kubevirt.io/v1:\n- .metadata.labels.owner",
        "{}",
        r.text
    );
    assert_eq!(causes(&r).len(), 3);

    // force=true takes the fields over.
    let r = apply("mgr-b", true, &other).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["metadata"]["labels"]["team"], "b");
    assert!(
        entry(&r.body, "mgr-b", "Apply").unwrap()["fieldsV1"]["f:metadata"]["f:labels"]["f:team"]
            .is_object()
    );
    let a = entry(&r.body, "mgr-a", "Apply");
    assert!(
        a.is_none_or(|a| a["fieldsV1"]["f:metadata"]["f:labels"]
            .get("f:team")
            .is_none()),
        "mgr-a lost team: {}",
        r.text
    );

    // Options: fieldManager is required; force only for apply.
    let r = api.patch(&path, APPLY, &manifest.to_string()).await;
    assert_status_body(
        &r,
        status(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            Some(json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{"reason": "FieldValueRequired",
                "message": "Required value: is required for apply patch", "field": "fieldManager"}]})),
        ),
    );
    let r = api.patch(&format!("{path}?force=false"), MERGE, "{}").await;
    assert_status_body(
        &r,
        status(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
            Some(json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{"reason": "FieldValueForbidden",
                "message": "Forbidden: may not be specified for non-apply patch", "field": "force"}]})),
        ),
    );
    // The applied name must be the URL's.
    let r = apply("mgr-a", false, &kubevirt_obj("not-a")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);

    // Apply to /status changes only status.
    let r = api
        .patch(
            &format!("{path}/status?fieldManager=status-applier"),
            APPLY,
            &json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                    "metadata": {"name": "a", "labels": {"ignored": "yes"}},
                    "status": {"phase": "Deployed"}})
            .to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"]["phase"], "Deployed");
    assert!(r.body["metadata"]["labels"].get("ignored").is_none());
    // Apply to /status of a missing object is a 404.
    let r = api
        .patch(
            &format!(
                "{}/status?fieldManager=x",
                item("patch-apply", KV, "missing")
            ),
            APPLY,
            &kubevirt_obj("missing").to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

#[tokio::test]
async fn apply_with_stale_resource_version_conflicts() {
    let api = api().await;
    api.namespace("patch-apply-rv").await;
    let created = api
        .create(&coll("patch-apply-rv", KV), &kubevirt_obj("r"))
        .await;
    api.merge(
        &item("patch-apply-rv", KV, "r"),
        &json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await;
    let mut manifest = kubevirt_obj("r");
    manifest["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let r = api
        .patch(
            &format!("{}?fieldManager=m", item("patch-apply-rv", KV, "r")),
            APPLY,
            &manifest.to_string(),
        )
        .await;
    assert_status(
        &r,
        409,
        "Conflict",
        "Operation cannot be fulfilled on kubevirts.kubevirt.io \"r\": the object has been modified; please apply your changes to the latest version and try again",
    );
}
