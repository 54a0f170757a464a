//! The one place that touches the YAML library, so that swapping it is one file.

use serde_json::Value;

/// Parses one YAML (or JSON) document into a JSON value.
pub fn from_str(text: &str) -> Result<Value, String> {
    serde_saphyr::from_str::<Value>(text).map_err(|e| e.to_string())
}

/// Renders a JSON value as YAML.
pub fn to_string(value: &Value) -> String {
    serde_saphyr::to_string(value).unwrap_or_default()
}
