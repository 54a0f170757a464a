//! A VMI's disks, interfaces and networks, typed (`spec.domain.devices.disks`,
//! `.interfaces`, `spec.networks` of [`crate::model::vmi::VmiSpec`]), so that the node
//! agents and the migration checks match on kinds instead of probing JSON keys. Values that
//! admission let through but that do not fit read as unset.

use serde_json::Value;

/// How a disk is presented to the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    Disk,
    Cdrom,
    Lun,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Disk {
    pub name: String,
    pub media: Media,
    /// `virtio` (the default), `sata`, `scsi`, `ide` or `usb`.
    pub bus: String,
    pub readonly: bool,
    pub boot_order: Option<u32>,
    pub serial: Option<String>,
    /// `none`, `writethrough` or `writeback`.
    pub cache: Option<String>,
    /// The disk as written.
    pub raw: Value,
}

crate::raw_backed!(Disk);

impl Disk {
    pub fn from_value(raw: &Value) -> Disk {
        let (target, media) = if let Some(cd) = raw.get("cdrom") {
            (cd, Media::Cdrom)
        } else if let Some(lun) = raw.get("lun") {
            (lun, Media::Lun)
        } else {
            (raw.get("disk").unwrap_or(&Value::Null), Media::Disk)
        };
        let text = |v: &Value| v.as_str().map(str::to_string);
        Disk {
            name: raw["name"].as_str().unwrap_or("").to_string(),
            media,
            bus: target["bus"].as_str().unwrap_or("virtio").to_string(),
            readonly: target["readonly"].as_bool().unwrap_or(false),
            boot_order: raw["bootOrder"]
                .as_u64()
                .and_then(|b| u32::try_from(b).ok()),
            serial: text(&raw["serial"]),
            cache: text(&raw["cache"]),
            raw: raw.clone(),
        }
    }
}

/// How an interface connects the guest to its network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binding {
    Masquerade,
    Bridge,
    Passt,
    Sriov,
    /// A network binding plugin, by name.
    Plugin(String),
    /// None named (admission defaults one; an unknown key reads as this too).
    Unset,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: Option<String>,
    pub port: u16,
    /// `TCP` (the default) or `UDP`.
    pub protocol: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Interface {
    pub name: String,
    pub binding: Binding,
    /// `virtio` unless set.
    pub model: String,
    pub mac_address: Option<String>,
    pub ports: Vec<Port>,
    pub boot_order: Option<u32>,
    /// The interface as written.
    pub raw: Value,
}

crate::raw_backed!(Interface);

impl Interface {
    pub fn from_value(raw: &Value) -> Interface {
        let binding = if raw.get("masquerade").is_some() {
            Binding::Masquerade
        } else if raw.get("bridge").is_some() {
            Binding::Bridge
        } else if raw.get("passt").is_some() {
            Binding::Passt
        } else if raw.get("sriov").is_some() {
            Binding::Sriov
        } else if let Some(plugin) = raw.pointer("/binding/name").and_then(Value::as_str) {
            Binding::Plugin(plugin.to_string())
        } else {
            Binding::Unset
        };
        let ports = raw["ports"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|p| Port {
                        name: p["name"].as_str().map(str::to_string),
                        // Admission keeps ports in 1-65535; anything else reads as unset (0).
                        port: p["port"]
                            .as_u64()
                            .and_then(|p| u16::try_from(p).ok())
                            .unwrap_or(0),
                        protocol: p["protocol"].as_str().unwrap_or("TCP").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Interface {
            name: raw["name"].as_str().unwrap_or("").to_string(),
            binding,
            model: raw["model"].as_str().unwrap_or("virtio").to_string(),
            mac_address: raw["macAddress"].as_str().map(str::to_string),
            ports,
            boot_order: raw["bootOrder"]
                .as_u64()
                .and_then(|b| u32::try_from(b).ok()),
            raw: raw.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    pub name: String,
    /// The pod network (KubeVirt's default network); `false` for Multus networks.
    pub pod: bool,
    /// A Multus network: the NetworkAttachmentDefinition it names (`name` or
    /// `namespace/name`).
    pub multus: Option<String>,
    /// The network as written.
    pub raw: Value,
}

crate::raw_backed!(Network);

impl Network {
    pub fn from_value(raw: &Value) -> Network {
        Network {
            name: raw["name"].as_str().unwrap_or("").to_string(),
            pod: raw.get("pod").is_some(),
            multus: raw
                .pointer("/multus/networkName")
                .and_then(Value::as_str)
                .map(str::to_string),
            raw: raw.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn devices_read_as_their_kinds() {
        let spec = json!({
            "domain": {"devices": {
                "disks": [{"name": "root", "disk": {"bus": "sata"}, "bootOrder": 1, "cache": "none"},
                          {"name": "cd", "cdrom": {"readonly": true}},
                          {"name": "plain"}],
                "interfaces": [{"name": "default", "masquerade": {}, "model": "e1000",
                                "ports": [{"name": "web", "port": 8080}, {"port": 53, "protocol": "UDP"}]},
                               {"name": "net2", "binding": {"name": "passt"}}]}},
            "networks": [{"name": "default", "pod": {}}, {"name": "net2", "multus": {"networkName": "x"}}]
        });
        let d: crate::model::vmi::VmiSpec = serde_json::from_value(spec.clone()).unwrap();
        let (disks, interfaces) = (d.disks(), d.interfaces());
        assert_eq!(
            disks[0],
            Disk {
                name: "root".into(),
                media: Media::Disk,
                bus: "sata".into(),
                readonly: false,
                boot_order: Some(1),
                serial: None,
                cache: Some("none".into()),
                raw: spec["domain"]["devices"]["disks"][0].clone(),
            }
        );
        assert_eq!(
            (disks[1].media, disks[1].readonly, disks[1].bus.as_str()),
            (Media::Cdrom, true, "virtio")
        );
        assert_eq!(disks[2].media, Media::Disk);
        assert_eq!(interfaces[0].binding, Binding::Masquerade);
        assert_eq!(interfaces[0].model, "e1000");
        assert_eq!(
            interfaces[0].ports[1],
            Port {
                name: None,
                port: 53,
                protocol: "UDP".into()
            }
        );
        assert_eq!(interfaces[1].binding, Binding::Plugin("passt".into()));
        assert!(d.on_pod_network("default") && !d.on_pod_network("net2"));
    }
}
