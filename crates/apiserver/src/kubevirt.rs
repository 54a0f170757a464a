//! KubeVirt's mutating and validating admission, plugged into the generic registry.

use apimachinery::resource::ResourceInfo;
use kubevirt_api::{admission, defaults, resources, vm_status};
use serde_json::{json, Value};

use apimachinery::status::Status;

use crate::registry::{Admission, Read, ResourceHooks};

fn convert(result: admission::Admission) -> Admission {
    Admission {
        errors: result.errors,
        warnings: result.warnings,
    }
}

/// Directories hostDisk volumes may use (`--host-disk-dir`); anything else is refused
/// at admission.
#[derive(Clone, Default)]
pub struct HostDiskPolicy(pub Vec<std::path::PathBuf>);

impl HostDiskPolicy {
    fn check(&self, mut admission: Admission, spec: Option<&Value>, prefix: &str) -> Admission {
        if let Some(spec) = spec {
            admission
                .errors
                .extend(admission::validate_host_disks(spec, prefix, &self.0));
        }
        admission
    }
}

struct VirtualMachineHooks(HostDiskPolicy);

/// The VM controller would add its finalizer in its first sync anyway; adding it at
/// create spares every new VM one more write (the controller still adds it when missing,
/// e.g. after an apply that dropped it).
fn add_controller_finalizer(vm: &mut Value) {
    let Some(metadata) = vm.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let finalizers = metadata.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(list) = finalizers.as_array_mut() {
        if !list.iter().any(|f| f == resources::VM_CONTROLLER_FINALIZER) {
            list.push(json!(resources::VM_CONTROLLER_FINALIZER));
        }
    }
}

impl ResourceHooks for VirtualMachineHooks {
    fn webhook(&self) -> Option<&'static str> {
        Some(admission::VM_VALIDATOR)
    }
    fn default_on_create(&self, obj: &mut Value) {
        defaults::default_vm_on_create(obj);
    }
    fn controller_fields_on_create(&self, obj: &mut Value) {
        add_controller_finalizer(obj);
        let status = vm_status::initial_stopped_status(obj, &kubevirt_api::meta::now());
        if let (Some(status), Some(root)) = (status, obj.as_object_mut()) {
            root.insert("status".into(), status);
        }
    }
    fn default_on_update(&self, obj: &mut Value) {
        defaults::default_vm_on_update(obj);
    }
    fn validate_create(&self, obj: &Value) -> Admission {
        let template = obj.pointer("/spec/template/spec");
        self.0.check(
            convert(admission::validate_vm_create(obj)),
            template,
            "spec.template.spec",
        )
    }
    fn validate_update(&self, _old: &Value, new: &Value, _privileged: bool) -> Admission {
        let template = new.pointer("/spec/template/spec");
        self.0.check(
            convert(admission::validate_vm(new)),
            template,
            "spec.template.spec",
        )
    }
}

struct VirtualMachineInstanceHooks(HostDiskPolicy);

impl ResourceHooks for VirtualMachineInstanceHooks {
    fn webhook(&self) -> Option<&'static str> {
        Some(admission::VMI_CREATE_VALIDATOR)
    }
    fn update_webhook(&self) -> Option<&'static str> {
        Some(admission::VMI_UPDATE_VALIDATOR)
    }
    fn default_on_create(&self, obj: &mut Value) {
        // Our node agents implement masquerade (NAT) on the pod network, as many
        // KubeVirt distributions configure it.
        defaults::default_vmi(obj, defaults::DefaultNetworkBinding::Masquerade);
        // Held until the node agent (or the scheduler or node lifecycle controller, for a
        // VMI that never ran or whose node vanished) has stopped the guest.
        let mut finalizers = crate::object::finalizers(obj);
        if !finalizers
            .iter()
            .any(|f| f == defaults::VMI_FOREGROUND_FINALIZER)
        {
            finalizers.push(defaults::VMI_FOREGROUND_FINALIZER.to_string());
            crate::object::set_finalizers(obj, finalizers);
        }
        // The mutating webhook records the first phase.
        if let Some(root) = obj.as_object_mut() {
            let status = root.entry("status").or_insert_with(|| json!({}));
            if let Some(status) = status.as_object_mut() {
                status.entry("phase").or_insert_with(|| json!("Pending"));
                status.entry("phaseTransitionTimestamps").or_insert_with(
                    || json!([{"phase": "Pending", "phaseTransitionTimestamp": kubevirt_api::meta::now()}]),
                );
            }
        }
    }
    fn validate_create(&self, obj: &Value) -> Admission {
        self.0.check(
            convert(admission::validate_vmi_create(obj)),
            obj.get("spec"),
            "spec",
        )
    }
    fn validate_update(&self, old: &Value, new: &Value, privileged: bool) -> Admission {
        if privileged {
            return Admission::default();
        }
        convert(admission::validate_vmi_update(old, new))
    }
}

struct MigrationHooks;

impl ResourceHooks for MigrationHooks {
    fn webhook(&self) -> Option<&'static str> {
        Some(admission::MIGRATION_CREATE_VALIDATOR)
    }
    fn update_webhook(&self) -> Option<&'static str> {
        Some(admission::MIGRATION_UPDATE_VALIDATOR)
    }
    fn default_on_create(&self, obj: &mut Value) {
        defaults::default_vmim_on_create(obj);
    }
    fn validate_create(&self, obj: &Value) -> Admission {
        convert(admission::validate_vmim_create(obj))
    }
    fn create_reads(&self, obj: &Value) -> Vec<Read> {
        let vmi = obj.pointer("/spec/vmiName").and_then(Value::as_str);
        let Some(vmi) = vmi else { return Vec::new() };
        let read = |plural, name: Option<&str>| Read {
            group: "kubevirt.io",
            version: "v1",
            plural,
            name: name.map(str::to_string),
        };
        vec![
            read("virtualmachineinstances", Some(vmi)),
            read("virtualmachineinstancemigrations", None),
        ]
    }
    fn validate_create_reading(&self, obj: &Value, read: &[Vec<Value>]) -> Result<(), Status> {
        let vmi = read.first().and_then(|found| found.first());
        let migrations = read.get(1).map(Vec::as_slice).unwrap_or_default();
        match admission::check_migration_target(obj, vmi, migrations) {
            Some(message) => Err(Status::bad_request(message)),
            None => Ok(()),
        }
    }
    fn validate_update(&self, old: &Value, new: &Value, privileged: bool) -> Admission {
        if privileged {
            return Admission::default();
        }
        convert(admission::validate_vmim_update(old, new))
    }
}

/// The cluster configuration and migration policies: stored and served as written; the
/// controllers read them.
struct KubeVirtHooks;

impl ResourceHooks for KubeVirtHooks {}

pub fn registrations(
    host_disks: HostDiskPolicy,
) -> Vec<(&'static ResourceInfo, Box<dyn ResourceHooks>)> {
    vec![
        (
            &resources::VIRTUAL_MACHINE,
            Box::new(VirtualMachineHooks(host_disks.clone())),
        ),
        (
            &resources::VIRTUAL_MACHINE_INSTANCE,
            Box::new(VirtualMachineInstanceHooks(host_disks)),
        ),
        (
            &resources::VIRTUAL_MACHINE_INSTANCE_MIGRATION,
            Box::new(MigrationHooks),
        ),
        (&resources::KUBEVIRT, Box::new(KubeVirtHooks)),
        (&resources::MIGRATION_POLICY, Box::new(KubeVirtHooks)),
    ]
}
