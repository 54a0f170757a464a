//! Transfer progress, and its rendering as CDI's DataVolume `status.progress`.

use std::fmt;
use std::time::{Duration, Instant};

/// How far the transfer phase has come: bytes read from the source (before
/// decompression) out of its length, when the source said how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub read_bytes: u64,
    pub total_bytes: Option<u64>,
}

impl Progress {
    /// The share done, 0–100, or `None` when the total is unknown (or zero).
    pub fn percent(&self) -> Option<f64> {
        match self.total_bytes {
            Some(total) if total > 0 => {
                Some((self.read_bytes.min(total) as f64 * 100.0) / total as f64)
            }
            _ => None,
        }
    }

    /// CDI's `status.progress`: `"N/A"` when the total is unknown, else the percent
    /// with two decimals (`"45.20%"`).
    pub fn cdi_progress(&self) -> String {
        match self.percent() {
            None => "N/A".to_string(),
            Some(p) => format!("{:.2}%", truncate_2(p)),
        }
    }
}

/// Rounds down to two decimals, so that "100.00%" means all of it.
fn truncate_2(p: f64) -> f64 {
    (p * 100.0).floor() / 100.0
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.cdi_progress())
    }
}

/// How often progress is reported at most while data flows.
pub(crate) const INTERVAL: Duration = Duration::from_millis(250);

/// Calls the caller's callback at most every [`INTERVAL`], with values that never go
/// down, and once more at the end.
pub(crate) struct Reporter<'a> {
    callback: &'a (dyn Fn(Progress) + Send + Sync),
    total: Option<u64>,
    last: Option<Instant>,
    last_value: u64,
}

impl<'a> Reporter<'a> {
    pub(crate) fn new(callback: &'a (dyn Fn(Progress) + Send + Sync), total: Option<u64>) -> Self {
        Reporter {
            callback,
            total,
            last: None,
            last_value: 0,
        }
    }

    /// Reports `read` if enough time has passed since the previous report.
    pub(crate) fn update(&mut self, read: u64) {
        if self.last.is_some_and(|at| at.elapsed() < INTERVAL) {
            return;
        }
        self.emit(read);
    }

    /// Reports `read` now (the start, or the end of the transfer phase).
    pub(crate) fn force(&mut self, read: u64) {
        self.emit(read);
    }

    fn emit(&mut self, read: u64) {
        let read = read.max(self.last_value);
        self.last_value = read;
        self.last = Some(Instant::now());
        (self.callback)(Progress {
            read_bytes: read,
            total_bytes: self.total,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(read: u64, total: Option<u64>) -> String {
        Progress {
            read_bytes: read,
            total_bytes: total,
        }
        .cdi_progress()
    }

    #[test]
    fn renders_as_cdi_does() {
        assert_eq!(p(10, None), "N/A");
        assert_eq!(p(10, Some(0)), "N/A");
        assert_eq!(p(0, Some(1000)), "0.00%");
        assert_eq!(p(452, Some(1000)), "45.20%");
        assert_eq!(p(1, Some(3)), "33.33%");
        assert_eq!(p(2, Some(3)), "66.66%");
        assert_eq!(p(999_999, Some(1_000_000)), "99.99%");
        assert_eq!(p(1000, Some(1000)), "100.00%");
        assert_eq!(p(2000, Some(1000)), "100.00%");
    }

    #[test]
    fn reporter_throttles_and_never_goes_down() {
        let seen = std::sync::Mutex::new(Vec::new());
        let cb = |p: Progress| seen.lock().unwrap().push(p.read_bytes);
        let mut r = Reporter::new(&cb, Some(100));
        r.force(0);
        for i in 1..50 {
            r.update(i);
        }
        // Skipped updates are not reported; a forced one is.
        r.force(30);
        r.force(100);
        // Never down, even when forced.
        r.force(50);
        assert_eq!(*seen.lock().unwrap(), vec![0, 30, 100, 100]);
        std::thread::sleep(INTERVAL);
        r.update(101);
        assert_eq!(seen.lock().unwrap().last(), Some(&101));
    }
}
