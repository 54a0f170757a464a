//! Authentication: a verified client certificate or a known bearer token names the user;
//! a request without credentials is anonymous where anonymous requests are let in (health
//! and version, as kube-apiserver's anonymous authenticator with path conditions), and
//! anything else is 401. What a user may then do is `authz`'s question.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use http::HeaderMap;

use crate::pki::TokenUser;

/// Every authenticated user is in this group (kube's AuthenticatedGroupAdder).
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The group of requests without credentials.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// Members may do anything, and escalation checks do not apply to them.
pub const MASTERS_GROUP: &str = "system:masters";

/// Who a request is made by (kube's `user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Members of these groups act as KubeVirt's own service accounts do.
pub const COMPONENT_GROUPS: [&str; 2] = ["system:nodes", "system:virtplane-components"];

impl UserInfo {
    pub fn new(name: impl Into<String>, groups: Vec<String>) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups,
            ..Default::default()
        }
    }

    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> UserInfo {
        UserInfo::new(ANONYMOUS_USER, vec![UNAUTHENTICATED_GROUP.into()])
    }

    pub fn is_component(&self) -> bool {
        self.groups
            .iter()
            .any(|g| COMPONENT_GROUPS.contains(&g.as_str()))
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Adds `system:authenticated` unless the user is already in it.
    fn authenticated(mut self) -> UserInfo {
        if !self.in_group(AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.into());
        }
        self
    }
}

/// What the credentials of a request proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authentication {
    User(UserInfo),
    /// No credentials at all.
    None,
    /// Credentials that prove nobody (an unknown token, a malformed header): 401.
    Failed,
}

/// The identity proven by a verified client certificate: CN is the user, O the groups.
#[derive(Clone, Debug)]
pub struct ClientCertificateIdentity(pub UserInfo);

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read token file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("token file '{path}' must have at least 3 columns (token, user name, user uid), found {found}")]
    Columns { path: PathBuf, found: usize },
    #[error("token file '{path}', line {line}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

pub struct Authenticator {
    tokens: HashMap<String, TokenUser>,
}

impl Authenticator {
    pub fn new(tokens: impl IntoIterator<Item = (String, TokenUser)>) -> Self {
        Authenticator {
            tokens: tokens.into_iter().collect(),
        }
    }

    /// Adds the users of a kube-apiserver `--token-auth-file`; a token it repeats wins.
    pub fn with_token_file(mut self, path: &Path) -> Result<Self, TokenFileError> {
        self.tokens.extend(read_token_file(path)?);
        Ok(self)
    }

    /// The user behind a request.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        certificate: Option<&ClientCertificateIdentity>,
    ) -> Authentication {
        // kube-apiserver's union authenticator asks the x509 authenticator before the
        // token authenticators and stops at the first success: a verified client
        // certificate names the user whatever bearer token comes with it.
        if let Some(certificate) = certificate {
            return Authentication::User(certificate.0.clone().authenticated());
        }
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Authentication::None;
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        match token.and_then(|t| self.tokens.get(t)) {
            Some(user) => Authentication::User(
                UserInfo {
                    name: user.user.clone(),
                    uid: user.uid.clone().unwrap_or_default(),
                    groups: user.groups.clone(),
                    extra: BTreeMap::new(),
                }
                .authenticated(),
            ),
            None => Authentication::Failed,
        }
    }
}

/// kube-apiserver's static token file: CSV lines `token,user,uid[,"group1,group2"]`.
/// Empty tokens are skipped, as upstream does (with a warning).
pub fn read_token_file(path: &Path) -> Result<Vec<(String, TokenUser)>, TokenFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let records = parse_csv(&text).map_err(|(line, message)| TokenFileError::Syntax {
        path: path.to_path_buf(),
        line,
        message,
    })?;
    let mut out = Vec::new();
    for record in records {
        if record.len() < 3 {
            return Err(TokenFileError::Columns {
                path: path.to_path_buf(),
                found: record.len(),
            });
        }
        if record[0].is_empty() {
            tracing::warn!("empty token in token file {}", path.display());
            continue;
        }
        let groups = match record.get(3) {
            Some(groups) => groups.split(',').map(str::to_string).collect(),
            None => Vec::new(),
        };
        out.push((
            record[0].clone(),
            TokenUser {
                user: record[1].clone(),
                uid: Some(record[2].clone()),
                groups,
            },
        ));
    }
    Ok(out)
}

/// RFC 4180 records as Go's `encoding/csv` reads them: blank lines are skipped, a field
/// may be quoted (`""` is a quote inside one), and a quoted field may span lines.
fn parse_csv(text: &str) -> Result<Vec<Vec<String>>, (usize, String)> {
    let mut records = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    loop {
        // Skip blank lines.
        while matches!(chars.peek(), Some('\n') | Some('\r')) {
            if chars.next() == Some('\n') {
                line += 1;
            }
        }
        if chars.peek().is_none() {
            return Ok(records);
        }
        let mut record = Vec::new();
        loop {
            let mut field = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                loop {
                    match chars.next() {
                        None => {
                            return Err((line, "extraneous or missing \" in quoted-field".into()))
                        }
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            field.push('"');
                        }
                        Some('"') => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            field.push(c);
                        }
                    }
                }
                match chars.peek() {
                    None | Some(',') | Some('\n') | Some('\r') => {}
                    Some(_) => {
                        return Err((line, "extraneous or missing \" in quoted-field".into()))
                    }
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if matches!(c, ',' | '\n' | '\r') {
                        break;
                    }
                    if c == '"' {
                        return Err((line, "bare \" in non-quoted-field".into()));
                    }
                    field.push(c);
                    chars.next();
                }
            }
            record.push(field);
            match chars.next() {
                Some(',') => continue,
                Some('\r') => {
                    if chars.peek() == Some(&'\n') {
                        chars.next();
                    }
                    line += 1;
                    break;
                }
                Some('\n') => {
                    line += 1;
                    break;
                }
                None => break,
                Some(other) => return Err((line, format!("unexpected {other:?} after a field"))),
            }
        }
        records.push(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_as_kube_apiserver_reads_it() {
        let dir = std::env::temp_dir().join(format!("virtplane-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens.csv");
        std::fs::write(
            &path,
            "t1,alice,uid-1,\"team-a,devs\"\n\nt2,bob,uid-2\n,nobody,uid-3\nt3,\"carol \"\"c\"\"\",uid-4,ops\n",
        )
        .unwrap();
        let tokens = read_token_file(&path).unwrap();
        let names: Vec<(&str, &str, Vec<String>)> = tokens
            .iter()
            .map(|(t, u)| (t.as_str(), u.user.as_str(), u.groups.clone()))
            .collect();
        assert_eq!(
            names,
            [
                (
                    "t1",
                    "alice",
                    vec!["team-a".to_string(), "devs".to_string()]
                ),
                ("t2", "bob", vec![]),
                ("t3", "carol \"c\"", vec!["ops".to_string()]),
            ]
        );
        assert_eq!(tokens[0].1.uid.as_deref(), Some("uid-1"));
        std::fs::write(&path, "t1,alice\n").unwrap();
        assert_eq!(
            read_token_file(&path).unwrap_err().to_string(),
            format!(
                "token file '{}' must have at least 3 columns (token, user name, user uid), found 2",
                path.display()
            )
        );
        std::fs::write(&path, "t1,\"alice,uid\n").unwrap();
        assert!(read_token_file(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bearer_tokens_and_certificates() {
        let auth = Authenticator::new([(
            "tok".to_string(),
            TokenUser {
                user: "alice".into(),
                uid: None,
                groups: vec!["devs".into()],
            },
        )]);
        let mut headers = HeaderMap::new();
        assert_eq!(auth.authenticate(&headers, None), Authentication::None);
        headers.insert(http::header::AUTHORIZATION, "Bearer tok".parse().unwrap());
        let Authentication::User(user) = auth.authenticate(&headers, None) else {
            panic!("not authenticated")
        };
        assert_eq!(user.groups, ["devs", AUTHENTICATED_GROUP]);
        for bad in ["Bearer nope", "Basic tok", "tok", "Bearer "] {
            headers.insert(http::header::AUTHORIZATION, bad.parse().unwrap());
            assert_eq!(
                auth.authenticate(&headers, None),
                Authentication::Failed,
                "{bad}"
            );
        }
        let cert = ClientCertificateIdentity(UserInfo::new("bob", vec![]));
        let Authentication::User(user) = auth.authenticate(&headers, Some(&cert)) else {
            panic!("not authenticated")
        };
        assert_eq!((user.name.as_str(), user.groups.len()), ("bob", 1));
    }
}
