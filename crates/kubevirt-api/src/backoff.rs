//! Per-object retry delays for control loops: a sync that fails is retried after a delay
//! that doubles with each consecutive failure of the same object, up to a cap, and starts
//! over once the object syncs (client-go's per-item exponential rate limiter, as kube-rs
//! controllers do it in their `error_policy`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The first retry of a failed sync.
pub const INITIAL: Duration = Duration::from_millis(500);
/// The longest wait between retries.
pub const MAX: Duration = Duration::from_secs(300);

/// Consecutive failures and the earliest next attempt, per object key.
#[derive(Debug)]
pub struct Backoff<K> {
    initial: Duration,
    max: Duration,
    failing: Mutex<HashMap<K, Failing>>,
}

#[derive(Clone, Copy, Debug)]
struct Failing {
    failures: u32,
    retry_at: Instant,
}

impl<K: Eq + Hash> Default for Backoff<K> {
    /// 500 ms doubling to 5 min.
    fn default() -> Self {
        Self::new(INITIAL, MAX)
    }
}

impl<K: Eq + Hash> Backoff<K> {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            failing: Mutex::new(HashMap::new()),
        }
    }

    /// The delay after the `failures`-th consecutive failure: `initial × 2^(failures-1)`,
    /// at most `max`.
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.initial
            .checked_mul(1 << doublings)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// Records a failed sync of `key` and returns how long to wait before the next.
    pub fn failed(&self, key: K) -> Duration {
        self.failed_at(key, Instant::now())
    }

    /// [`Backoff::failed`] at a given instant.
    pub fn failed_at(&self, key: K, now: Instant) -> Duration {
        let mut failing = self.lock();
        let entry = failing.entry(key).or_insert(Failing {
            failures: 0,
            retry_at: now,
        });
        entry.failures = entry.failures.saturating_add(1);
        let delay = self.delay(entry.failures);
        entry.retry_at = now + delay;
        delay
    }

    /// A sync of `key` succeeded (or the object is gone): its next failure waits
    /// `initial` again.
    pub fn succeeded(&self, key: &K) {
        self.lock().remove(key);
    }

    /// Consecutive failures of `key` so far.
    pub fn failures(&self, key: &K) -> u32 {
        self.lock().get(key).map_or(0, |f| f.failures)
    }

    /// Whether `key` failed and its delay has not passed yet (for loops that poll
    /// instead of scheduling each object's retry).
    pub fn waiting(&self, key: &K, now: Instant) -> bool {
        self.lock().get(key).is_some_and(|f| f.retry_at > now)
    }

    /// Forgets the objects `keep` says no longer exist.
    pub fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Failing>> {
        // The map stays consistent whatever panicked while holding it.
        self.failing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An object's key as logs show it: `namespace/name`, or `name` for a cluster-scoped one.
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_per_failure_up_to_the_cap() {
        let backoff = Backoff::<&str>::default();
        let t0 = Instant::now();
        let delays: Vec<Duration> = (0..12).map(|_| backoff.failed_at("a", t0)).collect();
        let expected: Vec<Duration> = [
            500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000,
            300_000,
        ]
        .iter()
        .map(|&ms| MS * ms)
        .collect();
        assert_eq!(delays, expected);
        assert_eq!(backoff.failures(&"a"), 12);
        // Counting far past the cap neither overflows nor leaves it.
        assert_eq!(backoff.delay(u32::MAX), MAX);
        assert_eq!(backoff.delay(40), MAX);
        assert_eq!(backoff.delay(0), INITIAL);
    }

    #[test]
    fn success_starts_over_and_objects_are_apart() {
        let backoff = Backoff::new(MS * 100, MS * 1_000);
        let t0 = Instant::now();
        assert_eq!(backoff.failed_at("a", t0), MS * 100);
        assert_eq!(backoff.failed_at("a", t0), MS * 200);
        assert_eq!(backoff.failed_at("a", t0), MS * 400);
        // Another object's failures are its own.
        assert_eq!(backoff.failed_at("b", t0), MS * 100);
        backoff.succeeded(&"a");
        assert_eq!(backoff.failures(&"a"), 0);
        assert_eq!(backoff.failed_at("a", t0), MS * 100);
        assert_eq!(backoff.failed_at("b", t0), MS * 200);
        // A success of an object that never failed is nothing.
        backoff.succeeded(&"c");
        assert_eq!(backoff.failures(&"c"), 0);
    }

    #[test]
    fn waiting_until_the_delay_has_passed() {
        let backoff = Backoff::new(MS * 100, MS * 1_000);
        let t0 = Instant::now();
        assert!(!backoff.waiting(&"a", t0), "never failed");
        backoff.failed_at("a", t0);
        assert!(backoff.waiting(&"a", t0 + MS * 99));
        assert!(!backoff.waiting(&"a", t0 + MS * 100));
        backoff.failed_at("a", t0 + MS * 100);
        assert!(backoff.waiting(&"a", t0 + MS * 299));
        assert!(!backoff.waiting(&"a", t0 + MS * 300));
        backoff.retain(|k| *k != "a");
        assert!(!backoff.waiting(&"a", t0));
        assert_eq!(backoff.failures(&"a"), 0);
    }

    #[test]
    fn keys_name_the_namespace() {
        assert_eq!(object_key(Some("ns"), "vm"), "ns/vm");
        assert_eq!(object_key(None, "node1"), "node1");
        assert_eq!(object_key(Some(""), "node1"), "node1");
    }
}
