//! What a registry asks for in its `401`: a `WWW-Authenticate: Bearer realm=…,service=…,
//! scope=…` challenge (the distribution token flow: get a token from the realm, with
//! basic auth when there are credentials, then send it as `Authorization: Bearer`) or a
//! `Basic realm=…` one; and the authorizations already obtained, kept until they expire.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;

/// One challenge of a `WWW-Authenticate` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Challenge {
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
    Basic,
    /// A scheme we do not speak (the name).
    Other(String),
}

/// Splits `Bearer realm="x",service="y", Basic realm="z"` into challenges: a scheme
/// token, then `name=value` parameters (a value a token or a quoted string) separated by
/// commas, until the next scheme.
pub(crate) fn parse_challenges(header: &str) -> Vec<Challenge> {
    let bytes = header.as_bytes();
    let mut i = 0;
    let skip = |i: &mut usize, what: &dyn Fn(u8) -> bool| {
        while *i < bytes.len() && what(bytes[*i]) {
            *i += 1;
        }
    };
    let token = |b: u8| !b.is_ascii_whitespace() && !matches!(b, b',' | b'=' | b'"');
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    while i < bytes.len() {
        skip(&mut i, &|b| b.is_ascii_whitespace() || b == b',');
        let start = i;
        skip(&mut i, &token);
        if start == i {
            // Stray punctuation: step over it.
            i += 1;
            continue;
        }
        let word = header[start..i].to_string();
        let after = i;
        skip(&mut i, &|b| b.is_ascii_whitespace());
        if i < bytes.len() && bytes[i] == b'=' && !out.is_empty() && !word.is_empty() {
            // `name=value` of the current challenge.
            i += 1;
            skip(&mut i, &|b| b.is_ascii_whitespace());
            let mut value = String::new();
            if i < bytes.len() && bytes[i] == b'"' {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' && i + 1 < bytes.len() {
                        i += 1;
                    }
                    let ch_len = header[i..].chars().next().map_or(1, char::len_utf8);
                    value.push_str(&header[i..i + ch_len]);
                    i += ch_len;
                }
                i += 1;
            } else {
                let start = i;
                skip(&mut i, &|b| !b.is_ascii_whitespace() && b != b',');
                value.push_str(&header[start..i]);
            }
            if let Some((_, params)) = out.last_mut() {
                params.push((word.to_ascii_lowercase(), value));
            }
        } else {
            // A new scheme (a token68 after it is ignored: registries send none).
            i = after;
            out.push((word, Vec::new()));
        }
    }
    out.into_iter()
        .map(|(scheme, params)| {
            let get = |name: &str| {
                params
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            };
            match scheme.to_ascii_lowercase().as_str() {
                "bearer" => match get("realm") {
                    Some(realm) => Challenge::Bearer {
                        realm,
                        service: get("service"),
                        scope: get("scope"),
                    },
                    None => Challenge::Other(scheme),
                },
                "basic" => Challenge::Basic,
                _ => Challenge::Other(scheme),
            }
        })
        .collect()
}

/// A token service's answer (the distribution token spec; `access_token` is the OAuth2
/// name of the same thing).
#[derive(Debug, Deserialize)]
pub(crate) struct TokenResponse {
    #[serde(default)]
    pub token: String,
    #[serde(default)]
    pub access_token: String,
    /// Seconds; 60 when absent.
    pub expires_in: Option<u64>,
}

impl TokenResponse {
    pub fn token(&self) -> Option<&str> {
        [&self.token, &self.access_token]
            .into_iter()
            .find(|t| !t.is_empty())
            .map(String::as_str)
    }

    /// How long to use it: its lifetime less a tenth (at most 10 s), so a token is not
    /// sent just as it expires.
    pub fn usable_for(&self) -> Duration {
        let lifetime = Duration::from_secs(self.expires_in.filter(|s| *s > 0).unwrap_or(60));
        lifetime - (lifetime / 10).min(Duration::from_secs(10))
    }
}

/// Whose authorization it is: a registry host, a repository (tokens are scoped to one)
/// and the credentials' fingerprint (empty when anonymous), so that one VMI's credentials
/// never authorize another's pull.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AuthKey {
    pub host: String,
    pub repository: String,
    pub identity: String,
}

#[derive(Clone, Debug)]
struct Authorization {
    header: String,
    until: Option<Instant>,
}

/// `Authorization` headers obtained so far.
#[derive(Default)]
pub(crate) struct AuthCache {
    entries: Mutex<HashMap<AuthKey, Authorization>>,
}

impl AuthCache {
    /// The header to send, unless it expired.
    pub fn get(&self, key: &AuthKey) -> Option<String> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(key) {
            Some(a) if a.until.is_none_or(|t| Instant::now() < t) => Some(a.header.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    pub fn put(&self, key: AuthKey, header: String, lifetime: Option<Duration>) {
        let until = lifetime.map(|l| Instant::now() + l);
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Authorization { header, until });
    }

    pub fn forget(&self, key: &AuthKey) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges() {
        let got = parse_challenges(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/fedora:pull""#,
        );
        assert_eq!(
            got,
            [Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/fedora:pull".into()),
            }]
        );
        // quay.io's spacing, an unquoted value, an escaped quote and an error parameter.
        let got = parse_challenges(
            r#"bearer realm = "https://quay.io/v2/auth", service=quay.io, scope="a\"b", error="insufficient_scope""#,
        );
        assert_eq!(
            got,
            [Challenge::Bearer {
                realm: "https://quay.io/v2/auth".into(),
                service: Some("quay.io".into()),
                scope: Some("a\"b".into()),
            }]
        );
    }

    #[test]
    fn several_challenges_and_basic() {
        let got = parse_challenges(
            r#"Basic realm="Registry Realm", Bearer realm="http://127.0.0.1:1/token""#,
        );
        assert_eq!(
            got,
            [
                Challenge::Basic,
                Challenge::Bearer {
                    realm: "http://127.0.0.1:1/token".into(),
                    service: None,
                    scope: None
                }
            ]
        );
        assert_eq!(parse_challenges("Basic"), [Challenge::Basic]);
        assert_eq!(
            parse_challenges(r#"Negotiate abc=="#),
            [Challenge::Other("Negotiate".into())]
        );
        assert_eq!(
            parse_challenges(r#"Bearer service="x""#),
            [Challenge::Other("Bearer".into())]
        );
        assert!(parse_challenges("").is_empty());
    }

    #[test]
    fn token_lifetimes() {
        let t: TokenResponse =
            serde_json::from_str(r#"{"access_token":"a","expires_in":300}"#).unwrap();
        assert_eq!(
            (t.token(), t.usable_for()),
            (Some("a"), Duration::from_secs(290))
        );
        let t: TokenResponse = serde_json::from_str(r#"{"token":"t"}"#).unwrap();
        assert_eq!(
            (t.token(), t.usable_for()),
            (Some("t"), Duration::from_secs(54))
        );
        let t: TokenResponse = serde_json::from_str(r#"{"token":"","expires_in":2}"#).unwrap();
        assert_eq!(
            (t.token(), t.usable_for()),
            (None, Duration::from_millis(1800))
        );
    }

    #[test]
    fn cached_authorizations_expire() {
        let cache = AuthCache::default();
        let key = AuthKey {
            host: "h".into(),
            repository: "r".into(),
            identity: String::new(),
        };
        cache.put(
            key.clone(),
            "Bearer a".into(),
            Some(Duration::from_millis(30)),
        );
        assert_eq!(cache.get(&key).as_deref(), Some("Bearer a"));
        let other = AuthKey {
            identity: "someone".into(),
            ..key.clone()
        };
        assert_eq!(cache.get(&other), None);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(cache.get(&key), None);
    }
}
