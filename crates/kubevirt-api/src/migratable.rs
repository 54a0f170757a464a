//! Whether a VMI can be live-migrated, and how: virt-handler's `LiveMigratable` checks
//! (the first that fails gives the condition's reason and message) and the migration
//! method its volumes need.

use crate::devices::Binding;
use crate::model::VirtualMachineInstance;
use crate::volumes::Source;

/// Why a VMI cannot move: the reason and message of `LiveMigratable=False`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotMigratable {
    pub reason: &'static str,
    pub message: String,
}

/// `status.migrationMethod`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Only memory moves: every disk is shared.
    LiveMigration,
    /// Some disk lives on the node (containerDisk, emptyDisk, seeds) and is copied.
    BlockMigration,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::LiveMigration => "LiveMigration",
            Method::BlockMigration => "BlockMigration",
        }
    }
}

/// Annotation that lets a VMI with a bridge binding on the pod network migrate.
pub const ALLOW_POD_BRIDGE_MIGRATION: &str = "kubevirt.io/allow-pod-bridge-network-live-migration";

/// Checks a VMI object (spec and annotations) in virt-handler's order. `claim_shared`
/// says whether a claim is ReadWriteMany (`None`: unknown).
pub fn check(
    vmi: &VirtualMachineInstance,
    claim_shared: impl Fn(&str) -> Option<bool>,
) -> Result<Method, NotMigratable> {
    let spec = &vmi.spec;
    let allow_bridge = vmi
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ALLOW_POD_BRIDGE_MIGRATION));
    for iface in spec.interfaces() {
        let migratable_binding = match iface.binding {
            Binding::Masquerade | Binding::Passt | Binding::Plugin(_) => true,
            Binding::Bridge => allow_bridge,
            Binding::Sriov | Binding::Unset => false,
        };
        if spec.on_pod_network(&iface.name) && !migratable_binding {
            return Err(NotMigratable {
                reason: "InterfaceNotLiveMigratable",
                message: "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network".into(),
            });
        }
    }
    let devices = spec.devices();
    let listed = |list: Option<&Vec<serde_json::Value>>| list.is_some_and(|l| !l.is_empty());
    if listed(devices.and_then(|d| d.host_devices.as_ref()))
        || listed(devices.and_then(|d| d.gpus.as_ref()))
    {
        return Err(NotMigratable {
            reason: "HostDeviceNotLiveMigratable",
            message: "VMI uses a PCI host devices".into(),
        });
    }
    let mut method = Method::LiveMigration;
    for volume in spec.volumes() {
        if let Source::HostDisk(host) = &volume.source {
            if host.shared != Some(true) {
                return Err(NotMigratable {
                    reason: "DisksNotLiveMigratable",
                    message: "cannot migrate VMI with non-shared HostDisk".into(),
                });
            }
        }
        if let Some(claim) = volume.source.claim() {
            match claim_shared(claim) {
                Some(true) => {}
                Some(false) => return Err(NotMigratable {
                    reason: "DisksNotLiveMigratable",
                    message: format!("cannot migrate VMI: PVC {claim} is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"),
                }),
                None => return Err(NotMigratable {
                    reason: "DisksNotLiveMigratable",
                    message: format!("cannot migrate VMI: Unable to determine if PVC {claim} is shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"),
                }),
            }
        }
        if volume.source.node_local() {
            method = Method::BlockMigration;
        }
    }
    Ok(method)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn vmi(spec: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({"metadata": {}, "spec": spec})).unwrap()
    }

    #[test]
    fn masquerade_with_local_disks_moves_by_block_migration() {
        let v = vmi(json!({
            "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "root", "containerDisk": {"image": "x"}},
                        {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config"}}]
        }));
        assert_eq!(check(&v, |_| None), Ok(Method::BlockMigration));
        let shared =
            vmi(json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}));
        assert_eq!(check(&shared, |_| Some(true)), Ok(Method::LiveMigration));
    }

    #[test]
    fn the_first_failing_check_gives_the_reason() {
        let bridge = vmi(json!({
            "domain": {"devices": {"interfaces": [{"name": "default", "bridge": {}}],
                                   "hostDevices": [{"name": "h"}]}},
            "networks": [{"name": "default", "pod": {}}]
        }));
        let err = check(&bridge, |_| None).unwrap_err();
        assert_eq!(err.reason, "InterfaceNotLiveMigratable");
        let mut allowed = bridge.clone();
        allowed.metadata.annotations =
            Some([(ALLOW_POD_BRIDGE_MIGRATION.to_string(), String::new())].into());
        assert_eq!(
            check(&allowed, |_| None).unwrap_err().reason,
            "HostDeviceNotLiveMigratable"
        );
        let rwo =
            vmi(json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}));
        assert_eq!(
            check(&rwo, |_| Some(false)).unwrap_err().message,
            "cannot migrate VMI: PVC c is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"
        );
        let host =
            vmi(json!({"volumes": [{"name": "d", "hostDisk": {"path": "/x", "type": "Disk"}}]}));
        assert_eq!(
            check(&host, |_| None).unwrap_err().message,
            "cannot migrate VMI with non-shared HostDisk"
        );
    }
}
