//! `?continue=` tokens exactly as kube-apiserver issues them (`k8s.io/apiserver/pkg/storage`):
//! unpadded URL-safe base64 of `{"v":"meta.k8s.io/v1","rv":<int>,"start":"<key>\u0000"}`,
//! the key relative to the resource prefix (`<namespace>/<name>` or `<name>`) with a NUL
//! appended so the next page starts strictly after it. Clients treat the token as opaque but
//! may carry it across servers, so the bytes match upstream; invalid tokens get upstream's
//! 400 messages.

use serde_json::Value;

use crate::gojson::{self, Escaping};

const VERSION: &str = "meta.k8s.io/v1";
const INVALID: &str = "continue key is not valid";

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Encodes a token for a page that ended at `start_key_after` (relative key, no NUL).
pub fn encode(rv: i64, start_key_after: &str) -> String {
    let mut json = format!("{{\"v\":\"{VERSION}\",\"rv\":{rv},\"start\":");
    gojson::push_string(
        &mut json,
        &format!("{start_key_after}\0"),
        Escaping::EncodingJson,
    );
    json.push('}');
    raw_url_encode(json.as_bytes())
}

/// Decodes a token into its resource version and the relative key to continue after (the
/// trailing NUL removed). A negative resource version is passed through: upstream uses it to
/// mean "continue at the latest revision".
///
/// Tokens without the trailing NUL (never issued by kube) are treated the same, so the key
/// itself is skipped, where upstream would include it.
pub fn decode(token: &str) -> Result<(i64, String), String> {
    let data = raw_url_decode(token)
        .map_err(|offset| format!("{INVALID}: illegal base64 data at input byte {offset}"))?;
    let (version, rv, start) = unmarshal(&data).map_err(|e| format!("{INVALID}: {e}"))?;
    if version != VERSION {
        return Err(format!(
            "{INVALID}: server does not recognize this encoded version {version}"
        ));
    }
    if rv == 0 {
        return Err(format!(
            "{INVALID}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ));
    }
    if start.is_empty() {
        return Err(format!(
            "{INVALID}: encoded start key empty (version meta.k8s.io/v1)"
        ));
    }
    // Guard against path traversal: the key must already be in `path.Clean` form.
    let rooted = if start.starts_with('/') {
        start.clone()
    } else {
        format!("/{start}")
    };
    if !is_clean_path(&rooted) {
        return Err(format!("{INVALID}: {start}"));
    }
    let relative = &rooted[1..];
    Ok((
        rv,
        relative.strip_suffix('\0').unwrap_or(relative).to_string(),
    ))
}

/// Whether Go's `path.Clean` would leave this rooted path unchanged.
fn is_clean_path(path: &str) -> bool {
    if path == "/" {
        return true;
    }
    !path.ends_with('/')
        && path[1..]
            .split('/')
            .all(|segment| !matches!(segment, "" | "." | ".."))
}

fn raw_url_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize]));
        }
    }
    out
}

/// Go's `base64.RawURLEncoding.DecodeString`: CR and LF are skipped, non-canonical trailing
/// bits are accepted, and errors carry the offending input offset.
fn raw_url_decode(s: &str) -> Result<Vec<u8>, usize> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3 + 2);
    let mut quantum = [0u8; 4];
    let mut filled = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if b == b'\r' || b == b'\n' {
            continue;
        }
        let value = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return Err(i),
        };
        quantum[filled] = value;
        filled += 1;
        if filled == 4 {
            push_quantum(&mut out, &quantum, 4);
            filled = 0;
        }
    }
    match filled {
        0 => Ok(out),
        1 => Err(s.len().saturating_sub(1)),
        n => {
            push_quantum(&mut out, &quantum, n);
            Ok(out)
        }
    }
}

fn push_quantum(out: &mut Vec<u8>, quantum: &[u8; 4], symbols: usize) {
    let n = (u32::from(quantum[0]) << 18)
        | (u32::from(quantum[1]) << 12)
        | (u32::from(quantum[2]) << 6)
        | u32::from(quantum[3]);
    let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
    out.extend_from_slice(&bytes[..symbols - 1]);
}

/// `json.Unmarshal` into upstream's `continueToken{v string; rv int64; start string}`:
/// keys match case-insensitively, unknown keys and nulls are ignored, and type mismatches
/// produce Go's messages.
fn unmarshal(data: &[u8]) -> Result<(String, i64, String), String> {
    let text = String::from_utf8_lossy(data);
    let value: Value = serde_json::from_str(&text).map_err(|e| go_syntax_error(&text, &e))?;
    let object = match value {
        Value::Null => return Ok((String::new(), 0, String::new())),
        Value::Object(object) => object,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type storage.continueToken",
                go_json_kind(&other)
            ))
        }
    };
    let (mut version, mut rv, mut start) = (String::new(), 0i64, String::new());
    let mut first_error = None;
    // Go names the literal only when a number does not fit a numeric field.
    let mut type_error = |field: &str, got: String, go_type: &str| {
        first_error.get_or_insert(format!(
            "json: cannot unmarshal {got} into Go struct field continueToken.{field} of type {go_type}"
        ));
    };
    for (key, field) in &object {
        match (key.to_ascii_lowercase().as_str(), field) {
            (_, Value::Null) => {}
            ("v", Value::String(s)) => version = s.clone(),
            ("v", other) => type_error("v", go_json_kind(other).to_string(), "string"),
            ("start", Value::String(s)) => start = s.clone(),
            ("start", other) => type_error("start", go_json_kind(other).to_string(), "string"),
            ("rv", Value::Number(n)) => match n.as_i64() {
                Some(i) => rv = i,
                None => type_error("rv", format!("number {n}"), "int64"),
            },
            ("rv", other) => type_error("rv", go_json_kind(other).to_string(), "int64"),
            _ => {}
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok((version, rv, start)),
    }
}

/// The JSON kind names of Go's `UnmarshalTypeError`.
fn go_json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An approximation of Go's JSON syntax errors (the context wording after the character
/// can differ from Go's decoder).
fn go_syntax_error(text: &str, error: &serde_json::Error) -> String {
    if error.is_eof() {
        return "unexpected end of JSON input".to_string();
    }
    let line = text
        .lines()
        .nth(error.line().saturating_sub(1))
        .unwrap_or("");
    match line.chars().nth(error.column().saturating_sub(1)) {
        Some(c) => format!(
            "invalid character {} looking for beginning of value",
            go_quote_char(c)
        ),
        None => "unexpected end of JSON input".to_string(),
    }
}

/// Go's `%q` of a rune inside JSON errors: `'x'`, with `'\''` and escapes for controls.
fn go_quote_char(c: char) -> String {
    match c {
        '\'' => "'\\''".to_string(),
        '"' => "'\"'".to_string(),
        c if c.is_control() => format!("'\\x{:02x}'", c as u32),
        c => format!("'{c}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use proptest::prelude::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
    }

    #[test]
    fn encodes_exactly_like_kube() {
        let token = encode(123, "default/vm1");
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&token)
            .unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            "{\"v\":\"meta.k8s.io/v1\",\"rv\":123,\"start\":\"default/vm1\\u0000\"}"
        );
        assert_eq!(
            token,
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzLCJzdGFydCI6ImRlZmF1bHQvdm0xXHUwMDAwIn0"
        );
        assert!(!encode(1, "a").contains('='));
        assert_eq!(decode(&encode(1, "<&>")).unwrap().1, "<&>");
        assert!(String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(encode(1, "<"))
                .unwrap()
        )
        .unwrap()
        .contains("\\u003c"));
    }

    #[test]
    fn decodes_round_trip() {
        assert_eq!(
            decode(&encode(42, "ns/name")).unwrap(),
            (42, "ns/name".to_string())
        );
        assert_eq!(
            decode(&encode(-1, "name")).unwrap(),
            (-1, "name".to_string())
        );
        // Leading slash is accepted and stripped; no NUL is tolerated.
        assert_eq!(
            decode(&b64(r#"{"v":"meta.k8s.io/v1","rv":7,"start":"/a/b"}"#)).unwrap(),
            (7, "a/b".to_string())
        );
        // Case-insensitive keys, unknown keys, and newlines in the base64 text.
        let token = b64(r#"{"V":"meta.k8s.io/v1","RV":7,"Start":"a\u0000","x":[1]}"#);
        let with_newline = format!("{}\n{}", &token[..4], &token[4..]);
        assert_eq!(decode(&with_newline).unwrap(), (7, "a".to_string()));
    }

    #[test]
    fn error_messages() {
        let cases = [
            (
                "a",
                "continue key is not valid: illegal base64 data at input byte 0",
            ),
            (
                "ab=",
                "continue key is not valid: illegal base64 data at input byte 2",
            ),
            (
                "ab+c",
                "continue key is not valid: illegal base64 data at input byte 2",
            ),
            (
                "abcde",
                "continue key is not valid: illegal base64 data at input byte 4",
            ),
            (
                "",
                "continue key is not valid: unexpected end of JSON input",
            ),
        ];
        for (token, want) in cases {
            assert_eq!(decode(token).unwrap_err(), want, "{token:?}");
        }
        let json_cases = [
            ("x", "continue key is not valid: invalid character 'x' looking for beginning of value"),
            ("{\"v\":", "continue key is not valid: unexpected end of JSON input"),
            ("[]", "continue key is not valid: json: cannot unmarshal array into Go value of type storage.continueToken"),
            (r#"{"v":1}"#, "continue key is not valid: json: cannot unmarshal number into Go struct field continueToken.v of type string"),
            (r#"{"rv":"1"}"#, "continue key is not valid: json: cannot unmarshal string into Go struct field continueToken.rv of type int64"),
            (r#"{"rv":1.5}"#, "continue key is not valid: json: cannot unmarshal number 1.5 into Go struct field continueToken.rv of type int64"),
            ("null", "continue key is not valid: server does not recognize this encoded version "),
            (r#"{"v":"meta.k8s.io/v2","rv":1,"start":"a"}"#, "continue key is not valid: server does not recognize this encoded version meta.k8s.io/v2"),
            (r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#, "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"),
            (r#"{"v":"meta.k8s.io/v1","rv":1,"start":""}"#, "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"),
            (r#"{"v":"meta.k8s.io/v1","rv":1,"start":"../x"}"#, "continue key is not valid: ../x"),
            (r#"{"v":"meta.k8s.io/v1","rv":1,"start":"a//b"}"#, "continue key is not valid: a//b"),
            (r#"{"v":"meta.k8s.io/v1","rv":1,"start":"a/./b"}"#, "continue key is not valid: a/./b"),
            (r#"{"v":"meta.k8s.io/v1","rv":1,"start":"a/"}"#, "continue key is not valid: a/"),
        ];
        for (json, want) in json_cases {
            assert_eq!(decode(&b64(json)).unwrap_err(), want, "{json}");
        }
        assert_eq!(
            decode(&b64(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"/"}"#)).unwrap(),
            (1, String::new())
        );
    }

    proptest! {
        #[test]
        fn round_trip(rv in prop::num::i64::ANY.prop_filter("non-zero", |rv| *rv != 0), key in "[a-z0-9.-]{1,20}(/[a-z0-9.-]{1,20})?") {
            prop_assume!(key.split('/').all(|s| s != "." && s != ".."));
            let token = encode(rv, &key);
            prop_assert_eq!(decode(&token).unwrap(), (rv, key));
            prop_assert_eq!(raw_url_decode(&token).unwrap(), base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&token).unwrap());
        }

        #[test]
        fn decode_never_panics(s in "\\PC{0,60}") {
            let _ = decode(&s);
        }

        #[test]
        fn decode_never_panics_on_valid_base64(bytes in prop::collection::vec(any::<u8>(), 0..60)) {
            let _ = decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes));
        }
    }
}
