//! Live migration: what the control plane adds to QEMU's own migration, and how a node
//! drain of 100 VMs is paced.
//!
//! 1. Idle guest (256 MiB, `kernelBoot` of the test guest, booted to `ready` and left
//!    alone): VirtualMachineInstanceMigration POST → phase `Succeeded` (client-side, from
//!    a watch on the namespace's migrations), and QEMU's own `totalTimeMilliseconds` and
//!    `downtimeMilliseconds` from `status.migrationState.transfer`; the median of
//!    `BENCH_MIGRATIONS` runs, the same VM moving back and forth between two nodes, for
//!    virtplane with TLS off (the KubeVirt object `kubevirt/kubevirt` with
//!    `spec.configuration.migrations.disableTLS: true`) and with its default TLS, each
//!    run followed by the reference: a bare QEMU-to-QEMU migration of the same guest on
//!    the same host, without TLS. Targets: orchestration overhead (virtplane TLS off −
//!    bare, median wall time) ≤ 100 ms; downtime ≤ 50 ms.
//! 2. A guest dirtying memory: the same, with the guest rewriting 64 MiB of tmpfs from
//!    `/dev/urandom` in a loop during the migration (started over the serial console
//!    about a second before the migration, killed after it). After each migration the
//!    target's console log is searched for a kernel oops and the loop is stopped over
//!    the console; a guest that did not survive is counted (column `crashed`) and
//!    started afresh. (QEMU 7.2 under TCG here corrupts a guest that writes memory while
//!    it moves, in bare QEMU-to-QEMU migrations as well; the guest alone does not.)
//! 3. Drain: 100 VMs with `evictionStrategy: LiveMigrate` on one of 4 simulated nodes;
//!    the node gets the drain taint (`kubevirt.io/drain:NoSchedule` and cordoned, as
//!    `virtplane node drain` does) and the clock runs until all 100 VMIs run elsewhere;
//!    also how many migrations ran at once (phase past Pending and not final, as the
//!    migration controller counts them). With KubeVirt's default limits (5 per cluster,
//!    2 outbound per node) and with both raised to 100 in the KubeVirt object; each
//!    configuration on a fresh server.
//!
//! `cargo build --release --bin virtplane && cargo bench -p virtplane --bench migration`
//!
//! Parts 1 and 2 run one release server with its local QEMU node (`node-a`) and a second
//! `virtplane node` agent (`node-b`) joined with `DIR/node-join.kubeconfig`, both on this
//! host, with the test registry of `scripts/test-registry`. The VM has no disks and no
//! interfaces, so a migration moves RAM and device state only. All TLS-off runs (parts 1
//! and 2) come first, then the VM and the bare guest are booted afresh for the TLS runs:
//! a QEMU that received its guest over TLS keeps the server's `tls-creds` in its
//! migration parameters, so it cannot send the guest on without TLS (the source fails
//! with "Expected TLS credentials for a client endpoint"). Each block starts with an
//! uncounted warm-up round trip (the first pulls the kernel image onto the second
//! node). After each migration the bench waits until the source QEMU has exited and
//! lets the host settle for `BENCH_SETTLE_MS` before the next. A virtplane migration that
//! ends Failed is counted (column `failed`, with its reason below the table) and run again,
//! up to three times.
//!
//! The bare reference takes the command line the agent gave QEMU (`/proc/<pid>/cmdline`
//! of the running guest, as `qemu_boot` does) with its runtime paths (QMP and console
//! sockets, serial log, pidfile) moved to a temp dir, boots its own copy of the guest
//! from it, and for each migration starts a second QEMU with the same argv plus
//! `-incoming defer` and drives the migration over QMP as the agents do: on the source
//! `migrate-set-capabilities` (auto-converge as the last virtplane migration's frozen
//! `allowAutoConverge` had it) and
//! `migrate-set-parameters` (`downtime-limit` 30 ms, `max-bandwidth` 10 GiB/s, as
//! virtplane sets them), `migrate-incoming` on the target, `migrate`, `query-migrate`
//! every 10 ms until `completed`, then the target's `query-status` until it has left
//! `inmigrate`, and `cont` on the target. Its wall time runs from spawning the target
//! QEMU to the answer to `cont`, so both sides include the target's start. Virtplane and
//! bare runs alternate, so load from elsewhere hits them alike (the bare reference runs
//! in both blocks, so it has twice the samples); the virtplane guest and the bare one
//! both exist throughout, idle while the other moves. Control-plane CPU is the server's
//! and the second agent's CPU time (`/proc/PID/stat`, 10 ms ticks; QEMU excluded) from
//! the POST to the end of the run.
//! Which TLS setting a virtplane run had is read back from the configuration frozen into
//! its migration (`status.migrationState.migrationConfiguration.disableTLS`).
//!
//! Part 3 runs `--no-node --hypervisor sim --sim-nodes 4 --sim-boot-delay 0ms` with
//! `--sim-migration-delay` (each simulated migration takes that long); the three other
//! nodes are cordoned while the VMs are created and uncordoned before the drain. Watches
//! on the VMIs and the migrations timestamp each change.
//!
//! Knobs (environment): `VIRTPLANE_BIN` (default: the binary cargo built for this bench,
//! i.e. the release one), `BENCH_REGISTRY` (HOST:PORT; default: `scripts/test-registry`),
//! `BENCH_MIGRATIONS` (5 per kind of run), `BENCH_SETTLE_MS` (500), `BENCH_DIRTY_WARMUP_MS`
//! (1000: how long the dirtying loop runs before the migration starts), `BENCH_DIRTY_MIB`
//! (64), `BENCH_TIMEOUT_S` (180 per migration or boot), `BENCH_DRAIN_VMS` (100),
//! `BENCH_SIM_MIGRATION_DELAY` (`300ms`), `BENCH_DRAIN_TIMEOUT_S` (300), `BENCH_PARTS`
//! (`1,2,3`: which parts run), `BENCH_KEEP=1` (keep the temp dir with the logs), `RUST_LOG` (the
//! server's and agent's log filter; default `warn`).
//!
//! Under TCG on a loaded 2-core host the figures vary from run to run; the table shows
//! min–max beside each median, and where virtplane's time goes (the first time the
//! watch showed each phase, from the POST).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};
use support::console::Console;
use support::process::{free_port, Proc};
use support::stats::{ms, percentile};
use support::virtplane::{Launch, Virtplane};
use support::{knob, size, virtplane_binary};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

const NS: &str = "bench";
const VM: &str = "mover";
const NODE_A: &str = "node-a";
const NODE_B: &str = "node-b";
const TARGET_OVERHEAD_MS: f64 = 100.0;
const TARGET_DOWNTIME_MS: f64 = 50.0;
/// How often the bare reference asks `query-migrate`: as the source agent does.
const POLL: Duration = Duration::from_millis(10);
/// virtplane's `max-bandwidth` when the configuration sets none (`qemu::migration`).
const MAX_BANDWIDTH: u64 = 10 << 30;
const DOWNTIME_LIMIT_MS: u64 = 30;
const VMIMS: &str = "virtualmachineinstancemigrations";

fn main() -> ExitCode {
    support::main("migration", run)
}

/// The test registry's address: `BENCH_REGISTRY`, or `scripts/test-registry` (started or
/// reused).
fn registry() -> Result<String> {
    if let Ok(address) = std::env::var("BENCH_REGISTRY") {
        return Ok(address);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-registry");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed ({})", script.display(), out.status);
    }
    let address = String::from_utf8(out.stdout)?.trim().to_string();
    if address.is_empty() {
        bail!("{} printed no address", script.display());
    }
    Ok(address)
}

fn log_filter() -> String {
    std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())
}

// ---- the API ------------------------------------------------------------------------

struct Api {
    url: String,
    client: reqwest::Client,
    /// For watches (no overall timeout).
    watcher: reqwest::Client,
}

impl Api {
    fn new(server: &Virtplane) -> Result<Api> {
        Ok(Api {
            url: server.url.clone(),
            client: server.client(Some(Duration::from_secs(60)))?,
            watcher: server.client(None)?,
        })
    }

    async fn get(&self, path: &str) -> Result<Option<Value>> {
        let r = self
            .client
            .get(format!("{}{path}", self.url))
            .send()
            .await?;
        match r.status().as_u16() {
            200 => Ok(Some(r.json().await?)),
            404 => Ok(None),
            other => bail!("GET {path}: {other} {}", r.text().await?),
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder, what: &str) -> Result<Value> {
        let r = request.send().await?;
        let status = r.status();
        let text = r.text().await?;
        if !status.is_success() {
            bail!("{what}: {status} {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let request = self
            .client
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body.to_string());
        self.send(request, &format!("POST {path}")).await
    }

    async fn merge(&self, path: &str, body: &Value) -> Result<Value> {
        let request = self
            .client
            .patch(format!("{}{path}", self.url))
            .header("content-type", "application/merge-patch+json")
            .body(body.to_string());
        self.send(request, &format!("PATCH {path}")).await
    }

    async fn delete(&self, path: &str) -> Result<()> {
        let r = self
            .client
            .delete(format!("{}{path}", self.url))
            .send()
            .await?;
        if !r.status().is_success() && r.status().as_u16() != 404 {
            bail!("DELETE {path}: {} {}", r.status(), r.text().await?);
        }
        Ok(())
    }
}

fn kubevirt(ns: &str, plural: &str) -> String {
    format!("/apis/kubevirt.io/v1/namespaces/{ns}/{plural}")
}

const KUBEVIRT_OBJECT: &str = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt";

/// The KubeVirt object `kubevirt/kubevirt` with `migrations` (the server makes the
/// namespace at start).
async fn create_kubevirt(api: &Api, migrations: Value) -> Result<()> {
    api.post(
        &kubevirt("kubevirt", "kubevirts"),
        &json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                "metadata": {"name": "kubevirt"},
                "spec": {"configuration": {"migrations": migrations}}}),
    )
    .await?;
    Ok(())
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn condition_true(v: &Value, kind: &str) -> bool {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == kind && c["status"] == "True")
        })
}

// ---- watches ------------------------------------------------------------------------

/// The events of a collection's watch, each with the moment it arrived.
struct Watch {
    events: mpsc::UnboundedReceiver<Result<(Instant, Value)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watch {
    /// Watches `collection` (an API path) from its current resourceVersion.
    async fn start(api: &Api, collection: &str) -> Result<Watch> {
        let list = api
            .get(collection)
            .await?
            .with_context(|| format!("{collection} does not exist"))?;
        let rv = str_at(&list, "/metadata/resourceVersion").to_string();
        let (tx, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(watch_loop(
            api.watcher.clone(),
            format!("{}{collection}", api.url),
            rv,
            tx,
        ));
        Ok(Watch { events, task })
    }

    /// The next event, `None` once `deadline` has passed.
    async fn next(&mut self, deadline: Instant) -> Result<Option<(Instant, Value)>> {
        let deadline = tokio::time::Instant::from_std(deadline);
        match tokio::time::timeout_at(deadline, self.events.recv()).await {
            Err(_) => Ok(None),
            Ok(None) => bail!("the watch ended"),
            Ok(Some(event)) => event.map(Some),
        }
    }
}

/// Reads the watch, reconnecting from the last resourceVersion when the server ends it.
async fn watch_loop(
    client: reqwest::Client,
    url: String,
    mut rv: String,
    tx: mpsc::UnboundedSender<Result<(Instant, Value)>>,
) {
    loop {
        let response = match client
            .get(format!("{url}?watch=true&resourceVersion={rv}"))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                let _ = tx.send(Err(anyhow::anyhow!("watch {url}: {}", r.status())));
                return;
            }
            Err(e) => {
                let _ = tx.send(Err(anyhow::anyhow!("watch {url}: {e}")));
                return;
            }
        };
        let mut stream = response.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(Ok(chunk)) = stream.next().await {
            let now = Instant::now();
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                if event["type"] == "ERROR" {
                    let _ = tx.send(Err(anyhow::anyhow!(
                        "watch {url}: error {}",
                        event["object"]
                    )));
                    return;
                }
                let v = str_at(&event, "/object/metadata/resourceVersion");
                if !v.is_empty() {
                    rv = v.to_string();
                }
                if tx.send(Ok((now, event))).is_err() {
                    return;
                }
            }
        }
    }
}

// ---- QMP ----------------------------------------------------------------------------

/// A minimal QMP client (JSON lines; events are skipped).
struct Qmp {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    write: tokio::net::unix::OwnedWriteHalf,
}

impl Qmp {
    async fn connect(socket: &Path, deadline: Instant) -> Result<Qmp> {
        let stream = loop {
            match tokio::net::UnixStream::connect(socket).await {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => bail!("QMP {}: {e}", socket.display()),
                Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        };
        let (read, write) = stream.into_split();
        let mut qmp = Qmp {
            lines: BufReader::new(read).lines(),
            write,
        };
        qmp.reply("the greeting").await?;
        qmp.execute("qmp_capabilities", None).await?;
        Ok(qmp)
    }

    async fn reply(&mut self, what: &str) -> Result<Value> {
        loop {
            let line = self
                .lines
                .next_line()
                .await?
                .with_context(|| format!("QMP closed before {what}"))?;
            let message: Value = serde_json::from_str(&line)?;
            if let Some(r) = message.get("return") {
                return Ok(r.clone());
            }
            if message.get("QMP").is_some() {
                return Ok(message);
            }
            if message.get("error").is_some() {
                bail!("QMP {what}: {message}");
            }
        }
    }

    async fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value> {
        let mut message = json!({"execute": command});
        if let Some(arguments) = arguments {
            message["arguments"] = arguments;
        }
        self.write
            .write_all(format!("{message}\n").as_bytes())
            .await?;
        self.reply(command).await
    }
}

// ---- processes ------------------------------------------------------------------------

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.starts_with(" Z"))
    })
}

/// The QEMU processes whose `-pidfile` lies under `dir`.
fn qemus_under(dir: &Path) -> Vec<u32> {
    let prefix = dir.display().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let argv = cmdline(*pid);
            argv.first().is_some_and(|a| a.contains("qemu-system"))
                && argv
                    .windows(2)
                    .any(|w| w[0] == "-pidfile" && w[1].starts_with(&prefix))
        })
        .collect()
}

/// Kills the QEMUs the bench's servers and agents started under its temp dir (they run
/// in their own process groups and outlive the agents), when the bench ends either way.
struct QemuSweep(PathBuf);

impl Drop for QemuSweep {
    fn drop(&mut self) {
        for pid in qemus_under(&self.0) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

async fn wait_gone(pid: u32, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while alive(pid) {
        if Instant::now() > deadline {
            bail!("QEMU {pid} still runs after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

// ---- samples ------------------------------------------------------------------------

/// One migration: wall time and what QEMU reported.
#[derive(Clone, Default)]
struct Sample {
    wall: Duration,
    total_ms: f64,
    downtime_ms: f64,
    setup_ms: f64,
    memory_bytes: f64,
    /// CPU time of the server and the second agent during the run (virtplane only).
    cpu_ms: f64,
    /// Milestones from the start (virtplane: phases first seen on the watch; bare: steps).
    steps: Vec<(String, Duration)>,
}

impl Sample {
    fn from_transfer(wall: Duration, transfer: &Value, steps: Vec<(String, Duration)>) -> Self {
        let f = |k: &str| transfer[k].as_f64().unwrap_or(f64::NAN);
        Sample {
            wall,
            total_ms: f("totalTimeMilliseconds"),
            downtime_ms: f("downtimeMilliseconds"),
            setup_ms: f("setupTimeMilliseconds"),
            memory_bytes: f("memoryBytes"),
            cpu_ms: f64::NAN,
            steps,
        }
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn spread(values: &[f64]) -> String {
    let v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return "—".into();
    }
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.0} ({:.0}–{:.0})", median(&v), min, max)
}

#[derive(Default)]
struct Kind {
    samples: Vec<Sample>,
    /// Guests that crashed (a kernel oops on the target's console) after the migration.
    crashed: usize,
    /// Migrations that ended Failed (and were run again).
    failed: Vec<String>,
}

impl Kind {
    fn col(&self, f: impl Fn(&Sample) -> f64) -> Vec<f64> {
        self.samples.iter().map(f).collect()
    }
    fn wall(&self) -> Vec<f64> {
        self.col(|s| ms(s.wall))
    }
    fn med_wall(&self) -> f64 {
        median(&self.wall())
    }
    fn med_downtime(&self) -> f64 {
        median(&self.col(|s| s.downtime_ms))
    }
    fn med_total(&self) -> f64 {
        median(&self.col(|s| s.total_ms))
    }
    /// The median time from the start to each milestone, in the order first seen.
    fn steps(&self) -> Vec<(String, f64)> {
        let mut order: Vec<String> = Vec::new();
        let mut times: HashMap<String, Vec<f64>> = HashMap::new();
        for s in &self.samples {
            for (name, at) in &s.steps {
                if !order.contains(name) {
                    order.push(name.clone());
                }
                times.entry(name.clone()).or_default().push(ms(*at));
            }
        }
        order
            .into_iter()
            .map(|n| {
                let m = median(&times[&n]);
                (n, m)
            })
            .collect()
    }
}

// ---- parts 1 and 2: two QEMU nodes ------------------------------------------------------

struct Cluster {
    server: Virtplane,
    agent: Proc,
    api: Api,
    data: PathBuf,
    agent_data: PathBuf,
}

impl Cluster {
    async fn start(dir: &Path, registry: &str, timeout: Duration) -> Result<Cluster> {
        let data = dir.join("server");
        let mut server = Virtplane::start(Launch {
            data: data.clone(),
            log: dir.join("server.log"),
            args: &[
                "--hypervisor",
                "qemu",
                "--node-name",
                NODE_A,
                "--insecure-registry",
                registry,
            ],
            env: &[("RUST_LOG", log_filter())],
            nodes: 1,
            // The first start on a host boots a kernel to probe KVM: allow for it.
            within: Duration::from_secs(90),
        })
        .await?;
        let agent_data = dir.join("agent");
        std::fs::create_dir_all(&agent_data)?;
        let agent = Proc::spawn(
            "virtplane node",
            Command::new(virtplane_binary())
                .arg("node")
                .arg("--kubeconfig")
                .arg(data.join("node-join.kubeconfig"))
                .args(["--name", NODE_B, "--data-dir"])
                .arg(&agent_data)
                .args(["--hypervisor", "qemu", "--insecure-registry", registry])
                .env("RUST_LOG", log_filter()),
            dir.join("agent.log"),
        )?;
        server
            .wait_nodes_ready(2, Instant::now() + timeout)
            .await
            .context("waiting for the second node")?;
        let api = Api::new(&server)?;
        server.create_namespace(NS).await?;
        Ok(Cluster {
            server,
            agent,
            api,
            data,
            agent_data,
        })
    }

    fn check_alive(&mut self) -> Result<()> {
        self.server.proc.check_alive()?;
        self.agent.check_alive()
    }

    /// Waits until the VMI runs with no migration in flight (after a failed one).
    async fn wait_settled(&mut self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            self.check_alive()?;
            let vmi = self.vmi().await?;
            let state = vmi.pointer("/status/migrationState");
            let settled = state.is_none_or(|s| s.is_null() || s["completed"] == json!(true));
            if settled && str_at(&vmi, "/status/phase") == "Running" {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the VMI did not settle after a failed migration: {}",
                    vmi["status"]
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// CPU time the server (with its local node agent) and the second agent have used.
    fn cpu_time(&self) -> Option<Duration> {
        Some(self.server.proc.cpu_time()? + self.agent.cpu_time()?)
    }

    fn vmi_dir(&self, node: &str) -> PathBuf {
        let root = if node == NODE_B {
            &self.agent_data
        } else {
            &self.data
        };
        root.join("node").join(node).join("vmi").join(NS).join(VM)
    }

    async fn vmi(&self) -> Result<Value> {
        self.api
            .get(&format!("{}/{VM}", kubevirt(NS, "virtualmachineinstances")))
            .await?
            .context("the VMI is gone")
    }

    /// The node the VMI runs on and its QEMU's pid there.
    async fn placement(&self) -> Result<(String, u32)> {
        let vmi = self.vmi().await?;
        let node = str_at(&vmi, "/status/nodeName").to_string();
        let pidfile = self.vmi_dir(&node).join("run/qemu.pid");
        let pid = std::fs::read_to_string(&pidfile)
            .with_context(|| format!("{}", pidfile.display()))?
            .trim()
            .parse()
            .context("qemu.pid")?;
        Ok((node, pid))
    }

    async fn console(&self) -> Result<Console> {
        let mut console = Console::api(&self.api.url, &self.data, NS, VM).await?;
        console.send("\r").await?;
        Ok(console)
    }

    async fn set_tls(&self, on: bool) -> Result<()> {
        self.api
            .merge(
                KUBEVIRT_OBJECT,
                &json!({"spec": {"configuration": {"migrations": {"disableTLS": !on}}}}),
            )
            .await?;
        // The migration controller reads the object from its cache at hand-off.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(())
    }
}

fn vm(registry: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": VM},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": VM}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "domain": {
                        "memory": {"guest": "256Mi"},
                        "devices": {"autoattachPodInterface": false},
                        "firmware": {"kernelBoot": {
                            "kernelArgs": "console=ttyS0 no_timer_check",
                            "container": {
                                "image": format!("{registry}/guest-kernel:latest"),
                                "kernelPath": "/boot/vmlinux",
                                "initrdPath": "/boot/initramfs.cpio.gz"
                            }
                        }}
                    }
                }
            }
        }
    })
}

/// Waits until `file` holds `line` (the guest's console log).
async fn wait_line(file: &Path, line: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if std::fs::read(file).is_ok_and(|b| String::from_utf8_lossy(&b).contains(line)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let text = std::fs::read(file).unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            let tail: Vec<&str> = text.lines().rev().take(10).collect();
            bail!(
                "{} shows no {line:?} after {within:?}; it ends {:?}",
                file.display(),
                tail.into_iter().rev().collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const READY: &str = "virtplane-guest: ready";

/// What a guest kernel prints when it oopses or panics.
const OOPS: [&str; 6] = [
    "BUG:",
    "kernel BUG",
    "corruption",
    "general protection",
    "invalid opcode",
    "Kernel panic",
];

/// The first line of `file` (a console log) from byte `from` on that shows an oops.
fn oops(file: &Path, from: usize) -> Option<String> {
    let bytes = std::fs::read(file).ok()?;
    let text = String::from_utf8_lossy(bytes.get(from..)?);
    text.lines()
        .find(|l| OOPS.iter().any(|w| l.contains(w)))
        .map(|l| l.trim().to_string())
}

fn file_len(file: &Path) -> usize {
    std::fs::metadata(file).map_or(0, |m| m.len() as usize)
}

/// Creates the VM and waits until its guest is up and the VMI may migrate.
async fn boot_vm(cluster: &mut Cluster, registry: &str, timeout: Duration) -> Result<Duration> {
    let started = Instant::now();
    cluster
        .api
        .post(&kubevirt(NS, "virtualmachines"), &vm(registry))
        .await?;
    let deadline = started + timeout;
    loop {
        cluster.check_alive()?;
        if let Ok(vmi) = cluster.vmi().await {
            let node = str_at(&vmi, "/status/nodeName");
            if str_at(&vmi, "/status/phase") == "Running"
                && !node.is_empty()
                && condition_true(&vmi, "LiveMigratable")
            {
                wait_line(
                    &cluster.vmi_dir(node).join("run/serial.log"),
                    READY,
                    deadline.saturating_duration_since(Instant::now()),
                )
                .await?;
                return Ok(started.elapsed());
            }
            if Instant::now() > deadline {
                bail!(
                    "the VMI did not run (LiveMigratable) within {timeout:?}: {}",
                    vmi["status"]
                );
            }
        } else if Instant::now() > deadline {
            bail!("no VMI within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A virtplane migration that ended Failed (the guest stays at its source).
#[derive(Debug)]
struct MigrationFailed(String);

impl std::fmt::Display for MigrationFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MigrationFailed {}

/// One virtplane migration: what it measured and which TLS setting it ran with.
struct VpRun {
    sample: Sample,
    tls: bool,
    /// `allowAutoConverge` as frozen into the migration.
    auto_converge: bool,
    from: String,
    to: String,
}

async fn migrate_vp(
    cluster: &mut Cluster,
    watch: &mut Watch,
    name: &str,
    timeout: Duration,
) -> Result<VpRun> {
    let (from, source_pid) = cluster.placement().await?;
    let body = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                      "metadata": {"name": name}, "spec": {"vmiName": VM}});
    let cpu_before = cluster.cpu_time();
    let sent = Instant::now();
    cluster.api.post(&kubevirt(NS, VMIMS), &body).await?;
    let deadline = sent + timeout;
    let mut steps: Vec<(String, Duration)> = Vec::new();
    let mut wall = None;
    let mut last = Value::Null;
    let done = loop {
        let Some((at, event)) = watch.next(deadline).await? else {
            bail!(
                "migration {name} not final after {timeout:?}: {}",
                last["status"]
            );
        };
        let object = &event["object"];
        if str_at(object, "/metadata/name") != name {
            continue;
        }
        last = object.clone();
        let phase = str_at(object, "/status/phase");
        if !phase.is_empty() && !steps.iter().any(|(p, _)| p == phase) {
            steps.push((phase.to_string(), at.saturating_duration_since(sent)));
        }
        match phase {
            "Failed" => {
                let why = str_at(object, "/status/migrationState/failureReason");
                let phases: Vec<&str> = steps.iter().map(|(p, _)| p.as_str()).collect();
                return Err(MigrationFailed(format!(
                    "{name} ({from} → {}) failed after {}: {why}",
                    str_at(object, "/status/migrationState/targetNode"),
                    phases.join(", ")
                ))
                .into());
            }
            "Succeeded" => {
                wall.get_or_insert(at.saturating_duration_since(sent));
                let released = object["metadata"]
                    .get("finalizers")
                    .is_none_or(|f| f.as_array().is_none_or(Vec::is_empty));
                if released && object.pointer("/status/migrationState/transfer").is_some() {
                    break object.clone();
                }
            }
            _ => {}
        }
        cluster.check_alive()?;
    };
    let cpu = match (cpu_before, cluster.cpu_time()) {
        (Some(a), Some(b)) => ms(b.saturating_sub(a)),
        _ => f64::NAN,
    };
    let state = &done["status"]["migrationState"];
    let to = str_at(state, "/targetNode").to_string();
    let tls = state.pointer("/migrationConfiguration/disableTLS") != Some(&json!(true));
    let auto_converge =
        state.pointer("/migrationConfiguration/allowAutoConverge") == Some(&json!(true));
    // The source lets its stopped copy go; the next run starts once it has.
    wait_gone(source_pid, Duration::from_secs(60)).await?;
    let vmi = cluster.vmi().await?;
    if str_at(&vmi, "/status/nodeName") != to {
        bail!(
            "migration {name} succeeded but the VMI is on {:?}, not {to}",
            str_at(&vmi, "/status/nodeName")
        );
    }
    let mut sample =
        Sample::from_transfer(wall.context("no Succeeded")?, &state["transfer"], steps);
    sample.cpu_ms = cpu;
    Ok(VpRun {
        sample,
        tls,
        auto_converge,
        from,
        to,
    })
}

// ---- the bare reference -------------------------------------------------------------

struct BareQemu {
    child: tokio::process::Child,
    dir: PathBuf,
    qmp: Qmp,
}

impl BareQemu {
    async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A guest of its own, run from the agent's command line and moved by the bench.
struct Bare {
    binary: String,
    /// The agent's arguments (without the binary and any `-incoming`).
    argv: Vec<String>,
    /// The agent's VMI dir, which the runtime paths in `argv` lie under.
    agent_dir: String,
    root: PathBuf,
    generation: usize,
    current: Option<BareQemu>,
    /// Set as virtplane's migrations had it.
    auto_converge: bool,
}

impl Bare {
    fn new(agent_argv: &[String], agent_dir: &Path, root: &Path) -> Result<Bare> {
        let (binary, rest) = agent_argv
            .split_first()
            .context("the agent's QEMU has no command line")?;
        let mut argv = Vec::new();
        let mut skip = false;
        for a in rest {
            if skip {
                skip = false;
            } else if a == "-incoming" {
                skip = true;
            } else {
                argv.push(a.clone());
            }
        }
        std::fs::create_dir_all(root)?;
        Ok(Bare {
            binary: binary.clone(),
            argv,
            agent_dir: agent_dir.display().to_string(),
            root: root.to_path_buf(),
            generation: 0,
            current: None,
            auto_converge: true,
        })
    }

    fn argv_in(&self, dir: &Path) -> Vec<String> {
        let to = dir.display().to_string();
        self.argv
            .iter()
            .map(|a| a.replace(&self.agent_dir, &to))
            .collect()
    }

    /// Where QEMU keeps `name` (sockets, serial log, pidfile) in a guest's `dir`: under
    /// `run/`, as in the agent's VMI dir whose paths the argv carries.
    fn run_path(dir: &Path, name: &str) -> PathBuf {
        dir.join("run").join(name)
    }

    async fn spawn(&mut self, incoming: bool) -> Result<BareQemu> {
        self.generation += 1;
        let dir = self.root.join(format!("gen-{}", self.generation));
        std::fs::create_dir_all(Self::run_path(&dir, ""))?;
        let mut argv = self.argv_in(&dir);
        if incoming {
            argv.extend(["-incoming".into(), "defer".into()]);
        }
        let log = std::fs::File::create(dir.join("qemu.log"))?;
        let started = Instant::now();
        let child = tokio::process::Command::new(&self.binary)
            .args(&argv)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", self.binary))?;
        let qmp = Qmp::connect(
            &Self::run_path(&dir, "qmp.sock"),
            started + Duration::from_secs(20),
        )
        .await
        .with_context(|| {
            let log = std::fs::read_to_string(dir.join("qemu.log")).unwrap_or_default();
            format!("bare QEMU in {}: {}", dir.display(), log.trim())
        })?;
        Ok(BareQemu { child, dir, qmp })
    }

    /// Starts the bare guest (paused, then `cont`, as the agent does) and waits for it.
    async fn boot(&mut self, within: Duration) -> Result<Duration> {
        let started = Instant::now();
        let mut qemu = self.spawn(false).await?;
        qemu.qmp.execute("cont", None).await?;
        wait_line(&Self::run_path(&qemu.dir, "serial.log"), READY, within).await?;
        self.current = Some(qemu);
        Ok(started.elapsed())
    }

    fn console_log(&self) -> Result<PathBuf> {
        let current = self
            .current
            .as_ref()
            .context("the bare guest is not running")?;
        Ok(Self::run_path(&current.dir, "serial.log"))
    }

    fn console_socket(&self) -> Result<PathBuf> {
        let current = self
            .current
            .as_ref()
            .context("the bare guest is not running")?;
        Ok(Self::run_path(&current.dir, "console.sock"))
    }

    /// Moves the guest to a new QEMU, as described at the top.
    async fn migrate(&mut self, timeout: Duration) -> Result<Sample> {
        let began = Instant::now();
        let mut steps = Vec::new();
        let mut target = self.spawn(true).await?;
        steps.push(("target QMP up".to_string(), began.elapsed()));
        let deadline = began + timeout;
        let source = self.current.as_mut().context("no bare guest")?;
        let port = free_port()?;
        let uri = format!("tcp:127.0.0.1:{port}");
        target
            .qmp
            .execute("migrate-incoming", Some(json!({"uri": uri})))
            .await?;
        steps.push(("target listens".to_string(), began.elapsed()));
        let caps: Vec<Value> = [
            ("pause-before-switchover", false),
            ("auto-converge", self.auto_converge),
            ("postcopy-ram", false),
        ]
        .iter()
        .map(|(c, on)| json!({"capability": c, "state": on}))
        .collect();
        source
            .qmp
            .execute(
                "migrate-set-capabilities",
                Some(json!({"capabilities": caps})),
            )
            .await?;
        source
            .qmp
            .execute(
                "migrate-set-parameters",
                Some(json!({"downtime-limit": DOWNTIME_LIMIT_MS, "max-bandwidth": MAX_BANDWIDTH})),
            )
            .await?;
        source
            .qmp
            .execute("migrate", Some(json!({"uri": uri})))
            .await?;
        steps.push(("migrate sent".to_string(), began.elapsed()));
        let done = loop {
            let r = source.qmp.execute("query-migrate", None).await?;
            match r["status"].as_str().unwrap_or("") {
                "completed" => break r,
                "failed" | "cancelled" => bail!("bare migration failed: {r}"),
                _ => {}
            }
            if Instant::now() > deadline {
                bail!("bare migration not done after {timeout:?}: {r}");
            }
            tokio::time::sleep(POLL).await;
        };
        steps.push(("source completed".to_string(), began.elapsed()));
        loop {
            let s = target.qmp.execute("query-status", None).await?;
            if s["status"] != "inmigrate" {
                break;
            }
            if Instant::now() > deadline {
                bail!("the bare target stays in inmigrate");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        target.qmp.execute("cont", None).await?;
        let wall = began.elapsed();
        steps.push(("target cont".to_string(), wall));
        let f = |p: &str| done.pointer(p).and_then(Value::as_f64).unwrap_or(f64::NAN);
        let sample = Sample {
            wall,
            total_ms: f("/total-time"),
            downtime_ms: f("/downtime"),
            setup_ms: f("/setup-time"),
            memory_bytes: f("/ram/transferred"),
            cpu_ms: f64::NAN,
            steps,
        };
        if let Some(old) = self.current.replace(target) {
            old.kill().await;
        }
        Ok(sample)
    }
}

// ---- the dirtying guest -------------------------------------------------------------

/// Starts the loop that rewrites `/tmp/x` and returns its pid in the guest.
async fn start_dirtying(console: &mut Console, mib: u64) -> Result<u32> {
    let line = console
        .run_until(
            &format!(
                "(while :; do dd if=/dev/urandom of=/tmp/x bs=1M count={mib} conv=notrunc 2>/dev/null; done) >/dev/null 2>&1 & echo dirty-pid-$!"
            ),
            "dirty-pid-",
            |rest| rest.starts_with(|c: char| c.is_ascii_digit()),
            Duration::from_secs(30),
        )
        .await?;
    line.trim_start_matches("dirty-pid-")
        .trim()
        .parse()
        .context("the dirtying loop's pid")
}

async fn stop_dirtying(console: &mut Console, pid: u32) -> Result<()> {
    console
        .run(
            &format!("kill {pid}; echo stopped-{pid}"),
            &format!("stopped-{pid}"),
            Duration::from_secs(15),
        )
        .await?;
    Ok(())
}

/// Fills `/tmp/x` once; returns how fast the guest wrote it.
async fn fill(console: &mut Console, mib: u64) -> Result<f64> {
    let started = Instant::now();
    console
        .run(
            &format!("dd if=/dev/urandom of=/tmp/x bs=1M count={mib} 2>/dev/null; echo filled-$?"),
            "filled-0",
            Duration::from_secs(300),
        )
        .await?;
    Ok(mib as f64 / started.elapsed().as_secs_f64())
}

// ---- the rounds ---------------------------------------------------------------------

#[derive(Default)]
struct Results {
    vp_tls: Kind,
    vp_plain: Kind,
    bare: Kind,
}

struct Context1 {
    registry: String,
    cluster: Cluster,
    watch: Watch,
    bare: Bare,
    timeout: Duration,
    settle: Duration,
    dirty: Option<DirtyLoad>,
    count: usize,
}

struct DirtyLoad {
    mib: u64,
    warmup: Duration,
}

impl Context1 {
    async fn vp(&mut self, label: &str, tls: bool, results: &mut Results) -> Result<()> {
        let dirty = match &self.dirty {
            Some(d) => {
                let mut console = self.cluster.console().await?;
                let pid = start_dirtying(&mut console, d.mib).await?;
                console.close().await;
                tokio::time::sleep(d.warmup).await;
                Some(pid)
            }
            None => None,
        };
        let target_logs: Vec<(PathBuf, usize)> = [NODE_A, NODE_B]
            .iter()
            .map(|n| {
                let log = self.cluster.vmi_dir(n).join("run/serial.log");
                let len = file_len(&log);
                (log, len)
            })
            .collect();
        let mut attempt = 1;
        let run = loop {
            let name = if attempt == 1 {
                label.to_string()
            } else {
                format!("{label}-again{attempt}")
            };
            match migrate_vp(&mut self.cluster, &mut self.watch, &name, self.timeout).await {
                Ok(run) => break run,
                Err(e) => match e.downcast_ref::<MigrationFailed>() {
                    Some(f) if attempt < 3 => {
                        eprintln!("  FAILED: {f}; the guest stays where it was, trying again");
                        let kind = if tls {
                            &mut results.vp_tls
                        } else {
                            &mut results.vp_plain
                        };
                        kind.failed.push(f.0.clone());
                        self.cluster.wait_settled(self.timeout).await?;
                        tokio::time::sleep(self.settle).await;
                        attempt += 1;
                    }
                    _ => return Err(e),
                },
            }
        };
        let (log, from) = target_logs
            .into_iter()
            .find(|(l, _)| *l == self.cluster.vmi_dir(&run.to).join("run/serial.log"))
            .context("no console log for the target")?;
        let mut crash = None;
        if let Some(pid) = dirty {
            let stopped = async {
                let mut console = self.cluster.console().await?;
                stop_dirtying(&mut console, pid).await?;
                console.close().await;
                anyhow::Ok(())
            };
            if let Err(e) = stopped.await {
                crash = Some(format!("{e:#}"));
            }
        }
        if let Some(line) = oops(&log, from) {
            crash = Some(line);
        }
        self.bare.auto_converge = run.auto_converge;
        let s = &run.sample;
        eprintln!(
            "  {label:<22} {} → {}  wall {:>6.0} ms  QEMU total {:>5.0} ms  downtime {:>3.0} ms  {:>6.1} MiB  TLS {}, auto-converge {}",
            run.from,
            run.to,
            ms(s.wall),
            s.total_ms,
            s.downtime_ms,
            s.memory_bytes / 1048576.0,
            if run.tls { "on" } else { "off" },
            if run.auto_converge { "on" } else { "off" }
        );
        if run.tls != tls {
            eprintln!(
                "  (asked for TLS {}, the migration ran with it {}: counted as it ran)",
                if tls { "on" } else { "off" },
                if run.tls { "on" } else { "off" }
            );
        }
        let kind = if run.tls {
            &mut results.vp_tls
        } else {
            &mut results.vp_plain
        };
        kind.samples.push(run.sample);
        if let Some(why) = crash {
            kind.crashed += 1;
            eprintln!(
                "  the guest did not survive {label} on {}: {}; starting it afresh",
                run.to,
                shorten(&why)
            );
            self.reboot_vp().await?;
            if let Some(d) = &self.dirty {
                let mib = d.mib;
                let mut console = self.cluster.console().await?;
                fill(&mut console, mib).await?;
                console.close().await;
            }
        }
        tokio::time::sleep(self.settle).await;
        Ok(())
    }

    async fn bare(&mut self, label: &str, results: &mut Results) -> Result<()> {
        let dirty = match &self.dirty {
            Some(d) => {
                let mut console = Console::unix(&self.bare.console_socket()?).await?;
                console.send("\r").await?;
                let pid = start_dirtying(&mut console, d.mib).await?;
                console.close().await;
                tokio::time::sleep(d.warmup).await;
                Some(pid)
            }
            None => None,
        };
        let s = self.bare.migrate(self.timeout).await?;
        let mut crash = None;
        if let Some(pid) = dirty {
            let stopped = async {
                let mut console = Console::unix(&self.bare.console_socket()?).await?;
                console.send("\r").await?;
                stop_dirtying(&mut console, pid).await?;
                console.close().await;
                anyhow::Ok(())
            };
            if let Err(e) = stopped.await {
                crash = Some(format!("{e:#}"));
            }
        }
        if let Some(line) = oops(&self.bare.console_log()?, 0) {
            crash = Some(line);
        }
        eprintln!(
            "  {label:<22} bare → bare  wall {:>6.0} ms  QEMU total {:>5.0} ms  downtime {:>3.0} ms  {:>6.1} MiB",
            ms(s.wall),
            s.total_ms,
            s.downtime_ms,
            s.memory_bytes / 1048576.0
        );
        results.bare.samples.push(s);
        if let Some(why) = crash {
            results.bare.crashed += 1;
            eprintln!(
                "  the bare guest did not survive {label}: {}; starting it afresh",
                shorten(&why)
            );
            self.reboot_bare().await?;
            if let Some(d) = &self.dirty {
                let mib = d.mib;
                let mut console = Console::unix(&self.bare.console_socket()?).await?;
                console.send("\r").await?;
                fill(&mut console, mib).await?;
                console.close().await;
            }
        }
        tokio::time::sleep(self.settle).await;
        Ok(())
    }

    async fn rounds(&mut self, part: &str, tls: bool, results: &mut Results) -> Result<()> {
        let setting = if tls { "tls" } else { "plain" };
        for i in 1..=self.count {
            self.vp(&format!("{part}-{setting}-{i}"), tls, results)
                .await?;
            self.bare(&format!("{part}-bare-{i}"), results).await?;
        }
        Ok(())
    }

    /// A fresh guest on both sides.
    async fn reboot(&mut self) -> Result<()> {
        self.reboot_vp().await?;
        self.reboot_bare().await
    }

    /// The bare guest booted again.
    async fn reboot_bare(&mut self) -> Result<()> {
        if let Some(qemu) = self.bare.current.take() {
            qemu.kill().await;
        }
        self.bare.boot(self.timeout).await?;
        Ok(())
    }

    /// The VM deleted and created again.
    async fn reboot_vp(&mut self) -> Result<()> {
        // A guest that panicked may have been restarted already: whatever runs goes.
        let pid = self.cluster.placement().await.ok().map(|(_, pid)| pid);
        let vm = format!("{}/{VM}", kubevirt(NS, "virtualmachines"));
        let vmi = format!("{}/{VM}", kubevirt(NS, "virtualmachineinstances"));
        self.cluster.api.delete(&vm).await?;
        if let Some(pid) = pid {
            wait_gone(pid, Duration::from_secs(60)).await?;
        }
        let deadline = Instant::now() + self.timeout;
        while self.cluster.api.get(&vmi).await?.is_some()
            || self.cluster.api.get(&vm).await?.is_some()
        {
            if Instant::now() > deadline {
                bail!(
                    "the VM and its VMI are still there {:?} after the delete",
                    self.timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for pid in qemus_under(&self.cluster.data)
            .into_iter()
            .chain(qemus_under(&self.cluster.agent_data))
        {
            wait_gone(pid, Duration::from_secs(60)).await?;
        }
        boot_vm(&mut self.cluster, &self.registry, self.timeout).await?;
        Ok(())
    }
}

fn print_part(title: &str, guest: &str, r: &Results) {
    println!("{title}");
    println!(
        "  {:<34} {:>18} {:>18} {:>14} {:>10} {:>11} {:>18} {:>14} {:>8} {:>7}",
        "ms: median (min–max)",
        "wall",
        "QEMU total",
        "downtime",
        "setup",
        "MiB sent",
        "wall − QEMU total",
        "ctl-plane CPU",
        "crashed",
        "failed"
    );
    for (label, kind) in [
        ("virtplane, TLS (default)", &r.vp_tls),
        ("virtplane, TLS off", &r.vp_plain),
        ("bare QEMU → QEMU, no TLS", &r.bare),
    ] {
        println!(
            "  {:<34} {:>18} {:>18} {:>14} {:>10} {:>11.1} {:>18} {:>14} {:>8} {:>7}",
            format!("{label} ({})", kind.samples.len()),
            spread(&kind.wall()),
            spread(&kind.col(|s| s.total_ms)),
            spread(&kind.col(|s| s.downtime_ms)),
            spread(&kind.col(|s| s.setup_ms)),
            median(&kind.col(|s| s.memory_bytes)) / 1048576.0,
            spread(&kind.col(|s| ms(s.wall) - s.total_ms)),
            spread(&kind.col(|s| s.cpu_ms)),
            kind.crashed,
            kind.failed.len(),
        );
    }
    for f in r.vp_plain.failed.iter().chain(&r.vp_tls.failed) {
        println!("  failed (run again): {f}");
    }
    let overhead = r.vp_plain.med_wall() - r.bare.med_wall();
    println!(
        "  orchestration overhead (median wall, virtplane TLS off − bare): {overhead:.0} ms; target ≤ {TARGET_OVERHEAD_MS:.0} ms: {}",
        verdict(overhead <= TARGET_OVERHEAD_MS)
    );
    println!(
        "  with TLS: virtplane TLS − bare {:.0} ms; TLS cost (virtplane TLS − TLS off): {:.0} ms wall, {:.0} ms QEMU total",
        r.vp_tls.med_wall() - r.bare.med_wall(),
        r.vp_tls.med_wall() - r.vp_plain.med_wall(),
        r.vp_tls.med_total() - r.vp_plain.med_total(),
    );
    let worst = r.vp_tls.med_downtime().max(r.vp_plain.med_downtime());
    println!(
        "  downtime (median): virtplane TLS {:.0} ms, TLS off {:.0} ms, bare {:.0} ms; target ≤ {TARGET_DOWNTIME_MS:.0} ms: {}",
        r.vp_tls.med_downtime(),
        r.vp_plain.med_downtime(),
        r.bare.med_downtime(),
        verdict(worst <= TARGET_DOWNTIME_MS)
    );
    record_part(guest, r);
    for (label, kind) in [
        ("virtplane TLS off, POST →", &r.vp_plain),
        ("virtplane TLS, POST →", &r.vp_tls),
        ("bare, target spawn →", &r.bare),
    ] {
        let steps: Vec<String> = kind
            .steps()
            .into_iter()
            .map(|(n, t)| format!("{n} {t:.0}"))
            .collect();
        println!("  {label} {}", steps.join(", "));
    }
}

/// The report's figures of one part: the move (VMIM created → Succeeded) and the
/// downtime, each beside bare QEMU moving the same guest, with the issue's targets
/// (within 50 ms of bare QEMU's wall time, and 5 ms of its downtime).
fn record_part(guest: &str, r: &Results) {
    if r.bare.samples.is_empty() {
        return;
    }
    let bare_wall = r.bare.med_wall();
    let bare_downtime = r.bare.med_downtime();
    for (label, kind) in [("TLS off", &r.vp_plain), ("TLS", &r.vp_tls)] {
        if kind.samples.is_empty() {
            continue;
        }
        bench_report::lower(
            "migration",
            &format!("{guest}, {label}: migration wall time (median)"),
            kind.med_wall(),
            "ms",
        )
        .beside("bare QEMU", bare_wall)
        .target(bare_wall + 50.0)
        .record();
        bench_report::lower(
            "migration",
            &format!("{guest}, {label}: downtime (median)"),
            kind.med_downtime(),
            "ms",
        )
        .beside("bare QEMU", bare_downtime)
        .target(bare_downtime + 5.0)
        .record();
    }
}

fn shorten(text: &str) -> String {
    let mut t: String = text.chars().take(160).collect();
    if t.len() < text.len() {
        t.push('…');
    }
    t
}

fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "MISSED"
    }
}

async fn qemu_parts(dir: &Path, parts: &[u32], count: usize, timeout: Duration) -> Result<()> {
    let registry = registry()?;
    let settle = Duration::from_millis(knob("BENCH_SETTLE_MS", 500));
    let mib = knob::<u64>("BENCH_DIRTY_MIB", 64).max(1);
    let warmup = Duration::from_millis(knob("BENCH_DIRTY_WARMUP_MS", 1000));
    let mut cluster = Cluster::start(dir, &registry, timeout).await?;
    create_kubevirt(&cluster.api, json!({"disableTLS": false})).await?;
    let boot = boot_vm(&mut cluster, &registry, timeout).await?;
    let (node, pid) = cluster.placement().await?;
    let agent_argv = cmdline(pid);
    let accel = agent_argv
        .iter()
        .find_map(|a| a.split(',').find_map(|p| p.strip_prefix("accel=")))
        .unwrap_or("?")
        .to_string();
    println!(
        "  VM {VM} (256 MiB, kernelBoot {registry}/guest-kernel:latest) booted on {node} in {:.1} s; accel {accel}",
        boot.as_secs_f64()
    );
    println!("  agent's QEMU command line: {}", agent_argv.join(" "));
    let mut bare = Bare::new(&agent_argv, &cluster.vmi_dir(&node), &dir.join("bare"))?;
    let bare_boot = bare.boot(timeout).await?;
    println!(
        "  bare guest booted from that command line in {:.1} s",
        bare_boot.as_secs_f64()
    );
    let watch = Watch::start(&cluster.api, &kubevirt(NS, VMIMS)).await?;
    let mut ctx = Context1 {
        registry: registry.clone(),
        cluster,
        watch,
        bare,
        timeout,
        settle,
        dirty: None,
        count,
    };
    let mut idle = Results::default();
    let mut dirty = Results::default();
    let mut rates = Vec::new();
    // TLS off first, then on, each on fresh guests: a QEMU that received its guest with
    // TLS cannot send it on without (see the top).
    for tls in [false, true] {
        if tls {
            ctx.reboot().await?;
            ctx.dirty = None;
        }
        ctx.cluster.set_tls(tls).await?;
        // Warm-up: a round trip (the first pulls the kernel image onto the other node).
        let mut warm = Results::default();
        ctx.vp(&format!("warmup-{tls}-1"), tls, &mut warm).await?;
        ctx.vp(&format!("warmup-{tls}-2"), tls, &mut warm).await?;
        ctx.bare(&format!("warmup-{tls}-bare"), &mut warm).await?;
        let kind = if tls { &warm.vp_tls } else { &warm.vp_plain };
        let walls: Vec<String> = kind.wall().iter().map(|w| format!("{w:.0}")).collect();
        println!(
            "  warm-up, TLS {} (not counted): virtplane {} ms, bare {} ms",
            if tls { "on" } else { "off" },
            walls.join(" and "),
            warm.bare
                .wall()
                .first()
                .map_or("—".into(), |w| format!("{w:.0}")),
        );
        if parts.contains(&1) {
            ctx.rounds("idle", tls, &mut idle).await?;
        }
        if parts.contains(&2) {
            let mut console = ctx.cluster.console().await?;
            rates.push(fill(&mut console, mib).await?);
            console.close().await;
            let mut console = Console::unix(&ctx.bare.console_socket()?).await?;
            console.send("\r").await?;
            rates.push(fill(&mut console, mib).await?);
            console.close().await;
            ctx.dirty = Some(DirtyLoad { mib, warmup });
            ctx.rounds("dirty", tls, &mut dirty).await?;
        }
    }
    if parts.contains(&1) {
        print_part(
            &format!("1. idle guest, 256 MiB: {count} virtplane migrations with each TLS setting (back and forth between {NODE_A} and {NODE_B}), {} bare", 2 * count),
            "idle guest",
            &idle,
        );
    }
    if parts.contains(&2) {
        let rates: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        print_part(
            &format!(
                "2. guest dirtying memory: {mib} MiB of tmpfs rewritten from /dev/urandom in a loop \
                 (the guests filled it at {} MiB/s), started {} ms before each migration",
                rates.join(", "),
                warmup.as_millis()
            ),
            "dirtying guest",
            &dirty,
        );
    }

    // Delete the VM and wait until its QEMU is gone (the sweep catches what is left).
    let (_, pid) = ctx.cluster.placement().await?;
    ctx.cluster
        .api
        .delete(&format!("{}/{VM}", kubevirt(NS, "virtualmachines")))
        .await?;
    let _ = wait_gone(pid, Duration::from_secs(30)).await;
    if let Some(qemu) = ctx.bare.current.take() {
        qemu.kill().await;
    }
    Ok(())
}

// ---- part 3: drain on simulated nodes --------------------------------------------------

const DRAIN_NS: &str = "drain";
const SIM_NODES: usize = 4;
const DRAINED: &str = "sim-node-0";

fn sim_vm(name: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}},
                "spec": {
                    "evictionStrategy": "LiveMigrate",
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
}

struct Drain {
    all_moved: Duration,
    first_migration: Option<Duration>,
    all_succeeded: Option<Duration>,
    max_at_once: usize,
    mean_at_once: f64,
    /// Drain start → each VMI running elsewhere, sorted.
    per_vmi: Vec<Duration>,
    /// Each migration from past Pending to final, sorted.
    per_migration: Vec<Duration>,
    migrations: usize,
    failed: usize,
}

async fn drain(
    dir: &Path,
    vms: usize,
    limits: Option<u64>,
    delay: &str,
    timeout: Duration,
) -> Result<Drain> {
    let nodes = SIM_NODES.to_string();
    let mut server = Virtplane::start(Launch {
        data: dir.join("data"),
        log: dir.join("server.log"),
        args: &[
            "--no-node",
            "--hypervisor",
            "sim",
            "--sim-nodes",
            &nodes,
            "--sim-boot-delay",
            "0ms",
            "--sim-migration-delay",
            delay,
        ],
        env: &[("RUST_LOG", log_filter())],
        nodes: SIM_NODES,
        within: Duration::from_secs(60),
    })
    .await?;
    let api = Api::new(&server)?;
    server.create_namespace(DRAIN_NS).await?;
    if let Some(n) = limits {
        create_kubevirt(
            &api,
            json!({"parallelMigrationsPerCluster": n, "parallelOutboundMigrationsPerNode": n}),
        )
        .await?;
    }
    let others: Vec<String> = (1..SIM_NODES).map(|i| format!("sim-node-{i}")).collect();
    for node in &others {
        api.merge(
            &format!("/api/v1/nodes/{node}"),
            &json!({"spec": {"unschedulable": true}}),
        )
        .await?;
    }
    let names: Vec<String> = (0..vms).map(|i| format!("vm-{i:03}")).collect();
    let path = kubevirt(DRAIN_NS, "virtualmachines");
    let (api_ref, path_ref) = (&api, &path);
    let results: Vec<Result<Value>> = futures::stream::iter(names.iter())
        .map(|n| {
            let body = sim_vm(n);
            async move { api_ref.post(path_ref, &body).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        r?;
    }
    // All Running (and live-migratable) on the one schedulable node.
    let deadline = Instant::now() + timeout;
    loop {
        server.proc.check_alive()?;
        let list = api
            .get(&kubevirt(DRAIN_NS, "virtualmachineinstances"))
            .await?
            .context("no VMI list")?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let ready = items
            .iter()
            .filter(|v| {
                str_at(v, "/status/phase") == "Running"
                    && str_at(v, "/status/nodeName") == DRAINED
                    && condition_true(v, "LiveMigratable")
            })
            .count();
        if ready == vms {
            break;
        }
        if let Some(v) = items.iter().find(|v| {
            let node = str_at(v, "/status/nodeName");
            !node.is_empty() && node != DRAINED
        }) {
            bail!(
                "VMI {} went to {} while the others were cordoned",
                str_at(v, "/metadata/name"),
                str_at(v, "/status/nodeName")
            );
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {vms} VMIs Running and LiveMigratable on {DRAINED} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for node in &others {
        api.merge(
            &format!("/api/v1/nodes/{node}"),
            &json!({"spec": {"unschedulable": null}}),
        )
        .await?;
    }
    let mut vmi_watch = Watch::start(&api, &kubevirt(DRAIN_NS, "virtualmachineinstances")).await?;
    let mut vmim_watch = Watch::start(&api, &kubevirt(DRAIN_NS, VMIMS)).await?;
    // What `virtplane node drain` does: cordon with the drain taint.
    let started = Instant::now();
    api.merge(
        &format!("/api/v1/nodes/{DRAINED}"),
        &json!({"spec": {"unschedulable": true,
                         "taints": [{"key": "kubevirt.io/drain", "effect": "NoSchedule"}]}}),
    )
    .await?;
    let deadline = started + timeout;
    let mut moved: HashMap<String, Duration> = HashMap::new();
    let mut phases: HashMap<String, String> = HashMap::new();
    let mut active_since = started;
    let mut active = 0usize;
    let mut max_at_once = 0usize;
    // ∫ active dt, for the mean over the drain.
    let mut area = 0.0f64;
    let mut first_migration = None;
    // When each migration got past Pending, and how long it then took to be final.
    let mut began: HashMap<String, Instant> = HashMap::new();
    let mut took: HashMap<String, Duration> = HashMap::new();
    let mut all_succeeded = None;
    let is_active = |p: &str| {
        matches!(
            p,
            "Scheduling" | "Scheduled" | "PreparingTarget" | "TargetReady" | "Running"
        )
    };
    // Until every VMI runs elsewhere and every migration is final.
    while moved.len() < vms || active > 0 {
        server.proc.check_alive()?;
        let next = tokio::select! {
            e = vmi_watch.next(deadline) => e?.map(|e| (true, e)),
            e = vmim_watch.next(deadline) => e?.map(|e| (false, e)),
        };
        let Some((is_vmi, (at, event))) = next else {
            bail!(
                "after {timeout:?} only {} of {vms} VMIs run elsewhere ({} migrations seen)",
                moved.len(),
                phases.len()
            );
        };
        let object = &event["object"];
        let name = str_at(object, "/metadata/name").to_string();
        if is_vmi {
            let node = str_at(object, "/status/nodeName");
            if str_at(object, "/status/phase") == "Running" && !node.is_empty() && node != DRAINED {
                moved
                    .entry(name)
                    .or_insert(at.saturating_duration_since(started));
            }
        } else {
            let phase = str_at(object, "/status/phase").to_string();
            let was = phases
                .insert(name.clone(), phase.clone())
                .unwrap_or_default();
            if is_active(&phase) && !is_active(&was) {
                began.entry(name.clone()).or_insert(at);
            }
            if (phase == "Succeeded" || phase == "Failed") && !took.contains_key(&name) {
                if let Some(b) = began.get(&name) {
                    took.insert(name, at.saturating_duration_since(*b));
                }
            }
            let delta = is_active(&phase) as isize - is_active(&was) as isize;
            if delta != 0 {
                area += active as f64 * at.saturating_duration_since(active_since).as_secs_f64();
                active_since = at;
                active = (active as isize + delta).max(0) as usize;
                max_at_once = max_at_once.max(active);
                first_migration.get_or_insert(at.saturating_duration_since(started));
            }
            if phases.len() >= vms && phases.values().all(|p| p == "Succeeded") {
                all_succeeded.get_or_insert(at.saturating_duration_since(started));
            }
        }
    }
    let mut per_migration: Vec<Duration> = took.values().copied().collect();
    per_migration.sort();
    let mut per_vmi: Vec<Duration> = moved.values().copied().collect();
    per_vmi.sort();
    let all_moved = per_vmi.last().copied().unwrap_or_default();
    let failed = phases.values().filter(|p| *p == "Failed").count();
    Ok(Drain {
        all_moved,
        first_migration,
        all_succeeded,
        max_at_once,
        mean_at_once: area / all_moved.as_secs_f64().max(1e-9),
        per_vmi,
        per_migration,
        migrations: phases.len(),
        failed,
    })
}

async fn drain_part(dir: &Path) -> Result<()> {
    let vms = size::<usize>("BENCH_DRAIN_VMS", 100, 6).max(1);
    let delay = std::env::var("BENCH_SIM_MIGRATION_DELAY").unwrap_or_else(|_| "300ms".into());
    let timeout = Duration::from_secs(knob("BENCH_DRAIN_TIMEOUT_S", 300));
    let mut rows = BTreeMap::new();
    for (i, (label, limits)) in [
        (
            "KubeVirt's default limits (5 per cluster, 2 outbound per node)",
            None,
        ),
        ("both limits raised to 100", Some(100)),
    ]
    .into_iter()
    .enumerate()
    {
        let sub = dir.join(format!("drain-{i}"));
        std::fs::create_dir_all(&sub)?;
        let d = drain(&sub, vms, limits, &delay, timeout)
            .await
            .with_context(|| format!("drain with {label}"))?;
        rows.insert(i, (label, d));
    }
    println!(
        "3. drain of {vms} VMs (evictionStrategy LiveMigrate) off {DRAINED} onto 3 other simulated nodes, each migration {delay}"
    );
    println!(
        "  {:<62} {:>10} {:>10} {:>12} {:>12} {:>11} {:>6} {:>14} {:>14}",
        "",
        "all moved",
        "p50 VMI",
        "first start",
        "all final",
        "max at once",
        "mean",
        "p50 each",
        "VMIMs (failed)"
    );
    let opt = |d: Option<Duration>| d.map_or("—".into(), |d| format!("{:.0} ms", ms(d)));
    println!("  (p50 VMI: drain start → a VMI runs elsewhere; p50 each: one migration from past Pending to final; at once: past Pending and not final)");
    for (label, d) in rows.values() {
        println!(
            "  {:<62} {:>7.0} ms {:>7.0} ms {:>12} {:>12} {:>11} {:>6.1} {:>11.0} ms {:>10} ({})",
            label,
            ms(d.all_moved),
            ms(percentile(&d.per_vmi, 0.5)),
            opt(d.first_migration),
            opt(d.all_succeeded),
            d.max_at_once,
            d.mean_at_once,
            ms(percentile(&d.per_migration, 0.5)),
            d.migrations,
            d.failed
        );
    }
    Ok(())
}

async fn run() -> Result<()> {
    let count = size::<usize>("BENCH_MIGRATIONS", 5, 1).max(1);
    let timeout = Duration::from_secs(knob("BENCH_TIMEOUT_S", 180));
    let parts: Vec<u32> = std::env::var("BENCH_PARTS")
        .unwrap_or_else(|_| "1,2,3".into())
        .split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect();
    let tmp = tempfile::tempdir()?;
    let dir = if std::env::var_os("BENCH_KEEP").is_some() {
        tmp.keep()
    } else {
        tmp.path().to_path_buf()
    };
    let _sweep = QemuSweep(dir.clone());
    println!(
        "migration: parts {parts:?}, {count} migrations per kind; binary {}; host {} cores, load average {}",
        virtplane_binary().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    if parts.contains(&1) || parts.contains(&2) {
        let sub = dir.join("qemu");
        std::fs::create_dir_all(&sub)?;
        qemu_parts(&sub, &parts, count, timeout).await?;
    }
    if parts.contains(&3) {
        drain_part(&dir).await?;
    }
    if std::env::var_os("BENCH_KEEP").is_some() {
        println!("  kept {}", dir.display());
    }
    Ok(())
}
