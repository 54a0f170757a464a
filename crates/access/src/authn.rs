//! Authentication: a verified client certificate or a known bearer token names the user;
//! a request without credentials is anonymous where anonymous requests are let in (health
//! and version, as kube-apiserver's anonymous authenticator with path conditions), and
//! anything else is 401. What a user may then do is `authz`'s question.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

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
    #[error(transparent)]
    Server(#[from] crate::pki::PkiError),
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

/// Where bearer tokens come from: the server's own `tokens.json` (which `virtplane user
/// add --token` extends) and kube-apiserver's `--token-auth-file`. Both are read again
/// when they change, so a token added or removed works without a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokenFormat {
    ServerJson,
    StaticCsv,
}

/// What tells that a token file changed: it is replaced by a rename (a new inode) or
/// written in place (a new mtime or length).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    modified: Option<std::time::SystemTime>,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        inode: meta.ino(),
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// How often known tokens' files are looked at again (so a removed token stops working
/// within this long); an unknown token looks at once.
const RECHECK: Duration = Duration::from_secs(1);

pub struct Authenticator {
    sources: Vec<(PathBuf, TokenFormat)>,
    tokens: RwLock<HashMap<String, TokenUser>>,
    /// When the sources were last looked at, and what they looked like then.
    checked: Mutex<(Option<Instant>, Vec<Option<Stamp>>)>,
}

impl Authenticator {
    /// A fixed set of tokens.
    pub fn new(tokens: impl IntoIterator<Item = (String, TokenUser)>) -> Self {
        Authenticator {
            sources: Vec::new(),
            tokens: RwLock::new(tokens.into_iter().collect()),
            checked: Mutex::new((None, Vec::new())),
        }
    }

    /// The tokens of the server's `tokens.json` (see `pki::add_token`), followed.
    pub fn with_server_tokens(self, path: &Path) -> Result<Self, TokenFileError> {
        self.with_source(path, TokenFormat::ServerJson)
    }

    /// Adds the users of a kube-apiserver `--token-auth-file`, followed; a token it
    /// repeats wins.
    pub fn with_token_file(self, path: &Path) -> Result<Self, TokenFileError> {
        self.with_source(path, TokenFormat::StaticCsv)
    }

    fn with_source(mut self, path: &Path, format: TokenFormat) -> Result<Self, TokenFileError> {
        self.sources.push((path.to_path_buf(), format));
        let tokens = self.load()?;
        let stamps = self.stamps();
        *self.tokens.get_mut().unwrap_or_else(|e| e.into_inner()) = tokens;
        *self.checked.get_mut().unwrap_or_else(|e| e.into_inner()) = (Some(Instant::now()), stamps);
        Ok(self)
    }

    fn stamps(&self) -> Vec<Option<Stamp>> {
        self.sources.iter().map(|(path, _)| stamp(path)).collect()
    }

    /// Every source's tokens, later sources winning.
    fn load(&self) -> Result<HashMap<String, TokenUser>, TokenFileError> {
        let mut tokens = HashMap::new();
        for (path, format) in &self.sources {
            match format {
                TokenFormat::StaticCsv => tokens.extend(read_token_file(path)?),
                TokenFormat::ServerJson => {
                    tokens.extend(crate::pki::read_tokens(path)?.unwrap_or_default())
                }
            }
        }
        Ok(tokens)
    }

    /// Reads the sources again if they changed since they were last looked at (at most
    /// once per `RECHECK` unless `now`). A source that cannot be read keeps the tokens
    /// as they were, with a warning.
    fn refresh(&self, now: bool) {
        if self.sources.is_empty() {
            return;
        }
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        if !now && checked.0.is_some_and(|at| at.elapsed() < RECHECK) {
            return;
        }
        checked.0 = Some(Instant::now());
        let stamps = self.stamps();
        if stamps == checked.1 {
            return;
        }
        match self.load() {
            Ok(tokens) => {
                *self.tokens.write().unwrap_or_else(|e| e.into_inner()) = tokens;
                checked.1 = stamps;
            }
            Err(e) => tracing::warn!("bearer tokens not reloaded, the ones read before stay: {e}"),
        }
    }

    fn token_user(&self, token: &str) -> Option<TokenUser> {
        self.tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()
    }

    /// The user of a bearer token.
    pub fn user_of_token(&self, token: &str) -> Option<UserInfo> {
        self.refresh(false);
        let user = self.token_user(token).or_else(|| {
            self.refresh(true);
            self.token_user(token)
        })?;
        Some(
            UserInfo {
                name: user.user,
                uid: user.uid.unwrap_or_default(),
                groups: user.groups,
                extra: BTreeMap::new(),
            }
            .authenticated(),
        )
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
        match token.and_then(|t| self.user_of_token(t)) {
            Some(user) => Authentication::User(user),
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
    fn tokens_added_or_removed_while_the_server_runs_count_at_once() {
        let dir =
            std::env::temp_dir().join(format!("virtplane-token-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = crate::pki::tokens_path(&dir);
        std::fs::write(&path, "{}").unwrap();
        let authenticator = Authenticator::new([]).with_server_tokens(&path).unwrap();
        let token = crate::pki::add_token(&dir, "alice", &["devs".to_string()]).unwrap();
        // An unknown token makes the authenticator look again at once.
        let alice = authenticator
            .user_of_token(&token)
            .expect("a token added now");
        assert_eq!(alice.name, "alice");
        assert!(alice.in_group("devs") && alice.in_group(AUTHENTICATED_GROUP));
        std::fs::write(&path, "{}").unwrap();
        std::thread::sleep(RECHECK + Duration::from_millis(50));
        assert_eq!(authenticator.user_of_token(&token), None, "a token removed");
        // A damaged file keeps the tokens read before it.
        let token = crate::pki::add_token(&dir, "bob", &[]).unwrap();
        assert!(authenticator.user_of_token(&token).is_some());
        std::fs::write(&path, "{not json").unwrap();
        std::thread::sleep(RECHECK + Duration::from_millis(50));
        assert!(authenticator.user_of_token(&token).is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
