//! The simulated hypervisor: no guest runs, but VMIs pass through the real phases with
//! configurable delays, and failures can be injected per VMI with annotations:
//! - `sim.virtplane.io/boot-delay`, `sim.virtplane.io/stop-delay`: durations (`1500ms`, `2s`);
//! - `sim.virtplane.io/fail-start: "true"`: the start fails;
//! - `sim.virtplane.io/fail-prepare: "<reason>"`: preparation fails with that reason
//!   (e.g. `ErrImagePull`);
//! - `sim.virtplane.io/crash-after`: the guest crashes that long after it started;
//! - `sim.virtplane.io/power-off-after`: the guest powers itself off that long after start;
//! - `sim.virtplane.io/migration-delay`: how long a live migration of it takes;
//! - `sim.virtplane.io/fail-migration: "true"`: its live migrations fail.
//!
//! One agent runs many simulated nodes, so a migration's source and target may be in one
//! process: guests are kept per (VMI uid, node).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube::ResourceExt;
use kubevirt_api::model::VirtualMachineInstance;

use crate::hypervisor::{
    Arrival, GuestInfo, Hypervisor, Incoming, MigrationSettings, Observed, PauseCause, Prepared,
    Sending, Started, Stopping,
};
use crate::sim_ipam::SimIpam;
use crate::volume_sources::VolumeSources;

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub boot_delay: Duration,
    pub stop_delay: Duration,
    pub migration_delay: Duration,
    pub cpu_millicores: i64,
    pub memory_bytes: i64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            boot_delay: Duration::from_millis(500),
            stop_delay: Duration::from_millis(200),
            migration_delay: Duration::from_millis(300),
            cpu_millicores: 64_000,
            memory_bytes: 256 << 30,
        }
    }
}

/// Parses `1500ms`, `2s`, `1m`, or a bare number of milliseconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    // Go's form too: parts like `1h0m0s`, `1m30s`; a bare number is milliseconds.
    let mut rest = text.trim();
    if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return rest.parse::<f64>().ok().and_then(millis);
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let split = rest.find(|c: char| !c.is_ascii_digit() && c != '.')?;
        let (number, after) = rest.split_at(split);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let value: f64 = number.parse().ok()?;
        total += value
            * match unit {
                "ms" => 1.0,
                "s" => 1000.0,
                "m" => 60_000.0,
                "h" => 3_600_000.0,
                _ => return None,
            };
        rest = next;
    }
    if text.trim().is_empty() {
        return None;
    }
    millis(total)
}

fn millis(ms: f64) -> Option<Duration> {
    (ms.is_finite() && ms >= 0.0).then(|| Duration::from_millis(ms as u64))
}

#[derive(Default)]
struct Guest {
    boot_started: Option<Instant>,
    running_since: Option<Instant>,
    stop_started: Option<Instant>,
    paused: bool,
}

/// A migration in flight, on the source's side.
struct Outgoing {
    migration: String,
    /// The node it leaves from.
    node: String,
    started: Instant,
    delay: Duration,
    fails: bool,
    aborted: bool,
    paused: bool,
}

/// (VMI uid, node).
type Key = (String, String);

pub struct Sim {
    config: SimConfig,
    guests: Mutex<HashMap<Key, Guest>>,
    /// Guests a target is waiting for, by VMI uid; the value says whether it arrived
    /// and paused.
    incoming: Mutex<HashMap<String, Option<bool>>>,
    outgoing: Mutex<HashMap<String, Outgoing>>,
    /// The Pod addresses of the simulated nodes.
    ipam: Arc<SimIpam>,
}

fn node_of(vmi: &VirtualMachineInstance) -> String {
    vmi.node_name().unwrap_or("").to_string()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sim {
    pub fn new(config: SimConfig) -> Self {
        Sim {
            config,
            guests: Mutex::new(HashMap::new()),
            incoming: Mutex::new(HashMap::new()),
            outgoing: Mutex::new(HashMap::new()),
            ipam: Arc::default(),
        }
    }

    fn annotation(vmi: &VirtualMachineInstance, key: &str) -> Option<String> {
        vmi.annotations()
            .get(&format!("sim.virtplane.io/{key}"))
            .cloned()
    }

    fn delay(vmi: &VirtualMachineInstance, key: &str, default: Duration) -> Duration {
        Self::annotation(vmi, key)
            .and_then(|t| parse_duration(&t))
            .unwrap_or(default)
    }

    fn with_guest<T>(&self, vmi: &VirtualMachineInstance, f: impl FnOnce(&mut Guest) -> T) -> T {
        let mut guests = lock(&self.guests);
        f(guests
            .entry((vmi.uid().to_string(), node_of(vmi)))
            .or_default())
    }

    /// The guest on `node`: its Pod's address from the node's subnet (none until the
    /// node has one).
    fn guest_info(&self, vmi: &VirtualMachineInstance, node: &str) -> GuestInfo {
        let ip = self
            .ipam
            .address(node, vmi.uid())
            .map(|ip| ip.to_string())
            .unwrap_or_default();
        GuestInfo {
            interfaces: vec![("default".into(), "02:00:00:00:00:01".into(), ip)],
            machine: "pc-q35-sim".into(),
            port_forwards: Vec::new(),
        }
    }

    fn remaining(since: Instant, total: Duration) -> Option<Duration> {
        total.checked_sub(since.elapsed()).filter(|d| !d.is_zero())
    }
}

#[async_trait]
impl Hypervisor for Sim {
    fn kind(&self) -> &'static str {
        "sim"
    }

    fn capacity(&self) -> (i64, i64) {
        (self.config.cpu_millicores, self.config.memory_bytes)
    }

    fn sim_ipam(&self) -> Option<Arc<SimIpam>> {
        Some(self.ipam.clone())
    }

    async fn prepare(&self, vmi: &VirtualMachineInstance, _sources: &VolumeSources) -> Prepared {
        match Self::annotation(vmi, "fail-prepare") {
            Some(reason) => Prepared::Failed {
                message: format!("simulated failure to prepare the VMI ({reason})"),
                reason,
            },
            None => Prepared::Ready(Default::default()),
        }
    }

    async fn start(&self, vmi: &VirtualMachineInstance, _sources: &VolumeSources) -> Started {
        if Self::annotation(vmi, "fail-start").as_deref() == Some("true") {
            return Started::Failed {
                reason: "SimulatedStartFailure".into(),
                message: "simulated start failure".into(),
            };
        }
        let boot = Self::delay(vmi, "boot-delay", self.config.boot_delay);
        let paused = vmi.spec.starts_paused();
        self.with_guest(vmi, |g| {
            let since = *g.boot_started.get_or_insert_with(Instant::now);
            if let Some(left) = Self::remaining(since, boot) {
                return Started::Pending(left);
            }
            g.running_since = Some(Instant::now());
            g.paused = paused;
            Started::Running(self.guest_info(vmi, &node_of(vmi)))
        })
    }

    async fn observe(&self, vmi: &VirtualMachineInstance) -> Observed {
        let crash = Self::annotation(vmi, "crash-after").and_then(|t| parse_duration(&t));
        let power_off = Self::annotation(vmi, "power-off-after").and_then(|t| parse_duration(&t));
        self.with_guest(vmi, |g| {
            let since = *g.running_since.get_or_insert_with(Instant::now);
            let mut recheck = Duration::from_secs(60);
            for (after, succeeded) in [(crash, false), (power_off, true)] {
                if let Some(after) = after {
                    match Self::remaining(since, after) {
                        None => {
                            let reason = if succeeded {
                                "GuestPoweredOff"
                            } else {
                                "GuestCrashed"
                            };
                            return Observed::Exited {
                                succeeded,
                                reason: reason.into(),
                            };
                        }
                        Some(left) => recheck = recheck.min(left),
                    }
                }
            }
            if g.paused {
                return Observed::Paused {
                    cause: PauseCause::Requested,
                    message: "the guest's vCPUs are stopped".into(),
                    recheck,
                };
            }
            Observed::Running { recheck }
        })
    }

    async fn stop(&self, vmi: &VirtualMachineInstance, grace: Duration) -> Stopping {
        let delay = Self::delay(vmi, "stop-delay", self.config.stop_delay);
        self.with_guest(vmi, |g| {
            let since = *g.stop_started.get_or_insert_with(Instant::now);
            // A guest that takes longer than its grace period is killed: Failed.
            match Self::remaining(since, delay.min(grace)) {
                Some(left) => Stopping::Pending(left),
                None => Stopping::Done {
                    succeeded: delay <= grace,
                },
            }
        })
    }

    async fn set_paused(&self, vmi: &VirtualMachineInstance, paused: bool) -> Result<(), String> {
        self.with_guest(vmi, |g| g.paused = paused);
        Ok(())
    }

    async fn soft_reboot(&self, _vmi: &VirtualMachineInstance) -> Result<(), String> {
        Ok(())
    }

    async fn cleanup(&self, vmi: &VirtualMachineInstance) {
        let uid = vmi.uid().to_string();
        let node = node_of(vmi);
        lock(&self.guests).remove(&(uid.clone(), node.clone()));
        self.ipam.release(&node, &uid);
        // Only what leaves from that node: a later migration from elsewhere stays.
        let mut outgoing = lock(&self.outgoing);
        if outgoing.get(&uid).is_some_and(|o| o.node == node) {
            outgoing.remove(&uid);
        }
    }

    async fn receive(
        &self,
        vmi: &VirtualMachineInstance,
        _sources: &VolumeSources,
        _settings: &MigrationSettings,
    ) -> Result<Incoming, String> {
        lock(&self.incoming)
            .entry(vmi.uid().to_string())
            .or_insert(None);
        Ok(Incoming {
            address: "127.0.0.1".into(),
            migration_port: 49152,
            disk_port: None,
        })
    }

    async fn arrival(&self, vmi: &VirtualMachineInstance) -> Arrival {
        match lock(&self.incoming).get(&vmi.uid().to_string()) {
            None => Arrival::Failed("the simulated target lost the guest".into()),
            Some(None) => Arrival::Waiting,
            Some(Some(_)) => Arrival::Arrived,
        }
    }

    async fn take_over(
        &self,
        vmi: &VirtualMachineInstance,
        paused: bool,
    ) -> Result<GuestInfo, String> {
        let uid = vmi.uid().to_string();
        lock(&self.incoming).remove(&uid);
        let target = vmi
            .labels()
            .get(kubevirt_api::names::labels::MIGRATION_TARGET_NODE)
            .cloned()
            .unwrap_or_default();
        let info = self.guest_info(vmi, &target);
        lock(&self.guests).insert(
            (uid, target),
            Guest {
                running_since: Some(Instant::now()),
                paused,
                ..Default::default()
            },
        );
        Ok(info)
    }

    async fn send(
        &self,
        vmi: &VirtualMachineInstance,
        migration: &str,
        _to: &Incoming,
        _settings: &MigrationSettings,
    ) -> Result<(), String> {
        let mut outgoing = lock(&self.outgoing);
        let uid = vmi.uid().to_string();
        if outgoing.get(&uid).is_some_and(|o| o.migration == migration) {
            return Ok(());
        }
        let paused = self.with_guest(vmi, |g| g.paused);
        outgoing.insert(
            uid,
            Outgoing {
                migration: migration.to_string(),
                node: node_of(vmi),
                started: Instant::now(),
                delay: Self::delay(vmi, "migration-delay", self.config.migration_delay),
                fails: Self::annotation(vmi, "fail-migration").as_deref() == Some("true"),
                aborted: false,
                paused,
            },
        );
        Ok(())
    }

    fn sending(&self, vmi: &VirtualMachineInstance, migration: &str) -> Option<Sending> {
        let uid = vmi.uid().to_string();
        let outgoing = lock(&self.outgoing);
        let out = outgoing.get(&uid).filter(|o| o.migration == migration)?;
        if out.aborted {
            return Some(Sending::Failed(
                qemu::migration::Failure::Aborted.to_string(),
            ));
        }
        if out.started.elapsed() < out.delay {
            return Some(Sending::Moving(Default::default()));
        }
        if out.fails {
            return Some(Sending::Failed("simulated migration failure".into()));
        }
        // The guest is on the target now.
        if let Some(slot) = lock(&self.incoming).get_mut(&uid) {
            slot.get_or_insert(out.paused);
        }
        let total = out.delay.as_millis() as u64;
        Some(Sending::Done(qemu::migration::Progress {
            total_time_ms: total,
            downtime_ms: 1,
            ..Default::default()
        }))
    }

    fn abort_sending(&self, vmi: &VirtualMachineInstance, migration: &str) {
        let uid = vmi.uid().to_string();
        if let Some(out) = lock(&self.outgoing)
            .get_mut(&uid)
            .filter(|o| o.migration == migration)
        {
            out.aborted = true;
        }
    }

    fn cleanup_sending(&self, vmi: &VirtualMachineInstance) {
        lock(&self.outgoing).remove(&vmi.uid().to_string());
    }

    async fn release_incoming(&self, vmi: &VirtualMachineInstance) {
        lock(&self.incoming).remove(&vmi.uid().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1500ms"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("250"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1h0m0s"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("1x"), None);
        assert_eq!(parse_duration("soon"), None);
        assert_eq!(parse_duration("-1s"), None);
    }
}
