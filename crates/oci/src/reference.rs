//! Image references as Docker and the kubelet read them: `fedora` is
//! `docker.io/library/fedora:latest`, `quay.io/containerdisks/fedora:40` names its
//! registry, and `name@sha256:…` pins a digest.

use std::fmt;

/// The registry an image without a registry host comes from.
pub const DOCKER_HUB: &str = "docker.io";
/// Where Docker Hub's registry API is served (`docker.io` itself only redirects).
pub const DOCKER_HUB_HOST: &str = "registry-1.docker.io";
/// Docker Hub's old name, still used as the key of its credentials in docker configs.
pub const DOCKER_HUB_INDEX: &str = "index.docker.io";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {image:?}: {why}")]
pub struct ReferenceError {
    pub image: String,
    pub why: String,
}

/// `[registry/]repository[:tag][@digest]`, normalized.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
}

/// A path component of a repository: lowercase alphanumerics joined by `.`, `_`, `__`
/// or runs of `-`.
fn valid_component(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &part[start..i];
        let ok = matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn valid_tag(tag: &str) -> bool {
    let mut bytes = tag.bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    tag.len() <= 128
        && bytes.next().is_some_and(word)
        && bytes.all(|b| word(b) || b == b'.' || b == b'-')
}

fn valid_host(host: &str) -> bool {
    let (name, port) = match host.strip_prefix('[') {
        // An IPv6 literal: `[::1]:5000`.
        Some(rest) => match rest.split_once(']') {
            Some((address, tail)) => {
                if address.is_empty()
                    || !address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':')
                {
                    return false;
                }
                (None, tail.strip_prefix(':'))
            }
            None => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) => (Some(name), Some(port)),
            None => (Some(host), None),
        },
    };
    let name_ok = name.is_none_or(|n| {
        !n.is_empty()
            && n.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    });
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    name_ok && port_ok
}

impl Reference {
    pub fn parse(image: &str) -> Result<Reference, ReferenceError> {
        let bad = |why: &str| ReferenceError {
            image: image.to_string(),
            why: why.to_string(),
        };
        if image.is_empty() {
            return Err(bad("it is empty"));
        }
        if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("it contains whitespace"));
        }
        let (rest, digest) = match image.split_once('@') {
            Some((rest, digest)) => {
                let Some(hex) = digest.strip_prefix("sha256:") else {
                    return Err(bad(
                        "only sha256 digests are supported (name@sha256:<64 hex digits>)",
                    ));
                };
                if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                    return Err(bad("a sha256 digest is 64 lowercase hex digits"));
                }
                (rest, Some(digest.to_string()))
            }
            None => (image, None),
        };
        // A tag follows the last `:` after the last `/` (a `:` before it is a port).
        let (name, tag) = match rest.rsplit_once(':') {
            Some((name, tag)) if !tag.contains('/') => {
                if !valid_tag(tag) {
                    return Err(bad("a tag is up to 128 letters, digits, `_`, `.` and `-`, not starting with `.` or `-`"));
                }
                (name, Some(tag.to_string()))
            }
            _ => (rest, None),
        };
        // The first component names a registry when it looks like a host (Docker's rule).
        let (registry, path) = match name.split_once('/') {
            Some((first, path))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.bytes().any(|b| b.is_ascii_uppercase()) =>
            {
                if !valid_host(first) {
                    return Err(bad("the registry is not a valid host[:port]"));
                }
                let registry = if first == DOCKER_HUB_INDEX {
                    DOCKER_HUB.to_string()
                } else {
                    first.to_string()
                };
                (registry, path.to_string())
            }
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        if path.is_empty() {
            return Err(bad("it names no repository"));
        }
        if path.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(bad("a repository name must be lowercase"));
        }
        if !path.split('/').all(valid_component) {
            return Err(bad("a repository is lowercase letters and digits, in components separated by `/`, joined within one by `.`, `_`, `__` or `-`"));
        }
        let repository = if registry == DOCKER_HUB && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        if registry.len() + 1 + repository.len() > 255 {
            return Err(bad("the name is longer than 255 characters"));
        }
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// The registry as named: `docker.io`, `quay.io`, `127.0.0.1:5000`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// Where the registry's API is: the registry itself, or `registry-1.docker.io` for
    /// Docker Hub.
    pub fn host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_HOST
        } else {
            &self.registry
        }
    }

    /// `library/fedora`, `containerdisks/fedora`.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// `registry/repository` without tag or digest (what the kubelet matches
    /// credentials against).
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// What the manifest is asked for by: the digest, else the tag (`latest` by default).
    pub fn manifest_reference(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The same repository pinned to `digest` (no tag).
    pub fn pinned(&self, digest: &str) -> Reference {
        Reference {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.to_string()),
        }
    }
}

/// `docker.io/library/fedora:latest`, `quay.io/a/b@sha256:…` (the tag is shown as
/// `latest` when neither a tag nor a digest was given).
impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        match (&self.tag, &self.digest) {
            (Some(tag), _) => write!(f, ":{tag}")?,
            (None, None) => f.write_str(":latest")?,
            (None, Some(_)) => {}
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parts(image: &str) -> (String, String, String, String) {
        let r = Reference::parse(image).unwrap_or_else(|e| panic!("{e}"));
        (
            r.registry().to_string(),
            r.host().to_string(),
            r.repository().to_string(),
            r.manifest_reference().to_string(),
        )
    }

    #[test]
    fn docker_hub_names() {
        for image in [
            "fedora",
            "library/fedora",
            "docker.io/fedora",
            "docker.io/library/fedora",
            "index.docker.io/library/fedora",
            "index.docker.io/fedora:latest",
        ] {
            assert_eq!(
                parts(image),
                (
                    "docker.io".into(),
                    "registry-1.docker.io".into(),
                    "library/fedora".into(),
                    "latest".into()
                ),
                "{image}"
            );
            assert_eq!(
                Reference::parse(image).unwrap().to_string(),
                "docker.io/library/fedora:latest"
            );
        }
        // A user's repository keeps its namespace.
        assert_eq!(parts("kubevirt/cirros:v1").2, "kubevirt/cirros");
        assert_eq!(parts("kubevirt/cirros:v1").3, "v1");
    }

    #[test]
    fn registry_hosts() {
        assert_eq!(
            parts("quay.io/kubevirt/cirros-container-disk-demo"),
            (
                "quay.io".into(),
                "quay.io".into(),
                "kubevirt/cirros-container-disk-demo".into(),
                "latest".into()
            )
        );
        assert_eq!(
            parts("127.0.0.1:5000/guest:latest"),
            (
                "127.0.0.1:5000".into(),
                "127.0.0.1:5000".into(),
                "guest".into(),
                "latest".into()
            )
        );
        assert_eq!(parts("localhost/a/b").0, "localhost");
        assert_eq!(parts("[::1]:5000/guest").0, "[::1]:5000");
        // No dot, colon or localhost: a Docker Hub namespace, not a host.
        assert_eq!(parts("myhost/guest").0, "docker.io");
        assert_eq!(parts("myhost/guest").2, "myhost/guest");
        // `registry:port/name` without a tag: the colon is a port.
        assert_eq!(parts("registry:5000/guest").0, "registry:5000");
        assert_eq!(parts("registry:5000/guest").3, "latest");
    }

    #[test]
    fn digests_win_over_tags() {
        let r = Reference::parse(&format!("quay.io/a/b:40@{DIGEST}")).unwrap();
        assert_eq!(r.tag(), Some("40"));
        assert_eq!(r.manifest_reference(), DIGEST);
        assert_eq!(r.to_string(), format!("quay.io/a/b:40@{DIGEST}"));
        let pinned = Reference::parse("fedora:40").unwrap().pinned(DIGEST);
        assert_eq!(
            pinned.to_string(),
            format!("docker.io/library/fedora@{DIGEST}")
        );
        assert_eq!(Reference::parse(&pinned.to_string()).unwrap(), pinned);
    }

    #[test]
    fn invalid_references() {
        for image in [
            "",
            "Fedora",
            "quay.io/Org/image",
            "quay.io/",
            "a b",
            "fedora:",
            "fedora:-x",
            "fedora@sha256:abc",
            "fedora@md5:0123456789abcdef0123456789abcdef",
            "quay.io/a//b",
            "quay.io/a/-b",
            "quay.io:xx/a",
            "bad_host.io/a",
        ] {
            assert!(Reference::parse(image).is_err(), "{image:?} was accepted");
        }
        let e = Reference::parse("quay.io/Org/x").unwrap_err();
        assert!(e.to_string().contains("must be lowercase"), "{e}");
    }

    #[test]
    fn components() {
        for ok in ["a", "a.b", "a_b", "a__b", "a-b", "a---b", "0x"] {
            assert!(valid_component(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a..b", "a___b", "a.-b", "A"] {
            assert!(!valid_component(bad), "{bad}");
        }
    }
}
