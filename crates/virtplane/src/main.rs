//! The virtplane binary: wiring only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

mod admin;
mod console;
mod store_choice;
mod upload;
mod user;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};

/// The API server parses, copies and drops many small JSON values on every thread; with
/// glibc malloc that was about a third of its CPU (benches/api_vs_etcd.rs), with mimalloc
/// a small fraction. mimalloc is built without transparent huge pages (`no_thp`): with them,
/// each fresh or purged 2 MiB region was zeroed whole, about 8% of the server's CPU under
/// a create load. Guests are unaffected: QEMU asks for huge pages for guest RAM itself.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "virtplane",
    version,
    about = "A KubeVirt-compatible virtualization control plane in one binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API server with its embedded store (and, later, a local node agent).
    Server(Box<ServerArgs>),
    /// Join a server as one more node.
    Node(NodeArgs),
    /// The virtctl verbs: start, stop, restart, pause, unpause, migrate, console.
    Vm(VmArgs),
    /// Users of the API: `user add NAME` issues a client certificate and kubeconfig.
    User {
        #[command(subcommand)]
        action: UserAction,
    },
    /// virtctl's image-upload: stream a local disk image into a new (or existing)
    /// DataVolume, e.g. `image-upload dv NAME --size=1Gi --image-path=disk.qcow2`.
    ImageUpload(upload::ImageUploadArgs),
}

#[derive(Subcommand)]
enum UserAction {
    /// Issue a client certificate signed by the cluster CA (CN = NAME, O = each --group),
    /// write DATA_DIR/users/NAME.kubeconfig and print its path; with --role, also bind
    /// that ClusterRole to the user (in --namespace, else cluster-wide) through the API
    /// with DATA_DIR/admin.kubeconfig, so the server must be running.
    Add {
        name: String,
        /// A group the user is in (repeatable).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Where the role is bound (a RoleBinding); without it, a ClusterRoleBinding.
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// A ClusterRole to bind: edit, admin, view, kubevirt.io:edit, ...
        #[arg(long)]
        role: Option<String>,
        /// The server's data dir, whose CA signs the certificate.
        #[arg(long, default_value = "./virtplane-data")]
        data_dir: PathBuf,
    },
}

#[derive(Args)]
struct ServerArgs {
    /// Where the store, certificates and kubeconfigs live.
    #[arg(long, default_value = "./virtplane-data")]
    data_dir: PathBuf,
    /// Address and port of the HTTPS API.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// `sqlite` (default, in the data dir) or `etcd=URL[,URL...]`.
    #[arg(long, default_value = "sqlite")]
    store: String,
    /// `qemu` or `sim`.
    #[arg(long)]
    hypervisor: Option<String>,
    /// Name of the local node (default: the host name).
    #[arg(long)]
    node_name: Option<String>,
    /// Run the control plane alone, without a local node agent.
    #[arg(long)]
    no_node: bool,
    /// Add N simulated nodes.
    #[arg(long)]
    sim_nodes: Option<u32>,
    /// A registry (HOST:PORT) containerDisk images may come from over HTTPS with any
    /// certificate, or over plain HTTP. Other registries must present a certificate the
    /// node trusts (the system CA bundle, or SSL_CERT_FILE).
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    /// A directory hostDisk volumes may live in.
    #[arg(long = "host-disk-dir")]
    host_disk_dirs: Vec<PathBuf>,
    /// When run as root, each VMI's QEMU runs as its own uid above this one (0: QEMU
    /// runs as root); all QEMUs share this number as a group.
    #[arg(long, default_value_t = node_agent::qemu_user::DEFAULT_BASE)]
    qemu_uid_base: u32,
    /// How the local node runs guests' vCPUs: `kvm`, `tcg` (software emulation), or
    /// `auto` (KVM only when a probe guest really runs under it).
    #[arg(long, default_value = "auto")]
    accel: qemu::AccelChoice,
    /// The address the local node is reached at: published on its Node, and where the
    /// port forwards of its VMIs listen.
    #[arg(long, default_value = "127.0.0.1")]
    node_address: std::net::IpAddr,
    #[command(flatten)]
    sim: SimArgs,
    #[command(flatten)]
    timing: TimingArgs,
    #[command(flatten)]
    etcd: store_choice::EtcdArgs,
    /// How often store history is compacted, as kube-apiserver's
    /// --etcd-compaction-interval: watches and continue tokens older than the previous
    /// compaction get 410 Gone and clients re-list.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    compaction_interval: Duration,
    /// Bearer tokens in kube-apiserver's static token file format: CSV lines
    /// `token,user,uid,"group1,group2"`.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Where the cluster CA, the serving certificate and the tokens are kept (default
    /// DIR/pki). Servers that share one store share one PKI: give each the same.
    #[arg(long)]
    pki_dir: Option<PathBuf>,
    #[command(flatten)]
    limits: LimitArgs,
    /// Write kube-apiserver's audit events (audit.k8s.io/v1 Event, one JSON line each)
    /// to FILE (`-`: standard output); needs --audit-policy.
    #[arg(long, visible_alias = "audit-log-path", value_name = "FILE")]
    audit_log: Option<PathBuf>,
    /// Which requests the audit log records, at what level: an audit.k8s.io/v1 Policy
    /// (YAML or JSON), as kube-apiserver's --audit-policy-file.
    #[arg(long, visible_alias = "audit-policy-file", value_name = "FILE")]
    audit_policy: Option<PathBuf>,
    /// A URL clients reach the API at, for the kubeconfigs this server writes
    /// (DIR/admin.kubeconfig, DIR/node-join.kubeconfig, users'): one context per URL, the
    /// first current. Give every server's URL, and node agents move to the next server
    /// when theirs stops answering. Default: this server's own address. The URLs' hosts
    /// are added to the serving certificate.
    #[arg(long = "kubeconfig-server", value_name = "URL")]
    kubeconfig_servers: Vec<String>,
}

/// kube-apiserver's request limits.
#[derive(Args, Clone)]
struct LimitArgs {
    /// Read-only requests (get, list) served at once, as kube-apiserver (0: no limit);
    /// beyond it 429 with Retry-After. Watches and websockets are not counted. One
    /// user holds at most an equal share among the users holding slots (at most half);
    /// system:masters members are never refused.
    #[arg(long, default_value_t = apiserver::limits::DEFAULT_MAX_REQUESTS_INFLIGHT)]
    max_requests_inflight: usize,
    /// Mutating requests (create, update, patch, delete, ...) served at once, shared
    /// the same way (0: no limit).
    #[arg(long, default_value_t = apiserver::limits::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    max_mutating_requests_inflight: usize,
    /// How long a request that is not long-running may take, body included, before
    /// it is answered 504 Timeout.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    request_timeout: Duration,
    /// Watches one user may have open at once (0: no limit); system:masters members
    /// are not counted.
    #[arg(long, default_value_t = apiserver::limits::DEFAULT_MAX_WATCHES_PER_USER)]
    max_watches_per_user: usize,
}

impl LimitArgs {
    fn config(&self) -> apiserver::limits::LimitsConfig {
        apiserver::limits::LimitsConfig {
            max_requests_inflight: self.max_requests_inflight,
            max_mutating_requests_inflight: self.max_mutating_requests_inflight,
            max_watches_per_user: self.max_watches_per_user,
            request_timeout: self.request_timeout,
        }
    }
}

/// How simulated nodes behave.
#[derive(Args, Clone)]
struct SimArgs {
    /// How long a simulated guest takes to boot (`500ms`, `2s`).
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    sim_boot_delay: Duration,
    /// How long a simulated guest takes to shut down.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    sim_stop_delay: Duration,
    /// How long a live migration of a simulated guest takes.
    #[arg(long, default_value = "300ms", value_parser = parse_duration)]
    sim_migration_delay: Duration,
}

#[derive(Args, Clone)]
struct TimingArgs {
    /// How often node agents report that they are alive.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    heartbeat_interval: Duration,
    /// How long a node may stay silent before it is NotReady and its VMIs fail.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    node_monitor_grace_period: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    node_agent::sim::parse_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration like 500ms, 2s or 1m"))
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct NodeArgs {
    /// Maintenance of a node instead of running one: drain, cordon, uncordon.
    #[command(subcommand)]
    action: Option<NodeAction>,
    #[arg(long, required = true)]
    kubeconfig: Option<PathBuf>,
    #[arg(long, required = true)]
    name: Option<String>,
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[arg(long)]
    hypervisor: Option<String>,
    /// Address and port of the HTTPS endpoint the server reaches consoles through
    /// (port 0: any free port); published on the Node.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// As for `server`: a registry images may come from with any certificate or over HTTP.
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    #[arg(long = "host-disk-dir")]
    host_disk_dirs: Vec<PathBuf>,
    /// Where the files behind PersistentVolumeClaims may be, besides DATA_DIR/volumes
    /// (the server's DIR/volumes, for a node sharing its host or storage).
    #[arg(long = "claim-dir")]
    claim_dirs: Vec<PathBuf>,
    /// When run as root, each VMI's QEMU runs as its own uid above this one (0: QEMU
    /// runs as root); all QEMUs share this number as a group.
    #[arg(long, default_value_t = node_agent::qemu_user::DEFAULT_BASE)]
    qemu_uid_base: u32,
    /// As for `server`: `auto`, `kvm` or `tcg`.
    #[arg(long, default_value = "auto")]
    accel: qemu::AccelChoice,
    /// The address this node is reached at (published on its Node; port forwards listen
    /// there). Default: the `--listen` address, or loopback when that is unspecified.
    #[arg(long)]
    node_address: Option<std::net::IpAddr>,
    #[command(flatten)]
    sim: SimArgs,
    /// How often this agent reports that it is alive.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    heartbeat_interval: Duration,
}

#[derive(Subcommand)]
enum NodeAction {
    /// Cordon the node with the drain taint (kubevirt.io/drain:NoSchedule) and wait until
    /// its VMIs are gone: live-migrated when their evictionStrategy allows, else stopped
    /// and started elsewhere by their VM.
    Drain {
        name: String,
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// How long to wait for the node to empty.
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Mark the node unschedulable (as `kubectl cordon`).
    Cordon {
        name: String,
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// Undo cordon and drain.
    Uncordon {
        name: String,
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
}

#[derive(Args)]
struct VmArgs {
    /// start, stop, restart, pause, unpause, softreboot, migrate, migrate-cancel or console.
    verb: String,
    name: String,
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // One TLS implementation for every client and server in the process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Server(args) => run_server(*args),
        Command::Node(args) => run_node(args),
        Command::Vm(args) => run_vm(args),
        Command::ImageUpload(args) => runtime().and_then(|rt| rt.block_on(upload::run(args))),
        Command::User {
            action:
                UserAction::Add {
                    name,
                    groups,
                    namespace,
                    role,
                    data_dir,
                },
        } => user::add(user::AddUser {
            name,
            groups,
            namespace,
            role,
            data_dir,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("virtplane: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Runtime::new().context("cannot start the async runtime")
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// This server's name in leader elections, `HOST_RANDOM`, kept in `DIR/server-id` so that
/// a restarted server takes its own lease back at once instead of waiting it out.
fn server_identity(data_dir: &std::path::Path) -> anyhow::Result<String> {
    let path = data_dir.join("server-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        if !id.trim().is_empty() {
            return Ok(id.trim().to_string());
        }
    }
    let id = format!("{}_{}", hostname(), uuid::Uuid::new_v4());
    std::fs::write(&path, &id)
        .with_context(|| format!("cannot write the server's identity to {}", path.display()))?;
    Ok(id)
}

fn sim_hypervisor(args: &SimArgs) -> Arc<dyn node_agent::Hypervisor> {
    Arc::new(node_agent::sim::Sim::new(node_agent::sim::SimConfig {
        boot_delay: args.sim_boot_delay,
        stop_delay: args.sim_stop_delay,
        migration_delay: args.sim_migration_delay,
        ..Default::default()
    }))
}

/// The hypervisor a node runs, from `--hypervisor` (QEMU unless told otherwise).
/// What a node running real VMs needs to know about its host.
struct HostSettings<'a> {
    node_name: &'a str,
    data_dir: &'a std::path::Path,
    insecure_registries: &'a [String],
    host_disk_dirs: &'a [PathBuf],
    /// Claim files may be in DATA_DIR/volumes and these.
    claim_dirs: &'a [PathBuf],
    qemu_uid_base: u32,
    accel: qemu::AccelChoice,
    address: String,
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
    Ok(Arc::new(node_agent::qemu_hv::Qemu::new(
        node_agent::qemu_hv::QemuConfig {
            node_dir: host.data_dir.join("node").join(host.node_name),
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
        },
    )))
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
fn hypervisor(
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

fn run_node_action(action: NodeAction) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let (kubeconfig, name) = match &action {
            NodeAction::Drain {
                kubeconfig, name, ..
            }
            | NodeAction::Cordon { kubeconfig, name }
            | NodeAction::Uncordon { kubeconfig, name } => (kubeconfig.clone(), name.clone()),
        };
        let config = admin::config(kubeconfig.as_deref()).await?;
        let client = kube::Client::try_from(config).context("cannot build an API client")?;
        match action {
            NodeAction::Drain { timeout, .. } => admin::drain(client, &name, timeout).await,
            NodeAction::Cordon { .. } => admin::cordon(client, &name, false).await,
            NodeAction::Uncordon { .. } => admin::uncordon(client, &name).await,
        }
    })
}

fn run_node(args: NodeArgs) -> anyhow::Result<()> {
    if let Some(action) = args.action {
        return run_node_action(action);
    }
    let (Some(kubeconfig), Some(name)) = (args.kubeconfig.clone(), args.name.clone()) else {
        bail!("virtplane node needs --kubeconfig and --name");
    };
    // The address the server dials: as given, else the one listened on, or loopback for
    // "any".
    let node_address = match args.node_address {
        Some(address) => address.to_string(),
        None if args.listen.ip().is_unspecified() => "127.0.0.1".to_string(),
        None => args.listen.ip().to_string(),
    };
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("./virtplane-node-data"));
    let host = HostSettings {
        node_name: &name,
        data_dir: &data_dir,
        insecure_registries: &args.insecure_registries,
        host_disk_dirs: &args.host_disk_dirs,
        claim_dirs: &args.claim_dirs,
        qemu_uid_base: args.qemu_uid_base,
        accel: args.accel,
        address: node_address.clone(),
    };
    let hypervisor = hypervisor(args.hypervisor.as_deref(), &args.sim, &host)?;
    runtime()?.block_on(async move {
        let kubeconfig_path = kubeconfig;
        let kubeconfig = kube::config::Kubeconfig::read_from(&kubeconfig_path)
            .with_context(|| format!("cannot read kubeconfig {}", kubeconfig_path.display()))?;
        // Every server the kubeconfig names for its cluster: the agent moves between them.
        let servers = |kubeconfig: kube::config::Kubeconfig, what: String| async move {
            node_agent::servers::client(&kubeconfig)
                .await
                .with_context(|| format!("{what} is not usable"))
        };
        // A join token only asks for the node's own identity, which the agent then uses;
        // a kubeconfig with a client certificate is that identity already.
        let (client, config) = if node_agent::bootstrap::has_client_certificate(&kubeconfig) {
            servers(kubeconfig, format!("kubeconfig {}", kubeconfig_path.display())).await?
        } else {
            let (join, _) =
                servers(kubeconfig.clone(), format!("kubeconfig {}", kubeconfig_path.display()))
                    .await?;
            let own = node_agent::bootstrap::node_kubeconfig(&kubeconfig, &join, &data_dir, &name)
                .await
                .with_context(|| format!("node {name} cannot obtain its identity with {}", kubeconfig_path.display()))?;
            servers(own, "the node's own kubeconfig".to_string()).await?
        };
        // The agent's endpoint lets in only clients certified by the cluster CA.
        let Some(client_ca) = config.root_cert.clone() else {
            bail!(
                "kubeconfig {} has no certificate-authority-data: the node cannot tell the API server from other clients; use the server's node-join.kubeconfig",
                kubeconfig_path.display()
            );
        };
        let endpoint = node_agent::endpoint::serve(node_agent::endpoint::EndpointConfig {
            listen: args.listen,
            client_ca,
            node_name: name.clone(),
            node_dir: data_dir.join("node").join(&name),
        })
        .await
        .context("cannot serve the node's console endpoint")?;
        let address = node_address;
        let agent = node_agent::AgentConfig {
            nodes: vec![name.clone()],
            address,
            heartbeat_interval: args.heartbeat_interval,
            endpoint: Some(endpoint),
        };
        tracing::info!("node {} joining", name);
        node_agent::run(client, agent, hypervisor)
            .await
            .context("node agent stopped")?;
        Ok(())
    })
}

fn run_vm(args: VmArgs) -> anyhow::Result<()> {
    let (plural, verb) = match args.verb.as_str() {
        "start" | "stop" | "restart" | "migrate" => ("virtualmachines", args.verb.as_str()),
        "pause" | "unpause" | "softreboot" | "soft-reboot" => (
            "virtualmachineinstances",
            if args.verb == "soft-reboot" {
                "softreboot"
            } else {
                args.verb.as_str()
            },
        ),
        "console" => ("virtualmachineinstances", "console"),
        "migrate-cancel" => ("virtualmachineinstancemigrations", "migrate-cancel"),
        other => {
            bail!("unknown verb {other:?}; use start, stop, restart, pause, unpause, softreboot, migrate, migrate-cancel or console")
        }
    };
    let typed = args.verb.clone();
    runtime()?.block_on(async move {
        let config = match &args.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
            }
            None => kube::Config::infer()
                .await
                .context("no kubeconfig found; pass --kubeconfig")?,
        };
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        if verb == "console" {
            return console::run(config, &namespace, &args.name).await;
        }
        let client = kube::Client::try_from(config).context("cannot build an API client")?;
        if verb == "migrate-cancel" {
            return admin::migrate_cancel(client, &namespace, &args.name).await;
        }
        let path = format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/{plural}/{}/{verb}",
            args.name
        );
        let request = http::Request::put(path)
            .header("content-type", "application/json")
            .body(b"{}".to_vec())?;
        match client.request_text(request).await {
            Ok(_) => {
                // virtctl's wording: VM verbs name the VM, VMI verbs the VMI.
                let kind = if plural == "virtualmachines" {
                    "VM"
                } else {
                    "VMI"
                };
                println!("{kind} {} was scheduled to {typed}", args.name);
                Ok(())
            }
            Err(kube::Error::Api(status)) => bail!("{verb} {}: {}", args.name, status.message),
            Err(e) => Err(e).with_context(|| format!("{verb} {}", args.name)),
        }
    })
}

fn spawn_agent(
    client: kube::Client,
    nodes: Vec<String>,
    hypervisor: Arc<dyn node_agent::Hypervisor>,
    heartbeat: Duration,
    address: String,
) {
    let config = node_agent::AgentConfig {
        nodes,
        address,
        heartbeat_interval: heartbeat,
        endpoint: None,
    };
    tokio::spawn(async move {
        if let Err(e) = node_agent::run(client, config, hypervisor).await {
            tracing::error!("local node agent stopped: {e}");
        }
    });
}

/// A `--kubeconfig-server` URL that kubectl and the agents can use: `https://HOST[:PORT]`.
fn check_server_url(url: &str) -> anyhow::Result<()> {
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("--kubeconfig-server {url}: not a URL"))?;
    if uri.scheme_str() != Some("https") || uri.host().is_none_or(str::is_empty) {
        bail!("--kubeconfig-server {url}: must be https://HOST[:PORT]");
    }
    Ok(())
}

fn run_server(mut args: ServerArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create data dir {}", args.data_dir.display()))?;
    // QEMU processes and the agent after a restart find their files by absolute path.
    args.data_dir = std::fs::canonicalize(&args.data_dir)
        .with_context(|| format!("cannot resolve data dir {}", args.data_dir.display()))?;
    let store_choice = store_choice::StoreChoice::parse(&args.store)?;
    for url in &args.kubeconfig_servers {
        check_server_url(url)?;
    }
    let node_name = args.node_name.clone().unwrap_or_else(hostname);
    let host = HostSettings {
        node_name: &node_name,
        data_dir: &args.data_dir,
        insecure_registries: &args.insecure_registries,
        host_disk_dirs: &args.host_disk_dirs,
        claim_dirs: &[],
        qemu_uid_base: args.qemu_uid_base,
        accel: args.accel,
        address: args.node_address.to_string(),
    };
    let local = if args.no_node {
        None
    } else {
        Some(hypervisor(args.hypervisor.as_deref(), &args.sim, &host)?)
    };
    let mut local_nodes = apiserver::console::LocalNodes::new();
    if let Some(hypervisor) = &local {
        let hypervisor = hypervisor.clone();
        let find: apiserver::console::SocketFinder = Arc::new(move |namespace, name, device| {
            hypervisor.device_socket(namespace, name, device)
        });
        local_nodes.insert(node_name.clone(), find);
    }
    runtime()?.block_on(async move {
        let store = store_choice.open(&args.data_dir, &args.etcd).await?;
        let server = apiserver::start(apiserver::ServerConfig {
            data_dir: args.data_dir.clone(),
            listen: args.listen,
            store: store.clone(),
            local_nodes,
            host_disk_dirs: args.host_disk_dirs.clone(),
            token_auth_file: args.token_auth_file.clone(),
            pki_dir: args.pki_dir.clone(),
            limits: args.limits.config(),
            audit_log: args.audit_log.clone(),
            audit_policy: args.audit_policy.clone(),
            kubeconfig_servers: args.kubeconfig_servers.clone(),
        })
        .await?;
        let client = kube::Client::new(server.internal.clone(), "default");
        let pki = server.pki.clone();
        let issue: controllers::migration::IssueCredentials =
            Arc::new(move |hosts: &[String]| {
                pki.issue_migration_credentials(hosts)
                    .map_err(|e| e.to_string())
            });
        let pki = server.pki.clone();
        let sign: controllers::certificates::SignRequest =
            Arc::new(move |request: &str, lifetime| {
                pki.sign_request(request, lifetime)
                    .map_err(|e| e.to_string())
            });
        let controller_config = controllers::Config {
            node_monitor_grace_period: args.timing.node_monitor_grace_period,
            volume_pool: args.data_dir.join("volumes"),
            import_scratch: args.data_dir.join("import-scratch"),
            uploads: args.data_dir.join("uploads"),
            insecure_registries: args.insecure_registries.clone(),
            migration_credentials: Some(issue),
            certificate_signer: Some(sign),
        };
        // The controllers run on the one server that holds the controller manager's
        // lease (the only one, on SQLite).
        let identity = server_identity(&args.data_dir)?;
        let internal = server.internal.clone();
        let registry = server.registry.clone();
        let compaction_interval = args.compaction_interval;
        tokio::spawn(controllers::leader::run_elected(
            client.clone(),
            controllers::leader::Election::controller_manager(identity),
            move || {
                let (internal, config) = (internal.clone(), controller_config.clone());
                let collector = apiserver::garbage_collector(registry.clone());
                // Servers sharing one etcd must not each compact it.
                let compaction =
                    apiserver::compact_periodically(store.clone(), compaction_interval);
                async move {
                    // Made on the term's runtime, which the lease's loss shuts down.
                    let client = kube::Client::new(internal, "default");
                    futures::join!(controllers::run(client, config), collector, compaction);
                }
            },
        ));
        if let Some(hypervisor) = local {
            let name = node_name.clone();
            spawn_agent(
                client.clone(),
                vec![name],
                hypervisor,
                args.timing.heartbeat_interval,
                args.node_address.to_string(),
            );
        }
        if let Some(count) = args.sim_nodes.filter(|n| *n > 0) {
            let names = (0..count).map(|i| format!("sim-node-{i}")).collect();
            spawn_agent(
                client.clone(),
                names,
                sim_hypervisor(&args.sim),
                args.timing.heartbeat_interval,
                args.node_address.to_string(),
            );
        }
        tracing::info!(
            "serving {} — kubectl --kubeconfig {}",
            server.url,
            args.data_dir.join("admin.kubeconfig").display()
        );
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        server.shutdown().await;
        Ok(())
    })
}

#[cfg(test)]
mod kubeconfig_server_tests {
    use super::check_server_url;

    #[test]
    fn only_https_urls_with_a_host_are_taken() {
        assert!(check_server_url("https://10.0.0.2:6443").is_ok());
        assert!(check_server_url("https://lb.example").is_ok());
        for bad in [
            "10.0.0.2:6443",
            "http://10.0.0.2:6443",
            "https://",
            "not a url",
        ] {
            assert!(check_server_url(bad).is_err(), "{bad} was taken");
        }
    }
}
