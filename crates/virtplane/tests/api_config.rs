//! Core `v1` ConfigMaps and Secrets through the API: every verb, watch, kubectl's Table
//! columns, Secret `stringData` and `type` defaulting, and kube-apiserver's validation
//! (config keys, base64, typed Secrets, `immutable`) with its Status bodies.

mod support;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

fn configmaps(ns: &str) -> String {
    format!("{NAMESPACES}/{ns}/configmaps")
}

fn secrets(ns: &str) -> String {
    format!("{NAMESPACES}/{ns}/secrets")
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn secret(name: &str, body: Value) -> Value {
    let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}});
    if let (Some(secret), Value::Object(extra)) = (secret.as_object_mut(), body) {
        secret.extend(extra);
    }
    secret
}

async fn table(api: &Api, path: &str) -> Value {
    let r = api
        .send(reqwest::Method::GET, path, &[("accept", TABLE)], None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.body
}

fn column_names(table: &Value) -> Vec<&str> {
    table["columnDefinitions"]
        .as_array()
        .unwrap_or_else(|| panic!("no columns: {table}"))
        .iter()
        .map(|c| c["name"].as_str().unwrap_or(""))
        .collect()
}

#[tokio::test]
async fn config_map_verbs_table_and_watch() {
    let api = api().await;
    let ns = "cm-verbs";
    api.namespace(ns).await;
    let coll = configmaps(ns);
    let mut watch = api
        .watch(&format!("{coll}?watch=true&resourceVersion=0"))
        .await;

    let created = api
        .create(
            &coll,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sysprep"},
                    "data": {"unattend.xml": "<unattend/>"}, "binaryData": {"logo.bin": "AAEC"}}),
        )
        .await;
    assert_eq!(created["data"], json!({"unattend.xml": "<unattend/>"}));
    assert_eq!(created["binaryData"], json!({"logo.bin": "AAEC"}));
    assert!(created["metadata"]["uid"].is_string(), "{created}");
    let event = watch.expect("ADDED", "sysprep").await;
    assert_eq!(event["object"]["data"]["unattend.xml"], "<unattend/>");

    let item = format!("{coll}/sysprep");
    let got = api.get(&item).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    assert_eq!(got.body, created);
    let list = api.get(&coll).await;
    assert_eq!(list.body["kind"], "ConfigMapList", "{}", list.text);
    assert_eq!(names(&list.body), ["sysprep"]);

    // kubectl get cm: NAME DATA AGE, DATA counting data and binaryData keys.
    let t = table(&api, &coll).await;
    assert_eq!(column_names(&t), ["Name", "Data", "Age"]);
    assert_eq!(t["rows"][0]["cells"][0], "sysprep");
    assert_eq!(t["rows"][0]["cells"][1], 2);

    // Built-in kinds take a PUT without resourceVersion (an unconditional update).
    let mut replacement = config_map("sysprep", json!({"unattend.xml": "<v2/>", "extra": "1"}));
    replacement["metadata"]["namespace"] = json!(ns);
    let r = api.put(&item, &replacement).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["data"]["unattend.xml"], "<v2/>");
    watch.expect("MODIFIED", "sysprep").await;

    // Merge and strategic merge patches both work on a built-in kind.
    let r = api
        .patch(
            &item,
            "application/merge-patch+json",
            r#"{"data":{"extra":null}}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["data"], json!({"unattend.xml": "<v2/>"}));
    let r = api
        .patch(
            &item,
            "application/strategic-merge-patch+json",
            r#"{"data":{"autounattend.xml":"<a/>"}}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["data"],
        json!({"unattend.xml": "<v2/>", "autounattend.xml": "<a/>"})
    );

    let r = api.delete(&item, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    watch.until(|e| e["type"] == "DELETED").await;
    let r = api.get(&item).await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "configmaps \"sysprep\" not found", "reason": "NotFound",
               "details": {"name": "sysprep", "kind": "configmaps"}, "code": 404}),
    );
}

#[tokio::test]
async fn secret_string_data_type_and_table() {
    let api = api().await;
    let ns = "secret-verbs";
    api.namespace(ns).await;
    let coll = secrets(ns);
    let created = api
        .create(
            &coll,
            &secret(
                "userdata",
                json!({"data": {"kept": "a2VwdA=="}, "stringData": {"userdata": "#cloud-config\n"}}),
            ),
        )
        .await;
    // stringData is write-only: merged into data as base64; type defaults to Opaque.
    assert_eq!(
        created["data"],
        json!({"kept": "a2VwdA==", "userdata": "I2Nsb3VkLWNvbmZpZwo="})
    );
    assert_eq!(created["type"], "Opaque");
    assert!(created.get("stringData").is_none(), "{created}");
    let got = api.get(&format!("{coll}/userdata")).await;
    assert_eq!(got.body, created);

    api.create(
        &coll,
        &secret(
            "cert",
            json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "Y3J0", "tls.key": "a2V5"}}),
        ),
    )
    .await;
    // kubectl get secret: NAME TYPE DATA AGE.
    let t = table(&api, &coll).await;
    assert_eq!(column_names(&t), ["Name", "Type", "Data", "Age"]);
    let rows: Vec<(Value, Value, Value)> = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["cells"][0].clone(),
                r["cells"][1].clone(),
                r["cells"][2].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (json!("cert"), json!("kubernetes.io/tls"), json!(2)),
            (json!("userdata"), json!("Opaque"), json!(2))
        ]
    );
    // The field selector kubectl offers for Secrets.
    let r = api
        .get(&format!("{coll}?fieldSelector=type%3Dkubernetes.io%2Ftls"))
        .await;
    assert_eq!(names(&r.body), ["cert"], "{}", r.text);

    // stringData on a patch lands in data too.
    let r = api
        .merge(
            &format!("{coll}/userdata"),
            &json!({"stringData": {"networkdata": "version: 2\n"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["data"]["networkdata"], "dmVyc2lvbjogMgo=");
    assert!(r.body.get("stringData").is_none(), "{}", r.text);
}

#[tokio::test]
async fn validation_errors_are_kubernetes_statuses() {
    let api = api().await;
    let ns = "config-invalid";
    api.namespace(ns).await;

    let r = api
        .post(&configmaps(ns), &config_map("bad-key", json!({"a b": "1"})))
        .await;
    let detail = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": format!("ConfigMap \"bad-key\" is invalid: data[a b]: Invalid value: \"a b\": {detail}"),
               "reason": "Invalid",
               "details": {"name": "bad-key", "kind": "ConfigMap", "causes": [
                   {"reason": "FieldValueInvalid", "message": format!("Invalid value: \"a b\": {detail}"), "field": "data[a b]"}]},
               "code": 422}),
    );

    let r = api
        .post(
            &configmaps(ns),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dup"},
                    "data": {"k": "1"}, "binaryData": {"k": "AA=="}}),
        )
        .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ConfigMap \"dup\" is invalid: data[k]: Invalid value: \"k\": duplicate of key present in binaryData",
    );

    let r = api
        .post(&configmaps(ns), &config_map("dots", json!({"..": "1"})))
        .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ConfigMap \"dots\" is invalid: data[..]: Invalid value: \"..\": must not be '..'",
    );

    // Secret data is base64: anything else is a decoding error (400), as upstream.
    let r = api
        .post(
            &secrets(ns),
            &secret("raw", json!({"data": {"password": "hunter2!"}})),
        )
        .await;
    assert_status(
        &r,
        400,
        "BadRequest",
        "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 7",
    );

    let r = api
        .post(
            &secrets(ns),
            &secret(
                "tls",
                json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "Y3J0"}}),
            ),
        )
        .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Secret \"tls\" is invalid: data[tls.key]: Required value",
    );

    let r = api
        .post(
            &secrets(ns),
            &secret("bad-key", json!({"stringData": {"user data": "x"}})),
        )
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(
        causes(&r),
        [(
            "FieldValueInvalid".to_string(),
            "data[user data]".to_string(),
            format!("Invalid value: \"user data\": {detail}")
        )]
    );

    // Names follow the DNS subdomain rule like every built-in kind.
    let r = api
        .post(&configmaps(ns), &config_map("Bad_Name", json!({})))
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(causes(&r)[0].1, "metadata.name");

    // A namespace that does not exist.
    let r = api
        .post(&configmaps("no-such-ns"), &config_map("x", json!({})))
        .await;
    assert_status(&r, 404, "NotFound", "namespaces \"no-such-ns\" not found");
}

#[tokio::test]
async fn immutable_data_cannot_change() {
    let api = api().await;
    let ns = "config-immutable";
    api.namespace(ns).await;
    let item = format!("{}/frozen", configmaps(ns));
    let mut frozen = config_map("frozen", json!({"unattend.xml": "<v1/>"}));
    frozen["immutable"] = json!(true);
    api.create(&configmaps(ns), &frozen).await;

    let r = api
        .merge(&item, &json!({"data": {"unattend.xml": "<v2/>"}}))
        .await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set",
               "reason": "Invalid",
               "details": {"name": "frozen", "kind": "ConfigMap", "causes": [
                   {"reason": "FieldValueForbidden", "message": "Forbidden: field is immutable when `immutable` is set", "field": "data"}]},
               "code": 422}),
    );
    let r = api.merge(&item, &json!({"immutable": false})).await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ConfigMap \"frozen\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set",
    );
    // Metadata still changes.
    let r = api
        .merge(&item, &json!({"metadata": {"labels": {"os": "windows"}}}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["data"]["unattend.xml"], "<v1/>");
    // Deleting is allowed; re-creating is the way to change it.
    let r = api.delete(&item, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);

    let sitem = format!("{}/frozen", secrets(ns));
    api.create(
        &secrets(ns),
        &secret(
            "frozen",
            json!({"immutable": true, "stringData": {"unattend.xml": "<v1/>"}}),
        ),
    )
    .await;
    let r = api
        .merge(&sitem, &json!({"stringData": {"unattend.xml": "<v2/>"}}))
        .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Secret \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set",
    );
    // A Secret's type never changes.
    let r = api
        .merge(&sitem, &json!({"type": "kubernetes.io/basic-auth"}))
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(
        r.body["message"],
        "Secret \"frozen\" is invalid: [type: Invalid value: \"kubernetes.io/basic-auth\": field is immutable, data[username]: Required value, data[password]: Required value]",
        "{}",
        r.text
    );
}
