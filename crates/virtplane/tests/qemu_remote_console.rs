//! Consoles of VMIs on a node agent that runs apart from the server (`virtplane node`):
//! the server dials the agent's HTTPS endpoint, published on the Node, and relays the
//! websocket. Tier B (QEMU): the serial console and VNC of a real guest through the
//! server. Tier A (a simulated agent): the endpoint lets in only the API server, and
//! every way a console cannot be reached is a clear Status.

mod qemu;
mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::agent_dial::Pinned;
use qemu::{guests, kernel_vm, Env, NodeAgent, NS, SHORT};
use reqwest::StatusCode;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use support::TestServer;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const FINGERPRINT: &str = "virtplane.io/agent-serving-cert-sha256";

/// Pins `vm` to `node`.
fn pin(mut vm: Value, node: &str) -> Value {
    vm["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    vm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_and_vnc_of_a_remote_node_go_through_the_server() {
    let Some(g) = guests() else { return };
    let server = TestServer::start_with(&["--no-node"]).await;
    let agent = NodeAgent::start(
        server.data_dir(),
        "remote",
        &["--hypervisor", "qemu", "--insecure-registry", &g.registry],
    );
    let env = Env::new(&server.url, server.data_dir(), agent.data_dir()).on_node(&agent);
    env.wait_node_ready().await;
    let name = "far";
    env.create_vm(&pin(kernel_vm(g, name, "Always", None), "remote"))
        .await;
    let vmi = env.wait_running(name).await;
    assert_eq!(vmi["status"]["nodeName"], "remote");
    env.wait_ready(name).await;

    // The serial console, through the server, both ways.
    let mut console = env.console(name).await.expect("console websocket");
    assert_eq!(console.protocol, "plain.kubevirt.io");
    console.send("\r").await;
    let line = console
        .run("echo $((40+2))remote", "42remote", Duration::from_secs(30))
        .await;
    assert_eq!(
        line.as_deref(),
        Some("42remote"),
        "console: {:?}",
        console.seen
    );
    console.close().await;

    // VNC: QEMU's RFB greeting, through the server.
    let mut vnc = qemu::Console::open(&env, name, "vnc")
        .await
        .expect("vnc websocket");
    assert_eq!(vnc.protocol, "plain.kubevirt.io");
    assert!(
        vnc.read_until(0, "RFB 003.008", Duration::from_secs(10))
            .await,
        "no RFB greeting: {:?}",
        vnc.seen
    );
    vnc.close().await;

    env.delete_vm(name).await;
    env.wait_vmi_gone(name, SHORT).await;
}

// ---- tier A: who may use the agent's endpoint ------------------------------------

/// A client certificate and key, PEM.
struct Identity {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl Identity {
    /// The cluster admin's (signed by the cluster CA, but not the API server).
    fn admin(server_dir: &Path) -> Identity {
        let kubeconfig =
            std::fs::read_to_string(server_dir.join("admin.kubeconfig")).expect("kubeconfig");
        let field = |f: &str| support::kubeconfig_field(&kubeconfig, f).expect(f);
        Identity {
            cert: field("client-certificate-data"),
            key: field("client-key-data"),
        }
    }

    /// The API server's own, from its data dir.
    fn apiserver(server_dir: &Path) -> Identity {
        let read = |f: &str| std::fs::read(server_dir.join("pki").join(f)).expect(f);
        Identity {
            cert: read("apiserver-agent-client.crt"),
            key: read("apiserver-agent-client.key"),
        }
    }
}

/// Where the Node says its agent is: (port, fingerprint).
fn published(node: &Value) -> (u16, String) {
    let addresses = node["status"]["addresses"].as_array().expect("addresses");
    assert!(
        addresses
            .iter()
            .any(|a| a["type"] == "InternalIP" && a["address"] == "127.0.0.1"),
        "{addresses:?}"
    );
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .expect("daemonEndpoints.kubeletEndpoint.Port");
    let fingerprint = node["metadata"]["annotations"][FINGERPRINT]
        .as_str()
        .expect("fingerprint annotation");
    assert_eq!(fingerprint.len(), 64, "{fingerprint}");
    (port as u16, fingerprint.to_string())
}

/// Opens the console websocket of `name` at the agent directly; `Err` says how it failed
/// (`HTTP <code>: <body>` when the agent answered).
async fn dial_agent(
    port: u16,
    fingerprint: &str,
    identity: Option<&Identity>,
    name: &str,
) -> Result<(), String> {
    support::install_crypto();
    let builder = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned::new(
            fingerprint,
            Arc::new(rustls::crypto::ring::default_provider()),
        )));
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(&id.cert)
                    .collect::<Result<_, _>>()
                    .expect("cert PEM"),
                PrivateKeyDer::from_pem_slice(&id.key).expect("key PEM"),
            )
            .expect("client auth"),
    };
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let mut request =
        format!("wss://127.0.0.1:{port}/v1/namespaces/{NS}/virtualmachineinstances/{name}/console")
            .into_client_request()
            .expect("request");
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "plain.kubevirt.io".parse().expect("header"),
    );
    let attempt = tokio_tungstenite::client_async(request, tls);
    match tokio::time::timeout(Duration::from_secs(10), attempt).await {
        Err(_) => Err("no answer within 10s".into()),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(r))) => Err(format!(
            "HTTP {}: {}",
            r.status().as_u16(),
            r.body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
        )),
        Ok(Err(e)) => Err(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_endpoint_lets_in_only_the_api_server() {
    let server = TestServer::start_with(&["--no-node"]).await;
    let mut agent = NodeAgent::start(
        server.data_dir(),
        "edge",
        &["--hypervisor", "sim", "--sim-boot-delay", "100ms"],
    );
    let env = Env::new(&server.url, server.data_dir(), agent.data_dir()).on_node(&agent);
    env.wait_node_ready().await;
    let node = env.api.get("/api/v1/nodes/edge").await.body;
    let (port, fingerprint) = published(&node);

    let name = "simulated";
    let vm = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"devices": {}, "memory": {"guest": "64Mi"}}}}}
    });
    env.create_vm(&pin(vm, "edge")).await;
    let vmi = env.wait_running(name).await;
    assert_eq!(vmi["status"]["nodeName"], "edge");

    // No client certificate: the TLS handshake fails, nothing HTTP is ever said.
    let anonymous = dial_agent(port, &fingerprint, None, name).await;
    let why = anonymous.expect_err("a client without a certificate got in");
    assert!(!why.starts_with("HTTP"), "{why}");
    // A certificate from the cluster CA that is not the API server's: 403.
    let admin = Identity::admin(server.data_dir());
    let why = dial_agent(port, &fingerprint, Some(&admin), name)
        .await
        .expect_err("the admin got in");
    assert!(why.starts_with("HTTP 403"), "{why}");
    // The API server's certificate passes, to the VMI check: a simulated guest has no
    // console on its node.
    let apiserver = Identity::apiserver(server.data_dir());
    let why = dial_agent(port, &fingerprint, Some(&apiserver), name)
        .await
        .expect_err("a simulated VMI has no console");
    assert!(why.starts_with("HTTP 404"), "{why}");
    assert!(why.contains("does not run on node edge"), "{why}");
    // ... and the server pins the published certificate: another one is refused.
    let other = "0".repeat(64);
    let why = dial_agent(port, &other, Some(&apiserver), name)
        .await
        .expect_err("a pinned client accepted another certificate");
    assert!(why.starts_with("TLS"), "{why}");

    // Through the server, the agent's answer becomes a Status.
    let console = qemu::Console::open(&env, name, "console").await;
    let why = console.err().expect("a console for a simulated VMI");
    assert!(why.starts_with("HTTP 404"), "{why}");
    assert!(why.contains("does not run on node edge"), "{why}");

    // The server pins the certificate the Node names: with another fingerprint on the
    // Node, the real agent is refused.
    let repinned = env
        .api
        .patch(
            "/api/v1/nodes/edge",
            "application/merge-patch+json",
            &json!({"metadata": {"annotations": {FINGERPRINT: other}}}).to_string(),
        )
        .await;
    assert_eq!(repinned.status, StatusCode::OK, "{}", repinned.text);
    let why = qemu::Console::open(&env, name, "console")
        .await
        .err()
        .expect("a console behind an unpinned certificate");
    assert!(why.starts_with("HTTP 503"), "{why}");
    assert!(
        why.contains("certificate is not the one the Node names"),
        "{why}"
    );

    // With the agent gone, the server says it cannot reach it, at once.
    agent.kill9();
    let asked = Instant::now();
    let why = qemu::Console::open(&env, name, "console")
        .await
        .err()
        .expect("a console on a dead agent");
    assert!(why.starts_with("HTTP 503"), "{why}");
    assert!(why.contains("cannot reach the agent of node edge"), "{why}");
    assert!(asked.elapsed() < Duration::from_secs(10));

    // A node that publishes no endpoint: the Status names what is missing.
    let patched = env
        .api
        .patch(
            "/api/v1/nodes/edge/status",
            "application/merge-patch+json",
            r#"{"status": {"daemonEndpoints": null}}"#,
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    let why = qemu::Console::open(&env, name, "console")
        .await
        .err()
        .expect("a console on a node without endpoint");
    assert!(why.starts_with("HTTP 503"), "{why}");
    assert!(why.contains("kubeletEndpoint"), "{why}");
}
