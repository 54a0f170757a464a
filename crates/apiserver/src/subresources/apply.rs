//! Carries out a [`Decision`] through the registry calls any client could make: VM spec
//! and `status.stateChangeRequests` for the VM controller, VMI spec and annotations for
//! the node agent, a new migration. The test-and-set checks compare the object at write
//! time, so they are made here, inside the updates.

use std::sync::Arc;

use apimachinery::status::Status;
use serde_json::{json, Value};

use kubevirt_api::model::vm::{ChangeRequest, StateChangeRequest, VmSpec};
use kubevirt_api::model::VirtualMachine;

use super::rules::{check_queue, Decision, Effect};
use super::{conflict, refused};
use crate::object;

/// The VM as stored, typed for the tests of what it holds at write time.
fn typed_vm(stored: &Value) -> Result<VirtualMachine, Status> {
    serde_json::from_value(stored.clone())
        .map_err(|e| Status::internal(format!("the stored VM does not decode: {e}")))
}
use crate::registry::{Change, Registration, Registry, WriteOptions};

/// Where the writes go: the object named in the request path.
pub(super) struct Target<'a> {
    pub registry: &'a Registry,
    pub namespace: &'a str,
    pub name: &'a str,
}

fn options() -> WriteOptions {
    WriteOptions {
        field_manager: "virt-api".into(),
        privileged: true,
        ..Default::default()
    }
}

impl Target<'_> {
    /// Makes the decision's writes in order, stopping at the first that fails (the ones
    /// before it stay made, as in virt-api).
    pub async fn apply(&self, decision: &Decision) -> Result<(), Status> {
        let options = WriteOptions {
            dry_run: decision.dry_run,
            ..options()
        };
        for effect in &decision.effects {
            match effect {
                Effect::SetRunStrategy {
                    expected_spec,
                    uses_running,
                    start,
                } => {
                    self.set_strategy(expected_spec, *uses_running, *start, &options)
                        .await?
                }
                Effect::ClearStartFailure => self.clear_start_failure(&options).await?,
                Effect::QueueStateChanges { expected, requests } => {
                    self.queue(expected.as_ref(), requests, &options).await?
                }
                Effect::SetVmiGracePeriod(grace) => self.set_vmi_grace(*grace, &options).await?,
                Effect::CreateMigration {
                    vmi_name,
                    added_node_selector,
                } => {
                    self.create_migration(vmi_name, added_node_selector.as_ref(), &options)
                        .await?
                }
                Effect::Annotate(changes) => self.annotate(changes, &options).await?,
            }
        }
        Ok(())
    }

    fn find(&self, resource: &str, what: &str) -> Result<Arc<Registration>, Status> {
        self.registry
            .find("kubevirt.io", "v1", resource)
            .ok_or_else(|| Status::internal(format!("no {what} registration")))
    }

    /// Replaces the object with `edit` applied to its current state (no resourceVersion:
    /// the closure's own checks stand in for one).
    async fn update(
        &self,
        resource: &str,
        what: &str,
        subresource: Option<&str>,
        options: &WriteOptions,
        edit: impl Fn(&Value, &mut Value) -> Result<(), Status>,
    ) -> Result<(), Status> {
        let reg = self.find(resource, what)?;
        self.registry
            .update_with(
                &reg,
                Some(self.namespace),
                self.name,
                subresource,
                options,
                |old| {
                    let mut new = old.clone();
                    object::meta_mut(&mut new).remove("resourceVersion");
                    edit(old, &mut new)?;
                    Ok(Change::replace(new))
                },
            )
            .await?;
        Ok(())
    }

    /// `runStrategy` (or the deprecated `running`) switched with a test of the spec it
    /// replaces, so a concurrent change makes this a 409.
    async fn set_strategy(
        &self,
        expected: &VmSpec,
        uses_running: bool,
        start: bool,
        options: &WriteOptions,
    ) -> Result<(), Status> {
        self.update("virtualmachines", "VM", None, options, |old, new| {
            if typed_vm(old)?.spec != *expected {
                return Err(conflict(
                    self.name,
                    "jsonpatch test operation does not apply: the VM spec changed while the request was handled",
                ));
            }
            let spec = &mut new["spec"];
            if uses_running {
                spec["running"] = json!(start);
            } else {
                spec["runStrategy"] = json!(if start { "Always" } else { "Halted" });
            }
            Ok(())
        })
        .await
    }

    async fn clear_start_failure(&self, options: &WriteOptions) -> Result<(), Status> {
        self.update(
            "virtualmachines",
            "VM",
            Some("status"),
            options,
            |_, new| {
                if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
                    status.remove("startFailure");
                }
                Ok(())
            },
        )
        .await
    }

    /// Queues requests on `status.stateChangeRequests`, with a test of the queue it
    /// replaces; a queued request clears a start failure as well.
    async fn queue(
        &self,
        expected: Option<&Vec<StateChangeRequest>>,
        requests: &[ChangeRequest],
        options: &WriteOptions,
    ) -> Result<(), Status> {
        let entries: Vec<StateChangeRequest> = requests.iter().map(ChangeRequest::entry).collect();
        self.update("virtualmachines", "VM", Some("status"), options, |old, new| {
            let vm = typed_vm(old)?;
            let current = vm.status.state_change_requests.as_ref();
            if current != expected {
                return Err(conflict(
                    self.name,
                    "jsonpatch test operation does not apply: status.stateChangeRequests changed while the request was handled",
                ));
            }
            check_queue(current, requests).map_err(|r| refused(self.name, r))?;
            if !new.get("status").is_some_and(Value::is_object) {
                new["status"] = json!({});
            }
            new["status"]["stateChangeRequests"] = json!(entries);
            if let Some(status) = new["status"].as_object_mut() {
                status.remove("startFailure");
            }
            Ok(())
        })
        .await
    }

    async fn set_vmi_grace(&self, grace: i64, options: &WriteOptions) -> Result<(), Status> {
        self.update("virtualmachineinstances", "VMI", None, options, |_, new| {
            new["spec"]["terminationGracePeriodSeconds"] = json!(grace);
            Ok(())
        })
        .await
    }

    async fn create_migration(
        &self,
        vmi_name: &str,
        added_node_selector: Option<&Value>,
        options: &WriteOptions,
    ) -> Result<(), Status> {
        let reg = self.find("virtualmachineinstancemigrations", "migration")?;
        let mut spec = json!({"vmiName": vmi_name});
        if let Some(selector) = added_node_selector {
            spec["addedNodeSelector"] = selector.clone();
        }
        let migration = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"generateName": "kubevirt-migrate-vm-", "namespace": self.namespace}, "spec": spec});
        self.registry
            .create(&reg, Some(self.namespace), migration, options)
            .await?;
        Ok(())
    }

    async fn annotate(
        &self,
        changes: &[(&'static str, Option<String>)],
        options: &WriteOptions,
    ) -> Result<(), Status> {
        self.update("virtualmachineinstances", "VMI", None, options, |_, new| {
            let meta = object::meta_mut(new);
            let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(map) = annotations.as_object_mut() {
                for (key, value) in changes {
                    match value {
                        Some(v) => map.insert(key.to_string(), json!(v)),
                        None => map.remove(*key),
                    };
                }
            }
            Ok(())
        })
        .await
    }
}
