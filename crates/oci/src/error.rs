use std::path::PathBuf;

use crate::reference::ReferenceError;

/// Why an image could not be pulled. Each message names the image (and where it matters
/// the registry) in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    /// The registry (or its token service) wants credentials it did not get, or refused
    /// the ones it got.
    #[error("unauthorized: authentication required: {registry} refused to serve {image} {}{}{}",
        match user { Some(u) => format!("with the credentials of {u:?}"), None => "to an anonymous client".to_string() },
        match (*token_flow, user) { (false, _) => "", (true, None) => " (pull access denied: the repository does not exist or needs credentials)", (true, Some(_)) => " (pull access denied: the repository does not exist or these credentials may not pull it)" },
        detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Unauthorized {
        image: String,
        registry: String,
        user: Option<String>,
        /// Whether it came from the token flow (where a missing repository looks the same).
        token_flow: bool,
        detail: Option<String>,
    },
    #[error("denied: {registry} answered 403 Forbidden for {image}{}{}",
        user.as_deref().map(|u| format!(" with the credentials of {u:?}")).unwrap_or_default(),
        detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Denied {
        image: String,
        registry: String,
        user: Option<String>,
        detail: Option<String>,
    },
    /// 404 for the manifest: no such tag (or digest), or no such repository.
    #[error("manifest unknown: {image}: {registry} has no {what} in repository {repository}{}",
        detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    ManifestUnknown {
        image: String,
        registry: String,
        repository: String,
        /// `tag "40"` or `manifest sha256:…`.
        what: String,
        detail: Option<String>,
    },
    #[error("{image}: the image index has no entry for {wanted} (it has {})",
        if available.is_empty() { "no platforms".to_string() } else { available.join(", ") })]
    Platform {
        image: String,
        wanted: String,
        available: Vec<String>,
    },
    /// The registry could not be reached, or kept failing (after retries).
    #[error("pulling {image}: {message}")]
    Transport { image: String, message: String },
    /// The registry answered something else than expected.
    #[error("pulling {image}: {message}")]
    Registry { image: String, message: String },
    /// What arrived is not a usable image (a bad manifest, a digest mismatch, a layer
    /// that does not unpack, no disk under /disk/).
    #[error("{image}: {message}")]
    Invalid { image: String, message: String },
    /// `imagePullPolicy: Never` and the image is not on this node.
    #[error("{image} is not present on this node and its pull policy is Never")]
    NeverPull { image: String },
    #[error("image cache {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl PullError {
    /// The kubelet's reason for it: `InvalidImageName`, `ErrImageNeverPull` or
    /// `ErrImagePull`.
    pub fn reason(&self) -> &'static str {
        match self {
            PullError::Reference(_) => "InvalidImageName",
            PullError::NeverPull { .. } => "ErrImageNeverPull",
            _ => "ErrImagePull",
        }
    }

    /// Whether other credentials might do better.
    pub(crate) fn is_auth(&self) -> bool {
        matches!(
            self,
            PullError::Unauthorized { .. } | PullError::Denied { .. }
        )
    }
}
