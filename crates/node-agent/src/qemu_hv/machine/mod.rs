//! The QEMU machine a VMI's spec asks for: CPU, memory, firmware, disks, NICs with their
//! port forwards, devices. [`Driver::ready`] does the node-side work (volume files,
//! kernelBoot files, EFI variables, hugepages); [`machine_spec`] is the pure translation of
//! the spec and what was readied into a [`MachineSpec`].

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use kubevirt_api::model::VirtualMachineInstance;
use qemu::{
    Accel, Bus, CacheMode, Disk, DiskFormat, DiskMedia, Firmware, KernelBoot, MachineSpec, Nic,
    NicBackend, NicModel, PortForward, Protocol, WatchdogAction,
};

use kubevirt_api::devices::{Binding, Media};
use kubevirt_api::model::vmi::{Devices, Efi};

use super::driver::Driver;
use super::volumes::quantity_bytes;
use super::{start_failed, Forward, OVMF_DIR};
use crate::hypervisor::{Prepared, Started};
use crate::qemu_user::RUN_DIR;
use crate::volume_sources::VolumeSources;

fn free_port(address: &str) -> Option<u16> {
    TcpListener::bind((address, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .ok()
}

/// A stable locally administered MAC for an interface of a VMI.
pub(super) fn mac_for(uid: &str, index: usize) -> String {
    let hash = uid.bytes().fold(index as u64 * 131, |acc, b| {
        acc.wrapping_mul(31).wrapping_add(u64::from(b))
    });
    let b = hash.to_be_bytes();
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[3], b[4], b[5], b[6], b[7]
    )
}

/// What the node readied for a VMI before its machine is described.
#[derive(Clone, Debug, Default)]
pub(super) struct Readied {
    /// The file and format behind each volume, by volume name.
    pub volumes: HashMap<String, (PathBuf, DiskFormat)>,
    pub kernel_boot: Option<KernelBoot>,
    pub firmware: Option<Firmware>,
    /// The hugetlbfs mount guest RAM comes from, when the spec asks for hugepages.
    pub hugepages: Option<PathBuf>,
}

/// The node facts the translation needs.
pub(super) struct Host<'a> {
    pub accel: Accel,
    /// Where port forwards listen.
    pub address: &'a str,
    /// The VMI's runtime dir (sockets, logs, pidfile).
    pub dir: &'a Path,
    /// Whether the VMI has a Pod on the node's pod network: its pod interface is then
    /// the tap of the Pod's masquerade binding, and no port is forwarded from the node.
    pub pod_network: bool,
}

impl Driver {
    /// The machine of a VMI, with its port forwards recorded for `status.portForwards`.
    pub(super) async fn machine(
        &mut self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
    ) -> Result<MachineSpec, Started> {
        let dir = self
            .checked_dir(vmi)
            .map_err(|e| start_failed("FailedCreate", e))?;
        let readied = self.ready(vmi, sources).await?;
        let pod = self.attach_pod(vmi, sources).await?;
        let host = Host {
            accel: self.config.accel,
            address: &self.config.node_address,
            dir: &dir,
            pod_network: pod.is_some(),
        };
        let address = self.config.node_address.clone();
        let (mut machine, forwards) =
            machine_spec(vmi, &host, &readied, &mut || free_port(&address))?;
        machine.sandbox = self.config.sandbox;
        machine.netns = pod.map(|pod| pod.netns.path());
        if let (Some(users), Some(uid)) = (
            &self.users,
            self.qemu_uid(vmi)
                .map_err(|e| start_failed("FailedCreate", e))?,
        ) {
            machine.run_as = Some(users.run_as(uid));
        }
        self.forwards = forwards;
        Ok(machine)
    }

    /// Readies the files the machine uses. Volumes were readied by `prepare` already;
    /// doing it again finds them in place (and covers a start after an agent restart).
    async fn ready(
        &mut self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
    ) -> Result<Readied, Started> {
        let domain = vmi.spec.domain.clone().unwrap_or_default();
        let mut readied = Readied::default();
        for volume in vmi.spec.volumes() {
            match self.prepare_volume(vmi, volume, sources).await {
                Ok(found) => {
                    readied.volumes.insert(volume.name.clone(), found);
                }
                Err(
                    Prepared::Failed { reason, message } | Prepared::Unable { reason, message },
                ) => return Err(Started::Failed { reason, message }),
                Err(Prepared::Ready(_)) => {}
            }
        }
        readied.kernel_boot = self.kernel_boot(vmi, sources).await?;
        let efi = domain
            .firmware
            .as_ref()
            .and_then(|f| f.bootloader.as_ref())
            .and_then(|b| b.efi.as_ref());
        readied.firmware = match efi {
            None => None,
            Some(efi) => Some(self.efi_firmware(vmi, efi)?),
        };
        let hugepages = domain
            .memory
            .as_ref()
            .and_then(|m| m.hugepages.as_ref())
            .and_then(|h| h.page_size.as_deref());
        if let Some(size) = hugepages {
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
            readied.hugepages = Some(PathBuf::from("/dev/hugepages"));
        }
        Ok(readied)
    }

    /// OVMF's code and this VMI's own copy of its variable store.
    fn efi_firmware(&self, vmi: &VirtualMachineInstance, efi: &Efi) -> Result<Firmware, Started> {
        let secure = efi.secure_boot.unwrap_or(true);
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
        let vars = self.dir(vmi).join("efivars.fd");
        if !vars.exists() {
            std::fs::copy(&template, &vars)
                .map_err(|e| start_failed("FailedCreate", format!("copying EFI variables: {e}")))?;
        }
        self.grant(vmi, &vars, false)
            .map_err(|e| start_failed("FailedCreate", e))?;
        Ok(Firmware::Efi {
            code,
            vars,
            secure_boot: secure,
        })
    }
}

/// The machine `vmi`'s spec describes, on `host`, from what was `readied`; `ports` hands
/// out a node port for each port forward. Also returns the forwards, for the VMI status.
pub(super) fn machine_spec(
    vmi: &VirtualMachineInstance,
    host: &Host<'_>,
    readied: &Readied,
    ports: &mut dyn FnMut() -> Option<u16>,
) -> Result<(MachineSpec, Vec<Forward>), Started> {
    let spec = &vmi.spec;
    let domain = spec.domain.clone().unwrap_or_default();
    let dir = host.dir;
    let cpu = domain.cpu.clone().unwrap_or_default();
    let count = |n: Option<u32>| n.unwrap_or(1).max(1);
    let memory = spec
        .guest_memory()
        .and_then(serde_json::Value::as_str)
        .and_then(quantity_bytes)
        .unwrap_or(128 << 20);
    let machine_type = match domain
        .machine
        .as_ref()
        .and_then(|m| m.type_.as_deref())
        .unwrap_or("q35")
    {
        t if t.starts_with("pc-q35") || t == "q35" => "q35".to_string(),
        t if t.starts_with("pc-i440fx") || t == "pc" => "pc".to_string(),
        other => other.to_string(),
    };
    let cpu_model = match cpu.model.as_deref().unwrap_or("host-model") {
        "host-model" | "host-passthrough" if host.accel == Accel::Kvm => "host".to_string(),
        // Software emulation has no host CPU to copy; `max` offers every feature TCG has.
        "host-model" | "host-passthrough" => "max".to_string(),
        named => named.to_string(),
    };
    let hugepages = readied.hugepages.clone();
    let firmware = readied.firmware.clone().unwrap_or(Firmware::Bios);
    let acpi = domain.feature_enabled("acpi", true);
    let smm = domain.feature_enabled(
        "smm",
        matches!(
            firmware,
            Firmware::Efi {
                secure_boot: true,
                ..
            }
        ),
    );

    let disks = machine_disks(vmi, readied)?;
    let (nics, forwards) = machine_nics(vmi, host, ports)?;
    let kernel_boot = readied.kernel_boot.clone();
    let devices = domain.devices.clone().unwrap_or_default();
    let watchdog = watchdog(&devices)?;
    let graphics = devices.autoattach_graphics_device.unwrap_or(true);
    let firmware_ids = domain.firmware.clone().unwrap_or_default();
    let machine = MachineSpec {
        name: format!("{}_{}", vmi.namespace(), vmi.name()),
        uuid: firmware_ids.uuid.unwrap_or_else(|| vmi.uid().to_string()),
        serial: firmware_ids.serial,
        machine_type,
        accel: host.accel,
        cpu_model,
        sockets: count(cpu.sockets),
        cores: count(cpu.cores),
        threads: count(cpu.threads),
        memory_mib: memory.div_ceil(1 << 20),
        hugepages,
        firmware,
        kernel_boot,
        acpi,
        smm,
        disks,
        nics,
        rng: devices.rng.is_some(),
        balloon: devices.autoattach_mem_balloon.unwrap_or(true),
        watchdog,
        // In `run/`, the one dir QEMU may write (see `crate::qemu_user`).
        console_socket: dir.join(RUN_DIR).join("console.sock"),
        console_log: dir.join(RUN_DIR).join("serial.log"),
        qmp_socket: dir.join(RUN_DIR).join("qmp.sock"),
        vnc_socket: graphics.then(|| dir.join(RUN_DIR).join("vnc.sock")),
        pidfile: dir.join(RUN_DIR).join("qemu.pid"),
        // How QEMU runs is the node's business, set by `Qemu::machine`.
        sandbox: false,
        run_as: None,
        netns: None,
    };
    Ok((machine, forwards))
}

/// The machine's disks, each on the volume readied for it.
fn machine_disks(vmi: &VirtualMachineInstance, readied: &Readied) -> Result<Vec<Disk>, Started> {
    let mut disks = Vec::new();
    for disk in vmi.spec.disks() {
        let Some((path, format)) = readied.volumes.get(&disk.name).cloned() else {
            return Err(start_failed(
                "FailedCreate",
                format!("disk {} has no volume", disk.name),
            ));
        };
        let bus = match disk.bus.as_str() {
            "sata" => Bus::Sata,
            "scsi" => Bus::Scsi,
            "ide" => Bus::Ide,
            _ => Bus::Virtio,
        };
        disks.push(Disk {
            id: disk.name.clone(),
            path,
            format,
            bus,
            media: if disk.media == Media::Cdrom {
                DiskMedia::Cdrom
            } else {
                DiskMedia::Disk
            },
            readonly: disk.readonly,
            boot_index: disk.boot_order,
            serial: disk.serial.clone(),
            cache: disk.cache.as_deref().and_then(CacheMode::parse),
        });
    }
    Ok(disks)
}

/// The machine's NICs (masquerade on the pod network) with their port forwards, each
/// given a node port by `ports`.
fn machine_nics(
    vmi: &VirtualMachineInstance,
    host: &Host<'_>,
    ports: &mut dyn FnMut() -> Option<u16>,
) -> Result<(Vec<Nic>, Vec<Forward>), Started> {
    let spec = &vmi.spec;
    let uid = vmi.uid().to_string();
    let mut nics = Vec::new();
    let mut forwards = Vec::new();
    for (index, iface) in spec.interfaces().iter().enumerate() {
        let name = iface.name.clone();
        let bridge_here = iface.binding == Binding::Bridge && host.pod_network;
        let secondary = spec.multus_number(&name);
        if secondary.is_some() && !bridge_here {
            return Err(start_failed(
                "FailedCreate",
                format!("interface {name}: a Multus network takes the bridge binding on a node that runs Pods (--pod-network pod)"),
            ));
        }
        if secondary.is_none()
            && ((iface.binding == Binding::Bridge && !bridge_here) || !spec.on_pod_network(&name))
        {
            return Err(start_failed(
                    "FailedCreate",
                    format!("interface {name}: only the masquerade binding on the pod network is available on virtplane nodes (bridge needs host taps, which this node does not create)"),
                ));
        }
        let Some(model) = NicModel::parse(&iface.model) else {
            return Err(start_failed(
                "FailedCreate",
                format!("interface {name}: model {} is not available", iface.model),
            ));
        };
        let backend = if let Some(number) = secondary {
            NicBackend::Tap {
                ifname: format!("tap{number}"),
            }
        } else if host.pod_network {
            NicBackend::Tap {
                ifname: network::masquerade::TAP.into(),
            }
        } else {
            NicBackend::User {
                forwards: user_forwards(&name, iface, host, ports, &mut forwards)?,
            }
        };
        nics.push(Nic {
            id: name,
            model,
            mac: iface
                .mac_address
                .clone()
                .unwrap_or_else(|| mac_for(&uid, index)),
            backend,
            boot_index: iface.boot_order,
        });
    }
    Ok((nics, forwards))
}

/// The port forwards of an interface on QEMU's user-mode network, each given a node port
/// by `ports` and recorded in `forwards` for the VMI status.
fn user_forwards(
    name: &str,
    iface: &kubevirt_api::devices::Interface,
    host: &Host<'_>,
    ports: &mut dyn FnMut() -> Option<u16>,
    forwards: &mut Vec<Forward>,
) -> Result<Vec<PortForward>, Started> {
    let mut nic_forwards = Vec::new();
    for port in &iface.ports {
        let protocol = if port.protocol.eq_ignore_ascii_case("udp") {
            Protocol::Udp
        } else {
            Protocol::Tcp
        };
        let host_port = ports().ok_or_else(|| {
            start_failed(
                "FailedCreate",
                "no free port on the node for a port forward",
            )
        })?;
        nic_forwards.push(PortForward {
            protocol,
            host_address: host.address.to_string(),
            host_port,
            guest_port: port.port,
        });
        forwards.push((
            name.to_string(),
            port.name.clone().unwrap_or_default(),
            host_port,
            port.port,
        ));
    }
    Ok(nic_forwards)
}

/// The i6300esb watchdog, when the VMI has one.
fn watchdog(devices: &Devices) -> Result<Option<WatchdogAction>, Started> {
    let Some(watchdog) = devices.watchdog.as_ref().and_then(|w| w.i6300esb.as_ref()) else {
        return Ok(None);
    };
    let action = watchdog.action.as_deref().unwrap_or("reset");
    WatchdogAction::parse(action).map(Some).ok_or_else(|| {
        start_failed(
            "FailedCreate",
            format!("watchdog action {action} is not available"),
        )
    })
}

#[cfg(test)]
mod tests;
