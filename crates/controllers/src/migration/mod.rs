//! The migration controller (virt-controller's part of a live migration): it takes each
//! VirtualMachineInstanceMigration through KubeVirt's phases — Pending, Scheduling
//! (a target node chosen), Scheduled, PreparingTarget (the VMI handed to the nodes through
//! its `status.migrationState`), TargetReady, Running, then Succeeded or Failed — while
//! the node agents move the guest. It enforces KubeVirt's limits, aborts a migration
//! whose object is deleted, copies the VMI's migration state onto the finished VMIM, and
//! keeps only the newest finished migrations of each VMI.
//!
//! Each pass looks at every object afresh and [`decide`]s one step per migration, a pure
//! function of what the caches hold; the steps are then written.

use std::sync::Arc;
use std::time::Duration;

use kubevirt_api::meta;
use kubevirt_api::model::config::KubeVirt;
use kubevirt_api::model::vmi::VmiSpec;
use kubevirt_api::model::{
    MigrationPhase, VirtualMachineInstance, VirtualMachineInstanceMigration, VmiPhase,
};
use kubevirt_api::names::annotations::MIGRATION_UNSCHEDULABLE_TIMEOUT;
use kubevirt_api::names::finalizers::MIGRATION as FINALIZER;
use serde_json::{json, Value};

#[cfg(test)]
use crate::scheduler::Resources;
use crate::scheduler::{choose_except, NodeView};

const MANAGER: &str = "virt-controller";

/// KubeVirt's defaults (`KubeVirt.spec.configuration.migrations`).
pub const PARALLEL_MIGRATIONS_PER_CLUSTER: usize = 5;
pub const PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE: usize = 2;
/// Finished migrations kept per VMI.
pub const FINISHED_KEPT: usize = 5;
/// How long a migration may find no target before it fails (KubeVirt's unschedulable
/// target pod timeout).
pub const UNSCHEDULABLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

pub const UNSCHEDULABLE: &str = "TargetUnschedulable";
pub const ABORT_REQUESTED: &str = "migrationAbortRequested";

/// Signs a migration's TLS credentials for a target reached at the given hosts: file
/// names as QEMU's `tls-creds-x509` reads them, and their PEM text.
pub type IssueCredentials =
    Arc<dyn Fn(&[String]) -> Result<Vec<(&'static str, String)>, String> + Send + Sync>;

/// What the controller knows besides the migration itself.
pub struct View<'a> {
    pub vmi: Option<&'a VirtualMachineInstance>,
    /// The nodes, each with what it has left (VMIs and incoming migrations counted).
    pub nodes: &'a [NodeView],
    /// Migrations past Pending and not final, other than this one: (uid, source node).
    pub active: &'a [(String, String)],
    /// Seconds since the migration first found no target (`None`: it has one).
    pub unschedulable_for: Option<Duration>,
    /// `spec.configuration.migrations` in force (KubeVirt's defaults merged with the
    /// cluster's KubeVirt object).
    pub configuration: &'a Value,
}

/// One step for a migration.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Wait,
    /// Enter `phase`, with these fields merged into the VMIM's status.
    Enter {
        phase: MigrationPhase,
        status: Value,
    },
    /// Stay in the phase, with these status fields (a target found or lost).
    Update {
        status: Value,
    },
    /// Hand the VMI to the nodes, then enter PreparingTarget.
    HandOff {
        source: String,
        target: String,
    },
    /// Ask the source to cancel (the migration object was deleted while it runs).
    RequestAbort,
    /// The target node is gone before the guest moved: fail the VMI's migration state.
    TargetDown {
        node: String,
    },
    /// Final: copy the VMI's migration state (when it is ours) and remove the finalizer.
    Finalize {
        state: Option<Box<kubevirt_api::model::MigrationState>>,
    },
}

fn fail(reason: &str) -> Step {
    Step::Enter {
        phase: MigrationPhase::Failed,
        status: json!({"migrationState": {"failed": true, "completed": true, "failureReason": reason}}),
    }
}

fn node_ready(nodes: &[NodeView], name: &str) -> bool {
    nodes.iter().any(|(n, node, _)| n == name && node.ready())
}

/// The VMI's spec as the scheduler should see it for the target: its own node selector
/// plus the migration's `addedNodeSelector` (the VMI's keys win).
fn for_target(vmi: &VirtualMachineInstance, vmim: &VirtualMachineInstanceMigration) -> VmiSpec {
    let mut spec = vmi.spec.clone();
    if let Some(added) = &vmim.spec.added_node_selector {
        let selector = spec.node_selector.get_or_insert_with(Default::default);
        for (k, v) in added {
            selector.entry(k.clone()).or_insert(v.clone());
        }
    }
    spec
}

/// The next step of `vmim`.
pub fn decide(vmim: &VirtualMachineInstanceMigration, view: &View) -> Step {
    let phase = vmim.phase();
    let uid = vmim.uid();
    let vmi_state = view.vmi.and_then(|v| v.migration_state());
    let ours = vmi_state.filter(|s| s.migration_uid.as_deref() == Some(uid));
    if phase.is_final() {
        let finalizers = vmim.metadata.finalizers.as_deref().unwrap_or_default();
        if finalizers.iter().any(|f| f == FINALIZER) {
            // The VMI's state, copied once (with the reason this controller gave, when the
            // nodes gave none); then the finalizer goes.
            let own = vmim.status.migration_state.as_ref();
            let state = ours.map(|s| {
                let mut state = s.clone();
                if state.failure_reason.is_none() {
                    state.failure_reason = own.and_then(|o| o.failure_reason.clone());
                }
                state
            });
            let state = state.filter(|s| Some(s) != own).map(Box::new);
            return Step::Finalize { state };
        }
        return Step::Wait;
    }
    let deleted = vmim.metadata.deletion_timestamp.is_some();
    if deleted && !phase.handed_off() {
        return Step::Enter {
            phase: MigrationPhase::Failed,
            status: json!({
                "conditions": [{"type": ABORT_REQUESTED, "status": "True", "reason": "",
                                "message": "", "lastTransitionTime": meta::now()}],
                "migrationState": {"failed": true, "completed": true,
                                   "failureReason": "Migration failed due to being canceled"}}),
        };
    }
    let Some(vmi) = view.vmi else {
        return fail("Migration failed because vmi does not exist.");
    };
    if vmi.phase().is_final() || vmi.metadata.deletion_timestamp.is_some() {
        return fail("Migration failed vmi shutdown during migration.");
    }
    let source = vmi.node_name().unwrap_or("").to_string();
    let target_of = |vmim: &VirtualMachineInstanceMigration| {
        vmim.status
            .migration_state
            .as_ref()
            .and_then(|s| s.target_node.clone())
    };
    match phase {
        MigrationPhase::Unset => {
            let other = vmi_state.is_some_and(|s| {
                s.in_flight() && s.migration_uid.as_deref().is_some_and(|u| u != uid)
            });
            if other {
                return fail("VMI is not eligible for migration because another migration job is in progress.");
            }
            Step::Enter {
                phase: MigrationPhase::Pending,
                status: json!({}),
            }
        }
        MigrationPhase::Pending => {
            if vmi.phase() != VmiPhase::Running || source.is_empty() {
                return Step::Wait;
            }
            let outbound = view.active.iter().filter(|(_, s)| *s == source).count();
            let limit = |key: &str, default: usize| {
                view.configuration[key]
                    .as_u64()
                    .map_or(default, |n| n as usize)
            };
            if view.active.len()
                >= limit(
                    "parallelMigrationsPerCluster",
                    PARALLEL_MIGRATIONS_PER_CLUSTER,
                )
                || outbound
                    >= limit(
                        "parallelOutboundMigrationsPerNode",
                        PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE,
                    )
            {
                return Step::Wait;
            }
            Step::Enter {
                phase: MigrationPhase::Scheduling,
                status: target_status(vmim, vmi, &source, view),
            }
        }
        MigrationPhase::Scheduling => match target_of(vmim) {
            Some(target) if node_ready(view.nodes, &target) => Step::Enter {
                phase: MigrationPhase::Scheduled,
                status: json!({}),
            },
            _ => {
                let status = target_status(vmim, vmi, &source, view);
                let why = status
                    .pointer("/conditions/0/message")
                    .and_then(Value::as_str);
                if status.pointer("/migrationState/targetNode").is_none() {
                    let timeout = vmim
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(MIGRATION_UNSCHEDULABLE_TIMEOUT))
                        .and_then(|s| s.parse::<u64>().ok())
                        .map_or(UNSCHEDULABLE_TIMEOUT, Duration::from_secs);
                    if view.unschedulable_for.is_some_and(|d| d >= timeout) {
                        return fail(&format!(
                            "Migration target for VMI {} was unschedulable for {} seconds: {}",
                            vmi.name(),
                            timeout.as_secs(),
                            why.unwrap_or("")
                        ));
                    }
                }
                let own_state = serde_json::to_value(&vmim.status.migration_state).ok();
                let own_why =
                    kubevirt_api::model::object::find(&vmim.status.conditions, UNSCHEDULABLE)
                        .map(|c| c.message());
                let same = own_state.as_ref() == status.get("migrationState") && own_why == why;
                if same {
                    Step::Wait
                } else {
                    Step::Update { status }
                }
            }
        },
        MigrationPhase::Scheduled => Step::HandOff {
            source,
            target: target_of(vmim).unwrap_or_default(),
        },
        MigrationPhase::PreparingTarget | MigrationPhase::TargetReady | MigrationPhase::Running => {
            let Some(state) = ours else {
                return fail(
                    if vmi_state.and_then(|s| s.migration_uid.as_ref()).is_some() {
                        "VMI's migration state was taken over by another migration job during active migration."
                    } else {
                        "VMI's migration state was cleared during the active migration."
                    },
                );
            };
            if state.failed == Some(true) {
                let reason = state
                    .failure_reason
                    .clone()
                    .unwrap_or_else(|| "source node reported migration failed".into());
                return Step::Enter {
                    phase: MigrationPhase::Failed,
                    status: json!({"migrationState": {"failed": true, "completed": true, "failureReason": reason}}),
                };
            }
            let target = state.target_node.clone().unwrap_or_default();
            if state.completed == Some(true) && source == target {
                return Step::Enter {
                    phase: MigrationPhase::Succeeded,
                    status: json!({}),
                };
            }
            if !node_ready(view.nodes, &target) {
                return Step::TargetDown { node: target };
            }
            if deleted && state.abort_requested != Some(true) && state.completed != Some(true) {
                return Step::RequestAbort;
            }
            let next = match phase {
                MigrationPhase::PreparingTarget if state.target_node_address.is_some() => {
                    Some(MigrationPhase::TargetReady)
                }
                MigrationPhase::TargetReady if state.start_timestamp.is_some() => {
                    Some(MigrationPhase::Running)
                }
                _ => None,
            };
            match next {
                Some(phase) => Step::Enter {
                    phase,
                    status: json!({}),
                },
                None => Step::Wait,
            }
        }
        MigrationPhase::Succeeded | MigrationPhase::Failed => Step::Wait,
    }
}

/// `status.migrationState` naming the chosen target, or a condition saying why there is
/// none.
fn target_status(
    vmim: &VirtualMachineInstanceMigration,
    vmi: &VirtualMachineInstance,
    source: &str,
    view: &View,
) -> Value {
    match choose_except(&for_target(vmi, vmim), view.nodes, Some(source)) {
        Ok(target) => {
            json!({"migrationState": {"sourceNode": source, "targetNode": target}, "conditions": []})
        }
        Err(message) => json!({
            "migrationState": {"sourceNode": source},
            "conditions": [{"type": UNSCHEDULABLE, "status": "True", "reason": "Unschedulable",
                            "message": message, "lastTransitionTime": meta::now()}]}),
    }
}

/// `spec.configuration.migrations` in force: KubeVirt's defaults, overridden by what the
/// `kubevirt/kubevirt` object sets.
pub fn effective_configuration(kubevirt: Option<&KubeVirt>) -> Value {
    let mut config = configuration();
    if let Some(set) = kubevirt
        .and_then(|kv| kv.spec.configuration.as_ref())
        .and_then(|c| c.migrations.as_ref())
        .and_then(Value::as_object)
    {
        for (k, v) in set {
            config[k] = v.clone();
        }
    }
    config
}

/// The migration settings frozen into a migration at hand-off: KubeVirt's defaults, but
/// for `allowAutoConverge`, on here: QEMU throttles only a guest that dirties memory faster
/// than it is sent, so a migration that would not converge escalates by itself (a
/// cluster's KubeVirt object may still turn it off).
fn configuration() -> Value {
    json!({
        "bandwidthPerMigration": "0Mi",
        "completionTimeoutPerGiB": 150,
        "progressTimeout": 150,
        "parallelMigrationsPerCluster": PARALLEL_MIGRATIONS_PER_CLUSTER,
        "parallelOutboundMigrationsPerNode": PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE,
        "allowAutoConverge": true,
        "allowPostCopy": false,
        "disableTLS": false,
    })
}

mod controller;
mod policy;

pub(crate) use controller::reflect;
pub use controller::run;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod world;
