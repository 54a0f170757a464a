//! Helpers for the tier-B black-box tests (`qemu_*.rs`): real QEMU (software emulation
//! is fine) running the test guests of `scripts/build-test-guests`, served from the
//! loopback registry of `scripts/test-registry`, behind a `virtplane server` with its
//! local QEMU node. A guest is observed the way a person would: its serial log, its
//! console websocket, its forwarded ports and its QEMU process.
//!
//! Without `qemu-system-x86_64` or the guests/registry a test prints `SKIPPED: ...` and
//! passes; with `VIRTPLANE_REQUIRE_QEMU=1` it fails instead (for CI, which installs them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::support::{self, condition, start_once, uid, Api, Reply, TestServer};

/// The name of the server's local QEMU node.
pub const NODE: &str = "qemu-node";
pub const NS: &str = "default";
/// How long a guest may take to boot under software emulation on a busy 2-core machine.
pub const BOOT: Duration = Duration::from_secs(150);
/// How long the control plane may take for a state change that needs no boot.
pub const SHORT: Duration = Duration::from_secs(60);

/// The guests and the registry holding them.
pub struct Guests {
    /// `127.0.0.1:PORT` of the registry (plain HTTP).
    pub registry: String,
    /// `target/test-guests`.
    pub dir: PathBuf,
}

impl Guests {
    /// The containerDisk image (`/disk/disk.qcow2`, BIOS-bootable).
    pub fn disk_image(&self) -> String {
        format!("{}/guest:latest", self.registry)
    }
    /// The kernelBoot image (`/boot/vmlinux`, `/boot/initramfs.cpio.gz`).
    pub fn kernel_image(&self) -> String {
        format!("{}/guest-kernel:latest", self.registry)
    }
}

static GUESTS: OnceLock<Result<Guests, String>> = OnceLock::new();

pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The QEMU the server looks for (the same places).
pub fn qemu_binary() -> Option<PathBuf> {
    [
        "/usr/bin/qemu-system-x86_64",
        "/usr/local/bin/qemu-system-x86_64",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

fn tail(bytes: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Builds the guests and starts (or reuses) the registry, once per test binary.
fn prepare() -> Result<Guests, String> {
    if qemu_binary().is_none() {
        return Err(
            "qemu-system-x86_64 is not installed (Debian package qemu-system-x86; \
                    `scripts/install-deps test` installs it)"
                .into(),
        );
    }
    if !on_path("qemu-img") {
        return Err("qemu-img is not installed (Debian package qemu-utils)".into());
    }
    let root = repo_root();
    let script = root.join("scripts/test-registry");
    // Test binaries of parallel `cargo test` runs share the registry: start it under a lock.
    let lock = root.join("target/test-registry.lock");
    let mut command = if Path::new("/usr/bin/flock").exists() {
        let mut c = Command::new("/usr/bin/flock");
        c.arg(&lock).arg(&script);
        c
    } else {
        Command::new(&script)
    };
    let started = Instant::now();
    let out = command
        .current_dir(&root)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/test-registry (which runs scripts/build-test-guests) failed:\n{}",
            tail(&out.stderr, 15)
        ));
    }
    let registry = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if registry.is_empty() {
        return Err("scripts/test-registry printed no address".into());
    }
    eprintln!(
        "qemu tests: guests ready, registry {registry} ({:.1}s)",
        started.elapsed().as_secs_f64()
    );
    Ok(Guests {
        registry,
        dir: root.join("target/test-guests"),
    })
}

/// The guests and registry, or `None` after saying loudly why the test is skipped.
pub fn guests() -> Option<&'static Guests> {
    match GUESTS.get_or_init(prepare) {
        Ok(g) => Some(g),
        Err(why) => {
            if std::env::var_os("VIRTPLANE_REQUIRE_QEMU").is_some_and(|v| v != "0") {
                panic!("tier-B QEMU tests cannot run (VIRTPLANE_REQUIRE_QEMU is set): {why}");
            }
            // Straight to the process's stderr: the test harness would swallow eprintln!
            // of a passing test.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: tier-B QEMU test: {why}");
            None
        }
    }
}

/// The HTTPS test registry (`scripts/test-registry --tls`): its address and the file of
/// the throwaway CA that signed its certificate.
pub struct TlsRegistry {
    pub address: String,
    pub ca_file: PathBuf,
}

/// Starts (or reuses) the HTTPS registry holding the same guests; call after `guests()`.
pub fn tls_registry() -> TlsRegistry {
    let root = repo_root();
    let script = root.join("scripts/test-registry");
    let run = |args: &[&str]| {
        let out = Command::new("/usr/bin/flock")
            .arg(root.join("target/test-registry-tls.lock"))
            .arg(&script)
            .args(args)
            .current_dir(&root)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "scripts/test-registry {args:?} failed:\n{}",
            tail(&out.stderr, 15)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let address = run(&["--tls"]);
    let ca_file = PathBuf::from(run(&["--tls", "--ca"]));
    TlsRegistry { address, ca_file }
}

// ---- processes ------------------------------------------------------------------

pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
}

pub fn kill9(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The JSON values of a QEMU argv's `flag` arguments (`-device`, `-blockdev`, `-netdev`),
/// which virtplane writes as JSON.
pub fn json_args(argv: &[String], flag: &str) -> Vec<Value> {
    argv.windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| serde_json::from_str(&w[1]).unwrap_or_else(|e| panic!("{flag} {}: {e}", w[1])))
        .collect()
}

/// Whether a QEMU argv has a NIC of `model` on the default (pod) network.
pub fn has_nic(argv: &[String], model: &str) -> bool {
    json_args(argv, "-device")
        .iter()
        .any(|d| d["driver"] == model && d["netdev"] == "net-default")
}

/// A line of /proc/PID/status (`Uid`, `Seccomp`), without its label.
pub fn proc_status(pid: u32, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

/// Every QEMU process in /proc (zombies too) whose `-pidfile` argument satisfies `pidfile`.
fn qemus_by_pidfile(pidfile: impl Fn(&str) -> bool) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let argv = cmdline(pid);
        if argv.first().is_some_and(|a| a.contains("qemu-system"))
            && argv
                .windows(2)
                .any(|w| w[0] == "-pidfile" && pidfile(&w[1]))
        {
            found.push(pid);
        }
    }
    found
}

/// Every live QEMU whose `-pidfile` is `pidfile`: one VMI's QEMU processes.
pub fn qemus_with_pidfile(pidfile: &Path) -> Vec<u32> {
    let wanted = pidfile.display().to_string();
    qemus_by_pidfile(|p| p == wanted)
        .into_iter()
        .filter(|pid| alive(*pid))
        .collect()
}

/// Kills every QEMU started under `data_dir` (statics and killed servers leave them).
pub fn kill_qemus(data_dir: &Path) {
    let prefix = data_dir.display().to_string();
    for pid in qemus_by_pidfile(|p| p.starts_with(&prefix)) {
        kill9(pid);
    }
}

// ---- servers --------------------------------------------------------------------

/// A server with a local QEMU node; dropping it kills the server and its QEMUs.
pub struct Cluster {
    pub server: TestServer,
    /// The server's `--host-disk-dir`.
    pub host_disks: tempfile::TempDir,
}

impl Cluster {
    pub async fn start(guests: &Guests, extra: &[&str]) -> Cluster {
        Self::start_with_env(guests, extra, &[]).await
    }

    /// A server whose process also gets the environment variables `env`.
    pub async fn start_with_env(guests: &Guests, extra: &[&str], env: &[(&str, &str)]) -> Cluster {
        let host_disks = tempfile::tempdir().expect("host disk dir");
        let host_dir = host_disks.path().display().to_string();
        let mut args = vec![
            "--node-name",
            NODE,
            "--insecure-registry",
            &guests.registry,
            "--host-disk-dir",
            &host_dir,
        ];
        args.extend(extra);
        // QEMU's user-mode network unless a test asks for Pods: parallel servers on one
        // host would otherwise each put the same cluster CIDR on bridges of their own.
        if !extra.contains(&"--pod-network") {
            args.extend(["--pod-network", "user"]);
        }
        let server = TestServer::start_with_env(&args, env).await;
        let cluster = Cluster { server, host_disks };
        cluster.env().wait_node_ready().await;
        cluster
    }

    pub fn env(&self) -> Env {
        Env::new(
            &self.server.url,
            self.server.data_dir(),
            self.host_disks.path(),
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.server.kill9();
        kill_qemus(self.server.data_dir());
    }
}

/// A `virtplane node` process joining a server with its own data dir; dropping it
/// kills the agent and its QEMUs.
pub struct NodeAgent {
    pub name: String,
    dir: tempfile::TempDir,
    child: Option<std::process::Child>,
    /// How it was started, for `restart`.
    server_dir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Where its log goes, when not to the test's stderr.
    log: Option<PathBuf>,
    /// The network namespace it runs in (a host of its own), if not this one.
    pub netns: Option<String>,
}

impl NodeAgent {
    /// Joins the server in `server_dir` as node `name`, with extra `args`
    /// (`--hypervisor`, `--insecure-registry`...).
    pub fn start(server_dir: &Path, name: &str, args: &[&str]) -> NodeAgent {
        Self::start_logged(server_dir, name, args, &[], false)
    }

    /// [`NodeAgent::start`] with the environment variables `env`, and with its log in
    /// `log_file()` when `logged`.
    pub fn start_logged(
        server_dir: &Path,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
        logged: bool,
    ) -> NodeAgent {
        let dir = tempfile::tempdir().expect("agent data dir");
        let log = logged.then(|| dir.path().join("agent.log"));
        let mut agent = NodeAgent {
            name: name.to_string(),
            dir,
            child: None,
            server_dir: server_dir.to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log,
            netns: None,
        };
        agent.spawn();
        agent
    }

    /// [`NodeAgent::start`] inside the network namespace `netns`, standing in for a host
    /// of its own.
    pub fn start_in(netns: &str, server_dir: &Path, name: &str, args: &[&str]) -> NodeAgent {
        let mut agent = Self::start_logged(server_dir, name, &[], &[], false);
        agent.kill9();
        agent.netns = Some(netns.to_string());
        agent.args = args.iter().map(|a| a.to_string()).collect();
        agent.spawn();
        agent
    }

    fn spawn(&mut self) {
        let stderr = match &self.log {
            Some(path) => std::process::Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("agent log file"),
            ),
            None => std::process::Stdio::inherit(),
        };
        let mut command = match &self.netns {
            // Only the network namespace: `ip netns exec` would also give the agent a
            // mount namespace of its own, and its Pods' namespaces (bind mounts under
            // /run/netns) would vanish with it, as they never do on a real host.
            Some(netns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{netns}"))
                    .arg(support::binary());
                c
            }
            None => Command::new(support::binary()),
        };
        let child = command
            .arg("node")
            .arg("--kubeconfig")
            .arg(self.server_dir.join("node-join.kubeconfig"))
            .args(["--name", &self.name, "--data-dir"])
            .arg(self.dir.path())
            .args(&self.args)
            // As for servers: user-mode networking unless the test asks for Pods.
            .args(if self.args.iter().any(|a| a == "--pod-network") {
                &[][..]
            } else {
                &["--pod-network", "user"][..]
            })
            .env("RUST_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn virtplane node");
        self.child = Some(child);
    }

    /// What the agent logged so far (started with `start_logged(.., true)`).
    pub fn log_file(&self) -> String {
        self.log
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default()
    }

    /// Starts the agent again (after `kill9`) on the same data dir, as a restart does.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGKILL: the agent is gone at once (its QEMUs stay until drop).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        self.kill9();
        kill_qemus(self.dir.path());
    }
}

static SHARED: OnceLock<Mutex<Cluster>> = OnceLock::new();

extern "C" fn stop_shared() {
    if let Some(cluster) = SHARED.get() {
        if let Ok(mut cluster) = cluster.lock() {
            // Drop is never run for statics.
            cluster.server.kill9();
            kill_qemus(cluster.server.data_dir());
            let _ = std::fs::remove_dir_all(cluster.server.data_dir());
            let _ = std::fs::remove_dir_all(cluster.host_disks.path());
        }
    }
}

/// The server shared by the tests of one binary, started on first use.
pub async fn shared(guests: &'static Guests) -> Env {
    start_once(&SHARED, move || Cluster::start(guests, &[]), stop_shared).env()
}

// ---- one test's view of a server ----------------------------------------------------

/// A handle on a server for one test (HTTP clients belong to the test's runtime).
pub struct Env {
    pub api: Api,
    pub url: String,
    pub data_dir: PathBuf,
    pub host_disk_dir: PathBuf,
    /// The node the test's VMIs run on, and the data dir of its agent.
    pub node: String,
    pub node_data_dir: PathBuf,
}

/// A VMI phase or "" when there is none.
pub fn phase(vmi: &Value) -> &str {
    vmi["status"]["phase"].as_str().unwrap_or("")
}

impl Env {
    pub fn new(url: &str, data_dir: &Path, host_disk_dir: &Path) -> Env {
        Env {
            api: Api::connect(url, data_dir),
            url: url.to_string(),
            data_dir: data_dir.to_path_buf(),
            host_disk_dir: host_disk_dir.to_path_buf(),
            node: NODE.to_string(),
            node_data_dir: data_dir.to_path_buf(),
        }
    }

    /// The same server, with VMIs on the node of a separate agent.
    pub fn on_node(self, agent: &NodeAgent) -> Env {
        Env {
            node: agent.name.clone(),
            node_data_dir: agent.data_dir().to_path_buf(),
            ..self
        }
    }

    /// The server's address, as its URL names it.
    pub fn host(&self) -> String {
        let authority = self.url.split("://").nth(1).unwrap_or(&self.url);
        authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host)
            .to_string()
    }

    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port in url")
    }

    pub async fn wait_node_ready(&self) {
        let deadline = Instant::now() + SHORT;
        loop {
            let r = self.api.get(&format!("/api/v1/nodes/{}", self.node)).await;
            if r.status == StatusCode::OK
                && condition(&r.body, "Ready").is_some_and(|c| c["status"] == "True")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {} never became Ready: {}",
                self.node,
                r.text
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // ---- objects

    pub async fn create_vm(&self, vm: &Value) -> Value {
        self.api
            .create(&support::coll(NS, "virtualmachines"), vm)
            .await
    }

    pub async fn post_vm(&self, vm: &Value) -> Reply {
        self.api
            .post(&support::coll(NS, "virtualmachines"), vm)
            .await
    }

    pub async fn vm(&self, name: &str) -> Value {
        let r = self
            .api
            .get(&support::item(NS, "virtualmachines", name))
            .await;
        assert_eq!(r.status, StatusCode::OK, "get VM {name}: {}", r.text);
        r.body
    }

    pub async fn vmi(&self, name: &str) -> Option<Value> {
        let r = self
            .api
            .get(&support::item(NS, "virtualmachineinstances", name))
            .await;
        match r.status {
            StatusCode::OK => Some(r.body),
            StatusCode::NOT_FOUND => None,
            other => panic!("get VMI {name}: {other} {}", r.text),
        }
    }

    /// Deletes the VM (and so its VMI); does not wait.
    pub async fn delete_vm(&self, name: &str) {
        let r = self
            .api
            .delete(&support::item(NS, "virtualmachines", name), None)
            .await;
        assert!(
            r.status.is_success() || r.status == StatusCode::NOT_FOUND,
            "delete VM {name}: {}",
            r.text
        );
    }

    /// PUT a subresource of a VM (`start`, `stop`, `restart`) or VMI (`pause`...).
    pub async fn verb(&self, plural: &str, name: &str, verb: &str) -> Reply {
        self.api
            .put(
                &format!(
                    "/apis/subresources.kubevirt.io/v1/namespaces/{NS}/{plural}/{name}/{verb}"
                ),
                &json!({}),
            )
            .await
    }

    pub async fn vm_verb(&self, name: &str, verb: &str) {
        let r = self.verb("virtualmachines", name, verb).await;
        assert_eq!(
            r.status,
            StatusCode::ACCEPTED,
            "{verb} VM {name}: {}",
            r.text
        );
    }

    /// VMI verbs (`pause`, `unpause`) answer 200, VM verbs 202 (virt-api).
    pub async fn vmi_verb(&self, name: &str, verb: &str) {
        let r = self.verb("virtualmachineinstances", name, verb).await;
        assert_eq!(r.status, StatusCode::OK, "{verb} VMI {name}: {}", r.text);
    }

    // ---- waiting (polling with deadlines)

    /// Polls the VMI until `done` holds for it (`None`: it does not exist).
    pub async fn wait_vmi(
        &self,
        name: &str,
        within: Duration,
        what: &str,
        done: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let vmi = self.vmi(name).await;
            if done(vmi.as_ref()) {
                return vmi;
            }
            if Instant::now() >= deadline {
                panic!(
                    "VMI {name}: {what} did not happen within {within:?}; last: {}\n{}",
                    vmi.map_or("none".to_string(), |v| v["status"].to_string()),
                    self.diagnostics(name)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub async fn wait_vm(
        &self,
        name: &str,
        within: Duration,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let vm = self.vm(name).await;
            if done(&vm) {
                return vm;
            }
            if Instant::now() >= deadline {
                panic!(
                    "VM {name}: {what} did not happen within {within:?}; last: {}\n{}",
                    vm["status"],
                    self.diagnostics(name)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits for the VMI to be Running (failing at once if it fails instead).
    pub async fn wait_running(&self, name: &str) -> Value {
        self.wait_running_not(name, "").await
    }

    /// Waits for a Running VMI whose uid is not `old_uid`.
    pub async fn wait_running_not(&self, name: &str, old_uid: &str) -> Value {
        let vmi = self
            .wait_vmi(name, BOOT, "phase Running", |v| {
                let Some(v) = v else { return false };
                if uid(v) == old_uid {
                    return false;
                }
                assert!(
                    phase(v) != "Failed" && phase(v) != "Succeeded",
                    "VMI {name} ended ({}) instead of running: {}\n{}",
                    phase(v),
                    v["status"],
                    self.diagnostics(name)
                );
                phase(v) == "Running"
            })
            .await;
        vmi.expect("running VMI")
    }

    pub async fn wait_vmi_gone(&self, name: &str, within: Duration) {
        self.wait_vmi(name, within, "deletion", |v| v.is_none())
            .await;
    }

    // ---- the guest

    pub fn vmi_dir(&self, name: &str) -> PathBuf {
        self.node_data_dir
            .join("node")
            .join(&self.node)
            .join("vmi")
            .join(NS)
            .join(name)
    }

    pub fn serial(&self, name: &str) -> String {
        std::fs::read(self.vmi_dir(name).join("run/serial.log"))
            .map(|b| String::from_utf8_lossy(&b).to_string())
            .unwrap_or_default()
    }

    /// The `virtplane-guest: ` protocol lines of the guest so far.
    pub fn guest_lines(&self, name: &str) -> Vec<String> {
        self.serial(name)
            .lines()
            .filter_map(|l| {
                l.find("virtplane-guest: ")
                    .map(|i| l[i..].trim_end_matches('\r').to_string())
            })
            .collect()
    }

    /// Waits until the guest printed `line` (a whole `virtplane-guest: ...` line);
    /// returns all protocol lines.
    pub async fn wait_guest_line(&self, name: &str, line: &str, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        loop {
            let lines = self.guest_lines(name);
            if lines.iter().any(|l| l == line) {
                return lines;
            }
            if Instant::now() >= deadline {
                panic!(
                    "guest {name} never printed {line:?} within {within:?}; it printed {lines:#?}\n{}",
                    self.diagnostics(name)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits for the guest's `ready` line.
    pub async fn wait_ready(&self, name: &str) -> Vec<String> {
        self.wait_guest_line(name, "virtplane-guest: ready", BOOT)
            .await
    }

    pub fn pidfile(&self, name: &str) -> PathBuf {
        self.vmi_dir(name).join("run/qemu.pid")
    }

    pub fn qemu_pid(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.pidfile(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The live QEMU processes of VMI `name`.
    pub fn qemus(&self, name: &str) -> Vec<u32> {
        qemus_with_pidfile(&self.pidfile(name))
    }

    /// The argv of the one QEMU of VMI `name`.
    pub fn qemu_argv(&self, name: &str) -> Vec<String> {
        let pids = self.qemus(name);
        assert_eq!(pids.len(), 1, "QEMU processes of {name}: {pids:?}");
        cmdline(pids[0])
    }

    /// What a person debugging a failure wants to see: the VMI dir, QEMU log, serial tail.
    pub fn diagnostics(&self, name: &str) -> String {
        let dir = self.vmi_dir(name);
        let files: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        let qemu_log = std::fs::read(dir.join("qemu.log")).unwrap_or_default();
        let serial = std::fs::read(dir.join("run/serial.log")).unwrap_or_default();
        format!(
            "-- {}: {files:?}\n-- qemu.log: {}\n-- serial.log (tail): {}",
            dir.display(),
            tail(&qemu_log, 10),
            tail(&serial, 15)
        )
    }

    /// Connects to a forwarded port and reads what the guest's responder says.
    pub async fn hello(&self, port: u16, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let last = match hello_once(port).await {
                Ok(text) if !text.is_empty() => return text,
                Ok(_) => "connection closed without a greeting".to_string(),
                Err(e) => e,
            };
            assert!(
                Instant::now() < deadline,
                "no greeting on 127.0.0.1:{port} within {within:?}: {last}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    // ---- consoles

    /// The VMI's serial console websocket, as virtctl opens it.
    pub async fn console(&self, name: &str) -> Result<Console, String> {
        Console::open(self, name, "console").await
    }

    /// Seconds guest `name` has been up, asked on its serial console through this server.
    pub async fn uptime(&self, name: &str) -> u64 {
        let mut console = self.console(name).await.expect("console");
        console.send("\r").await;
        let up = console.uptime().await;
        console.close().await;
        up
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("admin.kubeconfig")
    }
}

async fn hello_once(port: u16) -> Result<String, String> {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut buf = Vec::new();
    match tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await {
        Ok(Ok(_)) => Ok(String::from_utf8_lossy(&buf).to_string()),
        Ok(Err(e)) => Err(format!("read: {e}")),
        Err(_) => Err(format!(
            "no answer within 5s (got {:?})",
            String::from_utf8_lossy(&buf)
        )),
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// A console (or VNC) websocket with the `plain.kubevirt.io` subprotocol.
pub struct Console {
    socket: Socket,
    /// Everything received so far (lossy UTF-8).
    pub seen: String,
    /// The subprotocol the server chose.
    pub protocol: String,
}

fn tls_config(data_dir: &Path) -> rustls::ClientConfig {
    support::install_crypto();
    let kubeconfig = support::admin_kubeconfig(data_dir).expect("admin.kubeconfig");
    let field = |f: &str| support::kubeconfig_field(&kubeconfig, f).expect(f);
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&field("certificate-authority-data")) {
        roots.add(ca.expect("CA PEM")).expect("CA");
    }
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&field("client-certificate-data"))
            .collect::<Result<_, _>>()
            .expect("client cert PEM");
    let key = PrivateKeyDer::from_pem_slice(&field("client-key-data")).expect("client key");
    rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client auth")
}

impl Console {
    pub async fn open(env: &Env, name: &str, which: &str) -> Result<Console, String> {
        Self::open_at(env, "virtualmachineinstances", name, which).await
    }

    /// A websocket subresource `which` of a VM or VMI (`resource`), as virtctl opens it.
    pub async fn open_at(
        env: &Env,
        resource: &str,
        name: &str,
        which: &str,
    ) -> Result<Console, String> {
        let (host, port) = (env.host(), env.port());
        let path =
            format!("/apis/subresources.kubevirt.io/v1/namespaces/{NS}/{resource}/{name}/{which}");
        let mut request = format!("wss://{host}:{port}{path}")
            .into_client_request()
            .expect("request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "plain.kubevirt.io".parse().expect("header"),
        );
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(&env.data_dir)));
        let tls = connector
            .connect(ServerName::try_from(host).expect("server name"), tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (socket, response) = tokio_tungstenite::client_async(request, tls)
            .await
            .map_err(|e| match e {
                tokio_tungstenite::tungstenite::Error::Http(r) => format!(
                    "HTTP {}: {}",
                    r.status(),
                    r.body()
                        .as_deref()
                        .map(String::from_utf8_lossy)
                        .unwrap_or_default()
                ),
                other => other.to_string(),
            })?;
        let protocol = response
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        Ok(Console {
            socket,
            seen: String::new(),
            protocol,
        })
    }

    /// Types `text` (sent as one binary message, as virtctl does).
    pub async fn send(&mut self, text: &str) {
        self.socket
            .send(Message::Binary(text.as_bytes().to_vec().into()))
            .await
            .expect("console send");
    }

    /// Reads until `needle` shows up in what arrived after byte `from` of `seen`;
    /// `false` when `within` passes first or the socket closes.
    pub async fn read_until(&mut self, from: usize, needle: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.seen.get(from..).is_some_and(|s| s.contains(needle)) {
                return true;
            }
            match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Err(_) => return false,
                Ok(None) | Ok(Some(Err(_))) => return false,
                Ok(Some(Ok(Message::Binary(b)))) => {
                    self.seen.push_str(&String::from_utf8_lossy(&b))
                }
                Ok(Some(Ok(Message::Text(t)))) => self.seen.push_str(t.as_str()),
                Ok(Some(Ok(Message::Close(_)))) => return false,
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    /// Runs `command` in the guest shell and waits for a line its output starts with
    /// `expect` (so the echo of the typed command does not count); returns that line.
    pub async fn run(&mut self, command: &str, expect: &str, within: Duration) -> Option<String> {
        let from = self.seen.len();
        self.send(&format!("{command}\r")).await;
        let needle = format!("\n{expect}");
        if !self.read_until(from, &needle, within).await {
            return None;
        }
        // Let the rest of the line arrive.
        let at = from + self.seen[from..].find(&needle).expect("needle") + 1;
        if !self.seen[at..].contains('\n') {
            self.read_until(at, "\n", Duration::from_secs(5)).await;
        }
        let line = self.seen[at..].lines().next().unwrap_or("");
        Some(line.trim_end_matches('\r').to_string())
    }

    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }

    /// Seconds the guest has been up (`/proc/uptime`, whole seconds).
    pub async fn uptime(&mut self) -> u64 {
        let line = self
            .run(
                "echo up-$(cut -d. -f1 /proc/uptime)",
                "up-",
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|| panic!("no uptime: {:?}", self.seen));
        line.trim_start_matches("up-").parse().expect("uptime")
    }

    /// Whether the server closed this connection within `within` (what arrives before
    /// is kept in `seen`).
    pub async fn closed_within(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Err(_) => return false,
                Ok(None) | Ok(Some(Err(_))) | Ok(Some(Ok(Message::Close(_)))) => return true,
                Ok(Some(Ok(Message::Binary(b)))) => {
                    self.seen.push_str(&String::from_utf8_lossy(&b))
                }
                Ok(Some(Ok(_))) => {}
            }
        }
    }
}

// ---- VMs ------------------------------------------------------------------------

/// A VM whose guest boots from the kernelBoot image (PVH direct boot, the quickest
/// under software emulation), with a NoCloud seed carrying `user_data` (when given) and
/// a masquerade interface forwarding guest port 8080.
pub fn kernel_vm(guests: &Guests, name: &str, strategy: &str, user_data: Option<&str>) -> Value {
    let mut vm = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": strategy,
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "domain": {
                        "firmware": {"kernelBoot": {
                            "kernelArgs": "console=ttyS0 no_timer_check",
                            "container": {
                                "image": guests.kernel_image(),
                                "kernelPath": "/boot/vmlinux",
                                "initrdPath": "/boot/initramfs.cpio.gz"
                            }
                        }},
                        "devices": {
                            "disks": [],
                            "interfaces": [{"name": "default", "masquerade": {},
                                            "ports": [{"name": "web", "port": 8080}]}]
                        },
                        "memory": {"guest": "128Mi"}
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": []
                }
            }
        }
    });
    if let Some(user_data) = user_data {
        add_volume(
            &mut vm,
            json!({"name": "cloudinit", "disk": {"bus": "virtio"}}),
            json!({"name": "cloudinit", "cloudInitNoCloud": {"userData": user_data}}),
        );
    }
    vm
}

/// A VM that boots the containerDisk through the BIOS (SeaBIOS, syslinux) on `machine`
/// with its disks on `bus`.
pub fn disk_vm(guests: &Guests, name: &str, machine: &str, bus: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "domain": {
                        "machine": {"type": machine},
                        "devices": {
                            "disks": [{"name": "root", "disk": {"bus": bus}, "bootOrder": 1}],
                            "interfaces": [{"name": "default", "masquerade": {},
                                            "ports": [{"name": "web", "port": 8080}]}]
                        },
                        "memory": {"guest": "128Mi"}
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": [{"name": "root", "containerDisk": {"image": guests.disk_image()}}]
                }
            }
        }
    })
}

/// Appends a disk and its volume to a VM's template.
pub fn add_volume(vm: &mut Value, disk: Value, volume: Value) {
    let spec = &mut vm["spec"]["template"]["spec"];
    spec["domain"]["devices"]["disks"]
        .as_array_mut()
        .expect("disks")
        .push(disk);
    spec["volumes"]
        .as_array_mut()
        .expect("volumes")
        .push(volume);
}

/// The `status.portForwards[].hostPort` for guest port `port`.
pub fn host_port(vmi: &Value, port: u16) -> u16 {
    vmi["status"]["portForwards"]
        .as_array()
        .and_then(|list| list.iter().find(|f| f["port"] == json!(port)))
        .and_then(|f| f["hostPort"].as_u64())
        .unwrap_or_else(|| panic!("no port forward for {port} in {}", vmi["status"])) as u16
}
