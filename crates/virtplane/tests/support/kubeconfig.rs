//! The credentials a `virtplane server` writes into its data dir: `admin.kubeconfig` (the
//! CA and the admin's client certificate, base64) and `pki/tokens.json` (bearer token →
//! user). Shared by the tests (`support/mod.rs`) and the benches (`benches/support/mod.rs`
//! includes this file by path).

use std::path::Path;

use anyhow::{Context, Result};
use base64::Engine;
use serde_json::Value;

/// The text of `DATA_DIR/admin.kubeconfig`.
pub fn admin_kubeconfig(data_dir: &Path) -> Result<String> {
    let path = data_dir.join("admin.kubeconfig");
    std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
}

/// `field: base64` out of a kubeconfig, decoded.
pub fn kubeconfig_field(kubeconfig: &str, field: &str) -> Option<Vec<u8>> {
    let line = kubeconfig
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{field}:")))?;
    let value = line.split_once(':')?.1.trim();
    base64::engine::general_purpose::STANDARD.decode(value).ok()
}

/// The bearer token of `user` in `DATA_DIR/pki/tokens.json`.
pub fn user_token(data_dir: &Path, user: &str) -> Result<String> {
    let path = data_dir.join("pki/tokens.json");
    let text = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let tokens: Value =
        serde_json::from_slice(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    tokens
        .as_object()
        .and_then(|m| m.iter().find(|(_, u)| u["user"] == user))
        .map(|(t, _)| t.clone())
        .with_context(|| format!("no token for user {user} in pki/tokens.json"))
}
