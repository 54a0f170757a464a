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

/// A NIC on QEMU's user-mode network (NAT), laid out like KubeVirt's masquerade binding:
/// the guest is 10.0.2.2, its gateway 10.0.2.1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nic {
    pub id: String,
    pub model: NicModel,
    pub mac: String,
    pub forwards: Vec<PortForward>,
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
        let mut a: Vec<String> = Vec::new();
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
        let json = |v: Value| v.to_string();
        push(&[
            "-name",
            &format!("guest={},debug-threads=on", opt(&self.name)),
        ]);
        push(&["-S", "-nodefaults", "-no-user-config", "-display", "none"]);
        if self.sandbox {
            push(&["-sandbox", crate::sandbox::SANDBOX]);
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
        push(&["-machine", &machine]);
        push(&["-cpu", &self.cpu_model]);
        let vcpus = self.sockets * self.cores * self.threads;
        push(&[
            "-smp",
            &format!(
                "{vcpus},sockets={},cores={},threads={}",
                self.sockets, self.cores, self.threads
            ),
        ]);
        push(&["-m", &format!("{}M", self.memory_mib)]);
        if let Some(dir) = &self.hugepages {
            push(&[
                "-object",
                &json(json!({
                    "qom-type": "memory-backend-file", "id": "ram0",
                    "size": self.memory_mib << 20, "mem-path": lossy(dir),
                    "share": true, "prealloc": true,
                })),
                "-machine",
                "memory-backend=ram0",
            ]);
        }
        push(&["-uuid", &self.uuid]);
        let mut smbios = format!("type=1,uuid={}", opt(&self.uuid));
        if let Some(serial) = &self.serial {
            smbios.push_str(&format!(",serial={}", opt(serial)));
        }
        push(&["-smbios", &smbios]);
        if let Firmware::Efi {
            code,
            vars,
            secure_boot,
        } = &self.firmware
        {
            for (node, file, readonly) in [("pflash0", code, true), ("pflash1", vars, false)] {
                push(&[
                    "-blockdev",
                    &json(
                        json!({"driver": "file", "node-name": format!("{node}-file"),
                                 "filename": lossy(file), "read-only": readonly}),
                    ),
                    "-blockdev",
                    &json(json!({"driver": "raw", "node-name": node,
                                 "file": format!("{node}-file"), "read-only": readonly})),
                ]);
            }
            push(&["-machine", "pflash0=pflash0,pflash1=pflash1"]);
            if *secure_boot {
                push(&["-global", "driver=cfi.pflash01,property=secure,value=on"]);
            }
        }
        if let Some(kb) = &self.kernel_boot {
            push(&["-kernel", &raw_path(&kb.kernel)]);
            if let Some(initrd) = &kb.initrd {
                push(&["-initrd", &raw_path(initrd)]);
            }
            if !kb.cmdline.is_empty() {
                // One argument, read by the guest's kernel alone.
                push(&["-append", &kb.cmdline]);
            }
        }
        let q35 = self.machine_type.contains("q35");
        let needs_scsi = self.disks.iter().any(|d| d.bus == Bus::Scsi);
        if needs_scsi {
            push(&[
                "-device",
                &json(json!({"driver": "virtio-scsi-pci", "id": "scsi0"})),
            ]);
        }
        if !q35 && self.disks.iter().any(|d| d.bus == Bus::Sata) {
            push(&["-device", &json(json!({"driver": "ahci", "id": "ahci0"}))]);
        }
        let mut ahci_port = 0;
        let mut ide_slot = 0;
        for disk in &self.disks {
            let cache = disk.cache_mode();
            let readonly = disk.readonly || disk.media == DiskMedia::Cdrom;
            push(&[
                "-blockdev",
                &json(json!({
                    "driver": "file", "node-name": disk.file_node_name(),
                    "filename": lossy(&disk.path), "cache": {"direct": cache.direct()},
                    "read-only": readonly,
                })),
                "-blockdev",
                &json(json!({
                    "driver": disk.format.as_str(), "node-name": disk.node_name(),
                    "file": disk.file_node_name(), "read-only": readonly,
                })),
            ]);
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
            push(&["-device", &json(device)]);
        }
        for nic in &self.nics {
            let hostfwd: Vec<Value> = nic
                .forwards
                .iter()
                .map(|f| {
                    json!({"str": format!("{}:{}:{}-:{}", f.protocol.as_str(), f.host_address,
                                         f.host_port, f.guest_port)})
                })
                .collect();
            let mut netdev = json!({
                "type": "user", "id": format!("net-{}", nic.id),
                "net": "10.0.2.0/24", "host": "10.0.2.1", "dhcpstart": "10.0.2.2",
            });
            if !hostfwd.is_empty() {
                netdev["hostfwd"] = Value::Array(hostfwd);
            }
            push(&["-netdev", &json(netdev)]);
            let mut device = json!({
                "driver": nic.model.device(), "netdev": format!("net-{}", nic.id),
                "mac": nic.mac, "id": nic.id,
            });
            if let Some(index) = nic.boot_index {
                device["bootindex"] = json!(index);
            }
            push(&["-device", &json(device)]);
        }
        if self.rng {
            push(&[
                "-object",
                &json(json!({"qom-type": "rng-random", "id": "rng0", "filename": "/dev/urandom"})),
                "-device",
                &json(json!({"driver": "virtio-rng-pci", "rng": "rng0"})),
            ]);
        }
        if let Some(action) = self.watchdog {
            push(&[
                "-device",
                &json(json!({"driver": "i6300esb"})),
                "-action",
                &format!("watchdog={}", action.as_str()),
            ]);
        }
        // QEMU 7.2 has no JSON -chardev: the paths are escaped.
        push(&[
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
            push(&["-vga", "std", "-vnc", &format!("unix:{}", opt_path(vnc))]);
        }
        push(&[
            "-qmp",
            &format!("unix:{},server=on,wait=off", opt_path(&self.qmp_socket)),
        ]);
        push(&["-pidfile", &raw_path(&self.pidfile)]);
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON values of every `flag` argument.
    fn json_args(spec: &MachineSpec, flag: &str) -> Vec<Value> {
        spec.argv()
            .unwrap()
            .windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| serde_json::from_str(&w[1]).unwrap_or_else(|e| panic!("{flag} {}: {e}", w[1])))
            .collect()
    }

    fn spec() -> MachineSpec {
        MachineSpec {
            name: "default_vm1".into(),
            uuid: "5e1c2c3a-0000-4000-8000-000000000001".into(),
            serial: Some("abc".into()),
            machine_type: "q35".into(),
            accel: Accel::Tcg,
            cpu_model: "max".into(),
            sockets: 1,
            cores: 2,
            threads: 1,
            memory_mib: 128,
            hugepages: None,
            firmware: Firmware::Bios,
            kernel_boot: None,
            acpi: true,
            smm: false,
            disks: vec![Disk {
                id: "root".into(),
                path: "/d/root.qcow2".into(),
                format: DiskFormat::Qcow2,
                bus: Bus::Virtio,
                media: DiskMedia::Disk,
                readonly: false,
                boot_index: Some(1),
                serial: None,
                cache: None,
            }],
            nics: vec![Nic {
                id: "default".into(),
                model: NicModel::VirtioNet,
                mac: "02:00:00:00:00:01".into(),
                forwards: vec![PortForward {
                    protocol: Protocol::Tcp,
                    host_address: "127.0.0.1".into(),
                    host_port: 40000,
                    guest_port: 80,
                }],
                boot_index: None,
            }],
            rng: true,
            watchdog: None,
            console_socket: "/r/console.sock".into(),
            console_log: "/r/serial.log".into(),
            qmp_socket: "/r/qmp.sock".into(),
            vnc_socket: None,
            pidfile: "/r/qemu.pid".into(),
            sandbox: true,
            run_as: None,
        }
    }

    #[test]
    fn command_line() {
        let argv = spec().argv().unwrap().join(" ");
        assert!(argv.contains("-machine q35,accel=tcg,smm=off"), "{argv}");
        assert!(argv.contains("-smp 2,sockets=1,cores=2,threads=1"));
        assert!(argv.contains(
            r#"-device {"bootindex":1,"drive":"drive-root","driver":"virtio-blk-pci","id":"root"}"#
        ));
        assert!(
            argv.contains(r#""hostfwd":[{"str":"tcp:127.0.0.1:40000-:80"}]"#),
            "{argv}"
        );
        assert!(argv.contains(&format!("-sandbox {}", crate::sandbox::SANDBOX)));
        assert!(
            argv.contains("-smbios type=1,uuid=5e1c2c3a-0000-4000-8000-000000000001,serial=abc")
        );
        assert!(argv.starts_with("-name guest=default_vm1"));
    }

    #[test]
    fn disks_are_named_blockdev_nodes() {
        let argv = spec().argv().unwrap().join(" ");
        assert!(
            argv.contains(concat!(
                r#"-blockdev {"cache":{"direct":true},"driver":"file","filename":"/d/root.qcow2","node-name":"file-root","read-only":false} "#,
                r#"-blockdev {"driver":"qcow2","file":"file-root","node-name":"drive-root","read-only":false}"#
            )),
            "{argv}"
        );
        assert!(!argv.contains("-drive"), "{argv}");
    }

    #[test]
    fn errors_about_a_disk_node_name_its_file() {
        let said = r#"qemu-system-x86_64: -blockdev {"driver":"qcow2","file":"file-root","node-name":"drive-root","read-only":false}: Unsupported qcow2 version 3"#;
        assert_eq!(
            spec().explain(said),
            format!("{said} (disk root: /d/root.qcow2)")
        );
        assert_eq!(spec().explain("no disk here"), "no disk here");
    }

    #[test]
    fn cache_modes_and_read_only_media() {
        let mut s = spec();
        s.disks[0].cache = Some(CacheMode::Writethrough);
        s.disks.push(Disk {
            id: "cd".into(),
            path: "/d/seed.iso".into(),
            format: DiskFormat::Raw,
            bus: Bus::Sata,
            media: DiskMedia::Cdrom,
            readonly: false,
            boot_index: None,
            serial: None,
            cache: None,
        });
        let argv = s.argv().unwrap().join(" ");
        let objects = json_args(&s, "-blockdev");
        let file = |name: &str| {
            objects
                .iter()
                .find(|o| o["node-name"] == name)
                .cloned()
                .unwrap_or_else(|| panic!("no node {name} in {argv}"))
        };
        assert_eq!(file("file-root")["cache"]["direct"], false);
        assert_eq!(file("file-cd")["cache"]["direct"], false);
        assert_eq!(file("file-cd")["read-only"], true);
        assert_eq!(file("drive-cd")["read-only"], true);
        let devices = json_args(&s, "-device");
        let root = devices.iter().find(|d| d["id"] == "root").unwrap();
        assert_eq!(root["write-cache"], "off", "{argv}");
        assert_eq!(root["bootindex"], 1, "{argv}");
        let cd = devices.iter().find(|d| d["id"] == "cd").unwrap();
        assert_eq!(
            cd,
            &json!({"driver": "ide-cd", "bus": "ide.0", "unit": 0, "drive": "drive-cd", "id": "cd"})
        );
    }

    #[test]
    fn efi_firmware_is_two_pflash_nodes() {
        let mut s = spec();
        s.firmware = Firmware::Efi {
            code: "/fw/code.fd".into(),
            vars: "/r/vars.fd".into(),
            secure_boot: false,
        };
        let argv = s.argv().unwrap().join(" ");
        let nodes = json_args(&s, "-blockdev");
        assert!(
            nodes.contains(&json!({"driver": "file", "node-name": "pflash0-file",
                                   "filename": "/fw/code.fd", "read-only": true})),
            "{argv}"
        );
        assert!(
            nodes.contains(&json!({"driver": "raw", "node-name": "pflash1",
                                   "file": "pflash1-file", "read-only": false})),
            "{argv}"
        );
        assert!(
            argv.contains("-machine pflash0=pflash0,pflash1=pflash1"),
            "{argv}"
        );
    }

    /// Values a hostile spec could carry, for the tests below.
    const HOSTILE: [&str; 6] = [
        "x,file=/etc/passwd",
        "x,,file=/etc/passwd",
        "a=b,c",
        "../../etc/shadow",
        "line\nnext -device foo",
        "\"},{\"driver\":\"x",
    ];

    /// Every `key=value,…` option string of the command line, split as QEMU splits it
    /// (a doubled comma is a comma of the value).
    fn qemu_opts(text: &str) -> Vec<String> {
        let mut parts = vec![String::new()];
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == ',' {
                if chars.peek() == Some(&',') {
                    chars.next();
                    parts.last_mut().unwrap().push(',');
                } else {
                    parts.push(String::new());
                }
            } else {
                parts.last_mut().unwrap().push(c);
            }
        }
        parts
    }

    #[test]
    fn hostile_disk_values_stay_inside_their_json_strings() {
        for bad in HOSTILE {
            let mut s = spec();
            s.disks[0].serial = Some(bad.to_string());
            s.disks[0].id = bad.to_string();
            s.disks[0].path = PathBuf::from(format!("/d/{bad}"));
            s.nics[0].mac = bad.to_string();
            s.nics[0].id = bad.to_string();
            let argv = s.argv().unwrap();
            let devices = json_args(&s, "-device");
            let disk = devices.iter().find(|d| d["drive"].is_string()).unwrap();
            assert_eq!(disk["serial"], bad);
            assert_eq!(disk["id"], bad);
            assert!(disk.get("file").is_none(), "{disk}");
            let nic = devices.iter().find(|d| d["netdev"].is_string()).unwrap();
            assert_eq!(nic["mac"], bad);
            let files = json_args(&s, "-blockdev");
            assert_eq!(files[0]["filename"], format!("/d/{bad}"));
            // No argument was split or added: the count is that of a tame spec.
            assert_eq!(argv.len(), spec().argv().unwrap().len(), "{argv:?}");
        }
    }

    #[test]
    fn hostile_smbios_serial_and_name_are_one_option_value_each() {
        for bad in HOSTILE {
            let mut s = spec();
            s.serial = Some(bad.to_string());
            s.name = bad.to_string();
            s.uuid = bad.to_string();
            let argv = s.argv().unwrap();
            let arg = |flag: &str| argv.windows(2).find(|w| w[0] == flag).unwrap()[1].clone();
            let smbios = qemu_opts(&arg("-smbios"));
            assert_eq!(
                smbios,
                vec![
                    "type=1".to_string(),
                    format!("uuid={bad}"),
                    format!("serial={bad}")
                ]
            );
            let name = qemu_opts(&arg("-name"));
            assert_eq!(
                name,
                vec![format!("guest={bad}"), "debug-threads=on".into()]
            );
        }
    }

    #[test]
    fn runtime_paths_with_commas_are_escaped_where_qemu_parses_options_only() {
        let mut s = spec();
        s.qmp_socket = "/r,x/qmp.sock".into();
        s.console_socket = "/r,x/console.sock".into();
        s.console_log = "/r,x/serial.log".into();
        s.pidfile = "/r,x/qemu.pid".into();
        s.kernel_boot = Some(KernelBoot {
            kernel: "/k,x/vmlinux".into(),
            initrd: Some("/k,x/initrd".into()),
            cmdline: "console=ttyS0,115200 x=1".into(),
        });
        let argv = s.argv().unwrap();
        let arg = |flag: &str| argv.windows(2).find(|w| w[0] == flag).unwrap()[1].clone();
        assert_eq!(
            qemu_opts(&arg("-qmp")),
            vec!["unix:/r,x/qmp.sock", "server=on", "wait=off"]
        );
        let chardev = qemu_opts(&arg("-chardev"));
        assert!(
            chardev.contains(&"path=/r,x/console.sock".to_string()),
            "{chardev:?}"
        );
        assert!(
            chardev.contains(&"logfile=/r,x/serial.log".to_string()),
            "{chardev:?}"
        );
        // QEMU opens these names as given.
        assert_eq!(arg("-pidfile"), "/r,x/qemu.pid");
        assert_eq!(arg("-kernel"), "/k,x/vmlinux");
        assert_eq!(arg("-initrd"), "/k,x/initrd");
        assert_eq!(arg("-append"), "console=ttyS0,115200 x=1");
    }

    #[test]
    fn machine_types_and_cpu_models_must_be_plain_names() {
        for bad in ["q35,memory-backend=x", "q35 -device x", "", &"q".repeat(65)] {
            let mut s = spec();
            s.machine_type = bad.to_string();
            let refused = s.argv().unwrap_err();
            assert!(refused.0.contains("machine type"), "{refused}");
            let mut s = spec();
            s.cpu_model = bad.to_string();
            let refused = s.argv().unwrap_err();
            assert!(refused.0.contains("CPU model"), "{refused}");
        }
        let mut s = spec();
        s.machine_type = "pc-q35-7.2".into();
        s.cpu_model = "Skylake-Client-IBRS".into();
        assert!(s.argv().is_ok());
    }

    #[test]
    fn the_sandbox_can_be_left_out() {
        let mut s = spec();
        s.sandbox = false;
        assert!(!s.argv().unwrap().iter().any(|a| a == "-sandbox"));
    }
}
