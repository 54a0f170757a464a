//! YAML request bodies (`kubectl apply` sends them, so do hand-written curl calls): a
//! parsed document renders to YAML that parses back to the same value.
#![no_main]

use apiserver::fuzzing::{yaml_from_str, yaml_to_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(value) = yaml_from_str(text) else {
        return;
    };
    let rendered = yaml_to_string(&value);
    let again = yaml_from_str(&rendered)
        .unwrap_or_else(|e| panic!("{value} rendered as {rendered:?}, which fails: {e}"));
    assert_eq!(value, again, "rendered as {rendered:?}");
    // The body decoder the write handlers call: a value or a 4xx Status.
    if let Err(status) = apiserver::negotiate::decode_body(
        "application/yaml",
        data,
        "VirtualMachine",
        "kubevirt.io/v1",
    ) {
        assert!((400..500).contains(&status.code), "{status:?}");
    }
});
