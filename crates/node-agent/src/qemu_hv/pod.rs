//! A VMI's Pod on the node's pod network: its sandbox with KubeVirt's masquerade binding,
//! made before QEMU starts (QEMU then starts inside it, on its tap), the DHCP server
//! that gives the guest its lease, and the sandbox taken down when the VMI leaves.

use std::time::Duration;

use kube::ResourceExt;
use kubevirt_api::devices::{Binding, Interface};
use kubevirt_api::model::VirtualMachineInstance;
use network::dhcp::{self, Lease};
use network::masquerade::{self, Masquerade, Protocol};
use network::node::Pod;
use network::secondary::Attachment;

use super::driver::Driver;
use super::machine::mac_for;
use super::start_failed;
use crate::hypervisor::Started;
use crate::pod_network::{pod_key, Ready};
use crate::volume_sources::VolumeSources;

/// How long a start waits for the node's pod network to be set up (node IPAM hands
/// out the Node's subnet within moments of its registration).
const NETWORK_WAIT: Duration = Duration::from_secs(30);

/// The VMI's interface on the pod network, with its index (its MAC depends on it).
fn pod_interface(vmi: &VirtualMachineInstance) -> Option<(usize, &Interface)> {
    vmi.spec
        .interfaces()
        .iter()
        .enumerate()
        .find(|(_, iface)| vmi.spec.on_pod_network(&iface.name))
}

/// Each tap the VMI's Pod holds and the interface it carries: `tap0` the pod network's,
/// `tap<n>` the n-th Multus network's.
pub(super) fn taps(vmi: &VirtualMachineInstance) -> Vec<(String, String)> {
    pod_interface(vmi)
        .map(|(_, iface)| (network::masquerade::TAP.to_string(), iface.name.clone()))
        .into_iter()
        .chain(secondary_interfaces(vmi).map(|(n, iface)| (format!("tap{n}"), iface.name.clone())))
        .collect()
}

/// The ports of a masquerade interface that reach the guest (none listed: every port).
fn forwarded_ports(iface: &Interface) -> Vec<(Protocol, u16)> {
    iface
        .ports
        .iter()
        .map(|p| {
            let protocol = if p.protocol.eq_ignore_ascii_case("udp") {
                Protocol::Udp
            } else {
                Protocol::Tcp
            };
            (protocol, p.port)
        })
        .collect()
}

/// The VMI's interfaces on Multus networks, with their numbers (`net{number}`).
fn secondary_interfaces(vmi: &VirtualMachineInstance) -> impl Iterator<Item = (usize, &Interface)> {
    vmi.spec
        .interfaces()
        .iter()
        .filter_map(|iface| Some((vmi.spec.multus_number(&iface.name)?, iface)))
}

/// The lease the guest of `vmi` gets: KubeVirt's masquerade address (with the bridge
/// binding: the Pod's own address and the node's gateway), the cluster's DNS server and
/// search domains, its hostname.
fn lease(
    vmi: &VirtualMachineInstance,
    mac: [u8; 6],
    ready: &Ready,
    binding: &Binding,
    pod: &Pod,
) -> Lease {
    let plan = &ready.plan;
    let (address, prefix_len, gateway) = match binding {
        Binding::Bridge => (
            pod.address,
            ready.network.subnet().prefix_len(),
            ready.network.gateway(),
        ),
        _ => (
            masquerade::GUEST,
            masquerade::PREFIX_LEN,
            masquerade::GATEWAY,
        ),
    };
    let namespace = vmi.namespace().to_string();
    let domain = &plan.domain;
    let hostname = vmi.spec.hostname.clone().unwrap_or_else(|| vmi.name_any());
    Lease {
        mac,
        address,
        prefix_len,
        gateway,
        // The node's cluster DNS, on its bridge (`cluster_dns`).
        dns_servers: vec![ready.network.gateway()],
        search: vec![
            format!("{namespace}.svc.{domain}"),
            format!("svc.{domain}"),
            domain.clone(),
        ],
        hostname,
        mtu: None,
    }
}

impl Driver {
    /// The node's pod network, when this node runs one and the VMI has an interface on it.
    async fn pod_network_for(
        &self,
        vmi: &VirtualMachineInstance,
    ) -> Result<Option<std::sync::Arc<Ready>>, Started> {
        let Some(slot) = self.config.pod_network.clone() else {
            return Ok(None);
        };
        if pod_interface(vmi).is_none() && secondary_interfaces(vmi).next().is_none() {
            return Ok(None);
        }
        slot.wait(NETWORK_WAIT).await.map(Some).ok_or_else(|| {
            start_failed(
                "FailedCreate",
                format!(
                    "the pod network of node {} is not set up: it waits for the Node's spec.podCIDR from node IPAM (see the agent's log)",
                    slot.node()
                ),
            )
        })
    }

    /// Makes the VMI's Pod (again, if part of it is there) and serves its guest's DHCP;
    /// `None` when the VMI is not on this node's pod network.
    pub(super) async fn attach_pod(
        &mut self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
    ) -> Result<Option<Pod>, Started> {
        let Some(ready) = self.pod_network_for(vmi).await? else {
            return Ok(None);
        };
        let tap_owner = self
            .qemu_uid(vmi)
            .map_err(|e| start_failed("FailedCreate", e))?
            .map(|uid| (uid, uid));
        let primary = pod_interface(vmi);
        let guest_mac = primary.and_then(|(index, iface)| {
            let text = iface
                .mac_address
                .clone()
                .unwrap_or_else(|| mac_for(vmi.uid(), index));
            dhcp::parse_mac(&text)
        });
        let binding = match primary.map(|(_, iface)| iface) {
            None => network::node::Binding::Unused,
            Some(iface) if iface.binding == Binding::Bridge => network::node::Binding::Bridge {
                tap_owner,
                guest_mac,
            },
            Some(iface) if iface.binding == Binding::Masquerade => {
                network::node::Binding::Masquerade(Masquerade {
                    ports: forwarded_ports(iface),
                    tap_owner,
                    guest_mac,
                })
            }
            Some(iface) => {
                return Err(start_failed(
                    "FailedCreate",
                    format!(
                        "interface {}: only the masquerade and bridge bindings are available on the pod network of virtplane nodes",
                        iface.name
                    ),
                ))
            }
        };
        let key = pod_key(vmi.namespace(), &vmi.name_any());
        let attaching = |what: &str, e: &dyn std::fmt::Display| {
            start_failed("FailedCreate", format!("{what}: {e}"))
        };
        let pod = ready
            .network
            .attach(&key, &binding)
            .await
            .map_err(|e| attaching("attaching to the pod network", &e))?;
        if let Err(failure) = self
            .attach_secondaries(vmi, sources, &ready, &pod, tap_owner)
            .await
        {
            // Never a half-made Pod: what the primary made goes too.
            if let Err(e) = ready.network.detach(&key).await {
                tracing::warn!("taking down the half-made Pod {key}: {e}");
            }
            return Err(failure);
        }
        if let Some((index, iface)) = primary {
            self.serve_guest_dhcp(vmi, &ready, index, iface, &pod)?;
        }
        self.pod = Some(pod.clone());
        Ok(Some(pod))
    }

    /// Attaches the Pod to the NetworkAttachmentDefinitions of the VMI's Multus networks.
    async fn attach_secondaries(
        &self,
        vmi: &VirtualMachineInstance,
        sources: &VolumeSources,
        ready: &Ready,
        pod: &Pod,
        tap_owner: Option<(u32, u32)>,
    ) -> Result<(), Started> {
        let key = pod_key(vmi.namespace(), &vmi.name_any());
        for (number, iface) in secondary_interfaces(vmi) {
            let failed = |e: &dyn std::fmt::Display| {
                start_failed(
                    "FailedCreate",
                    format!("interface {}: network {}: {e}", iface.name, iface.name),
                )
            };
            if iface.binding != Binding::Bridge {
                return Err(failed(
                    &"only the bridge binding is available on Multus networks of virtplane nodes",
                ));
            }
            let config = sources
                .network(&iface.name)
                .unwrap_or(&serde_json::Value::Null);
            let attachment = Attachment::from_config(config).map_err(|e| failed(&e))?;
            ready
                .network
                .attach_secondary(&key, pod, number, attachment, tap_owner)
                .await
                .map_err(|e| failed(&e))?;
        }
        Ok(())
    }

    fn serve_guest_dhcp(
        &self,
        vmi: &VirtualMachineInstance,
        ready: &Ready,
        index: usize,
        iface: &Interface,
        pod: &Pod,
    ) -> Result<(), Started> {
        let mac_text = iface
            .mac_address
            .clone()
            .unwrap_or_else(|| mac_for(vmi.uid(), index));
        let mac = dhcp::parse_mac(&mac_text).ok_or_else(|| {
            start_failed(
                "FailedCreate",
                format!("interface {}: MAC {mac_text} cannot be parsed", iface.name),
            )
        })?;
        let key = pod_key(vmi.namespace(), &vmi.name_any());
        ready
            .network
            .serve_dhcp(&key, pod, lease(vmi, mac, ready, &iface.binding, pod))
            .map_err(|e| {
                start_failed(
                    "FailedCreate",
                    format!("interface {}: serving DHCP: {e}", iface.name),
                )
            })
    }

    /// For a guest this driver adopted (the agent restarted): finds its Pod again and
    /// serves its DHCP, which did not survive the agent.
    pub(super) fn readopt_pod(&mut self, vmi: &VirtualMachineInstance) {
        if self.pod.is_some() {
            return;
        }
        let Some(ready) = self.config.pod_network.as_ref().and_then(|s| s.get()) else {
            return;
        };
        let Some((index, iface)) = pod_interface(vmi) else {
            return;
        };
        let key = pod_key(vmi.namespace(), &vmi.name_any());
        match ready.network.pod(&key) {
            Ok(Some(pod)) => {
                if let Err(Started::Failed { message, .. }) =
                    self.serve_guest_dhcp(vmi, &ready, index, iface, &pod)
                {
                    tracing::warn!("VMI {key}: {message}");
                }
                self.pod = Some(pod);
            }
            Ok(None) => tracing::warn!("VMI {key} runs, but its Pod's sandbox is gone"),
            Err(e) => tracing::warn!("VMI {key}: finding its Pod: {e}"),
        }
    }
}

/// Relays connections to a port of `node_address` (a free one) to `port` at the Pod IP
/// `pod`: how a migration source, which reaches nodes, reaches a target QEMU in its Pod.
pub(super) async fn relay_into(
    node_address: &str,
    pod: std::net::Ipv4Addr,
    port: u16,
) -> Result<(u16, tokio::task::JoinHandle<()>), String> {
    relay(node_address, pod.to_string(), port).await
}

/// Relays connections to a free port of `listen` (an address of this node) to
/// `to:port`; returns the port and the task (aborting it stops the relay).
pub(super) async fn relay(
    listen: &str,
    to: String,
    port: u16,
) -> Result<(u16, tokio::task::JoinHandle<()>), String> {
    let listener = tokio::net::TcpListener::bind((listen, 0))
        .await
        .map_err(|e| format!("no free port on {listen}: {e}"))?;
    let outside = listener
        .local_addr()
        .map_err(|e| format!("no free port on {listen}: {e}"))?
        .port();
    let relay = tokio::spawn(async move {
        loop {
            let Ok((mut inbound, from)) = listener.accept().await else {
                continue;
            };
            let to = to.clone();
            tokio::spawn(async move {
                match tokio::net::TcpStream::connect((to.as_str(), port)).await {
                    Ok(mut inside) => {
                        let _ = inbound.set_nodelay(true);
                        let _ = inside.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut inside).await;
                    }
                    Err(e) => tracing::warn!("migration relay from {from} to {to}:{port}: {e}"),
                }
            });
        }
    });
    Ok((outside, relay))
}

/// Takes down the Pod of `namespace/name` on this node's pod network, if it has one.
pub(super) async fn detach_pod(
    slot: Option<&std::sync::Arc<crate::pod_network::PodNetworkSlot>>,
    namespace: &str,
    name: &str,
) {
    let Some(slot) = slot else { return };
    let key = pod_key(namespace, name);
    // Leftovers are released as the agent starts, maybe before the network is set up.
    let Some(ready) = slot.wait(NETWORK_WAIT).await else {
        tracing::warn!("the Pod of {key} stays: the node's pod network is not set up");
        return;
    };
    if let Err(e) = ready.network.detach(&key).await {
        tracing::warn!("taking down the Pod of {key}: {e}");
    }
}
