//! The JSONPath subset of `k8s.io/client-go/util/jsonpath` used by CRD
//! `additionalPrinterColumns` and `kubectl wait --for=jsonpath`, evaluated on
//! `serde_json::Value` with missing keys allowed (both callers set `AllowMissingKeys`).
//!
//! Supported: `.a.b`, escaped dots (`.a\.b`), `['key']`, `.*`, `[n]`, `[-n]`, `[a:b:c]`,
//! `[*]`, `[?(@.x == 'v')]` with `==`, `!=`, `<`, `>`, `<=`, `>=` against string, integer,
//! float or boolean literals or another `@` path, `[?(@.x)]` (exists), an optional leading
//! `$`/`@`, with or without one pair of surrounding braces. Not supported: recursive descent
//! (`..`), unions (`[a,b]`), `range`/`end`, several `{}` actions or text around them.
//!
//! Output is printed as Go prints it ([`crate::gonum`] for floats, [`crate::gojson`] for
//! objects), because clients see those bytes.

use serde_json::{Map, Value};

use crate::gojson::{self, Escaping};
use crate::gonum::go_float_v;

/// A parsed path, reusable across objects (printer columns are parsed once per CRD).
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Field(String),
    Wildcard,
    Slice(Slice),
    Filter(Box<Filter>),
    /// An identifier such as `range`; upstream fails on it when evaluating.
    Identifier(String),
}

/// `[start:end:step]` with upstream's "known"/"derived" bookkeeping.
#[derive(Clone, Debug, PartialEq)]
struct Slice {
    start: Option<i64>,
    end: Option<i64>,
    /// The end was computed as `start + 1` for a plain index.
    end_derived: bool,
    step: Option<i64>,
}

#[derive(Clone, Debug, PartialEq)]
struct Filter {
    left: Operand,
    /// `None` is the exists test `[?(@.x)]`.
    comparison: Option<(String, Operand)>,
}

#[derive(Clone, Debug, PartialEq)]
enum Operand {
    Path(Vec<Step>),
    Literal(Literal),
}

#[derive(Clone, Debug, PartialEq)]
enum Literal {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// Evaluates `path` against `obj`; a missing key yields no values rather than an error.
pub fn eval(path: &str, obj: &Value) -> Result<Vec<Value>, String> {
    let path = JsonPath::parse(path)?;
    Ok(path.find(obj)?.into_iter().cloned().collect())
}

impl JsonPath {
    /// Parses `{.a.b}` or `.a.b`.
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let trimmed = text.trim();
        let inner = match trimmed.strip_prefix('{') {
            Some(rest) => rest
                .strip_suffix('}')
                .ok_or_else(|| "unclosed action".to_string())?,
            None => trimmed,
        };
        let nodes = PathParser::new(inner).parse_nodes()?;
        let mut steps = Vec::with_capacity(nodes.len());
        for node in nodes {
            match node {
                Node::Step(step) => steps.push(step),
                Node::Literal(_) => {
                    return Err("literal values are only supported inside filters".to_string())
                }
            }
        }
        Ok(JsonPath { steps })
    }

    /// The values the path selects, borrowed from `obj`.
    pub fn find<'a>(&self, obj: &'a Value) -> Result<Vec<&'a Value>, String> {
        eval_steps(&self.steps, vec![obj])
    }
}

enum Node {
    Step(Step),
    Literal(Literal),
}

/// A character-level parser following `parseInsideAction`.
struct PathParser<'a> {
    input: &'a str,
    pos: usize,
}

fn is_terminator(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
    )
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

/// Go's `%#U`: `U+0023 '#'`.
fn go_sharp_u(c: char) -> String {
    if c.is_control() {
        format!("U+{:04X}", c as u32)
    } else {
        format!("U+{:04X} '{c}'", c as u32)
    }
}

impl<'a> PathParser<'a> {
    fn new(input: &'a str) -> Self {
        PathParser { input, pos: 0 }
    }

    fn rest(&self) -> &'a str {
        self.input.get(self.pos..).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn parse_nodes(&mut self) -> Result<Vec<Node>, String> {
        let mut nodes = Vec::new();
        loop {
            let rest = self.rest();
            if rest.starts_with("[?(") {
                self.pos += 3;
                nodes.push(Node::Step(Step::Filter(Box::new(self.parse_filter()?))));
                continue;
            }
            if rest.starts_with("..") {
                return Err("recursive descent (..) is not supported".to_string());
            }
            let Some(c) = self.peek() else {
                return Ok(nodes);
            };
            match c {
                ' ' | '@' | '$' => {
                    self.bump();
                }
                '[' => {
                    self.bump();
                    nodes.extend(self.parse_array()?.into_iter().map(Node::Step));
                }
                '"' | '\'' => {
                    self.bump();
                    nodes.push(Node::Literal(Literal::Str(self.parse_quote(c)?)));
                }
                '.' => {
                    self.bump();
                    nodes.push(Node::Step(self.parse_field()));
                }
                '+' | '-' => nodes.push(Node::Literal(self.parse_number()?)),
                c if c.is_numeric() => nodes.push(Node::Literal(self.parse_number()?)),
                '}' => return Err("several {} actions are not supported".to_string()),
                c if is_alphanumeric(c) => nodes.push(self.parse_identifier()),
                '\r' | '\n' => return Err("unclosed action".to_string()),
                c => {
                    return Err(format!(
                        "unrecognized character in action: {}",
                        go_sharp_u(c)
                    ))
                }
            }
        }
    }

    /// A field name up to the next unescaped terminator; backslashes are then dropped.
    fn parse_field(&mut self) -> Step {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c == '\\' {
                self.bump();
                self.bump();
            } else if is_terminator(c) {
                break;
            } else {
                self.bump();
            }
        }
        let raw = self.input.get(start..self.pos).unwrap_or("");
        if raw == "*" {
            Step::Wildcard
        } else {
            Step::Field(raw.replace('\\', ""))
        }
    }

    fn parse_identifier(&mut self) -> Node {
        let start = self.pos;
        while self.peek().is_some_and(|c| !is_terminator(c)) {
            self.bump();
        }
        match self.input.get(start..self.pos).unwrap_or("") {
            "true" => Node::Literal(Literal::Bool(true)),
            "false" => Node::Literal(Literal::Bool(false)),
            other => Node::Step(Step::Identifier(other.to_string())),
        }
    }

    fn parse_number(&mut self) -> Result<Literal, String> {
        let start = self.pos;
        if matches!(self.peek(), Some('+' | '-')) {
            self.bump();
        }
        while self.peek().is_some_and(|c| c == '.' || c.is_numeric()) {
            self.bump();
        }
        let text = self.input.get(start..self.pos).unwrap_or("");
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Literal::Int(i));
        }
        text.parse::<f64>()
            .map(Literal::Float)
            .map_err(|_| format!("cannot parse number {text}"))
    }

    /// A quoted string; the opening quote is consumed already. Like upstream, a quote
    /// preceded by a backslash does not end it.
    fn parse_quote(&mut self, quote: char) -> Result<String, String> {
        let start = self.pos - quote.len_utf8();
        let mut previous = None;
        loop {
            match self.bump() {
                None | Some('\n') => return Err("unterminated quoted string".to_string()),
                Some(c) if c == quote && previous != Some('\\') => break,
                c => previous = c,
            }
        }
        let raw = self.input.get(start..self.pos).unwrap_or("");
        unquote(raw, quote).ok_or_else(|| format!("unquote string {raw} error invalid syntax"))
    }

    /// `[...]` up to the first `]`: `*`, `'key'`, or a slice/index.
    fn parse_array(&mut self) -> Result<Vec<Step>, String> {
        let start = self.pos;
        loop {
            match self.bump() {
                None | Some('\n') => return Err("unterminated array".to_string()),
                Some(']') => break,
                Some(_) => {}
            }
        }
        let text = self.input.get(start..self.pos - 1).unwrap_or("");
        let text = if text == "*" { ":" } else { text };
        if text.contains(',') {
            return Err("unions ([a,b]) are not supported".to_string());
        }
        if let Some(key) = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
            if !key.contains('\'') {
                // Upstream re-parses the key as ".key", so dots in it still separate fields.
                let source = format!(".{key}");
                return PathParser::new(&source)
                    .parse_nodes()?
                    .into_iter()
                    .map(|node| match node {
                        Node::Step(step) => Ok(step),
                        Node::Literal(_) => Err(format!("invalid array index {text}")),
                    })
                    .collect();
            }
        }
        Ok(vec![Step::Slice(parse_slice(text)?)])
    }

    /// `[?(...)]`; the `[?(` is consumed already.
    fn parse_filter(&mut self) -> Result<Filter, String> {
        // Upstream's scan: the first quote character opens a string, its unescaped twin
        // closes it, and a ')' outside that string ends the filter.
        let start = self.pos;
        let (mut begin, mut end, mut pair, mut previous) = (false, false, '\0', None);
        loop {
            let Some(c) = self.bump().filter(|&c| c != '\n') else {
                return Err("unterminated filter".to_string());
            };
            match c {
                '"' | '\'' if !begin => (begin, pair) = (true, c),
                '"' | '\'' if c == pair && previous != Some('\\') => end = true,
                ')' if begin == end => break,
                _ => {}
            }
            previous = Some(c);
        }
        let text = self.input.get(start..self.pos - 1).unwrap_or("");
        if self.bump() != Some(']') {
            return Err("unclosed array expect ]".to_string());
        }
        match split_comparison(text) {
            None => Ok(Filter {
                left: parse_operand(text)?,
                comparison: None,
            }),
            Some((left, op, right)) => Ok(Filter {
                left: parse_operand(left)?,
                comparison: Some((op.to_string(), parse_operand(right)?)),
            }),
        }
    }
}

/// `strconv.Unquote` extended to single quotes: the escapes Go accepts in string literals.
fn unquote(raw: &str, quote: char) -> Option<String> {
    let inner = raw.strip_prefix(quote)?.strip_suffix(quote)?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == quote {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = match chars.next()? {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '\\' => '\\',
            c @ ('\'' | '"') if c == quote => c,
            'x' => take_hex(&mut chars, 2).filter(char::is_ascii)?,
            'u' => take_hex(&mut chars, 4)?,
            'U' => take_hex(&mut chars, 8)?,
            _ => return None,
        };
        out.push(escaped);
    }
    Some(out)
}

/// Reads `n` hex digits of a `\x`, `\u` or `\U` escape.
fn take_hex(chars: &mut std::str::Chars, n: usize) -> Option<char> {
    let digits: String = chars.take(n).collect();
    if digits.len() != n || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    char::from_u32(u32::from_str_radix(&digits, 16).ok()?)
}

/// Upstream splits filters with `^([^!<>=]+)([!<>=]+)(.+?)$`.
fn split_comparison(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let op_start = text.find(is_op)?;
    if op_start == 0 || text.contains('\n') {
        return None;
    }
    let after = &text[op_start..];
    let op_len = after.find(|c: char| !is_op(c)).unwrap_or(after.len());
    if op_len == after.len() {
        // The right side needs at least one character: the regex backtracks one operator char.
        if op_len < 2 {
            return None;
        }
        return Some((
            &text[..op_start],
            &after[..op_len - 1],
            &after[op_len - 1..],
        ));
    }
    Some((&text[..op_start], &after[..op_len], &after[op_len..]))
}

fn parse_operand(text: &str) -> Result<Operand, String> {
    let nodes = PathParser::new(text).parse_nodes()?;
    let mut steps = Vec::new();
    let mut literal = None;
    for node in nodes {
        match node {
            Node::Step(step) => steps.push(step),
            Node::Literal(l) => literal = Some(l),
        }
    }
    match literal {
        Some(l) if steps.is_empty() => Ok(Operand::Literal(l)),
        Some(_) => Err(format!(
            "mixing literals and paths is not supported: {text}"
        )),
        None => Ok(Operand::Path(steps)),
    }
}

/// `^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$` and upstream's parameter rules.
fn parse_slice(text: &str) -> Result<Slice, String> {
    let valid_part = |p: &str| {
        p.strip_prefix('-')
            .unwrap_or(p)
            .bytes()
            .all(|b| b.is_ascii_digit())
    };
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() > 3 || !parts.iter().all(|p| valid_part(p)) {
        return Err(format!("invalid array index {text}"));
    }
    let number = |p: &str| {
        p.parse::<i64>()
            .map_err(|_| format!("array index {p} is not a number"))
    };
    let start = match parts[0] {
        "" => None,
        p => Some(number(p)?),
    };
    let (end, end_derived) = match parts.get(1) {
        None => (Some(start.unwrap_or(0).wrapping_add(1)), true),
        Some(&"") => (None, false),
        Some(p) => (Some(number(p)?), false),
    };
    let step = match parts.get(2) {
        None | Some(&"") => None,
        Some(p) => Some(number(p)?),
    };
    Ok(Slice {
        start,
        end,
        end_derived,
        step,
    })
}

fn eval_steps<'a>(steps: &[Step], mut current: Vec<&'a Value>) -> Result<Vec<&'a Value>, String> {
    for step in steps {
        current = match step {
            Step::Field(name) => current
                .iter()
                .filter_map(|v| {
                    v.as_object()
                        .and_then(|m: &Map<String, Value>| m.get(name.as_str()))
                })
                .collect(),
            Step::Wildcard => {
                let mut out = Vec::new();
                for v in &current {
                    match v {
                        Value::Object(m) => out.extend(m.values()),
                        Value::Array(items) => out.extend(items.iter()),
                        _ => {}
                    }
                }
                out
            }
            Step::Slice(slice) => eval_slice(slice, &current)?,
            Step::Filter(filter) => eval_filter(filter, &current)?,
            Step::Identifier(name) => return Err(format!("unrecognized identifier {name}")),
        };
    }
    Ok(current)
}

/// The Go type name upstream prints for values that cannot be indexed.
fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "map[string]interface {}",
        Value::Array(_) => "[]interface {}",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int64",
        Value::Number(_) => "float64",
        Value::Null => "interface {}",
    }
}

/// `evalArray`, including its early return when a range selects nothing.
fn eval_slice<'a>(slice: &Slice, input: &[&'a Value]) -> Result<Vec<&'a Value>, String> {
    let mut result = Vec::new();
    for value in input {
        let items = match value {
            Value::Null => continue,
            Value::Array(items) => items,
            other => return Err(format!("{} is not array or slice", go_type_name(other))),
        };
        let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
        let mut start = slice.start.unwrap_or(0);
        if start < 0 {
            start = start.wrapping_add(len);
        }
        let mut end = slice.end.unwrap_or(len);
        if end < 0 || (end == 0 && slice.end_derived) {
            end = end.wrapping_add(len);
        }
        if end == start {
            return Ok(result);
        }
        if start >= len || start < 0 {
            return Err(format!(
                "array index out of bounds: index {start}, length {len}"
            ));
        }
        if end > len || end < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                end.wrapping_sub(1)
            ));
        }
        if start > end {
            return Err(format!(
                "starting index {start} is greater than ending index {end}"
            ));
        }
        let step = match slice.step {
            Some(step) if step <= 0 => return Err("step must be > 0".to_string()),
            Some(step) => usize::try_from(step).unwrap_or(usize::MAX),
            None => 1,
        };
        // start and end are within 0..=len here.
        let (start, end) = (start as usize, end as usize);
        result.extend(items[start..end].iter().step_by(step));
    }
    Ok(result)
}

/// A comparison operand: a JSON value from the object or a literal from the filter.
enum Scalar<'a> {
    Json(&'a Value),
    Literal(&'a Literal),
}

#[derive(PartialEq)]
enum Kind {
    Bool,
    Int,
    Float,
    Str,
}

/// Values compared in filters, classified like Go's `template` package sees unstructured
/// JSON (integers are int64, other numbers float64).
enum Comparable<'a> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
}

impl Comparable<'_> {
    fn kind(&self) -> Kind {
        match self {
            Comparable::Bool(_) => Kind::Bool,
            Comparable::Int(_) => Kind::Int,
            Comparable::Float(_) => Kind::Float,
            Comparable::Str(_) => Kind::Str,
        }
    }
}

const BAD_COMPARISON_TYPE: &str = "invalid type for comparison";
const BAD_COMPARISON: &str = "incompatible types for comparison";

fn comparable<'a>(s: &Scalar<'a>) -> Result<Comparable<'a>, String> {
    match s {
        Scalar::Json(Value::Bool(b)) => Ok(Comparable::Bool(*b)),
        Scalar::Json(Value::Number(n)) => match n.as_i64() {
            Some(i) => Ok(Comparable::Int(i)),
            None => Ok(Comparable::Float(n.as_f64().unwrap_or(f64::NAN))),
        },
        Scalar::Json(Value::String(s)) => Ok(Comparable::Str(s)),
        Scalar::Json(_) => Err(BAD_COMPARISON_TYPE.to_string()),
        Scalar::Literal(Literal::Bool(b)) => Ok(Comparable::Bool(*b)),
        Scalar::Literal(Literal::Int(i)) => Ok(Comparable::Int(*i)),
        Scalar::Literal(Literal::Float(f)) => Ok(Comparable::Float(*f)),
        Scalar::Literal(Literal::Str(s)) => Ok(Comparable::Str(s)),
    }
}

/// Go template `eq`.
fn equal(left: &Scalar, right: &Scalar) -> Result<bool, String> {
    let (l, r) = (comparable(left)?, comparable(right)?);
    if l.kind() != r.kind() {
        return Err(BAD_COMPARISON.to_string());
    }
    Ok(match (l, r) {
        (Comparable::Bool(a), Comparable::Bool(b)) => a == b,
        (Comparable::Int(a), Comparable::Int(b)) => a == b,
        (Comparable::Float(a), Comparable::Float(b)) => a == b,
        (Comparable::Str(a), Comparable::Str(b)) => a == b,
        _ => false,
    })
}

/// Go template `lt`; booleans are not ordered.
fn less(left: &Scalar, right: &Scalar) -> Result<bool, String> {
    let (l, r) = (comparable(left)?, comparable(right)?);
    if l.kind() != r.kind() {
        return Err(BAD_COMPARISON.to_string());
    }
    match (l, r) {
        (Comparable::Int(a), Comparable::Int(b)) => Ok(a < b),
        (Comparable::Float(a), Comparable::Float(b)) => Ok(a < b),
        (Comparable::Str(a), Comparable::Str(b)) => Ok(a < b),
        _ => Err(BAD_COMPARISON_TYPE.to_string()),
    }
}

fn compare(op: &str, left: &Scalar, right: &Scalar) -> Result<bool, String> {
    match op {
        "==" => equal(left, right),
        "!=" => equal(left, right).map(|e| !e),
        "<" => less(left, right),
        "<=" => Ok(less(left, right)? || equal(left, right)?),
        ">" => Ok(!(less(left, right)? || equal(left, right)?)),
        ">=" => less(left, right).map(|l| !l),
        other => Err(format!("unrecognized filter operator {other}")),
    }
}

/// Evaluates a filter operand against one array element; `Ok(None)` means no value.
fn operand_value<'a>(
    operand: &'a Operand,
    element: &'a Value,
) -> Result<Option<Scalar<'a>>, String> {
    match operand {
        Operand::Literal(l) => Ok(Some(Scalar::Literal(l))),
        Operand::Path(steps) => {
            let values = eval_steps(steps, vec![element])?;
            match values.as_slice() {
                [] => Ok(None),
                [one] => Ok(Some(Scalar::Json(one))),
                _ => Err("can only compare one element at a time".to_string()),
            }
        }
    }
}

fn eval_filter<'a>(filter: &Filter, input: &[&'a Value]) -> Result<Vec<&'a Value>, String> {
    let mut result = Vec::new();
    for value in input {
        let Value::Array(items) = value else {
            return Err(format!(
                "{} is not array or slice and cannot be filtered",
                go_fmt_v(value)
            ));
        };
        for item in items {
            let Some((op, right)) = &filter.comparison else {
                // Exists: errors while looking are ignored, like upstream.
                let found = match &filter.left {
                    Operand::Literal(_) => true,
                    Operand::Path(steps) => {
                        eval_steps(steps, vec![item]).is_ok_and(|v| !v.is_empty())
                    }
                };
                if found {
                    result.push(item);
                }
                continue;
            };
            let Some(left) = operand_value(&filter.left, item)? else {
                continue;
            };
            let Some(right) = operand_value(right, item)? else {
                continue;
            };
            if compare(op, &left, &right)? {
                result.push(item);
            }
        }
    }
    Ok(result)
}

/// What jsonpath prints for one value (`PrintResults`): strings raw, numbers as Go's `%v`,
/// objects and arrays as Go `encoding/json` output, null as `null`.
pub fn print_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(_) => go_fmt_v(value),
        Value::String(s) => s.clone(),
        Value::Array(_) | Value::Object(_) => gojson::marshal(value, Escaping::EncodingJson),
    }
}

/// Go's `%v` of an unstructured JSON value (used in upstream messages).
fn go_fmt_v(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float_v(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_fmt_v).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(map) => format!(
            "map[{}]",
            map.iter()
                .map(|(k, v)| format!("{k}:{}", go_fmt_v(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

#[cfg(test)]
mod tests;
