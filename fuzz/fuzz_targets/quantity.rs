//! Resource quantities (`512Mi`, `1.5`, `100m`, `1e3`): parsing never panics, a sign flips
//! the value, and plain integers with a suffix parse exactly.
#![no_main]

use kubevirt_api::quantity::Quantity;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Exact value of `<digits><suffix>` for short inputs, computed independently.
fn exact(text: &str) -> Option<i128> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let n: i128 = digits.parse().ok()?;
    let factor: i128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return None,
    };
    Some(n * factor)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = Quantity::parse(text);
    let _ = Quantity::from_json(&Value::String(text.to_string()));
    if let Some(q) = parsed {
        let (v, m) = (q.value(), q.milli_value());
        // Both round away from zero, so the milli value is within a unit of 1000 × value.
        if v.unsigned_abs() < (i64::MAX as u64) / 1000 {
            assert!((v * 1000 - m).abs() < 1000, "{text}: value {v}, milli {m}");
        }
        if !text.starts_with(['+', '-']) {
            let negated = Quantity::parse(&format!("-{text}")).expect("the negation parses");
            if v != i64::MAX {
                assert_eq!(negated.value(), -v, "{text}");
            }
            assert_eq!(Quantity::parse(&format!("+{text}")), Some(q), "{text}");
        }
    }
    if let Some(expected) = exact(text).filter(|e| *e <= i128::from(i64::MAX)) {
        let q = parsed.unwrap_or_else(|| panic!("{text} does not parse"));
        assert_eq!(i128::from(q.value()), expected, "{text}");
    }
});
