//! Keys written with a time to live (Events' `--event-ttl`), as the embedded stores keep
//! them: a queue of deadlines in wall-clock milliseconds (so they survive a restart when
//! persisted), each for one write of a key. A key written again after its expiring write
//! has another revision, so the delete at the old deadline, made with that revision as the
//! expected one, no longer matches and leaves the key alone, as a put without a lease
//! detaches etcd's.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Revision;

/// Milliseconds since the Unix epoch, now.
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// When a write made now with `ttl` expires.
pub fn deadline(ttl: Duration) -> u64 {
    now_millis().saturating_add(ttl.as_millis() as u64)
}

/// One expiring write: the key is deleted at `at` if it still holds `revision`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Expiring {
    pub at: u64,
    pub revision: Revision,
    pub key: String,
}

/// Expiring writes, soonest first.
#[derive(Debug, Default)]
pub struct Deadlines {
    queue: BTreeSet<Expiring>,
}

impl Deadlines {
    pub fn insert(&mut self, expiring: Expiring) {
        self.queue.insert(expiring);
    }

    /// The soonest deadline, if any.
    pub fn next(&self) -> Option<u64> {
        self.queue.first().map(|e| e.at)
    }

    /// How long until the soonest deadline (zero if it passed), if any.
    pub fn wait(&self) -> Option<Duration> {
        self.next()
            .map(|at| Duration::from_millis(at.saturating_sub(now_millis())))
    }

    /// Takes the writes whose deadline is at or before `now`.
    pub fn take_due(&mut self, now: u64) -> Vec<Expiring> {
        let mut due = Vec::new();
        while self.queue.first().is_some_and(|e| e.at <= now) {
            due.extend(self.queue.pop_first());
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_writes_come_out_soonest_first_and_only_once() {
        let mut deadlines = Deadlines::default();
        for (at, revision, key) in [(30, 3, "c"), (10, 1, "a"), (20, 2, "b")] {
            deadlines.insert(Expiring {
                at,
                revision,
                key: key.into(),
            });
        }
        assert_eq!(deadlines.next(), Some(10));
        let due: Vec<_> = deadlines.take_due(20).into_iter().map(|e| e.key).collect();
        assert_eq!(due, ["a", "b"]);
        assert!(deadlines.take_due(20).is_empty());
        assert_eq!(deadlines.next(), Some(30));
    }
}
