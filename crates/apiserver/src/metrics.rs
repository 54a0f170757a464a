//! The server's `/metrics`: kube-apiserver's request metrics (kept as requests are
//! served), and at each scrape the store's object counts and KubeVirt's cluster-level
//! series (`kubevirt_vmi_info`, `kubevirt_vm_info`, migration results and counts), read
//! from the store. `kubevirt_vmi_phase_transition_time_from_creation_seconds` is observed
//! by a watch of the VMIs, as virt-controller observes it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry as Metrics;
use serde::Deserialize;
use serde_json::Value;
use store::{EventKind, ListOptions, Store};

use crate::registry::Registry;
use crate::request::{RequestInfo, Target, Verb};

/// kube-apiserver's `apiserver_request_duration_seconds` buckets.
const REQUEST_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];
/// KubeVirt's phase transition buckets.
const PHASE_BUCKETS: [f64; 17] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0,
    1200.0, 1800.0,
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
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
    phase_transitions: Family<PhaseLabels, Histogram>,
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
        let phase_transitions = Family::<PhaseLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(PHASE_BUCKETS)) as fn() -> Histogram,
        );
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
        metrics.register(
            "kubevirt_vmi_phase_transition_time_from_creation_seconds",
            "Histogram of VM phase transitions duration from creation time in seconds",
            phase_transitions.clone(),
        );
        ServerMetrics {
            enabled,
            metrics,
            requests,
            durations,
            inflight,
            longrunning,
            phase_transitions,
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
        storage_objects(registry, &mut now).await;
        kubevirt_series(registry, &mut now).await;
        metrics::render_all(&[&self.metrics, &now], accept)
    }

    /// Observes each VMI's phase transitions as they are written, until the process ends.
    pub fn follow_vmi_phases(self: &Arc<Self>, store: Arc<dyn Store>) {
        if !self.enabled {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let mut seen: HashMap<String, HashSet<String>> = HashMap::new();
            let mut backoff = Duration::from_millis(200);
            loop {
                match this.follow_once(store.as_ref(), &mut seen).await {
                    Ok(()) => backoff = Duration::from_millis(200),
                    Err(e) => {
                        tracing::warn!("metrics: following VMI phases: {e}; again in {backoff:?}");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                    }
                }
            }
        });
    }

    /// Lists the VMIs (their phases so far are not observed again), then watches them.
    async fn follow_once(
        &self,
        store: &dyn Store,
        seen: &mut HashMap<String, HashSet<String>>,
    ) -> Result<(), store::StoreError> {
        let prefix = Registry::resource_prefix(&kubevirt_api::resources::VIRTUAL_MACHINE_INSTANCE);
        let listed = store.list(&prefix, ListOptions::default()).await?;
        seen.clear();
        for kv in &listed.items {
            if let Ok(vmi) = serde_json::from_slice::<VmiPhases>(&kv.value) {
                seen.insert(
                    vmi.metadata.uid.clone(),
                    vmi.phases().map(|(p, _)| p).collect(),
                );
            }
        }
        let mut watch = store.watch(&prefix, listed.revision).await?;
        while let Some(event) = watch.next().await {
            let event = event?;
            let Ok(vmi) = serde_json::from_slice::<VmiPhases>(&event.kv.value) else {
                continue;
            };
            if event.kind == EventKind::Delete {
                seen.remove(&vmi.metadata.uid);
                continue;
            }
            let known = seen.entry(vmi.metadata.uid.clone()).or_default();
            let created = vmi
                .metadata
                .creation_timestamp
                .as_deref()
                .and_then(parse_time);
            for (phase, at) in vmi.phases() {
                if known.insert(phase.clone()) {
                    if let (Some(created), Some(at)) = (created, parse_time(&at)) {
                        let seconds = (at - created).num_milliseconds().max(0) as f64 / 1000.0;
                        self.phase_transitions
                            .get_or_create(&PhaseLabels { phase })
                            .observe(seconds);
                    }
                }
            }
        }
        Ok(())
    }
}

fn parse_time(text: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(text).ok()
}

/// What the phase watch reads of a VMI (the rest is skipped while parsing).
#[derive(Deserialize)]
struct VmiPhases {
    metadata: PhasesMeta,
    #[serde(default)]
    status: PhasesStatus,
}

#[derive(Deserialize)]
struct PhasesMeta {
    #[serde(default)]
    uid: String,
    #[serde(rename = "creationTimestamp")]
    creation_timestamp: Option<String>,
}

#[derive(Deserialize, Default)]
struct PhasesStatus {
    #[serde(rename = "phaseTransitionTimestamps", default)]
    transitions: Vec<PhaseTransition>,
}

#[derive(Deserialize)]
struct PhaseTransition {
    #[serde(default)]
    phase: String,
    #[serde(rename = "phaseTransitionTimestamp", default)]
    at: String,
}

impl VmiPhases {
    fn phases(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.status
            .transitions
            .iter()
            .map(|t| (t.phase.clone(), t.at.clone()))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

/// `apiserver_storage_objects`: how many objects of each kind the store holds.
async fn storage_objects(registry: &Registry, out: &mut Metrics) {
    let objects = Family::<ResourceLabels, Gauge>::default();
    let mut counted = HashSet::new();
    for reg in registry.registrations() {
        let prefix = Registry::resource_prefix(reg.info);
        // Two views of one kind (Events) are counted once, under the stored one.
        if !counted.insert(prefix.clone()) || reg.info.group == crate::events::GROUP {
            continue;
        }
        let one = ListOptions {
            limit: Some(1),
            ..ListOptions::default()
        };
        match registry.store.list(&prefix, one).await {
            Ok(listed) => {
                let resource = if reg.info.group.is_empty() {
                    reg.info.plural.to_string()
                } else {
                    format!("{}.{}", reg.info.plural, reg.info.group)
                };
                objects
                    .get_or_create(&ResourceLabels { resource })
                    .set((listed.items.len() + listed.remaining) as i64);
            }
            Err(e) => tracing::warn!("metrics: counting {prefix}: {e}"),
        }
    }
    out.register(
        "apiserver_storage_objects",
        "Number of stored objects at the time of last check split by kind",
        objects,
    );
}

/// Every stored object under `prefix`, decoded.
async fn stored(registry: &Registry, prefix: &str) -> Vec<Value> {
    match registry.store.list(prefix, ListOptions::default()).await {
        Ok(listed) => listed
            .items
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect(),
        Err(e) => {
            tracing::warn!("metrics: reading {prefix}: {e}");
            Vec::new()
        }
    }
}

fn text<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// An annotation KubeVirt reads a VM's os, workload and flavor from, or `<none>`.
fn template_annotation(obj: &Value, pointer: &str, key: &str) -> String {
    obj.pointer(pointer)
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .unwrap_or("<none>")
        .to_string()
}

fn labels(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// KubeVirt's virt-controller series: `kubevirt_vmi_info`, `kubevirt_vm_info`, and the
/// migrations' results, times and counts by phase.
async fn kubevirt_series(registry: &Registry, out: &mut Metrics) {
    use kubevirt_api::resources::{
        VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, VIRTUAL_MACHINE_INSTANCE_MIGRATION,
    };
    let vmi_info = Family::<Vec<(String, String)>, Gauge>::default();
    for vmi in stored(
        registry,
        &Registry::resource_prefix(&VIRTUAL_MACHINE_INSTANCE),
    )
    .await
    {
        let name = text(&vmi, "/metadata/name");
        let annotations = "/metadata/annotations";
        let guest = |field: &str| text(&vmi, &format!("/status/guestOSInfo/{field}")).to_string();
        let evictable = vmi
            .pointer("/spec/evictionStrategy")
            .and_then(Value::as_str)
            .is_some_and(|s| s == "LiveMigrate" || s == "External");
        vmi_info
            .get_or_create(&labels(&[
                ("node", text(&vmi, "/status/nodeName").to_string()),
                ("namespace", text(&vmi, "/metadata/namespace").to_string()),
                ("name", name.to_string()),
                ("phase", text(&vmi, "/status/phase").to_lowercase()),
                (
                    "os",
                    template_annotation(&vmi, annotations, "vm.kubevirt.io/os"),
                ),
                (
                    "workload",
                    template_annotation(&vmi, annotations, "vm.kubevirt.io/workload"),
                ),
                (
                    "flavor",
                    template_annotation(&vmi, annotations, "vm.kubevirt.io/flavor"),
                ),
                (
                    "instance_type",
                    template_annotation(&vmi, annotations, "kubevirt.io/cluster-instancetype-name"),
                ),
                (
                    "preference",
                    template_annotation(&vmi, annotations, "kubevirt.io/cluster-preference-name"),
                ),
                ("guest_os_kernel_release", guest("kernelRelease")),
                ("guest_os_machine", guest("machine")),
                (
                    "guest_os_arch",
                    text(&vmi, "/spec/architecture").to_string(),
                ),
                ("guest_os_name", guest("name")),
                ("guest_os_version_id", guest("versionId")),
                ("evictable", evictable.to_string()),
                ("outdated", "false".into()),
                (
                    "vmi_pod",
                    match text(&vmi, "/status/nodeName") {
                        "" => String::new(),
                        node => kubevirt_api::names::launcher_pod(
                            name,
                            text(&vmi, "/metadata/uid"),
                            node,
                        ),
                    },
                ),
            ]))
            .set(1);
    }
    out.register(
        "kubevirt_vmi_info",
        "Information about VirtualMachineInstances",
        vmi_info,
    );

    let vm_info = Family::<Vec<(String, String)>, Gauge>::default();
    for vm in stored(registry, &Registry::resource_prefix(&VIRTUAL_MACHINE)).await {
        let annotations = "/spec/template/metadata/annotations";
        let status = text(&vm, "/status/printableStatus").to_lowercase();
        let group = match status.as_str() {
            "running" => "running",
            "starting" | "provisioning" | "waitingforvolumebinding" => "starting",
            "migrating" => "migrating",
            "stopped" | "paused" | "stopping" | "terminating" | "" => "non_running",
            _ => "error",
        };
        vm_info
            .get_or_create(&labels(&[
                ("name", text(&vm, "/metadata/name").to_string()),
                ("namespace", text(&vm, "/metadata/namespace").to_string()),
                (
                    "os",
                    template_annotation(&vm, annotations, "vm.kubevirt.io/os"),
                ),
                (
                    "workload",
                    template_annotation(&vm, annotations, "vm.kubevirt.io/workload"),
                ),
                (
                    "flavor",
                    template_annotation(&vm, annotations, "vm.kubevirt.io/flavor"),
                ),
                (
                    "machine_type",
                    text(&vm, "/spec/template/spec/domain/machine/type").to_string(),
                ),
                (
                    "instance_type",
                    text(&vm, "/spec/instancetype/name").to_string(),
                ),
                ("preference", text(&vm, "/spec/preference/name").to_string()),
                ("status", status.clone()),
                ("status_group", group.to_string()),
            ]))
            .set(1);
    }
    out.register(
        "kubevirt_vm_info",
        "Information about Virtual Machines",
        vm_info,
    );

    const BUCKETS: [&str; 4] = ["pending", "scheduling", "running", "unset"];
    let mut in_phase = [0i64; 4];
    let succeeded = Family::<Vec<(String, String)>, Gauge>::default();
    let failed = Family::<Vec<(String, String)>, Gauge>::default();
    let started =
        Family::<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let ended =
        Family::<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    for vmim in stored(
        registry,
        &Registry::resource_prefix(&VIRTUAL_MACHINE_INSTANCE_MIGRATION),
    )
    .await
    {
        let phase = text(&vmim, "/status/phase");
        let bucket = match phase {
            "" => Some("unset"),
            "Pending" => Some("pending"),
            "Scheduling" | "Scheduled" | "PreparingTarget" | "TargetReady" => Some("scheduling"),
            "Running" => Some("running"),
            _ => None,
        };
        if let Some(i) = bucket.and_then(|b| BUCKETS.iter().position(|x| *x == b)) {
            in_phase[i] += 1;
        }
        let namespace = text(&vmim, "/metadata/namespace").to_string();
        let vmi = text(&vmim, "/spec/vmiName").to_string();
        let name = text(&vmim, "/metadata/name").to_string();
        let result = labels(&[
            ("vmi", vmi.clone()),
            ("vmim", name.clone()),
            ("namespace", namespace.clone()),
        ]);
        match phase {
            "Succeeded" => succeeded.get_or_create(&result).set(1),
            "Failed" => failed.get_or_create(&result).set(1),
            _ => 0,
        };
        let state = "/status/migrationState";
        let node = text(&vmim, &format!("{state}/sourceNode")).to_string();
        let timing = labels(&[
            ("node", node),
            ("namespace", namespace),
            ("name", vmi),
            ("migration_name", name),
        ]);
        if let Some(at) = parse_time(text(&vmim, &format!("{state}/startTimestamp"))) {
            started
                .get_or_create(&timing)
                .set(at.timestamp_millis() as f64 / 1000.0);
        }
        if let Some(at) = parse_time(text(&vmim, &format!("{state}/endTimestamp"))) {
            let mut with_status = timing.clone();
            with_status.push(("status".into(), phase.to_lowercase()));
            ended
                .get_or_create(&with_status)
                .set(at.timestamp_millis() as f64 / 1000.0);
        }
    }
    for (bucket, count) in BUCKETS.into_iter().zip(in_phase) {
        let gauge: Gauge = Gauge::default();
        gauge.set(count);
        out.register(
            format!("kubevirt_vmi_migrations_in_{bucket}_phase"),
            format!("Number of current {bucket} migrations"),
            gauge,
        );
    }
    out.register(
        "kubevirt_vmi_migration_succeeded",
        "Indicates if the VMI migration succeeded",
        succeeded,
    );
    out.register(
        "kubevirt_vmi_migration_failed",
        "Indicates if the VMI migration failed",
        failed,
    );
    out.register(
        "kubevirt_vmi_migration_start_time_seconds",
        "The time at which the migration started",
        started,
    );
    out.register(
        "kubevirt_vmi_migration_end_time_seconds",
        "The time at which the migration ended",
        ended,
    );
}
