//! Boot latency and node agent memory with real QEMU guests (TCG here, KVM where usable).
//!
//! 1. Create-VM → first guest serial line, p50 and p90 of 10 VMs, beside a bare
//!    `qemu-system-x86_64` start of the same guest in the same run. Target: p50 overhead
//!    (virtplane − bare) at most 100 ms.
//! 2. Node agent memory per running VM, outside QEMU: the server's RSS (VmRSS; the local
//!    node agent runs inside it, QEMU does not) with 0 and with 5 running VMs, and as an
//!    upper bound from the server's start, before its first VM. Target: at most 10 MiB per
//!    VM.
//! 3. The node's metrics while those VMs run: 10 scrapes through the API server
//!    (`/api/v1/nodes/NODE/proxy/metrics`) beside `GET /healthz` on the same client, and
//!    the agent's own time to read its guests, in all and per VMI (the
//!    `virtplane_*_metrics_read_seconds` it reports). Targets (issue 34, for 100 VMIs):
//!    a scrape ≤ 50 ms, ≤ 1 ms per VMI.
//!
//! `cargo build --release --bin virtplane && cargo bench -p virtplane --bench qemu_boot`
//!
//! The release server runs with its local QEMU node (`--hypervisor qemu`) and the test
//! registry of `scripts/test-registry` (which builds the test guests if needed). Each VM
//! (`runStrategy: Always`, `kernelBoot.container` of `guest-kernel:latest` with
//! `console=ttyS0`, 256 MiB, no interfaces, `terminationGracePeriodSeconds: 0`) is
//! created over HTTPS; the clock starts when its POST is sent and stops when the VMI's
//! `serial.log` holds a complete line, polled every 5 ms. One VM runs at a time and is
//! deleted (and its QEMU gone) before the next, so runs do not compete for the CPUs.
//!
//! The bare runs use the command line the agent gave QEMU, read from
//! `/proc/<pid>/cmdline` of a warm-up VM, with its runtime paths (sockets, serial log,
//! pidfile) moved to a temp dir; kernel and initramfs are the same cached files. The agent
//! starts QEMU paused (`-S`), connects to QMP, negotiates and sends `cont`; the reference
//! bare run does exactly that (so the overhead is what the control plane and the agent
//! add around the same QEMU start-up), and a second bare run without `-S` shows what
//! the paused start itself costs. The three kinds of runs alternate, so load from
//! elsewhere on the machine hits them alike. A warm-up VM first pulls the image into
//! the cache; it is reported but not counted.
//!
//! Knobs (environment): `VIRTPLANE_BIN` (default: the binary cargo built for this bench,
//! i.e. the release one), `BENCH_REGISTRY` (HOST:PORT; default: `scripts/test-registry`),
//! `BENCH_VMS` (10), `BENCH_MEMORY_VMS` (5), `BENCH_POLL_MS` (5), `BENCH_TIMEOUT_S` (120
//! per boot), `BENCH_KERNEL_ARGS` (`console=ttyS0`; adding `earlycon=uart8250,io,0x3f8`
//! moves the first line to the start of the kernel, which cuts the TCG noise), `BENCH_KEEP=1`
//! (keep the temp dir with the server log), `RUST_LOG` (the server's log filter; default
//! `warn`).
//!
//! Under TCG on a loaded 2-core host a bare boot to the first line varies by several
//! hundred ms, so the p50 difference is noisy; the table therefore also splits each side at
//! the moment QEMU writes its pidfile: before it, what the control plane and the agent take
//! to get QEMU started; after it, whether anything slows the running guest. Server CPU
//! time comes from `/proc/PID/stat` in 10 ms ticks.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use support::stats::{ms, percentile};
use support::virtplane::{Launch, Virtplane};
use support::{knob, size, virtplane_binary};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const NAMESPACE: &str = "bench";
const NODE: &str = "bench-node";
const TARGET_OVERHEAD: Duration = Duration::from_millis(100);
const TARGET_MIB_PER_VM: f64 = 10.0;

fn main() -> ExitCode {
    support::main("qemu_boot", run)
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

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.starts_with(" Z"))
    })
}

/// VmRSS of a process, in bytes.
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The server and its data dir.
struct Server {
    virtplane: Virtplane,
    data: PathBuf,
}

impl Server {
    fn check_alive(&mut self) -> Result<()> {
        self.virtplane.proc.check_alive()
    }

    fn vmi_dir(&self, name: &str) -> PathBuf {
        self.data
            .join("node")
            .join(NODE)
            .join("vmi")
            .join(NAMESPACE)
            .join(name)
    }

    fn cpu_time(&self) -> Option<Duration> {
        self.virtplane.proc.cpu_time()
    }

    /// The median of a few RSS samples, 200 ms apart.
    async fn rss(&self) -> Result<u64> {
        let mut samples = Vec::new();
        for _ in 0..5 {
            samples.push(rss(self.virtplane.proc.pid()).context("cannot read the server's VmRSS")?);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        samples.sort();
        Ok(samples[samples.len() / 2])
    }
}

struct Api {
    url: String,
    client: reqwest::Client,
}

impl Api {
    fn vms(&self) -> String {
        format!(
            "{}/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines",
            self.url
        )
    }

    fn vmi(&self, name: &str) -> String {
        format!(
            "{}/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachineinstances/{name}",
            self.url
        )
    }
}

async fn start(dir: &Path, registry: &str) -> Result<(Server, Api)> {
    let data = dir.join("data");
    let virtplane = Virtplane::start(Launch {
        data: data.clone(),
        log: dir.join("virtplane.log"),
        args: &[
            "--hypervisor",
            "qemu",
            "--node-name",
            NODE,
            "--insecure-registry",
            registry,
        ],
        env: &[(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )],
        // The local node.
        nodes: 1,
        // The first start on a host boots a kernel to probe KVM: allow for it.
        within: Duration::from_secs(90),
    })
    .await?;
    virtplane.create_namespace(NAMESPACE).await?;
    let api = Api {
        url: virtplane.url.clone(),
        client: virtplane.client(Some(Duration::from_secs(60)))?,
    };
    Ok((Server { virtplane, data }, api))
}

/// A VM that boots the test guest's kernel and initramfs, with no disks, and with no
/// interface or (`pod`) KubeVirt's default one: masquerade on the pod network, in a Pod.
fn vm(name: &str, registry: &str, pod: bool) -> String {
    let kernel_args = std::env::var("BENCH_KERNEL_ARGS").unwrap_or_else(|_| "console=ttyS0".into());
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {"app": "qemu-boot"}},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name, "app": "qemu-boot"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "domain": {
                        "memory": {"guest": "256Mi"},
                        "devices": {"autoattachPodInterface": pod},
                        "firmware": {"kernelBoot": {
                            "kernelArgs": kernel_args,
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
    .to_string()
}

/// When `pidfile` and then a complete line in `serial` appeared, polled every `poll`.
/// `alive` is checked on the way, so a failed start ends the wait early.
async fn wait_boot(
    pidfile: &Path,
    serial: &Path,
    poll: Duration,
    timeout: Duration,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<(Instant, Instant)> {
    let deadline = Instant::now() + timeout;
    let mut pid_at = None;
    loop {
        let now = Instant::now();
        if pid_at.is_none() && pidfile.exists() {
            pid_at = Some(now);
        }
        if let Ok(bytes) = std::fs::read(serial) {
            if bytes.contains(&b'\n') {
                return Ok((pid_at.unwrap_or(now), now));
            }
        }
        if now > deadline {
            bail!("no serial line in {} after {timeout:?}", serial.display());
        }
        alive()?;
        tokio::time::sleep(poll).await;
    }
}

/// Scrapes of the node's metrics while the memory VMs run.
const SCRAPES: usize = 10;

/// A node's metrics scraped through the API server (`/api/v1/nodes/NODE/proxy/metrics`),
/// beside `GET /healthz` over the same client in the same loop: what any round trip costs.
struct Scrapes {
    scrape: Vec<Duration>,
    health: Vec<Duration>,
    /// The agent's own time to read all guests (`virtplane_node_metrics_read_seconds`).
    read_node: Vec<Duration>,
    /// Its time per guest (`virtplane_vmi_metrics_read_seconds`), every guest of every scrape.
    read_vmi: Vec<Duration>,
}

impl Scrapes {
    async fn measure(api: &Api, count: usize) -> Result<Scrapes> {
        let mut scrapes = Scrapes {
            scrape: Vec::new(),
            health: Vec::new(),
            read_node: Vec::new(),
            read_vmi: Vec::new(),
        };
        let metrics = format!("{}/api/v1/nodes/{NODE}/proxy/metrics", api.url);
        let health = format!("{}/healthz", api.url);
        let seconds = |line: &str| -> Option<Duration> {
            Duration::try_from_secs_f64(line.rsplit(' ').next()?.parse().ok()?).ok()
        };
        for _ in 0..count {
            let began = Instant::now();
            api.client.get(&health).send().await?.error_for_status()?;
            scrapes.health.push(began.elapsed());
            let began = Instant::now();
            let text = api
                .client
                .get(&metrics)
                .send()
                .await?
                .error_for_status()?
                .text()
                .await?;
            scrapes.scrape.push(began.elapsed());
            for line in text.lines() {
                if line.starts_with("virtplane_node_metrics_read_seconds ") {
                    scrapes.read_node.extend(seconds(line));
                } else if line.starts_with("virtplane_vmi_metrics_read_seconds{") {
                    scrapes.read_vmi.extend(seconds(line));
                }
            }
        }
        if scrapes.read_vmi.is_empty() {
            bail!("the node's metrics had no virtplane_vmi_metrics_read_seconds of its VMs");
        }
        for list in [
            &mut scrapes.scrape,
            &mut scrapes.health,
            &mut scrapes.read_node,
            &mut scrapes.read_vmi,
        ] {
            list.sort();
        }
        Ok(scrapes)
    }

    fn print(&self, vms: usize) {
        let p50 = |list: &[Duration]| match list.is_empty() {
            true => f64::NAN,
            false => ms(percentile(list, 0.5)),
        };
        println!(
            "  node metrics with {vms} running VMs, {} scrapes: p50 {:.1} ms through the API server \
             (GET /healthz on the same client {:.1} ms); the agent read its guests in {:.1} ms, \
             {:.2} ms per VMI (p50 of {} readings); targets: <= 50 ms for 100 VMIs, <= 1 ms per VMI",
            self.scrape.len(),
            p50(&self.scrape),
            p50(&self.health),
            p50(&self.read_node),
            p50(&self.read_vmi),
            self.read_vmi.len()
        );
        bench_report::lower(
            "qemu_boot",
            "node metrics scrape p50",
            p50(&self.scrape),
            "ms",
        )
        .beside("GET /healthz", p50(&self.health))
        .record();
        bench_report::lower(
            "qemu_boot",
            "metrics read per VMI p50",
            p50(&self.read_vmi),
            "ms",
        )
        .target(1.0)
        .record();
    }
}

/// From the start (POST or spawn) to QEMU's pidfile and to the first serial line.
#[derive(Clone, Copy)]
struct Times {
    pidfile: Duration,
    line: Duration,
}

#[derive(Default)]
struct Samples {
    pidfile: Vec<Duration>,
    line: Vec<Duration>,
}

impl Samples {
    fn push(&mut self, t: Times) {
        self.pidfile.push(t.pidfile);
        self.line.push(t.line);
    }

    fn after_pidfile(&self) -> Vec<Duration> {
        self.line
            .iter()
            .zip(&self.pidfile)
            .map(|(l, p)| l.saturating_sub(*p))
            .collect()
    }
}

/// One virtplane VM and the command line the agent gave its QEMU.
struct VmRun {
    times: Times,
    argv: Vec<String>,
}

async fn create_vm(api: &Api, name: &str, registry: &str, pod: bool) -> Result<Instant> {
    let sent = Instant::now();
    let r = api
        .client
        .post(api.vms())
        .header("content-type", "application/json")
        .body(vm(name, registry, pod))
        .send()
        .await?;
    let status = r.status();
    if status.as_u16() != 201 {
        bail!("create {name}: {status} {}", r.text().await?);
    }
    Ok(sent)
}

/// The VMI's status, for error messages.
async fn vmi_status(api: &Api, name: &str) -> String {
    match api.client.get(api.vmi(name)).send().await {
        Ok(r) => r
            .json::<Value>()
            .await
            .map(|v| v["status"].to_string())
            .unwrap_or_default(),
        Err(e) => e.to_string(),
    }
}

async fn boot_vm(
    server: &mut Server,
    api: &Api,
    name: &str,
    registry: &str,
    pod: bool,
    poll: Duration,
    timeout: Duration,
) -> Result<VmRun> {
    let dir = server.vmi_dir(name);
    let sent = create_vm(api, name, registry, pod).await?;
    let waited = wait_boot(
        &dir.join("run/qemu.pid"),
        &dir.join("run/serial.log"),
        poll,
        timeout,
        || server.check_alive(),
    )
    .await;
    let (pid_at, line_at) = match waited {
        Ok(times) => times,
        Err(e) => bail!(
            "VM {name}: {e:#}; VMI status {}",
            vmi_status(api, name).await
        ),
    };
    let pid: u32 = std::fs::read_to_string(dir.join("run/qemu.pid"))?
        .trim()
        .parse()
        .context("qemu.pid")?;
    let argv = std::fs::read(format!("/proc/{pid}/cmdline"))?
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Ok(VmRun {
        times: Times {
            pidfile: pid_at.saturating_duration_since(sent),
            line: line_at.saturating_duration_since(sent),
        },
        argv,
    })
}

/// Deletes the VMs and waits until their VMIs and QEMU processes are gone.
async fn delete_vms(server: &mut Server, api: &Api, names: &[String]) -> Result<()> {
    let mut pids = Vec::new();
    for name in names {
        if let Some(pid) = std::fs::read_to_string(server.vmi_dir(name).join("run/qemu.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
        {
            pids.push(pid);
        }
        let r = api
            .client
            .delete(format!("{}/{name}", api.vms()))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("delete {name}: {}", r.status());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in names {
        loop {
            server.check_alive()?;
            let r = api.client.get(api.vmi(name)).send().await?;
            if r.status().as_u16() == 404 && !server.vmi_dir(name).exists() {
                break;
            }
            if Instant::now() > deadline {
                bail!("VMI {name} still there 60 s after its VM was deleted");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for pid in pids {
        while alive(pid) {
            if Instant::now() > deadline {
                bail!("QEMU {pid} still runs 60 s after its VM was deleted");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// The agent's QEMU command line, its runtime paths moved from `from` to `to`.
fn bare_argv(argv: &[String], from: &Path, to: &Path, paused: bool) -> Vec<String> {
    let from = from.display().to_string();
    let to = to.display().to_string();
    argv.iter()
        .skip(1)
        .filter(|a| paused || a.as_str() != "-S")
        .map(|a| a.replace(&from, &to))
        .collect()
}

/// The value of `-qmp unix:PATH,...` in an argv.
fn qmp_socket(argv: &[String]) -> Option<PathBuf> {
    let i = argv.iter().position(|a| a == "-qmp")?;
    let spec = argv.get(i + 1)?.strip_prefix("unix:")?;
    Some(PathBuf::from(spec.split(',').next()?))
}

/// What the agent does after spawning a paused QEMU: connect to QMP (retrying while the
/// socket appears), leave negotiation mode, `cont`.
async fn qmp_cont(socket: &Path, deadline: Instant) -> Result<()> {
    let stream = loop {
        match tokio::net::UnixStream::connect(socket).await {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => bail!("QMP {}: {e}", socket.display()),
            Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    };
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    qmp_reply(&mut lines, "greeting").await?;
    write
        .write_all(b"{\"execute\":\"qmp_capabilities\"}\n")
        .await?;
    qmp_reply(&mut lines, "qmp_capabilities").await?;
    write.write_all(b"{\"execute\":\"cont\"}\n").await?;
    qmp_reply(&mut lines, "cont").await?;
    Ok(())
}

/// Reads QMP messages up to the greeting or a reply, skipping events.
async fn qmp_reply(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    what: &str,
) -> Result<()> {
    loop {
        let line = lines
            .next_line()
            .await?
            .with_context(|| format!("QMP closed before {what}"))?;
        let message: Value = serde_json::from_str(&line)?;
        if message.get("return").is_some() || message.get("QMP").is_some() {
            return Ok(());
        }
        if message.get("error").is_some() {
            bail!("QMP {what}: {message}");
        }
    }
}

/// A bare QEMU start of the agent's command line: spawn → pidfile, spawn → first serial
/// line. With `paused` the `-S` stays and the guest is started over QMP as the agent does.
async fn boot_bare(
    agent_argv: &[String],
    agent_dir: &Path,
    run_dir: &Path,
    paused: bool,
    poll: Duration,
    timeout: Duration,
) -> Result<Times> {
    std::fs::create_dir_all(run_dir.join("run"))?;
    let argv = bare_argv(agent_argv, agent_dir, run_dir, paused);
    let paused = paused && argv.iter().any(|a| a == "-S");
    let qmp = qmp_socket(&argv).context("the agent's QEMU has no -qmp unix: socket")?;
    let _ = std::fs::remove_file(&qmp);
    let log = std::fs::File::create(run_dir.join("qemu.log"))?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(&agent_argv[0])
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", agent_argv[0]))?;
    let deadline = started + timeout;
    // The QMP dance runs beside the polling, so the pidfile is seen when it appears.
    let cont_error: Arc<Mutex<Option<String>>> = Arc::default();
    let cont = paused.then(|| {
        let cont_error = cont_error.clone();
        tokio::spawn(async move {
            if let Err(e) = qmp_cont(&qmp, deadline).await {
                *cont_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{e:#}"));
            }
        })
    });
    let mut exited = false;
    let result = wait_boot(
        &run_dir.join("run/qemu.pid"),
        &run_dir.join("run/serial.log"),
        poll,
        timeout,
        || {
            if let Some(e) = cont_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
                bail!("starting the guest over QMP: {e}");
            }
            exited = exited || matches!(child.try_wait(), Ok(Some(_)));
            if exited {
                bail!("bare QEMU exited before its first serial line");
            }
            Ok(())
        },
    )
    .await;
    if let Some(cont) = cont {
        cont.abort();
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    let (pid_at, line_at) = result.with_context(|| {
        let log = std::fs::read_to_string(run_dir.join("qemu.log")).unwrap_or_default();
        format!("bare QEMU in {}: {}", run_dir.display(), log.trim())
    })?;
    let _ = std::fs::remove_dir_all(run_dir);
    Ok(Times {
        pidfile: pid_at.saturating_duration_since(started),
        line: line_at.saturating_duration_since(started),
    })
}

/// The start figures of the report, each beside bare QEMU's (-S + QMP cont), with the
/// issue's targets: p50 within 10 ms, p90 within 20 ms.
fn record_starts(vp: &Samples, with_pod: &Samples, bare: &Samples) {
    let at = |values: &[Duration], p: f64| {
        let mut sorted = values.to_vec();
        sorted.sort();
        ms(percentile(&sorted, p))
    };
    let start = |name: &str, runs: &Samples, p: f64, slack: f64| {
        let reference = at(&bare.line, p);
        bench_report::lower("qemu_boot", name, at(&runs.line, p), "ms")
            .beside("bare QEMU", reference)
            .target(reference + slack)
            .record();
    };
    start("POST VM → first serial line p50", vp, 0.5, 10.0);
    start("POST VM → first serial line p90", vp, 0.9, 20.0);
    start(
        "in a Pod: POST VM → first serial line p50",
        with_pod,
        0.5,
        10.0,
    );
    bench_report::lower(
        "qemu_boot",
        "POST VM → qemu.pid p50",
        at(&vp.pidfile, 0.5),
        "ms",
    )
    .beside("bare QEMU spawn → qemu.pid", at(&bare.pidfile, 0.5))
    .record();
}

fn row(label: &str, values: &[Duration]) -> (Duration, String) {
    let mut sorted = values.to_vec();
    sorted.sort();
    let p50 = percentile(&sorted, 0.50);
    let line = format!(
        "  {label:<44} {:>8.0} {:>8.0} {:>8.0} {:>8.0}",
        ms(p50),
        ms(percentile(&sorted, 0.90)),
        ms(percentile(&sorted, 0.0)),
        ms(percentile(&sorted, 1.0)),
    );
    (p50, line)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

async fn run() -> Result<()> {
    let count = size::<u64>("BENCH_VMS", 10, 2).max(1) as usize;
    let memory_vms = size::<u64>("BENCH_MEMORY_VMS", 5, 1).max(1) as usize;
    let poll = Duration::from_millis(knob::<u64>("BENCH_POLL_MS", 5).max(1));
    let timeout = Duration::from_secs(knob::<u64>("BENCH_TIMEOUT_S", 120));
    let registry = registry()?;
    let tmp = tempfile::tempdir()?;
    let dir = if std::env::var_os("BENCH_KEEP").is_some() {
        tmp.keep()
    } else {
        tmp.path().to_path_buf()
    };
    println!(
        "qemu_boot: {count} VMs one at a time (kernelBoot guest-kernel:latest from {registry}, \
         256 MiB, kernel args {:?}), poll {} ms; binary {}",
        std::env::var("BENCH_KERNEL_ARGS").unwrap_or_else(|_| "console=ttyS0".into()),
        poll.as_millis(),
        virtplane_binary().display()
    );
    let (mut server, api) = start(&dir, &registry).await?;
    let bare_dir = dir.join("bare");
    // The server before its first VM: the floor for the memory upper bound.
    let rss_start = server.rss().await?;

    // Warm-up: pulls the image into the cache and shows the agent's QEMU command line.
    let warm = boot_vm(&mut server, &api, "warmup", &registry, false, poll, timeout).await?;
    let agent_argv = warm.argv.clone();
    let agent_dir = server.vmi_dir("warmup");
    delete_vms(&mut server, &api, &["warmup".to_string()]).await?;
    let accel = agent_argv
        .iter()
        .find_map(|a| a.split(',').find_map(|p| p.strip_prefix("accel=")))
        .unwrap_or("?")
        .to_string();
    println!(
        "  warm-up VM (cold image cache): POST → first serial line {:.0} ms; accel {accel}",
        ms(warm.times.line)
    );
    println!("  agent's QEMU command line: {}", agent_argv.join(" "));

    let mut vp = Samples::default();
    let mut with_pod = Samples::default();
    let mut bare = Samples::default();
    let mut free = Samples::default();
    let mut server_cpu = Vec::new();
    for i in 1..=count {
        let name = format!("vm-{i:02}");
        let cpu_before = server.cpu_time();
        let run = boot_vm(&mut server, &api, &name, &registry, false, poll, timeout).await?;
        if let (Some(before), Some(after)) = (cpu_before, server.cpu_time()) {
            server_cpu.push(after.saturating_sub(before));
        }
        let same = run.argv.len() == agent_argv.len();
        delete_vms(&mut server, &api, std::slice::from_ref(&name)).await?;
        let pod_name = format!("pod-{i:02}");
        let in_pod = boot_vm(&mut server, &api, &pod_name, &registry, true, poll, timeout).await?;
        delete_vms(&mut server, &api, std::slice::from_ref(&pod_name)).await?;
        let b = boot_bare(
            &agent_argv,
            &agent_dir,
            &bare_dir.join(format!("paused-{i}")),
            true,
            poll,
            timeout,
        )
        .await?;
        let f = boot_bare(
            &agent_argv,
            &agent_dir,
            &bare_dir.join(format!("running-{i}")),
            false,
            poll,
            timeout,
        )
        .await?;
        eprintln!(
            "  run {i:>2}: virtplane {:>5.0} ms (qemu.pid at {:>4.0})   in a Pod {:>5.0} ms (qemu.pid at {:>4.0})   bare -S + cont {:>5.0} ms (qemu.pid at {:>4.0})   bare no -S {:>5.0} ms{}",
            ms(run.times.line),
            ms(run.times.pidfile),
            ms(in_pod.times.line),
            ms(in_pod.times.pidfile),
            ms(b.line),
            ms(b.pidfile),
            ms(f.line),
            if same { "" } else { "   (QEMU argv differs in length from the warm-up's)" }
        );
        vp.push(run.times);
        with_pod.push(in_pod.times);
        bare.push(b);
        free.push(f);
    }

    // Memory: 0, then `memory_vms` running VMs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss0 = server.rss().await?;
    let names: Vec<String> = (1..=memory_vms).map(|i| format!("mem-{i:02}")).collect();
    for name in &names {
        create_vm(&api, name, &registry, false).await?;
    }
    for name in &names {
        let dir = server.vmi_dir(name);
        let waited = wait_boot(
            &dir.join("run/qemu.pid"),
            &dir.join("run/serial.log"),
            poll,
            timeout * memory_vms as u32,
            || server.check_alive(),
        )
        .await;
        if let Err(e) = waited {
            bail!(
                "VM {name}: {e:#}; VMI status {}",
                vmi_status(&api, name).await
            );
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_n = server.rss().await?;
    let qemu_rss: u64 = names
        .iter()
        .filter_map(|n| std::fs::read_to_string(server.vmi_dir(n).join("run/qemu.pid")).ok())
        .filter_map(|p| p.trim().parse().ok())
        .filter_map(rss)
        .sum();
    let scrapes = Scrapes::measure(&api, SCRAPES).await?;
    delete_vms(&mut server, &api, &names).await?;

    println!(
        "  {:<44} {:>8} {:>8} {:>8} {:>8}",
        format!("ms, {count} runs each"),
        "p50",
        "p90",
        "min",
        "max"
    );
    let (vp50, vp_row) = row("virtplane: POST VM → first serial line", &vp.line);
    let (bare50, bare_row) = row("bare, -S + QMP cont: spawn → first line", &bare.line);
    let (pod50, pod_row) = row("virtplane, in a Pod: POST VM → first line", &with_pod.line);
    println!("{vp_row}");
    println!("{pod_row}");
    println!("{bare_row}");
    println!("{}", row("bare, no -S: spawn → first line", &free.line).1);
    println!(
        "{}",
        row("virtplane: POST VM → qemu.pid written", &vp.pidfile).1
    );
    println!(
        "{}",
        row("virtplane, in a Pod: POST VM → qemu.pid", &with_pod.pidfile).1
    );
    println!(
        "{}",
        row("bare, -S + QMP cont: spawn → qemu.pid", &bare.pidfile).1
    );
    println!(
        "{}",
        row("virtplane: qemu.pid → first line", &vp.after_pidfile()).1
    );
    println!(
        "{}",
        row(
            "bare, -S + QMP cont: qemu.pid → first line",
            &bare.after_pidfile()
        )
        .1
    );
    println!(
        "{}",
        row("server CPU time, POST VM → first line", &server_cpu).1
    );
    let overhead = vp50.as_secs_f64() - bare50.as_secs_f64();
    record_starts(&vp, &with_pod, &bare);
    println!(
        "  overhead (p50 virtplane − p50 bare -S + cont): {:.0} ms; target ≤ {} ms: {}",
        overhead * 1000.0,
        TARGET_OVERHEAD.as_millis(),
        if overhead <= TARGET_OVERHEAD.as_secs_f64() {
            "MET"
        } else {
            "MISSED"
        }
    );
    println!(
        "  the Pod (p50 in a Pod − p50 without an interface): {:.0} ms to the first line, of which \
         {:.0} ms before QEMU runs; issue 32 allows +20 ms",
        (pod50.as_secs_f64() - vp50.as_secs_f64()) * 1000.0,
        {
            let mut a = with_pod.pidfile.clone();
            let mut b = vp.pidfile.clone();
            a.sort();
            b.sort();
            ms(percentile(&a, 0.5)) - ms(percentile(&b, 0.5))
        }
    );
    let p50 = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        ms(percentile(&v, 0.50))
    };
    let mut sorted_bare = bare.line.clone();
    sorted_bare.sort();
    println!(
        "  of which before QEMU runs (p50 POST → qemu.pid − p50 spawn → qemu.pid): {:.0} ms; \
         after (p50 qemu.pid → first line, virtplane − bare): {:.0} ms",
        p50(&vp.pidfile) - p50(&bare.pidfile),
        p50(&vp.after_pidfile()) - p50(&bare.after_pidfile()),
    );
    println!(
        "  (the bare boots alone spread {:.0} ms from min to p90: under TCG on a loaded host the \
         p50 difference carries that noise)",
        ms(percentile(&sorted_bare, 0.90).saturating_sub(percentile(&sorted_bare, 0.0)))
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "  host: {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let per_vm = (mib(rss_n) - mib(rss0)) / memory_vms as f64;
    // The allocator keeps freed memory and hands it back in steps of several MiB, so the
    // difference above can even come out negative; measured from the server's start
    // instead, every one-off (image pull buffers, caches, pools) counts against the VMs.
    let bound = (mib(rss_n) - mib(rss_start)) / memory_vms as f64;
    println!(
        "  server RSS (API server + local node agent): {:.1} MiB at start, {:.1} MiB with 0 VMs \
         (after the runs above), {:.1} MiB with {memory_vms} running",
        mib(rss_start),
        mib(rss0),
        mib(rss_n)
    );
    println!(
        "  node agent memory per running VM, QEMU excluded: {per_vm:.2} MiB ((RSS({memory_vms}) − RSS(0)) / {memory_vms}), \
         at most {bound:.2} MiB (from the start); target ≤ {TARGET_MIB_PER_VM} MiB: {}",
        if per_vm.max(bound) <= TARGET_MIB_PER_VM {
            "MET"
        } else if per_vm <= TARGET_MIB_PER_VM {
            "MET (the upper bound misses)"
        } else {
            "MISSED"
        }
    );
    bench_report::lower(
        "qemu_boot",
        "node agent memory per running VM",
        per_vm,
        "MiB",
    )
    .target(TARGET_MIB_PER_VM)
    .record();
    println!(
        "  (QEMU's own RSS, not counted above: {:.0} MiB for {memory_vms} VMs, {:.0} MiB each)",
        mib(qemu_rss),
        mib(qemu_rss) / memory_vms as f64
    );
    scrapes.print(memory_vms);
    if std::env::var_os("BENCH_KEEP").is_some() {
        println!(
            "  kept {} (server log {})",
            dir.display(),
            server.virtplane.proc.log.display()
        );
    }
    Ok(())
}
