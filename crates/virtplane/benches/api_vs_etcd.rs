//! Durable VirtualMachine creates and a 10,000-object LIST: the release `virtplane` server
//! (embedded SQLite, `synchronous=FULL`) beside a local etcd (v3 JSON gateway) in one run.
//!
//! `cargo bench -p virtplane --bench api_vs_etcd`
//!
//! Both systems get the same VM JSON bytes over loopback from the same Rust client
//! (reqwest, HTTP/1.1 keep-alive, one connection per client): 1 client doing sequential
//! creates, then 32 concurrent clients, then LISTs of everything in one namespace/prefix.
//! The phases alternate between the two systems so both see the same background load.
//!
//! Then the cost of authorization: the same concurrent creates as the admin (system:masters,
//! which RBAC never looks further at) and as a user bound to `kubevirt.io:edit` through a
//! RoleBinding (both with bearer tokens), in alternating rounds A B B A so that the growing
//! store weighs on both alike.
//!
//! Then virtplane on etcd: one server, then two sharing the same etcd and PKI, beside raw
//! etcd puts, in rounds A B C C B A; a LIST through one server beside an etcd range; and
//! the failover time (the lease holder killed, until the survivor's controllers act).
//!
//! Knobs (environment): `VIRTPLANE_BIN` (default: the binary cargo built for this bench),
//! `ETCD_BIN` (default: `etcd` on PATH), `BENCH_SEQ` (2000), `BENCH_CONCURRENT` (10000),
//! `BENCH_CLIENTS` (32), `BENCH_LIST_RUNS` (5), `BENCH_RBAC` (creates per RBAC round, 5000;
//! 0 skips the RBAC rounds), `BENCH_RBAC_REPEATS` (how many times A B B A runs, 1),
//! `BENCH_ETCD_ROUND` (creates per on-etcd round, 5000; 0 skips virtplane on etcd).

mod support;

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};
use support::objects::vm;
use support::process::Proc;
use support::stats::{ms, percentile};
use support::virtplane::{Launch, Virtplane};
use support::{knob, size, virtplane_binary};

const NAMESPACE: &str = "bench";
const SEQ_NAMESPACE: &str = "bench-seq";
/// Where the RBAC rounds create, as the admin and as the kubevirt.io:edit user.
const RBAC_NAMESPACES: [&str; 2] = ["bench-rbac-admin", "bench-rbac-edit"];
const EDITOR: &str = "bench-editor";
const EDITOR_TOKEN: &str = "bench-editor-token";
const ETCD_PREFIX: &str = "/registry/kubevirt.io/virtualmachines/";

fn main() -> ExitCode {
    support::main("api_vs_etcd", run)
}

/// One system under test: how to create VM number `i` and how to list them all.
#[derive(Clone)]
enum Target {
    /// One server, or several over one etcd: worker `w` sends to `urls[w % len]` with
    /// `clients[w % len]` (built for that server).
    Virtplane {
        urls: Vec<String>,
        clients: Vec<reqwest::Client>,
    },
    Etcd {
        url: String,
        clients: Vec<reqwest::Client>,
    },
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::Virtplane { .. } => "virtplane",
            Target::Etcd { .. } => "etcd",
        }
    }

    fn client(&self, worker: usize) -> &reqwest::Client {
        let clients = match self {
            Target::Virtplane { clients, .. } | Target::Etcd { clients, .. } => clients,
        };
        &clients[worker % clients.len()]
    }

    /// Where worker `worker` sends.
    fn url(&self, worker: usize) -> &str {
        match self {
            Target::Virtplane { urls, .. } => &urls[worker % urls.len()],
            Target::Etcd { url, .. } => url,
        }
    }

    /// Opens (and keeps alive) the worker's connection before anything is timed.
    async fn warm_up(&self, worker: usize) -> Result<()> {
        let client = self.client(worker);
        let url = self.url(worker);
        let response = match self {
            Target::Virtplane { .. } => client.get(format!("{url}/readyz")).send().await?,
            Target::Etcd { .. } => {
                client
                    .post(format!("{url}/v3/kv/range"))
                    .body(json!({"key": B64.encode("/warm-up")}).to_string())
                    .send()
                    .await?
            }
        };
        let status = response.status();
        response.bytes().await?;
        if !status.is_success() {
            bail!("{}: warm-up request answered {status}", self.name());
        }
        Ok(())
    }

    async fn create(
        &self,
        worker: usize,
        namespace: &str,
        name: &str,
        body: Vec<u8>,
    ) -> Result<()> {
        let client = self.client(worker);
        let url = self.url(worker);
        let response = match self {
            Target::Virtplane { .. } => {
                client
                    .post(format!(
                        "{url}/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines"
                    ))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?
            }
            Target::Etcd { .. } => {
                let put = json!({
                    "key": B64.encode(format!("{ETCD_PREFIX}{namespace}/{name}")),
                    "value": B64.encode(&body),
                });
                client
                    .post(format!("{url}/v3/kv/put"))
                    .body(put.to_string())
                    .send()
                    .await?
            }
        };
        let status = response.status();
        let text = response.bytes().await?;
        let ok = match self {
            Target::Virtplane { .. } => status == reqwest::StatusCode::CREATED,
            Target::Etcd { .. } => status == reqwest::StatusCode::OK,
        };
        if !ok {
            bail!(
                "{}: create of {namespace}/{name} answered {status}: {}",
                self.name(),
                String::from_utf8_lossy(&text)
                    .chars()
                    .take(300)
                    .collect::<String>()
            );
        }
        Ok(())
    }

    /// Lists everything in `namespace`; returns the body (read in full).
    async fn list(&self, namespace: &str) -> Result<bytes::Bytes> {
        let client = self.client(0);
        let url = self.url(0);
        let response = match self {
            Target::Virtplane { .. } => {
                client
                    .get(format!(
                        "{url}/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines"
                    ))
                    .header("accept", "application/json")
                    .send()
                    .await?
            }
            Target::Etcd { .. } => {
                let prefix = format!("{ETCD_PREFIX}{namespace}/");
                let range = json!({"key": B64.encode(&prefix), "range_end": B64.encode(prefix_end(&prefix))});
                client
                    .post(format!("{url}/v3/kv/range"))
                    .body(range.to_string())
                    .send()
                    .await?
            }
        };
        let status = response.status();
        let body = response.bytes().await?;
        if status != reqwest::StatusCode::OK {
            bail!("{}: LIST answered {status}", self.name());
        }
        Ok(body)
    }

    /// How many objects a LIST body holds.
    fn count(&self, body: &[u8]) -> Result<usize> {
        let doc: Value = serde_json::from_slice(body).context("LIST body is not JSON")?;
        Ok(match self {
            Target::Virtplane { .. } => doc["items"].as_array().map_or(0, Vec::len),
            Target::Etcd { .. } => doc["kvs"].as_array().map_or(0, Vec::len),
        })
    }
}

fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

#[derive(Clone, Copy, Default)]
struct Creates {
    count: usize,
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Server CPU time per create, including the background work it caused.
    cpu_ms: f64,
    /// Of that, etcd's own (the rounds on etcd).
    etcd_cpu_ms: f64,
}

fn cpu_per_object(before: Option<Duration>, after: Option<Duration>, count: usize) -> f64 {
    match (before, after) {
        (Some(b), Some(a)) if count > 0 => a.saturating_sub(b).as_secs_f64() * 1e3 / count as f64,
        _ => 0.0,
    }
}

/// `total` creates spread over `clients` concurrent workers (each on its own connection).
async fn creates(
    target: &Target,
    namespace: &str,
    prefix: &str,
    total: usize,
    clients: usize,
) -> Result<Creates> {
    for worker in 0..clients {
        target.warm_up(worker).await?;
    }
    let bodies: Arc<Vec<(String, Vec<u8>)>> = Arc::new(
        (0..total)
            .map(|i| {
                let name = format!("{prefix}-{i:05}");
                let body = serde_json::to_vec(&vm(&name)).unwrap_or_default();
                (name, body)
            })
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..clients {
        let (target, bodies, next, namespace) = (
            target.clone(),
            bodies.clone(),
            next.clone(),
            namespace.to_string(),
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((name, body)) = bodies.get(i) else {
                    return Ok::<_, anyhow::Error>(latencies);
                };
                let t = Instant::now();
                target
                    .create(worker, &namespace, name, body.clone())
                    .await?;
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    for task in tasks {
        latencies.extend(
            task.await
                .map_err(|e| anyhow!("client task failed: {e}"))??,
        );
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Ok(Creates {
        count: latencies.len(),
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: ms(percentile(&latencies, 0.50)),
        p99_ms: ms(percentile(&latencies, 0.99)),
        cpu_ms: 0.0,
        etcd_cpu_ms: 0.0,
    })
}

#[derive(Clone, Copy, Default)]
struct Lists {
    median_ms: f64,
    min_ms: f64,
    max_ms: f64,
    bytes: usize,
    items: usize,
}

async fn lists(target: &Target, namespace: &str, runs: usize) -> Result<Lists> {
    // One untimed LIST checks the count (and warms whatever caches either side has).
    let body = target.list(namespace).await?;
    let items = target.count(&body)?;
    let mut times = Vec::new();
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let body = target.list(namespace).await?;
        times.push(t.elapsed());
        drop(body);
    }
    times.sort();
    Ok(Lists {
        median_ms: ms(percentile(&times, 0.5)),
        min_ms: ms(times[0]),
        max_ms: ms(times[times.len() - 1]),
        bytes: body.len(),
        items,
    })
}

// ---------------------------------------------------------------------------------------
// Starting the two systems.

/// The server, a target creating as the admin and one creating as a user bound to
/// kubevirt.io:edit in `RBAC_NAMESPACES[1]` (a bearer token of `--token-auth-file`).
async fn start_virtplane(dir: &Path, clients: usize) -> Result<(Proc, Target, Target)> {
    let tokens = dir.join("tokens.csv");
    std::fs::write(
        &tokens,
        format!("{EDITOR_TOKEN},{EDITOR},{EDITOR}-uid,\"bench-users\"\n"),
    )?;
    let tokens = tokens.to_string_lossy().into_owned();
    let server = Virtplane::start(Launch {
        data: dir.join("virtplane"),
        log: dir.join("virtplane.log"),
        args: &["--no-node", "--token-auth-file", &tokens],
        env: &[],
        nodes: 0,
        within: Duration::from_secs(60),
    })
    .await?;
    for ns in [NAMESPACE, SEQ_NAMESPACE]
        .into_iter()
        .chain(RBAC_NAMESPACES)
    {
        server.create_namespace(ns).await?;
    }
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "bench-editor", "namespace": RBAC_NAMESPACES[1]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubevirt.io:edit"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": EDITOR}]});
    server
        .create(
            &format!(
                "/apis/rbac.authorization.k8s.io/v1/namespaces/{}/rolebindings",
                RBAC_NAMESPACES[1]
            ),
            &binding,
        )
        .await?;
    let timeout = Some(Duration::from_secs(120));
    let admins = (0..clients)
        .map(|_| server.client(timeout))
        .collect::<reqwest::Result<Vec<_>>>()?;
    let editors = (0..clients)
        .map(|_| server.client_with_token(EDITOR_TOKEN, timeout))
        .collect::<Result<Vec<_>>>()?;
    let urls = vec![server.url.clone()];
    let admin = Target::Virtplane {
        urls: urls.clone(),
        clients: admins,
    };
    let editor = Target::Virtplane {
        urls,
        clients: editors,
    };
    Ok((server.proc, admin, editor))
}

async fn start_etcd(dir: &Path, clients: usize) -> Result<(Proc, Target, String)> {
    let etcd = support::etcd::Etcd::start(dir).await?;
    let build = || {
        reqwest::Client::builder()
            .http1_only()
            .timeout(Duration::from_secs(120))
            .build()
    };
    let clients = (0..clients)
        .map(|_| build())
        .collect::<reqwest::Result<Vec<_>>>()?;
    let target = Target::Etcd {
        url: etcd.url.clone(),
        clients,
    };
    Ok((etcd.proc, target, etcd.version))
}

// ---------------------------------------------------------------------------------------

async fn run() -> Result<()> {
    let seq = size::<usize>("BENCH_SEQ", 2000, 50);
    let concurrent = size::<usize>("BENCH_CONCURRENT", 10_000, 200);
    let clients = knob::<usize>("BENCH_CLIENTS", 32).max(1);
    let list_runs = size::<usize>("BENCH_LIST_RUNS", 5, 1);
    let rbac_round = size::<usize>("BENCH_RBAC", 5000, 100);
    let dir = tempfile::Builder::new().prefix("api-vs-etcd-").tempdir()?;

    let (etcd_proc, etcd, etcd_version) = start_etcd(dir.path(), clients).await?;
    let (vp_proc, vp, vp_editor) = start_virtplane(dir.path(), clients).await?;
    let body_len = serde_json::to_vec(&vm("vm-00000"))?.len();
    eprintln!(
        "api_vs_etcd: {} vs {etcd_version}; VM body {body_len} B; {seq} sequential + {concurrent} creates with {clients} clients; data in {}",
        virtplane_binary().display(),
        dir.path().display()
    );

    // Alternate the systems phase by phase, so both see the same background load, and let
    // each finish its background work (virtplane's controllers) before the next phase.
    let systems = [(&vp, &vp_proc), (&etcd, &etcd_proc)];
    let mut seq_results = [Creates::default(); 2];
    let mut conc_results = [Creates::default(); 2];
    let mut list_results = [Lists::default(); 2];
    let mut settle = [Duration::ZERO; 2];
    for (i, (target, proc)) in systems.into_iter().enumerate() {
        eprintln!("  {}: {seq} creates, 1 client", target.name());
        let cpu = proc.cpu_time();
        seq_results[i] = creates(target, SEQ_NAMESPACE, "seq", seq, 1).await?;
        proc.wait_idle().await;
        seq_results[i].cpu_ms = cpu_per_object(cpu, proc.cpu_time(), seq);
    }
    for (i, (target, proc)) in systems.into_iter().enumerate() {
        eprintln!(
            "  {}: {concurrent} creates, {clients} clients",
            target.name()
        );
        let cpu = proc.cpu_time();
        conc_results[i] = creates(target, NAMESPACE, "vm", concurrent, clients).await?;
        settle[i] = proc.wait_idle().await;
        conc_results[i].cpu_ms = cpu_per_object(cpu, proc.cpu_time(), concurrent);
    }
    for (i, (target, proc)) in systems.into_iter().enumerate() {
        eprintln!(
            "  {}: LIST of {concurrent}, {list_runs} times",
            target.name()
        );
        list_results[i] = lists(target, NAMESPACE, list_runs).await?;
        proc.wait_idle().await;
        if list_results[i].items != concurrent {
            bail!(
                "{}: LIST returned {} items, expected {concurrent}",
                target.name(),
                list_results[i].items
            );
        }
    }

    print_table(&Report {
        etcd_version,
        body_len,
        clients,
        seq: seq_results,
        conc: conc_results,
        list: list_results,
        list_runs,
        settle,
    });
    if rbac_round > 0 {
        let rounds = rbac_rounds(&vp, &vp_editor, &vp_proc, rbac_round, clients).await?;
        print_rbac(&rounds, rbac_round, clients);
    }
    let on_etcd_round = size::<usize>("BENCH_ETCD_ROUND", 5000, 100);
    if on_etcd_round > 0 {
        drop((vp, vp_editor, vp_proc));
        let runs = EtcdRuns {
            per_round: on_etcd_round,
            clients,
            list_runs,
        };
        servers_on_etcd(dir.path(), &etcd, &etcd_proc, &runs).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// virtplane on etcd: one server, then two, beside raw etcd puts.

struct EtcdRuns {
    per_round: usize,
    clients: usize,
    list_runs: usize,
}

/// A server on the bench's etcd (keys under `/vp`); the second one gets a copy of the
/// first one's PKI, as README says servers sharing one store must.
async fn server_on_etcd(dir: &Path, etcd_url: &str, index: usize) -> Result<Virtplane> {
    let data = dir.join(format!("vp-etcd-{index}"));
    if index > 1 {
        let from = dir.join("vp-etcd-1/pki");
        let to = data.join("pki");
        std::fs::create_dir_all(&to)?;
        for entry in std::fs::read_dir(&from)? {
            let entry = entry?;
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    let store = format!("etcd={etcd_url}");
    Virtplane::start(Launch {
        data,
        log: dir.join(format!("vp-etcd-{index}.log")),
        args: &["--no-node", "--store", &store, "--etcd-prefix", "/vp"],
        env: &[],
        nodes: 0,
        within: Duration::from_secs(60),
    })
    .await
}

/// The servers as one target: worker `w` on server `w % len`.
fn spread(servers: &[&Virtplane], clients: usize) -> Result<Target> {
    let timeout = Some(Duration::from_secs(120));
    let clients = (0..clients.max(servers.len()))
        .map(|w| servers[w % servers.len()].client(timeout))
        .collect::<reqwest::Result<Vec<_>>>()?;
    Ok(Target::Virtplane {
        urls: servers.iter().map(|s| s.url.clone()).collect(),
        clients,
    })
}

fn cpu_of(procs: &[&Proc]) -> Option<Duration> {
    procs.iter().map(|p| p.cpu_time()).sum()
}

async fn servers_on_etcd(
    dir: &Path,
    etcd: &Target,
    etcd_proc: &Proc,
    runs: &EtcdRuns,
) -> Result<()> {
    let Target::Etcd { url: etcd_url, .. } = etcd else {
        bail!("the reference is not etcd");
    };
    let first = server_on_etcd(dir, etcd_url, 1).await?;
    let second = server_on_etcd(dir, etcd_url, 2).await?;
    let namespaces = ["bench-etcd-1", "bench-etcd-2"];
    for ns in namespaces {
        first.create_namespace(ns).await?;
    }
    let one = spread(&[&first], runs.clients)?;
    let two = spread(&[&first, &second], runs.clients)?;
    // Rounds A B C C B A, so that the growing etcd weighs on all three alike.
    let systems: [(&str, &Target, &str, Vec<&Proc>); 3] = [
        ("raw etcd", etcd, "bench-etcd-raw", vec![etcd_proc]),
        (
            "1 server",
            &one,
            namespaces[0],
            vec![etcd_proc, &first.proc],
        ),
        (
            "2 servers",
            &two,
            namespaces[1],
            vec![etcd_proc, &first.proc, &second.proc],
        ),
    ];
    let mut results: Vec<Vec<Creates>> = vec![Vec::new(); 3];
    for (round, i) in [0, 1, 2, 2, 1, 0].into_iter().enumerate() {
        let (name, target, ns, procs) = &systems[i];
        eprintln!(
            "  {name}: {} creates, {} clients (on-etcd round {round})",
            runs.per_round, runs.clients
        );
        let cpu = cpu_of(procs);
        let etcd_cpu = etcd_proc.cpu_time();
        let mut result = creates(
            target,
            ns,
            &format!("e{round}"),
            runs.per_round,
            runs.clients,
        )
        .await?;
        for proc in procs.iter().skip(1) {
            proc.wait_idle().await;
        }
        result.cpu_ms = cpu_per_object(cpu, cpu_of(procs), runs.per_round);
        result.etcd_cpu_ms = cpu_per_object(etcd_cpu, etcd_proc.cpu_time(), runs.per_round);
        results[i].push(result);
    }
    let listed = 2 * runs.per_round;
    let mut list_results = Vec::new();
    for (name, target, ns, _) in &systems[..2] {
        eprintln!("  {name}: LIST of {listed}, {} times", runs.list_runs);
        let result = lists(target, ns, runs.list_runs).await?;
        if result.items != listed {
            bail!(
                "{name}: LIST returned {} items, expected {listed}",
                result.items
            );
        }
        list_results.push(result);
    }
    let failover = failover(first, &second).await?;
    print_on_etcd(runs, &results, &list_results, failover);
    Ok(())
}

/// Kills `first` (the lease holder, started first) and times how long until the
/// survivor's controllers act: a VM created right after the kill gets its VMI.
async fn failover(first: Virtplane, second: &Virtplane) -> Result<Duration> {
    let ns = "bench-etcd-1";
    drop(first);
    let started = Instant::now();
    let mut probe = vm("failover-probe");
    probe["spec"]["runStrategy"] = json!("Always");
    second
        .create(
            &format!("/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines"),
            &probe,
        )
        .await?;
    let client = second.client(Some(Duration::from_secs(10)))?;
    let vmi = format!(
        "{}/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/failover-probe",
        second.url
    );
    while started.elapsed() < Duration::from_secs(120) {
        if let Ok(r) = client.get(&vmi).send().await {
            if r.status() == reqwest::StatusCode::OK {
                return Ok(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("the surviving server's controllers never made the probe VM's VMI")
}

fn mean(values: &[Creates], f: fn(&Creates) -> f64) -> f64 {
    values.iter().map(f).sum::<f64>() / values.len().max(1) as f64
}

fn print_on_etcd(runs: &EtcdRuns, results: &[Vec<Creates>], lists: &[Lists], failover: Duration) {
    let clients = runs.clients;
    println!();
    println!(
        "virtplane on etcd (one local etcd member, keys under /vp) beside raw etcd puts (v3 JSON gateway), same run: rounds A B C C B A of {} creates with {clients} clients; means of two rounds",
        runs.per_round
    );
    println!("| measurement | raw etcd | 1 server | 2 servers |");
    println!("|---|---:|---:|---:|");
    let row = |label: &str, f: fn(&Creates) -> f64, digits: usize| {
        let cells: Vec<String> = results
            .iter()
            .map(|r| format!("{:.*}", digits, mean(r, f)))
            .collect();
        println!("| {label} | {} |", cells.join(" | "));
    };
    row("creates/s (higher is better)", |c| c.per_second, 0);
    row("p50 latency ms", |c| c.p50_ms, 2);
    row("p99 latency ms", |c| c.p99_ms, 2);
    row(
        "CPU ms per create, etcd + servers, incl. background work",
        |c| c.cpu_ms,
        2,
    );
    row("of which etcd's", |c| c.etcd_cpu_ms, 2);
    println!(
        "| LIST {} VMs, JSON: median ms of {} | {:.1} | {:.1} | - |",
        lists[0].items, runs.list_runs, lists[0].median_ms, lists[1].median_ms
    );
    println!(
        "| LIST: response body MB | {:.1} | {:.1} | - |",
        lists[0].bytes as f64 / 1e6,
        lists[1].bytes as f64 / 1e6
    );
    println!(
        "failover: lease holder killed -> the survivor's controllers made a new VM's VMI: {:.2} s",
        failover.as_secs_f64()
    );
    let raw = mean(&results[0], |c| c.per_second);
    let one = mean(&results[1], |c| c.per_second);
    let two = mean(&results[2], |c| c.per_second);
    let share = if raw > 0.0 { one / raw } else { 0.0 };
    println!(
        "target: one server >= 80% of raw etcd's creates/s: {} ({one:.0}/s vs {raw:.0}/s, {:.0}%)",
        if share >= 0.8 { "MET" } else { "NOT MET" },
        share * 100.0
    );
    println!(
        "target: two servers > one: {} ({two:.0}/s vs {one:.0}/s)",
        if two > one { "MET" } else { "NOT MET" }
    );
    bench_report::higher("api_vs_etcd", "etcd: creates, 1 server", one, "creates/s")
        .beside("raw etcd", raw)
        .record();
    bench_report::higher("api_vs_etcd", "etcd: creates, 2 servers", two, "creates/s")
        .beside("1 server", one)
        .record();
    // The target: the server's own CPU per create no more than etcd's.
    let etcd_cpu = mean(&results[1], |c| c.etcd_cpu_ms);
    bench_report::lower(
        "api_vs_etcd",
        "etcd: server CPU per create (etcd's excluded)",
        mean(&results[1], |c| c.cpu_ms) - etcd_cpu,
        "ms",
    )
    .beside("etcd's CPU per create", etcd_cpu)
    .target(etcd_cpu)
    .record();
    bench_report::lower("api_vs_etcd", "etcd: failover", failover.as_secs_f64(), "s").record();
}

/// Creates/s (and p99) of each RBAC round: admin, editor, editor, admin.
async fn rbac_rounds(
    admin: &Target,
    editor: &Target,
    proc: &Proc,
    per_round: usize,
    clients: usize,
) -> Result<Vec<(&'static str, Creates)>> {
    let mut rounds = Vec::new();
    let abba = [
        ("cluster-admin", admin, RBAC_NAMESPACES[0]),
        ("kubevirt.io:edit", editor, RBAC_NAMESPACES[1]),
        ("kubevirt.io:edit", editor, RBAC_NAMESPACES[1]),
        ("cluster-admin", admin, RBAC_NAMESPACES[0]),
    ];
    let repeats = knob::<usize>("BENCH_RBAC_REPEATS", 1).max(1);
    for (round, (who, target, ns)) in std::iter::repeat_n(abba, repeats).flatten().enumerate() {
        eprintln!(
            "  virtplane as {who}: {per_round} creates, {clients} clients (RBAC round {round})"
        );
        let result = creates(target, ns, &format!("r{round}"), per_round, clients).await?;
        proc.wait_idle().await;
        rounds.push((who, result));
    }
    Ok(rounds)
}

fn print_rbac(rounds: &[(&'static str, Creates)], per_round: usize, clients: usize) {
    let mean = |who: &str, f: fn(&Creates) -> f64| {
        let values: Vec<f64> = rounds
            .iter()
            .filter(|(w, _)| *w == who)
            .map(|(_, c)| f(c))
            .collect();
        values.iter().sum::<f64>() / values.len().max(1) as f64
    };
    let admin = mean("cluster-admin", |c| c.per_second);
    let edit = mean("kubevirt.io:edit", |c| c.per_second);
    println!();
    println!(
        "authorization cost: {per_round} creates per round, {clients} clients, rounds A B B A repeated (A: admin in system:masters, B: a user bound to kubevirt.io:edit by a RoleBinding; both bearer tokens)"
    );
    println!("| round | as | creates/s | p50 ms | p99 ms |");
    println!("|---|---|---:|---:|---:|");
    for (i, (who, c)) in rounds.iter().enumerate() {
        println!(
            "| {} | {who} | {:.0} | {:.2} | {:.2} |",
            i + 1,
            c.per_second,
            c.p50_ms,
            c.p99_ms
        );
    }
    let loss = if admin > 0.0 {
        (1.0 - edit / admin) * 100.0
    } else {
        0.0
    };
    let verdict = if loss <= 5.0 { "MET" } else { "NOT MET" };
    println!(
        "target: kubevirt.io:edit creates/s within 5% of cluster-admin's: {verdict} ({edit:.0}/s vs {admin:.0}/s, {loss:+.1}% lost)"
    );
}

/// Everything one run measured; index 0 is virtplane, 1 is etcd.
struct Report {
    etcd_version: String,
    body_len: usize,
    clients: usize,
    seq: [Creates; 2],
    conc: [Creates; 2],
    list: [Lists; 2],
    list_runs: usize,
    settle: [Duration; 2],
}

fn print_table(report: &Report) {
    let Report {
        etcd_version,
        body_len,
        clients,
        seq,
        conc,
        list,
        list_runs,
        settle,
    } = report;
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}x", a / b)
        } else {
            "-".into()
        }
    };
    let mut rows: Vec<[String; 4]> = Vec::new();
    let mut creates_rows = |label: &str, r: &[Creates; 2]| {
        rows.push([
            format!(
                "create VM, {label} ({} objects): creates/s (higher is better)",
                r[0].count
            ),
            format!("{:.0}", r[0].per_second),
            format!("{:.0}", r[1].per_second),
            ratio(r[0].per_second, r[1].per_second),
        ]);
        rows.push([
            format!("create VM, {label}: p50 latency ms (lower is better)"),
            format!("{:.2}", r[0].p50_ms),
            format!("{:.2}", r[1].p50_ms),
            ratio(r[0].p50_ms, r[1].p50_ms),
        ]);
        rows.push([
            format!("create VM, {label}: p99 latency ms (lower is better)"),
            format!("{:.2}", r[0].p99_ms),
            format!("{:.2}", r[1].p99_ms),
            ratio(r[0].p99_ms, r[1].p99_ms),
        ]);
        rows.push([
            format!("create VM, {label}: server CPU ms per create, incl. background work"),
            format!("{:.2}", r[0].cpu_ms),
            format!("{:.2}", r[1].cpu_ms),
            ratio(r[0].cpu_ms, r[1].cpu_ms),
        ]);
    };
    creates_rows("1 client", seq);
    creates_rows(&format!("{clients} clients"), conc);
    rows.push([
        format!("after the {clients}-client creates: s of background work until idle"),
        format!("{:.1}", settle[0].as_secs_f64()),
        format!("{:.1}", settle[1].as_secs_f64()),
        String::new(),
    ]);
    rows.push([
        format!(
            "LIST {} VMs, JSON: median ms of {list_runs} (lower is better)",
            list[0].items
        ),
        format!("{:.1}", list[0].median_ms),
        format!("{:.1}", list[1].median_ms),
        ratio(list[0].median_ms, list[1].median_ms),
    ]);
    rows.push([
        "LIST: min..max ms".into(),
        format!("{:.1}..{:.1}", list[0].min_ms, list[0].max_ms),
        format!("{:.1}..{:.1}", list[1].min_ms, list[1].max_ms),
        String::new(),
    ]);
    rows.push([
        "LIST: response body MB".into(),
        format!("{:.1}", list[0].bytes as f64 / 1e6),
        format!("{:.1}", list[1].bytes as f64 / 1e6),
        ratio(list[0].bytes as f64, list[1].bytes as f64),
    ]);
    let header = [
        "measurement".to_string(),
        "virtplane".into(),
        "etcd".into(),
        "virtplane/etcd".into(),
    ];
    let widths: Vec<usize> = (0..4)
        .map(|c| {
            rows.iter()
                .chain([&header])
                .map(|r| r[c].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |r: &[String; 4]| {
        format!(
            "| {:<w0$} | {:>w1$} | {:>w2$} | {:>w3$} |",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        )
    };
    println!();
    println!(
        "virtplane (SQLite WAL, synchronous=FULL, group commit) vs {etcd_version} (v3 JSON gateway), same run, loopback, HTTP/1.1 keep-alive, VM body {body_len} B"
    );
    println!("{}", line(&header));
    println!(
        "|{}|{}|{}|{}|",
        "-".repeat(widths[0] + 2),
        "-".repeat(widths[1] + 2),
        "-".repeat(widths[2] + 2),
        "-".repeat(widths[3] + 2)
    );
    for r in &rows {
        println!("{}", line(r));
    }
    let r = if conc[1].per_second > 0.0 {
        conc[0].per_second / conc[1].per_second
    } else {
        0.0
    };
    let verdict = if r >= 1.0 { "MET" } else { "NOT MET" };
    println!(
        "target: creates/s with {clients} clients >= etcd's: {verdict} ({:.0}/s vs {:.0}/s, {r:.2}x)",
        conc[0].per_second, conc[1].per_second
    );
    bench_report::higher(
        "api_vs_etcd",
        &format!("SQLite: creates, {clients} clients"),
        conc[0].per_second,
        "creates/s",
    )
    .beside("raw etcd", conc[1].per_second)
    .record();
    bench_report::lower(
        "api_vs_etcd",
        &format!("SQLite: LIST {} VMs (median)", list[0].items),
        list[0].median_ms,
        "ms",
    )
    .beside("etcd range", list[1].median_ms)
    .target(20.0)
    .record();
    bench_report::lower(
        "api_vs_etcd",
        &format!("SQLite: LIST {} VMs body", list[0].items),
        list[0].bytes as f64 / 1e6,
        "MB",
    )
    .beside("etcd range", list[1].bytes as f64 / 1e6)
    .record();
}
