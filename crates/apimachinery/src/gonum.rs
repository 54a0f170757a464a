//! Floats printed byte for byte as Go prints them: `%v` (Tables, jsonpath output,
//! messages) and `encoding/json`'s form (JSON output), from the shortest round-trip digits.

use std::fmt::Write as _;

/// Shortest round-trip decimal digits of a finite, non-zero `|f|` and the position of the
/// decimal point (`0.d1d2... × 10^dp`), which both Go formatters start from.
fn shortest_digits(f: f64) -> (Vec<u8>, i32) {
    let text = format!("{:e}", f.abs());
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    (digits, exponent.parse::<i32>().unwrap_or(0) + 1)
}

/// Go `fmtE` with all digits: `d.ddde±XX`.
fn format_e(digits: &[u8], dp: i32, negative: bool) -> String {
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    out.push(char::from(digits.first().copied().unwrap_or(b'0')));
    if digits.len() > 1 {
        out.push('.');
        out.extend(digits[1..].iter().map(|&d| char::from(d)));
    }
    let exp = dp - 1;
    let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    out
}

/// Go `fmtF` with as many decimals as there are fractional digits.
fn format_f(digits: &[u8], dp: i32, negative: bool) -> String {
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    let digit = |i: i32| {
        usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i))
            .map_or('0', |&d| char::from(d))
    };
    if dp > 0 {
        (0..dp).for_each(|i| out.push(digit(i)));
    } else {
        out.push('0');
    }
    let decimals = (i32::try_from(digits.len()).unwrap_or(i32::MAX) - dp).max(0);
    if decimals > 0 {
        out.push('.');
        (0..decimals).for_each(|i| out.push(digit(dp + i)));
    }
    out
}

/// Go's `%v` of a float64: shortest digits, exponent form below 1e-4 and from 1e6 (`%g`).
pub(crate) fn go_float_v(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let (digits, dp) = shortest_digits(f);
    let exp = dp - 1;
    if !(-4..6).contains(&exp) {
        format_e(&digits, dp, f < 0.0)
    } else {
        format_f(&digits, dp, f < 0.0)
    }
}

/// Go `encoding/json`'s float64 form: plain decimals except below 1e-6 or from 1e21.
pub(crate) fn go_float_json(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let (digits, dp) = shortest_digits(f);
    let abs = f.abs();
    if !(1e-6..1e21).contains(&abs) {
        let e = format_e(&digits, dp, f < 0.0);
        // Go trims one leading zero of a negative exponent: e-07 -> e-7.
        match e.rfind("e-0") {
            Some(i) if e.len() == i + 4 => format!("{}e-{}", &e[..i], &e[i + 3..]),
            _ => e,
        }
    } else {
        format_f(&digits, dp, f < 0.0)
    }
}
