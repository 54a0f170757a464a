//! Transport and authentication: HTTPS only, with the CA the server generates; a client
//! certificate or a bearer token names the user; no or bad credentials are 401.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

fn unauthorized() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
}

async fn send(client: &reqwest::Client, url: &str, token: Option<&str>) -> support::Reply {
    let mut builder = client.get(url);
    if let Some(token) = token {
        builder = builder.header("authorization", token);
    }
    support::Reply::read(builder.send().await.expect("request")).await
}

#[tokio::test]
async fn client_certificate_and_bearer_token() {
    let api = api().await;
    let url = format!("{}{NAMESPACES}", api.url);
    // The admin client certificate from admin.kubeconfig.
    let r = send(&api.client, &url, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // Bearer tokens from pki/tokens.json, over a connection without a client certificate,
    // each reading what its role lets it read (the join token: certificate requests only).
    for (user, path) in [
        ("admin", NAMESPACES),
        (
            "system:node-joiner",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        ),
    ] {
        let token = api.token(user);
        let url = format!("{}{path}", api.url);
        let r = send(&api.anonymous, &url, Some(&format!("Bearer {token}"))).await;
        assert_eq!(r.status, StatusCode::OK, "{user}: {}", r.text);
    }
    // Writes work with a token too.
    let token = api.token("admin");
    let r = api
        .anonymous
        .post(format!("{}{NAMESPACES}", api.url))
        .header("authorization", format!("Bearer {token}"))
        .json(&namespace("auth-token-ns"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn missing_or_bad_credentials_are_401() {
    let api = api().await;
    let token = api.token("admin");
    for path in [
        NAMESPACES.to_string(),
        coll("default", "virtualmachines"),
        format!("{KUBEVIRT}/virtualmachineinstances?watch=true"),
        "/apis".to_string(),
        "/api".to_string(),
        "/apis/kubevirt.io/v1".to_string(),
        "/openapi/v3".to_string(),
        "/no/such/path".to_string(),
    ] {
        let url = format!("{}{path}", api.url);
        for header in [
            None,
            Some("Bearer not-a-token".to_string()),
            Some(format!("Bearer {token}x")),
            Some(format!("Basic {token}")),
            Some(token.clone()),
            Some("Bearer ".to_string()),
        ] {
            let r = send(&api.anonymous, &url, header.as_deref()).await;
            assert_status_body(&r, unauthorized());
        }
    }
    // Writes too: nothing is created.
    let r = api
        .anonymous
        .post(format!("{}{NAMESPACES}", api.url))
        .json(&namespace("auth-nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        api.get(&format!("{NAMESPACES}/auth-nope")).await.status,
        StatusCode::NOT_FOUND
    );
    // A verified client certificate authenticates whatever token comes with it: the
    // x509 authenticator runs before the token authenticators.
    let r = send(
        &api.client,
        &format!("{}{NAMESPACES}", api.url),
        Some("Bearer not-a-token"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn health_and_version_need_no_credentials() {
    let api = api().await;
    for path in ["/healthz", "/livez", "/readyz"] {
        let r = send(&api.anonymous, &format!("{}{path}", api.url), None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.text, "ok");
    }
    let r = send(&api.anonymous, &format!("{}/version", api.url), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["major"], "1");
}

#[tokio::test]
async fn https_with_the_generated_ca_only() {
    let api = api().await;
    let port = api.url.rsplit(':').next().unwrap().to_string();
    support::install_crypto();
    // A client that does not trust the generated CA cannot connect.
    let untrusting = reqwest::Client::builder()
        .tls_certs_only(Vec::<reqwest::Certificate>::new())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let err = untrusting.get(format!("{}/readyz", api.url)).send().await;
    assert!(err.is_err(), "TLS must fail without the CA");
    // Plain HTTP is not served.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    match plain
        .get(format!("http://127.0.0.1:{port}{NAMESPACES}"))
        .send()
        .await
    {
        Err(_) => {}
        Ok(r) => assert_eq!(
            r.status(),
            StatusCode::BAD_REQUEST,
            "plain HTTP must not be served"
        ),
    }
    // The kubeconfig names the HTTPS endpoint and carries the CA and the admin credentials.
    let kubeconfig = std::fs::read_to_string(api.data_dir.join("admin.kubeconfig")).unwrap();
    assert!(
        kubeconfig.contains(&format!("server: https://127.0.0.1:{port}")),
        "{kubeconfig}"
    );
    for field in [
        "certificate-authority-data",
        "client-certificate-data",
        "client-key-data",
    ] {
        assert!(
            support::kubeconfig_field(&kubeconfig, field).is_some(),
            "{field}"
        );
    }
    // The client certificate names the admin in system:masters.
    let cert = support::kubeconfig_field(&kubeconfig, "client-certificate-data").unwrap();
    assert!(String::from_utf8_lossy(&cert).contains("BEGIN CERTIFICATE"));
    // The node-join kubeconfig authenticates too.
    let join = std::fs::read_to_string(api.data_dir.join("node-join.kubeconfig")).unwrap();
    assert!(join.contains(&format!("server: https://127.0.0.1:{port}")));
}
