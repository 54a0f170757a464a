//! JSON text byte for byte as Kubernetes' Go encoders write it, where clients or other
//! servers see those bytes: continue tokens, Table cells, jsonpath output, the
//! last-applied annotation (all Go `encoding/json`), and the `k:`/`v:` elements of
//! `managedFields` (structured-merge-diff writes them with json-iterator, whose string
//! escaping is `encoding/json`'s from before Go 1.22).

use std::fmt::Write as _;

use serde_json::Value;

/// Whose string escaping to follow. All escape `"`, `\`, `\n`, `\r`, `\t` with a
/// backslash and the other control characters as `\u00xx` (lower-case hex); they differ
/// in `\b`, `\f` and the HTML-sensitive characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Escaping {
    /// Go `encoding/json` (`Marshal`, `Encoder` with HTML escaping), Go 1.22 and later:
    /// `\b` and `\f`; `<`, `>`, `&`, U+2028 and U+2029 as `\u003c`, `\u003e`, `\u0026`,
    /// `\u2028`, `\u2029`.
    EncodingJson,
    /// json-iterator's `ConfigCompatibleWithStandardLibrary` writing a value, as
    /// structured-merge-diff writes the values in `k:`/`v:` field path elements: as
    /// `EncodingJson` but `\b` and `\f` as `\u0008` and `\u000c`.
    JsonIterator,
    /// json-iterator's `WriteObjectField`, which structured-merge-diff uses for the
    /// field names of a `k:` element: control characters only, no HTML escaping.
    JsonIteratorFieldName,
}

/// Appends `s` quoted as `escaping` says.
pub fn push_string(out: &mut String, s: &str, escaping: Escaping) {
    let html = escaping != Escaping::JsonIteratorFieldName;
    let short_b_f = escaping == Escaping::EncodingJson;
    out.push('"');
    let mut plain = 0;
    for (i, c) in s.char_indices() {
        let escape: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{8}' if short_b_f => Some("\\b"),
            '\u{c}' if short_b_f => Some("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if html => Some(""),
            c if (c as u32) < 0x20 => Some(""),
            _ => None,
        };
        let Some(escape) = escape else {
            continue;
        };
        out.push_str(&s[plain..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push_str(escape);
        }
        plain = i + c.len_utf8();
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

/// Unstructured JSON as Go writes it: object keys sorted, integers as integers, other
/// numbers in `encoding/json`'s float64 form (`1.0` is `1`, `1e21` is `1e+21`), strings
/// (and object keys) escaped as `escaping` says.
pub fn marshal(value: &Value, escaping: Escaping) -> String {
    let mut out = String::new();
    write_value(&mut out, value, escaping);
    out
}

/// Appends [`marshal`] of `value`.
pub fn write_value(out: &mut String, value: &Value, escaping: Escaping) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) => {
                let _ = write!(out, "{i}");
            }
            None => out.push_str(&crate::gonum::go_float_json(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => push_string(out, s, escaping),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, escaping);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_string(out, key, escaping);
                out.push(':');
                write_value(out, &map[key.as_str()], escaping);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every ASCII character, the JavaScript line terminators and a few others.
    fn every_ascii_and_more() -> String {
        (0u32..0x80)
            .chain([0x2028, 0x2029, 0xe9, 0xfffd, 0x1f600, 0x85, 0xa0])
            .filter_map(char::from_u32)
            .collect()
    }

    fn quoted(s: &str, escaping: Escaping) -> String {
        let mut out = String::new();
        push_string(&mut out, s, escaping);
        out
    }

    // The expected strings are what Go 1.23 printed for `json.Marshal` of the same
    // string, and what json-iterator 1.1 wrote as structured-merge-diff calls it
    // (`ConfigCompatibleWithStandardLibrary`, `WriteVal` for a value, `WriteObjectField`
    // for a k: field name).

    #[test]
    fn encoding_json_strings() {
        let go = "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f !\\\"#$%\\u0026'()*+,-./0123456789:;\\u003c=\\u003e?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\u{7f}\\u2028\\u2029\u{e9}\u{fffd}\u{1f600}\u{85}\u{a0}\"";
        let s = every_ascii_and_more();
        assert_eq!(quoted(&s, Escaping::EncodingJson), go);
        // Map keys are escaped as values are.
        assert_eq!(
            marshal(&json!({s.clone(): 1}), Escaping::EncodingJson),
            format!("{{{go}:1}}")
        );
    }

    #[test]
    fn json_iterator_strings() {
        let value = "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\u0008\\t\\n\\u000b\\u000c\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f !\\\"#$%\\u0026'()*+,-./0123456789:;\\u003c=\\u003e?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\u{7f}\\u2028\\u2029\u{e9}\u{fffd}\u{1f600}\u{85}\u{a0}\"";
        let field_name = "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\u0008\\t\\n\\u000b\\u000c\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f !\\\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\u{7f}\u{2028}\u{2029}\u{e9}\u{fffd}\u{1f600}\u{85}\u{a0}\"";
        let s = every_ascii_and_more();
        assert_eq!(quoted(&s, Escaping::JsonIterator), value);
        assert_eq!(quoted(&s, Escaping::JsonIteratorFieldName), field_name);
    }

    #[test]
    fn values_as_go_writes_them() {
        // json-iterator printed `{"\u003c\u0008\u2028":"\u003c\u0008","a":[1,1,2.5,1e+21,null,true]}`
        // for the same map; encoding/json differs only in \b.
        let v = json!({"a": [1, 1.0, 2.5, 1e21, null, true], "<\u{8}\u{2028}": "<\u{8}"});
        assert_eq!(
            marshal(&v, Escaping::JsonIterator),
            r#"{"\u003c\u0008\u2028":"\u003c\u0008","a":[1,1,2.5,1e+21,null,true]}"#
        );
        assert_eq!(
            marshal(&v, Escaping::EncodingJson),
            r#"{"\u003c\b\u2028":"\u003c\b","a":[1,1,2.5,1e+21,null,true]}"#
        );
        assert_eq!(marshal(&json!({}), Escaping::EncodingJson), "{}");
        assert_eq!(marshal(&json!([]), Escaping::EncodingJson), "[]");
        assert_eq!(marshal(&json!(-0.0), Escaping::EncodingJson), "-0");
        assert_eq!(
            marshal(&json!(u64::MAX), Escaping::EncodingJson),
            "18446744073709552000"
        );
    }
}
