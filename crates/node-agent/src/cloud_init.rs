//! cloud-init seeds: the files KubeVirt puts on a NoCloud (`cidata`) or ConfigDrive
//! (`config-2`) disk, with user and network data given inline, in base64, or in a Secret.

use base64::Engine;
use kube::ResourceExt;
use kubevirt_api::model::VirtualMachineInstance;
use serde_json::{json, Value};

use crate::volume_sources::{SourceKind, VolumeSources};

/// What goes on a seed disk: its label and its (path, contents) files.
pub struct Seed {
    pub label: &'static str,
    pub files: Vec<(&'static str, Vec<u8>)>,
}

/// Where one kind of data (user or network) may come from.
struct DataFields {
    inline: &'static str,
    encoded: &'static str,
    secret_ref: &'static str,
    /// The Secret keys KubeVirt reads, first found wins.
    secret_keys: [&'static str; 2],
}

const USER_DATA: DataFields = DataFields {
    inline: "userData",
    encoded: "userDataBase64",
    secret_ref: "secretRef",
    secret_keys: ["userdata", "userData"],
};

const NETWORK_DATA: DataFields = DataFields {
    inline: "networkData",
    encoded: "networkDataBase64",
    secret_ref: "networkDataSecretRef",
    secret_keys: ["networkdata", "networkData"],
};

/// How one kind of data was found.
enum Found {
    Data(Vec<u8>),
    /// A secret was named but holds none of the keys.
    MissingInSecret,
    NotGiven,
}

fn find(source: &Value, fields: &DataFields, sources: &VolumeSources) -> Result<Found, String> {
    if let Some(text) = source.get(fields.inline).and_then(Value::as_str) {
        return Ok(Found::Data(text.as_bytes().to_vec()));
    }
    if let Some(encoded) = source.get(fields.encoded).and_then(Value::as_str) {
        return base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map(Found::Data)
            .map_err(|e| format!("{} is not base64: {e}", fields.encoded));
    }
    let Some(name) = source
        .pointer(&format!("/{}/name", fields.secret_ref))
        .and_then(Value::as_str)
    else {
        return Ok(Found::NotGiven);
    };
    let files = sources
        .get(SourceKind::Secret, name)
        .ok_or_else(|| format!("secret {name:?} was not read"))?;
    Ok(fields
        .secret_keys
        .iter()
        .find_map(|key| files.get(*key))
        .map_or(Found::MissingInSecret, |data| Found::Data(data.clone())))
}

/// The seed of a `cloudInitNoCloud` (`nocloud`) or `cloudInitConfigDrive` volume.
pub fn seed(
    vmi: &VirtualMachineInstance,
    volume: &Value,
    source: &Value,
    nocloud: bool,
    sources: &VolumeSources,
) -> Result<Seed, String> {
    let user = find(source, &USER_DATA, sources)?;
    let network = find(source, &NETWORK_DATA, sources)?;
    // KubeVirt fails when both named Secrets lack their keys; a lone secretRef without
    // its key fails here too, rather than booting with empty user data.
    let nothing_found = matches!(user, Found::MissingInSecret | Found::NotGiven)
        && matches!(network, Found::MissingInSecret | Found::NotGiven);
    if nothing_found
        && (matches!(user, Found::MissingInSecret) || matches!(network, Found::MissingInSecret))
    {
        return Err(format!(
            "no cloud-init data-source found at volume: {}",
            volume["name"].as_str().unwrap_or_default()
        ));
    }
    let data = |found: Found| match found {
        Found::Data(bytes) => bytes,
        Found::MissingInSecret | Found::NotGiven => Vec::new(),
    };
    let (user, network) = (data(user), data(network));
    // KubeVirt's meta-data: NoCloud's instance-id and ConfigDrive's uuid are the
    // firmware UUID; ConfigDrive's instance_id is `<name>.<namespace>`.
    let uuid = vmi
        .spec
        .firmware()
        .and_then(|f| f.uuid.clone())
        .unwrap_or_else(|| vmi.uid().to_string());
    let host = vmi.name_any();
    let mut files: Vec<(&'static str, Vec<u8>)> = Vec::new();
    if nocloud {
        let meta = json!({"instance-id": uuid, "local-hostname": host});
        files.push(("meta-data", meta.to_string().into_bytes()));
        files.push(("user-data", user));
        if !network.is_empty() {
            files.push(("network-config", network));
        }
        return Ok(Seed {
            label: "cidata",
            files,
        });
    }
    let instance = format!("{host}.{}", vmi.namespace());
    let meta = json!({"instance_id": instance, "uuid": uuid, "hostname": host});
    files.push((
        "openstack/latest/meta_data.json",
        meta.to_string().into_bytes(),
    ));
    files.push(("openstack/latest/user_data", user));
    if !network.is_empty() {
        files.push(("openstack/latest/network_data.json", network));
    }
    Ok(Seed {
        label: "config-2",
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume_sources::Files;

    fn vmi() -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "ns", "uid": "u-1"},
            "spec": {"domain": {"firmware": {"uuid": "fw-1"}}}
        }))
        .unwrap()
    }

    fn secret(name: &str, keys: &[(&str, &str)]) -> VolumeSources {
        let files: Files = keys
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        VolumeSources::from_objects([(SourceKind::Secret, name.to_string(), files)])
    }

    fn file<'a>(seed: &'a Seed, path: &str) -> Option<&'a [u8]> {
        seed.files
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, c)| c.as_slice())
    }

    #[test]
    fn secret_refs_supply_user_and_network_data() {
        let volume = json!({"name": "ci"});
        let source = json!({"secretRef": {"name": "s"}, "networkDataSecretRef": {"name": "s"}});
        let sources = secret(
            "s",
            &[("userData", "#cloud-config\n"), ("networkdata", "v2")],
        );
        let seed = seed(&vmi(), &volume, &source, true, &sources).unwrap();
        assert_eq!(seed.label, "cidata");
        assert_eq!(file(&seed, "user-data"), Some(&b"#cloud-config\n"[..]));
        assert_eq!(file(&seed, "network-config"), Some(&b"v2"[..]));
        assert_eq!(
            file(&seed, "meta-data"),
            Some(&br#"{"instance-id":"fw-1","local-hostname":"vm1"}"#[..])
        );
        let drive = super::seed(&vmi(), &volume, &source, false, &sources).unwrap();
        assert_eq!(drive.label, "config-2");
        assert_eq!(
            file(&drive, "openstack/latest/network_data.json"),
            Some(&b"v2"[..])
        );
    }

    #[test]
    fn a_secret_without_the_keys_is_an_error_like_kubevirts() {
        let volume = json!({"name": "ci"});
        let source = json!({"secretRef": {"name": "s"}});
        let message = seed(
            &vmi(),
            &volume,
            &source,
            true,
            &secret("s", &[("other", "x")]),
        )
        .err()
        .unwrap();
        assert_eq!(message, "no cloud-init data-source found at volume: ci");
        // Inline user data with a network Secret lacking its key: fine, as in KubeVirt.
        let source = json!({"userData": "x", "networkDataSecretRef": {"name": "s"}});
        assert!(seed(&vmi(), &volume, &source, true, &secret("s", &[])).is_ok());
    }
}
