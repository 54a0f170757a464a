//! What the node and each guest use now, for `metrics.k8s.io` (`kubectl top`), as
//! metrics-server reports the kubelet's: CPU as a rate between two readings (the window),
//! memory as resident now. The first reading of a while is followed by a second one a
//! second later; after that each answer reaches back to a kept reading, renewed every
//! few seconds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use metrics::usage::{GuestUsed, Report, Used};

use crate::hypervisor::Hypervisor;

/// The shortest window a rate is taken over.
const MIN_WINDOW: Duration = Duration::from_secs(1);
/// A kept reading older than this is too old to average over.
const MAX_AGE: Duration = Duration::from_secs(60);
/// A kept reading this old is replaced by the newest.
const RENEW_AFTER: Duration = Duration::from_secs(15);

/// One reading: CPU seconds so far, memory now.
#[derive(Clone, Debug)]
struct Reading {
    at: Instant,
    timestamp: chrono::DateTime<chrono::Utc>,
    node: Option<(f64, u64)>,
    guests: HashMap<(String, String), (f64, u64)>,
}

#[derive(Default)]
pub struct Usage {
    kept: Mutex<Option<Reading>>,
}

impl Usage {
    fn kept(&self) -> std::sync::MutexGuard<'_, Option<Reading>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub async fn report(&self, hypervisor: &dyn Hypervisor) -> Report {
        let mut now = read(hypervisor).await;
        let kept = self.kept().clone().filter(|k| {
            let age = now.at.duration_since(k.at);
            (MIN_WINDOW..=MAX_AGE).contains(&age)
        });
        let base = match kept {
            Some(kept) => kept,
            None => {
                tokio::time::sleep(MIN_WINDOW).await;
                let first = std::mem::replace(&mut now, read(hypervisor).await);
                *self.kept() = Some(first.clone());
                first
            }
        };
        if now.at.duration_since(base.at) >= RENEW_AFTER {
            *self.kept() = Some(now.clone());
        }
        between(&base, &now)
    }
}

/// The rates from `base` to `now`, and memory at `now`.
fn between(base: &Reading, now: &Reading) -> Report {
    let window = now.at.duration_since(base.at).as_secs_f64().max(1e-3);
    let rate = |before: f64, after: f64| ((after - before).max(0.0) / window * 1e9) as u64;
    let mut guests: Vec<GuestUsed> = now
        .guests
        .iter()
        .filter_map(|(key, (cpu, memory))| {
            let (cpu_before, _) = base.guests.get(key)?;
            Some(GuestUsed {
                namespace: key.0.clone(),
                name: key.1.clone(),
                used: Used {
                    cpu_nanocores: rate(*cpu_before, *cpu),
                    memory_bytes: *memory,
                },
            })
        })
        .collect();
    guests.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let node = match (base.node, now.node) {
        (Some((before, _)), Some((after, memory))) => Some(Used {
            cpu_nanocores: rate(before, after),
            memory_bytes: memory,
        }),
        _ => None,
    };
    Report {
        timestamp: now
            .timestamp
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        window_seconds: window,
        node,
        guests,
    }
}

async fn read(hypervisor: &dyn Hypervisor) -> Reading {
    let guests = hypervisor
        .readings()
        .await
        .into_iter()
        .filter_map(|(key, r)| Some((key, (r.cpu_seconds, r.memory_resident_bytes?))))
        .collect();
    // A simulated node shares the host with every other: it has no usage of its own.
    let node = (hypervisor.kind() != "sim").then(node_reading).flatten();
    Reading {
        at: Instant::now(),
        timestamp: chrono::Utc::now(),
        node,
        guests,
    }
}

/// The host's busy CPU seconds (`/proc/stat`) and used memory (`/proc/meminfo`: total
/// less available, the kubelet's working set of the node).
fn node_reading() -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    Some((busy_seconds(&stat, ticks)?, used_memory(&meminfo)?))
}

/// CPU seconds spent on anything but idling and waiting for I/O, from `/proc/stat`.
fn busy_seconds(stat: &str, ticks_per_second: f64) -> Option<f64> {
    let fields: Vec<f64> = stat
        .lines()
        .find(|l| l.starts_with("cpu "))?
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is within user).
    let total: f64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).unwrap_or(&0.0);
    Some((total - idle) / ticks_per_second)
}

fn used_memory(meminfo: &str) -> Option<u64> {
    let kib = |key: &str| -> Option<u64> {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(kib("MemTotal:")?.saturating_sub(kib("MemAvailable:")?) * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_give_busy_cpu_and_used_memory() {
        let stat = "cpu  100 5 50 1000 20 3 2 0 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n";
        assert_eq!(busy_seconds(stat, 100.0), Some(1.6));
        assert_eq!(busy_seconds("intr 1 2 3\n", 100.0), None);
        let meminfo =
            "MemTotal:       24000000 kB\nMemFree:        1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(used_memory(meminfo), Some(4_000_000 * 1024));
    }

    #[test]
    fn cpu_is_a_rate_over_the_window_and_memory_the_latest() {
        let start = Instant::now();
        let at = |secs: u64, cpu: f64, memory: u64| Reading {
            at: start + Duration::from_secs(secs),
            timestamp: chrono::Utc::now(),
            node: Some((cpu * 10.0, memory * 10)),
            guests: [(("default".to_string(), "vm".to_string()), (cpu, memory))].into(),
        };
        let report = between(&at(0, 1.0, 100), &at(4, 3.0, 200));
        assert_eq!(report.window_seconds, 4.0);
        assert_eq!(report.guests[0].used.cpu_nanocores, 500_000_000);
        assert_eq!(report.guests[0].used.memory_bytes, 200);
        let node = report.node.expect("node");
        assert_eq!(
            (node.cpu_nanocores, node.memory_bytes),
            (5_000_000_000, 2000)
        );
    }
}
