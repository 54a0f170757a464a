//! The API objects a VMI uses: the ConfigMaps and Secrets its volumes name (sysprep answer
//! files, cloud-init user and network data, containerDisk and kernelBoot imagePullSecrets),
//! the claims behind its disks, and its migration's TLS Secret. The node agent reads them
//! to run the VMI; the API server lets a node read them only for VMIs bound to it
//! (kube's node authorizer follows the same edges from pods).

use serde_json::Value;

use crate::model::MigrationState;
use crate::volumes::Volume;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceKind {
    ConfigMap,
    Secret,
    /// A Secret with registry credentials (`containerDisk.imagePullSecret`).
    PullSecret,
}

impl SourceKind {
    /// As kubectl and the kubelet name it in messages.
    pub fn noun(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "configmap",
            SourceKind::Secret => "secret",
            SourceKind::PullSecret => "imagePullSecret",
        }
    }

    /// The core resource (plural) the object is.
    pub fn plural(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "configmaps",
            SourceKind::Secret | SourceKind::PullSecret => "secrets",
        }
    }
}

/// One object a volume refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub kind: SourceKind,
    pub name: String,
    /// The VMI volume that names it.
    pub volume: String,
}

/// The objects `volume` refers to: a containerDisk's imagePullSecret, a sysprep source,
/// a cloud-init secretRef and networkDataSecretRef.
fn volume_references(volume: &Value) -> Vec<Reference> {
    let volume_name = volume["name"].as_str().unwrap_or_default();
    let named = |kind, source: Option<&Value>| {
        let name = source?.get("name")?.as_str().filter(|n| !n.is_empty())?;
        Some(Reference {
            kind,
            name: name.to_string(),
            volume: volume_name.to_string(),
        })
    };
    let mut out = Vec::new();
    if let Some(name) = volume
        .pointer("/containerDisk/imagePullSecret")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        out.push(Reference {
            kind: SourceKind::PullSecret,
            name: name.to_string(),
            volume: volume_name.to_string(),
        });
    }
    if let Some(sysprep) = volume.get("sysprep") {
        out.extend(named(SourceKind::ConfigMap, sysprep.get("configMap")));
        out.extend(named(SourceKind::Secret, sysprep.get("secret")));
    }
    for cloud_init in ["cloudInitNoCloud", "cloudInitConfigDrive"] {
        if let Some(source) = volume.get(cloud_init) {
            for field in ["secretRef", "networkDataSecretRef"] {
                out.extend(named(SourceKind::Secret, source.get(field)));
            }
        }
    }
    out
}

/// Every object the volumes of a VMI object refer to, in volume order, then the
/// kernelBoot container's imagePullSecret (as volume `kernelBoot`).
pub fn of_vmi(vmi: &Value) -> Vec<Reference> {
    let mut out: Vec<Reference> = vmi
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .map(|volumes| volumes.iter().flat_map(volume_references).collect())
        .unwrap_or_default();
    if let Some(name) = vmi
        .pointer("/spec/domain/firmware/kernelBoot/container/imagePullSecret")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        out.push(Reference {
            kind: SourceKind::PullSecret,
            name: name.to_string(),
            volume: "kernelBoot".to_string(),
        });
    }
    out
}

/// The claims the volumes of a VMI object use (`persistentVolumeClaim`, `dataVolume`),
/// each once.
pub fn claim_names(vmi: &Value) -> Vec<String> {
    let spec = vmi.get("spec").unwrap_or(&Value::Null);
    let mut names: Vec<String> = Volume::all_of(spec)
        .iter()
        .filter_map(|v| v.source.claim().map(str::to_string))
        .collect();
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// Whether a VMI object uses the core object `plural`/`name` of its namespace: a volume
/// source, a claim, or its migration's TLS Secret.
pub fn uses(vmi: &Value, plural: &str, name: &str) -> bool {
    match plural {
        "persistentvolumeclaims" => claim_names(vmi).iter().any(|c| c == name),
        "secrets" | "configmaps" => {
            let migration_secret = plural == "secrets"
                && MigrationState::of(vmi)
                    .and_then(|m| m.migration_uid)
                    .is_some_and(|uid| crate::names::migration_tls_secret(&uid) == name);
            migration_secret
                || of_vmi(vmi)
                    .iter()
                    .any(|r| r.kind.plural() == plural && r.name == name)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi() -> Value {
        json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default"},
            "spec": {"domain": {"firmware": {"kernelBoot": {"container": {"image": "k", "imagePullSecret": "kernelcred"}}}},
                "volumes": [
                {"name": "root", "containerDisk": {"image": "x", "imagePullSecret": "regcred"}},
                {"name": "sysprep", "sysprep": {"configMap": {"name": "answers"}}},
                {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "user"},
                                                   "networkDataSecretRef": {"name": "net"}}},
                {"name": "cd", "cloudInitConfigDrive": {"userData": "inline"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "c1"}},
                {"name": "dv", "dataVolume": {"name": "d1"}}
            ]},
            "status": {"migrationState": {"migrationUid": "u-1"}}
        })
    }

    #[test]
    fn finds_every_reference() {
        let found: Vec<(SourceKind, String, String)> = of_vmi(&vmi())
            .into_iter()
            .map(|r| (r.kind, r.name, r.volume))
            .collect();
        let expected = [
            (SourceKind::PullSecret, "regcred", "root"),
            (SourceKind::ConfigMap, "answers", "sysprep"),
            (SourceKind::Secret, "user", "ci"),
            (SourceKind::Secret, "net", "ci"),
            (SourceKind::PullSecret, "kernelcred", "kernelBoot"),
        ]
        .map(|(k, n, v)| (k, n.to_string(), v.to_string()));
        assert_eq!(found, expected);
        assert_eq!(claim_names(&vmi()), ["c1", "d1"]);
    }

    #[test]
    fn uses_follows_volumes_claims_and_the_migration_secret() {
        let vmi = vmi();
        for (plural, name) in [
            ("secrets", "regcred"),
            ("secrets", "user"),
            ("secrets", "kernelcred"),
            ("secrets", "virtplane-migration-u-1"),
            ("configmaps", "answers"),
            ("persistentvolumeclaims", "c1"),
            ("persistentvolumeclaims", "d1"),
        ] {
            assert!(uses(&vmi, plural, name), "{plural}/{name}");
        }
        for (plural, name) in [
            ("secrets", "answers"),
            ("configmaps", "user"),
            ("secrets", "other"),
            ("persistentvolumeclaims", "regcred"),
            ("nodes", "c1"),
        ] {
            assert!(!uses(&vmi, plural, name), "{plural}/{name}");
        }
    }
}
