//! Sysprep volumes: a read-only CD whose files are the keys of a ConfigMap or Secret, for
//! Windows Setup to find its answer file on. Built as KubeVirt builds it: an ISO 9660
//! image (Joliet and Rock Ridge names) labelled `unattendCD`, made by `xorrisofs`.

use std::path::Path;

use kubevirt_api::model::VirtualMachineInstance;

use crate::volume_sources::{Files, VolumeSources};

/// The volume label Windows does not care about and KubeVirt uses.
const VOLUME_LABEL: &str = "unattendCD";
/// The answer files Windows Setup looks for (file names compared without case).
const ANSWER_FILES: [&str; 2] = ["autounattend.xml", "unattend.xml"];

/// KubeVirt refuses to build a sysprep drive without an answer file.
fn check_answer_file(files: &Files) -> Result<(), String> {
    let has_answer = files
        .keys()
        .any(|key| ANSWER_FILES.contains(&key.to_ascii_lowercase().as_str()));
    if has_answer {
        return Ok(());
    }
    let keys: Vec<&str> = files.keys().map(String::as_str).collect();
    Err(format!(
        "Sysprep drive should contain {} or {} but neither were found (keys: {})",
        ANSWER_FILES[0],
        ANSWER_FILES[1],
        if keys.is_empty() {
            "none".to_string()
        } else {
            keys.join(", ")
        }
    ))
}

/// Checks every sysprep volume of a VMI against the sources read for it: a message
/// naming the volume and its source when one cannot become a sysprep drive.
pub fn check(vmi: &VirtualMachineInstance, sources: &VolumeSources) -> Result<(), String> {
    for volume in vmi.spec.volumes() {
        let kubevirt_api::volumes::Source::Sysprep(sysprep) = &volume.source else {
            continue;
        };
        let name = &volume.name;
        let (kind, source, files) = sources
            .sysprep(sysprep)
            .ok_or_else(|| format!("volume {name}: no ConfigMap or Secret was read for it"))?;
        check_answer_file(files)
            .map_err(|e| format!("volume {name} ({} {source:?}): {e}", kind.noun()))?;
    }
    Ok(())
}

/// Writes the ISO at `iso`, its files staged in `staging` (removed afterwards).
pub async fn write_iso(staging: &Path, iso: &Path, files: &Files) -> Result<(), String> {
    check_answer_file(files)?;
    let _ = std::fs::remove_dir_all(staging);
    std::fs::create_dir_all(staging).map_err(|e| format!("creating {}: {e}", staging.display()))?;
    for (key, contents) in files {
        // The API server admits only `[-._a-zA-Z0-9]+` keys not starting with `..`; the
        // key is still checked here, where it becomes a file name.
        crate::host_paths::component("key", key)?;
        let path = staging.join(key);
        std::fs::write(&path, contents).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    let output = tokio::process::Command::new("xorrisofs")
        .arg("-output")
        .arg(iso)
        .args(["-volid", VOLUME_LABEL, "-joliet", "-rock"])
        .args(["-partition_cyl_align", "on"])
        .arg(staging)
        .output()
        .await;
    let _ = std::fs::remove_dir_all(staging);
    match output {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(crate::host_tools::XORRISOFS.missing_message())
        }
        Err(e) => Err(format!("running xorrisofs: {e}")),
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "xorrisofs failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume_sources::SourceKind;
    use serde_json::json;

    fn files(keys: &[&str]) -> Files {
        keys.iter()
            .map(|k| (k.to_string(), b"<x/>".to_vec()))
            .collect()
    }

    #[test]
    fn an_answer_file_is_required() {
        assert!(check_answer_file(&files(&["unattend.xml"])).is_ok());
        assert!(check_answer_file(&files(&["AutoUnattend.XML", "x"])).is_ok());
        assert_eq!(
            check_answer_file(&files(&["setup.cmd"])).unwrap_err(),
            "Sysprep drive should contain autounattend.xml or unattend.xml but neither were found (keys: setup.cmd)"
        );
    }

    #[test]
    fn check_names_the_volume_and_its_source() {
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "win"},
            "spec": {"volumes": [{"name": "sysprep", "sysprep": {"secret": {"name": "answers"}}}]}
        }))
        .unwrap();
        let sources = VolumeSources::from_objects([(
            SourceKind::Secret,
            "answers".to_string(),
            files(&["notes.txt"]),
        )]);
        let message = check(&vmi, &sources).unwrap_err();
        assert!(
            message
                .starts_with("volume sysprep (secret \"answers\"): Sysprep drive should contain"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn the_iso_holds_the_files_under_their_names() {
        if std::process::Command::new("xorrisofs")
            .arg("-version")
            .output()
            .is_err()
        {
            eprintln!("SKIPPED: xorrisofs is not installed");
            return;
        }
        let dir = std::env::temp_dir().join(format!("sysprep-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let iso = dir.join("sysprep.iso");
        let mut answers = files(&["unattend.xml"]);
        answers.insert("setup.cmd".into(), b"echo hi\r\n".to_vec());
        write_iso(&dir.join("staging"), &iso, &answers)
            .await
            .unwrap();
        let image = std::fs::read(&iso).unwrap();
        // The primary volume descriptor's label, and the file contents in the image.
        assert_eq!(&image[0x8001..0x8006], b"CD001");
        assert_eq!(
            &image[0x8028..0x8028 + VOLUME_LABEL.len()],
            VOLUME_LABEL.as_bytes()
        );
        assert!(image.windows(9).any(|w| w == b"echo hi\r\n"));
        assert!(!dir.join("staging").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
