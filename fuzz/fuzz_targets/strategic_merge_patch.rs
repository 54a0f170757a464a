//! `application/strategic-merge-patch+json`: never a panic, a 4xx for a bad body, and
//! for patches without directives or ObjectMeta's merged lists exactly a merge patch.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use virtplane_fuzz::{json, split};

/// Whether `v` holds a key that makes a strategic patch differ from a merge patch.
fn strategic(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| {
            k.starts_with('$') || k == "finalizers" || k == "ownerReferences" || strategic(v)
        }),
        Value::Array(a) => a.iter().any(strategic),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let parts = split(data, 2);
    let (Some(target), Some(patch)) = (parts.first().and_then(|t| json(t)), parts.get(1)) else {
        return;
    };
    let result = apimachinery::patch::strategic_merge_patch(&target, patch);
    if let Err(e) = &result {
        assert!((400..500).contains(&e.0.code), "{e}: code {}", e.0.code);
    }
    let plain = json(patch).is_some_and(|p| !strategic(&p)) && !strategic(&target);
    if plain {
        let merged = apimachinery::patch::merge_patch(&target, patch);
        assert_eq!(
            result.as_ref().ok(),
            merged.as_ref().ok(),
            "strategic and merge patch differ"
        );
    }
});
