//! The puller: resolves a reference to an image manifest (through an index, for this
//! host's platform), authenticates as the registry asks, streams and verifies each
//! layer, and unpacks it into the cache.
//!
//! Over 800 lines on purpose: one pull from reference to unpacked files (manifest, index,
//! auth retries, layer streaming, unpacking, the cache index), each step calling the next;
//! auth, transport, names and credentials are their own modules.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use reqwest::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::auth::{parse_challenges, AuthCache, AuthKey, Challenge, TokenResponse};
use crate::credentials::Credentials;
use crate::error::PullError;
use crate::manifest::{self, Descriptor, Manifest, Platform};
use crate::reference::Reference;
use crate::transport::{Failure, Http, Retry};

/// The most a manifest or a token answer may weigh.
const SMALL_BODY: usize = 4 << 20;

pub struct Config {
    /// Where unpacked images live (shared by the nodes of one host).
    pub cache: PathBuf,
    /// `host[:port]` of registries spoken to over HTTPS with any certificate, or over
    /// plain HTTP (Docker's `--insecure-registry`).
    pub insecure_registries: Vec<String>,
    pub retry: Retry,
    /// What to pick from a multi-arch index: this host's, unless a test says otherwise.
    pub platform: Platform,
}

impl Config {
    pub fn new(cache: PathBuf, insecure_registries: Vec<String>) -> Config {
        Config {
            cache,
            insecure_registries,
            retry: Retry::default(),
            platform: Platform::host(),
        }
    }
}

/// When the registry is asked (the kubelet's `imagePullPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PullPolicy {
    /// Every pull resolves the reference at the registry (layers already here are not
    /// fetched again).
    Always,
    /// The digest a tag was last pulled as on this node, if that image is here.
    #[default]
    IfNotPresent,
    /// Only what is here.
    Never,
}

impl PullPolicy {
    pub fn parse(text: &str) -> Option<PullPolicy> {
        match text {
            "Always" => Some(PullPolicy::Always),
            "IfNotPresent" => Some(PullPolicy::IfNotPresent),
            "Never" => Some(PullPolicy::Never),
            _ => None,
        }
    }

    /// The kubelet's default: `Always` for `:latest` and untagged images, else
    /// `IfNotPresent`.
    pub fn default_for(image: &Reference) -> PullPolicy {
        match (image.tag(), image.digest()) {
            (_, Some(_)) => PullPolicy::IfNotPresent,
            (None | Some("latest"), None) => PullPolicy::Always,
            _ => PullPolicy::IfNotPresent,
        }
    }
}

/// Told, as layers arrive, the bytes so far and the bytes of all the image's layers (a
/// layer fetched again after a cut starts over). Not called for an image already here.
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(u64, u64) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

/// How one pull goes.
#[derive(Clone, Debug, Default)]
pub struct PullOptions {
    /// Tried in order (the first that works wins); none means anonymous.
    pub credentials: Vec<Credentials>,
    pub policy: PullPolicy,
    /// PEM certificates trusted for this pull besides the node's trust store.
    pub ca_bundle: Option<Vec<u8>>,
    pub progress: Option<Progress>,
}

/// Files taken out of an image.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The platform image manifest's digest.
    pub digest: String,
    /// `registry/repository@digest`: the image exactly, for pulling it again.
    pub image_id: String,
    /// (path inside the image, path here), sorted.
    pub files: Vec<(String, PathBuf)>,
}

#[derive(Clone, Debug)]
pub struct PulledDisk {
    pub path: PathBuf,
    pub digest: String,
    pub image_id: String,
}

/// One attempt at one image, with one set of credentials.
struct Session<'a> {
    /// The reference as shown in messages.
    image: String,
    reference: &'a Reference,
    credentials: Option<&'a Credentials>,
    ca: Option<&'a [u8]>,
    progress: Option<&'a Progress>,
}

impl Session<'_> {
    fn key(&self) -> AuthKey {
        AuthKey {
            host: self.reference.host().to_string(),
            repository: self.reference.repository().to_string(),
            identity: self
                .credentials
                .map(Credentials::fingerprint)
                .unwrap_or_default(),
        }
    }

    fn user(&self) -> Option<String> {
        self.credentials.map(|c| c.username.clone())
    }
}

/// A registry's own words from an error body: the distribution `errors` list
/// (`MANIFEST_UNKNOWN: manifest unknown`), else the start of the text.
async fn error_detail(response: reqwest::Response) -> Option<String> {
    let bytes = response.bytes().await.ok()?;
    let bytes = &bytes[..bytes.len().min(8192)];
    if let Ok(body) = serde_json::from_slice::<Value>(bytes) {
        let words: Vec<String> = body["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let code = e["code"].as_str().unwrap_or("");
                let message = e["message"].as_str().unwrap_or("");
                match (code.is_empty(), message.is_empty()) {
                    (false, false) => format!("{code}: {message}"),
                    (false, true) => code.to_string(),
                    _ => message.to_string(),
                }
            })
            .filter(|w| !w.is_empty())
            .collect();
        if !words.is_empty() {
            return Some(words.join("; "));
        }
        for field in ["details", "detail", "message", "error"] {
            if let Some(text) = body[field].as_str().filter(|t| !t.is_empty()) {
                return Some(text.to_string());
            }
        }
    }
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(200).collect())
}

/// `Retry-After` in seconds, if the registry sent one.
fn retry_after(response: &reqwest::Response) -> Option<std::time::Duration> {
    let seconds = response.headers().get(RETRY_AFTER)?.to_str().ok()?;
    seconds
        .trim()
        .parse::<u64>()
        .ok()
        .map(std::time::Duration::from_secs)
}

fn sha256_hex(text: &str) -> String {
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

pub struct Puller {
    http: Http,
    auth: AuthCache,
    cache: PathBuf,
    retry: Retry,
    platform: Platform,
}

impl Puller {
    pub fn new(config: Config) -> Puller {
        Puller {
            http: Http::new(config.insecure_registries),
            auth: AuthCache::default(),
            cache: config.cache,
            retry: Retry {
                attempts: config.retry.attempts.max(1),
                ..config.retry
            },
            platform: config.platform,
        }
    }

    async fn wait(
        &self,
        s: &Session<'_>,
        attempt: u32,
        after: Option<std::time::Duration>,
        why: &str,
    ) {
        let delay = after
            .map(|a| a.min(self.retry.max_delay))
            .unwrap_or_else(|| self.retry.delay(attempt));
        tracing::info!(
            "pulling {}: {why}; trying again in {delay:?} ({} of {})",
            s.image,
            attempt + 2,
            self.retry.attempts
        );
        tokio::time::sleep(delay).await;
    }

    fn tries(&self, attempt: u32) -> String {
        if attempt == 0 {
            String::new()
        } else {
            format!(" (after {} tries)", attempt + 1)
        }
    }

    /// GETs `/v2/<repository>/<tail>`, authenticating when the registry asks (again with
    /// a new token when it refuses a cached one) and retrying what may pass.
    async fn request(
        &self,
        s: &Session<'_>,
        tail: &str,
        accept: &str,
    ) -> Result<reqwest::Response, PullError> {
        let path = format!("/v2/{}/{tail}", s.reference.repository());
        let key = s.key();
        let mut attempt = 0u32;
        let mut authorized = false;
        let mut token_flow = false;
        loop {
            let authorization = self.auth.get(&key);
            let sent = self
                .http
                .get(
                    s.reference.host(),
                    &path,
                    accept,
                    authorization.as_deref(),
                    s.ca,
                )
                .await;
            let response = match sent {
                Ok(response) => response,
                Err(Failure::Transient(why)) if attempt + 1 < self.retry.attempts => {
                    self.wait(s, attempt, None, &why).await;
                    attempt += 1;
                    continue;
                }
                Err(failure) => {
                    return Err(PullError::Transport {
                        image: s.image.clone(),
                        message: format!("{}{}", failure.message(), self.tries(attempt)),
                    })
                }
            };
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            match status.as_u16() {
                401 if !authorized => {
                    if authorization.is_some() {
                        // A token the registry no longer takes: get a new one.
                        self.auth.forget(&key);
                    }
                    let challenges: Vec<Challenge> = response
                        .headers()
                        .get_all(WWW_AUTHENTICATE)
                        .iter()
                        .filter_map(|v| v.to_str().ok())
                        .flat_map(parse_challenges)
                        .collect();
                    token_flow = challenges
                        .iter()
                        .any(|c| matches!(c, Challenge::Bearer { .. }));
                    let detail = if challenges.is_empty() {
                        error_detail(response).await
                    } else {
                        None
                    };
                    self.authorize(s, &challenges, detail).await?;
                    authorized = true;
                }
                401 => {
                    self.auth.forget(&key);
                    let bearer = response
                        .headers()
                        .get_all(WWW_AUTHENTICATE)
                        .iter()
                        .filter_map(|v| v.to_str().ok())
                        .flat_map(parse_challenges)
                        .any(|c| matches!(c, Challenge::Bearer { .. }));
                    return Err(PullError::Unauthorized {
                        image: s.image.clone(),
                        registry: s.reference.registry().to_string(),
                        user: s.user(),
                        token_flow: token_flow || bearer,
                        detail: error_detail(response).await,
                    });
                }
                403 => {
                    return Err(PullError::Denied {
                        image: s.image.clone(),
                        registry: s.reference.registry().to_string(),
                        user: s.user(),
                        detail: error_detail(response).await,
                    })
                }
                404 => {
                    let detail = error_detail(response).await;
                    return Err(match tail.strip_prefix("manifests/") {
                        Some(reference) => PullError::ManifestUnknown {
                            image: s.image.clone(),
                            registry: s.reference.registry().to_string(),
                            repository: s.reference.repository().to_string(),
                            what: if reference.starts_with("sha256:") {
                                format!("manifest {reference}")
                            } else {
                                format!("tag {reference:?}")
                            },
                            detail,
                        },
                        None => PullError::Invalid {
                            image: s.image.clone(),
                            message: format!(
                                "the registry has no {tail} that the manifest lists{}",
                                detail.map(|d| format!(" ({d})")).unwrap_or_default()
                            ),
                        },
                    });
                }
                429 | 500..=599 if attempt + 1 < self.retry.attempts => {
                    let after = retry_after(&response);
                    let why = format!("{} answered {status}", response.url());
                    self.wait(s, attempt, after, &why).await;
                    attempt += 1;
                }
                _ => {
                    let url = response.url().to_string();
                    let detail = error_detail(response).await;
                    return Err(PullError::Registry {
                        image: s.image.clone(),
                        message: format!(
                            "{url}: the registry answered {status}{}{}",
                            detail.map(|d| format!(": {d}")).unwrap_or_default(),
                            self.tries(attempt)
                        ),
                    });
                }
            }
        }
    }

    /// Answers a 401's challenges: a token from the Bearer realm (with basic auth when
    /// there are credentials), or basic auth for the registry itself.
    async fn authorize(
        &self,
        s: &Session<'_>,
        challenges: &[Challenge],
        detail: Option<String>,
    ) -> Result<(), PullError> {
        let unauthorized = |token_flow: bool, detail: Option<String>| PullError::Unauthorized {
            image: s.image.clone(),
            registry: s.reference.registry().to_string(),
            user: s.user(),
            token_flow,
            detail,
        };
        let bearer = challenges.iter().find_map(|c| match c {
            Challenge::Bearer {
                realm,
                service,
                scope,
            } => Some((realm, service, scope)),
            _ => None,
        });
        if let Some((realm, service, scope)) = bearer {
            let token = self
                .token(s, realm, service.as_deref(), scope.as_deref())
                .await?;
            self.auth
                .put(s.key(), format!("Bearer {}", token.0), Some(token.1));
            return Ok(());
        }
        if challenges.contains(&Challenge::Basic) {
            return match s.credentials {
                Some(credentials) => {
                    self.auth.put(s.key(), credentials.basic_header(), None);
                    Ok(())
                }
                None => Err(unauthorized(
                    false,
                    Some("the registry asks for a user name and password (basic auth)".into()),
                )),
            };
        }
        let why = match challenges.first() {
            Some(Challenge::Other(scheme)) => {
                format!("it asks for {scheme} authentication, which is not supported")
            }
            _ => format!(
                "the registry sent no WWW-Authenticate challenge{}",
                detail.map(|d| format!(" ({d})")).unwrap_or_default()
            ),
        };
        Err(unauthorized(false, Some(why)))
    }

    /// A pull token from `realm` and how long to use it.
    async fn token(
        &self,
        s: &Session<'_>,
        realm: &str,
        service: Option<&str>,
        scope: Option<&str>,
    ) -> Result<(String, std::time::Duration), PullError> {
        let registry_error = |message: String| PullError::Registry {
            image: s.image.clone(),
            message,
        };
        let mut url = reqwest::Url::parse(realm).map_err(|e| {
            registry_error(format!(
                "the registry's token realm {realm:?} is not a URL: {e}"
            ))
        })?;
        let own_scope = format!("repository:{}:pull", s.reference.repository());
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope.unwrap_or(&own_scope));
            if let Some(credentials) = s.credentials {
                query.append_pair("account", &credentials.username);
            }
        }
        let authorization = s.credentials.map(Credentials::basic_header);
        let mut attempt = 0u32;
        loop {
            let response = match self
                .http
                .get_url(&url, authorization.as_deref(), s.ca)
                .await
            {
                Ok(response) => response,
                Err(Failure::Transient(why)) if attempt + 1 < self.retry.attempts => {
                    self.wait(s, attempt, None, &format!("token service: {why}"))
                        .await;
                    attempt += 1;
                    continue;
                }
                Err(failure) => {
                    return Err(PullError::Transport {
                        image: s.image.clone(),
                        message: format!(
                            "the registry's token service: {}{}",
                            failure.message(),
                            self.tries(attempt)
                        ),
                    })
                }
            };
            let status = response.status();
            match status.as_u16() {
                200..=299 => {
                    let bytes = response.bytes().await.map_err(|e| PullError::Transport {
                        image: s.image.clone(),
                        message: format!("reading a token from {realm}: {e}"),
                    })?;
                    let answer: TokenResponse = serde_json::from_slice(
                        &bytes[..bytes.len().min(SMALL_BODY)],
                    )
                    .map_err(|e| {
                        registry_error(format!(
                            "the token service {realm} answered with no token: {e}"
                        ))
                    })?;
                    let token = answer.token().ok_or_else(|| {
                        registry_error(format!(
                            "the token service {realm} answered with an empty token"
                        ))
                    })?;
                    return Ok((token.to_string(), answer.usable_for()));
                }
                401 | 403 => {
                    let detail = error_detail(response).await;
                    return Err(PullError::Unauthorized {
                        image: s.image.clone(),
                        registry: s.reference.registry().to_string(),
                        user: s.user(),
                        token_flow: true,
                        detail: Some(format!(
                            "its token service {realm} answered {status}{}",
                            detail.map(|d| format!(": {d}")).unwrap_or_default()
                        )),
                    });
                }
                429 | 500..=599 if attempt + 1 < self.retry.attempts => {
                    let after = retry_after(&response);
                    self.wait(
                        s,
                        attempt,
                        after,
                        &format!("token service {realm} answered {status}"),
                    )
                    .await;
                    attempt += 1;
                }
                _ => {
                    let detail = error_detail(response).await;
                    return Err(registry_error(format!(
                        "the token service {realm} answered {status}{}",
                        detail.map(|d| format!(": {d}")).unwrap_or_default()
                    )));
                }
            }
        }
    }

    /// A small body (a manifest), read in full; a body cut short is fetched again.
    async fn fetch_small(
        &self,
        s: &Session<'_>,
        tail: &str,
        accept: &str,
    ) -> Result<(Vec<u8>, Option<String>), PullError> {
        let mut attempt = 0u32;
        loop {
            let mut response = self.request(s, tail, accept).await?;
            let content_type = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let mut body = Vec::new();
            let read: Result<(), String> = async {
                while let Some(chunk) = response
                    .chunk()
                    .await
                    .map_err(|e| crate::transport::error_chain(&e))?
                {
                    body.extend_from_slice(&chunk);
                    if body.len() > SMALL_BODY {
                        return Err(format!("{tail} is larger than {SMALL_BODY} bytes"));
                    }
                }
                Ok(())
            }
            .await;
            match read {
                Ok(()) => return Ok((body, content_type)),
                Err(why) if body.len() <= SMALL_BODY && attempt + 1 < self.retry.attempts => {
                    self.wait(s, attempt, None, &why).await;
                    attempt += 1;
                }
                Err(why) => {
                    return Err(PullError::Transport {
                        image: s.image.clone(),
                        message: format!("reading {tail}: {why}"),
                    })
                }
            }
        }
    }

    /// The image manifest's digest and layers, through an index if there is one.
    async fn resolve(&self, s: &Session<'_>) -> Result<(String, Vec<Descriptor>), PullError> {
        let invalid = |message: String| PullError::Invalid {
            image: s.image.clone(),
            message,
        };
        let mut reference = s.reference.manifest_reference().to_string();
        for _ in 0..2 {
            let (bytes, content_type) = self
                .fetch_small(s, &format!("manifests/{reference}"), manifest::ACCEPT)
                .await?;
            let digest = format!("sha256:{:x}", Sha256::digest(&bytes));
            if reference.starts_with("sha256:") && digest != reference {
                return Err(invalid(format!(
                    "the registry served manifest {reference} with the digest {digest}"
                )));
            }
            match Manifest::parse(&bytes, content_type.as_deref()).map_err(&invalid)? {
                Manifest::Index(entries) => {
                    let chosen =
                        manifest::choose(&entries, &self.platform).map_err(|available| {
                            PullError::Platform {
                                image: s.image.clone(),
                                wanted: self.platform.to_string(),
                                available,
                            }
                        })?;
                    reference = chosen.digest.clone();
                }
                Manifest::Image { layers } => return Ok((digest, layers)),
            }
        }
        Err(invalid("an image index lists another image index".into()))
    }

    /// Streams one layer into `file`, checking its size and digest.
    async fn download(
        &self,
        s: &Session<'_>,
        layer: &Descriptor,
        file: &Path,
        report: &(dyn Fn(u64) + Sync),
    ) -> Result<(), PullError> {
        let invalid = |message: String| PullError::Invalid {
            image: s.image.clone(),
            message,
        };
        let io = |source| PullError::Io {
            path: file.to_path_buf(),
            source,
        };
        let Some(expected) = layer.digest.strip_prefix("sha256:") else {
            return Err(invalid(format!(
                "layer {} has a digest that is not sha256",
                layer.digest
            )));
        };
        let mut attempt = 0u32;
        loop {
            let mut response = self
                .request(s, &format!("blobs/{}", layer.digest), "*/*")
                .await?;
            let mut out = tokio::fs::File::create(file).await.map_err(io)?;
            let mut hash = Sha256::new();
            let mut size = 0u64;
            let streamed: Result<(), String> = loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => {
                        size += chunk.len() as u64;
                        if layer.size.is_some_and(|limit| size > limit) {
                            return Err(invalid(format!(
                                "layer {} is larger than the {} bytes its manifest says",
                                layer.digest,
                                layer.size.unwrap_or_default()
                            )));
                        }
                        hash.update(&chunk);
                        out.write_all(&chunk).await.map_err(io)?;
                        report(size);
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(crate::transport::error_chain(&e)),
                }
            };
            match streamed {
                Ok(()) => {
                    out.flush().await.map_err(io)?;
                    let actual = format!("{:x}", hash.finalize());
                    if actual != expected {
                        return Err(invalid(format!(
                            "layer {} arrived as sha256:{actual}",
                            layer.digest
                        )));
                    }
                    return Ok(());
                }
                Err(why) if attempt + 1 < self.retry.attempts => {
                    self.wait(s, attempt, None, &format!("layer {}: {why}", layer.digest))
                        .await;
                    attempt += 1;
                }
                Err(why) => {
                    return Err(PullError::Transport {
                        image: s.image.clone(),
                        message: format!("layer {}: {why}{}", layer.digest, self.tries(attempt)),
                    })
                }
            }
        }
    }

    fn image_dir(&self, digest: &str) -> PathBuf {
        self.cache.join(digest.replace(':', "-"))
    }

    fn ref_file(&self, reference: &Reference) -> PathBuf {
        self.cache
            .join("refs")
            .join(sha256_hex(&reference.to_string()))
    }

    /// The digest `reference` was last pulled as here.
    fn remembered(&self, reference: &Reference) -> Option<String> {
        let text = std::fs::read_to_string(self.ref_file(reference)).ok()?;
        let digest = text.lines().next()?.trim();
        digest.starts_with("sha256:").then(|| digest.to_string())
    }

    fn remember(&self, reference: &Reference, digest: &str) {
        let file = self.ref_file(reference);
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let temp = file.with_extension(format!(
            "{}-{}",
            std::process::id(),
            WRITES.fetch_add(1, Ordering::Relaxed)
        ));
        let written = file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&temp, format!("{digest}\n{reference}\n")))
            .and_then(|()| std::fs::rename(&temp, &file));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            tracing::warn!(
                "recording the digest of {reference} in {}: {e}",
                file.display()
            );
        }
    }

    fn files(
        &self,
        digest: &str,
        reference: &Reference,
        wanted: &[&str],
    ) -> Result<Pulled, PullError> {
        let dir = self.image_dir(digest);
        let mut files = Vec::new();
        collect(&dir, &dir, wanted, &mut files).map_err(|source| PullError::Io {
            path: dir.clone(),
            source,
        })?;
        files.sort();
        Ok(Pulled {
            digest: digest.to_string(),
            image_id: format!("{}@{digest}", reference.name()),
            files,
        })
    }

    /// Pulls `image` (unless the policy lets the cache answer) and returns its files
    /// under the `wanted` path prefixes.
    pub async fn pull(
        &self,
        image: &str,
        options: &PullOptions,
        wanted: &[&str],
    ) -> Result<Pulled, PullError> {
        let reference = Reference::parse(image)?;
        if options.policy != PullPolicy::Always {
            let here = self
                .remembered(&reference)
                .or_else(|| reference.digest().map(str::to_string))
                .filter(|d| self.image_dir(d).join(".complete").exists());
            if let Some(digest) = here {
                return self.files(&digest, &reference, wanted);
            }
            if options.policy == PullPolicy::Never {
                return Err(PullError::NeverPull {
                    image: reference.to_string(),
                });
            }
        }
        let mut candidates: Vec<Option<&Credentials>> =
            options.credentials.iter().map(Some).collect();
        if candidates.is_empty() {
            candidates.push(None);
        }
        let mut refused = None;
        for credentials in candidates {
            let session = Session {
                image: reference.to_string(),
                reference: &reference,
                credentials,
                ca: options.ca_bundle.as_deref(),
                progress: options.progress.as_ref(),
            };
            match self.pull_as(&session, wanted).await {
                Ok(pulled) => return Ok(pulled),
                Err(e) if e.is_auth() => refused = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(refused.unwrap_or_else(|| PullError::Registry {
            image: reference.to_string(),
            message: "no credentials to try".into(),
        }))
    }

    async fn pull_as(&self, s: &Session<'_>, wanted: &[&str]) -> Result<Pulled, PullError> {
        let (digest, layers) = self.resolve(s).await?;
        let dir = self.image_dir(&digest);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| PullError::Io { path, source }
        };
        if !dir.join(".complete").exists() {
            std::fs::create_dir_all(&self.cache).map_err(io(&self.cache))?;
            // One staging dir per pull: two VMIs of one image may pull it at once.
            static PULLS: AtomicU64 = AtomicU64::new(0);
            let unique = format!(
                "{}-{}-{}",
                digest.replace(':', "-"),
                std::process::id(),
                PULLS.fetch_add(1, Ordering::Relaxed)
            );
            // Removed when the last user lets go: on failure, on cancellation (the
            // future dropped, a layer still unpacking), or after a lost race.
            let staging = Arc::new(Staging {
                dir: self.cache.join(format!(".{unique}")),
                layer: self.cache.join(format!(".{unique}.layer")),
            });
            std::fs::create_dir_all(&staging.dir).map_err(io(&staging.dir))?;
            self.unpack_layers(s, &layers, &staging).await?;
            std::fs::write(staging.dir.join(".complete"), &digest).map_err(io(&staging.dir))?;
            match std::fs::rename(&staging.dir, &dir) {
                Ok(()) => {}
                // Another pull of the same image finished first; use that one.
                Err(_) if dir.join(".complete").exists() => {}
                Err(e) => return Err(io(&dir)(e)),
            }
        }
        self.remember(s.reference, &digest);
        self.files(&digest, s.reference, wanted)
    }

    async fn unpack_layers(
        &self,
        s: &Session<'_>,
        layers: &[Descriptor],
        staging: &Arc<Staging>,
    ) -> Result<(), PullError> {
        let total: u64 = layers.iter().filter_map(|l| l.size).sum();
        let mut before = 0u64;
        for layer in layers {
            if layer.media_type.contains("zstd") {
                return Err(PullError::Invalid {
                    image: s.image.clone(),
                    message: format!(
                        "layer {} is zstd-compressed ({}), which is not supported: push it with gzip or no compression",
                        layer.digest, layer.media_type
                    ),
                });
            }
            let report = |done: u64| {
                if let Some(progress) = s.progress {
                    (progress.0)(before + done, total.max(before + done));
                }
            };
            self.download(s, layer, &staging.layer, &report).await?;
            before += layer.size.unwrap_or_default();
            let held = staging.clone();
            let unpacked = tokio::task::spawn_blocking(move || unpack(&held.layer, &held.dir))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
            unpacked.map_err(|e| PullError::Invalid {
                image: s.image.clone(),
                message: format!("unpacking layer {}: {e}", layer.digest),
            })?;
        }
        Ok(())
    }

    /// Pulls a disk image: the file at `path` inside it, or else the one file under
    /// `/disk/` (KubeVirt's containerDisk layout).
    pub async fn pull_disk(
        &self,
        image: &str,
        options: &PullOptions,
        path: Option<&str>,
    ) -> Result<PulledDisk, PullError> {
        let wanted = path.unwrap_or("/disk/");
        let pulled = self.pull(image, options, &[wanted]).await?;
        let invalid = |message: String| PullError::Invalid {
            image: image.to_string(),
            message,
        };
        let disk = match path {
            Some(path) => pulled
                .files
                .iter()
                .find(|(p, _)| p == path)
                .ok_or_else(|| invalid(format!("the image has no file {path}")))?,
            None => match pulled.files.as_slice() {
                [one] => one,
                [] => return Err(invalid("the image has no disk under /disk/".into())),
                several => {
                    let names: Vec<&str> = several.iter().map(|(p, _)| p.as_str()).collect();
                    return Err(invalid(format!(
                        "the image has more than one file under /disk/ ({}): name one with path",
                        names.join(", ")
                    )));
                }
            },
        };
        Ok(PulledDisk {
            path: disk.1.clone(),
            digest: pulled.digest,
            image_id: pulled.image_id,
        })
    }
}

/// A pull's staging dir and layer file, removed when dropped (a finished pull has renamed
/// the dir into place already).
struct Staging {
    dir: PathBuf,
    layer: PathBuf,
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.layer);
        if self.dir.exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The path of a layer entry inside `into`, refusing any that would leave it.
fn inside(into: &Path, entry: &Path) -> Option<PathBuf> {
    let mut out = into.to_path_buf();
    for part in entry.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (out != into).then_some(out)
}

/// Unpacks a layer (a tar, gzip-compressed or not) into `into`, applying OCI whiteouts
/// (`.wh.NAME` deletes NAME, `.wh..wh..opq` empties its directory). Only files and
/// directories are taken: a disk image needs no links or devices.
fn unpack(layer: &Path, into: &Path) -> std::io::Result<()> {
    let mut file = std::fs::File::open(layer)?;
    let mut magic = [0u8; 2];
    let gzip = file.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
    let file = std::fs::File::open(layer)?;
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)))
    } else {
        Box::new(std::io::BufReader::new(file))
    };
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(false);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(deleted) = name.strip_prefix(".wh.") {
            let Some(parent) = path.parent().and_then(|p| {
                if p.as_os_str().is_empty() {
                    Some(into.to_path_buf())
                } else {
                    inside(into, p)
                }
            }) else {
                continue;
            };
            if deleted == ".wh..opq" {
                for child in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
                    let _ = remove(&child.path());
                }
            } else if !deleted.is_empty() && !deleted.contains('/') {
                let _ = remove(&parent.join(deleted));
            }
            continue;
        }
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            continue;
        }
        // `unpack_in` rejects absolute paths and `..` components.
        entry.unpack_in(into)?;
    }
    Ok(())
}

fn remove(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

fn collect(
    root: &Path,
    dir: &Path,
    wanted: &[&str],
    out: &mut Vec<(String, PathBuf)>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect(root, &path, wanted, out)?;
            continue;
        }
        let relative = format!("/{}", path.strip_prefix(root).unwrap_or(&path).display());
        if relative == "/.complete" {
            continue;
        }
        if wanted.iter().any(|w| relative.starts_with(w)) {
            out.push((relative, path));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            // `set_path` refuses `..`; write the name field as a hostile layer would.
            header.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
            header.set_cksum();
            tar.append(&header, *data).unwrap();
        }
        tar.into_inner().unwrap()
    }

    #[test]
    fn layers_apply_whiteouts_and_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let into = dir.path().join("image");
        std::fs::create_dir_all(&into).unwrap();
        let layer = dir.path().join("layer");
        std::fs::write(
            &layer,
            tar_of(&[
                ("disk/a.img", b"a"),
                ("disk/b.img", b"b"),
                ("etc/x", b"x"),
                ("etc/y", b"y"),
            ]),
        )
        .unwrap();
        unpack(&layer, &into).unwrap();
        // A second layer deletes one disk, empties etc/, and tries to escape.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(
            &mut gz,
            &tar_of(&[
                ("disk/.wh.b.img", b""),
                ("etc/.wh..wh..opq", b""),
                ("etc/z", b"z"),
                ("../escaped", b"!"),
                ("disk/../../.wh.layer", b""),
            ]),
        )
        .unwrap();
        std::fs::write(&layer, gz.finish().unwrap()).unwrap();
        // Entries that would leave the image are skipped (tar's `unpack_in`).
        unpack(&layer, &into).unwrap();
        assert!(!dir.path().join("escaped").exists());
        assert!(layer.exists(), "a whiteout reached outside the image");
        let mut files = Vec::new();
        collect(&into, &into, &["/"], &mut files).unwrap();
        let mut names: Vec<String> = files.into_iter().map(|(p, _)| p).collect();
        names.sort();
        assert_eq!(names, ["/disk/a.img", "/etc/z"]);
    }

    #[test]
    fn default_pull_policies() {
        let policy = |image: &str| PullPolicy::default_for(&Reference::parse(image).unwrap());
        assert_eq!(policy("fedora"), PullPolicy::Always);
        assert_eq!(policy("quay.io/a/b:latest"), PullPolicy::Always);
        assert_eq!(policy("quay.io/a/b:40"), PullPolicy::IfNotPresent);
        assert_eq!(
            policy("quay.io/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
            PullPolicy::IfNotPresent
        );
    }
}
