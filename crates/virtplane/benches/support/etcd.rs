//! A single-member etcd for a bench, in its own data dir on free loopback ports.
#![allow(dead_code)] // not every bench uses every helper

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::process::{free_port, Proc};

pub struct Etcd {
    pub proc: Proc,
    /// The client URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// `etcd 3.x.y`, as `etcd --version` says.
    pub version: String,
}

impl Etcd {
    /// Starts `ETCD_BIN` (default: `etcd` on PATH) under `dir/etcd` and waits until
    /// `/health` says true.
    pub async fn start(dir: &Path) -> Result<Etcd> {
        let binary = std::env::var_os("ETCD_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("etcd"));
        let version = Command::new(&binary)
            .arg("--version")
            .output()
            .with_context(|| {
                format!(
                    "cannot run {} (install etcd: apt-get install etcd-server, or set ETCD_BIN)",
                    binary.display()
                )
            })?;
        let version = String::from_utf8_lossy(&version.stdout)
            .lines()
            .next()
            .unwrap_or("etcd")
            .trim()
            .replace("etcd Version:", "etcd")
            .to_string();
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let url = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut proc = Proc::spawn(
            "etcd",
            Command::new(&binary)
                .arg("--name")
                .arg("bench")
                .arg("--data-dir")
                .arg(dir.join("etcd"))
                .args([
                    "--listen-client-urls",
                    &url,
                    "--advertise-client-urls",
                    &url,
                ])
                .args([
                    "--listen-peer-urls",
                    &peer,
                    "--initial-advertise-peer-urls",
                    &peer,
                ])
                .args(["--initial-cluster", &format!("bench={peer}")])
                .args(["--logger", "zap", "--log-level", "warn"]),
            dir.join("etcd.log"),
        )
        .with_context(|| format!("cannot start {}", binary.display()))?;
        let probe = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            proc.check_alive()?;
            if let Ok(r) = probe.get(format!("{url}/health")).send().await {
                if r.status().is_success() && r.text().await.unwrap_or_default().contains("true") {
                    break;
                }
            }
            if Instant::now() > deadline {
                bail!("etcd never reported healthy on {url}/health");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Etcd { proc, url, version })
    }
}
