//! `application/merge-patch+json` (RFC 7386) on an arbitrary document: never a panic, a
//! 4xx for a bad body, and idempotent (applying the same patch again changes nothing).
#![no_main]

use libfuzzer_sys::fuzz_target;
use virtplane_fuzz::{json, split};

fuzz_target!(|data: &[u8]| {
    let parts = split(data, 2);
    let (Some(target), Some(patch)) = (parts.first().and_then(|t| json(t)), parts.get(1)) else {
        return;
    };
    match apimachinery::patch::merge_patch(&target, patch) {
        Ok(once) => {
            let twice = apimachinery::patch::merge_patch(&once, patch).expect("patch applied once");
            assert_eq!(once, twice, "merge patch is not idempotent");
        }
        Err(e) => assert!((400..500).contains(&e.0.code), "{e}: code {}", e.0.code),
    }
});
