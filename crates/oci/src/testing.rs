//! Loopback registries with authentication, for tests: Debian's `docker-registry`
//! (distribution 2.8) behind htpasswd basic auth, or behind a token service run here (a
//! small JWT issuer: ES256 tokens whose `x5c` header carries a certificate signed by a
//! throwaway CA that the registry's `rootcertbundle` trusts), so that both challenge kinds
//! a real registry sends can be answered on loopback. Also a pusher for test images and
//! indexes.
//!
//! Only for tests (feature `testing`): it panics on what a test cannot go on without.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use ring::rand::SecureRandom;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::credentials::{DOCKER_CONFIG_JSON_KEY, DOCKER_CONFIG_JSON_TYPE};

pub const SERVICE: &str = "virtplane-test-registry";
pub const ISSUER: &str = "virtplane-test-issuer";

/// Where Debian's `docker-registry` is, if installed.
pub fn registry_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("docker-registry"))
        .find(|p| p.is_file())
}

/// Whether a test that cannot run must fail (CI, or `VIRTPLANE_REQUIRE_QEMU=1`) rather
/// than skip.
pub fn required() -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0");
    set("VIRTPLANE_REQUIRE_QEMU") || set("CI")
}

/// `docker-registry`, or `None` after saying loudly why the test is skipped (a panic
/// when it is required).
pub fn registry_or_skip(test: &str) -> Option<PathBuf> {
    match registry_binary() {
        Some(path) => Some(path),
        None => {
            let why = "docker-registry is not installed (Debian package docker-registry; `scripts/install-deps test` installs it)";
            if required() {
                panic!("{test}: {why}, and VIRTPLANE_REQUIRE_QEMU or CI is set");
            }
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
            None
        }
    }
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A JWT signer: a P-256 key and its certificate chain (leaf first).
struct Signer {
    key: EcdsaKeyPair,
    chain: Vec<Vec<u8>>,
}

impl Signer {
    fn sign(&self, claims: &Value) -> String {
        let header = json!({"typ": "JWT", "alg": "ES256",
                            "x5c": self.chain.iter().map(|c| b64(c)).collect::<Vec<_>>()});
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let signature = self
            .key
            .sign(&ring::rand::SystemRandom::new(), input.as_bytes())
            .expect("ES256 signature");
        format!("{input}.{}", b64url(signature.as_ref()))
    }
}

fn ecdsa(key: &KeyPair) -> EcdsaKeyPair {
    EcdsaKeyPair::from_pkcs8(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        &key.serialize_der(),
        &ring::rand::SystemRandom::new(),
    )
    .expect("a P-256 PKCS#8 key")
}

/// A CA (its PEM, for the registry's rootcertbundle) and a signer it vouches for.
fn signer() -> (String, Signer) {
    let alg = &rcgen::PKCS_ECDSA_P256_SHA256;
    let ca_key = KeyPair::generate_for(alg).expect("CA key");
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "virtplane test token CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, &ca_key);
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name
        .push(DnType::CommonName, "virtplane test token signer");
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate_for(alg).expect("signing key");
    let cert = leaf.signed_by(&key, &issuer).expect("signing certificate");
    let signer = Signer {
        key: ecdsa(&key),
        chain: vec![cert.der().to_vec()],
    };
    (ca_cert.pem(), signer)
}

/// A CA's PEM, and a certificate for 127.0.0.1 and localhost it signed (PEM) with its key.
fn serving_certificate() -> (String, String, String) {
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("CA key");
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "virtplane test registry CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, &ca_key);
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .expect("certificate names");
    params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("serving key");
    let cert = params
        .signed_by(&key, &issuer)
        .expect("serving certificate");
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

/// What the token service grants, and what it has seen.
struct Tokens {
    users: BTreeMap<String, String>,
    /// Repository prefixes anyone may pull, anonymously too.
    public: Vec<String>,
    signer: std::sync::Mutex<Signer>,
    /// `expires_in` of the answers.
    lifetime: AtomicU64,
    requests: AtomicUsize,
    /// The `account` and whether basic auth came, per request.
    log: std::sync::Mutex<Vec<(Option<String>, Option<String>)>>,
}

impl Tokens {
    /// A token for `subject` granting `access` (`[{type, name, actions}]`).
    fn mint(&self, subject: &str, access: Value) -> String {
        let t = now();
        let mut jti = [0u8; 12];
        let _ = ring::rand::SystemRandom::new().fill(&mut jti);
        let claims = json!({
            "iss": ISSUER, "sub": subject, "aud": SERVICE,
            // The registry adds a minute of leeway either side; `expires_in` is what
            // clients go by.
            "exp": t + 3600, "nbf": t.saturating_sub(5), "iat": t,
            "jti": b64url(&jti), "access": access,
        });
        self.signer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sign(&claims)
    }

    fn user(&self, authorization: Option<&str>) -> Result<Option<String>, ()> {
        let Some(value) = authorization else {
            return Ok(None);
        };
        let encoded = value.strip_prefix("Basic ").ok_or(())?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| ())?;
        let text = String::from_utf8(decoded).map_err(|_| ())?;
        let (user, password) = text.split_once(':').ok_or(())?;
        match self.users.get(user) {
            Some(p) if p == password => Ok(Some(user.to_string())),
            _ => Err(()),
        }
    }
}

async fn token_endpoint(
    axum::extract::State(tokens): axum::extract::State<Arc<Tokens>>,
    axum::extract::Query(query): axum::extract::Query<BTreeMap<String, String>>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    tokens.requests.fetch_add(1, Ordering::SeqCst);
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok());
    tokens.log.lock().unwrap_or_else(|p| p.into_inner()).push((
        query.get("account").cloned(),
        authorization.map(|a| a.split(' ').next().unwrap_or("").to_string()),
    ));
    let Ok(user) = tokens.user(authorization) else {
        return (
            axum::http::StatusCode::UNAUTHORIZED,
            axum::Json(json!({"details": "incorrect username or password"})),
        )
            .into_response();
    };
    if query.get("service").map(String::as_str) != Some(SERVICE) {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            axum::Json(json!({"details": "unknown service"})),
        )
            .into_response();
    }
    // Grant pull of each scope's repository to users, and of public ones to anyone.
    let mut access = Vec::new();
    for scope in query.get("scope").into_iter().flat_map(|s| s.split(' ')) {
        let parts: Vec<&str> = scope.splitn(3, ':').collect();
        if let ["repository", name, actions] = parts[..] {
            let public = tokens.public.iter().any(|p| name.starts_with(p.as_str()));
            if (user.is_some() || public) && actions.split(',').any(|a| a == "pull") {
                access.push(json!({"type": "repository", "name": name, "actions": ["pull"]}));
            }
        }
    }
    let token = tokens.mint(user.as_deref().unwrap_or(""), json!(access));
    axum::Json(json!({
        "token": token, "access_token": token,
        "expires_in": tokens.lifetime.load(Ordering::SeqCst),
        "issued_at": "2026-01-01T00:00:00Z",
    }))
    .into_response()
}

/// How the registry wants clients to authenticate.
pub enum Auth {
    /// `auth: htpasswd` with these users (bcrypt hashes).
    Basic { users: Vec<(String, String)> },
    /// `auth: token` with our token service: these users may pull anything, anyone may
    /// pull repositories under the `public` prefixes.
    Token {
        users: Vec<(String, String)>,
        public: Vec<String>,
    },
}

/// A `docker-registry` on loopback; killed when dropped.
pub struct AuthRegistry {
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// `http://ADDRESS` or `https://ADDRESS`.
    base: String,
    /// The CA of a TLS registry's certificate.
    pub ca_pem: Option<String>,
    binary: PathBuf,
    child: Child,
    dir: tempfile::TempDir,
    tokens: Option<Arc<Tokens>>,
    token_server: Option<tokio::task::JoinHandle<()>>,
    /// `Authorization` for pushing (an admin's basic auth), for Basic registries.
    push_basic: Option<String>,
    http: reqwest::Client,
}

impl Drop for AuthRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(server) = self.token_server.take() {
            server.abort();
        }
    }
}

/// The one image layer: a tar of `files` (path → bytes).
pub fn layer(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, path.trim_start_matches('/'), *data)
            .expect("tar entry");
    }
    tar.into_inner().expect("tar")
}

fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// What a pushed manifest is, for an index entry.
#[derive(Clone, Debug)]
pub struct Pushed {
    pub digest: String,
    pub size: usize,
    pub media_type: &'static str,
}

/// `docker-registry serve DIR/config.yml`, logging to `DIR/registry.log`.
fn spawn(binary: &Path, dir: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("registry.log"))
        .expect("registry log");
    Command::new(binary)
        .arg("serve")
        .arg(dir.join("config.yml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()))
}

impl AuthRegistry {
    /// Starts `docker-registry` (at `binary`) with `auth`, and the token service if it
    /// needs one, and waits until it answers.
    pub async fn start(binary: &Path, auth: Auth) -> AuthRegistry {
        Self::start_with(binary, auth, false).await
    }

    /// Like `start`, serving HTTPS with a certificate for 127.0.0.1 from a throwaway CA
    /// (`ca_pem`), which nothing trusts unless told to.
    pub async fn start_tls(binary: &Path, auth: Auth) -> AuthRegistry {
        Self::start_with(binary, auth, true).await
    }

    async fn start_with(binary: &Path, auth: Auth, tls: bool) -> AuthRegistry {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("registry dir");
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage).expect("storage dir");
        let mut tokens = None;
        let mut token_server = None;
        let mut push_basic = None;
        let auth_config = match auth {
            Auth::Basic { users } => {
                let mut htpasswd = String::new();
                for (user, password) in &users {
                    let hash = bcrypt::hash(password, 5).expect("bcrypt");
                    htpasswd.push_str(&format!("{user}:{hash}\n"));
                }
                let path = dir.path().join("htpasswd");
                std::fs::write(&path, htpasswd).expect("htpasswd");
                if let Some((user, password)) = users.first() {
                    push_basic = Some(format!(
                        "Basic {}",
                        b64(format!("{user}:{password}").as_bytes())
                    ));
                }
                format!(
                    "  htpasswd:\n    realm: virtplane-test\n    path: {}\n",
                    path.display()
                )
            }
            Auth::Token { users, public } => {
                let (ca_pem, signer) = signer();
                let bundle = dir.path().join("token-ca.pem");
                std::fs::write(&bundle, ca_pem).expect("root cert bundle");
                let state = Arc::new(Tokens {
                    users: users.into_iter().collect(),
                    public,
                    signer: std::sync::Mutex::new(signer),
                    lifetime: AtomicU64::new(300),
                    requests: AtomicUsize::new(0),
                    log: std::sync::Mutex::new(Vec::new()),
                });
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("token service port");
                let realm = format!(
                    "http://{}/token",
                    listener.local_addr().expect("token service address")
                );
                let app = axum::Router::new()
                    .route("/token", axum::routing::get(token_endpoint))
                    .with_state(state.clone());
                token_server = Some(tokio::spawn(async move {
                    let _ = axum::serve(listener, app).await;
                }));
                tokens = Some(state);
                format!(
                    "  token:\n    realm: {realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {}\n",
                    bundle.display()
                )
            }
        };
        let mut http = reqwest::Client::builder();
        let mut tls_config = String::new();
        let mut ca_pem = None;
        if tls {
            let (ca, cert, key) = serving_certificate();
            let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
            std::fs::write(&cert_path, cert).expect("TLS certificate");
            std::fs::write(&key_path, key).expect("TLS key");
            tls_config = format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert_path.display(),
                key_path.display()
            );
            http = http.tls_certs_merge(
                reqwest::Certificate::from_pem_bundle(ca.as_bytes()).expect("CA certificate"),
            );
            ca_pem = Some(ca);
        }
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n{tls_config}auth:\n{auth_config}",
            storage.display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("registry config");
        let child = spawn(binary, dir.path());
        let http = http.build().expect("HTTP client");
        let scheme = if tls { "https" } else { "http" };
        let registry = AuthRegistry {
            base: format!("{scheme}://{address}"),
            ca_pem,
            address,
            binary: binary.to_path_buf(),
            child,
            dir,
            tokens,
            token_server,
            push_basic,
            http,
        };
        registry.wait_ready().await;
        registry
    }

    async fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            let answer = self.http.get(format!("{}/v2/", self.base)).send().await;
            if answer.is_ok_and(|r| r.status() == 401) {
                return;
            }
            if started.elapsed() > Duration::from_secs(20) {
                panic!(
                    "docker-registry did not answer on {}:\n{}",
                    self.address,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The registry's log (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Token requests the token service has answered so far.
    pub fn token_requests(&self) -> usize {
        self.tokens
            .as_ref()
            .map_or(0, |t| t.requests.load(Ordering::SeqCst))
    }

    /// (account, auth scheme) of each token request so far.
    pub fn token_log(&self) -> Vec<(Option<String>, Option<String>)> {
        self.tokens
            .as_ref()
            .map(|t| t.log.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .unwrap_or_default()
    }

    /// The `expires_in` of tokens from now on.
    pub fn set_token_lifetime(&self, seconds: u64) {
        if let Some(t) = &self.tokens {
            t.lifetime.store(seconds, Ordering::SeqCst);
        }
    }

    /// A key rotation: the token service signs with a new key under a new CA, and the
    /// registry restarts trusting only that one, so tokens issued before are refused.
    pub async fn rotate_signing_key(&mut self) {
        let Some(tokens) = &self.tokens else { return };
        let (ca_pem, signer) = signer();
        std::fs::write(self.dir.path().join("token-ca.pem"), ca_pem).expect("root cert bundle");
        *tokens.signer.lock().unwrap_or_else(|p| p.into_inner()) = signer;
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(&self.binary, self.dir.path());
        self.wait_ready().await;
    }

    fn push_authorization(&self, repository: &str) -> Option<String> {
        match &self.tokens {
            Some(tokens) => Some(format!(
                "Bearer {}",
                tokens.mint(
                    "pusher",
                    json!([{"type": "repository", "name": repository, "actions": ["pull", "push"]}]),
                )
            )),
            None => self.push_basic.clone(),
        }
    }

    async fn put_blob(&self, repository: &str, blob: &[u8]) -> String {
        let digest = digest_of(blob);
        let authorization = self.push_authorization(repository).unwrap_or_default();
        let base = self.base.clone();
        let started = self
            .http
            .post(format!("{base}/v2/{repository}/blobs/uploads/"))
            .header("authorization", &authorization)
            .header("content-length", "0")
            .send()
            .await
            .expect("blob upload");
        assert_eq!(
            started.status(),
            202,
            "starting an upload to {repository}: {:?}",
            started.text().await
        );
        let location = started
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .expect("upload location")
            .to_string();
        let mut url = reqwest::Url::parse(&base)
            .and_then(|b| b.join(&location))
            .expect("upload URL");
        url.query_pairs_mut().append_pair("digest", &digest);
        let put = self
            .http
            .put(url)
            .header("authorization", &authorization)
            .header("content-type", "application/octet-stream")
            .body(blob.to_vec())
            .send()
            .await
            .expect("blob put");
        assert_eq!(
            put.status(),
            201,
            "uploading {digest}: {:?}",
            put.text().await
        );
        digest
    }

    async fn put_manifest(
        &self,
        repository: &str,
        reference: &str,
        media_type: &'static str,
        body: &[u8],
    ) -> Pushed {
        let authorization = self.push_authorization(repository).unwrap_or_default();
        let put = self
            .http
            .put(format!(
                "{}/v2/{repository}/manifests/{reference}",
                self.base
            ))
            .header("authorization", &authorization)
            .header("content-type", media_type)
            .body(body.to_vec())
            .send()
            .await
            .expect("manifest put");
        assert_eq!(
            put.status(),
            201,
            "pushing {repository}:{reference}: {:?}",
            put.text().await
        );
        Pushed {
            digest: digest_of(body),
            size: body.len(),
            media_type,
        }
    }

    /// Pushes a one-layer image of `files` for `architecture` as `repository:reference`
    /// (a tag, or its own digest when `reference` is empty).
    pub async fn push_image(
        &self,
        repository: &str,
        reference: &str,
        files: &[(&str, &[u8])],
        architecture: &str,
    ) -> Pushed {
        let layer = layer(files);
        let config = serde_json::to_vec(&json!({
            "architecture": architecture, "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [digest_of(&layer)]}, "config": {}
        }))
        .expect("config JSON");
        let config_digest = self.put_blob(repository, &config).await;
        let layer_digest = self.put_blob(repository, &layer).await;
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest, "size": layer.len()}],
        }))
        .expect("manifest JSON");
        let reference = if reference.is_empty() {
            digest_of(&manifest)
        } else {
            reference.to_string()
        };
        self.put_manifest(
            repository,
            &reference,
            "application/vnd.oci.image.manifest.v1+json",
            &manifest,
        )
        .await
    }

    /// Pushes an OCI index of `entries` (a pushed manifest and its architecture).
    pub async fn push_index(
        &self,
        repository: &str,
        tag: &str,
        entries: &[(&Pushed, &str)],
    ) -> Pushed {
        let manifests: Vec<Value> = entries
            .iter()
            .map(|(m, architecture)| {
                json!({"mediaType": m.media_type, "digest": m.digest, "size": m.size,
                       "platform": {"os": "linux", "architecture": architecture}})
            })
            .collect();
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": manifests,
        }))
        .expect("index JSON");
        self.put_manifest(
            repository,
            tag,
            "application/vnd.oci.image.index.v1+json",
            &index,
        )
        .await
    }

    /// Pushes the first image of an OCI image layout directory (`index.json`, `blobs/`).
    pub async fn push_layout(&self, repository: &str, tag: &str, layout: &Path) -> Pushed {
        let read = |path: PathBuf| {
            std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        let blob = |digest: &str| {
            read(
                layout
                    .join("blobs/sha256")
                    .join(digest.trim_start_matches("sha256:")),
            )
        };
        let index: Value =
            serde_json::from_slice(&read(layout.join("index.json"))).expect("index.json");
        let digest = index["manifests"][0]["digest"]
            .as_str()
            .expect("a manifest in index.json");
        let manifest_bytes = blob(digest);
        let manifest: Value = serde_json::from_slice(&manifest_bytes).expect("manifest JSON");
        let mut blobs = vec![manifest["config"].clone()];
        blobs.extend(manifest["layers"].as_array().cloned().unwrap_or_default());
        for b in blobs {
            let d = b["digest"].as_str().expect("blob digest");
            self.put_blob(repository, &blob(d)).await;
        }
        let media = match manifest["mediaType"].as_str() {
            Some("application/vnd.docker.distribution.manifest.v2+json") => {
                "application/vnd.docker.distribution.manifest.v2+json"
            }
            _ => "application/vnd.oci.image.manifest.v1+json",
        };
        self.put_manifest(repository, tag, media, &manifest_bytes)
            .await
    }
}

/// The data of a `kubernetes.io/dockerconfigjson` Secret for `registry` (as
/// `kubectl create secret docker-registry` writes it), and its type.
pub fn docker_config_secret(
    registry: &str,
    user: &str,
    password: &str,
) -> (&'static str, BTreeMap<String, Vec<u8>>) {
    let config = json!({"auths": {registry: {
        "username": user, "password": password,
        "auth": b64(format!("{user}:{password}").as_bytes()),
    }}});
    (
        DOCKER_CONFIG_JSON_TYPE,
        BTreeMap::from([(
            DOCKER_CONFIG_JSON_KEY.to_string(),
            config.to_string().into_bytes(),
        )]),
    )
}
