//! A JSON create body through everything the registry runs before storing it: decoding,
//! pruning, structural validation, KubeVirt's defaulting and admission, for each served
//! kubevirt.io kind. Pruning is idempotent and no step panics; the typed status parts
//! (`migrationState`) read back what they write.
#![no_main]

use std::path::PathBuf;

use kubevirt_api::model::vmi::MigrationState;
use kubevirt_api::{admission, defaults, vm_status};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use virtplane_fuzz::{schema, set_type, KINDS};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let kind = KINDS[usize::from(selector) % KINDS.len()];
    let mut obj = match apiserver::negotiate::decode_body("application/json", body, kind, "v1") {
        Ok(obj) => obj,
        Err(status) => {
            assert!((400..500).contains(&status.code), "{status:?}");
            return;
        }
    };
    if selector & 0x80 != 0 {
        set_type(&mut obj, kind);
    }
    let schema = schema(kind);
    schema.prune(&mut obj);
    let pruned = obj.clone();
    assert!(
        schema.prune(&mut obj).is_empty(),
        "a second prune removed more"
    );
    assert_eq!(obj, pruned);
    let _ = schema.validate(&obj);

    let dirs = [PathBuf::from("/var/lib/virtplane/disks")];
    match kind {
        "VirtualMachine" => {
            defaults::default_vm_on_create(&mut obj);
            let _ = admission::validate_vm_create(&obj);
            if let Some(spec) = obj.pointer("/spec/template/spec") {
                let _ = admission::validate_host_disks(spec, "spec.template.spec", &dirs);
            }
            let _ = vm_status::initial_stopped_status(&obj, "2024-01-01T00:00:00Z");
            defaults::default_vm_on_update(&mut obj);
            let _ = admission::validate_vm(&obj);
        }
        "VirtualMachineInstance" => {
            defaults::default_vmi(&mut obj, defaults::DefaultNetworkBinding::Masquerade);
            let _ = admission::validate_vmi_create(&obj);
            if let Some(spec) = obj.get("spec") {
                let _ = admission::validate_host_disks(spec, "spec", &dirs);
            }
            let _ = admission::validate_vmi_update(&pruned, &obj);
            if let Some(state) = obj.pointer("/status/migrationState") {
                round_trip(state);
            }
        }
        _ => {
            defaults::default_vmim_on_create(&mut obj);
            let _ = admission::validate_vmim_create(&obj);
            let _ = admission::check_migration_target(
                &obj,
                Some(&pruned),
                std::slice::from_ref(&pruned),
            );
            let _ = admission::validate_vmim_update(&pruned, &obj);
        }
    }
});

/// Reading a `migrationState` and writing it back, then reading that: the same state.
fn round_trip(state: &Value) {
    let Ok(read) = serde_json::from_value::<MigrationState>(state.clone()) else {
        return;
    };
    let written = serde_json::to_value(&read).expect("a MigrationState serializes");
    let again: MigrationState =
        serde_json::from_value(written.clone()).unwrap_or_else(|e| panic!("{written}: {e}"));
    assert_eq!(read, again);
}
