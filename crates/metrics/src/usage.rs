//! What a node agent reports of the resources its host and guests use (at
//! [`USAGE_PATH`] on its endpoint), which the API server serves as `metrics.k8s.io`.

use serde::{Deserialize, Serialize};

/// Where the API server asks a node agent for its [`Report`].
pub const USAGE_PATH: &str = "/v1/usage";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// When the newer of the two readings was taken (RFC 3339).
    pub timestamp: String,
    /// How far apart the readings CPU rates are taken between are.
    pub window_seconds: f64,
    /// The node's own, when it runs guests for real (a simulated node has none).
    pub node: Option<Used>,
    /// Each guest's, by its VMI.
    pub guests: Vec<GuestUsed>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Used {
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestUsed {
    pub namespace: String,
    pub name: String,
    #[serde(flatten)]
    pub used: Used,
}
