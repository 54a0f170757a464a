//! Helpers shared by the fuzz targets: splitting one input into several, and the schemas
//! the server checks objects against.

use std::sync::OnceLock;

use apimachinery::schema::Schema;
use serde_json::Value;

/// Splits `data` at NUL bytes into at most `n` parts (the last keeps any further NULs).
/// JSON text cannot hold a raw NUL, so this never cuts a JSON document in two.
pub fn split(data: &[u8], n: usize) -> Vec<&[u8]> {
    data.splitn(n, |&b| b == 0).collect()
}

/// A JSON value from the bytes, if they are JSON.
pub fn json(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

/// The kubevirt.io/v1 kinds the registry serves with a schema, by their component name.
pub const KINDS: [&str; 3] = [
    "VirtualMachine",
    "VirtualMachineInstance",
    "VirtualMachineInstanceMigration",
];

/// The structural schema of one of [`KINDS`], built once.
pub fn schema(kind: &str) -> &'static Schema {
    static SCHEMAS: OnceLock<Vec<Schema>> = OnceLock::new();
    let all = SCHEMAS.get_or_init(|| {
        KINDS
            .iter()
            .map(|k| {
                Schema::from_components(
                    kubevirt_api::schema::openapi_components(),
                    &format!("io.kubevirt.v1.{k}"),
                )
                .expect("the compiled-in schemas build")
            })
            .collect()
    });
    let i = KINDS.iter().position(|k| *k == kind).expect("a known kind");
    &all[i]
}

/// Sets `apiVersion` and `kind` on an object, so that the fuzzer need not guess them.
pub fn set_type(obj: &mut Value, kind: &str) {
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), "kubevirt.io/v1".into());
        map.insert("kind".into(), kind.into());
    }
}
