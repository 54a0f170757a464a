//! Histograms of phase transitions, observed by watches as virt-controller observes them:
//! `kubevirt_vmi_phase_transition_time_from_creation_seconds` from the VMIs,
//! `kubevirt_vmi_migration_phase_transition_time_from_creation_seconds` from the VMIMs,
//! and, beyond KubeVirt, how long each succeeded migration took by QEMU's count
//! (`kubevirt_vmi_migration_total_time_seconds`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry as Metrics;
use serde::Deserialize;
use store::{EventKind, ListOptions, Store};

use crate::registry::Registry;

/// KubeVirt's phase transition buckets.
const PHASE_BUCKETS: [f64; 17] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0,
    1200.0, 1800.0,
];
/// What a live migration takes, from a small guest between local nodes to a large one.
const MIGRATION_BUCKETS: [f64; 12] = [
    0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

type ByPhase = Family<PhaseLabels, Histogram>;

fn by_phase() -> ByPhase {
    ByPhase::new_with_constructor((|| Histogram::new(PHASE_BUCKETS)) as fn() -> Histogram)
}

/// The histograms, shared by the watches that observe them and the registry that shows them.
pub(super) struct PhaseHistograms {
    vmi: ByPhase,
    migration: ByPhase,
    migration_total: Histogram,
}

impl PhaseHistograms {
    pub(super) fn register(metrics: &mut Metrics) -> Arc<PhaseHistograms> {
        let histograms = PhaseHistograms {
            vmi: by_phase(),
            migration: by_phase(),
            migration_total: Histogram::new(MIGRATION_BUCKETS),
        };
        metrics.register(
            "kubevirt_vmi_phase_transition_time_from_creation_seconds",
            "Histogram of VM phase transitions duration from creation time in seconds",
            histograms.vmi.clone(),
        );
        metrics.register(
            "kubevirt_vmi_migration_phase_transition_time_from_creation_seconds",
            "Histogram of VM migration phase transitions duration from creation time in seconds",
            histograms.migration.clone(),
        );
        metrics.register(
            "kubevirt_vmi_migration_total_time_seconds",
            "Histogram of the time succeeded live migrations took, as QEMU counts it",
            histograms.migration_total.clone(),
        );
        Arc::new(histograms)
    }

    /// Observes the VMIs' and the VMIMs' phase transitions as they are written, until the
    /// process ends.
    pub(super) fn follow(self: &Arc<Self>, store: Arc<dyn Store>) {
        for kind in [Followed::Vmis, Followed::Migrations] {
            let this = self.clone();
            let store = store.clone();
            tokio::spawn(async move {
                let mut seen = HashMap::new();
                let mut backoff = Duration::from_millis(200);
                loop {
                    match this.follow_once(store.as_ref(), kind, &mut seen).await {
                        Ok(()) => backoff = Duration::from_millis(200),
                        Err(e) => {
                            tracing::warn!(
                                "metrics: following the phases of {kind:?}: {e}; again in {backoff:?}"
                            );
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(30));
                        }
                    }
                }
            });
        }
    }

    /// Lists the objects (their phases so far are not observed again), then watches them.
    async fn follow_once(
        &self,
        store: &dyn Store,
        kind: Followed,
        seen: &mut HashMap<String, Seen>,
    ) -> Result<(), store::StoreError> {
        let prefix = Registry::resource_prefix(match kind {
            Followed::Vmis => &kubevirt_api::resources::VIRTUAL_MACHINE_INSTANCE,
            Followed::Migrations => &kubevirt_api::resources::VIRTUAL_MACHINE_INSTANCE_MIGRATION,
        });
        let listed = store.list(&prefix, ListOptions::default()).await?;
        seen.clear();
        for kv in &listed.items {
            if let Ok(object) = serde_json::from_slice::<Phased>(&kv.value) {
                let known = Seen {
                    phases: object.phases().map(|(p, _)| p.to_string()).collect(),
                    timed: object.migration_milliseconds().is_some(),
                };
                seen.insert(object.metadata.uid.clone(), known);
            }
        }
        let mut watch = store.watch(&prefix, listed.revision).await?;
        while let Some(event) = watch.next().await {
            let event = event?;
            let Ok(object) = serde_json::from_slice::<Phased>(&event.kv.value) else {
                continue;
            };
            if event.kind == EventKind::Delete {
                seen.remove(&object.metadata.uid);
                continue;
            }
            let known = seen.entry(object.metadata.uid.clone()).or_default();
            for (phase, at) in object.phases() {
                if !known.phases.insert(phase.to_string()) {
                    continue;
                }
                if let Some(seconds) = object.since_creation(at) {
                    let histogram = match kind {
                        Followed::Vmis => &self.vmi,
                        Followed::Migrations => &self.migration,
                    };
                    histogram
                        .get_or_create(&PhaseLabels {
                            phase: phase.to_string(),
                        })
                        .observe(seconds);
                }
            }
            // A succeeded migration's time, once: its VMIM may learn it after the phase.
            if kind == Followed::Migrations && !known.timed && known.phases.contains("Succeeded") {
                if let Some(took) = object.migration_milliseconds() {
                    known.timed = true;
                    self.migration_total.observe(took as f64 / 1000.0);
                }
            }
        }
        Ok(())
    }
}

/// What was observed of an object so far.
#[derive(Default)]
struct Seen {
    phases: HashSet<String>,
    /// Its migration's time (a VMIM's).
    timed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Followed {
    Vmis,
    Migrations,
}

pub(super) fn parse_time(text: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(text).ok()
}

/// What the phase watches read of a VMI or a VMIM (the rest is skipped while parsing).
#[derive(Deserialize)]
struct Phased {
    metadata: PhasedMeta,
    #[serde(default)]
    status: PhasedStatus,
}

#[derive(Deserialize)]
struct PhasedMeta {
    #[serde(default)]
    uid: String,
    #[serde(rename = "creationTimestamp")]
    creation_timestamp: Option<String>,
}

#[derive(Deserialize, Default)]
struct PhasedStatus {
    #[serde(rename = "phaseTransitionTimestamps", default)]
    transitions: Vec<PhaseTransition>,
    #[serde(rename = "migrationState")]
    migration_state: Option<MigrationDone>,
}

#[derive(Deserialize)]
struct PhaseTransition {
    #[serde(default)]
    phase: String,
    #[serde(rename = "phaseTransitionTimestamp", default)]
    at: String,
}

#[derive(Deserialize)]
struct MigrationDone {
    transfer: Option<MigrationTransfer>,
}

#[derive(Deserialize)]
struct MigrationTransfer {
    #[serde(rename = "totalTimeMilliseconds")]
    total_time_milliseconds: u64,
}

impl Phased {
    fn phases(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.status
            .transitions
            .iter()
            .map(|t| (t.phase.as_str(), t.at.as_str()))
    }

    /// Seconds from the object's creation to `at`.
    fn since_creation(&self, at: &str) -> Option<f64> {
        let created = parse_time(self.metadata.creation_timestamp.as_deref()?)?;
        let at = parse_time(at)?;
        Some((at - created).num_milliseconds().max(0) as f64 / 1000.0)
    }

    /// How long the migration took, as QEMU counted it.
    fn migration_milliseconds(&self) -> Option<u64> {
        let state = self.status.migration_state.as_ref()?;
        Some(state.transfer.as_ref()?.total_time_milliseconds)
    }
}
