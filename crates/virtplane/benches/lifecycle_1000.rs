//! 1,000 VMs with `runStrategy: Always` created at once on 100 simulated nodes with zero
//! boot delay: the time until all are Running, and p50/p99 of create→Running per VM.
//! Target: all Running in under 10 s on a 2-core machine.
//!
//! `cargo build --release --bin virtplane && cargo bench -p virtplane --bench lifecycle_1000`
//!
//! The release server runs with `--sim-nodes 100 --sim-boot-delay 0ms`; the VMs are
//! created over HTTPS (reqwest, bearer token of user admin from `pki/tokens.json`, the CA
//! from `admin.kubeconfig`) with bounded concurrency, and a watch on the VMs timestamps
//! the first event that shows each one `printableStatus: Running`. create→Running runs
//! from the moment the VM's POST is sent.
//!
//! Knobs (environment): `VIRTPLANE_BIN` (default: the binary cargo built for this bench,
//! i.e. the release one), `BENCH_VMS` (1000), `BENCH_NODES` (100), `BENCH_CONCURRENCY`
//! (32 requests in flight), `BENCH_CONNECTIONS` (8 HTTP/1.1 connections),
//! `BENCH_TIMEOUT_S` (120).

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::Mutex;

const NAMESPACE: &str = "bench";
const TARGET: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lifecycle_1000: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lifecycle_1000: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn virtplane_binary() -> PathBuf {
    std::env::var_os("VIRTPLANE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_virtplane")))
}

/// `field: base64` out of a kubeconfig, decoded.
fn kubeconfig_field(kubeconfig: &str, field: &str) -> Option<Vec<u8>> {
    let line = kubeconfig
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{field}:")))?;
    B64.decode(line.split_once(':')?.1.trim()).ok()
}

/// The server, killed (and reaped) when dropped.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn check_alive(&mut self) -> Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "virtplane exited early ({status}); its log ends:\n{}",
                tail.join("\n")
            );
        }
        Ok(())
    }

    /// CPU time (user + system) used so far, from `/proc/PID/stat`.
    fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(Duration::from_millis(ticks * 10))
    }
}

struct Api {
    url: String,
    clients: Vec<reqwest::Client>,
    /// For the long-lived watch (no overall timeout).
    watcher: reqwest::Client,
}

async fn start(dir: &Path, nodes: usize, connections: usize) -> Result<(Server, Api)> {
    let binary = virtplane_binary();
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let data = dir.join("data");
    let log = dir.join("virtplane.log");
    let child = Command::new(&binary)
        .args(["server", "--no-node", "--hypervisor", "sim"])
        .args(["--sim-nodes", &nodes.to_string(), "--sim-boot-delay", "0ms"])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(&data)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| {
            format!(
                "cannot start {} (build it: cargo build --release --bin virtplane)",
                binary.display()
            )
        })?;
    let mut server = Server { child, log };
    let deadline = Instant::now() + Duration::from_secs(60);
    let kubeconfig = data.join("admin.kubeconfig");
    let tokens = data.join("pki/tokens.json");
    while !(kubeconfig.exists() && tokens.exists()) {
        server.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "virtplane did not write {} within 60 s",
                kubeconfig.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let kubeconfig = std::fs::read_to_string(&kubeconfig)?;
    let ca = kubeconfig_field(&kubeconfig, "certificate-authority-data")
        .context("no CA in admin.kubeconfig")?;
    let ca = reqwest::Certificate::from_pem(&ca)?;
    let tokens: Value = serde_json::from_slice(&std::fs::read(&tokens)?)?;
    let token = tokens
        .as_object()
        .and_then(|m| m.iter().find(|(_, u)| u["user"] == "admin"))
        .map(|(t, _)| t.clone())
        .context("no token for user admin in pki/tokens.json")?;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse()?,
    );
    let builder = || {
        reqwest::Client::builder()
            .tls_certs_only([ca.clone()])
            .default_headers(headers.clone())
            .http1_only()
    };
    let clients = (0..connections.max(1))
        .map(|_| builder().timeout(Duration::from_secs(60)).build())
        .collect::<reqwest::Result<Vec<_>>>()?;
    let api = Api {
        url: format!("https://127.0.0.1:{port}"),
        clients,
        watcher: builder().build()?,
    };
    loop {
        server.check_alive()?;
        if let Ok(r) = api.clients[0]
            .get(format!("{}/readyz", api.url))
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
    // Every simulated node registered and Ready.
    loop {
        server.check_alive()?;
        let list: Value = api.clients[0]
            .get(format!("{}/api/v1/nodes", api.url))
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
            break;
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {nodes} simulated nodes became Ready");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = api.clients[0]
        .post(format!("{}/api/v1/namespaces", api.url))
        .header("content-type", "application/json")
        .body(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
                .to_string(),
        )
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("creating namespace {NAMESPACE} answered {}", r.status());
    }
    Ok((server, api))
}

/// A small Always VM (the simulated node boots it at once).
fn vm(name: &str) -> Vec<u8> {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name, "app": "bench"}},
                "spec": {
                    "domain": {
                        "cpu": {"cores": 1},
                        "memory": {"guest": "128Mi"},
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}
                    },
                    "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}}]
                }
            }
        }
    })
    .to_string()
    .into_bytes()
}

/// When each VM was first seen Running on the watch.
type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// Reads the VM watch until `count` VMs have been seen Running.
async fn watch_running(response: reqwest::Response, count: usize, seen: Seen) -> Result<()> {
    let mut stream = response.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.context("watch stream failed")?;
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let event: Value = serde_json::from_slice(&line).context("watch line is not JSON")?;
            if event["type"] == "ERROR" {
                bail!("watch error: {}", event["object"]);
            }
            let object = &event["object"];
            if object["status"]["printableStatus"] == "Running" {
                let name = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let mut seen = seen.lock().await;
                seen.entry(name).or_insert(now);
                if seen.len() >= count {
                    return Ok(());
                }
            }
        }
    }
    bail!("the watch ended early")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

async fn run() -> Result<()> {
    let count = env_usize("BENCH_VMS", 1000);
    let nodes = env_usize("BENCH_NODES", 100);
    let concurrency = env_usize("BENCH_CONCURRENCY", 32).max(1);
    let connections = env_usize("BENCH_CONNECTIONS", 8).max(1);
    let timeout = Duration::from_secs(env_usize("BENCH_TIMEOUT_S", 120) as u64);
    let dir = tempfile::tempdir()?;
    println!(
        "lifecycle_1000: {count} VMs (runStrategy Always) on {nodes} simulated nodes, boot delay 0 ms; \
         {concurrency} creates in flight over {connections} connections; binary {}",
        virtplane_binary().display()
    );
    let (mut server, api) = start(dir.path(), nodes, connections).await?;

    // Watch from the current resourceVersion, so nothing is missed.
    let list: Value = api.clients[0]
        .get(format!(
            "{}/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines",
            api.url
        ))
        .send()
        .await?
        .json()
        .await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let response = api
        .watcher
        .get(format!(
            "{}/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines?watch=true&resourceVersion={rv}",
            api.url
        ))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("watch answered {}", response.status());
    }
    let seen: Seen = Arc::new(Mutex::new(HashMap::new()));
    let watcher = tokio::spawn(watch_running(response, count, seen.clone()));

    let cpu_before = server.cpu_time();
    let started = Instant::now();
    let url = Arc::new(api.url.clone());
    let clients = Arc::new(api.clients.clone());
    let results: Vec<Result<(String, Instant, Instant)>> = futures::stream::iter(0..count)
        .map(|i| {
            let url = url.clone();
            let clients = clients.clone();
            async move {
                let name = format!("vm-{i:04}");
                let client = &clients[i % clients.len()];
                let sent = Instant::now();
                let r = client
                    .post(format!(
                        "{url}/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines"
                    ))
                    .header("content-type", "application/json")
                    .body(vm(&name))
                    .send()
                    .await?;
                let status = r.status();
                let text = r.text().await?;
                if status.as_u16() != 201 {
                    bail!("create {name}: {status} {text}");
                }
                Ok((name, sent, Instant::now()))
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let created_all = started.elapsed();
    let mut sent_at = HashMap::new();
    for r in results {
        let (name, sent, _) = r?;
        sent_at.insert(name, sent);
    }

    let outcome = tokio::time::timeout(timeout, watcher).await;
    let elapsed_all = started.elapsed();
    let cpu = match (cpu_before, server.cpu_time()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    server.check_alive()?;
    let seen = seen.lock().await.clone();
    match outcome {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => return Err(e),
        Ok(Err(e)) => bail!("watch task failed: {e}"),
        Err(_) => bail!(
            "only {} of {count} VMs Running after {:?} (server log: {})",
            seen.len(),
            timeout,
            server.log.display()
        ),
    }
    let mut latencies: Vec<Duration> = sent_at
        .iter()
        .filter_map(|(name, sent)| seen.get(name).map(|t| t.saturating_duration_since(*sent)))
        .collect();
    latencies.sort();
    let last_running = seen
        .values()
        .max()
        .map_or(elapsed_all, |t| t.saturating_duration_since(started));

    println!("  all {count} created (201) after   {}", ms(created_all));
    println!(
        "  all {count} Running after         {}   ({:.0} VMs/s)",
        ms(last_running),
        count as f64 / last_running.as_secs_f64()
    );
    println!(
        "  create→Running per VM: p50 {}  p90 {}  p99 {}  max {}",
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 90.0)),
        ms(percentile(&latencies, 99.0)),
        ms(percentile(&latencies, 100.0)),
    );
    if let Some(cpu) = cpu {
        println!(
            "  server CPU time over the run: {} ({:.2} cores on average)",
            ms(cpu),
            cpu.as_secs_f64() / last_running.as_secs_f64()
        );
    }
    let verdict = if last_running < TARGET {
        "MET"
    } else {
        "MISSED"
    };
    println!(
        "  target: all Running in under {} s on this machine ({} cores): {verdict}",
        TARGET.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(())
}
