//! A VMI's volumes, typed: one enum of the sources a volume can have, read once from
//! `spec.volumes`, so that the node agents, the migration checks and anyone else match on
//! a source instead of probing JSON keys. Sources whose settings only one reader uses
//! (cloud-init, sysprep) keep them as JSON for that reader.

use serde::Deserialize;
use serde_json::Value;

/// `containerDisk`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerDisk {
    #[serde(default)]
    pub image: String,
    /// The disk's path inside the image (default: the one disk under `/disk/`).
    pub path: Option<String>,
    /// A `kubernetes.io/dockerconfigjson` Secret in the VMI's namespace with credentials
    /// for the image's registry.
    pub image_pull_secret: Option<String>,
    /// `Always`, `IfNotPresent` or `Never` (set by defaulting).
    pub image_pull_policy: Option<String>,
}

/// `emptyDisk`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct EmptyDisk {
    pub capacity: Option<String>,
}

/// `hostDisk`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct HostDisk {
    #[serde(default)]
    pub path: String,
    /// `Disk` (must exist) or `DiskOrCreate`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub capacity: Option<String>,
    pub shared: Option<bool>,
}

/// Where a volume's data comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    ContainerDisk(ContainerDisk),
    EmptyDisk(EmptyDisk),
    CloudInitNoCloud(Value),
    CloudInitConfigDrive(Value),
    Sysprep(Value),
    HostDisk(HostDisk),
    /// A claim by name (`persistentVolumeClaim.claimName`).
    PersistentVolumeClaim(String),
    /// A DataVolume by name; its claim has the same name.
    DataVolume(String),
    ConfigMap(Value),
    Secret(Value),
    ServiceAccount(Value),
    DownwardApi(Value),
    /// A source this model does not know (the volume's key).
    Other(String),
}

impl Source {
    /// The claim whose file backs the volume, for claims and DataVolumes.
    pub fn claim(&self) -> Option<&str> {
        match self {
            Source::PersistentVolumeClaim(name) | Source::DataVolume(name) => Some(name),
            _ => None,
        }
    }

    /// Data that lives on the node the VMI runs on (copied when it migrates).
    pub fn node_local(&self) -> bool {
        matches!(
            self,
            Source::ContainerDisk(_)
                | Source::EmptyDisk(_)
                | Source::CloudInitNoCloud(_)
                | Source::CloudInitConfigDrive(_)
                | Source::Sysprep(_)
                | Source::ConfigMap(_)
                | Source::Secret(_)
                | Source::ServiceAccount(_)
                | Source::DownwardApi(_)
        )
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Volume {
    pub name: String,
    pub source: Source,
    /// The volume as written, for readers of settings the model keeps as JSON.
    pub raw: Value,
}

crate::raw_backed!(Volume);

fn typed<T: for<'de> Deserialize<'de> + Default>(v: &Value) -> T {
    // Admission checked the shape; a value it let through that does not fit reads as unset.
    serde_json::from_value(v.clone()).unwrap_or_default()
}

impl Volume {
    pub fn from_value(raw: &Value) -> Volume {
        let name = raw["name"].as_str().unwrap_or("").to_string();
        let string_at = |key: &str, field: &str| raw[key][field].as_str().unwrap_or("").to_string();
        let json = |key: &str| raw[key].clone();
        let source = if raw.get("containerDisk").is_some() {
            Source::ContainerDisk(typed(&raw["containerDisk"]))
        } else if raw.get("emptyDisk").is_some() {
            Source::EmptyDisk(typed(&raw["emptyDisk"]))
        } else if raw.get("cloudInitNoCloud").is_some() {
            Source::CloudInitNoCloud(json("cloudInitNoCloud"))
        } else if raw.get("cloudInitConfigDrive").is_some() {
            Source::CloudInitConfigDrive(json("cloudInitConfigDrive"))
        } else if raw.get("sysprep").is_some() {
            Source::Sysprep(json("sysprep"))
        } else if raw.get("hostDisk").is_some() {
            Source::HostDisk(typed(&raw["hostDisk"]))
        } else if raw.get("persistentVolumeClaim").is_some() {
            Source::PersistentVolumeClaim(string_at("persistentVolumeClaim", "claimName"))
        } else if raw.get("dataVolume").is_some() {
            Source::DataVolume(string_at("dataVolume", "name"))
        } else if raw.get("configMap").is_some() {
            Source::ConfigMap(json("configMap"))
        } else if raw.get("secret").is_some() {
            Source::Secret(json("secret"))
        } else if raw.get("serviceAccount").is_some() {
            Source::ServiceAccount(json("serviceAccount"))
        } else if raw.get("downwardAPI").is_some() {
            Source::DownwardApi(json("downwardAPI"))
        } else {
            let key = raw
                .as_object()
                .and_then(|m| m.keys().find(|k| *k != "name").cloned())
                .unwrap_or_default();
            Source::Other(key)
        };
        Volume {
            name,
            source,
            raw: raw.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_source_is_read_as_its_kind() {
        let spec = json!({"volumes": [
            {"name": "root", "containerDisk": {"image": "r/i:1", "path": "/disk/a.qcow2"}},
            {"name": "scratch", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config"}},
            {"name": "host", "hostDisk": {"path": "/d/x.img", "type": "DiskOrCreate", "shared": true}},
            {"name": "pvc", "persistentVolumeClaim": {"claimName": "c1"}},
            {"name": "dv", "dataVolume": {"name": "d1"}},
            {"name": "odd", "memoryDump": {"claimName": "m"}}
        ]});
        let spec: crate::model::vmi::VmiSpec = serde_json::from_value(spec).unwrap();
        let volumes = spec.volumes();
        let sources: Vec<&Source> = volumes.iter().map(|v| &v.source).collect();
        assert_eq!(
            sources[0],
            &Source::ContainerDisk(ContainerDisk {
                image: "r/i:1".into(),
                path: Some("/disk/a.qcow2".into()),
                ..ContainerDisk::default()
            })
        );
        assert_eq!(
            sources[1],
            &Source::EmptyDisk(EmptyDisk {
                capacity: Some("1Gi".into())
            })
        );
        assert!(
            matches!(sources[2], Source::CloudInitNoCloud(v) if v["userData"] == "#cloud-config")
        );
        assert_eq!(
            sources[3],
            &Source::HostDisk(HostDisk {
                path: "/d/x.img".into(),
                kind: Some("DiskOrCreate".into()),
                capacity: None,
                shared: Some(true)
            })
        );
        assert_eq!(sources[4].claim(), Some("c1"));
        assert_eq!(sources[5].claim(), Some("d1"));
        assert_eq!(sources[6], &Source::Other("memoryDump".into()));
        assert!(sources[0].node_local() && !sources[3].node_local() && !sources[4].node_local());
        assert_eq!(volumes[2].name, "ci");
    }

    #[test]
    fn a_misshapen_source_reads_as_unset_instead_of_failing() {
        let odd = Volume::from_value(&json!({"name": "x", "emptyDisk": {"capacity": 5}}));
        assert_eq!(odd.source, Source::EmptyDisk(EmptyDisk::default()));
    }
}
