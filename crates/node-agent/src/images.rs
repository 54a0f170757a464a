//! containerDisk images: pulled from an OCI registry (the Distribution API), unpacked
//! into a cache keyed by manifest digest, so every VMI of one image shares one read-only
//! copy and writes to its own overlay.

use std::io::Read;
use std::path::{Path, PathBuf};

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
    client: reqwest::Client,
    cache: PathBuf,
    insecure: Vec<String>,
}

/// Files taken out of an image, by their path inside it.
pub struct Extracted {
    pub files: Vec<(String, PathBuf)>,
}

impl Puller {
    pub fn new(cache: PathBuf, insecure: Vec<String>) -> Puller {
        Puller {
            client: reqwest::Client::new(),
            cache,
            insecure,
        }
    }

    fn base(&self, r: &Reference) -> String {
        let scheme = if self.insecure.iter().any(|h| h == &r.registry) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}/v2/{}", r.registry, r.repository)
    }

    async fn fetch(
        &self,
        image: &str,
        url: &str,
        accept: &str,
    ) -> Result<reqwest::Response, ImageError> {
        let failed = |message: String| ImageError::Pull {
            image: image.to_string(),
            message,
        };
        let response = self
            .client
            .get(url)
            .header("accept", accept)
            .send()
            .await
            .map_err(|e| {
                // reqwest's own text ("error sending request") hides the cause.
                let mut text = format!("{url}: {e}");
                let mut source = std::error::Error::source(&e);
                while let Some(cause) = source {
                    text.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                if url.starts_with("https://") {
                    text.push_str(" (a registry that serves plain HTTP must be allowed with --insecure-registry)");
                }
                failed(text)
            })?;
        if !response.status().is_success() {
            return Err(failed(format!(
                "{url}: the registry answered {}",
                response.status()
            )));
        }
        Ok(response)
    }

    async fn manifest(&self, image: &str, r: &Reference) -> Result<(String, Value), ImageError> {
        let failed = |message: String| ImageError::Pull {
            image: image.to_string(),
            message,
        };
        let mut reference = r.reference.clone();
        for _ in 0..2 {
            let url = format!("{}/manifests/{reference}", self.base(r));
            let bytes = self
                .fetch(image, &url, MANIFEST_TYPES)
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
    pub async fn pull(&self, image: &str, wanted: &[&str]) -> Result<Extracted, ImageError> {
        let r = Reference::parse(image)?;
        let failed = |message: String| ImageError::Pull {
            image: image.to_string(),
            message,
        };
        let (digest, manifest) = self.manifest(image, &r).await?;
        let dir = self.cache.join(digest.replace(':', "-"));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ImageError::Io { path, source }
        };
        if !dir.join(".complete").exists() {
            let staging = self.cache.join(format!(
                ".{}-{}",
                digest.replace(':', "-"),
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&staging);
            std::fs::create_dir_all(&staging).map_err(io(&staging))?;
            let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
            for layer in layers {
                let layer_digest = layer["digest"]
                    .as_str()
                    .ok_or_else(|| failed("a layer has no digest".into()))?;
                let url = format!("{}/blobs/{layer_digest}", self.base(&r));
                let bytes = self
                    .fetch(image, &url, "*/*")
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
                    &staging,
                )
                .map_err(|e| failed(format!("unpacking layer {layer_digest}: {e}")))?;
            }
            std::fs::write(staging.join(".complete"), &digest).map_err(io(&staging))?;
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
