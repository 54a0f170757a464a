//! What a scrape reads of a running QEMU, and what it keeps between scrapes so that a
//! scrape costs one QMP round trip per guest (`query-blockstats`) and a few small `/proc`
//! reads: under TCG every round trip waits for a busy main loop, and a page-table walk
//! of the guest's RAM takes milliseconds per GiB.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use qemu::Instance;
use serde_json::json;

use crate::readings::{GuestMemory, Readings};

/// How often a guest's balloon reports its memory stats once asked for them.
const BALLOON_STATS_SECONDS: u64 = 5;

/// How old the memory overhead may be before a scrape has it read again (in the
/// background: the scrape reports the last reading).
const OVERHEAD_EVERY: Duration = Duration::from_secs(30);

/// A running guest's metrics state: asked once, kept a while, or read in the background.
#[derive(Default)]
pub(super) struct GuestMetrics {
    facts: Option<Facts>,
    balloon: Option<BalloonStats>,
    overhead: Arc<Mutex<Overhead>>,
}

/// A running QEMU's answers that stay as they are (virtplane hot-plugs no vCPUs, resizes
/// no memory and never moves the balloon), asked once.
#[derive(Clone, Default)]
struct Facts {
    /// (vCPU index, thread id).
    vcpus: Vec<(u64, u64)>,
    memory_domain_bytes: Option<u64>,
    actual_balloon_bytes: Option<u64>,
    /// Whether it has a balloon, now asked for its stats every few seconds.
    balloon: bool,
}

/// The balloon's last stats, which stay as they are until the guest's next report.
struct BalloonStats {
    memory: Option<GuestMemory>,
    /// When the guest sends its next report (seconds since the epoch, QEMU's clock).
    next_report: u64,
}

/// QEMU's memory beyond the guest's RAM, as last read from `/proc/PID/smaps`.
#[derive(Default)]
struct Overhead {
    bytes: Option<u64>,
    read_at: Option<Instant>,
    reading: bool,
}

impl GuestMetrics {
    /// This scrape's readings of the guest run by `instance` (taps: (device, interface)).
    pub(super) async fn read(
        &mut self,
        instance: &Instance,
        key: &(String, String),
        taps: &[(String, String)],
    ) -> Readings {
        let began = Instant::now();
        if self.facts.is_none() {
            self.facts = Some(Facts::read(instance, key).await);
        }
        let facts = self.facts.clone().unwrap_or_default();
        let mut readings = Readings {
            memory_domain_bytes: facts.memory_domain_bytes,
            actual_balloon_bytes: facts.actual_balloon_bytes,
            ..Readings::default()
        };
        crate::readings::from_proc(instance.pid, &facts.vcpus, &mut readings);
        if let Some(guest) = facts.memory_domain_bytes {
            readings.overhead_bytes = self.overhead(instance.pid, guest).await;
        }
        if facts.balloon {
            readings.guest_memory = self.balloon_stats(instance, key).await;
        }
        match instance.qmp.execute("query-blockstats", None).await {
            Ok(stats) => readings.drives = crate::readings::drives(&stats),
            Err(e) => tracing::debug!("query-blockstats of {}/{}: {e}", key.0, key.1),
        }
        // QEMU runs in the Pod's network namespace, where the taps are.
        let dev =
            std::fs::read_to_string(format!("/proc/{}/net/dev", instance.pid)).unwrap_or_default();
        let devices = crate::readings::net_dev(&dev);
        readings.interfaces = taps
            .iter()
            .filter_map(|(tap, name)| {
                let (_, counters) = devices.iter().find(|(device, _)| device == tap)?;
                Some(crate::readings::interface(name, counters))
            })
            .collect();
        readings.read_seconds = began.elapsed().as_secs_f64();
        readings
    }

    /// The balloon's stats, asked of QEMU only once the guest may have sent new ones.
    async fn balloon_stats(
        &mut self,
        instance: &Instance,
        key: &(String, String),
    ) -> Option<GuestMemory> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        if let Some(kept) = self.balloon.as_ref().filter(|b| now < b.next_report) {
            return kept.memory.clone();
        }
        let stats = json!({"path": balloon_path(), "property": "guest-stats"});
        match instance.qmp.execute("qom-get", Some(stats)).await {
            Ok(stats) => {
                let memory = crate::readings::guest_memory(&stats);
                // No report yet (0): ask again at the next scrape.
                let last = stats["last-update"].as_u64().unwrap_or(0);
                self.balloon = (last > 0).then(|| BalloonStats {
                    memory: memory.clone(),
                    // QEMU's number: saturating, so a wild one cannot overflow.
                    next_report: last.saturating_add(BALLOON_STATS_SECONDS),
                });
                memory
            }
            Err(e) => {
                tracing::debug!("balloon stats of {}/{}: {e}", key.0, key.1);
                None
            }
        }
    }

    /// The memory overhead: read at the first scrape, then reported as last read while a
    /// fresh reading is taken in the background once it is `OVERHEAD_EVERY` old.
    async fn overhead(&mut self, pid: u32, guest_bytes: u64) -> Option<u64> {
        let first = {
            let mut kept = self.overhead.lock().unwrap_or_else(|e| e.into_inner());
            let stale = kept.read_at.is_none_or(|at| at.elapsed() >= OVERHEAD_EVERY);
            if !stale || kept.reading {
                return kept.bytes;
            }
            kept.reading = true;
            kept.bytes.is_none()
        };
        let kept = self.overhead.clone();
        let reading = tokio::task::spawn_blocking(move || {
            let bytes = crate::readings::overhead(pid, guest_bytes);
            if bytes.is_none() {
                // QEMU gone, or no mapping of the guest's size: the last reading stays.
                tracing::debug!("no memory overhead read from /proc/{pid}/smaps");
            }
            let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
            *kept = Overhead {
                bytes: bytes.or(kept.bytes),
                read_at: Some(Instant::now()),
                reading: false,
            };
            kept.bytes
        });
        if first {
            return reading.await.ok().flatten();
        }
        self.overhead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bytes
    }
}

impl Facts {
    async fn read(instance: &Instance, key: &(String, String)) -> Facts {
        let mut facts = Facts::default();
        let qmp = &instance.qmp;
        match qmp.execute("query-cpus-fast", None).await {
            Ok(cpus) => {
                facts.vcpus = cpus
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| Some((c["cpu-index"].as_u64()?, c["thread-id"].as_u64()?)))
                    .collect()
            }
            Err(e) => tracing::debug!("query-cpus-fast of {}/{}: {e}", key.0, key.1),
        }
        match qmp.execute("query-memory-size-summary", None).await {
            Ok(summary) => facts.memory_domain_bytes = summary["base-memory"].as_u64(),
            Err(e) => tracing::debug!("query-memory-size-summary of {}/{}: {e}", key.0, key.1),
        }
        // The guest's balloon reports only once asked to, every few seconds from now.
        let polling = json!({"path": balloon_path(), "property": "guest-stats-polling-interval",
                             "value": BALLOON_STATS_SECONDS});
        match qmp.execute("qom-set", Some(polling)).await {
            Ok(_) => facts.balloon = true,
            // No balloon (`autoattachMemBalloon: false`): no guest memory stats.
            Err(e) => tracing::debug!("asking {}/{}'s balloon for stats: {e}", key.0, key.1),
        }
        if facts.balloon {
            match qmp.execute("query-balloon", None).await {
                Ok(balloon) => facts.actual_balloon_bytes = balloon["actual"].as_u64(),
                Err(e) => tracing::debug!("query-balloon of {}/{}: {e}", key.0, key.1),
            }
        }
        facts
    }
}

fn balloon_path() -> String {
    format!("/machine/peripheral/{}", qemu::machine::BALLOON)
}
