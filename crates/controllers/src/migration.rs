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

use kube::core::{ApiResource, GroupVersionKind};
use kubevirt_api::meta;
use kubevirt_api::model::{MigrationPhase, MigrationState, VmiPhase};
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

pub fn migration_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstanceMigration"),
        "virtualmachineinstancemigrations",
    )
}

/// What the controller knows besides the migration itself.
pub struct View<'a> {
    pub vmi: Option<&'a Value>,
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
        state: Option<Value>,
    },
}

fn fail(reason: &str) -> Step {
    Step::Enter {
        phase: MigrationPhase::Failed,
        status: json!({"migrationState": {"failed": true, "completed": true, "failureReason": reason}}),
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn node_ready(nodes: &[NodeView], name: &str) -> bool {
    nodes.iter().any(|(n, node, _)| {
        n == name
            && node
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
    })
}

/// The VMI as the scheduler should see it for the target: its own node selector plus the
/// migration's `addedNodeSelector` (the VMI's keys win).
fn for_target(vmi: &Value, vmim: &Value) -> Value {
    let mut vmi = vmi.clone();
    if let Some(added) = vmim
        .pointer("/spec/addedNodeSelector")
        .and_then(Value::as_object)
    {
        let selector = &mut vmi["spec"]["nodeSelector"];
        if !selector.is_object() {
            *selector = json!({});
        }
        if let Some(selector) = selector.as_object_mut() {
            for (k, v) in added {
                selector.entry(k.clone()).or_insert(v.clone());
            }
        }
    }
    vmi
}

/// The next step of `vmim`.
pub fn decide(vmim: &Value, view: &View) -> Step {
    let phase = MigrationPhase::of(vmim);
    let uid = str_at(vmim, "/metadata/uid").unwrap_or("");
    let vmi_state = view.vmi.and_then(MigrationState::of);
    let ours = vmi_state
        .as_ref()
        .filter(|s| s.migration_uid.as_deref() == Some(uid));
    if phase.is_final() {
        let finalizers = vmim
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array);
        if finalizers.is_some_and(|f| f.iter().any(|f| f == FINALIZER)) {
            // The VMI's state, copied once (with the reason this controller gave, when the
            // nodes gave none); then the finalizer goes.
            let own = vmim.pointer("/status/migrationState");
            let state = ours
                .and_then(|s| serde_json::to_value(s).ok())
                .map(|mut state| {
                    let reason = own.and_then(|o| o.get("failureReason"));
                    if let (Some(reason), None) = (reason, state.get("failureReason")) {
                        state["failureReason"] = reason.clone();
                    }
                    state
                });
            let state = state.filter(|s| Some(s) != own);
            return Step::Finalize { state };
        }
        return Step::Wait;
    }
    let deleted = vmim
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
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
    if VmiPhase::of(vmi).is_final()
        || vmi
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
    {
        return fail("Migration failed vmi shutdown during migration.");
    }
    let source = str_at(vmi, "/status/nodeName").unwrap_or("").to_string();
    match phase {
        MigrationPhase::Unset => {
            let other = vmi_state.as_ref().is_some_and(|s| {
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
            if VmiPhase::of(vmi) != VmiPhase::Running || source.is_empty() {
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
        MigrationPhase::Scheduling => match str_at(vmim, "/status/migrationState/targetNode") {
            Some(target) if node_ready(view.nodes, target) => Step::Enter {
                phase: MigrationPhase::Scheduled,
                status: json!({}),
            },
            _ => {
                let status = target_status(vmim, vmi, &source, view);
                if status.pointer("/migrationState/targetNode").is_none() {
                    let timeout = vmim
                        .pointer(&format!(
                            "/metadata/annotations/{}",
                            MIGRATION_UNSCHEDULABLE_TIMEOUT.replace('/', "~1")
                        ))
                        .and_then(Value::as_str)
                        .and_then(|s| s.parse::<u64>().ok())
                        .map_or(UNSCHEDULABLE_TIMEOUT, Duration::from_secs);
                    if view.unschedulable_for.is_some_and(|d| d >= timeout) {
                        let why = status
                            .pointer("/conditions/0/message")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        return fail(&format!(
                            "Migration target for VMI {} was unschedulable for {} seconds: {why}",
                            str_at(vmi, "/metadata/name").unwrap_or(""),
                            timeout.as_secs()
                        ));
                    }
                }
                let same = vmim.pointer("/status/migrationState") == status.get("migrationState")
                    && vmim.pointer("/status/conditions/0/message")
                        == status.pointer("/conditions/0/message");
                if same {
                    Step::Wait
                } else {
                    Step::Update { status }
                }
            }
        },
        MigrationPhase::Scheduled => {
            let target = str_at(vmim, "/status/migrationState/targetNode")
                .unwrap_or("")
                .to_string();
            Step::HandOff { source, target }
        }
        MigrationPhase::PreparingTarget | MigrationPhase::TargetReady | MigrationPhase::Running => {
            let Some(state) = ours else {
                return fail(
                    if vmi_state
                        .as_ref()
                        .and_then(|s| s.migration_uid.as_ref())
                        .is_some()
                    {
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
fn target_status(vmim: &Value, vmi: &Value, source: &str, view: &View) -> Value {
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

pub fn kubevirt_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt"),
        "kubevirts",
    )
}

/// KubeVirt's namespace and the name of its configuration object.
pub const KUBEVIRT_NAMESPACE: &str = "kubevirt";
pub const KUBEVIRT_NAME: &str = "kubevirt";

/// `spec.configuration.migrations` in force: KubeVirt's defaults, overridden by what the
/// `kubevirt/kubevirt` object sets.
pub fn effective_configuration(kubevirt: Option<&Value>) -> Value {
    let mut config = configuration();
    if let Some(set) = kubevirt
        .and_then(|kv| kv.pointer("/spec/configuration/migrations"))
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
