//! A QEMU-level description of one virtual machine and the command line that runs it.
//!
//! Disks are named `-blockdev` nodes (`file-<id>` for the host file, `drive-<id>` for
//! its format layer), as libvirt lays them out: block jobs (`blockdev-mirror`) and NBD
//! exports address disks by node name.

use std::path::PathBuf;

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
}

fn path(p: &std::path::Path) -> String {
    // QEMU option values escape commas by doubling them.
    p.display().to_string().replace(',', ",,")
}

impl MachineSpec {
    /// QEMU names disks by their node names in its errors; this adds which file each
    /// named disk is, so that a message says what to fix.
    pub fn explain(&self, qemu_says: &str) -> String {
        let mut text = qemu_says.to_string();
        for disk in &self.disks {
            let named = qemu_says.contains(&format!("node-name={},", disk.node_name()))
                || qemu_says.contains(&format!("node-name=file-{},", disk.id));
            if named {
                text.push_str(&format!(" (disk {}: {})", disk.id, disk.path.display()));
            }
        }
        text
    }

    /// The full argument list (without the binary). The machine starts paused (`-S`):
    /// the caller continues it over QMP once it is watching.
    pub fn argv(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
        push(&["-name", &format!("guest={},debug-threads=on", self.name)]);
        push(&["-S", "-nodefaults", "-no-user-config", "-display", "none"]);
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
                &format!(
                    "memory-backend-file,id=ram0,size={}M,mem-path={},share=on,prealloc=on",
                    self.memory_mib,
                    path(dir)
                ),
                "-machine",
                "memory-backend=ram0",
            ]);
        }
        push(&["-uuid", &self.uuid]);
        let mut smbios = format!("type=1,uuid={}", self.uuid);
        if let Some(serial) = &self.serial {
            smbios.push_str(&format!(",serial={}", serial.replace(',', ",,")));
        }
        push(&["-smbios", &smbios]);
        if let Firmware::Efi {
            code,
            vars,
            secure_boot,
        } = &self.firmware
        {
            for (node, file, readonly) in [("pflash0", code, true), ("pflash1", vars, false)] {
                let ro = if readonly { ",read-only=on" } else { "" };
                push(&[
                    "-blockdev",
                    &format!(
                        "driver=file,node-name={node}-file,filename={}{ro}",
                        path(file)
                    ),
                    "-blockdev",
                    &format!("driver=raw,node-name={node},file={node}-file{ro}"),
                ]);
            }
            push(&["-machine", "pflash0=pflash0,pflash1=pflash1"]);
            if *secure_boot {
                push(&["-global", "driver=cfi.pflash01,property=secure,value=on"]);
            }
        }
        if let Some(kb) = &self.kernel_boot {
            push(&["-kernel", &path(&kb.kernel)]);
            if let Some(initrd) = &kb.initrd {
                push(&["-initrd", &path(initrd)]);
            }
            if !kb.cmdline.is_empty() {
                push(&["-append", &kb.cmdline]);
            }
        }
        let q35 = self.machine_type.contains("q35");
        let needs_scsi = self.disks.iter().any(|d| d.bus == Bus::Scsi);
        if needs_scsi {
            push(&["-device", "virtio-scsi-pci,id=scsi0"]);
        }
        if !q35 && self.disks.iter().any(|d| d.bus == Bus::Sata) {
            push(&["-device", "ahci,id=ahci0"]);
        }
        let mut ahci_port = 0;
        let mut ide_slot = 0;
        for disk in &self.disks {
            let cache = disk.cache_mode();
            let readonly = disk.readonly || disk.media == DiskMedia::Cdrom;
            let ro = if readonly { ",read-only=on" } else { "" };
            push(&[
                "-blockdev",
                &format!(
                    "driver=file,node-name=file-{},filename={},cache.direct={}{ro}",
                    disk.id,
                    path(&disk.path),
                    if cache.direct() { "on" } else { "off" },
                ),
                "-blockdev",
                &format!(
                    "driver={},node-name={},file=file-{}{ro}",
                    disk.format.as_str(),
                    disk.node_name(),
                    disk.id
                ),
            ]);
            let cd = disk.media == DiskMedia::Cdrom;
            let mut device = match disk.bus {
                Bus::Virtio => format!("virtio-blk-pci,drive=drive-{0},id={0}", disk.id),
                Bus::Scsi => format!(
                    "{},bus=scsi0.0,drive=drive-{1},id={1}",
                    if cd { "scsi-cd" } else { "scsi-hd" },
                    disk.id
                ),
                Bus::Sata | Bus::Ide => {
                    let kind = if cd { "ide-cd" } else { "ide-hd" };
                    let bus = if q35 {
                        // q35's built-in AHCI controller: one device per port.
                        ahci_port += 1;
                        format!("ide.{},unit=0", ahci_port - 1)
                    } else if disk.bus == Bus::Sata {
                        ahci_port += 1;
                        format!("ahci0.{},unit=0", ahci_port - 1)
                    } else {
                        // pc's PIIX IDE: two buses with a master and a slave each.
                        ide_slot += 1;
                        format!("ide.{},unit={}", (ide_slot - 1) / 2, (ide_slot - 1) % 2)
                    };
                    format!("{kind},bus={bus},drive=drive-{0},id={0}", disk.id)
                }
            };
            if let Some(index) = disk.boot_index {
                device.push_str(&format!(",bootindex={index}"));
            }
            if let Some(serial) = &disk.serial {
                device.push_str(&format!(",serial={serial}"));
            }
            if !cache.write_cache() {
                device.push_str(",write-cache=off");
            }
            push(&["-device", &device]);
        }
        for nic in &self.nics {
            let mut netdev = format!(
                "user,id=net-{},net=10.0.2.0/24,host=10.0.2.1,dhcpstart=10.0.2.2",
                nic.id
            );
            for f in &nic.forwards {
                netdev.push_str(&format!(
                    ",hostfwd={}:{}:{}-:{}",
                    f.protocol.as_str(),
                    f.host_address,
                    f.host_port,
                    f.guest_port
                ));
            }
            push(&["-netdev", &netdev]);
            let mut device = format!(
                "{},netdev=net-{},mac={},id={}",
                nic.model.device(),
                nic.id,
                nic.mac,
                nic.id
            );
            if let Some(index) = nic.boot_index {
                device.push_str(&format!(",bootindex={index}"));
            }
            push(&["-device", &device]);
        }
        if self.rng {
            push(&[
                "-object",
                "rng-random,id=rng0,filename=/dev/urandom",
                "-device",
                "virtio-rng-pci,rng=rng0",
            ]);
        }
        if let Some(action) = self.watchdog {
            push(&[
                "-device",
                "i6300esb",
                "-action",
                &format!("watchdog={}", action.as_str()),
            ]);
        }
        push(&[
            "-chardev",
            &format!(
                "socket,id=console,path={},server=on,wait=off,logfile={},logappend=on",
                path(&self.console_socket),
                path(&self.console_log)
            ),
            "-serial",
            "chardev:console",
        ]);
        if let Some(vnc) = &self.vnc_socket {
            push(&["-vga", "std", "-vnc", &format!("unix:{}", path(vnc))]);
        }
        push(&[
            "-qmp",
            &format!("unix:{},server=on,wait=off", path(&self.qmp_socket)),
        ]);
        push(&["-pidfile", &path(&self.pidfile)]);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }

    #[test]
    fn command_line() {
        let argv = spec().argv().join(" ");
        assert!(argv.contains("-machine q35,accel=tcg,smm=off"), "{argv}");
        assert!(argv.contains("-smp 2,sockets=1,cores=2,threads=1"));
        assert!(argv.contains("-device virtio-blk-pci,drive=drive-root,id=root,bootindex=1"));
        assert!(argv.contains("hostfwd=tcp:127.0.0.1:40000-:80"));
        assert!(
            argv.contains("-smbios type=1,uuid=5e1c2c3a-0000-4000-8000-000000000001,serial=abc")
        );
        assert!(argv.starts_with("-name guest=default_vm1"));
    }

    #[test]
    fn disks_are_named_blockdev_nodes() {
        let argv = spec().argv().join(" ");
        assert!(
            argv.contains("-blockdev driver=file,node-name=file-root,filename=/d/root.qcow2,cache.direct=on -blockdev driver=qcow2,node-name=drive-root,file=file-root"),
            "{argv}"
        );
        assert!(!argv.contains("-drive"), "{argv}");
    }

    #[test]
    fn errors_about_a_disk_node_name_its_file() {
        let said = "qemu-system-x86_64: -blockdev driver=qcow2,node-name=drive-root,file=file-root: Unsupported qcow2 version 3";
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
        let argv = s.argv().join(" ");
        assert!(
            argv.contains("filename=/d/root.qcow2,cache.direct=off"),
            "{argv}"
        );
        assert!(
            argv.contains("id=root,bootindex=1,write-cache=off"),
            "{argv}"
        );
        assert!(
            argv.contains("filename=/d/seed.iso,cache.direct=off,read-only=on"),
            "{argv}"
        );
        assert!(
            argv.contains("driver=raw,node-name=drive-cd,file=file-cd,read-only=on"),
            "{argv}"
        );
        assert!(
            argv.contains("ide-cd,bus=ide.0,unit=0,drive=drive-cd,id=cd"),
            "{argv}"
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
        let argv = s.argv().join(" ");
        assert!(
            argv.contains("driver=file,node-name=pflash0-file,filename=/fw/code.fd,read-only=on"),
            "{argv}"
        );
        assert!(
            argv.contains("driver=raw,node-name=pflash1,file=pflash1-file "),
            "{argv}"
        );
        assert!(
            argv.contains("-machine pflash0=pflash0,pflash1=pflash1"),
            "{argv}"
        );
    }
}
