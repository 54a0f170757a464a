//! Secondary networks in a Pod, as Multus and the CNI `bridge` plugin attach them and
//! KubeVirt's bridge binding uses them: a veth pair from an existing bridge of the host
//! (a LAN) into the Pod, named `netN` there, on an in-Pod bridge `k6t-netN` with the
//! guest's tap `tapN`. No address on either side: the guest is on the host bridge's LAN
//! at layer 2 and takes its address from that LAN (its DHCP server, or its own config).

use serde_json::Value;

use crate::masquerade;
use crate::netns::{self, NetNs};
use crate::sandbox::{self, SandboxError};

/// What a NetworkAttachmentDefinition's CNI configuration asks for, as far as virtplane
/// nodes attach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attachment {
    /// The CNI `bridge` plugin: the Pod on the host bridge `bridge`.
    Bridge { bridge: String },
}

/// Why a CNI configuration cannot be attached here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("the network attachment definition has no CNI configuration (spec.config), and virtplane nodes keep none on disk")]
    Missing,
    #[error("CNI plugin {0:?} is not available on virtplane nodes (only \"bridge\")")]
    Unsupported(String),
    #[error("the CNI bridge configuration names no bridge")]
    NoBridge,
}

impl Attachment {
    /// Reads a CNI configuration (one plugin, or the first of a `plugins` list).
    pub fn from_config(config: &Value) -> Result<Attachment, ConfigError> {
        let plugin = match config.get("plugins").and_then(Value::as_array) {
            Some(plugins) => plugins.first().ok_or(ConfigError::Missing)?,
            None if config.is_object() => config,
            None => return Err(ConfigError::Missing),
        };
        match plugin["type"].as_str().unwrap_or("") {
            "bridge" => {
                // The CNI bridge plugin's default bridge name.
                let bridge = plugin["bridge"].as_str().unwrap_or("cni0");
                if bridge.is_empty() {
                    return Err(ConfigError::NoBridge);
                }
                Ok(Attachment::Bridge {
                    bridge: bridge.to_string(),
                })
            }
            other => Err(ConfigError::Unsupported(other.to_string())),
        }
    }
}

/// One secondary interface of a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secondary {
    /// Its number: the interface is `net{n}` in the Pod, as Multus names them.
    pub number: usize,
    pub attachment: Attachment,
    /// The host end of its veth pair.
    pub host_veth: String,
    /// The uid and gid QEMU runs as (the tap is theirs).
    pub tap_owner: Option<(u32, u32)>,
}

impl Secondary {
    pub fn pod_interface(&self) -> String {
        format!("net{}", self.number)
    }

    /// The guest's tap for it, which QEMU opens.
    pub fn tap(&self) -> String {
        format!("tap{}", self.number)
    }

    fn guest_bridge(&self) -> String {
        format!("k6t-net{}", self.number)
    }
}

/// Attaches `secondary` to the Pod `ns` (again, if part of it is there). A host bridge
/// that does not exist is an error: the CNI bridge plugin would make one, but a bridge
/// to nowhere is never what a VM on a LAN wants.
pub async fn attach(
    host: &rtnetlink::Handle,
    ns: &NetNs,
    secondary: &Secondary,
) -> Result<(), SandboxError> {
    let Attachment::Bridge { bridge } = &secondary.attachment;
    if sandbox::link_index(host, bridge).await?.is_none() {
        return Err(SandboxError::NoLink(format!(
            "{bridge} (the bridge of network {}, which this node does not have)",
            secondary.pod_interface()
        )));
    }
    let inside = netns::netlink(Some(ns)).map_err(|source| SandboxError::Io {
        what: format!("netlink in {}", ns.name()),
        source,
    })?;
    let name = secondary.pod_interface();
    let pod_end =
        sandbox::veth_into(host, ns, &inside, &secondary.host_veth, &name, bridge).await?;
    let guest_bridge = sandbox::bridge_up(&inside, &secondary.guest_bridge()).await?;
    inside
        .link()
        .set(
            rtnetlink::LinkUnspec::new_with_index(pod_end)
                .controller(guest_bridge)
                .up()
                .build(),
        )
        .execute()
        .await
        .map_err(|source| SandboxError::Netlink {
            what: format!("putting {name} on {}", secondary.guest_bridge()),
            source,
        })?;
    masquerade::tap_on(
        ns,
        &inside,
        guest_bridge,
        &secondary.tap(),
        secondary.tap_owner,
    )
    .await
}

/// Removes the host end of a secondary's veth pair (the Pod's end goes with it); gone
/// already is no error.
pub async fn detach(host: &rtnetlink::Handle, host_veth: &str) -> Result<(), SandboxError> {
    if let Some(index) = sandbox::link_index(host, host_veth).await? {
        host.link()
            .del(index)
            .execute()
            .await
            .map_err(|source| SandboxError::Netlink {
                what: format!("removing {host_veth}"),
                source,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bridge_configs_are_read_as_the_cni_plugin_reads_them() {
        let plain = json!({"cniVersion": "0.3.1", "type": "bridge", "bridge": "br-lan"});
        assert_eq!(
            Attachment::from_config(&plain),
            Ok(Attachment::Bridge {
                bridge: "br-lan".into()
            })
        );
        let list =
            json!({"cniVersion": "0.4.0", "plugins": [{"type": "bridge"}, {"type": "tuning"}]});
        assert_eq!(
            Attachment::from_config(&list),
            Ok(Attachment::Bridge {
                bridge: "cni0".into()
            })
        );
        assert_eq!(
            Attachment::from_config(&json!({"type": "macvlan", "master": "eth0"})),
            Err(ConfigError::Unsupported("macvlan".into()))
        );
        assert_eq!(
            Attachment::from_config(&Value::Null),
            Err(ConfigError::Missing)
        );
    }
}
