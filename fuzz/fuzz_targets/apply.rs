//! Server-side apply of an arbitrary configuration onto an arbitrary live VirtualMachine:
//! never a panic, and applying the same configuration again by the same manager is a
//! no-op. Also records a plain update between the two, as every non-apply write does.
#![no_main]

use apimachinery::ssa;
use libfuzzer_sys::fuzz_target;
use virtplane_fuzz::{json, schema, set_type, split};

const NOW: &str = "2024-01-01T00:00:00Z";

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let parts = split(data, 2);
    let [live, applied] = parts.as_slice() else {
        return;
    };
    let (Some(mut live), Some(mut applied)) = (json(live), json(applied)) else {
        return;
    };
    let schema = schema("VirtualMachine");
    set_type(&mut live, "VirtualMachine");
    set_type(&mut applied, "VirtualMachine");
    let force = flags & 1 != 0;
    let live = (flags & 2 != 0).then_some(live);

    let Ok(first) = ssa::apply(live.as_ref(), &applied, "fuzz", force, schema, NOW) else {
        return;
    };
    let again = ssa::apply(Some(&first), &applied, "fuzz", force, schema, NOW)
        .unwrap_or_else(|e| panic!("the second apply failed: {e}"));
    assert_eq!(
        first, again,
        "applying the same configuration twice changed the object"
    );

    let mut updated = applied.clone();
    ssa::record_update(
        Some(first),
        &mut updated,
        "fuzz-update",
        None,
        "kubevirt.io/v1",
        NOW,
        schema,
    );
    let _ = ssa::apply(Some(&updated), &applied, "fuzz", force, schema, NOW);
});
