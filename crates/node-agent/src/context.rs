//! What every part of a node agent's VMI handling shares: the API client, the nodes
//! served, the hypervisor, and the little it remembers between passes (retry delays,
//! how long a migration target has waited, repeated failures to prepare).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::Client;
use kubevirt_api::model::VirtualMachineInstance;

use crate::hypervisor::Hypervisor;

pub(crate) struct Context {
    pub(crate) client: Client,
    /// KubeVirt's virt-handler events about the VMIs (Started, Stopped, Migrated...).
    pub(crate) events: event_recorder::Recorder,
    /// VMIs whose guest was told to shut down, by uid: `ShuttingDown` is said once.
    pub(crate) shutting_down: std::sync::Mutex<HashSet<String>>,
    pub(crate) nodes: HashSet<String>,
    pub(crate) hypervisor: Arc<dyn Hypervisor>,
    /// Retry delays of VMIs whose sync failed, by `namespace/name`.
    pub(crate) backoff: kubevirt_api::backoff::Backoff<String>,
    /// Since when a migration target has waited for something (see `Wait`).
    pub(crate) awaiting: std::sync::Mutex<HashMap<(Wait, String), std::time::Instant>>,
    /// The last failure to prepare each VMI, by uid, and how often in a row it came.
    pub(crate) prepare_failures: std::sync::Mutex<HashMap<String, (String, u32)>>,
}

/// The span of what is done for one VMI: every line logged in it names the VMI. At error
/// level so that no filter (`RUST_LOG=warn`) drops the context of the lines it keeps.
/// The VMI's name is `vmi`, since JSON lines give each span's own name as `name`.
pub(crate) fn vmi_span(vmi: &VirtualMachineInstance) -> tracing::Span {
    tracing::error_span!(
        "vmi",
        namespace = vmi.namespace(),
        vmi = vmi.metadata.name.as_deref().unwrap_or(""),
        uid = vmi.uid()
    )
}

/// How often the same failure to prepare a VMI (other than waiting for an image or an
/// object) may come in a row before the VMI fails, as a virt-launcher that cannot start
/// fails its VMI and leaves the restart to the VM's crash-loop backoff.
pub(crate) const SAME_FAILURES_BEFORE_FAILING: u32 = 3;

/// What a migration target waits for, per VMI uid, with a deadline of its own.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Wait {
    /// The last of a guest the source reported sent.
    Arrival,
    /// The source's word on why a migration broke off after its QEMU ended ours.
    SourceVerdict,
}

/// One event about a VMI: its type, reason and message.
pub(crate) type Note = (event_recorder::EventType, &'static str, String);

pub(crate) fn normal(reason: &'static str, message: impl Into<String>) -> Note {
    (event_recorder::EventType::Normal, reason, message.into())
}

pub(crate) fn warning(reason: &'static str, message: impl Into<String>) -> Note {
    (event_recorder::EventType::Warning, reason, message.into())
}

impl Context {
    /// Records `notes` about `vmi`.
    pub(crate) fn note(&self, vmi: &VirtualMachineInstance, notes: Vec<Note>) {
        let regarding = event_recorder::Recorder::reference(vmi);
        for (kind, reason, message) in notes {
            self.events.record(&regarding, kind, reason, message);
        }
    }

    /// Whether this is the first time `vmi`'s guest is told to shut down.
    pub(crate) fn first_shutdown(&self, vmi: &VirtualMachineInstance) -> bool {
        self.shutting_down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(vmi.uid().to_string())
    }

    pub(crate) fn forget_shutdown(&self, vmi: &VirtualMachineInstance) {
        self.shutting_down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&vmi.uid().to_string());
    }

    /// How long this target has waited for `what` for `vmi` (zero on the first ask).
    pub(crate) fn waited(&self, what: Wait, vmi: &VirtualMachineInstance) -> std::time::Duration {
        let key = (what, vmi.uid().to_string());
        let mut awaiting = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        awaiting
            .entry(key)
            .or_insert_with(std::time::Instant::now)
            .elapsed()
    }

    /// Counts a failure to prepare `vmi`; how often in a row it has failed this way.
    pub(crate) fn failed_to_prepare(&self, vmi: &VirtualMachineInstance, failure: String) -> u32 {
        let mut failures = self
            .prepare_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let entry = failures
            .entry(vmi.uid().to_string())
            .or_insert_with(|| (failure.clone(), 0));
        if entry.0 != failure {
            *entry = (failure, 0);
        }
        entry.1 += 1;
        entry.1
    }

    pub(crate) fn forget_prepare_failures(&self, vmi: &VirtualMachineInstance) {
        self.prepare_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&vmi.uid().to_string());
    }

    pub(crate) fn done_waiting(&self, what: Wait, vmi: &VirtualMachineInstance) {
        let key = (what, vmi.uid().to_string());
        self.awaiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
    }
}
