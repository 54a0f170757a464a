//! The QEMU hypervisor: each VMI is one QEMU process (KVM when usable, software
//! emulation otherwise), with its disks, seeds and console under
//! `DIR/vmi/<namespace>/<name>/` of the node's data dir.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube::core::DynamicObject;
use kube::ResourceExt;
use qemu::{
    Accel, Bus, CacheMode, Disk, DiskFormat, DiskMedia, Firmware, Instance, KernelBoot,
    MachineSpec, Nic, NicModel, PortForward, Protocol, RunState, RunStatus, WatchdogAction,
};
use serde_json::{json, Value};
use tokio::sync::broadcast;

use crate::hypervisor::{GuestInfo, Hypervisor, Observed, PauseCause, Prepared, Started, Stopping};
use crate::images::Puller;
use crate::volume_sources::VolumeSources;

#[derive(Clone, Debug)]
pub struct QemuConfig {
    /// The node's data dir: `DIR/node/<node>`.
    pub node_dir: PathBuf,
    /// Where pulled images are cached (shared by the nodes of one host).
    pub image_cache: PathBuf,
    pub binary: PathBuf,
    pub insecure_registries: Vec<String>,
    pub host_disk_dirs: Vec<PathBuf>,
    /// The address port forwards listen on.
    pub node_address: String,
    pub millicpu: i64,
    pub memory: i64,
    /// How guests' vCPUs run on this node (chosen with `qemu::accel::choose`).
    pub accel: Accel,
}

const OVMF_DIR: &str = "/usr/share/OVMF";

/// A port forward handed out: (interface, ports entry name, node port, guest port).
type Forward = (String, String, u16, u16);

/// Files taken out of an image (path inside it, path here), by (VMI uid, image, wanted paths).
type Pulled = HashMap<(String, String, String), Vec<(String, PathBuf)>>;

struct Running {
    instance: Instance,
    stop_started: Option<Instant>,
}

/// One VMI's QEMU behind a lock of its own: a slow QMP call (a frozen QEMU, a long block
/// job) on one VMI never holds up another.
type Slot = Arc<tokio::sync::Mutex<Option<Running>>>;

pub struct Qemu {
    config: QemuConfig,
    puller: Puller,
    /// By VMI uid. The map's lock is held only to find a slot, never across an await.
    slots: Mutex<HashMap<String, Slot>>,
    /// Port forwards handed out, by VMI uid.
    forwards: Mutex<HashMap<String, Vec<Forward>>>,
    /// Files pulled for a VMI, by (uid, image, wanted paths): start asks for what prepare
    /// just pulled, and asking the registry again costs a round trip per image.
    pulled: Mutex<Pulled>,
    changes: broadcast::Sender<(String, String)>,
}

fn failed(reason: &str, message: impl Into<String>) -> Prepared {
    Prepared::Failed {
        reason: reason.into(),
        message: message.into(),
    }
}

fn start_failed(reason: &str, message: impl Into<String>) -> Started {
    Started::Failed {
        reason: reason.into(),
        message: message.into(),
    }
}

fn spec(vmi: &DynamicObject) -> &Value {
    vmi.data.get("spec").unwrap_or(&Value::Null)
}

fn volumes(vmi: &DynamicObject) -> Vec<Value> {
    spec(vmi)
        .get("volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Bytes of a Kubernetes quantity (`128Mi`, `1G`), with KubeVirt's parser.
fn quantity_bytes(text: &str) -> Option<u64> {
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

fn free_port(address: &str) -> Option<u16> {
    TcpListener::bind((address, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .ok()
}

/// A stable locally administered MAC for an interface of a VMI.
fn mac_for(uid: &str, index: usize) -> String {
    let hash = uid.bytes().fold(index as u64 * 131, |acc, b| {
        acc.wrapping_mul(31).wrapping_add(u64::from(b))
    });
    let b = hash.to_be_bytes();
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[3], b[4], b[5], b[6], b[7]
    )
}

impl Qemu {
    pub fn new(config: QemuConfig) -> Qemu {
        let puller = Puller::new(
            config.image_cache.clone(),
            config.insecure_registries.clone(),
        );
        let (changes, _) = broadcast::channel(256);
        Qemu {
            config,
            puller,
            slots: Mutex::new(HashMap::new()),
            forwards: Mutex::new(HashMap::new()),
            pulled: Mutex::new(HashMap::new()),
            changes,
        }
    }

    /// `DIR/vmi/<namespace>/<name>/`: the runtime files of one VMI.
    pub fn vmi_dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.config.node_dir.join("vmi").join(namespace).join(name)
    }

    fn dir(&self, vmi: &DynamicObject) -> PathBuf {
        self.vmi_dir(&vmi.namespace().unwrap_or_default(), &vmi.name_any())
    }

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

    /// The serial console socket of a VMI, for the console proxy.
    pub fn console_socket(&self, namespace: &str, name: &str) -> PathBuf {
        self.vmi_dir(namespace, name).join("console.sock")
    }

    /// Makes the file behind one volume ready and says where it is and in which format.
    async fn prepare_volume(
        &self,
        vmi: &DynamicObject,
        volume: &Value,
        sources: &VolumeSources,
    ) -> Result<(PathBuf, DiskFormat), Prepared> {
        let dir = self.dir(vmi);
        let name = volume["name"].as_str().unwrap_or("volume");
        if let Some(cd) = volume.get("containerDisk") {
            let image = cd["image"].as_str().unwrap_or("");
            let extracted = self
                .pull(vmi, image, &["/disk/"])
                .await
                .map_err(|e| failed("ErrImagePull", e.to_string()))?;
            let wanted = cd.get("path").and_then(Value::as_str);
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
        if let Some(empty) = volume.get("emptyDisk") {
            let capacity = empty["capacity"]
                .as_str()
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
        if let Some(source) = volume
            .get("cloudInitNoCloud")
            .or_else(|| volume.get("cloudInitConfigDrive"))
        {
            let nocloud = volume.get("cloudInitNoCloud").is_some();
            let seed = crate::cloud_init::seed(vmi, volume, source, nocloud, sources)
                .map_err(|e| failed("FailedCreate", e))?;
            let path = dir.join(format!("{name}-seed.img"));
            crate::seed::write_fat_image(&path, seed.label, &seed.files)
                .map_err(|e| failed("FailedCreate", format!("seed disk: {e}")))?;
            return Ok((path, DiskFormat::Raw));
        }
        if let Some(sysprep) = volume.get("sysprep") {
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
        if let Some(host) = volume.get("hostDisk") {
            let path = PathBuf::from(host["path"].as_str().unwrap_or(""));
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
                if host["type"] != "DiskOrCreate" {
                    return Err(failed(
                        "FailedCreate",
                        format!("hostDisk {} does not exist", path.display()),
                    ));
                }
                let capacity = host["capacity"]
                    .as_str()
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
        let claim = volume
            .pointer("/persistentVolumeClaim/claimName")
            .or_else(|| volume.pointer("/dataVolume/name"))
            .and_then(Value::as_str);
        if let Some(claim) = claim {
            let path = self
                .config
                .node_dir
                .parent()
                .and_then(Path::parent)
                .unwrap_or(&self.config.node_dir)
                .join("volumes")
                .join(vmi.namespace().unwrap_or_default())
                .join(claim);
            if !path.exists() {
                return Err(failed(
                    "FailedPvcNotFound",
                    format!(
                        "PVC {}/{claim} does not exist",
                        vmi.namespace().unwrap_or_default()
                    ),
                ));
            }
            let format = image_format(&path);
            return Ok((path, format));
        }
        Err(failed(
            "FailedCreate",
            format!("volume {name}: this kind of volume is not supported on virtplane nodes yet"),
        ))
    }

    async fn kernel_boot(&self, vmi: &DynamicObject) -> Result<Option<KernelBoot>, Started> {
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

    async fn machine(
        &self,
        vmi: &DynamicObject,
        sources: &VolumeSources,
    ) -> Result<MachineSpec, Started> {
        let s = spec(vmi);
        let domain = s.get("domain").cloned().unwrap_or(Value::Null);
        let dir = self.dir(vmi);
        let get_u32 = |p: &str| {
            domain
                .pointer(p)
                .and_then(Value::as_u64)
                .map(|v| v.max(1) as u32)
                .unwrap_or(1)
        };
        let memory = domain
            .pointer("/memory/guest")
            .or_else(|| domain.pointer("/resources/requests/memory"))
            .and_then(Value::as_str)
            .and_then(quantity_bytes)
            .unwrap_or(128 << 20);
        let machine_type = match domain
            .pointer("/machine/type")
            .and_then(Value::as_str)
            .unwrap_or("q35")
        {
            t if t.starts_with("pc-q35") || t == "q35" => "q35".to_string(),
            t if t.starts_with("pc-i440fx") || t == "pc" => "pc".to_string(),
            other => other.to_string(),
        };
        let cpu_model = match domain
            .pointer("/cpu/model")
            .and_then(Value::as_str)
            .unwrap_or("host-model")
        {
            "host-model" | "host-passthrough" if self.config.accel == Accel::Kvm => {
                "host".to_string()
            }
            // Software emulation has no host CPU to copy; `max` offers every feature TCG has.
            "host-model" | "host-passthrough" => "max".to_string(),
            named => named.to_string(),
        };
        let hugepages = match domain
            .pointer("/memory/hugepages/pageSize")
            .and_then(Value::as_str)
        {
            None => None,
            Some(size) => {
                let free = std::fs::read_to_string("/proc/meminfo")
                    .ok()
                    .and_then(|m| {
                        m.lines()
                            .find(|l| l.starts_with("HugePages_Free:"))
                            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                    })
                    .unwrap_or(0);
                if free == 0 {
                    return Err(start_failed("FailedCreate", format!("hugepages of size {size} were requested, but this node has no free hugepages")));
                }
                Some(PathBuf::from("/dev/hugepages"))
            }
        };
        let firmware = match domain.pointer("/firmware/bootloader/efi") {
            None => Firmware::Bios,
            Some(efi) => {
                let secure = efi
                    .get("secureBoot")
                    .and_then(Value::as_bool)
                    .unwrap_or(true);
                let (code, vars) = if secure {
                    ("OVMF_CODE_4M.secboot.fd", "OVMF_VARS_4M.ms.fd")
                } else {
                    ("OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd")
                };
                let code = Path::new(OVMF_DIR).join(code);
                let template = Path::new(OVMF_DIR).join(vars);
                if !code.exists() || !template.exists() {
                    return Err(start_failed(
                        "FailedCreate",
                        format!(
                            "EFI firmware {} is missing on this node (install Debian's ovmf)",
                            code.display()
                        ),
                    ));
                }
                let vars = dir.join("efivars.fd");
                if !vars.exists() {
                    std::fs::copy(&template, &vars).map_err(|e| {
                        start_failed("FailedCreate", format!("copying EFI variables: {e}"))
                    })?;
                }
                Firmware::Efi {
                    code,
                    vars,
                    secure_boot: secure,
                }
            }
        };
        let feature_on =
            |name: &str, default: bool| match domain.pointer(&format!("/features/{name}")) {
                None => default,
                Some(f) => f.get("enabled").and_then(Value::as_bool).unwrap_or(true),
            };
        let acpi = feature_on("acpi", true);
        let smm = feature_on(
            "smm",
            matches!(
                firmware,
                Firmware::Efi {
                    secure_boot: true,
                    ..
                }
            ),
        );

        let mut prepared = HashMap::new();
        for volume in volumes(vmi) {
            match self.prepare_volume(vmi, &volume, sources).await {
                Ok(found) => {
                    prepared.insert(volume["name"].as_str().unwrap_or("").to_string(), found);
                }
                Err(Prepared::Failed { reason, message }) => {
                    return Err(Started::Failed { reason, message })
                }
                Err(Prepared::Ready) => {}
            }
        }
        let mut disks = Vec::new();
        for disk in domain
            .pointer("/devices/disks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            let name = disk["name"].as_str().unwrap_or("").to_string();
            let Some((path, format)) = prepared.get(&name).cloned() else {
                return Err(start_failed(
                    "FailedCreate",
                    format!("disk {name} has no volume"),
                ));
            };
            let (target, media) = if let Some(cd) = disk.get("cdrom") {
                (cd, DiskMedia::Cdrom)
            } else if let Some(lun) = disk.get("lun") {
                (lun, DiskMedia::Disk)
            } else {
                (disk.get("disk").unwrap_or(&Value::Null), DiskMedia::Disk)
            };
            let bus = match target
                .get("bus")
                .and_then(Value::as_str)
                .unwrap_or("virtio")
            {
                "sata" => Bus::Sata,
                "scsi" => Bus::Scsi,
                "ide" => Bus::Ide,
                _ => Bus::Virtio,
            };
            disks.push(Disk {
                id: name,
                path,
                format,
                bus,
                media,
                readonly: target
                    .get("readonly")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                boot_index: disk
                    .get("bootOrder")
                    .and_then(Value::as_u64)
                    .map(|b| b as u32),
                serial: disk
                    .get("serial")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                cache: disk
                    .get("cache")
                    .and_then(Value::as_str)
                    .and_then(CacheMode::parse),
            });
        }
        let uid = vmi.uid().unwrap_or_default();
        let networks = s
            .get("networks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut nics = Vec::new();
        let mut forwards = Vec::new();
        for (index, iface) in domain
            .pointer("/devices/interfaces")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let name = iface["name"].as_str().unwrap_or("").to_string();
            let on_pod = networks
                .iter()
                .any(|n| n["name"].as_str() == Some(name.as_str()) && n.get("pod").is_some());
            if iface.get("bridge").is_some() || !on_pod {
                return Err(start_failed(
                    "FailedCreate",
                    format!("interface {name}: only the masquerade binding on the pod network is available on virtplane nodes (bridge needs host taps, which this node does not create)"),
                ));
            }
            let requested = iface["model"].as_str().unwrap_or("virtio");
            let Some(model) = NicModel::parse(requested) else {
                return Err(start_failed(
                    "FailedCreate",
                    format!("interface {name}: model {requested} is not available"),
                ));
            };
            let mut nic_forwards = Vec::new();
            for port in iface
                .get("ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
            {
                let guest_port = port["port"].as_u64().unwrap_or(0) as u16;
                let protocol = match port["protocol"].as_str().unwrap_or("TCP") {
                    p if p.eq_ignore_ascii_case("udp") => Protocol::Udp,
                    _ => Protocol::Tcp,
                };
                let host_port = free_port(&self.config.node_address).ok_or_else(|| {
                    start_failed(
                        "FailedCreate",
                        "no free port on the node for a port forward",
                    )
                })?;
                nic_forwards.push(PortForward {
                    protocol,
                    host_address: self.config.node_address.clone(),
                    host_port,
                    guest_port,
                });
                forwards.push((
                    name.clone(),
                    port["name"].as_str().unwrap_or("").to_string(),
                    host_port,
                    guest_port,
                ));
            }
            nics.push(Nic {
                id: name,
                model,
                mac: iface["macAddress"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| mac_for(&uid, index)),
                forwards: nic_forwards,
                boot_index: iface
                    .get("bootOrder")
                    .and_then(Value::as_u64)
                    .map(|b| b as u32),
            });
        }
        self.forwards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.clone(), forwards);
        let kernel_boot = self.kernel_boot(vmi).await?;
        let devices = domain.get("devices").cloned().unwrap_or(Value::Null);
        let watchdog = match devices.pointer("/watchdog/i6300esb") {
            None => None,
            Some(w) => {
                let action = w["action"].as_str().unwrap_or("reset");
                Some(WatchdogAction::parse(action).ok_or_else(|| {
                    start_failed(
                        "FailedCreate",
                        format!("watchdog action {action} is not available"),
                    )
                })?)
            }
        };
        let graphics = devices
            .get("autoattachGraphicsDevice")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        Ok(MachineSpec {
            name: format!("{}_{}", vmi.namespace().unwrap_or_default(), vmi.name_any()),
            uuid: domain
                .pointer("/firmware/uuid")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or(uid),
            serial: domain
                .pointer("/firmware/serial")
                .and_then(Value::as_str)
                .map(str::to_string),
            machine_type,
            accel: self.config.accel,
            cpu_model,
            sockets: get_u32("/cpu/sockets"),
            cores: get_u32("/cpu/cores"),
            threads: get_u32("/cpu/threads"),
            memory_mib: memory.div_ceil(1 << 20),
            hugepages,
            firmware,
            kernel_boot,
            acpi,
            smm,
            disks,
            nics,
            rng: devices.get("rng").is_some(),
            watchdog,
            console_socket: dir.join("console.sock"),
            console_log: dir.join("serial.log"),
            qmp_socket: dir.join("qmp.sock"),
            vnc_socket: graphics.then(|| dir.join("vnc.sock")),
            pidfile: dir.join("qemu.pid"),
        })
    }

    /// The slot of a VMI, created empty on first use.
    fn slot(&self, vmi: &DynamicObject) -> Slot {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(vmi.uid().unwrap_or_default())
            .or_default()
            .clone()
    }

    /// The running instance of a VMI, adopting one a previous agent started.
    async fn instance<'a>(
        &self,
        slot: &'a mut Option<Running>,
        vmi: &DynamicObject,
    ) -> Option<&'a mut Running> {
        if slot.is_none() {
            let dir = self.dir(vmi);
            let instance = Instance::adopt(&dir.join("qemu.pid"), &dir.join("qmp.sock")).await?;
            tracing::info!(
                "adopted QEMU {} of {}/{} ({})",
                instance.pid,
                vmi.namespace().unwrap_or_default(),
                vmi.name_any(),
                instance.run_status().state.as_str()
            );
            self.watch_run_state(vmi, &instance);
            *slot = Some(Running {
                instance,
                stop_started: None,
            });
        }
        slot.as_mut()
    }

    /// Tells the agent as soon as the guest's run state changes or QEMU exits.
    fn watch_run_state(&self, vmi: &DynamicObject, instance: &Instance) {
        let mut status = instance.run_status_changes();
        let key = (vmi.namespace().unwrap_or_default(), vmi.name_any());
        let changes = self.changes.clone();
        tokio::spawn(async move {
            loop {
                let ended = status.changed().await.is_err() || status.borrow().closed;
                // No receiver means no agent loop listens yet: nothing to tell.
                let _ = changes.send(key.clone());
                if ended {
                    break;
                }
            }
        });
    }

    /// What QEMU's own log says about a failure (the lines that name it).
    fn qemu_words(&self, vmi: &DynamicObject, needles: &[&str]) -> Option<String> {
        let log = std::fs::read_to_string(self.dir(vmi).join("qemu.log")).ok()?;
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| needles.iter().any(|n| l.contains(n)))
            .map(str::trim)
            .collect();
        let mut unique: Vec<&str> = Vec::new();
        for line in lines {
            if !unique.contains(&line) {
                unique.push(line);
            }
        }
        (!unique.is_empty()).then(|| unique.join(" / "))
    }

    /// Turns QEMU's run state into what the agent reports.
    fn observed(&self, vmi: &DynamicObject, status: &RunStatus) -> Observed {
        let recheck = Duration::from_secs(10);
        match &status.state {
            RunState::Running | RunState::Suspended => Observed::Running { recheck },
            RunState::Paused | RunState::Prelaunch => Observed::Paused {
                cause: PauseCause::Requested,
                message: "the guest's vCPUs are stopped".into(),
                recheck,
            },
            RunState::IoError => Observed::Paused {
                cause: PauseCause::IoError,
                message: status
                    .io_error
                    .clone()
                    .unwrap_or_else(|| "a disk reported an I/O error".into()),
                recheck,
            },
            RunState::InternalError => Observed::Halted {
                reason: "InternalError".into(),
                message: format!(
                    "the guest's vCPUs stopped: QEMU run state internal-error ({} could not run the guest): {}",
                    self.config.accel,
                    self.qemu_words(vmi, &["internal error", "emulation failure", "Suberror"])
                        .unwrap_or_else(|| "no message in QEMU's log".into())
                ),
            },
            RunState::GuestPanicked => Observed::Halted {
                reason: "GuestPanicked".into(),
                message: "the guest kernel panicked (QEMU run state guest-panicked)".into(),
            },
            RunState::Shutdown => Observed::Halted {
                reason: "GuestShutdown".into(),
                message: format!(
                    "the guest shut down ({}) and QEMU kept it stopped",
                    status.shutdown_reason.as_deref().unwrap_or("unknown reason")
                ),
            },
            other => Observed::Paused {
                cause: PauseCause::Other,
                message: format!(
                    "the guest's vCPUs are stopped (QEMU run state {})",
                    other.as_str()
                ),
                recheck,
            },
        }
    }
}

#[async_trait]
impl Hypervisor for Qemu {
    fn kind(&self) -> &'static str {
        "qemu"
    }

    fn accel(&self) -> Option<&'static str> {
        Some(self.config.accel.as_str())
    }

    fn capacity(&self) -> (i64, i64) {
        (self.config.millicpu, self.config.memory)
    }

    fn changes(&self) -> Option<broadcast::Receiver<(String, String)>> {
        Some(self.changes.subscribe())
    }

    async fn prepare(&self, vmi: &DynamicObject, sources: &VolumeSources) -> Prepared {
        let began = Instant::now();
        let dir = self.dir(vmi);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return failed("FailedCreate", format!("creating {}: {e}", dir.display()));
        }
        for volume in volumes(vmi) {
            if let Err(failure) = self.prepare_volume(vmi, &volume, sources).await {
                return failure;
            }
        }
        if let Err(Started::Failed { reason, message }) = self.kernel_boot(vmi).await {
            return Prepared::Failed { reason, message };
        }
        tracing::debug!(
            "prepared {}/{} in {:?}",
            vmi.namespace().unwrap_or_default(),
            vmi.name_any(),
            began.elapsed()
        );
        Prepared::Ready
    }

    async fn start(&self, vmi: &DynamicObject, sources: &VolumeSources) -> Started {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        // Never a second QEMU for one VMI: adopt what runs already.
        if self.instance(&mut running, vmi).await.is_none() {
            let began = Instant::now();
            let spec = match self.machine(vmi, sources).await {
                Ok(spec) => spec,
                Err(failure) => return failure,
            };
            let specified = began.elapsed();
            let log = self.dir(vmi).join("qemu.log");
            let instance = match Instance::spawn(&self.config.binary, &spec, &log).await {
                Ok(instance) => instance,
                Err(e) => return start_failed("FailedCreate", e.to_string()),
            };
            let spawned = began.elapsed();
            let paused = spec_paused(vmi);
            if !paused {
                if let Err(e) = instance.resume().await {
                    instance.kill();
                    return start_failed("FailedCreate", format!("starting the guest: {e}"));
                }
            }
            tracing::debug!(
                "started QEMU {} of {}/{}: command line ready after {specified:?}, QMP after {spawned:?}, running after {:?}",
                instance.pid,
                vmi.namespace().unwrap_or_default(),
                vmi.name_any(),
                began.elapsed()
            );
            self.watch_run_state(vmi, &instance);
            *running = Some(Running {
                instance,
                stop_started: None,
            });
        }
        drop(running);
        let uid = vmi.uid().unwrap_or_default();
        let forwards = self
            .forwards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&uid)
            .cloned()
            .unwrap_or_default();
        let interfaces = spec(vmi)
            .pointer("/domain/devices/interfaces")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .enumerate()
                    .map(|(i, iface)| {
                        let name = iface["name"].as_str().unwrap_or("").to_string();
                        let mac = iface["macAddress"]
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| mac_for(&uid, i));
                        (name, mac, self.config.node_address.clone())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let port_forwards = forwards
            .iter()
            .map(|(iface, name, host_port, port)| {
                json!({"interface": iface, "name": name, "protocol": "TCP", "port": port,
                       "hostIP": self.config.node_address, "hostPort": host_port})
            })
            .collect();
        let machine = spec(vmi)
            .pointer("/domain/machine/type")
            .and_then(Value::as_str)
            .unwrap_or("q35")
            .to_string();
        Started::Running(GuestInfo {
            interfaces,
            machine,
            live_migratable: false,
            port_forwards,
            accelerator: Some(self.config.accel.as_str()),
        })
    }

    async fn observe(&self, vmi: &DynamicObject) -> Observed {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        let Some(entry) = self.instance(&mut running, vmi).await else {
            return Observed::Exited {
                succeeded: false,
                reason: "the QEMU process of this VMI is gone".into(),
            };
        };
        if entry.instance.exited() {
            let reason = entry.instance.shutdown_reason();
            let succeeded = reason.as_deref() == Some("guest-shutdown");
            *running = None;
            return Observed::Exited {
                succeeded,
                reason: if succeeded {
                    "GuestShutdown".into()
                } else {
                    format!(
                        "QEMU exited ({})",
                        reason.unwrap_or_else(|| "crashed".into())
                    )
                },
            };
        }
        let status = entry.instance.run_status();
        self.observed(vmi, &status)
    }

    async fn stop(&self, vmi: &DynamicObject, grace: Duration) -> Stopping {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        let Some(entry) = self.instance(&mut running, vmi).await else {
            return Stopping::Done { succeeded: true };
        };
        if entry.instance.exited() {
            let succeeded = entry.instance.shutdown_reason().as_deref() == Some("guest-shutdown");
            *running = None;
            return Stopping::Done { succeeded };
        }
        let first = entry.stop_started.is_none();
        let started = *entry.stop_started.get_or_insert_with(Instant::now);
        if first && !grace.is_zero() {
            if let Err(e) = entry.instance.power_down().await {
                tracing::warn!(
                    "ACPI power-down of {}/{}: {e}; it is killed when its grace period ends",
                    vmi.namespace().unwrap_or_default(),
                    vmi.name_any()
                );
            }
        }
        if started.elapsed() >= grace {
            entry.instance.kill();
            *running = None;
            return Stopping::Done { succeeded: false };
        }
        Stopping::Pending(Duration::from_millis(200))
    }

    async fn set_paused(&self, vmi: &DynamicObject, paused: bool) -> Result<(), String> {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        let entry = self
            .instance(&mut running, vmi)
            .await
            .ok_or("the VMI is not running")?;
        let result = if paused {
            entry.instance.pause().await
        } else {
            entry.instance.resume().await
        };
        result.map_err(|e| e.to_string())
    }

    async fn soft_reboot(&self, vmi: &DynamicObject) -> Result<(), String> {
        let slot = self.slot(vmi);
        let mut running = slot.lock().await;
        let entry = self
            .instance(&mut running, vmi)
            .await
            .ok_or("the VMI is not running")?;
        // An ACPI-style reboot request the guest's kernel handles like Ctrl+Alt+Del.
        entry
            .instance
            .qmp
            .execute("send-key", Some(json!({"keys": [{"type": "qcode", "data": "ctrl"}, {"type": "qcode", "data": "alt"}, {"type": "qcode", "data": "delete"}]})))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn cleanup(&self, vmi: &DynamicObject) {
        let uid = vmi.uid().unwrap_or_default();
        let slot = self.slot(vmi);
        {
            let mut running = slot.lock().await;
            if let Some(entry) = self.instance(&mut running, vmi).await {
                entry.instance.kill();
            }
            *running = None;
        }
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uid);
        self.forwards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uid);
        self.pulled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(owner, _, _), _| *owner != uid);
        if let Err(e) = std::fs::remove_dir_all(self.dir(vmi)) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(
                    "removing {} of {}/{}: {e}",
                    self.dir(vmi).display(),
                    vmi.namespace().unwrap_or_default(),
                    vmi.name_any()
                );
            }
        }
    }
}

fn spec_paused(vmi: &DynamicObject) -> bool {
    spec(vmi).get("startStrategy").and_then(Value::as_str) == Some("Paused")
}
