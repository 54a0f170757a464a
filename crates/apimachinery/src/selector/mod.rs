//! Label and field selectors as kube-apiserver parses them from `?labelSelector=` and
//! `?fieldSelector=` (`k8s.io/apimachinery/pkg/labels` and `pkg/fields`). The inputs are
//! untrusted query strings: parsing never panics, and error texts follow upstream because
//! clients show them verbatim in the 400 BadRequest message.

use std::fmt;

use serde_json::{Map, Value};

use crate::meta_validation::{go_quote, go_string_slice, is_qualified_name, is_valid_label_value};

mod field_selector;
pub use field_selector::{
    field_label_not_supported, FieldOperator, FieldRequirement, FieldSelector,
};

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

#[cfg(test)]
mod tests;
