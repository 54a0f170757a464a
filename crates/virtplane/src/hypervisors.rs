//! The hypervisor a node runs: QEMU on this host (after probing its accelerator and
//! seccomp sandbox) or the simulator.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};

use crate::cli::SimArgs;
pub fn sim_hypervisor(args: &SimArgs) -> Arc<dyn node_agent::Hypervisor> {
    Arc::new(node_agent::sim::Sim::new(node_agent::sim::SimConfig {
        boot_delay: args.sim_boot_delay,
        stop_delay: args.sim_stop_delay,
        migration_delay: args.sim_migration_delay,
        ..Default::default()
    }))
}

/// The hypervisor a node runs, from `--hypervisor` (QEMU unless told otherwise).
/// What a node running real VMs needs to know about its host.
pub struct HostSettings<'a> {
    pub node_name: &'a str,
    pub data_dir: &'a std::path::Path,
    pub insecure_registries: &'a [String],
    pub host_disk_dirs: &'a [PathBuf],
    /// Claim files may be in DATA_DIR/volumes and these.
    pub claim_dirs: &'a [PathBuf],
    pub qemu_uid_base: u32,
    pub accel: qemu::AccelChoice,
    pub address: String,
    pub pod_network: node_agent::pod_network::Mode,
}

/// Total memory of this host in bytes, from /proc/meminfo.
fn host_memory() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<i64>().ok()
        })
        .map_or(1 << 30, |kib| kib * 1024)
}

fn qemu_hypervisor(host: &HostSettings<'_>) -> anyhow::Result<Arc<dyn node_agent::Hypervisor>> {
    let binary = ["/usr/bin/qemu-system-x86_64", "/usr/local/bin/qemu-system-x86_64"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context("qemu-system-x86_64 is not installed: install Debian's qemu-system-x86 (scripts/install-deps does), or run with --hypervisor sim or --no-node")?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as i64);
    let chosen = qemu::accel::choose(host.accel, &binary)?;
    tracing::info!(
        "node {}: guests run with {} ({})",
        host.node_name,
        chosen.accel,
        chosen.why
    );
    let sandbox = qemu_sandbox(host.node_name, &binary);
    let node_dir = host.data_dir.join("node").join(host.node_name);
    let (pod_network, network_note) = pod_network(host, &node_dir)?;
    Ok(Arc::new(node_agent::qemu_hv::Qemu::new(
        node_agent::qemu_hv::QemuConfig {
            node_dir,
            image_cache: host.data_dir.join("images"),
            binary,
            insecure_registries: host.insecure_registries.to_vec(),
            host_disk_dirs: host.host_disk_dirs.to_vec(),
            claim_dirs: std::iter::once(host.data_dir.join("volumes"))
                .chain(host.claim_dirs.iter().cloned())
                .collect(),
            node_address: host.address.clone(),
            millicpu: cpus * 1000,
            memory: host_memory(),
            accel: chosen.accel,
            sandbox,
            qemu_uid_base: host.qemu_uid_base,
            pod_network,
            network_note,
        },
    )))
}

/// The node's pod network, as `--pod-network` asks and the host allows, and why.
fn pod_network(
    host: &HostSettings<'_>,
    node_dir: &std::path::Path,
) -> anyhow::Result<(Option<Arc<node_agent::pod_network::PodNetworkSlot>>, String)> {
    use node_agent::pod_network::{unavailable, Mode, PodNetworkSlot};
    let user = |why: String, asked: bool| {
        let say = |line: String| {
            // Asked for, it is no news; fallen back to, the user should know.
            if asked {
                tracing::info!("{line}")
            } else {
                tracing::warn!("{line}")
            }
        };
        say(format!(
            "node {}: guests use QEMU's user-mode network ({why}): no Pod IP, ports reach them through status.portForwards",
            host.node_name
        ));
        Ok((None, format!("QEMU's user-mode network: {why}")))
    };
    match (host.pod_network, unavailable()) {
        (Mode::User, _) => user("--pod-network user".into(), true),
        (Mode::Pod, Some(why)) => bail!("--pod-network pod: {why}"),
        (Mode::Auto, Some(why)) => user(why, false),
        (Mode::Pod | Mode::Auto, None) => Ok((
            Some(Arc::new(PodNetworkSlot::new(
                host.node_name,
                node_agent::pod_network::state_dir(node_dir),
            ))),
            "each VMI runs in a Pod on the node's bridge".into(),
        )),
    }
}

/// Whether this host's QEMU can run under its seccomp sandbox. Like libvirt (and so
/// KubeVirt, whose launcher leaves libvirt's `seccomp_sandbox` at its default), a QEMU
/// built without seccomp still runs guests, unsandboxed; unlike libvirt, which says
/// nothing, the node says so at error level at every start.
fn qemu_sandbox(node: &str, binary: &std::path::Path) -> bool {
    match qemu::sandbox::probe(binary) {
        Ok(()) => {
            tracing::info!(
                "node {node}: QEMU runs under its seccomp sandbox (-sandbox {})",
                qemu::sandbox::SANDBOX
            );
            true
        }
        Err(why) => {
            tracing::error!(
                "node {node}: {} CANNOT run under its seccomp sandbox ({why}): guests run WITHOUT -sandbox, so a guest that takes over its QEMU may start programs; install a QEMU built with seccomp (Debian's qemu-system-x86 is)",
                binary.display()
            );
            false
        }
    }
}

/// The hypervisor a node runs, from `--hypervisor` (QEMU unless told otherwise).
pub fn hypervisor(
    kind: Option<&str>,
    sim: &SimArgs,
    host: &HostSettings<'_>,
) -> anyhow::Result<Arc<dyn node_agent::Hypervisor>> {
    match kind.unwrap_or("qemu") {
        "sim" => Ok(sim_hypervisor(sim)),
        "qemu" => qemu_hypervisor(host),
        other => bail!("--hypervisor {other}: unknown hypervisor; use `qemu` or `sim`"),
    }
}
