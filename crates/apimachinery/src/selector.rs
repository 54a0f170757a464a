//! Label and field selectors as kube-apiserver parses them from `?labelSelector=` and
//! `?fieldSelector=` (`k8s.io/apimachinery/pkg/labels` and `pkg/fields`). The inputs are
//! untrusted query strings: parsing never panics, and error texts follow upstream because
//! clients show them verbatim in the 400 BadRequest message.

use std::fmt;

use serde_json::{Map, Value};

use crate::meta_validation::{go_quote, go_string_slice, is_qualified_name, is_valid_label_value};

/// A label requirement operator (`selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// The binary operators in the order upstream lists them in parse errors.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

/// One `key op values` term of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

/// Renders a field error the way `field.Error.Error()` does for the values a requirement
/// can carry (strings and string lists).
fn invalid(path: &str, rendered_value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {rendered_value}: {detail}")
}

/// `utilerrors.NewAggregate(...).Error()`: one error as is, several deduplicated in brackets.
fn aggregate(errors: Vec<String>) -> Result<(), String> {
    let mut unique: Vec<String> = Vec::new();
    for e in errors {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    match unique.len() {
        0 => Ok(()),
        1 => Err(unique.remove(0)),
        _ => Err(format!("[{}]", unique.join(", "))),
    }
}

fn parse_i64(s: &str) -> Option<i64> {
    s.parse().ok()
}

impl Requirement {
    /// `labels.NewRequirement`: validates the key, the value count for the operator, integer
    /// values for `gt`/`lt` and every value as a label value. Set values are kept sorted and
    /// unique, which is how the parser produces them and how `Display` prints them.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Requirement, String> {
        let mut errors = Vec::new();
        let key_errors = is_qualified_name(key);
        if !key_errors.is_empty() {
            errors.push(invalid("key", &go_quote(key), &key_errors.join("; ")));
        }
        let values_rendered = go_string_slice(&values);
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errors.push(invalid(
                        "values",
                        &values_rendered,
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errors.push(invalid(
                        "values",
                        &values_rendered,
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errors.push(invalid(
                        "values",
                        &values_rendered,
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errors.push(invalid(
                        "values",
                        &values_rendered,
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if parse_i64(v).is_none() {
                        errors.push(invalid(
                            &format!("values[{i}]"),
                            &go_quote(v),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let value_errors = is_valid_label_value(v);
            if !value_errors.is_empty() {
                errors.push(invalid(
                    &format!("values[{i}][{key}]"),
                    &go_quote(v),
                    &value_errors.join("; "),
                ));
            }
        }
        aggregate(errors)?;
        let mut values = values;
        if matches!(operator, Operator::In | Operator::NotIn) {
            values.sort();
            values.dedup();
        }
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// `Requirement.Matches`: `!=` and `notin` also match objects without the key; `gt`/`lt`
    /// need an integer label value. Non-string label values count as absent.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        let value = labels.get(&self.key).and_then(Value::as_str);
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => value.is_some_and(has),
            Operator::NotIn | Operator::NotEquals => !value.is_some_and(has),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(actual), [wanted]) = (value.and_then(parse_i64), self.values.as_slice())
                else {
                    return false;
                };
                let Some(wanted) = parse_i64(wanted) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > wanted
                } else {
                    actual < wanted
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// `Requirement.String()`, which the parser accepts back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(op)?;
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        f.write_str(&self.values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A parsed label selector: the AND of its requirements, kept sorted by key like upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    /// A `null` structured selector selects nothing (`labels.Nothing()`).
    nothing: bool,
}

impl LabelSelector {
    /// The selector that matches everything (an empty query parameter).
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// The selector that matches nothing (a `null` structured selector).
    pub fn nothing() -> LabelSelector {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Combines already validated requirements (e.g. node selector terms).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> LabelSelector {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector {
            requirements,
            nothing: false,
        }
    }

    /// `labels.Parse`: the string form from `?labelSelector=`.
    pub fn parse(selector: &str) -> Result<LabelSelector, String> {
        let tokens = lex(selector.as_bytes());
        let requirements = Parser {
            tokens,
            position: 0,
        }
        .parse()?;
        Ok(LabelSelector::from_requirements(requirements))
    }

    /// `metav1.LabelSelectorAsSelector` on a JSON `metav1.LabelSelector`
    /// (`matchLabels` + `matchExpressions` with In/NotIn/Exists/DoesNotExist).
    pub fn from_label_selector_json(value: &Value) -> Result<LabelSelector, String> {
        let object = match value {
            Value::Null => return Ok(LabelSelector::nothing()),
            Value::Object(object) => object,
            _ => return Err("label selector must be an object".to_string()),
        };
        let mut requirements = Vec::new();
        match object.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, v) in labels {
                    let v = v
                        .as_str()
                        .ok_or_else(|| format!("matchLabels[{k}] must be a string"))?;
                    requirements.push(Requirement::new(k, Operator::Equals, vec![v.to_string()])?);
                }
            }
            Some(_) => return Err("matchLabels must be an object".to_string()),
        }
        let expressions: &[Value] = match object.get("matchExpressions") {
            None | Some(Value::Null) => &[],
            Some(Value::Array(items)) => items,
            Some(_) => return Err("matchExpressions must be an array".to_string()),
        };
        for (i, expression) in expressions.iter().enumerate() {
            let text = |field: &str| match expression.get(field) {
                None | Some(Value::Null) => Ok(""),
                Some(Value::String(s)) => Ok(s.as_str()),
                Some(_) => Err(format!("matchExpressions[{i}].{field} must be a string")),
            };
            let key = text("key")?;
            let operator = match text("operator")? {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(format!(
                        "{} is not a valid label selector operator",
                        go_quote(other)
                    ))
                }
            };
            let values = match expression.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<String>>>()
                    .ok_or_else(|| format!("matchExpressions[{i}].values must be strings"))?,
                Some(_) => return Err(format!("matchExpressions[{i}].values must be an array")),
            };
            requirements.push(Requirement::new(key, operator, values)?);
        }
        Ok(LabelSelector::from_requirements(requirements))
    }

    /// Whether every requirement matches the object's `metadata.labels`.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// True when the selector does not restrict anything (so e.g. `remainingItemCount` may
    /// be reported).
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

impl fmt::Display for LabelSelector {
    /// Comma-joined requirements; parses back to an equal selector (the nothing-selector
    /// prints as "" like upstream, which reads back as everything).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The upstream lexer works on bytes and treats a NUL byte like the end of input; this one
/// reproduces that, including which NUL bytes are consumed.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special(ch) {
            self.scan_special()
        } else {
            self.scan_identifier()
        }
    }

    fn scan_identifier(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut end;
        loop {
            end = self.pos;
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
        }
        let literal = String::from_utf8_lossy(&self.s[start..end]).into_owned();
        let token = match literal.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Identifier,
        };
        (token, literal)
    }

    /// Longest special-symbol token: `!=` and `==` win over `!` and `=`.
    fn scan_special(&mut self) -> (Token, String) {
        let first = self.read();
        let mut token = match first {
            b'=' => Token::Equals,
            b'!' => Token::DoesNotExist,
            b')' => Token::ClosedPar,
            b',' => Token::Comma,
            b'>' => Token::GreaterThan,
            b'<' => Token::LessThan,
            _ => Token::OpenPar,
        };
        let mut literal = String::from(first as char);
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if literal.len() == 1 && ch == b'=' && matches!(first, b'=' | b'!') {
                token = if first == b'=' {
                    Token::DoubleEquals
                } else {
                    Token::NotEquals
                };
                literal.push('=');
                continue;
            }
            self.unread();
            break;
        }
        (token, literal)
    }
}

fn lex(s: &[u8]) -> Vec<(Token, String)> {
    let mut lexer = Lexer { s, pos: 0 };
    let mut tokens = Vec::new();
    loop {
        let item = lexer.lex();
        let end = item.0 == Token::EndOfString;
        tokens.push(item);
        if end {
            return tokens;
        }
    }
}

/// Whether `in`/`notin` are keywords (after a key) or plain identifiers (values, keys).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    tokens: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn peek(&self, context: Context) -> (Token, String) {
        let (token, literal) = self
            .tokens
            .get(self.position)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        let token = match (context, token) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            _ => token,
        };
        (token, literal)
    }

    fn next(&mut self, context: Context) -> (Token, String) {
        let item = self.peek(context);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.peek(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let requirement = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    let (token, literal) = self.next(Context::Values);
                    match token {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (after, literal) = self.peek(Context::Values);
                            if after != Token::Identifier && after != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{literal}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!(
                                "found '{literal}', expected: ',' or 'end of string'"
                            ))
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{literal}', expected: !, identifier, or 'end of string'"
                    ))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, unary) = self.parse_key_and_infer_operator()?;
        if let Some(operator) = unary {
            return Requirement::new(&key, operator, Vec::new());
        }
        let operator = self.parse_operator()?;
        let mut values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => vec![self.parse_exact_value()?],
        };
        values.sort();
        values.dedup();
        Requirement::new(&key, operator, values)
    }

    /// Reads `[!]key`; a key followed by `,` or the end is an existence test.
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let (mut token, mut literal) = self.next(Context::Values);
        let mut operator = None;
        if token == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (token, literal) = self.next(Context::Values);
        }
        if token != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let errors = is_qualified_name(&literal);
        if !errors.is_empty() {
            // Upstream validates with a nil field path, which prints as "<nil>".
            return Err(invalid("<nil>", &go_quote(&literal), &errors.join("; ")));
        }
        let (after, _) = self.peek(Context::Values);
        if operator.is_none() && matches!(after, Token::EndOfString | Token::Comma) {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (token, literal) = self.next(Context::KeyAndOperator);
        match token {
            Token::In => Ok(Operator::In),
            Token::Equals => Ok(Operator::Equals),
            Token::DoubleEquals => Ok(Operator::DoubleEquals),
            Token::GreaterThan => Ok(Operator::GreaterThan),
            Token::LessThan => Ok(Operator::LessThan),
            Token::NotIn => Ok(Operator::NotIn),
            Token::NotEquals => Ok(Operator::NotEquals),
            _ => Err(format!("found '{literal}', expected: {BINARY_OPERATORS}")),
        }
    }

    /// `(a,b,...)`; empty members are the empty value, `()` is the set {""}.
    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (token, literal) = self.next(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{literal}' expected: '('"));
        }
        let (token, literal) = self.peek(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                // The list only returns when a ')' follows.
                self.next(Context::Values);
                Ok(values)
            }
            Token::ClosedPar => {
                self.next(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!(
                "found '{literal}', expected: ',', ')' or identifier"
            )),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut values: Vec<String> = Vec::new();
        loop {
            let (token, literal) = self.next(Context::Values);
            match token {
                Token::Identifier => {
                    values.push(literal);
                    let (after, literal) = self.peek(Context::Values);
                    match after {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(format!("found '{literal}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    let (after, _) = self.peek(Context::Values);
                    if after == Token::ClosedPar {
                        values.push(String::new());
                        return Ok(values);
                    }
                    if after == Token::Comma {
                        self.next(Context::Values);
                        values.push(String::new());
                    }
                }
                _ => return Err(format!("found '{literal}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<String, String> {
        let (token, _) = self.peek(Context::Values);
        if matches!(token, Token::EndOfString | Token::Comma) {
            return Ok(String::new());
        }
        let (token, literal) = self.next(Context::Values);
        if token == Token::Identifier {
            Ok(literal)
        } else {
            Err(format!("found '{literal}', expected: identifier"))
        }
    }
}

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
    requirements: Vec<FieldRequirement>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn matches(selector: &str, l: Value) -> bool {
        LabelSelector::parse(selector).unwrap().matches(&labels(l))
    }

    #[test]
    fn parses_and_prints_upstream_good_strings() {
        for s in [
            "",
            "x=a",
            "y=b,z=c",
            "k=,z=",
            "x!=a,y=b",
            "x=",
            "x= ",
            "x=,z= ",
            "x= ,z= ",
            "!x",
            "x>1",
            "x>1,z<5",
            "x in (a)",
            "x notin (a)",
            "a in (b,c),d",
            "x==a",
        ] {
            let parsed = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            let reparsed = LabelSelector::parse(&parsed.to_string()).unwrap();
            assert_eq!(parsed, reparsed, "{s}");
        }
        assert_eq!(
            LabelSelector::parse("x= ,z= ").unwrap().to_string(),
            "x=,z="
        );
        assert_eq!(
            LabelSelector::parse("z=a,x=b").unwrap().to_string(),
            "x=b,z=a"
        );
        assert_eq!(
            LabelSelector::parse("x in (c,a,b,a)").unwrap().to_string(),
            "x in (a,b,c)"
        );
        assert_eq!(
            LabelSelector::parse("x notin ()").unwrap().to_string(),
            "x notin ()"
        );
        assert_eq!(
            LabelSelector::parse("x in (,a)").unwrap().to_string(),
            "x in (,a)"
        );
        assert_eq!(
            LabelSelector::parse("x in (a,,b)").unwrap().requirements()[0].values(),
            ["", "a", "b"]
        );
        assert_eq!(
            LabelSelector::parse("x in (a,)").unwrap().requirements()[0].values(),
            ["", "a"]
        );
        assert_eq!(
            LabelSelector::parse("x in (,)").unwrap().requirements()[0].values(),
            [""]
        );
        assert_eq!(
            LabelSelector::parse("  x  in(a) , !y ")
                .unwrap()
                .to_string(),
            "x in (a),!y"
        );
        assert_eq!(
            LabelSelector::parse("notin=in").unwrap().to_string(),
            "notin=in"
        );
        assert_eq!(
            LabelSelector::parse("x in ( a , b )").unwrap().to_string(),
            "x in (a,b)"
        );
        assert_eq!(
            LabelSelector::parse("x = a,\ty\n!=\rb")
                .unwrap()
                .to_string(),
            "x=a,y!=b"
        );
        assert_eq!(
            LabelSelector::parse("x in (in,notin)").unwrap().to_string(),
            "x in (in,notin)"
        );
        assert_eq!(
            LabelSelector::parse("kubevirt.io/vm==vm1")
                .unwrap()
                .to_string(),
            "kubevirt.io/vm==vm1"
        );
        assert!(LabelSelector::parse("").unwrap().is_empty());
        assert!(!LabelSelector::parse("a").unwrap().is_empty());
    }

    #[test]
    fn error_messages() {
        let cases = [
            ("x=a||y=b", "unable to parse requirement: values[0][x]: Invalid value: \"a||y\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
            ("x==a==b", "found '==', expected: ',' or 'end of string'"),
            ("!x=a", "found '=', expected: ',' or 'end of string'"),
            ("x<a", "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer"),
            ("x,,y", "found ',', expected: identifier after ','"),
            ("x,", "found '', expected: identifier after ','"),
            (",x", "found ',', expected: !, identifier, or 'end of string'"),
            ("!", "unable to parse requirement: found '', expected: identifier"),
            ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
            ("! =a", "unable to parse requirement: found '=', expected: identifier"),
            ("!!a", "unable to parse requirement: found '!', expected: identifier"),
            ("x y", "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt"),
            ("x in a", "unable to parse requirement: found 'a' expected: '('"),
            ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'"),
            ("x in (a,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
            ("x in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
            ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'"),
            ("x=(a)", "unable to parse requirement: found '(', expected: identifier"),
            ("a b=c", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
            ("x>-1", "unable to parse requirement: values[0][x]: Invalid value: \"-1\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
            ("Bad_Key_=v", "unable to parse requirement: <nil>: Invalid value: \"Bad_Key_\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
            ("/a", "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty"),
        ];
        for (input, want) in cases {
            assert_eq!(LabelSelector::parse(input).unwrap_err(), want, "{input}");
        }
        let two = LabelSelector::parse("x>a_").unwrap_err();
        assert!(two.starts_with("unable to parse requirement: [values[0]: Invalid value: \"a_\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x]: Invalid value: \"a_\": a valid label"), "{two}");
        let long = format!("x={}", "a".repeat(64));
        assert_eq!(
            LabelSelector::parse(&long).unwrap_err(),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"{}\": must be no more than 63 characters",
                "a".repeat(64)
            )
        );
    }

    #[test]
    fn nul_bytes_behave_like_upstream() {
        // A NUL where a token starts ends the input; inside an identifier it splits it.
        assert_eq!(LabelSelector::parse("a \0b=c").unwrap().to_string(), "a");
        assert_eq!(
            LabelSelector::parse("a\0b").unwrap_err(),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(LabelSelector::parse("a=\0").unwrap().to_string(), "a=");
    }

    #[test]
    fn matching() {
        assert!(matches("", json!({"x": "y"})));
        assert!(matches("x=y", json!({"x": "y"})));
        assert!(matches("x==y,z=w", json!({"x": "y", "z": "w"})));
        assert!(matches("x!=y,z!=w", json!({"x": "z", "z": "a"})));
        assert!(matches("x!=y", json!({})));
        assert!(matches("notin=in", json!({"notin": "in"})));
        assert!(matches("x", json!({"x": "z"})));
        assert!(matches("!x", json!({"y": "z"})));
        assert!(matches("x>1", json!({"x": "2"})));
        assert!(matches("x<1", json!({"x": "0"})));
        assert!(matches("x in (a,b)", json!({"x": "b"})));
        assert!(matches("x notin (a,b)", json!({"x": "c"})));
        assert!(matches("x notin (a,b)", json!({})));
        assert!(matches("x=", json!({"x": ""})));
        assert!(!matches("x=", json!({})));
        assert!(!matches("x=z", json!({})));
        assert!(!matches("x=y", json!({"x": "z"})));
        assert!(!matches("x=y,z=w", json!({"x": "w", "z": "w"})));
        assert!(!matches("x!=y,z!=w", json!({"x": "z", "z": "w"})));
        assert!(!matches("x", json!({"y": "z"})));
        assert!(!matches("!x", json!({"x": "z"})));
        assert!(!matches("x>1", json!({"x": "0"})));
        assert!(!matches("x>1", json!({"x": "a"})));
        assert!(!matches("x>1", json!({})));
        assert!(!matches("x<1", json!({"x": "2"})));
        assert!(!matches("x in (a,b)", json!({})));
        assert!(!matches("x notin (a,b)", json!({"x": "a"})));
        // Non-string label values count as absent.
        assert!(!matches("x", json!({"x": 1})));
        assert!(!LabelSelector::nothing().matches(&labels(json!({}))));
        assert!(!LabelSelector::nothing().is_empty());
        assert!(LabelSelector::everything().matches(&labels(json!({}))));
    }

    #[test]
    fn structured_selector() {
        let sel = LabelSelector::from_label_selector_json(&json!({
            "matchLabels": {"kubevirt.io/vm": "vm1"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["b", "a"]},
                {"key": "gpu", "operator": "DoesNotExist"},
                {"key": "tier", "operator": "NotIn", "values": ["x"]},
                {"key": "arch", "operator": "Exists", "values": []},
            ],
        }))
        .unwrap();
        assert_eq!(
            sel.to_string(),
            "arch,!gpu,kubevirt.io/vm=vm1,tier notin (x),zone in (a,b)"
        );
        assert!(sel.matches(&labels(
            json!({"kubevirt.io/vm": "vm1", "zone": "a", "arch": "amd64"})
        )));
        assert!(!sel.matches(&labels(
            json!({"kubevirt.io/vm": "vm1", "zone": "a", "arch": "x", "gpu": ""})
        )));
        assert!(LabelSelector::from_label_selector_json(&json!({}))
            .unwrap()
            .is_empty());
        assert!(!LabelSelector::from_label_selector_json(&Value::Null)
            .unwrap()
            .matches(&Map::new()));
        assert_eq!(
            LabelSelector::from_label_selector_json(
                &json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]})
            )
            .unwrap_err(),
            "\"Gt\" is not a valid label selector operator"
        );
        assert_eq!(
            LabelSelector::from_label_selector_json(&json!({"matchExpressions": [{"key": "a", "operator": "In"}]}))
                .unwrap_err(),
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
        );
        assert_eq!(
            LabelSelector::from_label_selector_json(
                &json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["v"]}]})
            )
            .unwrap_err(),
            "values: Invalid value: []string{\"v\"}: values set must be empty for exists and does not exist"
        );
        assert!(
            LabelSelector::from_label_selector_json(&json!({"matchLabels": {"a b": "c"}}))
                .unwrap_err()
                .starts_with("key: Invalid value: \"a b\": name part must consist")
        );
        assert!(
            LabelSelector::from_label_selector_json(&json!({"matchLabels": {"a": 1}})).is_err()
        );
        assert!(LabelSelector::from_label_selector_json(&json!({"matchLabels": []})).is_err());
        assert!(LabelSelector::from_label_selector_json(&json!({"matchExpressions": {}})).is_err());
        assert!(LabelSelector::from_label_selector_json(
            &json!({"matchExpressions": [{"key": 1}]})
        )
        .is_err());
        assert!(LabelSelector::from_label_selector_json(&json!(3)).is_err());
    }

    #[test]
    fn requirement_constructor() {
        let r = Requirement::new("cpu", Operator::GreaterThan, vec!["4".into()]).unwrap();
        assert!(r.matches(&labels(json!({"cpu": "8"}))));
        assert_eq!(
            Requirement::new("cpu", Operator::LessThan, vec!["1".into(), "2".into()]).unwrap_err(),
            "values: Invalid value: []string{\"1\", \"2\"}: for 'Gt', 'Lt' operators, exactly one value is required"
        );
        assert_eq!(
            Requirement::new("a", Operator::Equals, vec![]).unwrap_err(),
            "values: Invalid value: []string(nil): exact-match compatibility requires one single value"
        );
        let sel = LabelSelector::from_requirements(vec![r]);
        assert_eq!(sel.to_string(), "cpu>4");
    }

    #[test]
    fn field_selectors() {
        let sel =
            FieldSelector::parse("metadata.name=vm1,metadata.namespace!=kube-system").unwrap();
        assert_eq!(
            sel.fields().collect::<Vec<_>>(),
            ["metadata.name", "metadata.namespace"]
        );
        assert_eq!(sel.requires_exact_match("metadata.name"), Some("vm1"));
        assert_eq!(sel.requires_exact_match("metadata.namespace"), None);
        let get = |ns: &'static str| {
            move |f: &str| match f {
                "metadata.name" => Some("vm1".to_string()),
                "metadata.namespace" => Some(ns.to_string()),
                _ => None,
            }
        };
        assert!(sel.matches(get("default")));
        assert!(!sel.matches(get("kube-system")));
        assert!(FieldSelector::parse("spec.x=").unwrap().matches(|_| None));
        assert!(!FieldSelector::parse("spec.x!=").unwrap().matches(|_| None));
        assert_eq!(
            FieldSelector::parse("b==1,a=2").unwrap().to_string(),
            "a=2,b=1"
        );
        assert_eq!(
            FieldSelector::parse("a=x\\,y\\=z\\\\")
                .unwrap()
                .requirements()[0]
                .value,
            "x,y=z\\"
        );
        assert_eq!(
            FieldSelector::parse("a=x\\,y\\=z\\\\").unwrap().to_string(),
            "a=x\\,y\\=z\\\\"
        );
        assert!(FieldSelector::parse("").unwrap().is_empty());
        assert!(FieldSelector::parse(",,").unwrap().is_empty());
        assert_eq!(
            FieldSelector::parse("a=1,bad").unwrap_err(),
            "invalid selector: 'a=1,bad'; can't understand 'bad'"
        );
        assert_eq!(
            FieldSelector::parse("a=b=c").unwrap_err(),
            "invalid field selector: unescaped character in value: 61"
        );
        assert_eq!(
            FieldSelector::parse("a=b\\x").unwrap_err(),
            "invalid field selector: invalid escape sequence: \\x"
        );
        assert_eq!(
            FieldSelector::parse("a=b\\").unwrap_err(),
            "invalid field selector: invalid escape sequence: \\"
        );
        // The operator search ignores escapes, as upstream does.
        assert!(FieldSelector::parse("a\\=b=c").is_err());
        assert_eq!(
            FieldSelector::parse("=x")
                .unwrap()
                .fields()
                .collect::<Vec<_>>(),
            [""]
        );
        assert_eq!(
            field_label_not_supported("spec.x"),
            "field label not supported: spec.x"
        );
    }

    fn key_strategy() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]([a-z0-9._-]{0,10}[a-z0-9])?",
            "[a-z]{1,5}(\\.[a-z]{1,5}){0,2}/[A-Za-z]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?",
        ]
    }

    fn value_strategy() -> impl Strategy<Value = String> {
        "([A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?)?"
    }

    fn requirement_strategy() -> impl Strategy<Value = Requirement> {
        (
            key_strategy(),
            0..9u8,
            prop::collection::vec(value_strategy(), 1..4),
            -50i64..50,
        )
            .prop_map(|(key, op, values, n)| {
                let first = values[0].clone();
                let (operator, values) = match op {
                    0 => (Operator::In, values),
                    1 => (Operator::NotIn, values),
                    2 => (Operator::Equals, vec![first]),
                    3 => (Operator::DoubleEquals, vec![first]),
                    4 => (Operator::NotEquals, vec![first]),
                    5 => (Operator::Exists, vec![]),
                    6 => (Operator::DoesNotExist, vec![]),
                    7 => (Operator::GreaterThan, vec![n.abs().to_string()]),
                    _ => (Operator::LessThan, vec![n.abs().to_string()]),
                };
                Requirement::new(&key, operator, values).unwrap()
            })
    }

    proptest! {
        #[test]
        fn display_round_trips(reqs in prop::collection::vec(requirement_strategy(), 0..5)) {
            let selector = LabelSelector::from_requirements(reqs);
            let printed = selector.to_string();
            let parsed = LabelSelector::parse(&printed).unwrap();
            prop_assert_eq!(&parsed, &selector, "{}", printed);
        }

        #[test]
        fn label_parser_never_panics(s in "[a-z!=<>(), \t\0in0-9/._-]{0,40}") {
            if let Ok(sel) = LabelSelector::parse(&s) {
                prop_assert_eq!(LabelSelector::parse(&sel.to_string()).unwrap(), sel);
            }
        }

        #[test]
        fn label_parser_never_panics_on_any_text(s in "\\PC{0,30}") {
            let _ = LabelSelector::parse(&s);
        }

        #[test]
        fn field_selector_round_trips(
            terms in prop::collection::vec(("[a-z.]{1,8}", any::<bool>(), "[a-z,=\\\\ ]{0,6}"), 0..4)
        ) {
            let requirements: Vec<FieldRequirement> = terms.into_iter().map(|(field, eq, value)| FieldRequirement {
                field,
                operator: if eq { FieldOperator::Equals } else { FieldOperator::NotEquals },
                value,
            }).collect();
            let printed = FieldSelector { requirements }.to_string();
            let parsed = FieldSelector::parse(&printed).unwrap();
            prop_assert_eq!(FieldSelector::parse(&parsed.to_string()).unwrap(), parsed);
        }

        #[test]
        fn field_parser_never_panics(s in "\\PC{0,30}") {
            let _ = FieldSelector::parse(&s);
        }
    }
}
