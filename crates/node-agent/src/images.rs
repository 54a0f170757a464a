//! containerDisk images: pulled from an OCI registry (the Distribution API), unpacked
//! into a cache keyed by manifest digest, so every VMI of one image shares one read-only
//! copy and writes to its own overlay.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde_json::Value;
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("invalid image reference {0:?}")]
    Reference(String),
    #[error("pulling {image}: {message}")]
    Pull { image: String, message: String },
    #[error("image cache {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `host[:port]/repository[:tag|@digest]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub registry: String,
    pub repository: String,
    /// A tag or a `sha256:` digest.
    pub reference: String,
}

impl Reference {
    pub fn parse(image: &str) -> Result<Reference, ImageError> {
        let bad = || ImageError::Reference(image.to_string());
        let (name, reference) = match image.split_once('@') {
            Some((name, digest)) => (name, digest.to_string()),
            None => match image.rsplit_once(':') {
                Some((name, tag)) if !tag.contains('/') => (name, tag.to_string()),
                _ => (image, "latest".to_string()),
            },
        };
        let (registry, repository) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => (
                "docker.io".to_string(),
                if name.contains('/') {
                    name.to_string()
                } else {
                    format!("library/{name}")
                },
            ),
        };
        if repository.is_empty() || reference.is_empty() {
            return Err(bad());
        }
        Ok(Reference {
            registry,
            repository,
            reference,
        })
    }
}

const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json";

pub struct Puller {
    /// Verifies registry certificates against this host's trust store (the system CA
    /// bundle, or `SSL_CERT_FILE`/`SSL_CERT_DIR`); an error when there is none.
    verified: Result<reqwest::Client, String>,
    /// For `--insecure-registry` registries: accepts any certificate (Docker's semantics).
    unverified: Result<reqwest::Client, String>,
    cache: PathBuf,
    insecure: Vec<String>,
    /// Insecure registries that turned out to speak plain HTTP.
    plain_http: Mutex<HashSet<String>>,
}

/// Files taken out of an image, by their path inside it.
pub struct Extracted {
    pub files: Vec<(String, PathBuf)>,
}

/// The text of an error with all its causes: reqwest's own ("error sending request")
/// hides them.
fn error_chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// The rustls error inside `error`, however deep: it travels inside (nested)
/// `io::Error`s, whose `source()` skips the wrapped error itself.
fn find_tls_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
    depth: usize,
) -> Option<&'a rustls::Error> {
    if depth == 0 {
        return None;
    }
    if let Some(tls) = error.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let unwrapped = error
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
        .map(|inner| inner as &(dyn std::error::Error + 'static));
    unwrapped
        .and_then(|inner| find_tls_error(inner, depth - 1))
        .or_else(|| find_tls_error(error.source()?, depth - 1))
}

/// Why rustls refused the registry's certificate, if that is what failed.
fn certificate_problem(error: &reqwest::Error) -> Option<String> {
    match find_tls_error(error, 16)? {
        rustls::Error::InvalidCertificate(why) => Some(why.to_string()),
        _ => None,
    }
}

impl Puller {
    pub fn new(cache: PathBuf, insecure: Vec<String>) -> Puller {
        let verified = reqwest::Client::builder().build().map_err(|e| {
            format!(
                "no trusted CA certificates on this node ({}): install Debian's ca-certificates or set SSL_CERT_FILE",
                error_chain(&e)
            )
        });
        let unverified = reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .build()
            .map_err(|e| error_chain(&e));
        Puller {
            verified,
            unverified,
            cache,
            insecure,
            plain_http: Mutex::new(HashSet::new()),
        }
    }

    /// GETs `/v2/<repository>/<tail>` of the image's registry: over HTTPS, and for an
    /// insecure registry with any certificate, falling back to plain HTTP.
    async fn fetch(
        &self,
        image: &str,
        r: &Reference,
        tail: &str,
        accept: &str,
    ) -> Result<reqwest::Response, ImageError> {
        let failed = |message: String| ImageError::Pull {
            image: image.to_string(),
            message,
        };
        let path = format!("{}/v2/{}/{tail}", r.registry, r.repository);
        let insecure = self.insecure.iter().any(|h| h == &r.registry);
        let known_plain = self
            .plain_http
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&r.registry);
        let response = if known_plain {
            self.get(&format!("http://{path}"), accept, true)
                .await
                .map_err(failed)?
        } else {
            let url = format!("https://{path}");
            match self.get(&url, accept, insecure).await {
                Ok(response) => response,
                Err(tls_error) if insecure => {
                    let response = self
                        .get(&format!("http://{path}"), accept, true)
                        .await
                        .map_err(|http_error| {
                            failed(format!("{tls_error}; over plain HTTP: {http_error}"))
                        })?;
                    self.plain_http
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(r.registry.clone());
                    response
                }
                Err(text) => return Err(failed(text)),
            }
        };
        if !response.status().is_success() {
            return Err(failed(format!(
                "{}: the registry answered {}",
                response.url(),
                response.status()
            )));
        }
        Ok(response)
    }

    /// One GET; the error says what to do about it.
    async fn get(
        &self,
        url: &str,
        accept: &str,
        insecure: bool,
    ) -> Result<reqwest::Response, String> {
        let client = if insecure {
            &self.unverified
        } else {
            &self.verified
        };
        let client = client.as_ref().map_err(|e| format!("{url}: {e}"))?;
        client
            .get(url)
            .header("accept", accept)
            .send()
            .await
            .map_err(|e| {
                let registry = url
                    .split("://")
                    .nth(1)
                    .and_then(|rest| rest.split('/').next())
                    .unwrap_or_default();
                if let Some(why) = certificate_problem(&e) {
                    return format!(
                        "{url}: the registry's TLS certificate is not trusted ({why}): add its CA to this node's trust store (e.g. /usr/local/share/ca-certificates/ and update-ca-certificates, or SSL_CERT_FILE), or allow the registry with --insecure-registry {registry}"
                    );
                }
                let mut text = format!("{url}: {}", error_chain(&e));
                if url.starts_with("https://") && !insecure {
                    text.push_str(&format!(" (a registry that serves plain HTTP must be allowed with --insecure-registry {registry})"));
                }
                text
            })
    }

    async fn manifest(&self, image: &str, r: &Reference) -> Result<(String, Value), ImageError> {
        let failed = |message: String| ImageError::Pull {
            image: image.to_string(),
            message,
        };
        let mut reference = r.reference.clone();
        for _ in 0..2 {
            let bytes = self
                .fetch(image, r, &format!("manifests/{reference}"), MANIFEST_TYPES)
                .await?
                .bytes()
                .await
                .map_err(|e| failed(e.to_string()))?;
            let digest = format!("sha256:{:x}", Sha256::digest(&bytes));
            let manifest: Value =
                serde_json::from_slice(&bytes).map_err(|e| failed(format!("bad manifest: {e}")))?;
            match manifest.get("manifests").and_then(Value::as_array) {
                // An index: take the linux/amd64 image.
                Some(list) => {
                    let chosen = list
                        .iter()
                        .find(|m| {
                            m.pointer("/platform/architecture") == Some(&Value::from("amd64"))
                        })
                        .or_else(|| list.first())
                        .and_then(|m| m["digest"].as_str())
                        .ok_or_else(|| failed("the image index lists no manifest".into()))?;
                    reference = chosen.to_string();
                }
                None => return Ok((digest, manifest)),
            }
        }
        Err(failed("nested image indexes".into()))
    }

    /// Pulls `image` (unless cached) and returns the files under `wanted` path prefixes.
    /// Fetches every layer of `manifest`, checks its digest and unpacks it into `into`.
    async fn unpack_layers(
        &self,
        image: &str,
        r: &Reference,
        manifest: &Value,
        into: &Path,
    ) -> Result<(), ImageError> {
        let failed = |message: String| ImageError::Pull {
            image: image.to_string(),
            message,
        };
        let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
        for layer in layers {
            let layer_digest = layer["digest"]
                .as_str()
                .ok_or_else(|| failed("a layer has no digest".into()))?;
            let bytes = self
                .fetch(image, r, &format!("blobs/{layer_digest}"), "*/*")
                .await?
                .bytes()
                .await
                .map_err(|e| failed(e.to_string()))?;
            let actual = format!("sha256:{:x}", Sha256::digest(&bytes));
            if actual != layer_digest {
                return Err(failed(format!("layer {layer_digest} arrived as {actual}")));
            }
            let media = layer["mediaType"].as_str().unwrap_or("");
            unpack(
                &bytes,
                media.contains("gzip") || bytes.starts_with(&[0x1f, 0x8b]),
                into,
            )
            .map_err(|e| failed(format!("unpacking layer {layer_digest}: {e}")))?;
        }
        Ok(())
    }

    pub async fn pull(&self, image: &str, wanted: &[&str]) -> Result<Extracted, ImageError> {
        let r = Reference::parse(image)?;
        let (digest, manifest) = self.manifest(image, &r).await?;
        let dir = self.cache.join(digest.replace(':', "-"));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ImageError::Io { path, source }
        };
        if !dir.join(".complete").exists() {
            // One staging dir per pull: two VMIs of one image may pull it at once.
            static PULLS: AtomicU64 = AtomicU64::new(0);
            let staging = self.cache.join(format!(
                ".{}-{}-{}",
                digest.replace(':', "-"),
                std::process::id(),
                PULLS.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&staging).map_err(io(&staging))?;
            let unpacked = self
                .unpack_layers(image, &r, &manifest, &staging)
                .await
                .and_then(|()| {
                    std::fs::write(staging.join(".complete"), &digest).map_err(io(&staging))
                });
            if let Err(e) = unpacked {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(e);
            }
            match std::fs::rename(&staging, &dir) {
                Ok(()) => {}
                // Another pull of the same image finished first; use that one.
                Err(_) if dir.join(".complete").exists() => {
                    let _ = std::fs::remove_dir_all(&staging);
                }
                Err(e) => {
                    return Err(ImageError::Io {
                        path: dir.clone(),
                        source: e,
                    })
                }
            }
        }
        let mut files = Vec::new();
        collect(&dir, &dir, wanted, &mut files).map_err(io(&dir))?;
        files.sort();
        Ok(Extracted { files })
    }
}

/// Unpacks a layer, refusing paths that would leave `into`.
fn unpack(bytes: &[u8], gzip: bool, into: &Path) -> std::io::Result<()> {
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    };
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(false);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            continue;
        }
        // `unpack_in` rejects absolute paths and `..` components.
        entry.unpack_in(into)?;
    }
    Ok(())
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
        if wanted.iter().any(|w| relative.starts_with(w)) {
            out.push((relative, path));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain-HTTP registry on loopback serving one image: `routes` maps request paths
    /// to bodies; anything else is a 404.
    async fn serve_registry(routes: Vec<(String, Vec<u8>)>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let routes = std::sync::Arc::new(routes);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let routes = routes.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                        // A TLS hello: hang up, so the puller falls back to plain HTTP.
                        if !request.starts_with(b"GET") {
                            return;
                        }
                    }
                    let text = String::from_utf8_lossy(&request);
                    let path = text.split_whitespace().nth(1).unwrap_or("");
                    let (status, body) = match routes.iter().find(|(p, _)| p == path) {
                        Some((_, body)) => ("200 OK", body.clone()),
                        None => ("404 Not Found", Vec::new()),
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                });
            }
        });
        address
    }

    /// Two VMIs of one image pulling it at the same moment both get every file (they
    /// once shared a staging dir, and one emptied it under the other).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_pulls_of_one_image_both_get_its_files() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut layer = tar::Builder::new(Vec::new());
        for i in 0..300 {
            let data = vec![b'x'; 4096];
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            layer
                .append_data(&mut header, format!("filler/{i}"), &data[..])
                .unwrap();
        }
        let kernel = b"kernel".to_vec();
        let mut header = tar::Header::new_gnu();
        header.set_size(kernel.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        layer
            .append_data(&mut header, "boot/vmlinux", &kernel[..])
            .unwrap();
        let layer = layer.into_inner().unwrap();
        let layer_digest = format!("sha256:{:x}", Sha256::digest(&layer));
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest, "size": layer.len()}],
        });
        let registry = serve_registry(vec![
            (
                "/v2/guest/manifests/latest".into(),
                serde_json::to_vec(&manifest).unwrap(),
            ),
            (format!("/v2/guest/blobs/{layer_digest}"), layer),
        ])
        .await;
        let cache = tempfile::tempdir().unwrap();
        let puller = Puller::new(cache.path().to_path_buf(), vec![registry.clone()]);
        let image = format!("{registry}/guest:latest");
        let (a, b) = tokio::join!(
            puller.pull(&image, &["/boot/"]),
            puller.pull(&image, &["/boot/"])
        );
        for pulled in [a, b] {
            let files = pulled.expect("pull").files;
            assert!(
                files.iter().any(|(name, _)| name.ends_with("boot/vmlinux")),
                "{files:?}"
            );
        }
    }

    /// An error holding its cause in a box, as hyper's client errors do.
    #[derive(Debug)]
    struct Outer(Box<dyn std::error::Error + Send + Sync>);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(self.0.as_ref())
        }
    }

    #[test]
    fn certificate_errors_are_found_inside_boxes_and_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let rewrapped = std::io::Error::other(io);
        let outer = Outer(Box::new(rewrapped));
        assert!(matches!(
            find_tls_error(&outer, 16),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ));
        let refused = Outer(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(find_tls_error(&refused, 16).is_none());
    }

    #[test]
    fn references() {
        let r = Reference::parse("127.0.0.1:5000/guest:latest").unwrap();
        assert_eq!(
            (
                r.registry.as_str(),
                r.repository.as_str(),
                r.reference.as_str()
            ),
            ("127.0.0.1:5000", "guest", "latest")
        );
        let r = Reference::parse("quay.io/kubevirt/cirros-container-disk-demo").unwrap();
        assert_eq!(
            (
                r.registry.as_str(),
                r.repository.as_str(),
                r.reference.as_str()
            ),
            ("quay.io", "kubevirt/cirros-container-disk-demo", "latest")
        );
        let r = Reference::parse("localhost:5000/a/b@sha256:abc").unwrap();
        assert_eq!(r.reference, "sha256:abc");
        assert_eq!(
            Reference::parse("fedora").unwrap().repository,
            "library/fedora"
        );
    }
}
