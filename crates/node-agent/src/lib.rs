//! The node agent: registers its nodes, heart-beats them, and drives every VMI bound to
//! them through its phases with a hypervisor backend. One agent may serve several nodes
//! (simulated nodes share one), with a single watch on VMIs.

pub mod bootstrap;
mod cloud_init;
mod cluster_dns;
pub mod connections;
mod context;
pub mod endpoint;
pub mod host_paths;
pub mod host_tools;
pub mod hypervisor;
mod migration;
pub mod network_policy;
mod node;
pub mod node_metrics;
pub mod pod_network;
pub mod qemu_hv;
pub mod qemu_user;
pub mod readings;
mod seed;
pub mod servers;
mod service_proxy;
pub mod sim;
pub mod sim_ipam;
mod sysprep;
pub mod usage;
mod vmi;
mod vmi_status;
pub mod volume_sources;

use std::sync::Arc;
use std::time::Duration;

pub use hypervisor::Hypervisor;

#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The nodes this agent runs.
    pub nodes: Vec<String>,
    /// The address other hosts reach this node at.
    pub address: String,
    pub heartbeat_interval: Duration,
    /// The console endpoint this agent serves (`endpoint::serve`); agents inside the
    /// server process have none, the server reaches their consoles directly.
    pub endpoint: Option<endpoint::Published>,
}

/// Registers the nodes, then runs heartbeats and VMI reconciliation until the process ends.
pub async fn run(
    client: kube::Client,
    config: AgentConfig,
    hypervisor: Arc<dyn Hypervisor>,
) -> Result<(), kube::Error> {
    let (millicpu, memory) = hypervisor.capacity();
    let host_tools = host_tools::Report::new(hypervisor.host_tools(), config.nodes.join(", "));
    let network = hypervisor.network_report();
    for name in &config.nodes {
        let spec = node::NodeSpec {
            name,
            hypervisor: hypervisor.kind(),
            accel: hypervisor.accel(),
            millicpu,
            memory,
            address: &config.address,
            endpoint: config.endpoint.as_ref(),
            host_tools: host_tools.as_ref().map(host_tools::Report::condition),
            network: network.as_ref(),
        };
        node::register(&client, &spec).await?;
    }
    tokio::spawn(node::heartbeat(
        client.clone(),
        config.nodes.clone(),
        config.heartbeat_interval,
        host_tools,
        network.as_ref().map(pod_network::Report::condition),
    ));
    if let Some(ipam) = hypervisor.sim_ipam() {
        tokio::spawn(ipam.follow(client.clone(), config.nodes.clone()));
    }
    if let Some(slot) = hypervisor.pod_network() {
        tokio::spawn(pod_network::run(client.clone(), slot.clone()));
        tokio::spawn(service_proxy::run(client.clone(), slot.clone()));
        tokio::spawn(network_policy::run(client.clone(), slot));
    }
    vmi::run(client, config.nodes, hypervisor).await;
    Ok(())
}
