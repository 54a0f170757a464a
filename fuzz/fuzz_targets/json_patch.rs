//! `application/json-patch+json` on an arbitrary document: an error or a document, never a
//! panic; the outcome is deterministic and an empty patch changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use virtplane_fuzz::{json, split};

fuzz_target!(|data: &[u8]| {
    let parts = split(data, 2);
    let (Some(target), Some(patch)) = (parts.first().and_then(|t| json(t)), parts.get(1)) else {
        return;
    };
    let first = apimachinery::patch::json_patch(&target, patch);
    let second = apimachinery::patch::json_patch(&target, patch);
    match (&first, &second) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => {
            assert_eq!(a.0.code, b.0.code);
            assert!((400..500).contains(&a.0.code), "{a}: code {}", a.0.code);
        }
        _ => panic!("the same patch gave {first:?} then {second:?}"),
    }
    assert_eq!(
        apimachinery::patch::json_patch(&target, b"[]").ok(),
        Some(target)
    );
});
