//! The API objects a VMI uses: the ConfigMaps and Secrets its volumes name (sysprep answer
//! files, cloud-init user and network data, containerDisk and kernelBoot imagePullSecrets),
//! the claims behind its disks, and its migration's TLS Secret. The node agent reads them
//! to run the VMI; the API server lets a node read them only for VMIs bound to it
//! (kube's node authorizer follows the same edges from pods).

use serde_json::Value;

use crate::model::vmi::VmiSpec;
use crate::model::VirtualMachineInstance;
use crate::volumes::{Source, Volume};

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
fn volume_references(volume: &Volume) -> Vec<Reference> {
    let reference = |kind, name: &str| Reference {
        kind,
        name: name.to_string(),
        volume: volume.name.clone(),
    };
    let named = |kind, source: Option<&Value>| {
        let name = source?.get("name")?.as_str().filter(|n| !n.is_empty())?;
        Some(reference(kind, name))
    };
    let mut out = Vec::new();
    match &volume.source {
        Source::ContainerDisk(disk) => {
            if let Some(name) = disk.image_pull_secret.as_deref().filter(|n| !n.is_empty()) {
                out.push(reference(SourceKind::PullSecret, name));
            }
        }
        Source::Sysprep(sysprep) => {
            out.extend(named(SourceKind::ConfigMap, sysprep.get("configMap")));
            out.extend(named(SourceKind::Secret, sysprep.get("secret")));
        }
        Source::CloudInitNoCloud(source) | Source::CloudInitConfigDrive(source) => {
            for field in ["secretRef", "networkDataSecretRef"] {
                out.extend(named(SourceKind::Secret, source.get(field)));
            }
        }
        _ => {}
    }
    out
}

/// Every object the volumes of a VMI refer to, in volume order, then the kernelBoot
/// container's imagePullSecret (as volume `kernelBoot`).
pub fn of_vmi(vmi: &VirtualMachineInstance) -> Vec<Reference> {
    let spec = &vmi.spec;
    let mut out: Vec<Reference> = spec.volumes().iter().flat_map(volume_references).collect();
    let kernel_secret = spec
        .kernel_boot_container()
        .and_then(|c| c.image_pull_secret.as_deref());
    if let Some(name) = kernel_secret.filter(|n| !n.is_empty()) {
        out.push(Reference {
            kind: SourceKind::PullSecret,
            name: name.to_string(),
            volume: "kernelBoot".to_string(),
        });
    }
    out
}

/// The claims the volumes of a VMI use (`persistentVolumeClaim`, `dataVolume`), each
/// once.
pub fn claim_names(spec: &VmiSpec) -> Vec<String> {
    let mut names: Vec<String> = spec
        .volumes()
        .iter()
        .filter_map(|v| v.source.claim().map(str::to_string))
        .collect();
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// Whether a VMI uses the core object `plural`/`name` of its namespace: a volume source,
/// a claim, or its migration's TLS Secret.
pub fn uses(vmi: &VirtualMachineInstance, plural: &str, name: &str) -> bool {
    match plural {
        "persistentvolumeclaims" => claim_names(&vmi.spec).iter().any(|c| c == name),
        "secrets" | "configmaps" => {
            let migration_secret = plural == "secrets"
                && vmi
                    .migration_state()
                    .and_then(|m| m.migration_uid.as_deref())
                    .is_some_and(|uid| crate::names::migration_tls_secret(uid) == name);
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

    fn vmi() -> VirtualMachineInstance {
        serde_json::from_value(json!({
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
        }))
        .unwrap()
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
        assert_eq!(claim_names(&vmi().spec), ["c1", "d1"]);
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
