//! Leader election over a `coordination.k8s.io/v1` Lease, as kube-controller-manager
//! does it: the controllers run on the one server that holds the lease, renewing it every
//! few seconds; another server takes it once it has seen the lease unrenewed for its
//! duration (by its own clock, so the holders' clocks need not agree). A holder that
//! cannot renew in time stops its controllers before anyone else may start theirs.
//!
//! Each term runs the controllers on a runtime of its own, so that losing the lease stops
//! every task they spawned, not only the ones still polled.

use std::future::Future;
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::Client;
use serde_json::{json, Value};

/// Who campaigns for which lease, and how fast.
#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    /// This candidate (`host_random`, kept across restarts of one server).
    pub identity: String,
    /// How long a lease holds unrenewed.
    pub lease_duration: Duration,
    /// How often the holder renews.
    pub renew_interval: Duration,
    /// A holder that has not renewed for this long stops (less than `lease_duration`).
    pub renew_deadline: Duration,
    /// How often a candidate tries to acquire.
    pub retry: Duration,
}

impl Election {
    /// The controller manager's lease in `kube-system`, with failover in about six seconds.
    pub fn controller_manager(identity: String) -> Election {
        Election {
            namespace: "kube-system".into(),
            name: "virtplane-controller-manager".into(),
            identity,
            lease_duration: Duration::from_secs(6),
            renew_interval: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(4),
            retry: Duration::from_secs(1),
        }
    }
}

fn lease_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"),
        "leases",
    )
}

fn micro_time() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// What a candidate last saw of the lease, and when (by its own clock).
struct Observed {
    record: Value,
    at: Instant,
}

/// The candidate's view and its one attempt at a time.
struct Candidate {
    api: Api<DynamicObject>,
    election: Election,
    observed: Option<Observed>,
}

impl Candidate {
    /// kube's `tryAcquireOrRenew`: true when this candidate holds the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let e = &self.election;
        let now = micro_time();
        let Some(current) = self.api.get_opt(&e.name).await? else {
            let lease: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": e.name, "namespace": e.namespace},
                "spec": {"holderIdentity": e.identity,
                         "leaseDurationSeconds": e.lease_duration.as_secs(),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}))
            .map_err(kube::Error::SerdeError)?;
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(err) => Err(err),
            };
        };
        let spec = current.data.get("spec").cloned().unwrap_or(Value::Null);
        let holder = spec["holderIdentity"].as_str().unwrap_or("");
        let ours = holder == e.identity;
        // The record changed since last seen: its holder is alive as of now.
        let record = json!([
            spec["holderIdentity"],
            spec["renewTime"],
            spec["acquireTime"]
        ]);
        if self.observed.as_ref().is_none_or(|o| o.record != record) {
            self.observed = Some(Observed {
                record,
                at: Instant::now(),
            });
        }
        let duration = spec["leaseDurationSeconds"]
            .as_u64()
            .map(Duration::from_secs)
            .unwrap_or(e.lease_duration);
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|o| o.at.elapsed() > duration);
        if !ours && !holder.is_empty() && !expired {
            return Ok(false);
        }
        let mut lease = current.clone();
        let mut new_spec = spec.clone();
        new_spec["holderIdentity"] = json!(e.identity);
        new_spec["leaseDurationSeconds"] = json!(e.lease_duration.as_secs());
        new_spec["renewTime"] = json!(now);
        if !ours {
            new_spec["acquireTime"] = json!(now);
            let transitions = spec["leaseTransitions"].as_u64().unwrap_or(0);
            new_spec["leaseTransitions"] = json!(transitions + 1);
        }
        lease.data["spec"] = new_spec;
        // The resourceVersion read above makes this a compare-and-swap.
        match self
            .api
            .replace(&e.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.observed = None;
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(err) => Err(err),
        }
    }
}

/// Campaigns for the lease for as long as the process runs; while it holds the lease,
/// runs `work()` on a runtime of the term's own, and stops it when the lease is lost.
pub async fn run_elected<W, F>(client: Client, election: Election, work: W)
where
    W: Fn() -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let api = Api::<DynamicObject>::namespaced_with(client, &election.namespace, &lease_resource());
    let mut candidate = Candidate {
        api,
        election: election.clone(),
        observed: None,
    };
    crate::workqueue::leading(&election.name, false);
    loop {
        match candidate.try_acquire_or_renew().await {
            Ok(true) => {}
            Ok(false) => {
                tokio::time::sleep(election.retry).await;
                continue;
            }
            Err(err) => {
                tracing::warn!("leader election: {err}");
                tokio::time::sleep(election.retry).await;
                continue;
            }
        }
        tracing::info!(
            "{} holds lease {}/{}: starting the controllers",
            election.identity,
            election.namespace,
            election.name
        );
        let term = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("controllers")
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(err) => {
                tracing::error!("cannot start the controllers' runtime: {err}");
                tokio::time::sleep(election.retry).await;
                continue;
            }
        };
        let term = Term(Some(term));
        crate::workqueue::leading(&election.name, true);
        term.spawn(work());
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(election.renew_interval).await;
            match candidate.try_acquire_or_renew().await {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => break,
                Err(err) => tracing::warn!("leader election: renewing: {err}"),
            }
            if renewed.elapsed() > election.renew_deadline {
                break;
            }
        }
        tracing::warn!(
            "{} lost lease {}/{}: stopping the controllers",
            election.identity,
            election.namespace,
            election.name
        );
        crate::workqueue::leading(&election.name, false);
        drop(term);
    }
}

/// The runtime of one term: shut down without waiting, also when the election itself is
/// dropped (a runtime may not be dropped where blocking is not allowed).
struct Term(Option<tokio::runtime::Runtime>);

impl Term {
    fn spawn<F: Future<Output = ()> + Send + 'static>(&self, work: F) {
        if let Some(runtime) = &self.0 {
            runtime.spawn(work);
        }
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}
