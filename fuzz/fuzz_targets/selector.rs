//! `?labelSelector=` and `?fieldSelector=`: whatever parses prints back to a selector that
//! parses to the same thing, and matching never panics.
#![no_main]

use apimachinery::selector::{FieldSelector, LabelSelector};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(selector) = LabelSelector::parse(text) {
        let printed = selector.to_string();
        let again = LabelSelector::parse(&printed)
            .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
        assert_eq!(selector, again, "{text:?} printed as {printed:?}");
        // Labels made of the selector's own keys and values: matching must not panic, and
        // an `=` requirement holds on a label set holding exactly its value.
        for r in selector.requirements() {
            let mut labels = Map::new();
            if let Some(v) = r.values().first() {
                labels.insert(r.key().to_string(), Value::String(v.clone()));
            }
            let _ = selector.matches(&labels);
            if r.operator() == apimachinery::selector::Operator::Equals {
                assert!(r.matches(&labels), "{r} on {labels:?}");
            }
        }
    }
    if let Ok(selector) = FieldSelector::parse(text) {
        let printed = selector.to_string();
        let again = FieldSelector::parse(&printed)
            .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
        // The terms are an AND: compare them as sets (printing normalises `==` to `=`,
        // which may reorder terms that are sorted as text).
        let terms = |s: &FieldSelector| {
            let mut t: Vec<String> = s
                .requirements()
                .iter()
                .map(|r| format!("{:?}", (&r.field, r.operator, &r.value)))
                .collect();
            t.sort();
            t
        };
        assert_eq!(
            terms(&selector),
            terms(&again),
            "{text:?} printed as {printed:?}"
        );
        let _ = selector.matches(|field| Some(field.to_string()));
    }
    // The structured form (`matchLabels`/`matchExpressions`) from JSON.
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        if let Ok(selector) = LabelSelector::from_label_selector_json(&value) {
            let printed = selector.to_string();
            if !selector.requirements().is_empty() {
                let again = LabelSelector::parse(&printed)
                    .unwrap_or_else(|e| panic!("{value} printed as {printed:?}, which fails: {e}"));
                assert_eq!(selector, again, "{value} printed as {printed:?}");
            }
        }
    }
});
