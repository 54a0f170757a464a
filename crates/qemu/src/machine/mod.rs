//! A QEMU-level description of one virtual machine and the command line that runs it.
//!
//! Disks are named `-blockdev` nodes (`file-<id>` for the host file, `drive-<id>` for
//! its format layer), as libvirt lays them out: block jobs (`blockdev-mirror`) and NBD
//! exports address disks by node name.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::accel::Accel;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bus {
    Virtio,
    Sata,
    Scsi,
    Ide,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskMedia {
    Disk,
    Cdrom,
}

/// The format layer of a disk file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFormat {
    Raw,
    Qcow2,
}

impl DiskFormat {
    /// QEMU's driver name.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskFormat::Raw => "raw",
            DiskFormat::Qcow2 => "qcow2",
        }
    }
}

/// Host page-cache use for a disk, as KubeVirt's `disks[].cache` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// O_DIRECT: the host page cache is bypassed.
    None,
    /// The host page cache is used and every write is flushed.
    Writethrough,
    /// The host page cache is used; the guest's flushes reach the disk.
    Writeback,
}

impl CacheMode {
    pub fn parse(text: &str) -> Option<CacheMode> {
        match text {
            "none" => Some(CacheMode::None),
            "writethrough" => Some(CacheMode::Writethrough),
            "writeback" => Some(CacheMode::Writeback),
            _ => None,
        }
    }

    /// `cache.direct` of the file node.
    fn direct(self) -> bool {
        self == CacheMode::None
    }

    /// The device's `write-cache` property: off makes every write synchronous.
    fn write_cache(self) -> bool {
        self != CacheMode::Writethrough
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disk {
    /// Device id, unique within the machine (the KubeVirt disk name works).
    pub id: String,
    pub path: PathBuf,
    pub format: DiskFormat,
    pub bus: Bus,
    pub media: DiskMedia,
    pub readonly: bool,
    pub boot_index: Option<u32>,
    pub serial: Option<String>,
    /// `None`: O_DIRECT for disks, the page cache for CD-ROMs.
    pub cache: Option<CacheMode>,
}

impl Disk {
    /// The node name of the disk's format layer, which block jobs and NBD exports use.
    pub fn node_name(&self) -> String {
        format!("drive-{}", self.id)
    }

    /// The node name of the disk's file layer.
    pub fn file_node_name(&self) -> String {
        format!("file-{}", self.id)
    }

    fn cache_mode(&self) -> CacheMode {
        self.cache.unwrap_or(if self.media == DiskMedia::Cdrom {
            CacheMode::Writeback
        } else {
            CacheMode::None
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicModel {
    VirtioNet,
    E1000,
    E1000e,
    Rtl8139,
}

impl NicModel {
    /// KubeVirt's `interfaces[].model` names.
    pub fn parse(text: &str) -> Option<NicModel> {
        match text {
            "virtio" => Some(NicModel::VirtioNet),
            "e1000" => Some(NicModel::E1000),
            "e1000e" => Some(NicModel::E1000e),
            "rtl8139" => Some(NicModel::Rtl8139),
            _ => None,
        }
    }

    /// QEMU's device name.
    fn device(self) -> &'static str {
        match self {
            NicModel::VirtioNet => "virtio-net-pci",
            NicModel::E1000 => "e1000",
            NicModel::E1000e => "e1000e",
            NicModel::Rtl8139 => "rtl8139",
        }
    }
}

/// What QEMU does when the i6300esb watchdog fires (`-action watchdog=…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchdogAction {
    Reset,
    Shutdown,
    Poweroff,
    Pause,
    None,
}

impl WatchdogAction {
    /// KubeVirt's `watchdog.i6300esb.action` names (QEMU's for the last two).
    pub fn parse(text: &str) -> Option<WatchdogAction> {
        match text {
            "reset" => Some(WatchdogAction::Reset),
            "shutdown" => Some(WatchdogAction::Shutdown),
            "poweroff" => Some(WatchdogAction::Poweroff),
            "pause" => Some(WatchdogAction::Pause),
            "none" => Some(WatchdogAction::None),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            WatchdogAction::Reset => "reset",
            WatchdogAction::Shutdown => "shutdown",
            WatchdogAction::Poweroff => "poweroff",
            WatchdogAction::Pause => "pause",
            WatchdogAction::None => "none",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortForward {
    pub protocol: Protocol,
    pub host_address: String,
    pub host_port: u16,
    pub guest_port: u16,
}

/// What a NIC is plugged into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NicBackend {
    /// QEMU's user-mode network (NAT), laid out like KubeVirt's masquerade binding (the
    /// guest is 10.0.2.2, its gateway 10.0.2.1), with ports forwarded from the node.
    User { forwards: Vec<PortForward> },
    /// A tap the node made beforehand (in the network namespace QEMU starts in, owned
    /// by QEMU's user): QEMU opens it and runs no scripts.
    Tap { ifname: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nic {
    pub id: String,
    pub model: NicModel,
    pub mac: String,
    pub backend: NicBackend,
    pub boot_index: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelBoot {
    pub kernel: PathBuf,
    pub initrd: Option<PathBuf>,
    pub cmdline: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Firmware {
    Bios,
    /// OVMF: the read-only code and this VM's own copy of the variable store.
    Efi {
        code: PathBuf,
        vars: PathBuf,
        secure_boot: bool,
    },
}

/// The balloon device's id (`/machine/peripheral/balloon0` in QOM).
pub const BALLOON: &str = "balloon0";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineSpec {
    pub name: String,
    pub uuid: String,
    /// SMBIOS system serial number.
    pub serial: Option<String>,
    /// `q35`, `pc`, or a versioned name.
    pub machine_type: String,
    pub accel: Accel,
    /// `host`, `max`, or a named model.
    pub cpu_model: String,
    pub sockets: u32,
    pub cores: u32,
    pub threads: u32,
    pub memory_mib: u64,
    /// Back guest RAM with hugepages from this hugetlbfs mount.
    pub hugepages: Option<PathBuf>,
    pub firmware: Firmware,
    pub kernel_boot: Option<KernelBoot>,
    pub acpi: bool,
    pub smm: bool,
    pub disks: Vec<Disk>,
    pub nics: Vec<Nic>,
    pub rng: bool,
    /// A virtio balloon (`balloon0`), whose guest stats tell the guest's memory use.
    pub balloon: bool,
    /// An i6300esb watchdog with this action.
    pub watchdog: Option<WatchdogAction>,
    /// The serial console: a unix socket clients attach to, and a log of all output.
    pub console_socket: PathBuf,
    pub console_log: PathBuf,
    pub qmp_socket: PathBuf,
    pub vnc_socket: Option<PathBuf>,
    pub pidfile: PathBuf,
    /// Run under QEMU's seccomp filter ([`crate::sandbox::SANDBOX`]).
    pub sandbox: bool,
    /// The unprivileged user QEMU runs as; `None`: the agent's own.
    pub run_as: Option<crate::process::RunAs>,
    /// The network namespace QEMU starts in (a Pod's, `/run/netns/NAME`), where its taps
    /// are; `None`: the agent's own.
    pub netns: Option<PathBuf>,
}

/// A value inside a QEMU `key=value,…` option string: QEMU reads a doubled comma as one
/// comma of the value, so no value can end the option and start another.
fn opt(value: &str) -> String {
    value.replace(',', ",,")
}

/// A path inside a `key=value,…` option string.
fn opt_path(p: &Path) -> String {
    opt(&p.display().to_string())
}

/// A path as a JSON string (a path that is not UTF-8 cannot come from a spec; a lossy
/// name makes QEMU fail to open it, never a panic).
fn lossy(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A path given to an option QEMU takes verbatim (`-kernel`, `-initrd`, `-pidfile`): no
/// escaping, or a comma would be doubled in the name QEMU opens.
fn raw_path(p: &Path) -> String {
    p.display().to_string()
}

/// `-machine` and `-cpu` take `name[,property=value…]` with no escaping of the name, and
/// QEMU has no JSON form of them in 7.2: the name must be a plain model name, or a spec's
/// `q35,memory-backend=…` would set properties of its own choosing.
fn model_name(what: &str, name: &str) -> Result<(), Refused> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if plain {
        Ok(())
    } else {
        Err(Refused(format!(
            "{what} {name:?} is not a QEMU model name (letters, digits, '-', '_' and '.', at most 64)"
        )))
    }
}

/// Why a machine description cannot become a command line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl MachineSpec {
    /// QEMU names disks by their node names in its errors; this adds which file each
    /// named disk is, so that a message says what to fix.
    pub fn explain(&self, qemu_says: &str) -> String {
        let mut text = qemu_says.to_string();
        for disk in &self.disks {
            let names = [disk.node_name(), disk.file_node_name()];
            let named = names.iter().any(|n| {
                qemu_says.contains(&format!("\"node-name\":\"{n}\""))
                    || qemu_says.contains(&format!("node-name={n},"))
            });
            if named {
                text.push_str(&format!(" (disk {}: {})", disk.id, disk.path.display()));
            }
        }
        text
    }

    /// The full argument list (without the binary). The machine starts paused (`-S`):
    /// the caller continues it over QMP once it is watching.
    ///
    /// Disks, devices, NICs and objects are given as JSON (`-blockdev {…}`), which QEMU
    /// parses as JSON: a spec's value (a serial number, a name) stays one string whatever
    /// it holds. What has no JSON form is escaped ([`opt`]) or refused ([`model_name`]).
    pub fn argv(&self) -> Result<Vec<String>, Refused> {
        model_name("machine type", &self.machine_type)?;
        model_name("CPU model", &self.cpu_model)?;
        let mut a = Argv::default();
        self.push_machine(&mut a);
        self.push_firmware(&mut a);
        self.push_disks(&mut a);
        self.push_nics(&mut a);
        self.push_devices(&mut a);
        self.push_sockets(&mut a);
        Ok(a.0)
    }

    /// The guest's name, sandbox, machine type, CPUs, memory and identity.
    fn push_machine(&self, a: &mut Argv) {
        a.push(&[
            "-name",
            &format!("guest={},debug-threads=on", opt(&self.name)),
        ]);
        a.push(&["-S", "-nodefaults", "-no-user-config", "-display", "none"]);
        if self.sandbox {
            a.push(&["-sandbox", crate::sandbox::SANDBOX]);
        }
        let mut machine = format!("{},accel={}", self.machine_type, self.accel);
        if self.smm {
            machine.push_str(",smm=on");
        } else if self.machine_type.starts_with("q35") || self.machine_type.starts_with("pc") {
            machine.push_str(",smm=off");
        }
        if !self.acpi {
            machine.push_str(",acpi=off");
        }
        a.push(&["-machine", &machine]);
        a.push(&["-cpu", &self.cpu_model]);
        let vcpus = self.sockets * self.cores * self.threads;
        a.push(&[
            "-smp",
            &format!(
                "{vcpus},sockets={},cores={},threads={}",
                self.sockets, self.cores, self.threads
            ),
        ]);
        a.push(&["-m", &format!("{}M", self.memory_mib)]);
        if let Some(dir) = &self.hugepages {
            a.push(&[
                "-object",
                &json!({
                    "qom-type": "memory-backend-file", "id": "ram0",
                    "size": self.memory_mib << 20, "mem-path": lossy(dir),
                    "share": true, "prealloc": true,
                })
                .to_string(),
                "-machine",
                "memory-backend=ram0",
            ]);
        }
        a.push(&["-uuid", &self.uuid]);
        let mut smbios = format!("type=1,uuid={}", opt(&self.uuid));
        if let Some(serial) = &self.serial {
            smbios.push_str(&format!(",serial={}", opt(serial)));
        }
        a.push(&["-smbios", &smbios]);
    }

    /// UEFI's flash drives, or a kernel booted directly.
    fn push_firmware(&self, a: &mut Argv) {
        if let Firmware::Efi {
            code,
            vars,
            secure_boot,
        } = &self.firmware
        {
            for (node, file, readonly) in [("pflash0", code, true), ("pflash1", vars, false)] {
                a.push_json(
                    "-blockdev",
                    json!({"driver": "file", "node-name": format!("{node}-file"),
                                 "filename": lossy(file), "read-only": readonly}),
                );
                a.push_json(
                    "-blockdev",
                    json!({"driver": "raw", "node-name": node,
                                 "file": format!("{node}-file"), "read-only": readonly}),
                );
            }
            a.push(&["-machine", "pflash0=pflash0,pflash1=pflash1"]);
            if *secure_boot {
                a.push(&["-global", "driver=cfi.pflash01,property=secure,value=on"]);
            }
        }
        if let Some(kb) = &self.kernel_boot {
            a.push(&["-kernel", &raw_path(&kb.kernel)]);
            if let Some(initrd) = &kb.initrd {
                a.push(&["-initrd", &raw_path(initrd)]);
            }
            if !kb.cmdline.is_empty() {
                // One argument, read by the guest's kernel alone.
                a.push(&["-append", &kb.cmdline]);
            }
        }
    }

    /// Each disk's two block nodes (file and format) and its device on its bus.
    fn push_disks(&self, a: &mut Argv) {
        let q35 = self.machine_type.contains("q35");
        if self.disks.iter().any(|d| d.bus == Bus::Scsi) {
            a.push_json(
                "-device",
                json!({"driver": "virtio-scsi-pci", "id": "scsi0"}),
            );
        }
        if !q35 && self.disks.iter().any(|d| d.bus == Bus::Sata) {
            a.push_json("-device", json!({"driver": "ahci", "id": "ahci0"}));
        }
        let mut ahci_port = 0;
        let mut ide_slot = 0;
        for disk in &self.disks {
            let cache = disk.cache_mode();
            let readonly = disk.readonly || disk.media == DiskMedia::Cdrom;
            a.push_json(
                "-blockdev",
                json!({
                    "driver": "file", "node-name": disk.file_node_name(),
                    "filename": lossy(&disk.path), "cache": {"direct": cache.direct()},
                    "read-only": readonly,
                }),
            );
            a.push_json(
                "-blockdev",
                json!({
                    "driver": disk.format.as_str(), "node-name": disk.node_name(),
                    "file": disk.file_node_name(), "read-only": readonly,
                }),
            );
            let cd = disk.media == DiskMedia::Cdrom;
            let mut device = json!({"drive": disk.node_name(), "id": disk.id});
            match disk.bus {
                Bus::Virtio => device["driver"] = json!("virtio-blk-pci"),
                Bus::Scsi => {
                    device["driver"] = json!(if cd { "scsi-cd" } else { "scsi-hd" });
                    device["bus"] = json!("scsi0.0");
                }
                Bus::Sata | Bus::Ide => {
                    device["driver"] = json!(if cd { "ide-cd" } else { "ide-hd" });
                    let (bus, unit) = if q35 {
                        // q35's built-in AHCI controller: one device per port.
                        ahci_port += 1;
                        (format!("ide.{}", ahci_port - 1), 0)
                    } else if disk.bus == Bus::Sata {
                        ahci_port += 1;
                        (format!("ahci0.{}", ahci_port - 1), 0)
                    } else {
                        // pc's PIIX IDE: two buses with a master and a slave each.
                        ide_slot += 1;
                        (format!("ide.{}", (ide_slot - 1) / 2), (ide_slot - 1) % 2)
                    };
                    device["bus"] = json!(bus);
                    device["unit"] = json!(unit);
                }
            }
            if let Some(index) = disk.boot_index {
                device["bootindex"] = json!(index);
            }
            if let Some(serial) = &disk.serial {
                device["serial"] = json!(serial);
            }
            if !cache.write_cache() {
                device["write-cache"] = json!("off");
            }
            a.push_json("-device", device);
        }
    }

    /// Each NIC: its network (user-mode with its port forwards, or a tap), and its device.
    fn push_nics(&self, a: &mut Argv) {
        for nic in &self.nics {
            let id = format!("net-{}", nic.id);
            let netdev = match &nic.backend {
                NicBackend::User { forwards } => {
                    let hostfwd: Vec<Value> = forwards
                        .iter()
                        .map(|f| {
                            json!({"str": format!("{}:{}:{}-:{}", f.protocol.as_str(), f.host_address,
                                                 f.host_port, f.guest_port)})
                        })
                        .collect();
                    let mut netdev = json!({
                        "type": "user", "id": id,
                        "net": "10.0.2.0/24", "host": "10.0.2.1", "dhcpstart": "10.0.2.2",
                    });
                    if !hostfwd.is_empty() {
                        netdev["hostfwd"] = Value::Array(hostfwd);
                    }
                    netdev
                }
                NicBackend::Tap { ifname } => json!({
                    "type": "tap", "id": id, "ifname": ifname,
                    "script": "no", "downscript": "no",
                }),
            };
            a.push_json("-netdev", netdev);
            let mut device = json!({
                "driver": nic.model.device(), "netdev": format!("net-{}", nic.id),
                "mac": nic.mac, "id": nic.id,
            });
            if let Some(index) = nic.boot_index {
                device["bootindex"] = json!(index);
            }
            a.push_json("-device", device);
        }
    }

    /// The random number generator, the balloon and the watchdog.
    fn push_devices(&self, a: &mut Argv) {
        if self.balloon {
            a.push_json(
                "-device",
                json!({"driver": "virtio-balloon-pci", "id": BALLOON}),
            );
        }
        if self.rng {
            a.push_json(
                "-object",
                json!({"qom-type": "rng-random", "id": "rng0", "filename": "/dev/urandom"}),
            );
            a.push_json(
                "-device",
                json!({"driver": "virtio-rng-pci", "rng": "rng0"}),
            );
        }
        if let Some(action) = self.watchdog {
            a.push_json("-device", json!({"driver": "i6300esb"}));
            a.push(&["-action", &format!("watchdog={}", action.as_str())]);
        }
    }

    /// The serial console, VNC, QMP and pid file.
    fn push_sockets(&self, a: &mut Argv) {
        // QEMU 7.2 has no JSON -chardev: the paths are escaped.
        a.push(&[
            "-chardev",
            &format!(
                "socket,id=console,path={},server=on,wait=off,logfile={},logappend=on",
                opt_path(&self.console_socket),
                opt_path(&self.console_log)
            ),
            "-serial",
            "chardev:console",
        ]);
        if let Some(vnc) = &self.vnc_socket {
            a.push(&["-vga", "std", "-vnc", &format!("unix:{}", opt_path(vnc))]);
        }
        a.push(&[
            "-qmp",
            &format!("unix:{},server=on,wait=off", opt_path(&self.qmp_socket)),
        ]);
        a.push(&["-pidfile", &raw_path(&self.pidfile)]);
    }
}

/// QEMU's argument list as it is built.
#[derive(Default)]
struct Argv(Vec<String>);

impl Argv {
    fn push(&mut self, args: &[&str]) {
        self.0.extend(args.iter().map(|s| s.to_string()));
    }

    /// `flag` with a JSON value, which QEMU parses as JSON.
    fn push_json(&mut self, flag: &str, value: Value) {
        self.0.push(flag.to_string());
        self.0.push(value.to_string());
    }
}

#[cfg(test)]
mod tests;
