//! Throwaway etcd for tests (one member, or a cluster of several): free loopback ports,
//! temp data dirs, killed on drop. Without an `etcd` binary a test skips loudly, unless CI (or
//! `VIRTPLANE_REQUIRE_QEMU=1`, which the project's tests take as "run everything") is set.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{EtcdConfig, EtcdStore, Layout, TlsFiles};

/// How long a fresh etcd may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a test that cannot run must fail rather than skip.
pub fn required() -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0");
    set("VIRTPLANE_REQUIRE_QEMU") || set("CI")
}

/// `etcd` from `ETCD_BIN`, PATH or /usr/bin.
pub fn etcd_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("ETCD_BIN") {
        return Some(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
}

/// The etcd binary, or `None` after saying why the test is skipped (a panic when required).
pub fn etcd_or_skip(test: &str) -> Option<PathBuf> {
    if let Some(bin) = etcd_binary() {
        return Some(bin);
    }
    let why = "etcd is not installed (Debian package etcd-server; `scripts/install-deps test` installs it)";
    if required() {
        panic!("{test}: {why}, and VIRTPLANE_REQUIRE_QEMU or CI is set");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

pub struct EtcdServer {
    pub url: String,
    child: Child,
    dir: tempfile::TempDir,
    /// What clients present to this etcd (empty without TLS).
    client_tls: TlsFiles,
}

/// TLS for a test etcd: its serving certificate, and the CA its clients' certificates
/// must chain to (`--client-cert-auth`).
pub struct ServerTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_ca_file: PathBuf,
    /// What the store presents and trusts.
    pub client: TlsFiles,
}

impl EtcdServer {
    /// Starts etcd and waits until it answers a read.
    pub async fn start(binary: &Path) -> EtcdServer {
        Self::start_with(binary, None).await
    }

    /// Starts etcd serving HTTPS and requiring client certificates.
    pub async fn start_tls(binary: &Path, tls: ServerTls) -> EtcdServer {
        Self::start_with(binary, Some(tls)).await
    }

    /// Starts etcd with a backend quota of `bytes`, to fill it up.
    pub async fn start_with_quota(binary: &Path, bytes: u64) -> EtcdServer {
        Self::start_with_args(binary, None, &[format!("--quota-backend-bytes={bytes}")]).await
    }

    /// Kills etcd (it is gone for its clients, as a lost quorum is).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn start_with(binary: &Path, tls: Option<ServerTls>) -> EtcdServer {
        Self::start_with_args(binary, tls, &[]).await
    }

    async fn start_with_args(
        binary: &Path,
        tls: Option<ServerTls>,
        extra: &[String],
    ) -> EtcdServer {
        let dir = tempfile::Builder::new()
            .prefix("store-etcd-")
            .tempdir()
            .expect("temp dir");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("etcd.log")).expect("etcd log");
        let mut command = Command::new(binary);
        if let Some(tls) = &tls {
            command
                .arg(format!("--cert-file={}", tls.cert_file.display()))
                .arg(format!("--key-file={}", tls.key_file.display()))
                .arg(format!(
                    "--trusted-ca-file={}",
                    tls.client_ca_file.display()
                ))
                .arg("--client-cert-auth");
        }
        let child = command
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={url}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .args(["--logger=zap", "--log-level=warn"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("etcd log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let client_tls = tls.map(|t| t.client).unwrap_or_default();
        let mut server = EtcdServer {
            url,
            child,
            dir,
            client_tls,
        };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("etcd exited ({status}); log: {}", self.log());
            }
            if EtcdStore::connect(self.config("/ready-probe"))
                .await
                .is_ok()
            {
                return;
            }
            if Instant::now() > deadline {
                panic!("etcd never answered on {}; log: {}", self.url, self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A store config for this etcd with every key under `prefix` (an isolated namespace).
    pub fn config(&self, prefix: &str) -> EtcdConfig {
        EtcdConfig {
            endpoints: vec![self.url.clone()],
            tls: self.client_tls.clone(),
            layout: Layout::new("", prefix),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A throwaway etcd cluster of several members on loopback, each with its own data dir,
/// for tests that kill a member and bring it back. Killed on drop.
pub struct EtcdCluster {
    binary: PathBuf,
    dir: tempfile::TempDir,
    members: Vec<Member>,
    initial_cluster: String,
}

struct Member {
    name: String,
    client_url: String,
    peer_url: String,
    child: Option<Child>,
}

impl EtcdCluster {
    /// Starts `size` members and waits until the cluster answers.
    pub async fn start(binary: &Path, size: usize) -> EtcdCluster {
        let dir = tempfile::Builder::new()
            .prefix("etcd-cluster-")
            .tempdir()
            .expect("temp dir");
        let members: Vec<Member> = (1..=size)
            .map(|i| Member {
                name: format!("member-{i}"),
                client_url: format!("http://127.0.0.1:{}", free_port()),
                peer_url: format!("http://127.0.0.1:{}", free_port()),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            binary: binary.to_path_buf(),
            dir,
            members,
            initial_cluster,
        };
        for i in 0..size {
            cluster.spawn(i);
        }
        cluster.wait_ready().await;
        cluster
    }

    /// Every member's client URL, for `--store etcd=...` (joined with commas).
    pub fn urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// Kills member `index` (SIGKILL); the others keep the quorum.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `index` again on its data dir, as a rebooted member rejoins.
    pub async fn restart(&mut self, index: usize) {
        self.kill(index);
        self.spawn(index);
        self.wait_ready().await;
    }

    fn spawn(&mut self, index: usize) {
        let member = &self.members[index];
        let data = self.dir.path().join(&member.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", member.name)))
            .expect("etcd log");
        let child = Command::new(&self.binary)
            .arg(format!("--name={}", member.name))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={}", member.client_url))
            .arg(format!("--advertise-client-urls={}", member.client_url))
            .arg(format!("--listen-peer-urls={}", member.peer_url))
            .arg(format!("--initial-advertise-peer-urls={}", member.peer_url))
            .arg(format!("--initial-cluster={}", self.initial_cluster))
            .args([
                "--initial-cluster-token=test-cluster",
                "--initial-cluster-state=new",
            ])
            .args(["--logger=zap", "--log-level=warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("etcd log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        self.members[index].child = Some(child);
    }

    /// Until a quorum answers a linearizable read.
    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        let config = EtcdConfig {
            endpoints: self.urls(),
            tls: TlsFiles::default(),
            layout: Layout::new("", "/ready-probe"),
        };
        while EtcdStore::connect(config.clone()).await.is_err() {
            if Instant::now() > deadline {
                panic!("etcd cluster never answered; logs: {}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let log = self.dir.path().join(format!("{}.log", m.name));
                format!(
                    "--- {}\n{}",
                    m.name,
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            })
            .collect()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
