//! `subresources.kubevirt.io/v1`: the lifecycle verbs virtctl calls (start, stop,
//! restart, migrate on VMs; pause, unpause, softreboot on VMIs), with virt-api's
//! acceptance rules and messages. They change state through the same registry calls any
//! client could make: VM spec and `status.stateChangeRequests` for the VM controller,
//! VMI annotations for the node agent.

use apimachinery::status::{GroupResource, Status};
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::object;
use crate::registry::{Change, Registry, WriteOptions};
use crate::request::ResourcePath;

pub const GROUP: &str = "subresources.kubevirt.io";

use kubevirt_api::names::annotations::{
    PAUSED as PAUSE_ANNOTATION, SOFT_REBOOT_REQUESTED as SOFT_REBOOT_ANNOTATION, UNPAUSE_REQUESTED,
};
use kubevirt_api::types::{MigrationState, RunStrategy as Strategy, SpecStrategy, VmiPhase};

/// Resources advertised in discovery for `subresources.kubevirt.io/v1`, as virt-api does.
pub fn discovery_entries() -> Vec<crate::discovery::ExtraResource> {
    const NAMES: [&str; 9] = [
        "virtualmachineinstances/console",
        "virtualmachineinstances/vnc",
        "virtualmachines/start",
        "virtualmachines/stop",
        "virtualmachines/restart",
        "virtualmachines/migrate",
        "virtualmachineinstances/pause",
        "virtualmachineinstances/unpause",
        "virtualmachineinstances/softreboot",
    ];
    NAMES
        .iter()
        .map(|name| crate::discovery::ExtraResource {
            group: GROUP,
            version: "v1",
            name,
            kind: "",
            namespaced: true,
            verbs: if name.ends_with("/console") || name.ends_with("/vnc") {
                &["get"]
            } else {
                &["update"]
            },
        })
        .collect()
}

/// virt-api's `errors.NewConflict(v1.Resource("virtualmachine"), name, err)`:
/// `Operation cannot be fulfilled on virtualmachine.kubevirt.io "<name>": <message>`.
fn conflict(name: &str, message: &str) -> Status {
    Status::conflict(
        &GroupResource::new("kubevirt.io", "virtualmachine"),
        name,
        message,
    )
}

/// The same for the VMI subresources (`v1.Resource("virtualmachineinstance")`).
fn vmi_conflict(name: &str, message: &str) -> Status {
    Status::conflict(
        &GroupResource::new("kubevirt.io", "virtualmachineinstance"),
        name,
        message,
    )
}

/// virt-api reports a missing object with the singular resource name
/// (`virtualmachine.kubevirt.io "x" not found`).
fn not_found_as(resource: &str, name: &str, status: Status) -> Status {
    if status.code == 404 {
        Status::not_found(&GroupResource::new("kubevirt.io", resource), name)
    } else {
        status
    }
}

fn options() -> WriteOptions {
    WriteOptions {
        field_manager: "virt-api".into(),
        privileged: true,
        ..Default::default()
    }
}

fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

/// The effective run strategy and whether the VM uses the deprecated `running` field.
fn strategy(vm: &Value) -> Result<(Strategy, bool), Status> {
    let spec = vm.get("spec").unwrap_or(&Value::Null);
    match SpecStrategy::of(spec) {
        SpecStrategy::Running(s) => Ok((s, true)),
        SpecStrategy::Strategy(s) => Ok((s, false)),
        SpecStrategy::Unset => Ok((Strategy::Halted, false)),
        SpecStrategy::Invalid(text) => Err(conflict(
            object::name(vm),
            &format!("Invalid RunStrategy ({text})"),
        )),
    }
}

fn phase(vmi: &Value) -> VmiPhase {
    VmiPhase::of(vmi)
}

fn is_final(vmi: &Value) -> bool {
    phase(vmi).is_final()
}

fn is_paused(vmi: &Value) -> bool {
    vmi.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Paused" && c["status"] == "True")
        })
}

fn dry_run(body: &Value) -> bool {
    body.get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|d| d.iter().any(|x| x == "All"))
}

fn parse_body(body: &[u8], what: &str) -> Result<Value, Status> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let text = std::str::from_utf8(body).map_err(|e| {
        Status::bad_request(format!(
            "Can not unmarshal Request body to struct, error: {e}"
        ))
    })?;
    let value = serde_json::from_str::<Value>(text)
        .or_else(|_| crate::yaml::from_str(text))
        .map_err(|e| {
            Status::bad_request(format!(
                "Can not unmarshal Request body to struct, error: {e}"
            ))
        })?;
    if !value.is_object() {
        return Err(Status::bad_request(format!(
            "Can not unmarshal Request body to struct, error: {what} must be an object"
        )));
    }
    Ok(value)
}

pub async fn handle(
    registry: &Registry,
    method: &Method,
    path: &ResourcePath,
    body: &[u8],
) -> Result<Response, Status> {
    let (Some(namespace), Some(name), Some(verb)) = (
        path.namespace.as_deref(),
        path.name.as_deref(),
        path.subresource.as_deref(),
    ) else {
        return Err(Status::failure(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    if method != Method::PUT {
        return Err(Status::failure(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported on {verb}"),
        ));
    }
    let vm_reg = registry
        .find("kubevirt.io", "v1", "virtualmachines")
        .ok_or_else(|| Status::internal("no VM registration"))?;
    let vmi_reg = registry
        .find("kubevirt.io", "v1", "virtualmachineinstances")
        .ok_or_else(|| Status::internal("no VMI registration"))?;
    match (path.resource.as_str(), verb) {
        ("virtualmachines", "start" | "stop" | "restart" | "migrate") => {
            let vm = registry
                .get(&vm_reg, Some(namespace), name)
                .await
                .map_err(|s| not_found_as("virtualmachine", name, s))?;
            let vmi = match registry.get(&vmi_reg, Some(namespace), name).await {
                Ok(v) => Some(v),
                Err(s) if s.code == 404 => None,
                Err(s) => return Err(s),
            };
            let body = parse_body(body, verb)?;
            let lifecycle = Lifecycle {
                registry,
                namespace,
                name,
                vm: &vm,
                vmi: vmi.as_ref(),
                dry_run: dry_run(&body),
            };
            match verb {
                "start" => lifecycle.start(&body).await,
                "stop" => lifecycle.stop(&body).await,
                "restart" => lifecycle.restart(&body).await,
                _ => lifecycle.migrate(&body).await,
            }
        }
        ("virtualmachineinstances", "pause" | "unpause" | "softreboot") => {
            let vmi = registry
                .get(&vmi_reg, Some(namespace), name)
                .await
                .map_err(|s| not_found_as("virtualmachineinstance", name, s))?;
            let body = parse_body(body, verb)?;
            vmi_action(registry, namespace, name, &vmi, verb, dry_run(&body)).await
        }
        _ => Err(Status::failure(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    }
}

struct Lifecycle<'a> {
    registry: &'a Registry,
    namespace: &'a str,
    name: &'a str,
    vm: &'a Value,
    vmi: Option<&'a Value>,
    dry_run: bool,
}

impl Lifecycle<'_> {
    fn vmi_uid(&self) -> Option<String> {
        self.vmi.map(|v| object::uid(v).to_string())
    }

    async fn start(&self, body: &Value) -> Result<Response, Status> {
        let paused = body.get("paused").and_then(Value::as_bool).unwrap_or(false);
        if let Some(vmi) = self.vmi {
            if !is_final(vmi) && !matches!(phase(vmi), VmiPhase::Unset | VmiPhase::Unknown) {
                return Err(conflict(self.name, "VM is already running"));
            }
        }
        let start = if paused {
            json!({"action": "Start", "data": {"paused": "true"}})
        } else {
            json!({"action": "Start"})
        };
        let (strategy, uses_running) = strategy(self.vm)?;
        match strategy {
            Strategy::Halted if paused => self.queue(vec![start]).await,
            Strategy::Halted => self.set_strategy(uses_running, true).await,
            Strategy::Manual => match self.vmi.filter(|v| is_final(v)) {
                Some(_) => self.queue(vec![self.stop_request(), start]).await,
                None => self.queue(vec![start]).await,
            },
            Strategy::RerunOnFailure => match self.vmi.map(phase) {
                Some(VmiPhase::Succeeded) => self.queue(vec![self.stop_request(), start]).await,
                Some(VmiPhase::Failed) => Err(conflict(
                    self.name,
                    "RerunOnFailure does not support starting VM from failed state",
                )),
                _ => self.queue(vec![start]).await,
            },
            Strategy::Always => Err(conflict(
                self.name,
                "Always does not support manual start requests",
            )),
            Strategy::Once => Err(conflict(
                self.name,
                "Once does not support manual start requests",
            )),
        }
    }

    fn stop_request(&self) -> Value {
        match self.vmi_uid() {
            Some(uid) => json!({"action": "Stop", "uid": uid}),
            None => json!({"action": "Stop"}),
        }
    }

    async fn stop(&self, body: &Value) -> Result<Response, Status> {
        let grace = body.get("gracePeriod").and_then(Value::as_i64);
        let running = self.vmi.filter(|v| !is_final(v));
        let old_grace = running
            .and_then(|v| v.pointer("/spec/terminationGracePeriodSeconds"))
            .and_then(Value::as_i64);
        let (strategy, uses_running) = strategy(self.vm)?;
        let queues_stop = matches!(
            strategy,
            Strategy::Halted | Strategy::Manual | Strategy::RerunOnFailure
        );
        if queues_stop && running.is_none() {
            return Err(conflict(self.name, "VM is not running"));
        }
        if strategy == Strategy::Halted {
            let shorter = match (grace, old_grace) {
                (Some(new), Some(old)) => new < old,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if !shorter {
                return Err(conflict(
                    self.name,
                    "Halted only supports manual stop requests with a shorter graceperiod",
                ));
            }
        }
        if let (Some(grace), Some(_)) = (grace, running) {
            self.set_vmi_grace(grace).await?;
        }
        match strategy {
            Strategy::Always | Strategy::Once => self.set_strategy(uses_running, false).await,
            _ => self.queue(vec![self.stop_request()]).await,
        }
    }

    async fn restart(&self, body: &Value) -> Result<Response, Status> {
        let grace = body.get("gracePeriodSeconds").and_then(Value::as_i64);
        match grace {
            Some(g) if g > 0 => {
                return Err(Status::bad_request(
                    "For force restart, only gracePeriod=0 is supported for now",
                ))
            }
            Some(g) if g < 0 => {
                return Err(Status::bad_request(
                    "gracePeriod has to be greater or equal to 0",
                ))
            }
            _ => {}
        }
        let (strategy, _) = strategy(self.vm)?;
        match strategy {
            Strategy::Halted => {
                return Err(conflict(
                    self.name,
                    "RunStategy Halted does not support manual restart requests",
                ))
            }
            Strategy::Once => {
                return Err(conflict(
                    self.name,
                    "RunStategy Once does not support manual restart requests",
                ))
            }
            _ => {}
        }
        if self.vmi.is_none() {
            // virt-api names the strategy Halted here whatever the VM's is.
            return Err(conflict(self.name, "VM is not running: Halted"));
        }
        if grace == Some(0) {
            self.set_vmi_grace(1).await?;
        }
        self.queue(vec![self.stop_request(), json!({"action": "Start"})])
            .await
    }

    async fn migrate(&self, body: &Value) -> Result<Response, Status> {
        // virt-api looks at the VM: without a running VMI it is not running.
        let Some(vmi) = self.vmi.filter(|vmi| phase(vmi) == VmiPhase::Running) else {
            return Err(conflict(self.name, "VM is not running"));
        };
        let reg = self
            .registry
            .find("kubevirt.io", "v1", "virtualmachineinstancemigrations");
        let reg = reg.ok_or_else(|| Status::internal("no migration registration"))?;
        let mut spec = json!({"vmiName": object::name(vmi)});
        if let Some(selector) = body.get("addedNodeSelector").filter(|s| s.is_object()) {
            spec["addedNodeSelector"] = selector.clone();
        }
        let migration = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"generateName": "kubevirt-migrate-vm-", "namespace": self.namespace}, "spec": spec});
        let options = WriteOptions {
            dry_run: self.dry_run,
            ..options()
        };
        self.registry
            .create(&reg, Some(self.namespace), migration, &options)
            .await?;
        Ok(accepted())
    }

    /// `runStrategy` (or the deprecated `running`) switched by a spec patch with a test
    /// of the value it replaces, so a concurrent change makes this a 409.
    async fn set_strategy(&self, uses_running: bool, start: bool) -> Result<Response, Status> {
        let reg = self
            .registry
            .find("kubevirt.io", "v1", "virtualmachines")
            .ok_or_else(|| Status::internal("no VM registration"))?;
        let options = WriteOptions {
            dry_run: self.dry_run,
            ..options()
        };
        let expected = self.vm.get("spec").cloned().unwrap_or(Value::Null);
        self.registry
            .update_with(&reg, Some(self.namespace), self.name, None, &options, |old| {
                if old.get("spec") != Some(&expected) {
                    return Err(conflict(
                        self.name,
                        "jsonpatch test operation does not apply: the VM spec changed while the request was handled",
                    ));
                }
                let mut new = old.clone();
                object::meta_mut(&mut new).remove("resourceVersion");
                let spec = &mut new["spec"];
                if uses_running {
                    spec["running"] = json!(start);
                } else {
                    spec["runStrategy"] = json!(if start { "Always" } else { "Halted" });
                }
                Ok(Change::replace(new))
            })
            .await?;
        self.clear_start_failure().await?;
        Ok(accepted())
    }

    async fn clear_start_failure(&self) -> Result<(), Status> {
        if self.vm.pointer("/status/startFailure").is_none() || self.dry_run {
            return Ok(());
        }
        let reg = self
            .registry
            .find("kubevirt.io", "v1", "virtualmachines")
            .ok_or_else(|| Status::internal("no VM registration"))?;
        self.registry
            .update_with(
                &reg,
                Some(self.namespace),
                self.name,
                Some("status"),
                &options(),
                |old| {
                    let mut new = old.clone();
                    object::meta_mut(&mut new).remove("resourceVersion");
                    if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
                        status.remove("startFailure");
                    }
                    Ok(Change::replace(new))
                },
            )
            .await?;
        Ok(())
    }

    /// Queues requests on `status.stateChangeRequests`, as virt-api does: onto an empty
    /// queue, or a lone Stop replacing whatever is queued.
    async fn queue(&self, requests: Vec<Value>) -> Result<Response, Status> {
        let reg = self
            .registry
            .find("kubevirt.io", "v1", "virtualmachines")
            .ok_or_else(|| Status::internal("no VM registration"))?;
        let expected = self.vm.pointer("/status/stateChangeRequests").cloned();
        let lone_stop = requests.len() == 1 && requests[0]["action"] == "Stop";
        let options = WriteOptions {
            dry_run: self.dry_run,
            ..options()
        };
        self.registry
            .update_with(&reg, Some(self.namespace), self.name, Some("status"), &options, |old| {
                let current = old.pointer("/status/stateChangeRequests").cloned();
                if current != expected {
                    return Err(conflict(
                        self.name,
                        "jsonpatch test operation does not apply: status.stateChangeRequests changed while the request was handled",
                    ));
                }
                let queued = current
                    .as_ref()
                    .and_then(Value::as_array)
                    .is_some_and(|q| !q.is_empty());
                if queued && !lone_stop {
                    // virt-api fails to build its patch: an internal error (500).
                    return Err(Status::internal(
                        "unable to complete request: stop/start already underway",
                    ));
                }
                let mut new = old.clone();
                object::meta_mut(&mut new).remove("resourceVersion");
                if !new.get("status").is_some_and(Value::is_object) {
                    new["status"] = json!({});
                }
                new["status"]["stateChangeRequests"] = Value::Array(requests.clone());
                if let Some(status) = new["status"].as_object_mut() {
                    status.remove("startFailure");
                }
                Ok(Change::replace(new))
            })
            .await?;
        Ok(accepted())
    }

    async fn set_vmi_grace(&self, grace: i64) -> Result<(), Status> {
        let reg = self
            .registry
            .find("kubevirt.io", "v1", "virtualmachineinstances")
            .ok_or_else(|| Status::internal("no VMI registration"))?;
        let options = WriteOptions {
            dry_run: self.dry_run,
            ..options()
        };
        self.registry
            .update_with(
                &reg,
                Some(self.namespace),
                self.name,
                None,
                &options,
                |old| {
                    let mut new = old.clone();
                    object::meta_mut(&mut new).remove("resourceVersion");
                    new["spec"]["terminationGracePeriodSeconds"] = json!(grace);
                    Ok(Change::replace(new))
                },
            )
            .await?;
        Ok(())
    }
}

async fn vmi_action(
    registry: &Registry,
    namespace: &str,
    name: &str,
    vmi: &Value,
    verb: &str,
    dry_run: bool,
) -> Result<Response, Status> {
    let running = phase(vmi) == VmiPhase::Running;
    let paused = is_paused(vmi);
    let now = || chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let changes: Vec<(&str, Option<String>)> = match verb {
        "pause" => {
            if !running {
                return Err(vmi_conflict(name, "VM is not running"));
            }
            if paused {
                return Err(vmi_conflict(name, "VMI is already paused"));
            }
            let migrating = MigrationState::of(vmi).is_some_and(|m| m.in_flight());
            if migrating {
                return Err(vmi_conflict(
                    name,
                    &format!("Cannot pause VM '{name}' because it is currently being migrated"),
                ));
            }
            vec![(PAUSE_ANNOTATION, Some("true".to_string()))]
        }
        "unpause" => {
            if !running {
                return Err(vmi_conflict(name, "VMI is not running"));
            }
            if !paused {
                return Err(vmi_conflict(name, "VMI is not paused"));
            }
            vec![(PAUSE_ANNOTATION, None), (UNPAUSE_REQUESTED, Some(now()))]
        }
        _ => {
            if !running {
                return Err(vmi_conflict(name, "VM is not running"));
            }
            if paused {
                return Err(vmi_conflict(name, "VMI is paused"));
            }
            let acpi_disabled = vmi
                .pointer("/spec/domain/features/acpi/enabled")
                .and_then(Value::as_bool)
                == Some(false);
            if acpi_disabled {
                return Err(vmi_conflict(
                    name,
                    "VMI neither have the agent connected nor the ACPI feature enabled",
                ));
            }
            vec![(SOFT_REBOOT_ANNOTATION, Some(now()))]
        }
    };
    let reg = registry
        .find("kubevirt.io", "v1", "virtualmachineinstances")
        .ok_or_else(|| Status::internal("no VMI registration"))?;
    let options = WriteOptions {
        dry_run,
        ..options()
    };
    registry
        .update_with(&reg, Some(namespace), name, None, &options, |old| {
            let mut new = old.clone();
            let meta = object::meta_mut(&mut new);
            meta.remove("resourceVersion");
            let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(map) = annotations.as_object_mut() {
                for (key, value) in &changes {
                    match value {
                        Some(v) => map.insert(key.to_string(), json!(v)),
                        None => map.remove(*key),
                    };
                }
            }
            Ok(Change::replace(new))
        })
        .await?;
    Ok(StatusCode::OK.into_response())
}
