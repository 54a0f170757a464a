//! The node agent's two halves of a live migration, as virt-handler splits them. The
//! controller hands a VMI over by writing `status.migrationState` (migrationUid, source
//! and target node) and labelling it with the target node. Then:
//! - the target agent readies the disks and a hypervisor waiting for the guest and
//!   publishes where it listens (`targetNodeAddress`, `targetDirectMigrationNodePorts`);
//! - the source agent moves the guest there (`startTimestamp`), and reports the end
//!   (`completed`, with what moved in `transfer`, or `failed` with the reason);
//! - the target runs the guest and takes the VMI (`nodeName`, `endTimestamp`); the source
//!   then lets its stopped copy go.
//!
//! Either side failing writes `failed`, and the guest runs on where it was: the target
//! keeps the guest paused until the source has let go, so it never runs twice.

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use kubevirt_api::meta::now;
use kubevirt_api::model::vmi::{MigrationState, Transfer, DISK_PORT_ROLE, MIGRATION_PORT_ROLE};
use kubevirt_api::model::VirtualMachineInstance;
use kubevirt_api::names::annotations::PAUSED as PAUSE_ANNOTATION;
use kubevirt_api::names::labels::{MIGRATION_TARGET_NODE, NODE_NAME};
use kubevirt_api::names::migration_tls_secret;
use kubevirt_api::quantity::Quantity;
use qemu::migration::{Progress, Tuning};
use serde_json::{json, Value};

use crate::context::{normal, warning, Context, Wait};
use crate::hypervisor::{Arrival, Hypervisor, Incoming, MigrationSettings, Sending};

const MANAGER: &str = "virt-handler";
/// How long a target waits for the last of a guest the source reports sent.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a target whose QEMU the source's stream ended waits for the source's reason
/// before giving its own (the source may be gone).
const SOURCE_VERDICT_GRACE: Duration = Duration::from_secs(5);

/// KubeVirt's defaults (`KubeVirt.spec.configuration.migrations`).
const DEFAULT_PROGRESS_TIMEOUT: u64 = 150;
const DEFAULT_COMPLETION_TIMEOUT_PER_GIB: u64 = 150;

/// The settings a migration runs with, from the configuration frozen into its state at
/// hand-off, and the guest's memory for the completion timeout (per GiB, rounded up).
pub fn tuning(vmi: &VirtualMachineInstance, state: &MigrationState) -> Tuning {
    let config = state.migration_configuration.clone().unwrap_or(Value::Null);
    let seconds = |key: &str, default: u64| config[key].as_u64().unwrap_or(default);
    let bandwidth = config["bandwidthPerMigration"]
        .as_str()
        .and_then(Quantity::parse)
        .map(Quantity::value)
        .filter(|b| *b > 0)
        .map(|b| b as u64);
    let memory = vmi
        .spec
        .guest_memory()
        .and_then(Quantity::from_json)
        .map_or(0, Quantity::value) as u64;
    let gib = memory.div_ceil(1 << 30).max(1);
    Tuning {
        max_bandwidth: bandwidth,
        downtime_limit: Duration::from_millis(config["maxDowntimeMs"].as_u64().unwrap_or(30)),
        auto_converge: config["allowAutoConverge"] == json!(true),
        post_copy: config["allowPostCopy"] == json!(true),
        // KubeVirt: workload disruption defaults to what post-copy is; without post-copy
        // it means pausing the guest.
        pause_to_converge: config["allowPostCopy"] != json!(true)
            && config
                .get("allowWorkloadDisruption")
                .unwrap_or(&config["allowPostCopy"])
                == &json!(true),
        progress_timeout: Duration::from_secs(seconds("progressTimeout", DEFAULT_PROGRESS_TIMEOUT)),
        completion_timeout: Duration::from_secs(
            seconds(
                "completionTimeoutPerGiB",
                DEFAULT_COMPLETION_TIMEOUT_PER_GIB,
            ) * gib,
        ),
        tls: None,
    }
}

/// How this migration runs: its tuning and, unless the configuration frozen at hand-off
/// turned TLS off, the credentials the controller put in the migration's Secret.
async fn settings(
    ctx: &Context,
    vmi: &VirtualMachineInstance,
    state: &MigrationState,
    uid: &str,
) -> Result<Result<MigrationSettings, String>, kube::Error> {
    let tuning = tuning(vmi, state);
    let config = state.migration_configuration.as_ref();
    if config.is_some_and(|c| c["disableTLS"] == json!(true)) {
        return Ok(Ok(MigrationSettings {
            tuning,
            credentials: None,
        }));
    }
    let name = migration_tls_secret(uid);
    let namespace = vmi.namespace().to_string();
    let Some(files) = crate::volume_sources::read_secret(&ctx.client, &namespace, &name).await?
    else {
        return Ok(Err(format!(
            "the migration's TLS credentials (Secret {namespace}/{name}) do not exist"
        )));
    };
    let credentials = files
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
        .collect();
    Ok(Ok(MigrationSettings {
        tuning,
        credentials: Some(credentials),
    }))
}

/// Merges `state` into the VMI's `status.migrationState` (and `extra` into the VMI)
/// without a resourceVersion guard: the source and the target write different fields of
/// it at the same time, and a merge patch touches only what it names.
async fn write_state(
    ctx: &Context,
    vmi: &VirtualMachineInstance,
    state: Value,
    extra: Value,
) -> Result<(), kube::Error> {
    let api = Api::<VirtualMachineInstance>::namespaced(ctx.client.clone(), vmi.namespace());
    // `extra` may remove fields (a label set to null), so it is the base of the patch.
    let mut body = if extra.is_object() { extra } else { json!({}) };
    if !body["status"].is_object() {
        body["status"] = json!({});
    }
    body["status"]["migrationState"] = state;
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match api
        .patch(&vmi.name_any(), &params, &Patch::Merge(&body))
        .await
    {
        Ok(_) => {
            let state = &body["status"]["migrationState"];
            if state["failed"] == true {
                let uid = vmi
                    .migration_state()
                    .and_then(|m| m.migration_uid.as_deref())
                    .unwrap_or("");
                let reason = state["failureReason"].as_str().unwrap_or("");
                ctx.note(
                    vmi,
                    vec![warning(
                        "Migrated",
                        format!("migration uid {uid} failed. reason:{reason}"),
                    )],
                );
            }
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

fn failure(reason: &str) -> Value {
    json!({"completed": true, "failed": true, "failureReason": reason, "endTimestamp": now()})
}

fn transfer(progress: &Progress) -> Transfer {
    Transfer {
        total_time_milliseconds: progress.total_time_ms,
        downtime_milliseconds: progress.downtime_ms,
        setup_time_milliseconds: progress.setup_time_ms,
        memory_bytes: progress.transferred,
        disk_bytes: progress.disk_copied,
    }
}

/// Where the target listens, from what it published.
fn incoming(state: &MigrationState) -> Option<Incoming> {
    let address = state.target_node_address.clone()?;
    let ports = state.target_direct_migration_node_ports.as_ref()?;
    let port_with = |role: i64| {
        ports
            .iter()
            .find(|(_, r)| **r == role)
            .and_then(|(p, _)| p.parse::<u16>().ok())
    };
    Some(Incoming {
        address,
        migration_port: port_with(MIGRATION_PORT_ROLE)?,
        disk_port: port_with(DISK_PORT_ROLE),
    })
}

fn wants_paused(vmi: &VirtualMachineInstance) -> bool {
    vmi.annotations().get(PAUSE_ANNOTATION).map(String::as_str) == Some("true")
}

/// The source's part, for a running VMI on one of our nodes: `None` when no migration
/// concerns it here, so the agent goes on as usual.
pub async fn source(
    vmi: &VirtualMachineInstance,
    ctx: &Arc<Context>,
    node: &str,
) -> Option<Result<Action, kube::Error>> {
    let state = vmi.migration_state()?;
    let uid = state.migration_uid.clone()?;
    if state.source_node.as_deref() != Some(node) {
        return None;
    }
    let hv = ctx.hypervisor.as_ref();
    let sending = hv.sending(vmi, &uid);
    if !state.in_flight() {
        return match sending {
            // The guest left and the target has not taken the VMI yet: the stopped copy
            // here waits (see `let_go`), it is not a paused guest to report.
            Some(Sending::Done(_)) if state.failed != Some(true) => {
                Some(Ok(Action::requeue(Duration::from_secs(1))))
            }
            // The target could not run what it received: the guest goes on here.
            Some(Sending::Done(_)) => {
                if !wants_paused(vmi) {
                    if let Err(e) = hv.set_paused(vmi, false).await {
                        tracing::warn!("resuming {} after a failed hand-over: {e}", vmi.name_any());
                        return Some(Ok(Action::requeue(Duration::from_secs(1))));
                    }
                }
                tracing::warn!(
                    "{}: the target failed after the guest moved; it runs on here",
                    vmi.name_any()
                );
                hv.cleanup_sending(vmi);
                None
            }
            // Failed by someone else (the controller saw the target node go): stop sending.
            Some(Sending::Moving(_)) => {
                hv.abort_sending(vmi, &uid);
                Some(Ok(Action::requeue(Duration::from_millis(100))))
            }
            Some(Sending::Failed(_)) => {
                hv.cleanup_sending(vmi);
                None
            }
            None => None,
        };
    }
    Some(send(vmi, ctx, hv, &uid, state, sending).await)
}

async fn send(
    vmi: &VirtualMachineInstance,
    ctx: &Arc<Context>,
    hv: &dyn Hypervisor,
    uid: &str,
    state: &MigrationState,
    sending: Option<Sending>,
) -> Result<Action, kube::Error> {
    let aborting = state.abort_requested == Some(true);
    match sending {
        None => {
            if aborting {
                let mut fail = failure(&qemu::migration::Failure::Aborted.to_string());
                fail["abortStatus"] = json!("Succeeded");
                write_state(ctx, vmi, fail, Value::Null).await?;
                return Ok(Action::await_change());
            }
            let Some(to) = incoming(state) else {
                // The target is not ready yet; the guest runs on as usual meanwhile.
                return Ok(Action::requeue(Duration::from_secs(1)));
            };
            let settings = match settings(ctx, vmi, state, uid).await? {
                Ok(settings) => settings,
                Err(e) => {
                    write_state(ctx, vmi, failure(&e), Value::Null).await?;
                    return Ok(Action::await_change());
                }
            };
            match hv.send(vmi, uid, &to, &settings).await {
                Ok(()) => {
                    write_state(
                        ctx,
                        vmi,
                        json!({"startTimestamp": now(), "mode": "PreCopy"}),
                        Value::Null,
                    )
                    .await?;
                    ctx.note(
                        vmi,
                        vec![normal("Migrating", "VirtualMachineInstance is migrating.")],
                    );
                    Ok(Action::requeue(Duration::from_millis(100)))
                }
                Err(e) => {
                    write_state(ctx, vmi, failure(&e), Value::Null).await?;
                    Ok(Action::await_change())
                }
            }
        }
        Some(Sending::Moving(progress)) => {
            if aborting {
                hv.abort_sending(vmi, uid);
                if state.abort_status.is_none() {
                    write_state(ctx, vmi, json!({"abortStatus": "Aborting"}), Value::Null).await?;
                }
            }
            let mode = if progress.post_copy {
                Some("PostCopy")
            } else if progress.paused_guest {
                Some("Paused")
            } else {
                None
            };
            if let Some(mode) = mode.filter(|m| state.mode.as_deref() != Some(*m)) {
                write_state(ctx, vmi, json!({"mode": mode}), Value::Null).await?;
            }
            Ok(Action::requeue(Duration::from_millis(500)))
        }
        Some(Sending::Done(progress)) => {
            let moved = json!({"completed": true, "transfer": transfer(&progress)});
            write_state(ctx, vmi, moved, Value::Null).await?;
            let_go(ctx.clone(), vmi.clone());
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        Some(Sending::Failed(reason)) => {
            let mut fail = failure(&reason);
            if aborting {
                fail["abortStatus"] = json!("Succeeded");
            }
            write_state(ctx, vmi, fail, Value::Null).await?;
            hv.cleanup_sending(vmi);
            Ok(Action::requeue(Duration::from_millis(100)))
        }
    }
}

/// Once the target has taken the VMI (`nodeName` names it), the source's stopped copy
/// goes. The VMI then leaves this agent's watch, so this looks for itself.
fn let_go(ctx: Arc<Context>, vmi: VirtualMachineInstance) {
    tokio::spawn(
        async move {
            let api =
                Api::<VirtualMachineInstance>::namespaced(ctx.client.clone(), vmi.namespace());
            let mut delay = Duration::from_millis(20);
            for _ in 0..2000 {
                match api.get_opt(&vmi.name_any()).await {
                    Ok(Some(now)) if now.uid() == vmi.uid() => {
                        let state = now.migration_state().cloned().unwrap_or_default();
                        let node = now.node_name();
                        if node.is_some() && node == state.target_node.as_deref() {
                            break;
                        }
                        if state.failed == Some(true) {
                            // The source agent's own pass resumes the guest here.
                            return;
                        }
                    }
                    // Gone, or no longer this node's to read: it runs elsewhere.
                    Ok(_) => break,
                    Err(kube::Error::Api(s)) if s.code == 403 => break,
                    Err(e) => {
                        tracing::warn!("looking at {} after its migration: {e}", vmi.name_any())
                    }
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
            }
            tracing::info!(
                "{}/{} runs on its new node: letting the source copy go",
                vmi.namespace().to_string(),
                vmi.name_any()
            );
            ctx.hypervisor.cleanup(&vmi).await;
        }
        .in_current_span(),
    );
}

/// The target's part, for a VMI labelled with one of our nodes as its migration target.
pub async fn target(
    vmi: Arc<VirtualMachineInstance>,
    ctx: Arc<Context>,
) -> Result<Action, kube::Error> {
    let span = crate::context::vmi_span(&vmi);
    target_vmi(vmi, ctx).instrument(span).await
}

async fn target_vmi(
    vmi: Arc<VirtualMachineInstance>,
    ctx: Arc<Context>,
) -> Result<Action, kube::Error> {
    let Some(node) = vmi
        .labels()
        .get(MIGRATION_TARGET_NODE)
        .filter(|n| ctx.nodes.contains(*n))
        .cloned()
    else {
        return Ok(Action::await_change());
    };
    let state = vmi.migration_state().cloned().unwrap_or_default();
    let hv = ctx.hypervisor.as_ref();
    let on_node = vmi.node_name();
    if on_node == Some(node.as_str()) {
        // Taken over already.
        return Ok(Action::await_change());
    }
    let ours = state.target_node.as_deref() == Some(node.as_str()) && state.migration_uid.is_some();
    let vmi_final = vmi.phase().is_final();
    if !ours || state.failed == Some(true) || vmi_final || vmi.metadata.deletion_timestamp.is_some()
    {
        hv.release_incoming(&vmi).await;
        return Ok(Action::await_change());
    }
    if state.completed == Some(true) {
        return take_over(&vmi, &ctx, &node).await;
    }
    if state.target_node_address.is_none() {
        let sources =
            match crate::volume_sources::read_sources_for_target(&ctx.client, &vmi).await? {
                Ok(sources) => sources,
                Err(message) => {
                    write_state(&ctx, &vmi, failure(&message), Value::Null).await?;
                    return Ok(Action::await_change());
                }
            };
        let uid = state.migration_uid.clone().unwrap_or_default();
        let settings = match settings(&ctx, &vmi, &state, &uid).await? {
            Ok(settings) => settings,
            Err(e) => {
                write_state(&ctx, &vmi, failure(&e), Value::Null).await?;
                return Ok(Action::await_change());
            }
        };
        return match hv.receive(&vmi, &sources, &settings).await {
            Ok(incoming) => {
                let mut ports = serde_json::Map::new();
                ports.insert(
                    incoming.migration_port.to_string(),
                    json!(MIGRATION_PORT_ROLE),
                );
                if let Some(port) = incoming.disk_port {
                    ports.insert(port.to_string(), json!(DISK_PORT_ROLE));
                }
                let listening = format!(
                    "Migration Target is listening at {}, on ports: {}",
                    incoming.address,
                    ports.keys().cloned().collect::<Vec<_>>().join(",")
                );
                let published = json!({"targetNodeAddress": incoming.address,
                    "targetDirectMigrationNodePorts": ports, "targetNodeDomainDetected": false});
                write_state(&ctx, &vmi, published, Value::Null).await?;
                ctx.note(&vmi, vec![normal("PreparingTarget", listening)]);
                Ok(Action::requeue(Duration::from_secs(1)))
            }
            Err(e) => {
                tracing::warn!("{}: cannot receive the guest: {e}", vmi.name_any());
                write_state(
                    &ctx,
                    &vmi,
                    failure(&format!("target node {node}: {e}")),
                    Value::Null,
                )
                .await?;
                hv.release_incoming(&vmi).await;
                Ok(Action::await_change())
            }
        };
    }
    // Waiting for the guest. A target hypervisor that dies before the source sends fails
    // the migration at once; once the source is sending, its QEMU ending the stream (an
    // abort, a timeout) ends ours too, and the source says why, so it gets a moment to.
    if let Arrival::Failed(e) = hv.arrival(&vmi).await {
        if state.start_timestamp.is_some()
            && ctx.waited(Wait::SourceVerdict, &vmi) < SOURCE_VERDICT_GRACE
        {
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
        ctx.done_waiting(Wait::SourceVerdict, &vmi);
        write_state(
            &ctx,
            &vmi,
            failure(&format!("target node {node}: {e}")),
            Value::Null,
        )
        .await?;
        hv.release_incoming(&vmi).await;
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(Duration::from_secs(1)))
}

async fn take_over(
    vmi: &VirtualMachineInstance,
    ctx: &Arc<Context>,
    node: &str,
) -> Result<Action, kube::Error> {
    let hv = ctx.hypervisor.as_ref();
    match hv.arrival(vmi).await {
        Arrival::Waiting => {
            // The source says it sent everything; a guest that still has not arrived
            // after a while never will.
            if ctx.waited(Wait::Arrival, vmi) < ARRIVAL_TIMEOUT {
                return Ok(Action::requeue(Duration::from_millis(10)));
            }
            ctx.done_waiting(Wait::Arrival, vmi);
            let e = format!(
                "the source reported the guest sent, but it did not arrive within {ARRIVAL_TIMEOUT:?}"
            );
            write_state(
                ctx,
                vmi,
                failure(&format!("target node {node}: {e}")),
                Value::Null,
            )
            .await?;
            hv.release_incoming(vmi).await;
            return Ok(Action::await_change());
        }
        Arrival::Failed(e) => {
            write_state(
                ctx,
                vmi,
                failure(&format!("target node {node}: {e}")),
                Value::Null,
            )
            .await?;
            hv.release_incoming(vmi).await;
            return Ok(Action::await_change());
        }
        Arrival::Arrived => {}
    }
    ctx.done_waiting(Wait::Arrival, vmi);
    // The VMI is claimed first, guarded by the version that said the source let go: if
    // anyone failed the migration meanwhile, the claim conflicts and the guest is not run
    // here, so it never runs on both nodes.
    let at = now();
    let claim = json!({
        "metadata": {"resourceVersion": vmi.resource_version(),
                     "labels": {NODE_NAME: node, MIGRATION_TARGET_NODE: null}},
        "status": {"nodeName": node, "migrationState": {"endTimestamp": at,
            "targetNodeDomainDetected": true, "targetNodeDomainReadyTimestamp": at}},
    });
    let api = Api::<VirtualMachineInstance>::namespaced(ctx.client.clone(), vmi.namespace());
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match api
        .patch(&vmi.name_any(), &params, &Patch::Merge(&claim))
        .await
    {
        Ok(_) => {}
        // Changed meanwhile: decided again on what it is now.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Ok(Action::requeue(Duration::from_millis(10)))
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {
            hv.release_incoming(vmi).await;
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e),
    }
    match hv.take_over(vmi, wants_paused(vmi)).await {
        Ok(info) => {
            let status = crate::vmi_status::guest_status(&info, hv.accel());
            write_state(ctx, vmi, json!({}), json!({"status": status})).await?;
        }
        // The VMI is this node's now: its agent pass resumes the guest like any paused one.
        Err(e) => tracing::warn!("{}: running the arrived guest: {e}", vmi.name_any()),
    }
    ctx.note(
        vmi,
        vec![normal(
            "Migrated",
            format!("The VirtualMachineInstance migrated to node {node}."),
        )],
    );
    tracing::info!(
        "{}/{} migrated to node {node}",
        vmi.namespace().to_string(),
        vmi.name_any()
    );
    Ok(Action::await_change())
}
