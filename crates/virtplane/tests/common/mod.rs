//! Black-box test harness: starts the real `virtplane` binary on a free port in a
//! temporary data dir and talks HTTPS to it with the credentials it writes.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub url: String,
    child: Option<Child>,
    pub client: reqwest::Client,
    /// A client that presents no credentials.
    pub anonymous: reqwest::Client,
    pub extra_args: Vec<String>,
    /// Environment variables the server runs with (e.g. `SSL_CERT_FILE`).
    pub env: Vec<(String, String)>,
}

/// A response: status code, decoded JSON body (Null when empty or not JSON), headers.
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_virtplane"))
}

/// `field: base64` out of a kubeconfig, decoded.
pub fn kubeconfig_field(kubeconfig: &str, field: &str) -> Option<Vec<u8>> {
    let line = kubeconfig
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{field}:")))?;
    let value = line.split_once(':')?.1.trim();
    base64::engine::general_purpose::STANDARD.decode(value).ok()
}

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn clients(dir: &Path) -> (reqwest::Client, reqwest::Client) {
    install_crypto();
    let kubeconfig =
        std::fs::read_to_string(dir.join("admin.kubeconfig")).expect("admin.kubeconfig");
    let ca = kubeconfig_field(&kubeconfig, "certificate-authority-data").expect("CA in kubeconfig");
    let cert = kubeconfig_field(&kubeconfig, "client-certificate-data").expect("client cert");
    let key = kubeconfig_field(&kubeconfig, "client-key-data").expect("client key");
    let ca = reqwest::Certificate::from_pem(&ca).expect("CA PEM");
    let mut identity_pem = cert.clone();
    identity_pem.extend_from_slice(&key);
    let identity = reqwest::Identity::from_pem(&identity_pem).expect("identity PEM");
    let client = reqwest::Client::builder()
        .tls_certs_only([ca.clone()])
        .identity(identity)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let anonymous = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    (client, anonymous)
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(&["--no-node"]).await
    }

    pub async fn start_with(args: &[&str]) -> TestServer {
        Self::start_with_env(args, &[]).await
    }

    pub async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> TestServer {
        install_crypto();
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let mut server = TestServer {
            dir,
            port,
            url: format!("https://127.0.0.1:{port}"),
            child: None,
            client: reqwest::Client::new(),
            anonymous: reqwest::Client::new(),
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        server.launch().await;
        server
    }

    async fn launch(&mut self) {
        let kubeconfig = self.dir.path().join("admin.kubeconfig");
        let _ = std::fs::remove_file(&kubeconfig);
        let child = Command::new(binary())
            .arg("server")
            .arg("--data-dir")
            .arg(self.dir.path())
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn virtplane");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !kubeconfig.exists() {
            assert!(
                Instant::now() < deadline,
                "server did not write its kubeconfig"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (client, anonymous) = clients(self.dir.path());
        self.client = client;
        self.anonymous = anonymous;
        loop {
            if let Ok(r) = self
                .anonymous
                .get(format!("{}/readyz", self.url))
                .send()
                .await
            {
                if r.status() == StatusCode::OK {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "server never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub async fn restart(&mut self) {
        self.kill9();
        self.launch().await;
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn token(&self, user: &str) -> String {
        let tokens: Value = serde_json::from_slice(
            &std::fs::read(self.dir.path().join("pki/tokens.json")).expect("tokens"),
        )
        .expect("json");
        tokens
            .as_object()
            .and_then(|m| m.iter().find(|(_, u)| u["user"] == user))
            .map(|(t, _)| t.clone())
            .expect("token for user")
    }

    pub async fn request(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Option<Vec<u8>>,
    ) -> Reply {
        let mut builder = self.client.request(method, format!("{}{path}", self.url));
        if let Some(body) = body {
            builder = builder.header("content-type", content_type).body(body);
        }
        Self::reply(builder.send().await.expect("request")).await
    }

    pub async fn reply(response: reqwest::Response) -> Reply {
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            body,
            headers,
            text,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.request(Method::GET, path, "", None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.request(
            Method::POST,
            path,
            "application/json",
            Some(serde_json::to_vec(body).unwrap()),
        )
        .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.request(
            Method::PUT,
            path,
            "application/json",
            Some(serde_json::to_vec(body).unwrap()),
        )
        .await
    }

    pub async fn patch(&self, path: &str, content_type: &str, body: &str) -> Reply {
        self.request(
            Method::PATCH,
            path,
            content_type,
            Some(body.as_bytes().to_vec()),
        )
        .await
    }

    pub async fn delete(&self, path: &str, body: Option<&Value>) -> Reply {
        self.request(
            Method::DELETE,
            path,
            "application/json",
            body.map(|b| serde_json::to_vec(b).unwrap()),
        )
        .await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub const VMS: &str = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines";

/// A small valid VirtualMachine.
pub fn vm(name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {"app": "demo"}},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}},
                "spec": {
                    "domain": {
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                        "memory": {"guest": "128Mi"}
                    },
                    "volumes": [{"name": "root", "containerDisk": {"image": "registry.local/guest:1"}}]
                }
            }
        }
    })
}
