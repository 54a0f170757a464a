//! A `virtplane server` for a bench: started, waited for (credentials, `/readyz`, nodes),
//! and reached over HTTPS with the admin's bearer token.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::kubeconfig::{admin_kubeconfig, kubeconfig_field, user_token};
use super::process::{free_port, Proc};
use super::virtplane_binary;

/// How to start the server.
pub struct Launch<'a> {
    /// `--data-dir`.
    pub data: PathBuf,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// Arguments after `server` (`--listen` and `--data-dir` follow them).
    pub args: &'a [&'a str],
    pub env: &'a [(&'a str, String)],
    /// How many nodes must be Ready before the server counts as started.
    pub nodes: usize,
    /// How long starting may take in all.
    pub within: Duration,
}

/// A running server.
pub struct Virtplane {
    pub proc: Proc,
    pub url: String,
    /// For starting up and setting up (an admin client, 60 s timeout).
    client: reqwest::Client,
    ca: reqwest::Certificate,
    headers: reqwest::header::HeaderMap,
}

impl Virtplane {
    /// Starts the server and waits until it wrote its credentials, answers `/readyz` and
    /// has `launch.nodes` Ready nodes.
    pub async fn start(launch: Launch<'_>) -> Result<Virtplane> {
        let binary = virtplane_binary();
        let port = free_port()?;
        let mut proc = Proc::spawn(
            "virtplane",
            Command::new(&binary)
                .arg("server")
                .args(launch.args)
                .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
                .arg(&launch.data)
                .envs(launch.env.iter().map(|(k, v)| (k, v))),
            launch.log,
        )
        .with_context(|| {
            format!(
                "cannot start {} (build it: cargo build --release --bin virtplane)",
                binary.display()
            )
        })?;
        let deadline = Instant::now() + launch.within;
        let kubeconfig = launch.data.join("admin.kubeconfig");
        let tokens = launch.data.join("pki/tokens.json");
        while !(kubeconfig.exists() && tokens.exists()) {
            proc.check_alive()?;
            if Instant::now() > deadline {
                bail!(
                    "virtplane did not write {} within {} s",
                    kubeconfig.display(),
                    launch.within.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let ca = kubeconfig_field(
            &admin_kubeconfig(&launch.data)?,
            "certificate-authority-data",
        )
        .context("no CA in admin.kubeconfig")?;
        let token = user_token(&launch.data, "admin")?;
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse()?,
        );
        let ca = reqwest::Certificate::from_pem(&ca)?;
        let client = admin_client(&ca, &headers, Some(Duration::from_secs(60)))?;
        let mut server = Virtplane {
            proc,
            url: format!("https://127.0.0.1:{port}"),
            client,
            ca,
            headers,
        };
        loop {
            server.proc.check_alive()?;
            if let Ok(r) = server
                .client
                .get(format!("{}/readyz", server.url))
                .send()
                .await
            {
                if r.status().is_success() {
                    break;
                }
            }
            if Instant::now() > deadline {
                bail!("virtplane never answered /readyz with 200");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server.wait_nodes_ready(launch.nodes, deadline).await?;
        Ok(server)
    }

    /// A client that trusts the server's CA and sends the admin's bearer token, HTTP/1.1
    /// only (one connection per client), with `timeout` for each request.
    pub fn client(&self, timeout: Option<Duration>) -> reqwest::Result<reqwest::Client> {
        admin_client(&self.ca, &self.headers, timeout)
    }

    /// Like `client`, with the bearer token of another user (from `--token-auth-file`).
    #[allow(dead_code)] // api_vs_etcd's RBAC rounds
    pub fn client_with_token(
        &self,
        token: &str,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Client> {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse()?,
        );
        Ok(admin_client(&self.ca, &headers, timeout)?)
    }

    /// POSTs `body` to `path` as the admin; fails unless 201.
    #[allow(dead_code)] // api_vs_etcd's RBAC rounds
    pub async fn create(&self, path: &str, body: &Value) -> Result<()> {
        let r = self
            .client
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?;
        if r.status() != reqwest::StatusCode::CREATED {
            let status = r.status();
            bail!("POST {path} answered {status}: {}", r.text().await?);
        }
        Ok(())
    }

    /// Waits until at least `nodes` nodes are Ready (none to wait for with 0).
    pub async fn wait_nodes_ready(&mut self, nodes: usize, deadline: Instant) -> Result<()> {
        if nodes == 0 {
            return Ok(());
        }
        loop {
            self.proc.check_alive()?;
            let list: Value = self
                .client
                .get(format!("{}/api/v1/nodes", self.url))
                .send()
                .await?
                .json()
                .await?;
            let ready = list["items"].as_array().map_or(0, |items| {
                items
                    .iter()
                    .filter(|n| {
                        n["status"]["conditions"].as_array().is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        })
                    })
                    .count()
            });
            if ready >= nodes {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("only {ready} of {nodes} nodes became Ready");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    #[allow(dead_code)] // web_console keeps to `default`
    pub async fn create_namespace(&self, name: &str) -> Result<()> {
        let r = self
            .client
            .post(format!("{}/api/v1/namespaces", self.url))
            .header("content-type", "application/json")
            .body(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
                    .to_string(),
            )
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("creating namespace {name} answered {}", r.status());
        }
        Ok(())
    }
}

fn admin_client(
    ca: &reqwest::Certificate,
    headers: &reqwest::header::HeaderMap,
    timeout: Option<Duration>,
) -> reqwest::Result<reqwest::Client> {
    let builder = reqwest::Client::builder()
        .tls_certs_only([ca.clone()])
        .default_headers(headers.clone())
        .http1_only();
    match timeout {
        Some(timeout) => builder.timeout(timeout),
        None => builder,
    }
    .build()
}
