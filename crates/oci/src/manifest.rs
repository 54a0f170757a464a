//! Image manifests and indexes (OCI and Docker v2 schema 2), and choosing this host's
//! platform from an index.

use std::fmt;

use serde::Deserialize;

pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub(crate) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// What the manifest GET accepts.
pub(crate) const ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// An OS and CPU architecture, as OCI names them (`linux/amd64`, `linux/arm64/v8`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Platform {
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub variant: Option<String>,
}

impl Platform {
    pub fn new(os: &str, architecture: &str) -> Platform {
        Platform {
            os: os.to_string(),
            architecture: architecture.to_string(),
            variant: None,
        }
    }

    /// Linux on this host's CPU, in Go's (and so OCI's) architecture names.
    pub fn host() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "x86" => "386",
            "aarch64" => "arm64",
            "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
            "loongarch64" => "loong64",
            other => other,
        };
        Platform::new("linux", architecture)
    }

    /// Whether an index entry for `entry` runs here (a variant narrows only when both
    /// name one).
    fn accepts(&self, entry: &Platform) -> bool {
        entry.os == self.os
            && entry.architecture == self.architecture
            && match (&self.variant, &entry.variant) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = |s: &str| {
            if s.is_empty() {
                "unknown".to_string()
            } else {
                s.to_string()
            }
        };
        write!(f, "{}/{}", part(&self.os), part(&self.architecture))?;
        if let Some(variant) = self.variant.as_deref().filter(|v| !v.is_empty()) {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    schema_version: Option<u32>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
}

#[derive(Debug)]
pub(crate) enum Manifest {
    Index(Vec<Descriptor>),
    Image { layers: Vec<Descriptor> },
}

impl Manifest {
    /// Reads a manifest by its `Content-Type` (or `mediaType` field, or shape).
    pub fn parse(bytes: &[u8], content_type: Option<&str>) -> Result<Manifest, String> {
        let raw: Raw =
            serde_json::from_slice(bytes).map_err(|e| format!("the manifest is not JSON: {e}"))?;
        let header = content_type
            .map(|c| c.split(';').next().unwrap_or("").trim().to_string())
            .filter(|c| !c.is_empty() && c != "application/json");
        let media = header.or(raw.media_type.clone()).unwrap_or_default();
        if raw.schema_version == Some(1) || media.contains("manifest.v1+prettyjws") {
            return Err("it is a Docker schema 1 manifest, which is not supported (push it again with a current tool)".into());
        }
        match (media.as_str(), raw.manifests, raw.layers) {
            (OCI_INDEX | DOCKER_LIST, Some(list), _) => Ok(Manifest::Index(list)),
            (OCI_MANIFEST | DOCKER_MANIFEST, _, Some(layers)) => Ok(Manifest::Image { layers }),
            // No (known) media type: go by the fields present.
            (_, Some(list), None) => Ok(Manifest::Index(list)),
            (_, None, Some(layers)) => Ok(Manifest::Image { layers }),
            _ => Err(format!(
                "unsupported manifest{}",
                if media.is_empty() {
                    String::new()
                } else {
                    format!(" type {media}")
                }
            )),
        }
    }
}

/// The index entry that runs on `platform`, or the platforms there are.
pub(crate) fn choose<'a>(
    entries: &'a [Descriptor],
    platform: &Platform,
) -> Result<&'a Descriptor, Vec<String>> {
    if let Some(found) = entries
        .iter()
        .find(|e| e.platform.as_ref().is_some_and(|p| platform.accepts(p)))
    {
        return Ok(found);
    }
    // An index that names no platform at all (an artifact list): its first entry.
    if !entries.is_empty() && entries.iter().all(|e| e.platform.is_none()) {
        return Ok(&entries[0]);
    }
    let mut available: Vec<String> = entries
        .iter()
        .map(|e| e.platform.clone().unwrap_or_default().to_string())
        .collect();
    available.sort();
    available.dedup();
    Err(available)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(os: &str, arch: &str, digest: &str) -> serde_json::Value {
        json!({"mediaType": OCI_MANIFEST, "digest": digest, "size": 1,
               "platform": {"os": os, "architecture": arch}})
    }

    #[test]
    fn picks_the_host_platform() {
        let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            entry("linux", "arm64", "sha256:arm"), entry("linux", "amd64", "sha256:amd"),
            entry("unknown", "unknown", "sha256:attestation")]});
        let Manifest::Index(entries) =
            Manifest::parse(&serde_json::to_vec(&index).unwrap(), None).unwrap()
        else {
            panic!("not an index")
        };
        let chosen = choose(&entries, &Platform::new("linux", "amd64")).unwrap();
        assert_eq!(chosen.digest, "sha256:amd");
        assert_eq!(
            choose(&entries, &Platform::new("linux", "arm64"))
                .unwrap()
                .digest,
            "sha256:arm"
        );
        let missing = choose(&entries, &Platform::new("linux", "s390x")).unwrap_err();
        assert_eq!(missing, ["linux/amd64", "linux/arm64", "unknown/unknown"]);
    }

    #[test]
    fn media_types_and_shapes() {
        let manifest =
            json!({"schemaVersion": 2, "layers": [{"digest": "sha256:l", "mediaType": "x"}]});
        let bytes = serde_json::to_vec(&manifest).unwrap();
        assert!(matches!(
            Manifest::parse(&bytes, Some(DOCKER_MANIFEST)),
            Ok(Manifest::Image { .. })
        ));
        assert!(matches!(
            Manifest::parse(&bytes, None),
            Ok(Manifest::Image { .. })
        ));
        let v1 = json!({"schemaVersion": 1, "fsLayers": []});
        let e = Manifest::parse(&serde_json::to_vec(&v1).unwrap(), None).unwrap_err();
        assert!(e.contains("schema 1"), "{e}");
        assert!(Manifest::parse(b"{}", Some("application/vnd.oci.artifact")).is_err());
        assert!(Manifest::parse(b"<html>", None).is_err());
    }

    #[test]
    fn host_platform_is_linux() {
        let host = Platform::host();
        assert_eq!(host.os, "linux");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(host.to_string(), "linux/amd64");
        }
    }
}
