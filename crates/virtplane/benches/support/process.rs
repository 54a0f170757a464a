//! Child processes the benches start and measure: killed (and reaped) when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A child process whose stderr goes to `log`; killed (and reaped) when dropped.
pub struct Proc {
    name: &'static str,
    child: Child,
    pub log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Spawns `command` (stdout to /dev/null, stderr to `log`) as `name`.
    pub fn spawn(name: &'static str, command: &mut Command, log: PathBuf) -> Result<Proc> {
        let child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        Ok(Proc { name, child, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error with the end of the log if the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "{} exited early ({status}); its log ends:\n{}",
                self.name,
                tail.join("\n")
            );
        }
        Ok(())
    }

    /// CPU time (user + system) the process has used so far, from `/proc/PID/stat`.
    pub fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        // Fields after the command name (which may hold spaces) start at field 3.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // USER_HZ is 100 on every Linux build this runs on.
        Some(Duration::from_millis(ticks * 10))
    }

    /// Waits until the process is idle (under 5% of a core over 500 ms), so work it does in
    /// the background after a phase (controllers reacting to new objects) does not slow
    /// the next phase. Returns how long that took.
    #[allow(dead_code)] // api_vs_etcd and store_memory
    pub async fn wait_idle(&self) -> Duration {
        let started = Instant::now();
        let window = Duration::from_millis(500);
        let Some(mut before) = self.cpu_time() else {
            return Duration::ZERO;
        };
        while started.elapsed() < Duration::from_secs(120) {
            tokio::time::sleep(window).await;
            let Some(now) = self.cpu_time() else { break };
            let busy = now.saturating_sub(before);
            before = now;
            if busy * 20 <= window {
                return started.elapsed().saturating_sub(window);
            }
        }
        started.elapsed()
    }

    /// Resident memory (`VmRSS` of `/proc/PID/status`), in MiB.
    #[allow(dead_code)] // store_memory only
    pub fn rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    }
}
