//! Registry credentials, and the docker config Secrets they come in, read as the kubelet
//! reads an imagePullSecret: `kubernetes.io/dockerconfigjson` (`.dockerconfigjson`:
//! `{"auths": {KEY: ENTRY}}`) or the legacy `kubernetes.io/dockercfg` (`.dockercfg`:
//! `{KEY: ENTRY}`), where an ENTRY has `auth` (base64 of `user:password`) or `username`
//! and `password`, and a KEY is a host, a host and path prefix, or a URL
//! (`https://index.docker.io/v1/`), with `*` globs allowed in host labels.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::reference::{Reference, DOCKER_HUB, DOCKER_HUB_INDEX};

pub const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
pub const DOCKER_CFG_TYPE: &str = "kubernetes.io/dockercfg";
pub const DOCKER_CFG_KEY: &str = ".dockercfg";

/// A user name and password for one registry (sent as HTTP basic auth, to the registry
/// or to its token service).
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    password: SecretString,
}

impl Credentials {
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Credentials {
        Credentials {
            username: username.into(),
            password: SecretString::from(password.into()),
        }
    }

    pub fn password(&self) -> &str {
        self.password.expose_secret()
    }

    /// `Basic base64(user:password)`.
    pub(crate) fn basic_header(&self) -> String {
        let pair = format!("{}:{}", self.username, self.password());
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    }

    /// Tells credentials apart without keeping the password around in a cache key.
    pub(crate) fn fingerprint(&self) -> String {
        let mut hash = Sha256::new();
        hash.update(self.username.as_bytes());
        hash.update([0]);
        hash.update(self.password().as_bytes());
        format!("{:x}", hash.finalize())
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl PartialEq for Credentials {
    fn eq(&self, other: &Self) -> bool {
        self.username == other.username && self.password() == other.password()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("it has type {found:?}; an image pull secret has type {DOCKER_CONFIG_JSON_TYPE} (key {DOCKER_CONFIG_JSON_KEY}) or {DOCKER_CFG_TYPE} (key {DOCKER_CFG_KEY}), as `kubectl create secret docker-registry` makes")]
    WrongType { found: String },
    #[error("it has no key {key}")]
    MissingKey { key: &'static str },
    #[error("{key} is not a docker config: {source}")]
    Json {
        key: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the auth field of its entry {registry:?} is not base64 of user:password")]
    BadAuth { registry: String },
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    auth: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

#[derive(Deserialize)]
struct ConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

/// The kubelet's reading of `auth`: padded or unpadded standard base64 of `user:pass`.
fn decode_auth(field: &str) -> Option<(String, String)> {
    let field = field.trim();
    let bytes = if field.ends_with('=') {
        base64::engine::general_purpose::STANDARD.decode(field)
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD.decode(field)
    }
    .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// `https://quay.io/v2/org` → `quay.io/org`; `https://index.docker.io/v1/` →
/// `index.docker.io` (the kubelet's keys: scheme dropped, `/v1/` and `/v2/` meaning the
/// whole host).
fn normalize_key(key: &str) -> String {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let path = if path.starts_with("/v1/") || path.starts_with("/v2/") {
        &path[3..]
    } else {
        path
    };
    if path.is_empty() || path == "/" {
        host.to_string()
    } else {
        format!("{host}{path}")
    }
}

/// `filepath.Match` for one host label, with `*` and `?` (no character classes).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && glob(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}

fn split_host_path(text: &str) -> (&str, &str) {
    match text.find('/') {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, ""),
    }
}

fn split_port(host: &str) -> (&str, &str) {
    if host.starts_with('[') {
        // An IPv6 literal: only a `:` after its `]` starts a port.
        return match host.split_once("]:") {
            Some((name, port)) => (name, port),
            None => (host, ""),
        };
    }
    host.rsplit_once(':').unwrap_or((host, ""))
}

/// Whether the credentials key `key` covers the image name `target` (`host/path`): the
/// same port, as many host labels with each matching its glob, and the key's path a
/// prefix of the target's.
fn key_matches(key: &str, target: &str) -> bool {
    let (key_host, key_path) = split_host_path(key);
    let (target_host, target_path) = split_host_path(target);
    let (key_name, key_port) = split_port(key_host);
    let (target_name, target_port) = split_port(target_host);
    if key_port != target_port || !target_path.starts_with(key_path) {
        return false;
    }
    let key_labels: Vec<&str> = key_name.split('.').collect();
    let target_labels: Vec<&str> = target_name.split('.').collect();
    key_labels.len() == target_labels.len()
        && key_labels
            .iter()
            .zip(&target_labels)
            .all(|(k, t)| glob(k.as_bytes(), t.as_bytes()))
}

/// The credentials of one or more docker configs, by key.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    /// (normalized key, credentials), in the order they were added.
    entries: Vec<(String, Credentials)>,
}

impl Keyring {
    /// Reads an image pull secret: its type and its (decoded) data.
    pub fn from_secret(
        secret_type: &str,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Keyring, CredentialsError> {
        let key = match secret_type {
            DOCKER_CONFIG_JSON_TYPE => DOCKER_CONFIG_JSON_KEY,
            DOCKER_CFG_TYPE => DOCKER_CFG_KEY,
            other => {
                return Err(CredentialsError::WrongType {
                    found: other.to_string(),
                })
            }
        };
        let bytes = data
            .get(key)
            .filter(|b| !b.is_empty())
            .ok_or(CredentialsError::MissingKey { key })?;
        if key == DOCKER_CONFIG_JSON_KEY {
            Self::from_docker_config_json(bytes)
        } else {
            Self::from_dockercfg(bytes)
        }
    }

    /// `{"auths": {...}}`, as in `~/.docker/config.json`.
    pub fn from_docker_config_json(bytes: &[u8]) -> Result<Keyring, CredentialsError> {
        let config: ConfigJson =
            serde_json::from_slice(bytes).map_err(|source| CredentialsError::Json {
                key: DOCKER_CONFIG_JSON_KEY,
                source,
            })?;
        Self::from_entries(config.auths)
    }

    /// The legacy `.dockercfg`: the entries without `auths` around them.
    pub fn from_dockercfg(bytes: &[u8]) -> Result<Keyring, CredentialsError> {
        let entries: BTreeMap<String, Entry> =
            serde_json::from_slice(bytes).map_err(|source| CredentialsError::Json {
                key: DOCKER_CFG_KEY,
                source,
            })?;
        Self::from_entries(entries)
    }

    fn from_entries(entries: BTreeMap<String, Entry>) -> Result<Keyring, CredentialsError> {
        let mut keyring = Keyring::default();
        for (registry, entry) in entries {
            let (username, password) = if entry.auth.trim().is_empty() {
                (entry.username, entry.password)
            } else {
                decode_auth(&entry.auth).ok_or_else(|| CredentialsError::BadAuth {
                    registry: registry.clone(),
                })?
            };
            keyring.entries.push((
                normalize_key(&registry),
                Credentials::new(username, password),
            ));
        }
        Ok(keyring)
    }

    pub fn add(&mut self, key: &str, credentials: Credentials) {
        self.entries.push((normalize_key(key), credentials));
    }

    pub fn extend(&mut self, other: Keyring) {
        self.entries.extend(other.entries);
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The credentials to try for `image`, most specific key first (`quay.io/org` before
    /// `quay.io`); Docker Hub images also take the credentials of `index.docker.io`, the
    /// key `docker login` writes.
    pub fn lookup(&self, image: &Reference) -> Vec<Credentials> {
        let target = image.name();
        let mut keys: Vec<&str> = self.entries.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.reverse();
        let mut found: Vec<Credentials> = Vec::new();
        for key in keys.iter().filter(|k| key_matches(k, &target)) {
            found.extend(
                self.entries
                    .iter()
                    .filter(|(k, _)| k == key)
                    .map(|(_, c)| c.clone()),
            );
        }
        if found.is_empty() && image.registry() == DOCKER_HUB {
            found.extend(
                self.entries
                    .iter()
                    .filter(|(k, _)| k == DOCKER_HUB_INDEX)
                    .map(|(_, c)| c.clone()),
            );
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn secret(
        kind: &str,
        key: &str,
        value: serde_json::Value,
    ) -> Result<Keyring, CredentialsError> {
        let data = BTreeMap::from([(key.to_string(), serde_json::to_vec(&value).unwrap())]);
        Keyring::from_secret(kind, &data)
    }

    fn users(keyring: &Keyring, image: &str) -> Vec<String> {
        keyring
            .lookup(&Reference::parse(image).unwrap())
            .into_iter()
            .map(|c| format!("{}:{}", c.username, c.password()))
            .collect()
    }

    #[test]
    fn dockerconfigjson_auth_and_fields() {
        let keyring = secret(
            DOCKER_CONFIG_JSON_TYPE,
            DOCKER_CONFIG_JSON_KEY,
            json!({"auths": {
                "quay.io": {"auth": b64("robot:tok3n:with:colons")},
                "127.0.0.1:5000": {"username": "alice", "password": "secret"},
                "ghcr.io": {"auth": b64("bob:pw").trim_end_matches('=')},
            }}),
        )
        .unwrap();
        assert_eq!(
            users(&keyring, "quay.io/containerdisks/fedora:40"),
            ["robot:tok3n:with:colons"]
        );
        assert_eq!(users(&keyring, "127.0.0.1:5000/guest"), ["alice:secret"]);
        // Unpadded base64 is read too, as the kubelet does.
        assert_eq!(users(&keyring, "ghcr.io/o/i"), ["bob:pw"]);
        // Another port is another registry.
        assert!(users(&keyring, "127.0.0.1:5001/guest").is_empty());
        assert!(users(&keyring, "docker.io/library/fedora").is_empty());
    }

    #[test]
    fn legacy_dockercfg() {
        let keyring = secret(
            DOCKER_CFG_TYPE,
            DOCKER_CFG_KEY,
            json!({"https://index.docker.io/v1/": {"auth": b64("hub:pw"), "email": "a@b"}}),
        )
        .unwrap();
        for image in [
            "fedora",
            "docker.io/kubevirt/cirros",
            "index.docker.io/library/busybox",
        ] {
            assert_eq!(users(&keyring, image), ["hub:pw"], "{image}");
        }
        assert!(users(&keyring, "quay.io/kubevirt/cirros").is_empty());
    }

    #[test]
    fn docker_hub_keys() {
        for key in [
            "docker.io",
            "index.docker.io",
            "https://index.docker.io/v1/",
            "https://index.docker.io/v2/",
        ] {
            let mut keyring = Keyring::default();
            keyring.add(key, Credentials::new("hub", "pw"));
            assert_eq!(users(&keyring, "fedora"), ["hub:pw"], "{key}");
        }
    }

    #[test]
    fn most_specific_key_first_and_globs() {
        let mut keyring = Keyring::default();
        keyring.add("quay.io", Credentials::new("host", "1"));
        keyring.add("quay.io/team", Credentials::new("team", "2"));
        keyring.add("*.example.com", Credentials::new("glob", "3"));
        keyring.add("https://quay.io/v2/other/", Credentials::new("other", "4"));
        assert_eq!(users(&keyring, "quay.io/team/image"), ["team:2", "host:1"]);
        assert_eq!(
            users(&keyring, "quay.io/other/image"),
            ["other:4", "host:1"]
        );
        assert_eq!(users(&keyring, "quay.io/solo/image"), ["host:1"]);
        assert_eq!(users(&keyring, "registry.example.com/a"), ["glob:3"]);
        // A glob matches one label only.
        assert!(users(&keyring, "a.registry.example.com/a").is_empty());
        assert!(users(&keyring, "example.com/a").is_empty());
    }

    #[test]
    fn bad_secrets_say_why() {
        let wrong = secret("Opaque", DOCKER_CONFIG_JSON_KEY, json!({})).unwrap_err();
        assert!(
            wrong.to_string().contains("kubernetes.io/dockerconfigjson"),
            "{wrong}"
        );
        let missing = Keyring::from_secret(DOCKER_CONFIG_JSON_TYPE, &BTreeMap::new()).unwrap_err();
        assert_eq!(missing.to_string(), "it has no key .dockerconfigjson");
        let data = BTreeMap::from([(DOCKER_CONFIG_JSON_KEY.to_string(), b"{not json".to_vec())]);
        let json = Keyring::from_secret(DOCKER_CONFIG_JSON_TYPE, &data).unwrap_err();
        assert!(
            json.to_string()
                .starts_with(".dockerconfigjson is not a docker config"),
            "{json}"
        );
        let auth = secret(
            DOCKER_CONFIG_JSON_TYPE,
            DOCKER_CONFIG_JSON_KEY,
            json!({"auths": {"quay.io": {"auth": b64("no-colon")}}}),
        )
        .unwrap_err();
        assert!(auth.to_string().contains("\"quay.io\""), "{auth}");
    }

    #[test]
    fn passwords_stay_out_of_debug_output() {
        let text = format!("{:?}", Credentials::new("alice", "hunter2"));
        assert!(
            text.contains("alice") && !text.contains("hunter2"),
            "{text}"
        );
    }
}
