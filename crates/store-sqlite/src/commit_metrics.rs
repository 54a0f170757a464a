//! How the writer's commits go, for the server's `/metrics`: each commit's time (the
//! transaction and its sync) and how many writes it carried (group commit).

use std::sync::OnceLock;
use std::time::Duration;

use metrics::prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

struct CommitMetrics {
    seconds: Histogram,
    writes: Histogram,
}

fn commits() -> &'static CommitMetrics {
    static COMMITS: OnceLock<CommitMetrics> = OnceLock::new();
    COMMITS.get_or_init(|| {
        let commits = CommitMetrics {
            // 0.1 ms to 1.6 s.
            seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 15)),
            // 1 to 4,096 writes.
            writes: Histogram::new(exponential_buckets(1.0, 2.0, 13)),
        };
        let (seconds, writes) = (commits.seconds.clone(), commits.writes.clone());
        metrics::process::add_part(move |registry| {
            registry.register(
                "virtplane_store_commit_duration_seconds",
                "Time the SQLite store's writer took to commit a batch, its sync included",
                seconds.clone(),
            );
            registry.register(
                "virtplane_store_commit_writes",
                "Writes the SQLite store's writer committed in one batch",
                writes.clone(),
            );
        });
        commits
    })
}

/// A commit of `writes` writes that took `took`.
pub(crate) fn committed(writes: usize, took: Duration) {
    let commits = commits();
    commits.seconds.observe(took.as_secs_f64());
    commits.writes.observe(writes as f64);
}
