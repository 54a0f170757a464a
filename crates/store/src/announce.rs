//! Writes announced before they reach the store, so a group-committing backend can wait a
//! moment for the ones that are about to arrive instead of syncing the disk without them.
//!
//! The API server runs each mutating request inside [`WriteGauge::announce`]; the request
//! counts as *preparing* until its first write reaches the store ([`WriteGauge::arrived`],
//! called by the backend once the write is queued) or it ends without one. The backend's
//! writer waits in [`WriteGauge::linger`], which the last arrival ends: the writer is woken
//! once per batch rather than once per write.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Instant;

tokio::task_local! {
    static ANNOUNCED: Announcement;
}

/// How many requests are preparing a write right now.
#[derive(Clone, Debug, Default)]
pub struct WriteGauge(Arc<Gauge>);

#[derive(Debug, Default)]
struct Gauge {
    preparing: AtomicUsize,
    /// Whether the writer is in `linger`, and which thread it is.
    lingering: AtomicBool,
    writer: OnceLock<Thread>,
}

impl WriteGauge {
    pub fn preparing(&self) -> usize {
        self.0.preparing.load(Ordering::SeqCst)
    }

    /// Runs `request` counted as preparing a write, until its first write arrives.
    pub async fn announce<F: Future>(&self, request: F) -> F::Output {
        self.0.preparing.fetch_add(1, Ordering::SeqCst);
        let announcement = Announcement {
            gauge: self.clone(),
            pending: AtomicBool::new(true),
        };
        ANNOUNCED.scope(announcement, request).await
    }

    /// Marks the calling task's announced write as arrived; a backend calls this once it
    /// has queued the write. Does nothing outside [`WriteGauge::announce`] or after the
    /// first call.
    pub fn arrived() {
        let _ = ANNOUNCED.try_with(Announcement::settle);
    }

    /// Blocks the calling thread (always the same one: the backend's writer) until nothing
    /// is preparing or `deadline` passes.
    pub fn linger(&self, deadline: Instant) {
        let gauge = &*self.0;
        gauge.writer.get_or_init(std::thread::current);
        // SeqCst on both sides: either the last arrival sees `lingering` and unparks, or
        // this thread sees the count at zero and does not park.
        gauge.lingering.store(true, Ordering::SeqCst);
        while self.preparing() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
        gauge.lingering.store(false, Ordering::SeqCst);
    }
}

struct Announcement {
    gauge: WriteGauge,
    pending: AtomicBool,
}

impl Announcement {
    fn settle(&self) {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let gauge = &*self.gauge.0;
        if gauge.preparing.fetch_sub(1, Ordering::SeqCst) == 1
            && gauge.lingering.load(Ordering::SeqCst)
        {
            if let Some(writer) = gauge.writer.get() {
                writer.unpark();
            }
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_last_arrival_ends_the_writers_wait() {
        let gauge = WriteGauge::default();
        let (go, started) = tokio::sync::oneshot::channel();
        let request = {
            let gauge = gauge.clone();
            tokio::spawn(async move {
                let inner = gauge.clone();
                gauge
                    .announce(async move {
                        let _ = started.await;
                        WriteGauge::arrived();
                        inner.preparing()
                    })
                    .await
            })
        };
        while gauge.preparing() == 0 {
            tokio::task::yield_now().await;
        }
        // The writer may linger for a minute: it returns before that only if the arrival
        // ends its wait.
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let writer = {
            let gauge = gauge.clone();
            std::thread::spawn(move || {
                gauge.linger(deadline);
                (gauge.preparing(), Instant::now() < deadline)
            })
        };
        let _ = go.send(());
        assert_eq!(request.await.unwrap(), 0);
        assert_eq!(writer.join().unwrap(), (0, true));
    }

    #[test]
    fn lingering_with_nothing_preparing_returns_at_once() {
        let gauge = WriteGauge::default();
        gauge.linger(Instant::now() + std::time::Duration::from_secs(3600));
        assert_eq!(gauge.preparing(), 0);
    }
}
