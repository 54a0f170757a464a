//! Writes announced before they reach the store, so a group-committing backend can wait a
//! moment for the ones that are about to arrive instead of syncing the disk without them.
//!
//! The API server runs each mutating request inside [`WriteGauge::announce`]; the request
//! counts as *preparing* until its first write reaches the store ([`WriteGauge::arrived`],
//! called by the backend) or it ends without one.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

tokio::task_local! {
    static ANNOUNCED: Announcement;
}

/// How many requests are preparing a write right now.
#[derive(Clone, Debug, Default)]
pub struct WriteGauge(Arc<AtomicUsize>);

impl WriteGauge {
    pub fn preparing(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// Runs `request` counted as preparing a write, until its first write arrives.
    pub async fn announce<F: Future>(&self, request: F) -> F::Output {
        self.0.fetch_add(1, Ordering::AcqRel);
        let announcement = Announcement {
            gauge: self.clone(),
            pending: AtomicBool::new(true),
        };
        ANNOUNCED.scope(announcement, request).await
    }

    /// Marks the calling task's announced write as arrived; a backend calls this as it
    /// queues a write. Does nothing outside [`WriteGauge::announce`] or after the first call.
    pub fn arrived() {
        let _ = ANNOUNCED.try_with(Announcement::settle);
    }
}

struct Announcement {
    gauge: WriteGauge,
    pending: AtomicBool,
}

impl Announcement {
    fn settle(&self) {
        if self.pending.swap(false, Ordering::AcqRel) {
            self.gauge.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Announcement {
    /// A request that ends (or is cancelled) without writing stops counting too.
    fn drop(&mut self) {
        self.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_counts_until_its_first_write_arrives() {
        let gauge = WriteGauge::default();
        let seen = gauge
            .announce(async {
                let before = gauge.preparing();
                WriteGauge::arrived();
                let after_first = gauge.preparing();
                WriteGauge::arrived();
                (before, after_first, gauge.preparing())
            })
            .await;
        assert_eq!(seen, (1, 0, 0));
        assert_eq!(gauge.preparing(), 0);
    }

    #[tokio::test]
    async fn a_request_without_a_write_stops_counting_when_it_ends() {
        let gauge = WriteGauge::default();
        let inner = gauge.announce(async { gauge.preparing() }).await;
        assert_eq!((inner, gauge.preparing()), (1, 0));
        // Outside any announcement, an arrival changes nothing.
        WriteGauge::arrived();
        assert_eq!(gauge.preparing(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_request_stops_counting() {
        let gauge = WriteGauge::default();
        let never = gauge.announce(std::future::pending::<()>());
        let cancelled = tokio::time::timeout(std::time::Duration::from_millis(1), never).await;
        assert!(cancelled.is_err());
        assert_eq!(gauge.preparing(), 0);
    }
}
