//! A QEMU-level description of one virtual machine and the command line that runs it.

use std::path::PathBuf;

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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disk {
    /// Device id, unique within the machine (the KubeVirt disk name works).
    pub id: String,
    pub path: PathBuf,
    /// `qcow2` or `raw`.
    pub format: String,
    pub bus: Bus,
    pub media: DiskMedia,
    pub readonly: bool,
    pub boot_index: Option<u32>,
    pub serial: Option<String>,
    /// `none`, `writethrough` or `writeback`.
    pub cache: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortForward {
    /// `tcp` or `udp`.
    pub protocol: String,
    pub host_address: String,
    pub host_port: u16,
    pub guest_port: u16,
}

/// A NIC on QEMU's user-mode network (NAT), laid out like KubeVirt's masquerade binding:
/// the guest is 10.0.2.2, its gateway 10.0.2.1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nic {
    pub id: String,
    /// `virtio-net-pci`, `e1000`, `e1000e`, `rtl8139`.
    pub model: String,
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
    pub kvm: bool,
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
    /// i6300esb watchdog with this action (`reset`, `poweroff`, `shutdown`, `pause`, `none`).
    pub watchdog: Option<String>,
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
    /// The full argument list (without the binary). The machine starts paused (`-S`):
    /// the caller continues it over QMP once it is watching.
    pub fn argv(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
        push(&["-name", &format!("guest={},debug-threads=on", self.name)]);
        push(&["-S", "-nodefaults", "-no-user-config", "-display", "none"]);
        let mut machine = format!(
            "{},accel={}",
            self.machine_type,
            if self.kvm { "kvm" } else { "tcg" }
        );
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
            push(&[
                "-drive",
                &format!(
                    "if=pflash,format=raw,unit=0,readonly=on,file={}",
                    path(code)
                ),
            ]);
            push(&[
                "-drive",
                &format!("if=pflash,format=raw,unit=1,file={}", path(vars)),
            ]);
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
            let mut drive = format!(
                "if=none,id=drive-{},file={},format={},cache={}",
                disk.id,
                path(&disk.path),
                disk.format,
                disk.cache
                    .as_deref()
                    .unwrap_or(if disk.media == DiskMedia::Cdrom {
                        "writeback"
                    } else {
                        "none"
                    }),
            );
            if disk.readonly || disk.media == DiskMedia::Cdrom {
                drive.push_str(",readonly=on");
            }
            push(&["-drive", &drive]);
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
                    f.protocol, f.host_address, f.host_port, f.guest_port
                ));
            }
            push(&["-netdev", &netdev]);
            let mut device = format!(
                "{},netdev=net-{},mac={},id={}",
                nic.model, nic.id, nic.mac, nic.id
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
        if let Some(action) = &self.watchdog {
            push(&[
                "-device",
                "i6300esb",
                "-action",
                &format!("watchdog={action}"),
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
            kvm: false,
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
                format: "qcow2".into(),
                bus: Bus::Virtio,
                media: DiskMedia::Disk,
                readonly: false,
                boot_index: Some(1),
                serial: None,
                cache: None,
            }],
            nics: vec![Nic {
                id: "default".into(),
                model: "virtio-net-pci".into(),
                mac: "02:00:00:00:00:01".into(),
                forwards: vec![PortForward {
                    protocol: "tcp".into(),
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
}
