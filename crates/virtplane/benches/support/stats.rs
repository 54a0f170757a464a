//! Percentiles of measured durations.
#![allow(dead_code)] // not every bench uses every helper

use std::time::Duration;

/// The `q` quantile (0.0 ..= 1.0, nearest rank) of `sorted`; zero when it is empty.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
