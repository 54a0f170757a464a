//! CDI's `cdi.kubevirt.io/v1beta1` DataVolume as virtplane's controllers read it: one typed
//! definition of its source, its phases and conditions, and the claim it asks for.

pub mod admission;
pub mod model;
pub mod resources;

use serde_json::{json, Value};

/// The one storage class virtplane has (its local volume pool), and the StorageProfile
/// that describes it.
pub const STORAGE_CLASS: &str = "local";
/// What the StorageProfile fills in for `spec.storage`.
pub const DEFAULT_ACCESS_MODE: &str = "ReadWriteOnce";
pub const DEFAULT_VOLUME_MODE: &str = "Filesystem";

/// Condition types of a DataVolume.
pub mod conditions {
    pub const BOUND: &str = "Bound";
    pub const READY: &str = "Ready";
    pub const RUNNING: &str = "Running";
}

crate::string_enum! {
    /// `status.phase` of a DataVolume, as CDI names them.
    pub enum Phase {
        Unset = "",
        Pending = "Pending",
        ImportScheduled = "ImportScheduled",
        ImportInProgress = "ImportInProgress",
        CloneScheduled = "CloneScheduled",
        CloneInProgress = "CloneInProgress",
        UploadScheduled = "UploadScheduled",
        UploadReady = "UploadReady",
        WaitForFirstConsumer = "WaitForFirstConsumer",
        PendingPopulation = "PendingPopulation",
        Succeeded = "Succeeded",
        Failed = "Failed",
        Unknown = "Unknown",
    }
}

impl Phase {
    /// Still being filled (or waiting to be).
    pub fn provisioning(self) -> bool {
        !matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// What a StorageProfile gives claims that do not say: access modes and volume mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimProperties {
    pub access_modes: Vec<String>,
    pub volume_mode: String,
}

impl Default for ClaimProperties {
    /// virtplane's local pool: one node writes a file.
    fn default() -> Self {
        ClaimProperties {
            access_modes: vec![DEFAULT_ACCESS_MODE.to_string()],
            volume_mode: DEFAULT_VOLUME_MODE.to_string(),
        }
    }
}

impl ClaimProperties {
    /// The first claim property set of a StorageProfile: the administrator's
    /// (`spec`) before the detected one (`status`), else the defaults.
    pub fn of_profile(profile: &Value) -> ClaimProperties {
        let first = ["/spec/claimPropertySets/0", "/status/claimPropertySets/0"]
            .iter()
            .find_map(|p| profile.pointer(p));
        let Some(set) = first else {
            return ClaimProperties::default();
        };
        let defaults = ClaimProperties::default();
        let modes: Vec<String> = set
            .get("accessModes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        ClaimProperties {
            access_modes: if modes.is_empty() {
                defaults.access_modes
            } else {
                modes
            },
            volume_mode: text(set, "volumeMode").unwrap_or(defaults.volume_mode),
        }
    }
}

/// An http(s) image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Http {
    pub url: String,
    /// A Secret with `accessKeyId` and `secretKey`, sent as basic auth.
    pub secret_ref: Option<String>,
    /// A ConfigMap whose values are PEM CAs to trust.
    pub cert_config_map: Option<String>,
    /// `Name: value` request headers.
    pub extra_headers: Vec<String>,
}

/// An OCI image holding a disk under `/disk/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    /// `docker://REGISTRY/NAME:TAG` as written.
    pub url: String,
    pub secret_ref: Option<String>,
    pub cert_config_map: Option<String>,
    pub architecture: Option<String>,
}

/// A claim, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
}

/// Where a DataVolume's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Http(Http),
    Registry(Registry),
    /// A clone of another claim.
    Pvc(ClaimRef),
    Blank,
    Upload,
    /// A source CDI knows and virtplane does not serve (`s3`, `vddk`, ...).
    Unsupported(String),
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

impl Source {
    /// The source `spec.source` names (admission has checked there is exactly one).
    pub fn parse(source: &Value, namespace: &str) -> Option<Source> {
        let (kind, body) = source.as_object()?.iter().find(|(_, v)| v.is_object())?;
        Some(match kind.as_str() {
            "http" => Source::Http(Http {
                url: text(body, "url").unwrap_or_default(),
                secret_ref: text(body, "secretRef"),
                cert_config_map: text(body, "certConfigMap"),
                extra_headers: body
                    .get("extraHeaders")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
            }),
            "registry" => Source::Registry(Registry {
                url: text(body, "url").unwrap_or_default(),
                secret_ref: text(body, "secretRef"),
                cert_config_map: text(body, "certConfigMap"),
                architecture: body
                    .pointer("/platform/architecture")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            }),
            "pvc" => Source::Pvc(ClaimRef {
                namespace: text(body, "namespace").unwrap_or_else(|| namespace.to_string()),
                name: text(body, "name").unwrap_or_default(),
            }),
            "blank" => Source::Blank,
            "upload" => Source::Upload,
            other => Source::Unsupported(other.to_string()),
        })
    }
}

/// What a DataVolume's spec says: its source (or the DataSource naming it) and the claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub origin: Origin,
    /// `spec.pvc` or `spec.storage` as written.
    pub claim: Value,
    /// Whether the claim came as `spec.storage`, whose gaps the StorageProfile fills.
    pub storage_api: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    Source(Source),
    /// `spec.sourceRef` to a DataSource.
    DataSource(ClaimRef),
    Missing,
}

impl Spec {
    /// The spec of a DataVolume in `namespace` (where its references default to), held as
    /// JSON (the typed form is [`Spec::of_parts`]).
    #[cfg(test)]
    pub fn of(namespace: &str, spec: &Value) -> Spec {
        let parts = serde_json::from_value(spec.clone()).unwrap_or_default();
        Spec::of_parts(namespace, &parts)
    }

    /// The spec of a DataVolume in `namespace` (where its references default to).
    pub fn of_parts(namespace: &str, spec: &model::DataVolumeSpec) -> Spec {
        let origin = if let Some(source) = spec.source.as_ref().filter(|s| s.is_object()) {
            Source::parse(source, namespace).map_or(Origin::Missing, Origin::Source)
        } else if let Some(reference) = spec.source_ref.as_ref().filter(|s| s.is_object()) {
            Origin::DataSource(ClaimRef {
                namespace: text(reference, "namespace").unwrap_or_else(|| namespace.to_string()),
                name: text(reference, "name").unwrap_or_default(),
            })
        } else {
            Origin::Missing
        };
        let (claim, storage_api) = match (&spec.pvc, &spec.storage) {
            (Some(pvc), _) if pvc.is_object() => (pvc.clone(), false),
            (_, Some(storage)) if storage.is_object() => (storage.clone(), true),
            _ => (json!({}), true),
        };
        Spec {
            origin,
            claim,
            storage_api,
        }
    }

    /// The storage size asked for, if any.
    pub fn requested_size(&self) -> Option<&Value> {
        self.claim.pointer("/resources/requests/storage")
    }

    /// The PersistentVolumeClaim spec to create: the claim as written, with the
    /// StorageProfile's access and volume modes (`profile`) where `spec.storage` leaves them
    /// out, and `size` (a clone's source size) when no size was asked for.
    pub fn claim_spec(&self, size: Option<&Value>, profile: &ClaimProperties) -> Value {
        let mut claim = self.claim.clone();
        if self.storage_api {
            let modes_missing = claim
                .get("accessModes")
                .and_then(Value::as_array)
                .is_none_or(|m| m.is_empty());
            if modes_missing {
                claim["accessModes"] = json!(profile.access_modes);
            }
            if claim.get("volumeMode").is_none() {
                claim["volumeMode"] = json!(profile.volume_mode);
            }
            if claim.get("storageClassName").is_none() {
                claim["storageClassName"] = json!(STORAGE_CLASS);
            }
        }
        if self.requested_size().is_none() {
            if let Some(size) = size {
                claim["resources"]["requests"]["storage"] = size.clone();
            }
        }
        claim
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_into_their_kinds() {
        let dv = |source: Value| json!({"source": source, "storage": {}});
        let http = Spec::of(
            "team",
            &dv(json!({"http": {"url": "http://x/disk.img", "secretRef": "creds"}})),
        );
        assert_eq!(
            http.origin,
            Origin::Source(Source::Http(Http {
                url: "http://x/disk.img".into(),
                secret_ref: Some("creds".into()),
                cert_config_map: None,
                extra_headers: vec![],
            }))
        );
        let pvc = Spec::of("team", &dv(json!({"pvc": {"name": "golden"}})));
        assert_eq!(
            pvc.origin,
            Origin::Source(Source::Pvc(ClaimRef {
                namespace: "team".into(),
                name: "golden".into()
            }))
        );
        assert_eq!(
            Spec::of("team", &dv(json!({"blank": {}}))).origin,
            Origin::Source(Source::Blank)
        );
        assert_eq!(
            Spec::of("team", &dv(json!({"s3": {"url": "s3://b/k"}}))).origin,
            Origin::Source(Source::Unsupported("s3".into()))
        );
        let by_ref = json!({"sourceRef": {"kind": "DataSource", "name": "fedora", "namespace": "os-images"}, "storage": {}});
        assert_eq!(
            Spec::of("team", &by_ref).origin,
            Origin::DataSource(ClaimRef {
                namespace: "os-images".into(),
                name: "fedora".into()
            })
        );
    }

    #[test]
    fn storage_gaps_are_filled_and_pvc_is_kept_as_written() {
        let storage = Spec::of(
            "n",
            &json!({"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}}),
        );
        assert_eq!(
            storage.claim_spec(None, &ClaimProperties::default()),
            json!({"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem", "storageClassName": "local",
                   "resources": {"requests": {"storage": "1Gi"}}})
        );
        let clone = Spec::of(
            "n",
            &json!({"source": {"pvc": {"name": "a", "namespace": "b"}}, "storage": {}}),
        );
        assert_eq!(
            clone.claim_spec(Some(&json!("2Gi")), &ClaimProperties::default())["resources"]
                ["requests"]["storage"],
            "2Gi"
        );
        let pvc = json!({"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}});
        let written = Spec::of("n", &json!({"source": {"blank": {}}, "pvc": pvc}));
        assert_eq!(written.claim_spec(None, &ClaimProperties::default()), pvc);
    }

    #[test]
    fn a_storage_profile_gives_its_first_property_set() {
        let profile = json!({"spec": {"claimPropertySets": [{"accessModes": ["ReadWriteMany"], "volumeMode": "Block"}]},
                             "status": {"claimPropertySets": [{"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}]}});
        let chosen = ClaimProperties::of_profile(&profile);
        assert_eq!(chosen.access_modes, ["ReadWriteMany"]);
        assert_eq!(chosen.volume_mode, "Block");
        let detected = ClaimProperties::of_profile(&json!({"status": profile["status"]}));
        assert_eq!(detected, ClaimProperties::default());
        assert_eq!(
            ClaimProperties::of_profile(&json!({})),
            ClaimProperties::default()
        );
    }

    #[test]
    fn phases_round_trip() {
        for phase in [
            Phase::Pending,
            Phase::ImportInProgress,
            Phase::CloneInProgress,
            Phase::UploadReady,
            Phase::Succeeded,
            Phase::Failed,
        ] {
            assert_eq!(Phase::parse(phase.as_str()), phase);
        }
        assert!(Phase::ImportInProgress.provisioning());
        assert!(!Phase::Succeeded.provisioning());
    }
}
