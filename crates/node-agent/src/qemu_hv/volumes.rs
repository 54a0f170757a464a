//! Readying the files behind a VMI's volumes (containerDisk overlays, empty disks,
//! cloud-init and sysprep seeds, host disks, claims) and its kernelBoot files.

use std::path::{Path, PathBuf};

use kube::core::DynamicObject;
use kube::ResourceExt;
use kubevirt_api::volumes::{Source, Volume};
use qemu::{DiskFormat, KernelBoot};

use super::{failed, spec, start_failed, Qemu};
use crate::hypervisor::{Prepared, Started};
use crate::volume_sources::{Claim, VolumeSources};

/// Bytes of a Kubernetes quantity (`128Mi`, `1G`), with KubeVirt's parser.
pub(super) fn quantity_bytes(text: &str) -> Option<u64> {
    kubevirt_api::quantity::Quantity::parse(text).and_then(|q| u64::try_from(q.value()).ok())
}

async fn qemu_img(args: &[&str]) -> Result<(), String> {
    let out = tokio::process::Command::new("qemu-img")
        .args(args)
        .output()
        .await
        .map_err(|e| format!("qemu-img: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "qemu-img {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Detects qcow2 by its magic; anything else is raw.
fn image_format(path: &Path) -> DiskFormat {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let qcow = std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"QFI\xfb";
    if qcow {
        DiskFormat::Qcow2
    } else {
        DiskFormat::Raw
    }
}

impl Qemu {
    /// Pulls `image` for a VMI once: later asks reuse the files (and digest) of the first.
    async fn pull(
        &self,
        vmi: &DynamicObject,
        image: &str,
        wanted: &[&str],
    ) -> Result<Vec<(String, PathBuf)>, crate::images::ImageError> {
        let key = (
            vmi.uid().unwrap_or_default(),
            image.to_string(),
            wanted.join("\n"),
        );
        let known = self
            .pulled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        if let Some(files) = known {
            return Ok(files);
        }
        let files = self.puller.pull(image, wanted).await?.files;
        self.pulled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, files.clone());
        Ok(files)
    }

    /// Makes the file behind one volume ready and says where it is and in which format.
    pub(super) async fn prepare_volume(
        &self,
        vmi: &DynamicObject,
        volume: &Volume,
        sources: &VolumeSources,
    ) -> Result<(PathBuf, DiskFormat), Prepared> {
        let dir = self.dir(vmi);
        let name = if volume.name.is_empty() {
            "volume"
        } else {
            volume.name.as_str()
        };
        if let Source::ContainerDisk(cd) = &volume.source {
            let image = cd.image.as_str();
            let extracted = self
                .pull(vmi, image, &["/disk/"])
                .await
                .map_err(|e| failed("ErrImagePull", e.to_string()))?;
            let wanted = cd.path.as_deref();
            let base = extracted
                .iter()
                .find(|(p, _)| wanted.is_none_or(|w| p == w))
                .map(|(_, p)| p.clone())
                .ok_or_else(|| {
                    failed(
                        "ErrImagePull",
                        format!("image {image} has no disk under /disk/"),
                    )
                })?;
            let overlay = dir.join(format!("{name}.qcow2"));
            if !overlay.exists() {
                let base_text = base.display().to_string();
                let format = image_format(&base).as_str();
                let overlay_text = overlay.display().to_string();
                qemu_img(&[
                    "create",
                    "-q",
                    "-f",
                    "qcow2",
                    "-F",
                    format,
                    "-b",
                    &base_text,
                    &overlay_text,
                ])
                .await
                .map_err(|e| failed("FailedCreate", e))?;
            }
            return Ok((overlay, DiskFormat::Qcow2));
        }
        if let Source::EmptyDisk(empty) = &volume.source {
            let capacity = empty
                .capacity
                .as_deref()
                .and_then(quantity_bytes)
                .unwrap_or(1 << 30);
            let path = dir.join(format!("{name}.qcow2"));
            if !path.exists() {
                let size = capacity.to_string();
                qemu_img(&[
                    "create",
                    "-q",
                    "-f",
                    "qcow2",
                    &path.display().to_string(),
                    &size,
                ])
                .await
                .map_err(|e| failed("FailedCreate", e))?;
            }
            return Ok((path, DiskFormat::Qcow2));
        }
        if let Source::CloudInitNoCloud(source) | Source::CloudInitConfigDrive(source) =
            &volume.source
        {
            let nocloud = matches!(volume.source, Source::CloudInitNoCloud(_));
            let seed = crate::cloud_init::seed(vmi, &volume.raw, source, nocloud, sources)
                .map_err(|e| failed("FailedCreate", e))?;
            let path = dir.join(format!("{name}-seed.img"));
            crate::seed::write_fat_image(&path, seed.label, &seed.files)
                .map_err(|e| failed("FailedCreate", format!("seed disk: {e}")))?;
            return Ok((path, DiskFormat::Raw));
        }
        if let Source::Sysprep(sysprep) = &volume.source {
            let (_, _, files) = sources.sysprep(sysprep).ok_or_else(|| {
                failed(
                    "FailedCreate",
                    format!("volume {name}: its ConfigMap or Secret was not read"),
                )
            })?;
            let iso = dir.join(format!("{name}-sysprep.iso"));
            crate::sysprep::write_iso(&dir.join(format!("{name}-sysprep")), &iso, files)
                .await
                .map_err(|e| failed("FailedCreate", format!("volume {name}: {e}")))?;
            return Ok((iso, DiskFormat::Raw));
        }
        if let Source::HostDisk(host) = &volume.source {
            let path = PathBuf::from(&host.path);
            let allowed = self
                .config
                .host_disk_dirs
                .iter()
                .any(|d| path.starts_with(d) && path != *d);
            if !allowed
                || path
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err(failed(
                    "FailedCreate",
                    format!(
                        "hostDisk {} is outside the directories this node allows (--host-disk-dir)",
                        path.display()
                    ),
                ));
            }
            if !path.exists() {
                if host.kind.as_deref() != Some("DiskOrCreate") {
                    return Err(failed(
                        "FailedCreate",
                        format!("hostDisk {} does not exist", path.display()),
                    ));
                }
                let capacity = host
                    .capacity
                    .as_deref()
                    .and_then(quantity_bytes)
                    .unwrap_or(1 << 30);
                let file =
                    std::fs::File::create(&path).and_then(|f| f.set_len(capacity).map(|_| f));
                file.map_err(|e| {
                    failed(
                        "FailedCreate",
                        format!("creating hostDisk {}: {e}", path.display()),
                    )
                })?;
            }
            let format = image_format(&path);
            return Ok((path, format));
        }
        if let Some(claim) = volume.source.claim() {
            let namespace = vmi.namespace().unwrap_or_default();
            let path = match sources.claim(claim) {
                Claim::Bound(path) if path.exists() => path.clone(),
                Claim::Bound(path) => {
                    return Err(failed(
                        "FailedPvcNotFound",
                        format!(
                            "PVC {namespace}/{claim}: its disk {} is not on this node",
                            path.display()
                        ),
                    ))
                }
                Claim::Unbound => {
                    return Err(failed(
                        "FailedPvcNotFound",
                        format!("PVC {namespace}/{claim} is not bound yet"),
                    ))
                }
                Claim::Missing => {
                    return Err(failed(
                        "FailedPvcNotFound",
                        format!("PVC {namespace}/{claim} does not exist"),
                    ))
                }
            };
            let format = image_format(&path);
            return Ok((path, format));
        }
        Err(failed(
            "FailedCreate",
            format!("volume {name}: this kind of volume is not supported on virtplane nodes yet"),
        ))
    }

    pub(super) async fn kernel_boot(
        &self,
        vmi: &DynamicObject,
    ) -> Result<Option<KernelBoot>, Started> {
        let Some(kb) = spec(vmi).pointer("/domain/firmware/kernelBoot") else {
            return Ok(None);
        };
        let args = kb["kernelArgs"].as_str().unwrap_or("").to_string();
        let Some(container) = kb.get("container") else {
            return Ok(None);
        };
        let image = container["image"].as_str().unwrap_or("");
        let kernel_path = container["kernelPath"].as_str().unwrap_or("");
        let initrd_path = container["initrdPath"].as_str();
        let mut wanted = vec![kernel_path];
        wanted.extend(initrd_path);
        let extracted = self
            .pull(vmi, image, &wanted)
            .await
            .map_err(|e| start_failed("ErrImagePull", e.to_string()))?;
        let find = |p: &str| {
            extracted
                .iter()
                .find(|(path, _)| path == p)
                .map(|(_, f)| f.clone())
        };
        let kernel = find(kernel_path).ok_or_else(|| {
            start_failed(
                "ErrImagePull",
                format!("image {image} has no {kernel_path}"),
            )
        })?;
        let initrd = match initrd_path {
            Some(p) => Some(find(p).ok_or_else(|| {
                start_failed("ErrImagePull", format!("image {image} has no {p}"))
            })?),
            None => None,
        };
        Ok(Some(KernelBoot {
            kernel,
            initrd,
            cmdline: args,
        }))
    }
}
