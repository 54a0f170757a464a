//! The three kubevirt.io/v1 kinds as the API server registers them: names, scope, status
//! subresource and `kubectl get` columns exactly as KubeVirt's CRDs declare them.

use apimachinery::resource::{PrinterColumn, ResourceInfo};

const GROUP: &str = "kubevirt.io";
const VERSION: &str = "v1";

const READY: PrinterColumn = PrinterColumn {
    name: "Ready",
    column_type: "string",
    json_path: ".status.conditions[?(@.type=='Ready')].status",
    description:
        "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type=='Ready')].status",
    priority: 0,
};

/// The VM controller's finalizer: it holds a VM until its VMI is gone.
pub const VM_CONTROLLER_FINALIZER: &str = crate::names::finalizers::VM_CONTROLLER;

pub static VIRTUAL_MACHINE: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "VirtualMachine",
    list_kind: "VirtualMachineList",
    plural: "virtualmachines",
    singular: "virtualmachine",
    short_names: &["vm", "vms"],
    categories: &["all"],
    namespaced: true,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn::CRD_AGE,
        PrinterColumn {
            name: "Status",
            column_type: "string",
            json_path: ".status.printableStatus",
            description: "Human Readable Status",
            priority: 0,
        },
        READY,
    ],
    schema_name: "io.kubevirt.v1.VirtualMachine",
};

/// KubeVirt serves VMIs without a status subresource: status travels with the main resource
/// and its validating webhook protects the spec instead.
pub static VIRTUAL_MACHINE_INSTANCE: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "VirtualMachineInstance",
    list_kind: "VirtualMachineInstanceList",
    plural: "virtualmachineinstances",
    singular: "virtualmachineinstance",
    short_names: &["vmi", "vmis"],
    categories: &["all"],
    namespaced: true,
    status_subresource: false,
    printer_columns: &[
        PrinterColumn::CRD_AGE,
        PrinterColumn {
            name: "Phase",
            column_type: "string",
            json_path: ".status.phase",
            description: "Custom resource definition column (in JSONPath format): .status.phase",
            priority: 0,
        },
        PrinterColumn {
            name: "IP",
            column_type: "string",
            json_path: ".status.interfaces[0].ipAddress",
            description: "Custom resource definition column (in JSONPath format): .status.interfaces[0].ipAddress",
            priority: 0,
        },
        PrinterColumn {
            name: "NodeName",
            column_type: "string",
            json_path: ".status.nodeName",
            description: "Custom resource definition column (in JSONPath format): .status.nodeName",
            priority: 0,
        },
        READY,
        PrinterColumn {
            name: "Live-Migratable",
            column_type: "string",
            json_path: ".status.conditions[?(@.type=='LiveMigratable')].status",
            description: "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type=='LiveMigratable')].status",
            priority: 1,
        },
        PrinterColumn {
            name: "Paused",
            column_type: "string",
            json_path: ".status.conditions[?(@.type=='Paused')].status",
            description: "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type=='Paused')].status",
            priority: 1,
        },
    ],
    schema_name: "io.kubevirt.v1.VirtualMachineInstance",
};

pub static VIRTUAL_MACHINE_INSTANCE_MIGRATION: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "VirtualMachineInstanceMigration",
    list_kind: "VirtualMachineInstanceMigrationList",
    plural: "virtualmachineinstancemigrations",
    singular: "virtualmachineinstancemigration",
    short_names: &["vmim", "vmims"],
    categories: &["all"],
    namespaced: true,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn {
            name: "Phase",
            column_type: "string",
            json_path: ".status.phase",
            description: "The current phase of VM instance migration",
            priority: 0,
        },
        PrinterColumn {
            name: "VMI",
            column_type: "string",
            json_path: ".spec.vmiName",
            description: "The name of the VMI to perform the migration on",
            priority: 0,
        },
    ],
    schema_name: "io.kubevirt.v1.VirtualMachineInstanceMigration",
};

/// The cluster-wide configuration (`kubectl get kubevirt -n kubevirt`).
pub static KUBEVIRT: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "KubeVirt",
    list_kind: "KubeVirtList",
    plural: "kubevirts",
    singular: "kubevirt",
    short_names: &["kv", "kvs"],
    categories: &[],
    namespaced: true,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn::CRD_AGE,
        PrinterColumn {
            name: "Phase",
            column_type: "string",
            json_path: ".status.phase",
            description: "Custom resource definition column (in JSONPath format): .status.phase",
            priority: 0,
        },
    ],
    schema_name: "io.kubevirt.v1.KubeVirt",
};

/// `migrations.kubevirt.io/v1alpha1` MigrationPolicy: per-VMI migration settings.
pub static MIGRATION_POLICY: ResourceInfo = ResourceInfo {
    group: "migrations.kubevirt.io",
    version: "v1alpha1",
    kind: "MigrationPolicy",
    list_kind: "MigrationPolicyList",
    plural: "migrationpolicies",
    singular: "migrationpolicy",
    short_names: &[],
    categories: &[],
    namespaced: false,
    status_subresource: true,
    printer_columns: &[PrinterColumn::CRD_AGE],
    schema_name: "io.kubevirt.migrations.v1alpha1.MigrationPolicy",
};

/// Every kubevirt.io/v1 kind the VM workflow uses, in the order discovery lists them.
pub fn all() -> [&'static ResourceInfo; 3] {
    [
        &VIRTUAL_MACHINE,
        &VIRTUAL_MACHINE_INSTANCE,
        &VIRTUAL_MACHINE_INSTANCE_MIGRATION,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::openapi_components;

    #[test]
    fn names_match_kubevirt() {
        let [vm, vmi, vmim] = all();
        assert_eq!(
            (vm.plural, vm.short_names),
            ("virtualmachines", &["vm", "vms"][..])
        );
        assert_eq!(
            (vmi.plural, vmi.short_names),
            ("virtualmachineinstances", &["vmi", "vmis"][..])
        );
        assert_eq!(
            (vmim.plural, vmim.short_names),
            ("virtualmachineinstancemigrations", &["vmim", "vmims"][..])
        );
        assert!(vm.status_subresource && !vmi.status_subresource && vmim.status_subresource);
        for info in all() {
            assert_eq!(info.api_version(), "kubevirt.io/v1");
            assert_eq!(info.categories, &["all"]);
            assert!(info.namespaced);
            let schema = &openapi_components()[info.schema_name];
            assert_eq!(
                schema["x-kubernetes-group-version-kind"][0]["kind"],
                info.kind
            );
            let list = &openapi_components()[format!("io.kubevirt.v1.{}", info.list_kind)];
            assert_eq!(
                list["x-kubernetes-group-version-kind"][0]["kind"],
                info.list_kind
            );
        }
    }

    #[test]
    fn printer_columns_match_kubevirt_crds() {
        let cols = |info: &ResourceInfo| {
            info.printer_columns
                .iter()
                .map(|c| (c.name, c.json_path, c.priority))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            cols(&VIRTUAL_MACHINE),
            [
                ("Age", ".metadata.creationTimestamp", 0),
                ("Status", ".status.printableStatus", 0),
                ("Ready", ".status.conditions[?(@.type=='Ready')].status", 0),
            ]
        );
        assert_eq!(
            cols(&VIRTUAL_MACHINE_INSTANCE),
            [
                ("Age", ".metadata.creationTimestamp", 0),
                ("Phase", ".status.phase", 0),
                ("IP", ".status.interfaces[0].ipAddress", 0),
                ("NodeName", ".status.nodeName", 0),
                ("Ready", ".status.conditions[?(@.type=='Ready')].status", 0),
                (
                    "Live-Migratable",
                    ".status.conditions[?(@.type=='LiveMigratable')].status",
                    1
                ),
                (
                    "Paused",
                    ".status.conditions[?(@.type=='Paused')].status",
                    1
                ),
            ]
        );
        assert_eq!(
            cols(&VIRTUAL_MACHINE_INSTANCE_MIGRATION),
            [("Phase", ".status.phase", 0), ("VMI", ".spec.vmiName", 0)]
        );
        assert_eq!(VIRTUAL_MACHINE.printer_columns[0].column_type, "date");
        assert_eq!(
            VIRTUAL_MACHINE.printer_columns[1].description,
            "Human Readable Status"
        );
    }
}
