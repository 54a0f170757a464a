//! client-go's work queue metrics for each controller, by its `name`, as far as kube-rs'
//! controller runtime lets them be seen from outside: how long each reconcile took
//! (`workqueue_work_duration_seconds`, whose count is the items processed) and the failed
//! ones requeued with backoff (`workqueue_retries_total`); beside them the reconciles
//! running now (`virtplane_workqueue_processing`, not a kube name). The runtime's own
//! queue (depth, adds) is not visible outside it.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::FutureExt;
use kube::runtime::controller::Action;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Queue {
    name: String,
}

struct Queues {
    work: Family<Queue, Histogram>,
    unfinished: Family<Queue, Gauge>,
    retries: Family<Queue, Counter>,
}

fn queues() -> &'static Queues {
    static QUEUES: OnceLock<Queues> = OnceLock::new();
    QUEUES.get_or_init(|| {
        let queues = Queues {
            // client-go's buckets: 1 µs to 10 s.
            work: Family::new_with_constructor(
                (|| Histogram::new(exponential_buckets(1e-6, 10.0, 8))) as fn() -> Histogram,
            ),
            unfinished: Family::default(),
            retries: Family::default(),
        };
        let (work, unfinished, retries) = (
            queues.work.clone(),
            queues.unfinished.clone(),
            queues.retries.clone(),
        );
        metrics::process::add_part(move |registry| {
            registry.register(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                work.clone(),
            );
            registry.register(
                "virtplane_workqueue_processing",
                "Items being processed now",
                unfinished.clone(),
            );
            registry.register(
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                retries.clone(),
            );
        });
        queues
    })
}

/// `reconcile`, measured as the work of queue `name`.
pub fn measured<K, C, E, F, Fut>(
    name: &str,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<C>) -> BoxFuture<'static, Result<Action, E>>
where
    F: Fn(Arc<K>, Arc<C>) -> Fut,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let queue = Queue { name: name.into() };
    let queues = queues();
    let work = queues.work.get_or_create(&queue).clone();
    let unfinished = queues.unfinished.get_or_create(&queue).clone();
    let retries = queues.retries.get_or_create(&queue).clone();
    move |object, context| {
        let (work, unfinished, retries) = (work.clone(), unfinished.clone(), retries.clone());
        let reconciled = reconcile(object, context);
        async move {
            let began = Instant::now();
            unfinished.inc();
            let result = reconciled.await;
            unfinished.dec();
            work.observe(began.elapsed().as_secs_f64());
            if result.is_err() {
                retries.inc();
            }
            result
        }
        .boxed()
    }
}

/// Whether this process leads `name` (kube's `leader_election_master_status`).
pub fn leading(name: &str, leads: bool) {
    static LEADERS: OnceLock<Family<Queue, Gauge>> = OnceLock::new();
    let leaders = LEADERS.get_or_init(|| {
        let leaders = Family::<Queue, Gauge>::default();
        let shown = leaders.clone();
        metrics::process::add_part(move |registry| {
            registry.register(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease",
                shown.clone(),
            );
        });
        leaders
    });
    leaders
        .get_or_create(&Queue { name: name.into() })
        .set(i64::from(leads));
}
