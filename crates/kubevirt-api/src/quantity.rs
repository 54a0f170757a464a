//! Kubernetes resource quantities (`512Mi`, `1.5`, `100m`, `1e3`), parsed with the grammar of
//! apimachinery's `resource.ParseQuantity` and held exactly enough for the comparisons and
//! roundings KubeVirt's webhooks make (`Value()` and `MilliValue()` round away from zero).

use serde_json::Value;

/// What Go's `resource.ErrFormatWrong` says; KubeVirt prints it for malformed quantities.
pub(crate) const FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// A quantity in units of 10^-9, saturated at the `i128` range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity {
    nanos: i128,
}

impl Quantity {
    pub fn parse(text: &str) -> Option<Quantity> {
        let bytes = text.as_bytes();
        if bytes.is_empty() {
            return None;
        }
        let mut pos = 0;
        let negative = match bytes[0] {
            b'-' => {
                pos = 1;
                true
            }
            b'+' => {
                pos = 1;
                false
            }
            _ => false,
        };
        let int_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        let int_digits = &text[int_start..pos];
        let mut frac_digits = "";
        if pos < bytes.len() && bytes[pos] == b'.' {
            pos += 1;
            let frac_start = pos;
            while pos < bytes.len() && bytes[pos].is_ascii_digit() {
                pos += 1;
            }
            frac_digits = &text[frac_start..pos];
        }
        let (ten_exp, two_exp) = suffix_exponents(&text[pos..])?;

        let mut mantissa: i128 = 0;
        let mut scale: i64 = ten_exp - frac_digits.len() as i64 + 9;
        for digit in int_digits.bytes().chain(frac_digits.bytes()) {
            let d = i128::from(digit - b'0');
            match mantissa.checked_mul(10).and_then(|m| m.checked_add(d)) {
                Some(m) => mantissa = m,
                // Too many digits to hold: drop the rest, keeping the magnitude.
                None => scale += 1,
            }
        }
        let mut nanos = scale_by_ten(mantissa, scale);
        for _ in 0..two_exp {
            nanos = nanos.saturating_mul(2);
        }
        Some(Quantity {
            nanos: if negative { -nanos } else { nanos },
        })
    }

    /// A quantity given as a JSON string or number (Kubernetes accepts both).
    pub fn from_json(v: &Value) -> Option<Quantity> {
        match v {
            Value::String(s) => Quantity::parse(s.trim()),
            Value::Number(n) => Quantity::parse(&n.to_string()),
            _ => None,
        }
    }

    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// Go's `Quantity.Value()`: whole units, rounded away from zero.
    pub fn value(self) -> i64 {
        saturate(div_away_from_zero(self.nanos, NANOS_PER_UNIT))
    }

    /// Go's `Quantity.MilliValue()`.
    pub fn milli_value(self) -> i64 {
        saturate(div_away_from_zero(self.nanos, NANOS_PER_UNIT / 1000))
    }
}

/// The powers of ten and two a suffix stands for, or `None` for an unknown suffix.
fn suffix_exponents(suffix: &str) -> Option<(i64, u32)> {
    let decimal = match suffix {
        "" => Some(0),
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(exp) = decimal {
        return Some((exp, 0));
    }
    let binary = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(exp) = binary {
        return Some((0, exp));
    }
    let rest = suffix.strip_prefix(['e', 'E'])?;
    let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Exponents beyond any representable value saturate; Go keeps them as int32.
    let exp: i64 = rest
        .parse()
        .unwrap_or(if rest.starts_with('-') { -100 } else { 100 });
    Some((exp.clamp(-100, 100), 0))
}

/// `mantissa * 10^scale`, rounding a fraction away from zero and saturating on overflow.
fn scale_by_ten(mantissa: i128, scale: i64) -> i128 {
    if mantissa == 0 {
        return 0;
    }
    if scale >= 0 {
        let mut out = mantissa;
        for _ in 0..scale {
            out = out.saturating_mul(10);
        }
        out
    } else {
        let mut out = mantissa;
        let mut inexact = false;
        for _ in 0..(-scale) {
            inexact |= out % 10 != 0;
            out /= 10;
            if out == 0 {
                break;
            }
        }
        out + i128::from(inexact)
    }
}

fn div_away_from_zero(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d == 0 {
        q
    } else if n > 0 {
        q + 1
    } else {
        q - 1
    }
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|| panic!("{s} should parse"))
    }

    #[test]
    fn parses_the_kubernetes_grammar() {
        assert_eq!(q("1Gi").value(), 1 << 30);
        assert_eq!(q("512Mi").value(), 512 << 20);
        assert_eq!(q("1M").value(), 1_000_000);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("100m").milli_value(), 100);
        assert_eq!(q("100m").value(), 1);
        assert_eq!(q("1e3").value(), 1000);
        assert_eq!(q("1E-3").milli_value(), 1);
        assert_eq!(q("-1").value(), -1);
        assert_eq!(q("-0.5").value(), -1);
        assert_eq!(q(".5").milli_value(), 500);
        assert_eq!(q("0").value(), 0);
        assert!(q("0.0").is_zero());
        assert_eq!(q("1n").milli_value(), 1);
        assert_eq!(Quantity::from_json(&json!(1073741824)), Some(q("1Gi")));
        assert_eq!(Quantity::from_json(&json!(0.5)), Some(q("500m")));
        // Like Go, a bare suffix reads as zero; the CRD pattern rejects it earlier.
        assert!(q("Gi").is_zero());
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "abc", "1K", "1ki", "1Mii", "1e", "1m5", "1.2.3", "1 Gi"] {
            assert_eq!(Quantity::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Quantity::from_json(&json!(true)), None);
    }

    #[test]
    fn huge_values_saturate() {
        assert_eq!(
            q("99999999999999999999999999999999999999999999Ei").value(),
            i64::MAX
        );
        assert_eq!(q("1e100").value(), i64::MAX);
        assert_eq!(q("-1e100").value(), i64::MIN);
        assert!(!q("1e-100").is_zero());
    }
}
