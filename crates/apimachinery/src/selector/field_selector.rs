//! Field selectors (`?fieldSelector=`, `k8s.io/apimachinery/pkg/fields`): the AND of
//! `field=value` and `field!=value` terms, with upstream's escapes and error texts.

use std::fmt;

/// The message kube-apiserver returns (as a 400) for a field selector on a field the
/// resource does not support; custom resources support `metadata.name` and, when
/// namespaced, `metadata.namespace`.
pub fn field_label_not_supported(field: &str) -> String {
    format!("field label not supported: {field}")
}

/// A field selector operator: `=` and `==` are the same test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    Equals,
    NotEquals,
}

/// One `field=value` or `field!=value` term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldOperator,
    pub value: String,
}

/// A parsed `?fieldSelector=` (`fields.ParseSelector`): the AND of its terms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub(super) requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Splits on unescaped commas, sorts the terms as strings (like upstream), and splits
    /// each at the first `!=`, `==` or `=`; values are unescaped (`\\`, `\,`, `\=`).
    pub fn parse(selector: &str) -> Result<FieldSelector, String> {
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut requirements = Vec::new();
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let Some((field, operator, value)) = split_term(term) else {
                return Err(format!(
                    "invalid selector: '{selector}'; can't understand '{term}'"
                ));
            };
            requirements.push(FieldRequirement {
                field: field.to_string(),
                operator,
                value: unescape_value(value)?,
            });
        }
        Ok(FieldSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// The field names used, so the caller can reject unsupported ones with
    /// [`field_label_not_supported`].
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|r| r.field.as_str())
    }

    /// The value an `=` term pins `field` to, if any (e.g. `metadata.name=x` lookups).
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }

    /// `get` returns the object's value of a field; a missing field compares as "".
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let actual = get(&r.field).unwrap_or_default();
            (actual == r.value) == (r.operator == FieldOperator::Equals)
        })
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if r.operator == FieldOperator::Equals {
                "="
            } else {
                "!="
            };
            write!(f, "{}{op}{}", r.field, escape_value(&r.value))?;
        }
        Ok(())
    }
}

/// `fields.EscapeValue`.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits on commas that are not preceded by a backslash escape.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Finds the first operator; escapes are not considered here, exactly as upstream.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        if let Some(value) = rest.strip_prefix("!=") {
            return Some((&term[..i], FieldOperator::NotEquals, value));
        }
        if let Some(value) = rest.strip_prefix("==").or_else(|| rest.strip_prefix('=')) {
            return Some((&term[..i], FieldOperator::Equals, value));
        }
    }
    None
}

/// `fields.UnescapeValue`, including its habit of printing the offending rune as a number.
fn unescape_value(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut in_slash = false;
    for c in value.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                ));
            }
            out.push(c);
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' || c == '=' {
            return Err(format!(
                "invalid field selector: unescaped character in value: {}",
                c as u32
            ));
        } else {
            out.push(c);
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}
