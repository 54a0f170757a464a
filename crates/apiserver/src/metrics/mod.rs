//! The server's `/metrics`: kube-apiserver's request metrics (kept as requests are
//! served), and at each scrape the store's object counts and KubeVirt's cluster-level
//! series (`kubevirt_vmi_info`, `kubevirt_vm_info`, migration results and counts), read
//! from the store (`cluster`); histograms of phase transitions observed by watches
//! (`phases`).

mod cluster;
mod phases;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry as Metrics;
use store::Store;

use cluster::{kubevirt_series, storage_objects};
use phases::PhaseHistograms;

use crate::registry::Registry;
use crate::request::{RequestInfo, Target, Verb};

/// kube-apiserver's `apiserver_request_duration_seconds` buckets.
const REQUEST_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// What kube-apiserver labels a request with.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
}

impl RequestLabels {
    pub fn of(info: &RequestInfo, dry_run: bool) -> (RequestLabels, bool) {
        let (group, version, resource, subresource, scope) = match &info.target {
            Target::Resource(r) => {
                let scope = if r.name.is_some() {
                    "resource"
                } else if r.namespace.is_some() {
                    "namespace"
                } else {
                    "cluster"
                };
                (
                    r.group.clone(),
                    r.version.clone(),
                    r.resource.clone(),
                    r.subresource.clone().unwrap_or_default(),
                    scope.to_string(),
                )
            }
            _ => Default::default(),
        };
        let verb = match &info.verb {
            Verb::Get => "GET",
            Verb::List => "LIST",
            Verb::Watch => "WATCH",
            Verb::Create => "POST",
            Verb::Update => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete | Verb::DeleteCollection => "DELETE",
            Verb::Other(other) => {
                return (
                    Self::named(other, group, version, resource, subresource, scope),
                    dry_run,
                )
            }
        };
        (
            Self::named(verb, group, version, resource, subresource, scope),
            dry_run,
        )
    }

    fn named(
        verb: &str,
        group: String,
        version: String,
        resource: String,
        subresource: String,
        scope: String,
    ) -> RequestLabels {
        RequestLabels {
            verb: verb.to_ascii_uppercase(),
            group,
            version,
            resource,
            subresource,
            scope,
            component: "apiserver".into(),
        }
    }

    /// Whether kube counts it as mutating (`request_kind`).
    fn mutating(&self) -> bool {
        !matches!(self.verb.as_str(), "GET" | "LIST" | "WATCH")
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
    code: String,
    dry_run: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    request_kind: String,
}

/// What kube-apiserver labels a watch's metrics with.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    group: String,
    version: String,
    kind: String,
}

/// Held while a watch is open: counts it among the registered watchers, and its events.
pub struct Watching {
    open: Gauge,
    events: Counter,
}

impl Watching {
    /// One more event sent.
    pub fn sent(&self) {
        self.events.inc();
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// The server's metrics that live between scrapes.
pub struct ServerMetrics {
    /// Off: nothing is counted and `/metrics` is empty (for measuring what they cost).
    enabled: bool,
    metrics: Metrics,
    requests: Family<CodeLabels, Counter>,
    durations: Family<RequestLabels, Histogram>,
    inflight: Family<KindLabels, Gauge>,
    longrunning: Family<RequestLabels, Gauge>,
    phases: Arc<PhaseHistograms>,
    watchers: Family<WatchLabels, Gauge>,
    watch_events: Family<WatchLabels, Counter>,
}

/// Held while a request is in flight (or a long-running one open): the gauge it counts in.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Default for ServerMetrics {
    fn default() -> Self {
        Self::new(true)
    }
}

impl ServerMetrics {
    pub fn new(enabled: bool) -> ServerMetrics {
        let mut metrics = Metrics::default();
        let requests = Family::<CodeLabels, Counter>::default();
        let durations = Family::<RequestLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(REQUEST_BUCKETS)) as fn() -> Histogram,
        );
        let inflight = Family::<KindLabels, Gauge>::default();
        let longrunning = Family::<RequestLabels, Gauge>::default();
        metrics.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            requests.clone(),
        );
        metrics.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            durations.clone(),
        );
        metrics.register(
            "apiserver_current_inflight_requests",
            "Maximal number of currently used inflight request limit of this apiserver per request kind in last second",
            inflight.clone(),
        );
        metrics.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component",
            longrunning.clone(),
        );
        let phases = PhaseHistograms::register(&mut metrics);
        let watchers = Family::<WatchLabels, Gauge>::default();
        let watch_events = Family::<WatchLabels, Counter>::default();
        metrics.register(
            "apiserver_registered_watchers",
            "Number of currently registered watchers for a given resources",
            watchers.clone(),
        );
        metrics.register(
            "apiserver_watch_events",
            "Number of events sent in watch clients",
            watch_events.clone(),
        );
        ServerMetrics {
            enabled,
            metrics,
            requests,
            durations,
            inflight,
            longrunning,
            phases,
            watchers,
            watch_events,
        }
    }

    /// Counts a request as in flight until the guard is dropped.
    pub fn in_flight(&self, labels: &RequestLabels, long_running: bool) -> InFlight {
        let gauge = if !self.enabled {
            Gauge::default()
        } else if long_running {
            self.longrunning.get_or_create(labels).clone()
        } else {
            let kind = if labels.mutating() {
                "mutating"
            } else {
                "readOnly"
            };
            self.inflight
                .get_or_create(&KindLabels {
                    request_kind: kind.into(),
                })
                .clone()
        };
        gauge.inc();
        InFlight(gauge)
    }

    /// Counts a watch of `info`'s objects as open until the guard drops.
    pub fn watching(&self, info: &apimachinery::resource::ResourceInfo) -> Watching {
        if !self.enabled {
            return Watching {
                open: Gauge::default(),
                events: Counter::default(),
            };
        }
        let labels = WatchLabels {
            group: info.group.into(),
            version: info.version.into(),
            kind: info.kind.into(),
        };
        let open = self.watchers.get_or_create(&labels).clone();
        open.inc();
        Watching {
            open,
            events: self.watch_events.get_or_create(&labels).clone(),
        }
    }

    /// Counts an answered request; its latency unless it is long-running (a watch's
    /// length says nothing about the server).
    pub fn answered(
        &self,
        labels: &RequestLabels,
        dry_run: bool,
        code: u16,
        took: Option<Duration>,
    ) {
        if !self.enabled {
            return;
        }
        self.requests
            .get_or_create(&CodeLabels {
                verb: labels.verb.clone(),
                group: labels.group.clone(),
                version: labels.version.clone(),
                resource: labels.resource.clone(),
                subresource: labels.subresource.clone(),
                scope: labels.scope.clone(),
                component: labels.component.clone(),
                code: code.to_string(),
                dry_run: if dry_run { "All" } else { "" }.into(),
            })
            .inc();
        if let Some(took) = took {
            self.durations
                .get_or_create(labels)
                .observe(took.as_secs_f64());
        }
    }

    /// What a scrape answers: these metrics and those read from the store now.
    pub async fn scrape(
        &self,
        registry: &Registry,
        accept: Option<&str>,
    ) -> (&'static str, String) {
        let mut now = Metrics::default();
        if !self.enabled {
            return metrics::render(&now, accept);
        }
        let dropped: Counter = Counter::default();
        dropped.inc_by(event_recorder::dropped_total());
        now.register(
            "virtplane_events_dropped",
            "Events the server's recorders dropped: their queue full, an object over its rate, or not written after every attempt",
            dropped,
        );
        metrics::process::register_parts(&mut now);
        storage_objects(registry, &mut now).await;
        kubevirt_series(registry, &mut now).await;
        metrics::render_all(&[&self.metrics, &now], accept)
    }

    /// Observes the VMIs' and the VMIMs' phase transitions as they are written.
    pub fn follow_phases(&self, store: Arc<dyn Store>) {
        if self.enabled {
            self.phases.follow(store);
        }
    }
}
