//! KubeVirt's validating admission webhooks for VirtualMachine, VirtualMachineInstance and
//! VirtualMachineInstanceMigration, with KubeVirt's messages and field paths.
//!
//! Every cause is built with [`FieldError::webhook`], so its message is KubeVirt's text as is.
//! Where KubeVirt renders an odd path (a doubled `domain.devices.disks` segment, an interface
//! boot order reported at `spec[0].bootOrder`, a base64 error that repeats its path) we keep
//! it: clients and tests compare these strings with real KubeVirt.
//!
//! Cluster configuration is KubeVirt's default: rollout strategy LiveUpdate, bridge binding
//! allowed on the pod network, and the feature gates DeclarativeHotplugVolumes,
//! DownwardMetrics, PasstBinding, PortRangesSpec and DecentralizedLiveMigration disabled.
//! HostDisk is treated as enabled; [`validate_host_disk_path`] decides which paths are allowed.
//!
//! The API server caps a rejection at 10 causes and joins their messages with ", "; that is
//! its job, not ours. KubeVirt exempts its own service accounts from the user-facing update
//! restrictions (VMI spec and reserved labels, migration priority); the API server should
//! exempt virtplane's controllers the same way by not calling those checks for them.

mod network;
mod spec;
mod storage;

use std::path::PathBuf;

use apimachinery::field::{ErrorType, FieldError};
use serde_json::Value;

use crate::access::{at, get, has, int_at, list_at, map_at, semantic, str_at};
use crate::defaults::{default_vmi_spec, DefaultNetworkBinding, MIGRATION_SELECTOR_LABEL};
use crate::typecheck;
use crate::validation::clean_path;

pub use spec::validate_vmi_spec;

/// Webhook names, for the `admission webhook "<name>" denied the request: ...` prefix.
pub const VM_VALIDATOR: &str = "virtualmachine-validator.kubevirt.io";
pub const VMI_CREATE_VALIDATOR: &str = "virtualmachineinstances-create-validator.kubevirt.io";
pub const VMI_UPDATE_VALIDATOR: &str = "virtualmachineinstances-update-validator.kubevirt.io";
pub const MIGRATION_CREATE_VALIDATOR: &str = "migration-create-validator.kubevirt.io";
pub const MIGRATION_UPDATE_VALIDATOR: &str = "migration-update-validator.kubevirt.io";

/// Labels only KubeVirt's components may set on a VMI.
const RESTRICTED_VMI_LABELS: [&str; 6] = [
    "kubevirt.io/created-by",
    "kubevirt.io/migrationJobUID",
    "kubevirt.io/nodeName",
    "kubevirt.io/migrationTargetNodeName",
    "kubevirt.io/schedulable",
    "kubevirt.io/install-strategy",
];

/// What admission decided: rejected when `errors` is not empty; `warnings` go to the client
/// as `Warning` headers when the request is allowed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Admission {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<String>,
}

impl Admission {
    pub fn allowed(&self) -> bool {
        self.errors.is_empty()
    }

    fn from_causes(causes: Causes) -> Admission {
        Admission {
            errors: causes.0,
            warnings: Vec::new(),
        }
    }
}

/// The causes of one review, in the order KubeVirt reports them.
#[derive(Debug, Default)]
struct Causes(Vec<FieldError>);

impl Causes {
    fn add(&mut self, kind: ErrorType, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::webhook(kind, field, message));
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Validates a VirtualMachine on CREATE: [`validate_vm`] plus the check that rejects
/// discontinued interface bindings (slirp, passt, macvtap).
pub fn validate_vm_create(vm: &Value) -> Admission {
    validate_vm_object(vm, true)
}

/// Validates a VirtualMachine (the UPDATE rules; CREATE adds [`validate_vm_create`]'s check).
/// Like KubeVirt, the template is validated after VMI spec defaults are applied to a copy, so
/// a volume without a disk or a template without networks is not an error.
pub fn validate_vm(vm: &Value) -> Admission {
    validate_vm_object(vm, false)
}

fn validate_vm_object(vm: &Value, create: bool) -> Admission {
    // A VM being deleted is let through so its finalizers can be removed.
    if has(vm, &["metadata", "deletionTimestamp"]) {
        return Admission::default();
    }
    let vm_spec = get(vm, "spec").unwrap_or(&Value::Null);
    let type_errors = typecheck::check(vm_spec, "io.kubevirt.v1.VirtualMachineSpec", "spec");
    if !type_errors.is_empty() {
        return Admission {
            errors: type_errors,
            warnings: Vec::new(),
        };
    }
    let mut causes = Causes::default();
    let Some(template) = get(vm_spec, "template") else {
        causes.add(
            ErrorType::Required,
            "spec.template",
            "missing virtual machine template.",
        );
        return Admission::from_causes(causes);
    };
    let mut tspec = get(template, "spec")
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    default_vmi_spec(&mut tspec, DefaultNetworkBinding::default());

    if create {
        // KubeVirt runs this check with the VM's "spec" as the path of the template spec.
        network::discontinued_bindings(&tspec, "spec", &mut causes);
        if !causes.is_empty() {
            return Admission::from_causes(causes);
        }
    }
    reserved_labels(
        at(template, &["metadata", "labels"]),
        "spec.template.metadata.labels",
        &mut causes,
    );
    spec::rules(&tspec, "spec.template.spec", &mut causes);
    storage::data_volume_templates(vm_spec, &tspec, &mut causes);
    run_strategy(vm_spec, &mut causes);
    live_update(&tspec, &mut causes);
    if !causes.is_empty() {
        return Admission::from_causes(causes);
    }
    let mut warnings = Vec::new();
    if has(vm_spec, &["running"]) {
        warnings
            .push("spec.running is deprecated, please use spec.runStrategy instead.".to_string());
    }
    Admission {
        errors: Vec::new(),
        warnings,
    }
}

fn run_strategy(vm_spec: &Value, causes: &mut Causes) {
    let running = has(vm_spec, &["running"]);
    let strategy = get(vm_spec, "runStrategy").and_then(Value::as_str);
    if running && strategy.is_some() {
        causes.add(
            ErrorType::Invalid,
            "spec.running",
            "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead",
        );
    }
    if !running && strategy.is_none() {
        causes.add(
            ErrorType::Invalid,
            "spec.running",
            "RunStrategy must be specified",
        );
    }
    match strategy {
        Some("WaitAsReceiver") => causes.add(
            ErrorType::Invalid,
            "spec.runStrategy",
            "Invalid RunStrategy (WaitAsReceiver), DecentralizedLiveMigration feature gate is not enabled in kubevirt resource",
        ),
        Some(s) if crate::model::RunStrategy::parse(s).is_none() => {
            causes.add(ErrorType::Invalid, "spec.runStrategy", format!("Invalid RunStrategy ({s})"))
        }
        _ => {}
    }
}

/// CPU and memory hotplug limits, checked because the default rollout strategy is LiveUpdate.
fn live_update(tspec: &Value, causes: &mut Causes) {
    let sockets = int_at(tspec, &["domain", "cpu", "sockets"]).unwrap_or(0);
    let max_sockets = int_at(tspec, &["domain", "cpu", "maxSockets"]).unwrap_or(0);
    if sockets != 0 && max_sockets != 0 && sockets > max_sockets {
        causes.add(
            ErrorType::Invalid,
            "spec.template.spec.domain.cpu.sockets",
            "Number of sockets in CPU topology is greater than the maximum sockets allowed",
        );
    }
    if let Some(max_guest) = at(tspec, &["domain", "memory", "maxGuest"]) {
        if let Some(message) = spec::memory_hotplug_error(tspec, max_guest) {
            causes.add(
                ErrorType::Invalid,
                "spec.template.spec.domain.memory.guest",
                message,
            );
        }
    }
}

fn reserved_labels(labels: Option<&Value>, field: &str, causes: &mut Causes) {
    let restricted = labels.and_then(Value::as_object).is_some_and(|l| {
        l.keys()
            .any(|k| RESTRICTED_VMI_LABELS.contains(&k.as_str()))
    });
    if restricted {
        causes.add(
            ErrorType::NotSupported,
            field,
            "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
        );
    }
}

/// Validates a VirtualMachineInstance on CREATE, after [`crate::defaults::default_vmi`]: the
/// shared spec rules plus the VMI-only ones (every volume has a disk, some memory is
/// requested, no reserved labels, architecture-specific devices).
pub fn validate_vmi_create(vmi: &Value) -> Admission {
    let vmi_spec = get(vmi, "spec").unwrap_or(&Value::Null);
    let type_errors = typecheck::check(
        vmi_spec,
        "io.kubevirt.v1.VirtualMachineInstanceSpec",
        "spec",
    );
    if !type_errors.is_empty() {
        return Admission {
            errors: type_errors,
            warnings: Vec::new(),
        };
    }
    let p = "spec";
    let mut causes = Causes::default();
    network::discontinued_bindings(vmi_spec, p, &mut causes);
    spec::rules(vmi_spec, p, &mut causes);
    storage::volumes_have_disks(vmi_spec, p, &mut causes);
    spec::memory_requested(vmi_spec, p, &mut causes);
    reserved_labels(
        at(vmi, &["metadata", "labels"]),
        "metadata.labels",
        &mut causes,
    );
    spec::per_architecture(vmi_spec, p, &mut causes);
    Admission::from_causes(causes)
}

/// Validates a user's VirtualMachineInstance UPDATE: the spec is immutable and reserved
/// labels cannot change. (KubeVirt's own components may do both; so may ours.)
pub fn validate_vmi_update(old: &Value, new: &Value) -> Admission {
    let mut causes = Causes::default();
    if spec_of(old) != spec_of(new) {
        causes.add(
            ErrorType::NotSupported,
            "",
            "update of VMI object is restricted",
        );
        return Admission::from_causes(causes);
    }
    let restricted = |vmi: &Value| {
        map_at(vmi, &["metadata", "labels"])
            .map(|labels| {
                labels
                    .iter()
                    .filter(|(k, _)| RESTRICTED_VMI_LABELS.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    if restricted(old) != restricted(new) {
        causes.add(
            ErrorType::NotSupported,
            "",
            "modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
        );
    }
    Admission::from_causes(causes)
}

fn spec_of(object: &Value) -> Value {
    semantic(get(object, "spec").unwrap_or(&Value::Null))
}

/// Validates a VirtualMachineInstanceMigration on CREATE (the checks that need no other
/// object; see [`check_migration_target`] for those that look at the VMI).
///
/// `spec.priority` is rejected as KubeVirt rejects it from anyone but virt-controller, so our
/// migration controllers must not go through this check when they set it.
pub fn validate_vmim_create(vmim: &Value) -> Admission {
    let vmim_spec = get(vmim, "spec").unwrap_or(&Value::Null);
    let type_errors = typecheck::check(
        vmim_spec,
        "io.kubevirt.v1.VirtualMachineInstanceMigrationSpec",
        "spec",
    );
    if !type_errors.is_empty() {
        return Admission {
            errors: type_errors,
            warnings: Vec::new(),
        };
    }
    let mut causes = Causes::default();
    if str_at(vmim_spec, &["vmiName"]).is_empty() {
        causes.add(ErrorType::Required, "spec.vmiName", "vmiName is missing");
    } else if has(vmim_spec, &["priority"]) {
        causes.add(
            ErrorType::Forbidden,
            "spec.migrationPriority",
            "Migration priority queue, only virt-controller is allowed to set priority field",
        );
    } else if has(vmim_spec, &["sendTo"]) || has(vmim_spec, &["receive"]) {
        causes.add(
            ErrorType::NotSupported,
            "",
            "DecentralizedLiveMigration feature gate is not enabled in kubevirt resource",
        );
    }
    Admission::from_causes(causes)
}

/// The migration CREATE checks that need the target VMI (`None` when it does not exist) and
/// the migrations in the same namespace. KubeVirt answers these with a plain 400 and this
/// message, not with field causes.
pub fn check_migration_target(
    vmim: &Value,
    vmi: Option<&Value>,
    migrations: &[Value],
) -> Option<String> {
    let namespace = str_at(vmim, &["metadata", "namespace"]);
    let vmi_name = str_at(vmim, &["spec", "vmiName"]);
    let Some(vmi) = vmi else {
        return Some(format!("the VMI \"{namespace}/{vmi_name}\" does not exist"));
    };
    if matches!(str_at(vmi, &["status", "phase"]), "Succeeded" | "Failed") {
        return Some("Cannot migrate VMI in finalized state.".to_string());
    }
    let not_migratable = list_at(vmi, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == "LiveMigratable" && str_at(c, &["status"]) == "False");
    if let Some(condition) = not_migratable {
        return Some(format!(
            "Cannot migrate VMI, Reason: {}, Message: {}",
            str_at(condition, &["reason"]),
            str_at(condition, &["message"])
        ));
    }
    let in_flight = migrations.iter().find(|m| {
        str_at(m, &["metadata", "labels", MIGRATION_SELECTOR_LABEL]) == vmi_name
            && !matches!(str_at(m, &["status", "phase"]), "Succeeded" | "Failed")
    });
    in_flight.map(|m| {
        format!(
            "in-flight migration detected. Active migration job ({}) is currently already in progress for VMI {}.",
            str_at(m, &["metadata", "uid"]),
            str_at(m, &["spec", "vmiName"])
        )
    })
}

/// Validates a VirtualMachineInstanceMigration UPDATE: the spec is immutable, and an
/// unfinished migration keeps its `kubevirt.io/vmi-name` label.
pub fn validate_vmim_update(old: &Value, new: &Value) -> Admission {
    let mut causes = Causes::default();
    if spec_of(old) != spec_of(new) {
        causes.add(
            ErrorType::NotSupported,
            "",
            "update of Migration object's spec is restricted",
        );
        return Admission::from_causes(causes);
    }
    let finished = matches!(str_at(new, &["status", "phase"]), "Succeeded" | "Failed");
    let old_label = at(old, &["metadata", "labels", MIGRATION_SELECTOR_LABEL]);
    if !finished && old_label.is_some() {
        let new_labels = map_at(new, &["metadata", "labels"]);
        match new_labels {
            None => causes.add(
                ErrorType::NotSupported,
                "",
                "selector label can't be removed from an in-flight migration",
            ),
            Some(labels) if labels.get(MIGRATION_SELECTOR_LABEL) != old_label => causes.add(
                ErrorType::NotSupported,
                "",
                "selector label can't be modified on an in-flight migration",
            ),
            Some(_) => {}
        }
    }
    Admission::from_causes(causes)
}

/// Whether a `hostDisk.path` may be used on this server: it must be absolute, free of `..`,
/// and inside one of `allowed_dirs` (the `--host-disk-dir` flags). Returns the reason when
/// it may not. The check is lexical; node agents must still refuse symlinks that escape.
pub fn validate_host_disk_path(path: &str, allowed_dirs: &[PathBuf]) -> Option<String> {
    if allowed_dirs.is_empty() {
        return Some(
            "hostDisk volumes are not allowed on this server; start it with --host-disk-dir DIR to allow disk images under DIR"
                .to_string(),
        );
    }
    if !path.starts_with('/') {
        return Some(format!("hostDisk path {path:?} must be an absolute path"));
    }
    if path.split('/').any(|part| part == "..") {
        return Some(format!("hostDisk path {path:?} must not contain '..'"));
    }
    let cleaned = clean_path(path);
    let dirs: Vec<String> = allowed_dirs
        .iter()
        .map(|d| clean_path(&d.to_string_lossy()))
        .collect();
    let inside = dirs.iter().any(|dir| {
        let prefix = if dir.ends_with('/') {
            dir.clone()
        } else {
            format!("{dir}/")
        };
        cleaned.starts_with(&prefix) && cleaned.len() > prefix.len()
    });
    (!inside).then(|| {
        format!(
            "hostDisk path {path:?} is not inside an allowed host disk directory ({})",
            dirs.join(", ")
        )
    })
}

/// [`validate_host_disk_path`] for every hostDisk volume of a VMI spec (`path_prefix` is
/// `spec` for a VMI, `spec.template.spec` for a VM).
pub fn validate_host_disks(
    spec: &Value,
    path_prefix: &str,
    allowed_dirs: &[PathBuf],
) -> Vec<FieldError> {
    list_at(spec, &["volumes"])
        .iter()
        .enumerate()
        .filter(|(_, v)| has(v, &["hostDisk"]))
        .filter_map(|(i, v)| {
            let path = str_at(v, &["hostDisk", "path"]);
            let message = validate_host_disk_path(path, allowed_dirs)?;
            Some(FieldError::webhook(
                ErrorType::Forbidden,
                format!("{path_prefix}.volumes[{i}].hostDisk.path"),
                message,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests;
