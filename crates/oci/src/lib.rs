//! Pulling images from OCI registries as the internet serves them: the distribution API
//! with its token flow (anonymous or with credentials) and basic auth, credentials from
//! docker config Secrets as the kubelet reads them, Docker Hub's names, multi-arch
//! indexes, retries of what may pass, and a node-wide cache of unpacked images keyed by
//! manifest digest (with the digest each tag was pulled as, so a later pull by that tag
//! can stay on it).
//!
//! `Puller::pull_disk` is what a containerDisk (and a `registry` DataVolume source)
//! needs: image reference and credentials in, the path of the disk file out
//! (`Keyring::from_secret` reads the credentials from a pull secret). `PullOptions` may
//! carry a progress callback and a CA bundle; dropping a pull's future stops it and
//! removes what it had written.
//!
//! Own code rather than the `oci-client` crate: one puller serves every namespace of a
//! node, and oci-client keeps one authentication per registry (the first one given wins)
//! and caches tokens per registry and repository whoever asked, so one VMI's credentials
//! would authorize another's pull; it also drops token-service errors, has no per-registry
//! insecure mode with Docker's HTTPS-then-HTTP fallback, and no retries.

mod auth;
mod credentials;
mod error;
mod manifest;
mod puller;
mod reference;
mod transport;

#[cfg(feature = "testing")]
pub mod testing;

pub use credentials::{
    Credentials, CredentialsError, Keyring, DOCKER_CFG_KEY, DOCKER_CFG_TYPE,
    DOCKER_CONFIG_JSON_KEY, DOCKER_CONFIG_JSON_TYPE,
};
pub use error::PullError;
pub use manifest::Platform;
pub use puller::{Config, Progress, PullOptions, PullPolicy, Pulled, PulledDisk, Puller};
pub use reference::{Reference, ReferenceError, DOCKER_HUB, DOCKER_HUB_HOST};
pub use transport::{tls_error, Retry};
