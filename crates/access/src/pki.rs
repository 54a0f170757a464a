//! The server's certificate authority, serving certificate, client credentials and the
//! kubeconfig files handed to users and node agents. Kept in `DIR/pki/` so that clients
//! keep trusting the server across restarts.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine;
use rand::RngCore;
use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("certificate generation failed: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("{path} is not valid: {message}")]
    Corrupt { path: PathBuf, message: String },
}

/// Who a bearer token stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUser {
    pub user: String,
    /// The user's uid (the token file's third column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub groups: Vec<String>,
}

/// PEM material of a running server.
pub struct Pki {
    pub dir: PathBuf,
    pub ca_cert_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    /// Bearer tokens accepted by the server.
    pub tokens: BTreeMap<String, TokenUser>,
    ca_key: KeyPair,
}

/// RFC 7919's ffdhe2048 group, public standard parameters: without them QEMU generates
/// fresh 2048-bit DH parameters for each migration target, 60–480 ms measured here.
const FFDHE2048: &str = "-----BEGIN DH PARAMETERS-----\nMIIBCAKCAQEA//////////+t+FRYortKmq/cViAnPTzx2LnFg84tNpWp4TZBFGQz\n+8yTnc4kmz75fS/jY2MMddj2gbICrsRhetPfHtXV/WVhJDP1H18GbtCFY2VVPe0a\n87VXE15/V8k1mE8McODmi3fipona8+/och3xWKE2rec1MKzKT0g6eXq8CrGCsyT7\nYdEIqUuyyOP7uWrat2DX9GgdT0Kj3jlN9K5W7edjcrsZCwenyO4KbXCeAvzhzffi\n7MA0BM0oNC9hkXL+nOmFg/+OTxIy7vKBg8P+OxtMb61zO7X8vC7CIAXFjvGDfRaD\nssbzSibBsu/6iGtCOGEoXJf//////////wIBAg==\n-----END DH PARAMETERS-----\n";

pub const ADMIN_USER: &str = "admin";
pub const ADMIN_GROUP: &str = "system:masters";
/// The join credential's user: a member of `system:bootstrappers`, it may only ask for a
/// node identity (a CertificateSigningRequest), as a kubelet's bootstrap token.
pub const NODE_JOIN_USER: &str = "system:node-joiner";
/// Who the API server is when it dials node agents for consoles (kube-apiserver's
/// kubelet client certificate); agents let no one else in.
pub const AGENT_CLIENT_USER: &str = "system:virtplane-apiserver";

fn read(path: &Path) -> Result<Option<String>, PkiError> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PkiError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Where the server's own bearer tokens are kept in a PKI dir.
pub fn tokens_path(dir: &Path) -> PathBuf {
    dir.join("tokens.json")
}

/// The bearer tokens of a `tokens.json` (token → user), `None` when there is none yet.
pub fn read_tokens(path: &Path) -> Result<Option<BTreeMap<String, TokenUser>>, PkiError> {
    let Some(text) = read(path)? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| PkiError::Corrupt {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// Issues a new bearer token for `user` in `groups` and keeps it in the PKI dir's
/// `tokens.json`, which a running server reads again when it changes. Writers take an
/// exclusive lock on `tokens.lock`, so two at once cannot lose each other's token.
pub fn add_token(dir: &Path, user: &str, groups: &[String]) -> Result<String, PkiError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PkiError::Io { path, source }
    };
    let lock_path = dir.join("tokens.lock");
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_err(&lock_path))?;
    lock.lock().map_err(io_err(&lock_path))?;
    let path = tokens_path(dir);
    let mut tokens = read_tokens(&path)?.ok_or_else(|| PkiError::Corrupt {
        path: path.clone(),
        message: "missing: start the server once to create it".into(),
    })?;
    let token = random_token();
    tokens.insert(
        token.clone(),
        TokenUser {
            user: user.to_string(),
            uid: None,
            groups: groups.to_vec(),
        },
    );
    let text = serde_json::to_string_pretty(&tokens).unwrap_or_default();
    write_private(&path, &text)?;
    Ok(token)
}

/// Writes a file readable by its owner only: it holds private keys or tokens.
pub fn write_private(path: &Path, contents: &str) -> Result<(), PkiError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io_err = |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err)?;
        f.write_all(contents.as_bytes()).map_err(io_err)?;
        f.sync_all().map_err(io_err)?;
    }
    fs::rename(&tmp, path).map_err(io_err)
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.not_before = date_time_ymd(2025, 1, 1);
    params.not_after = date_time_ymd(2125, 1, 1);
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "virtplane-ca");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn leaf_params(common_name: &str, organizations: &[&str]) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.not_before = date_time_ymd(2025, 1, 1);
    params.not_after = date_time_ymd(2125, 1, 1);
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for o in organizations {
        dn.push(DnType::OrganizationName, *o);
    }
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params
}

fn random_serial() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    // Positive, as DER integers for serials must be.
    bytes[0] &= 0x7f;
    bytes
}

fn join_groups() -> Vec<String> {
    vec![
        apimachinery::identity::BOOTSTRAPPERS_GROUP.into(),
        "system:authenticated".into(),
    ]
}

fn random_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Pki {
    /// Loads the CA and tokens from `dir`, creating them on first start, and issues a
    /// serving certificate for `hosts` (DNS names or IP addresses).
    pub fn load_or_create(dir: &Path, hosts: &[String]) -> Result<Pki, PkiError> {
        fs::create_dir_all(dir).map_err(|source| PkiError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let ca_cert_path = dir.join("ca.crt");
        let ca_key_path = dir.join("ca.key");
        let (ca_cert_pem, ca_key) = match (read(&ca_cert_path)?, read(&ca_key_path)?) {
            (Some(cert), Some(key)) => {
                let key = KeyPair::from_pem(&key).map_err(|e| PkiError::Corrupt {
                    path: ca_key_path.clone(),
                    message: e.to_string(),
                })?;
                (cert, key)
            }
            _ => {
                let key = KeyPair::generate()?;
                let cert = ca_params().self_signed(&key)?;
                write_private(&ca_key_path, &key.serialize_pem())?;
                write_private(&ca_cert_path, &cert.pem())?;
                (cert.pem(), key)
            }
        };

        let tokens_path = tokens_path(dir);
        let tokens: BTreeMap<String, TokenUser> = match read_tokens(&tokens_path)? {
            Some(tokens) => tokens,
            None => {
                let mut tokens = BTreeMap::new();
                tokens.insert(
                    random_token(),
                    TokenUser {
                        user: ADMIN_USER.into(),
                        uid: None,
                        groups: vec![ADMIN_GROUP.into(), "system:authenticated".into()],
                    },
                );
                tokens.insert(
                    random_token(),
                    TokenUser {
                        user: NODE_JOIN_USER.into(),
                        uid: None,
                        groups: join_groups(),
                    },
                );
                let text = serde_json::to_string_pretty(&tokens).unwrap_or_default();
                write_private(&tokens_path, &text)?;
                tokens
            }
        };

        // Data dirs from before node identities gave the join token the nodes' group.
        let mut tokens = tokens;
        let mut migrated = false;
        for user in tokens.values_mut() {
            if user.user == NODE_JOIN_USER && user.groups != join_groups() {
                user.groups = join_groups();
                migrated = true;
            }
        }
        if migrated {
            let text = serde_json::to_string_pretty(&tokens).unwrap_or_default();
            write_private(&tokens_path, &text)?;
        }

        let mut pki = Pki {
            dir: dir.to_path_buf(),
            ca_cert_pem,
            server_cert_pem: String::new(),
            server_key_pem: String::new(),
            tokens,
            ca_key,
        };
        pki.issue_serving_certificate(hosts)?;
        Ok(pki)
    }

    /// The CA a server already made in `dir` (its `pki/`), for signing client
    /// certificates beside it (`virtplane user add`); no serving certificate, no tokens.
    pub fn load_ca(dir: &Path) -> Result<Pki, PkiError> {
        let ca_cert_path = dir.join("ca.crt");
        let ca_key_path = dir.join("ca.key");
        let missing = |path: &Path| PkiError::Io {
            path: path.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::NotFound,
                "no cluster CA here: start `virtplane server` with this data dir once first",
            ),
        };
        let ca_cert_pem = read(&ca_cert_path)?.ok_or_else(|| missing(&ca_cert_path))?;
        let key = read(&ca_key_path)?.ok_or_else(|| missing(&ca_key_path))?;
        let ca_key = KeyPair::from_pem(&key).map_err(|e| PkiError::Corrupt {
            path: ca_key_path.clone(),
            message: e.to_string(),
        })?;
        Ok(Pki {
            dir: dir.to_path_buf(),
            ca_cert_pem,
            server_cert_pem: String::new(),
            server_key_pem: String::new(),
            tokens: BTreeMap::new(),
            ca_key,
        })
    }

    /// The CA as a signer. Its parameters are fixed, so rebuilding them from the kept key
    /// yields the same issuer name and key identifier as the stored certificate.
    fn issuer(&self) -> Result<Issuer<'_, &KeyPair>, PkiError> {
        Ok(Issuer::new(ca_params(), &self.ca_key))
    }

    fn issue_serving_certificate(&mut self, hosts: &[String]) -> Result<(), PkiError> {
        let mut params = leaf_params("virtplane-apiserver", &[]);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        names.extend(hosts.iter().cloned());
        names.sort();
        names.dedup();
        for name in names {
            let san = match name.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(name.clone().try_into()?),
            };
            params.subject_alt_names.push(san);
        }
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer()?)?;
        self.server_cert_pem = cert.pem();
        self.server_key_pem = key.serialize_pem();
        Ok(())
    }

    /// A client certificate and key (PEM) for `user` in `groups`, signed by the CA.
    pub fn issue_client_certificate(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<(String, String), PkiError> {
        let mut params = leaf_params(user, groups);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer()?)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// A client certificate for the request (a PEM CSR, whose signature is checked), valid
    /// from now for `lifetime`, with the subject the request asks for: the caller decides
    /// whether that subject may be had.
    pub fn sign_request(
        &self,
        request_pem: &str,
        lifetime: std::time::Duration,
    ) -> Result<String, PkiError> {
        let mut request = rcgen::CertificateSigningRequestParams::from_pem(request_pem)?;
        let now = time::OffsetDateTime::now_utc();
        // A minute's slack for clocks a little behind ours.
        request.params.not_before = now - time::Duration::minutes(1);
        request.params.not_after = now + lifetime;
        request.params.is_ca = IsCa::ExplicitNoCa;
        request.params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        request.params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        request.params.subject_alt_names.clear();
        request.params.serial_number = Some(rcgen::SerialNumber::from_slice(&random_serial()));
        let cert = request.signed_by(&self.issuer()?)?;
        Ok(cert.pem())
    }

    /// TLS credentials for one live migration, in the file names QEMU's `tls-creds-x509`
    /// reads: the CA, a serving certificate for the target's `hosts` (the address the
    /// source dials) and a client certificate for the source, which the target verifies.
    pub fn issue_migration_credentials(
        &self,
        hosts: &[String],
    ) -> Result<Vec<(&'static str, String)>, PkiError> {
        let mut server = leaf_params("virtplane-migration-target", &[]);
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        for name in hosts {
            let san = match name.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(name.clone().try_into()?),
            };
            server.subject_alt_names.push(san);
        }
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &self.issuer()?)?;
        let (client_cert, client_key) =
            self.issue_client_certificate("virtplane-migration-source", &[])?;
        Ok(vec![
            ("dh-params.pem", FFDHE2048.to_string()),
            ("ca-cert.pem", self.ca_cert_pem.clone()),
            ("server-cert.pem", server_cert.pem()),
            ("server-key.pem", server_key.serialize_pem()),
            ("client-cert.pem", client_cert),
            ("client-key.pem", client_key),
        ])
    }

    /// The client certificate and key (PEM) the server presents to node agents: issued on
    /// first start and kept in `apiserver-agent-client.{crt,key}`.
    pub fn agent_client_certificate(&self) -> Result<(String, String), PkiError> {
        let cert_path = self.dir.join("apiserver-agent-client.crt");
        let key_path = self.dir.join("apiserver-agent-client.key");
        if let (Some(cert), Some(key)) = (read(&cert_path)?, read(&key_path)?) {
            return Ok((cert, key));
        }
        let (cert, key) = self.issue_client_certificate(AGENT_CLIENT_USER, &[])?;
        // The key first: a crash in between leaves no certificate, so both are made again.
        write_private(&key_path, &key)?;
        write_private(&cert_path, &cert)?;
        Ok((cert, key))
    }

    /// A 32-byte secret for `purpose`, derived from the CA's private key (HMAC-SHA256 of
    /// the purpose under the key's DER form): every server sharing the PKI derives the
    /// same one, and nobody without the key can.
    pub fn derived_secret(&self, purpose: &str) -> [u8; 32] {
        use hmac::{Hmac, Mac};
        let der = self.ca_key.serialize_der();
        let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&der)
            .expect("HMAC takes keys of any length");
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The bearer token of the first user with this name.
    pub fn token_of(&self, user: &str) -> Option<&str> {
        self.tokens
            .iter()
            .find(|(_, u)| u.user == user)
            .map(|(t, _)| t.as_str())
    }

    /// Writes `admin.kubeconfig` (cluster-admin client certificate) and
    /// `node-join.kubeconfig` (the node-joining token) into `data_dir`, naming
    /// `server_urls`.
    pub fn write_kubeconfigs(
        &self,
        data_dir: &Path,
        server_urls: &[String],
    ) -> Result<(), PkiError> {
        let (cert, key) = self.issue_client_certificate(ADMIN_USER, &[ADMIN_GROUP])?;
        let admin = Credentials::ClientCertificate {
            cert: &cert,
            key: &key,
        };
        write_private(
            &data_dir.join("admin.kubeconfig"),
            &self.kubeconfig(server_urls, ADMIN_USER, admin),
        )?;
        if let Some(token) = self.token_of(NODE_JOIN_USER) {
            let join = Credentials::Token(token);
            write_private(
                &data_dir.join("node-join.kubeconfig"),
                &self.kubeconfig(server_urls, "node-joiner", join),
            )?;
        }
        Ok(())
    }

    /// A kubeconfig trusting our CA, with the given credentials: one cluster and context
    /// per server URL (`virtplane`, `virtplane-2`, ...), the first one current. kubectl
    /// uses the current one (`--context` picks another); node agents use them all and
    /// move to the next when one stops answering.
    pub fn kubeconfig(
        &self,
        server_urls: &[String],
        user: &str,
        credentials: Credentials<'_>,
    ) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        let user_fields = match credentials {
            Credentials::ClientCertificate { cert, key } => {
                format!(
                    "    client-certificate-data: {}\n    client-key-data: {}\n",
                    b64(cert),
                    b64(key)
                )
            }
            Credentials::Token(token) => format!("    token: {token}\n"),
        };
        let ca = b64(&self.ca_cert_pem);
        let names: Vec<String> = (1..=server_urls.len())
            .map(|i| match i {
                1 => "virtplane".to_string(),
                i => format!("virtplane-{i}"),
            })
            .collect();
        let mut text = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
        for (name, url) in names.iter().zip(server_urls) {
            text += &format!(
                "- name: {name}\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\n"
            );
        }
        text += "contexts:\n";
        for name in &names {
            text += &format!(
                "- name: {name}\n  context:\n    cluster: {name}\n    user: {user}\n    namespace: default\n"
            );
        }
        text +=
            &format!("current-context: virtplane\nusers:\n- name: {user}\n  user:\n{user_fields}");
        text
    }
}

/// How a kubeconfig user proves who it is.
pub enum Credentials<'a> {
    ClientCertificate { cert: &'a str, key: &'a str },
    Token(&'a str),
}
