//! A model of the world around the migration controller, for the property test: one VMI
//! on node `a`, a migration of it, the two node agents as virt-handler's halves behave
//! (target readies and publishes, source sends and reports, target takes over) and the
//! faults that can strike at any time. The controller's part is the real [`decide`] and
//! the writes its steps stand for.

use std::collections::BTreeMap;

use super::tests::typed;
use super::*;
use kubevirt_api::model::MigrationState;

/// Where a copy of the guest is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copy {
    Running,
    /// Stopped for good after sending itself (QEMU `postmigrate`), or received and held
    /// paused by a target until it takes over.
    Held,
}

#[derive(Clone, Debug)]
pub struct World {
    pub vmi: Value,
    pub vmim: Value,
    pub nodes: Vec<NodeView>,
    /// The copies of the guest, by node.
    pub guests: BTreeMap<String, Copy>,
    /// The source's outgoing migration finished moving the guest.
    pub sent: bool,
    /// The guest powered off (the VMI is final).
    pub gone: bool,
    pub deleted_vmim: bool,
    /// The unschedulable timeout has passed.
    pub waited: bool,
}

fn node(name: &str) -> NodeView {
    (
        name.to_string(),
        Arc::new(typed(&json!({"metadata": {"name": name, "labels": {}},
               "status": {"conditions": [{"type": "Ready", "status": "True"}],
                          "allocatable": {"cpu": "4", "memory": "8Gi"}}}))),
        Resources {
            millicpu: 4000,
            memory: 8 << 30,
        },
    )
}

/// What can happen besides the controller's steps.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    Controller,
    TargetPublishes,
    SourceStarts,
    SourceSends,
    SourceFails,
    TargetTakesOver,
    TargetFails,
    DeleteMigration,
    TargetNodeDown,
    GuestPowersOff,
    SourceReacts,
    /// Long enough for the controller's timeouts.
    TimePasses,
}

impl World {
    pub fn new() -> World {
        let mut guests = BTreeMap::new();
        guests.insert("a".to_string(), Copy::Running);
        World {
            vmi: json!({"metadata": {"name": "vm", "resourceVersion": "1"},
                        "spec": {"domain": {}},
                        "status": {"phase": "Running", "nodeName": "a"}}),
            vmim: json!({"metadata": {"name": "m", "uid": "m1", "finalizers": [FINALIZER]},
                         "spec": {"vmiName": "vm"}, "status": {}}),
            nodes: vec![node("a"), node("b")],
            guests,
            sent: false,
            gone: false,
            deleted_vmim: false,
            waited: false,
        }
    }

    fn state(&self) -> Option<MigrationState> {
        typed::<kubevirt_api::model::VirtualMachineInstance>(&self.vmi)
            .status
            .migration_state
            .filter(|s| s.migration_uid.as_deref() == Some("m1"))
    }

    fn write_state(&mut self, fields: Value) {
        let state = &mut self.vmi["status"]["migrationState"];
        if !state.is_object() {
            *state = json!({});
        }
        for (k, v) in fields.as_object().into_iter().flatten() {
            state[k] = v.clone();
        }
    }

    fn fail_state(&mut self, reason: &str) {
        self.write_state(
            json!({"failed": true, "completed": true, "failureReason": reason,
                                "endTimestamp": "t"}),
        );
    }

    /// The controller's next step, carried out; false when it had nothing to do.
    pub fn controller(&mut self) -> bool {
        let configuration = effective_configuration(None);
        let vmi = typed(&self.vmi);
        let view = View {
            vmi: Some(&vmi),
            nodes: &self.nodes,
            active: &[],
            unschedulable_for: self.waited.then_some(UNSCHEDULABLE_TIMEOUT),
            configuration: &configuration,
        };
        let step = decide(&typed(&self.vmim), &view);
        match step {
            Step::Wait => return false,
            Step::Enter { phase, status } => {
                self.vmim["status"]["phase"] = json!(phase.as_str());
                for (k, v) in status.as_object().into_iter().flatten() {
                    self.vmim["status"][k] = v.clone();
                }
            }
            Step::Update { status } => {
                for (k, v) in status.as_object().into_iter().flatten() {
                    self.vmim["status"][k] = v.clone();
                }
            }
            Step::HandOff { source, target } => {
                self.vmi["status"]["migrationState"] = json!({"migrationUid": "m1",
                    "sourceNode": source, "targetNode": target, "mode": "PreCopy"});
                self.vmim["status"]["phase"] = json!("PreparingTarget");
            }
            Step::RequestAbort => self.write_state(json!({"abortRequested": true})),
            // Guarded by the version it was decided on: a target that took the VMI keeps it.
            Step::TargetDown { node } => {
                if self.vmi["status"]["nodeName"] == "a" {
                    self.fail_state(&format!("Target node {node} is down"))
                }
            }
            Step::Finalize { state } => match state {
                Some(state) => self.vmim["status"]["migrationState"] = json!(state),
                None => self.vmim["metadata"]["finalizers"] = json!([]),
            },
        }
        true
    }

    fn target_ready(&self) -> bool {
        node_ready(&self.nodes, "b")
    }

    /// Applies `event` where it can happen now; the agents act only when their node runs.
    pub fn apply(&mut self, event: Event) {
        let state = self.state();
        let in_flight = state.as_ref().is_some_and(|s| s.in_flight());
        match event {
            Event::Controller => {
                self.controller();
            }
            Event::TimePasses => self.waited = true,
            Event::TargetPublishes => {
                if in_flight
                    && self.target_ready()
                    && state
                        .as_ref()
                        .is_some_and(|s| s.target_node_address.is_none())
                {
                    self.write_state(json!({"targetNodeAddress": "10.0.0.2",
                        "targetDirectMigrationNodePorts": {"49200": 49152}}));
                }
            }
            Event::SourceStarts => {
                let ready = state.as_ref().is_some_and(|s| {
                    s.target_node_address.is_some() && s.start_timestamp.is_none()
                });
                if in_flight && ready {
                    if state
                        .as_ref()
                        .is_some_and(|s| s.abort_requested == Some(true))
                    {
                        self.fail_state("Live migration has been aborted");
                        self.write_state(json!({"abortStatus": "Succeeded"}));
                    } else {
                        self.write_state(json!({"startTimestamp": "t"}));
                    }
                }
            }
            Event::SourceSends => {
                // QEMU finishes: the source stops for good, the target holds the guest.
                let started = state.as_ref().is_some_and(|s| s.start_timestamp.is_some());
                if in_flight && started && self.target_ready() && !self.sent && !self.gone {
                    self.sent = true;
                    self.guests.insert("a".into(), Copy::Held);
                    self.guests.insert("b".into(), Copy::Held);
                    self.write_state(json!({"completed": true}));
                }
            }
            Event::SourceFails => {
                let started = state.as_ref().is_some_and(|s| s.start_timestamp.is_some());
                if in_flight && started && !self.sent {
                    let reason = if state
                        .as_ref()
                        .is_some_and(|s| s.abort_requested == Some(true))
                    {
                        "Live migration has been aborted"
                    } else {
                        "QEMU says the connection broke"
                    };
                    self.fail_state(reason);
                    self.guests.remove("b");
                }
            }
            Event::TargetTakesOver => {
                let ours = state
                    .as_ref()
                    .is_some_and(|s| s.completed == Some(true) && s.failed != Some(true));
                if ours
                    && self.target_ready()
                    && self.vmi["status"]["nodeName"] == "a"
                    && !self.gone
                {
                    self.guests.insert("b".into(), Copy::Running);
                    self.vmi["status"]["nodeName"] = json!("b");
                    self.write_state(json!({"endTimestamp": "t"}));
                    // The source then lets its stopped copy go.
                    self.guests.remove("a");
                }
            }
            Event::TargetFails => {
                let before_take_over = self.vmi["status"]["nodeName"] == "a";
                let open = state.as_ref().is_some_and(|s| s.failed != Some(true));
                if open
                    && before_take_over
                    && state.as_ref().is_some_and(|s| s.target_node.is_some())
                {
                    self.fail_state("target node b: the target QEMU exited");
                    self.guests.remove("b");
                }
            }
            Event::DeleteMigration => {
                if !self.deleted_vmim {
                    self.deleted_vmim = true;
                    self.vmim["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
                }
            }
            Event::TargetNodeDown => {
                if let Some(n) = self.nodes.iter_mut().find(|(n, _, _)| n == "b") {
                    let node = Arc::make_mut(&mut n.1);
                    if let Some(ready) = node.status.conditions.iter_mut().flatten().next() {
                        ready.status = "Unknown".into();
                    }
                }
            }
            Event::GuestPowersOff => {
                let running_at = self
                    .guests
                    .iter()
                    .find(|(_, c)| **c == Copy::Running)
                    .map(|(n, _)| n.clone());
                if let Some(node) = running_at {
                    if self.vmi["status"]["nodeName"] == json!(node) {
                        self.gone = true;
                        self.vmi["status"]["phase"] = json!("Succeeded");
                        self.guests.clear();
                    }
                }
            }
            Event::SourceReacts => {
                // A failed migration's stopped source copy runs again; a held target copy
                // of a failed migration is released.
                let failed = state.as_ref().is_some_and(|s| s.failed == Some(true));
                if failed && self.vmi["status"]["nodeName"] == "a" {
                    if self.guests.get("a") == Some(&Copy::Held) && !self.gone {
                        self.guests.insert("a".into(), Copy::Running);
                    }
                    if self.guests.get("b") == Some(&Copy::Held) {
                        self.guests.remove("b");
                    }
                }
                // An aborted migration that is moving ends as the source reports it.
                let aborting = state
                    .as_ref()
                    .is_some_and(|s| s.abort_requested == Some(true) && s.in_flight());
                if aborting && !self.sent {
                    self.fail_state("Live migration has been aborted");
                    self.write_state(json!({"abortStatus": "Succeeded"}));
                    self.guests.remove("b");
                }
            }
        }
    }

    pub fn running(&self) -> usize {
        self.guests
            .values()
            .filter(|c| **c == Copy::Running)
            .count()
    }
}
