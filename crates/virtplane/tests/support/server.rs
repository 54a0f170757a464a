//! `virtplane server` processes for the tests: one a test owns (`TestServer`, on a free
//! port in a temporary data dir, killed on drop) and the one a test binary shares
//! (`start_once`).

use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use super::Api;

pub struct TestServer {
    pub dir: tempfile::TempDir,
    /// The address it listens on (loopback unless the test gave one).
    pub host: String,
    pub port: u16,
    pub url: String,
    child: Option<Child>,
    pub extra_args: Vec<String>,
    /// Environment variables the server runs with (e.g. `SSL_CERT_FILE`).
    pub env: Vec<(String, String)>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_virtplane"))
}

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(&["--no-node"]).await
    }

    pub async fn start_with(args: &[&str]) -> TestServer {
        Self::start_with_env(args, &[]).await
    }

    pub async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> TestServer {
        Self::start_prepared(args, env, |_| ()).await.0
    }

    /// A server on `port` (one `free_port` gave, when its URL must be known before it
    /// starts: servers that name each other).
    pub async fn start_on(port: u16, args: &[&str]) -> TestServer {
        Self::start_listening("127.0.0.1", port, args).await
    }

    /// A server listening on `host:port` (an address a test gave this machine).
    pub async fn start_listening(host: &str, port: u16, args: &[&str]) -> TestServer {
        Self::start_at(host, port, args, &[], |_| ()).await.0
    }

    /// A server whose data dir `prepare` sets up first (a small filesystem mounted on
    /// it, say); what `prepare` returns is handed back beside the server.
    pub async fn start_prepared<T>(
        args: &[&str],
        env: &[(&str, &str)],
        prepare: impl FnOnce(&Path) -> T,
    ) -> (TestServer, T) {
        Self::start_at("127.0.0.1", free_port(), args, env, prepare).await
    }

    async fn start_at<T>(
        host: &str,
        port: u16,
        args: &[&str],
        env: &[(&str, &str)],
        prepare: impl FnOnce(&Path) -> T,
    ) -> (TestServer, T) {
        install_crypto();
        let dir = tempfile::tempdir().expect("temp dir");
        let prepared = prepare(dir.path());
        let mut server = TestServer {
            dir,
            host: host.to_string(),
            port,
            url: format!("https://{host}:{port}"),
            child: None,
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        server.launch().await;
        (server, prepared)
    }

    async fn launch(&mut self) {
        let kubeconfig = self.dir.path().join("admin.kubeconfig");
        let _ = std::fs::remove_file(&kubeconfig);
        let child = Command::new(binary())
            .arg("server")
            .arg("--data-dir")
            .arg(self.dir.path())
            .arg("--listen")
            .arg(format!("{}:{}", self.host, self.port))
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
        let anonymous = self.api().anonymous;
        loop {
            if let Ok(r) = anonymous.get(format!("{}/readyz", self.url)).send().await {
                if r.status() == StatusCode::OK {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "server never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// An `Api` on this server (clients belong to the runtime of the test that builds them).
    pub fn api(&self) -> Api {
        Api::connect(&self.url, self.data_dir())
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
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

extern "C" {
    fn atexit(callback: extern "C" fn()) -> i32;
}

/// The value in `cell` (a server shared by the tests of one binary), made by `start` on
/// first use on a thread and runtime of its own, since it outlives the runtime of the test
/// that asked first. Statics are never dropped: `stop` is registered to run when the test
/// binary exits, to do what `Drop` would.
pub fn start_once<T, F>(
    cell: &'static OnceLock<Mutex<T>>,
    start: impl FnOnce() -> F + Send + 'static,
    stop: extern "C" fn(),
) -> MutexGuard<'static, T>
where
    T: Send + 'static,
    F: Future<Output = T>,
{
    let shared = cell.get_or_init(|| {
        let value = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(start())
        })
        .join()
        .expect("server start");
        // SAFETY: registering a plain function with the C runtime.
        unsafe {
            atexit(stop);
        }
        Mutex::new(value)
    });
    shared.lock().unwrap_or_else(|e| e.into_inner())
}
