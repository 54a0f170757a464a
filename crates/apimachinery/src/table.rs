//! Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, built like the apiextensions
//! table convertor (a `Name` column, then the CRD's additionalPrinterColumns evaluated with
//! JSONPath) so kubectl shows the same columns and cell texts as against kube-apiserver.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::gojson::{self, Escaping};
use crate::gonum::go_float_v;
use crate::jsonpath::JsonPath;
use crate::meta_validation::{go_quote, parse_go_rfc3339};

/// `ObjectMeta.name`'s API documentation, which upstream uses as the Name column description.
pub const NAME_COLUMN_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// `ObjectMeta.creationTimestamp`'s documentation, the description of the default Age column.
pub const AGE_COLUMN_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// `metav1.TableColumnDefinition`; every field is always serialized, as upstream does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableColumnDefinition {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i32,
}

impl TableColumnDefinition {
    /// The first column of every custom resource table.
    pub fn name_column() -> TableColumnDefinition {
        TableColumnDefinition {
            name: "Name".to_string(),
            type_: "string".to_string(),
            format: "name".to_string(),
            description: NAME_COLUMN_DESCRIPTION.to_string(),
            priority: 0,
        }
    }
}

/// A CRD `additionalPrinterColumns` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrinterColumn {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub format: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub priority: i32,
    #[serde(rename = "jsonPath")]
    pub json_path: String,
}

impl PrinterColumn {
    /// The column apiextensions serves when a CRD version declares no printer columns.
    pub fn age() -> PrinterColumn {
        PrinterColumn {
            name: "Age".to_string(),
            type_: "date".to_string(),
            format: String::new(),
            description: AGE_COLUMN_DESCRIPTION.to_string(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".to_string(),
        }
    }
}

/// Column headers plus parsed JSONPaths, built once per CRD version.
#[derive(Clone, Debug)]
pub struct TableConvertor {
    headers: Vec<TableColumnDefinition>,
    paths: Vec<JsonPath>,
}

impl TableConvertor {
    /// Fails like upstream (`unrecognized column definition ".x["`) on an unparseable path.
    pub fn new(columns: &[PrinterColumn]) -> Result<TableConvertor, String> {
        let mut headers = vec![TableColumnDefinition::name_column()];
        let mut paths = Vec::with_capacity(columns.len());
        for column in columns {
            let path = JsonPath::parse(&format!("{{{}}}", column.json_path)).map_err(|_| {
                format!(
                    "unrecognized column definition {}",
                    go_quote(&column.json_path)
                )
            })?;
            paths.push(path);
            let description = if column.description.is_empty() {
                format!(
                    "Custom resource definition column (in JSONPath format): {}",
                    column.json_path
                )
            } else {
                column.description.clone()
            };
            headers.push(TableColumnDefinition {
                name: column.name.clone(),
                type_: column.type_.clone(),
                format: column.format.clone(),
                description,
                priority: column.priority,
            });
        }
        Ok(TableConvertor { headers, paths })
    }

    pub fn column_definitions(&self) -> &[TableColumnDefinition] {
        &self.headers
    }

    /// One row's cells: the name, then each column's first JSONPath result converted for
    /// its type (a lookup error or no result gives `null`, which kubectl prints blank).
    pub fn cells(&self, object: &Value, now: DateTime<Utc>) -> Vec<Value> {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut cells = Vec::with_capacity(self.headers.len());
        cells.push(Value::String(name.to_string()));
        for (path, header) in self.paths.iter().zip(&self.headers[1..]) {
            let first = path
                .find(object)
                .ok()
                .and_then(|found| found.first().copied());
            cells.push(cell_for(&header.type_, first, now));
        }
        cells
    }
}

/// A cell for a printer column of `column_type` from the JSONPath results `values` (only the
/// first counts): `date` becomes the age since the timestamp, `string` the printed value,
/// `integer`/`number`/`boolean` stay typed, anything unconvertible is `null`.
pub fn cell(column_type: &str, values: &[Value], now: DateTime<Utc>) -> Value {
    cell_for(column_type, values.first(), now)
}

fn cell_for(column_type: &str, value: Option<&Value>, now: DateTime<Utc>) -> Value {
    let Some(value) = value else {
        return Value::Null;
    };
    match (column_type, value) {
        // Upstream prints the unwrapped nil through text/template, which says "<no value>".
        ("string", Value::Null) => Value::String("<no value>".to_string()),
        ("string", Value::String(s)) => Value::String(s.clone()),
        ("string", Value::Number(_)) => Value::String(go_fmt_number(value)),
        ("string", Value::Bool(b)) => Value::String(b.to_string()),
        ("string", Value::Array(_) | Value::Object(_)) => {
            Value::String(gojson::marshal(value, Escaping::EncodingJson))
        }
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(0.0) as i64),
        },
        ("number", Value::Number(n)) => float_cell(n.as_f64().unwrap_or(0.0)),
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("date", Value::String(s)) => Value::String(age_cell(s, now)),
        _ => Value::Null,
    }
}

fn go_fmt_number(value: &Value) -> String {
    match value.as_i64() {
        Some(i) => i.to_string(),
        None => go_float_v(value.as_f64().unwrap_or(0.0)),
    }
}

/// A float64 cell. Go encodes integral floats without a fraction (`5`, not `5.0`); within
/// the exactly representable range an integer value produces the same bytes.
fn float_cell(f: f64) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if f.fract() == 0.0 && f.abs() < EXACT {
        Value::from(f as i64)
    } else {
        Value::from(f)
    }
}

/// `metatable.ConvertToHumanReadableDateType` of a timestamp string.
fn age_cell(timestamp: &str, now: DateTime<Utc>) -> String {
    if timestamp.is_empty() || timestamp == "null" {
        return "<unknown>".to_string();
    }
    match parse_go_rfc3339(timestamp) {
        Some(t) => human_duration(now.signed_duration_since(t)),
        None => "<invalid>".to_string(),
    }
}

/// `duration.HumanDuration`: about two significant units, e.g. `59s`, `119s`, `5m10s`,
/// `3h5m`, `2d3h`, `698d`, `2y3d`, `8y`; small negative skews read as `0s`.
pub fn human_duration(d: Duration) -> String {
    const SECOND: i64 = 1_000_000_000;
    const MINUTE: i64 = 60 * SECOND;
    const HOUR: i64 = 60 * MINUTE;
    // Go durations saturate at ±292 years.
    let nanos = d.num_nanoseconds().unwrap_or(if d < Duration::zero() {
        i64::MIN
    } else {
        i64::MAX
    });
    let seconds = nanos / SECOND;
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = nanos / MINUTE;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = nanos / HOUR;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        let years = hours / 24 / 365;
        return if days == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{days}d")
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `?includeObject=`: what each row carries besides its cells.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    /// The default: a PartialObjectMetadata with the object's full metadata (kubectl needs
    /// the namespace and labels from it).
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parses the query value; empty means the default.
    pub fn parse(value: &str) -> Result<IncludeObject, String> {
        match value {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(format!(
                "unrecognized includeObject value: {}",
                go_quote(other)
            )),
        }
    }
}

/// `metav1.ListMeta` of a Table; empty fields are omitted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(rename = "continue", skip_serializing_if = "String::is_empty")]
    pub continue_token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_item_count: Option<i64>,
}

/// One `rows[]` entry; `object` is `null` with `includeObject=None`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableRow {
    pub cells: Vec<Value>,
    pub object: Value,
}

/// A `meta.k8s.io/v1` Table, serialized with upstream's field order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Table {
    kind: &'static str,
    api_version: &'static str,
    pub metadata: ListMeta,
    /// `None` serializes as `null`: watch events after the first carry no headers.
    pub column_definitions: Option<Vec<TableColumnDefinition>>,
    pub rows: Vec<TableRow>,
    #[serde(skip)]
    include: IncludeObject,
}

impl Table {
    pub fn new(
        column_definitions: Option<Vec<TableColumnDefinition>>,
        include: IncludeObject,
    ) -> Table {
        Table {
            kind: "Table",
            api_version: "meta.k8s.io/v1",
            metadata: ListMeta::default(),
            column_definitions,
            rows: Vec::new(),
            include,
        }
    }

    /// Adds a row for `object` with the given cells, embedding the object as requested.
    pub fn push_row(&mut self, object: &Value, cells: Vec<Value>) {
        let object = match self.include {
            IncludeObject::None => Value::Null,
            IncludeObject::Object => object.clone(),
            IncludeObject::Metadata => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
            }),
        };
        self.rows.push(TableRow { cells, object });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 6, 1, 12, 0, 0).single().unwrap()
    }

    fn secs(s: i64) -> Duration {
        Duration::seconds(s)
    }

    #[test]
    fn human_duration_boundaries() {
        const M: i64 = 60;
        const H: i64 = 3600;
        const D: i64 = 24 * H;
        let cases = [
            (Duration::milliseconds(-2000), "<invalid>"),
            (Duration::milliseconds(-1999), "0s"),
            (secs(-1), "0s"),
            (secs(0), "0s"),
            (Duration::milliseconds(999), "0s"),
            (secs(59), "59s"),
            (secs(60), "60s"),
            (secs(119), "119s"),
            (secs(120), "2m"),
            (secs(121), "2m1s"),
            (secs(5 * M), "5m"),
            (secs(5 * M + 10), "5m10s"),
            (secs(9 * M + 59), "9m59s"),
            (secs(10 * M), "10m"),
            (secs(10 * M + 30), "10m"),
            (secs(179 * M + 59), "179m"),
            (secs(3 * H), "3h"),
            (secs(3 * H + 5 * M), "3h5m"),
            (secs(3 * H + 5 * M + 59), "3h5m"),
            (secs(7 * H + 59 * M), "7h59m"),
            (secs(8 * H), "8h"),
            (secs(8 * H + 30 * M), "8h"),
            (secs(47 * H + 59 * M), "47h"),
            (secs(2 * D), "2d"),
            (secs(2 * D + 3 * H), "2d3h"),
            (secs(7 * D + 23 * H), "7d23h"),
            (secs(8 * D), "8d"),
            (secs(8 * D + 5 * H), "8d"),
            (secs(698 * D), "698d"),
            (secs(729 * D + 23 * H), "729d"),
            (secs(730 * D), "2y"),
            (secs(733 * D), "2y3d"),
            (secs(2919 * D), "7y364d"),
            (secs(2920 * D), "8y"),
            (secs(3650 * D), "10y"),
            (Duration::MAX, "292y"),
            (Duration::MIN, "<invalid>"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn cells_follow_the_table_convertor() {
        let n = now();
        assert_eq!(
            cell("date", &[json!("2025-06-01T11:55:00Z")], n),
            json!("5m")
        );
        assert_eq!(
            cell("date", &[json!("2023-08-03T12:00:00Z")], n),
            json!("668d")
        );
        assert_eq!(
            cell("date", &[json!("2025-06-01T12:00:05Z")], n),
            json!("<invalid>")
        );
        assert_eq!(cell("date", &[json!("yesterday")], n), json!("<invalid>"));
        assert_eq!(cell("date", &[json!("")], n), json!("<unknown>"));
        assert_eq!(cell("date", &[json!("null")], n), json!("<unknown>"));
        assert_eq!(cell("date", &[json!(5)], n), Value::Null);
        assert_eq!(
            cell("string", &[json!("Running"), json!("x")], n),
            json!("Running")
        );
        assert_eq!(cell("string", &[json!(3)], n), json!("3"));
        assert_eq!(cell("string", &[json!(1e6)], n), json!("1e+06"));
        assert_eq!(cell("string", &[json!(true)], n), json!("true"));
        assert_eq!(cell("string", &[Value::Null], n), json!("<no value>"));
        assert_eq!(
            cell("string", &[json!({"b": 1, "a": "<"})], n),
            json!("{\"a\":\"\\u003c\",\"b\":1}")
        );
        assert_eq!(cell("string", &[json!(["a", 1])], n), json!("[\"a\",1]"));
        assert_eq!(cell("integer", &[json!(4)], n), json!(4));
        assert_eq!(cell("integer", &[json!(4.7)], n), json!(4));
        assert_eq!(cell("integer", &[json!("4")], n), Value::Null);
        assert_eq!(cell("number", &[json!(4)], n), json!(4));
        assert_eq!(cell("number", &[json!(4.5)], n), json!(4.5));
        assert_eq!(cell("boolean", &[json!(false)], n), json!(false));
        assert_eq!(cell("boolean", &[json!("false")], n), Value::Null);
        assert_eq!(cell("integer", &[Value::Null], n), Value::Null);
        assert_eq!(cell("unknown", &[json!("x")], n), Value::Null);
        assert_eq!(cell("string", &[], n), Value::Null);
    }

    fn kubevirt_vm_columns() -> Vec<PrinterColumn> {
        serde_json::from_value(json!([
            {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
            {"description": "Human Readable Status", "jsonPath": ".status.printableStatus", "name": "Status", "type": "string"},
            {"jsonPath": ".status.conditions[?(@.type=='Ready')].status", "name": "Ready", "type": "string"},
            {"jsonPath": ".spec.replicas", "name": "Replicas", "type": "integer", "priority": 1},
        ]))
        .unwrap()
    }

    #[test]
    fn convertor_headers_and_cells() {
        let convertor = TableConvertor::new(&kubevirt_vm_columns()).unwrap();
        let headers = serde_json::to_value(convertor.column_definitions()).unwrap();
        assert_eq!(
            headers[0],
            json!({"name": "Name", "type": "string", "format": "name", "description": NAME_COLUMN_DESCRIPTION, "priority": 0})
        );
        assert_eq!(
            headers[1],
            json!({"name": "Age", "type": "date", "format": "", "description": "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp", "priority": 0})
        );
        assert_eq!(headers[2]["description"], "Human Readable Status");
        assert_eq!(headers[4]["priority"], 1);
        let vm = json!({
            "metadata": {"name": "vm1", "namespace": "default", "creationTimestamp": "2025-06-01T09:00:00Z"},
            "status": {"printableStatus": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        });
        assert_eq!(
            convertor.cells(&vm, now()),
            vec![
                json!("vm1"),
                json!("3h"),
                json!("Running"),
                json!("True"),
                Value::Null
            ]
        );
        let bare = json!({"metadata": {"name": "vm2"}});
        assert_eq!(
            convertor.cells(&bare, now()),
            vec![
                json!("vm2"),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null
            ]
        );
        let age = TableConvertor::new(&[PrinterColumn::age()]).unwrap();
        assert_eq!(
            age.column_definitions()[1].description,
            AGE_COLUMN_DESCRIPTION
        );
        let bad = PrinterColumn {
            json_path: ".a[".to_string(),
            ..PrinterColumn::age()
        };
        assert_eq!(
            TableConvertor::new(&[bad]).unwrap_err(),
            "unrecognized column definition \".a[\""
        );
    }

    #[test]
    fn table_json() {
        let convertor = TableConvertor::new(&[PrinterColumn::age()]).unwrap();
        let vm = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "namespace": "default", "labels": {"a": "b"}, "creationTimestamp": "2025-06-01T11:00:00Z"},
            "spec": {}});
        let mut table = Table::new(
            Some(convertor.column_definitions().to_vec()),
            IncludeObject::Metadata,
        );
        table.metadata.resource_version = "42".to_string();
        table.metadata.continue_token = "abc".to_string();
        table.metadata.remaining_item_count = Some(3);
        table.push_row(&vm, convertor.cells(&vm, now()));
        let text = serde_json::to_string(&table).unwrap();
        assert!(text.starts_with("{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"42\",\"continue\":\"abc\",\"remainingItemCount\":3},\"columnDefinitions\":[{\"name\":\"Name\""), "{text}");
        let value = serde_json::to_value(&table).unwrap();
        assert_eq!(
            value["rows"],
            json!([{"cells": ["vm1", "60m"], "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "vm1", "namespace": "default", "labels": {"a": "b"}, "creationTimestamp": "2025-06-01T11:00:00Z"}}}])
        );

        let mut watch_event = Table::new(None, IncludeObject::None);
        watch_event.push_row(&vm, vec![json!("vm1")]);
        assert_eq!(
            serde_json::to_value(&watch_event).unwrap(),
            json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "columnDefinitions": null,
                "rows": [{"cells": ["vm1"], "object": null}]})
        );
        let mut full = Table::new(Some(vec![]), IncludeObject::Object);
        full.push_row(&vm, vec![]);
        assert_eq!(
            serde_json::to_value(&full).unwrap()["rows"][0]["object"],
            vm
        );
        let mut no_meta = Table::new(Some(vec![]), IncludeObject::Metadata);
        no_meta.push_row(&json!({}), vec![]);
        assert_eq!(
            serde_json::to_value(&no_meta).unwrap()["rows"][0]["object"]["metadata"],
            json!({})
        );
        assert_eq!(
            serde_json::to_value(Table::new(Some(vec![]), IncludeObject::None)).unwrap()["rows"],
            json!([])
        );
    }

    #[test]
    fn include_object_values() {
        assert_eq!(IncludeObject::parse(""), Ok(IncludeObject::Metadata));
        assert_eq!(
            IncludeObject::parse("Metadata"),
            Ok(IncludeObject::Metadata)
        );
        assert_eq!(IncludeObject::parse("None"), Ok(IncludeObject::None));
        assert_eq!(IncludeObject::parse("Object"), Ok(IncludeObject::Object));
        assert_eq!(
            IncludeObject::parse("all"),
            Err("unrecognized includeObject value: \"all\"".to_string())
        );
    }
}
