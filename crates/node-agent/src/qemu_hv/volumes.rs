//! Readying the files behind a VMI's volumes (containerDisk overlays, empty disks,
//! cloud-init and sysprep seeds, host disks, claims) and its kernelBoot files.

use std::path::{Path, PathBuf};

use kubevirt_api::model::VirtualMachineInstance;
use kubevirt_api::volumes::{ContainerDisk, EmptyDisk, HostDisk, Source, Volume};
use qemu::{DiskFormat, KernelBoot};

use super::driver::Driver;
use super::{failed, start_failed, unable};
use crate::host_paths;
use crate::host_tools::{QEMU_IMG, XORRISOFS};
use crate::hypervisor::{Prepared, Started};
use crate::volume_sources::{Claim, VolumeSources};

/// Bytes of a Kubernetes quantity (`128Mi`, `1G`), with KubeVirt's parser.
pub(super) fn quantity_bytes(text: &str) -> Option<u64> {
    kubevirt_api::quantity::Quantity::parse(text).and_then(|q| u64::try_from(q.value()).ok())
}

/// Runs qemu-img; a node without it cannot make the disk however often it tries.
async fn qemu_img(args: &[&str]) -> Result<(), Prepared> {
    let out = match tokio::process::Command::new(QEMU_IMG.name)
        .args(args)
        .output()
        .await
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(unable(QEMU_IMG)),
        Err(e) => return Err(failed("FailedCreate", format!("qemu-img: {e}"))),
    };
    if out.status.success() {
        Ok(())
    } else {
        Err(failed(
            "FailedCreate",
            format!(
                "qemu-img {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
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

/// The image of a containerDisk volume or of the kernelBoot container, with how to pull it.
pub(super) struct ImageSource<'a> {
    /// The containerDisk volume's name; `None` for the kernelBoot container.
    pub volume: Option<&'a str>,
    pub image: &'a str,
    pub pull_secret: Option<&'a str>,
    pub pull_policy: Option<&'a str>,
}

impl ImageSource<'_> {
    /// The field an imagePullSecret goes in, for messages.
    fn secret_field(&self) -> String {
        match self.volume {
            Some(name) => format!("the containerDisk of volume {name} an imagePullSecret"),
            None => "kernelBoot.container an imagePullSecret".to_string(),
        }
    }

    /// The image ID the VMI's status recorded for this image, if it is still this image.
    fn pin(&self, vmi: &VirtualMachineInstance) -> Option<String> {
        let ids = crate::vmi_status::image_ids(vmi);
        let pin = match self.volume {
            Some(name) => ids.volumes.get(name).cloned(),
            None => ids.kernel,
        }?;
        let same = oci::Reference::parse(&pin)
            .ok()
            .zip(oci::Reference::parse(self.image).ok())
            .is_some_and(|(p, i)| p.name() == i.name() && p.digest().is_some());
        same.then_some(pin)
    }
}

/// What a pull returns: the disk file, or the files under the wanted paths.
pub(super) enum Wanted<'a> {
    /// A containerDisk: the file at this path, or the one under `/disk/`.
    Disk(Option<&'a str>),
    Files(&'a [&'a str]),
}

impl Driver {
    /// Pulls an image for a VMI once: later asks reuse the files of the first, and once
    /// the VMI's status records the image ID it was pulled as, that image is pulled (a
    /// start after an agent restart, a migration target). Fails with the kubelet's
    /// reason and a message that says what to do.
    pub(super) async fn pull(
        &mut self,
        vmi: &VirtualMachineInstance,
        source: &ImageSource<'_>,
        sources: &VolumeSources,
        wanted: Wanted<'_>,
    ) -> Result<Vec<(String, PathBuf)>, (&'static str, String)> {
        let pin = source.pin(vmi);
        let image = pin.as_deref().unwrap_or(source.image);
        let wanted_key = match &wanted {
            Wanted::Disk(path) => format!("disk:{}", path.unwrap_or("")),
            Wanted::Files(files) => files.join("\n"),
        };
        let key = (image.to_string(), wanted_key);
        let (files, image_id) = match self.pulled.get(&key).cloned() {
            Some(known) => known,
            None => {
                let pulled = self
                    .pull_from_registry(vmi, source, image, pin.is_some(), sources, &wanted)
                    .await?;
                self.pulled.insert(key, pulled.clone());
                pulled
            }
        };
        match source.volume {
            Some(name) => {
                self.image_ids.volumes.insert(name.to_string(), image_id);
            }
            None => self.image_ids.kernel = Some(image_id),
        }
        Ok(files)
    }

    async fn pull_from_registry(
        &self,
        vmi: &VirtualMachineInstance,
        source: &ImageSource<'_>,
        image: &str,
        pinned: bool,
        sources: &VolumeSources,
        wanted: &Wanted<'_>,
    ) -> Result<(Vec<(String, PathBuf)>, String), (&'static str, String)> {
        let reference = oci::Reference::parse(image).map_err(|e| {
            let e = oci::PullError::from(e);
            (e.reason(), e.to_string())
        })?;
        let namespace = vmi.namespace().to_string();
        let credentials = match source.pull_secret {
            None => Vec::new(),
            Some(name) => {
                // `VolumeSources::read` waits for a missing Secret, so it is here.
                let (kind, files) = sources.pull_secret(name).ok_or_else(|| {
                    (
                        "ErrImagePull",
                        format!("imagePullSecret {name:?} was not read"),
                    )
                })?;
                oci::Keyring::from_secret(kind, files)
                    .map_err(|e| {
                        (
                            "ErrImagePull",
                            format!("imagePullSecret {name:?} in namespace {namespace}: {e}"),
                        )
                    })?
                    .lookup(&reference)
            }
        };
        let had_credentials = !credentials.is_empty();
        let policy = if pinned {
            // The VMI's own image: from the cache when it is there.
            oci::PullPolicy::IfNotPresent
        } else {
            source
                .pull_policy
                .and_then(oci::PullPolicy::parse)
                .unwrap_or_else(|| oci::PullPolicy::default_for(&reference))
        };
        let options = oci::PullOptions {
            credentials,
            policy,
            ca_bundle: None,
            progress: None,
        };
        let pulled = match wanted {
            Wanted::Disk(path) => self
                .puller
                .pull_disk(image, &options, *path)
                .await
                .map(|disk| {
                    (
                        vec![(path.unwrap_or("/disk/").to_string(), disk.path)],
                        disk.image_id,
                    )
                }),
            Wanted::Files(files) => self
                .puller
                .pull(image, &options, files)
                .await
                .map(|p| (p.files, p.image_id)),
        };
        pulled.map_err(|e| {
            let mut message = e.to_string();
            if matches!(e, oci::PullError::Unauthorized { .. } | oci::PullError::Denied { .. }) {
                let registry = reference.registry();
                match source.pull_secret {
                    None => message.push_str(&format!(
                        "; to pull it with credentials, give {}: a kubernetes.io/dockerconfigjson Secret in namespace {namespace} with an entry for {registry} (kubectl create secret docker-registry NAME --docker-server={registry} --docker-username=USER --docker-password=PASSWORD)",
                        source.secret_field()
                    )),
                    Some(name) if !had_credentials => message.push_str(&format!(
                        "; imagePullSecret {name:?} has no credentials for {registry}"
                    )),
                    Some(name) => message.push_str(&format!(" (credentials from imagePullSecret {name:?})")),
                }
            }
            (e.reason(), message)
        })
    }

    /// Makes the file behind one volume ready, and the VMI's QEMU able to open it, and
    /// says where it is and in which format.
    pub(super) async fn prepare_volume(
        &mut self,
        vmi: &VirtualMachineInstance,
        volume: &Volume,
        sources: &VolumeSources,
    ) -> Result<(PathBuf, DiskFormat), Prepared> {
        let (path, format) = self.volume_file(vmi, volume, sources).await?;
        if let Some(users) = &self.users {
            // Files outside the VMI's dir (a claim in DIR/volumes/<ns>, a hostDisk) need
            // their dirs passable too.
            let outside = !path.starts_with(self.dir(vmi));
            if let (true, Some(parent)) = (outside, path.parent()) {
                let passable = if matches!(volume.source, Source::HostDisk(_)) {
                    users.pass_through_tree(parent)
                } else {
                    users.pass_through(parent)
                };
                passable
                    .map_err(|e| failed("FailedCreate", format!("volume {}: {e}", volume.name)))?;
            }
            let read_only = matches!(volume.source, Source::Sysprep(_));
            self.grant(vmi, &path, read_only)
                .map_err(|e| failed("FailedCreate", format!("volume {}: {e}", volume.name)))?;
        }
        Ok((path, format))
    }

    /// The file behind one volume, made ready.
    async fn volume_file(
        &mut self,
        vmi: &VirtualMachineInstance,
        volume: &Volume,
        sources: &VolumeSources,
    ) -> Result<(PathBuf, DiskFormat), Prepared> {
        let dir = self.dir(vmi);
        let name = if volume.name.is_empty() {
            "volume"
        } else {
            volume.name.as_str()
        };
        // The name becomes file names in the VMI's dir (`NAME.qcow2`, `NAME-seed.img`).
        host_paths::component("volume name", name).map_err(|e| failed("FailedCreate", e))?;
        match &volume.source {
            Source::ContainerDisk(cd) => self.container_disk(vmi, &dir, name, cd, sources).await,
            Source::EmptyDisk(empty) => empty_disk(&dir, name, empty).await,
            Source::CloudInitNoCloud(source) | Source::CloudInitConfigDrive(source) => {
                let nocloud = matches!(volume.source, Source::CloudInitNoCloud(_));
                cloud_init_seed(vmi, &dir, name, volume, source, nocloud, sources)
            }
            Source::Sysprep(sysprep) => sysprep_iso(&dir, name, sysprep, sources).await,
            Source::HostDisk(host) => self.host_disk(name, host),
            source => match source.claim() {
                Some(claim) => self.claim_file(vmi, claim, sources),
                None => Err(failed(
                    "FailedCreate",
                    format!(
                        "volume {name}: this kind of volume is not supported on virtplane nodes yet"
                    ),
                )),
            },
        }
    }

    /// A containerDisk: a qcow2 overlay in the VMI's dir over the image's disk.
    async fn container_disk(
        &mut self,
        vmi: &VirtualMachineInstance,
        dir: &Path,
        name: &str,
        cd: &ContainerDisk,
        sources: &VolumeSources,
    ) -> Result<(PathBuf, DiskFormat), Prepared> {
        let image = ImageSource {
            volume: Some(name),
            image: &cd.image,
            pull_secret: cd.image_pull_secret.as_deref().filter(|s| !s.is_empty()),
            pull_policy: cd.image_pull_policy.as_deref(),
        };
        let extracted = self
            .pull(vmi, &image, sources, Wanted::Disk(cd.path.as_deref()))
            .await
            .map_err(|(reason, message)| failed(reason, message))?;
        let base = extracted
            .first()
            .map(|(_, p)| p.clone())
            .ok_or_else(|| failed("ErrImagePull", format!("image {} has no disk", cd.image)))?;
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
            .await?;
        }
        Ok((overlay, DiskFormat::Qcow2))
    }

    /// A hostDisk: a file within the node's --host-disk-dir, made when `DiskOrCreate`.
    fn host_disk(&self, name: &str, host: &HostDisk) -> Result<(PathBuf, DiskFormat), Prepared> {
        // The file the spec's path leads to, symlinks followed, is the one QEMU gets:
        // a link in an allowed dir that points out of it is refused like `..`.
        let what = format!("hostDisk {}", host.path);
        let path =
            host_paths::resolve_within(&what, Path::new(&host.path), &self.config.host_disk_dirs)
                .map_err(|e| {
                failed(
                    "FailedCreate",
                    format!("volume {name}: {e} (--host-disk-dir)"),
                )
            })?;
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
            host_paths::create_new_file(&path, capacity).map_err(|e| {
                failed(
                    "FailedCreate",
                    format!("creating hostDisk {}: {e}", path.display()),
                )
            })?;
        }
        let format = image_format(&path);
        Ok((path, format))
    }

    /// A claim's file, which must be in the node's volume pool.
    fn claim_file(
        &self,
        vmi: &VirtualMachineInstance,
        claim: &str,
        sources: &VolumeSources,
    ) -> Result<(PathBuf, DiskFormat), Prepared> {
        let namespace = vmi.namespace().to_string();
        let path = match sources.claim(claim) {
            // The path is the claim's `virtplane.io/volume-path` annotation, which
            // anyone who may edit the claim can write: only a file in the volume
            // pool is used, whatever the annotation says.
            Claim::Bound(path) if path.exists() => host_paths::resolve_within(
                &format!("the disk {} of PVC {namespace}/{claim}", path.display()),
                path,
                &self.config.claim_dirs,
            )
            .map_err(|e| failed("FailedPvcNotFound", e))?,
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
        Ok((path, format))
    }

    pub(super) async fn kernel_boot(
        &mut self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
    ) -> Result<Option<KernelBoot>, Started> {
        let Some(kb) = vmi.spec.firmware().and_then(|f| f.kernel_boot.as_ref()) else {
            return Ok(None);
        };
        let args = kb.kernel_args.clone().unwrap_or_default();
        let Some(container) = kb.container.as_ref() else {
            return Ok(None);
        };
        let image = container.image.as_deref().unwrap_or("");
        let kernel_path = container.kernel_path.as_deref().unwrap_or("");
        let initrd_path = container.initrd_path.as_deref();
        let mut wanted = vec![kernel_path];
        wanted.extend(initrd_path);
        let source = ImageSource {
            volume: None,
            image,
            pull_secret: container
                .image_pull_secret
                .as_deref()
                .filter(|s| !s.is_empty()),
            pull_policy: container.image_pull_policy.as_deref(),
        };
        let extracted = self
            .pull(vmi, &source, sources, Wanted::Files(&wanted))
            .await
            .map_err(|(reason, message)| start_failed(reason, message))?;
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

/// An emptyDisk: a sparse qcow2 of its capacity in the VMI's dir.
async fn empty_disk(
    dir: &Path,
    name: &str,
    empty: &EmptyDisk,
) -> Result<(PathBuf, DiskFormat), Prepared> {
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
        .await?;
    }
    Ok((path, DiskFormat::Qcow2))
}

/// A cloud-init NoCloud or ConfigDrive seed disk (FAT) in the VMI's dir.
fn cloud_init_seed(
    vmi: &VirtualMachineInstance,
    dir: &Path,
    name: &str,
    volume: &Volume,
    source: &serde_json::Value,
    nocloud: bool,
    sources: &VolumeSources,
) -> Result<(PathBuf, DiskFormat), Prepared> {
    let seed = crate::cloud_init::seed(vmi, &volume.raw, source, nocloud, sources)
        .map_err(|e| failed("FailedCreate", e))?;
    let path = dir.join(format!("{name}-seed.img"));
    crate::seed::write_fat_image(&path, seed.label, &seed.files)
        .map_err(|e| failed("FailedCreate", format!("seed disk: {e}")))?;
    Ok((path, DiskFormat::Raw))
}

/// A sysprep volume: its ConfigMap's or Secret's files on an ISO in the VMI's dir.
async fn sysprep_iso(
    dir: &Path,
    name: &str,
    sysprep: &serde_json::Value,
    sources: &VolumeSources,
) -> Result<(PathBuf, DiskFormat), Prepared> {
    let (_, _, files) = sources.sysprep(sysprep).ok_or_else(|| {
        failed(
            "FailedCreate",
            format!("volume {name}: its ConfigMap or Secret was not read"),
        )
    })?;
    if !XORRISOFS.installed() {
        return Err(unable(XORRISOFS));
    }
    let iso = dir.join(format!("{name}-sysprep.iso"));
    crate::sysprep::write_iso(&dir.join(format!("{name}-sysprep")), &iso, files)
        .await
        .map_err(|e| failed("FailedCreate", format!("volume {name}: {e}")))?;
    Ok((iso, DiskFormat::Raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_recorded_image_id_pins_the_same_image_only() {
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default"},
            "status": {"volumeStatus": [{"name": "root", "target": "vda",
                "containerDiskVolume": {"imageID": format!("docker.io/library/fedora@{DIGEST}")}}],
                "kernelBootStatus": {"imageID": "not a reference"}},
        }))
        .unwrap();
        let source = |volume, image| ImageSource {
            volume,
            image,
            pull_secret: None,
            pull_policy: None,
        };
        assert_eq!(
            source(Some("root"), "fedora:40").pin(&vmi),
            Some(format!("docker.io/library/fedora@{DIGEST}"))
        );
        // Another image in the spec (or another volume): no pin.
        assert_eq!(
            source(Some("root"), "quay.io/containerdisks/fedora:40").pin(&vmi),
            None
        );
        assert_eq!(source(Some("data"), "fedora:40").pin(&vmi), None);
        assert_eq!(source(None, "fedora:40").pin(&vmi), None);
    }
}
