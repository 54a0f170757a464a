//! The command line: every subcommand and its flags (clap derive), parsed in main.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::{store_choice, upload};
#[derive(Parser)]
#[command(
    name = "virtplane",
    version,
    about = "A KubeVirt-compatible virtualization control plane in one binary"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// How log lines are written to stderr: `text`, or `json` (one object per line, with
    /// the fields of the spans it was logged in: a request's `audit_id`, a VMI's
    /// `namespace`, `vmi` and `uid`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
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
pub enum UserAction {
    /// Issue a client certificate signed by the cluster CA (CN = NAME, O = each --group),
    /// write DATA_DIR/users/NAME.kubeconfig and print its path (with --token: a bearer
    /// token instead, for the web console or any client, printed alone); with --role, also bind
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
        /// Issue a bearer token (kept in DATA_DIR/pki/tokens.json; a running server takes
        /// it at once) instead of a client certificate, and print it.
        #[arg(long)]
        token: bool,
        /// The server's data dir, whose CA signs the certificate.
        #[arg(long, default_value = "./virtplane-data")]
        data_dir: PathBuf,
    },
}

#[derive(Args)]
pub struct ServerArgs {
    /// Where the store, certificates and kubeconfigs live.
    #[arg(long, default_value = "./virtplane-data")]
    pub data_dir: PathBuf,
    /// Address and port of the HTTPS API.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// `sqlite` (default, in the data dir) or `etcd=URL[,URL...]`.
    #[arg(long, default_value = "sqlite")]
    pub store: String,
    /// `qemu` or `sim`.
    #[arg(long)]
    pub hypervisor: Option<String>,
    /// Name of the local node (default: the host name).
    #[arg(long)]
    pub node_name: Option<String>,
    /// Run the control plane alone, without a local node agent.
    #[arg(long)]
    pub no_node: bool,
    /// Add N simulated nodes.
    #[arg(long)]
    pub sim_nodes: Option<u32>,
    /// A registry (HOST:PORT) containerDisk images may come from over HTTPS with any
    /// certificate, or over plain HTTP. Other registries must present a certificate the
    /// node trusts (the system CA bundle, or SSL_CERT_FILE).
    #[arg(long = "insecure-registry")]
    pub insecure_registries: Vec<String>,
    /// A directory hostDisk volumes may live in.
    #[arg(long = "host-disk-dir")]
    pub host_disk_dirs: Vec<PathBuf>,
    /// When run as root, each VMI's QEMU runs as its own uid above this one (0: QEMU
    /// runs as root); all QEMUs share this number as a group.
    #[arg(long, default_value_t = node_agent::qemu_user::DEFAULT_BASE)]
    pub qemu_uid_base: u32,
    /// How the local node runs guests' vCPUs: `kvm`, `tcg` (software emulation), or
    /// `auto` (KVM only when a probe guest really runs under it).
    #[arg(long, default_value = "auto")]
    pub accel: qemu::AccelChoice,
    /// How the local node networks its guests: `pod` puts each VMI in a Pod (a network
    /// namespace on the node's bridge, an address of the cluster CIDR, KubeVirt's
    /// masquerade binding; needs root and nftables); `user` keeps QEMU's user-mode
    /// network, reached through port forwards on the node; `auto` takes `pod` when it can.
    #[arg(long, default_value = "auto")]
    pub pod_network: node_agent::pod_network::Mode,
    /// The address the local node is reached at: published on its Node, and where the
    /// port forwards of its VMIs listen.
    #[arg(long, default_value = "127.0.0.1")]
    pub node_address: std::net::IpAddr,
    #[command(flatten)]
    pub network: NetworkArgs,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub timing: TimingArgs,
    #[command(flatten)]
    pub etcd: store_choice::EtcdArgs,
    /// How often store history is compacted, as kube-apiserver's
    /// --etcd-compaction-interval: watches and continue tokens older than the previous
    /// compaction get 410 Gone and clients re-list.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub compaction_interval: Duration,
    /// Bearer tokens in kube-apiserver's static token file format: CSV lines
    /// `token,user,uid,"group1,group2"`.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Where the cluster CA, the serving certificate and the tokens are kept (default
    /// DIR/pki). Servers that share one store share one PKI: give each the same.
    #[arg(long)]
    pub pki_dir: Option<PathBuf>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Write kube-apiserver's audit events (audit.k8s.io/v1 Event, one JSON line each)
    /// to FILE (`-`: standard output); needs --audit-policy.
    #[arg(long, visible_alias = "audit-log-path", value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Which requests the audit log records, at what level: an audit.k8s.io/v1 Policy
    /// (YAML or JSON), as kube-apiserver's --audit-policy-file.
    #[arg(long, visible_alias = "audit-policy-file", value_name = "FILE")]
    pub audit_policy: Option<PathBuf>,
    /// How long Events are kept after their last update (kube-apiserver's
    /// `--event-ttl`); the store deletes them then.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub event_ttl: Duration,
    /// Record no Events and keep no metrics: for measuring what they cost (benches).
    #[arg(long)]
    pub no_signals: bool,
    /// A URL clients reach the API at, for the kubeconfigs this server writes
    /// (DIR/admin.kubeconfig, DIR/node-join.kubeconfig, users'): one context per URL, the
    /// first current. Give every server's URL, and node agents move to the next server
    /// when theirs stops answering. Default: this server's own address. The URLs' hosts
    /// are added to the serving certificate.
    #[arg(long = "kubeconfig-server", value_name = "URL")]
    pub kubeconfig_servers: Vec<String>,
}

/// kube-apiserver's request limits.
#[derive(Args, Clone)]
pub struct LimitArgs {
    /// Read-only requests (get, list) served at once, as kube-apiserver (0: no limit);
    /// beyond it 429 with Retry-After. Watches and websockets are not counted. One
    /// user holds at most an equal share among the users holding slots (at most half);
    /// system:masters members are never refused.
    #[arg(long, default_value_t = apiserver::limits::DEFAULT_MAX_REQUESTS_INFLIGHT)]
    pub max_requests_inflight: usize,
    /// Mutating requests (create, update, patch, delete, ...) served at once, shared
    /// the same way (0: no limit).
    #[arg(long, default_value_t = apiserver::limits::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    pub max_mutating_requests_inflight: usize,
    /// How long a request that is not long-running may take, body included, before
    /// it is answered 504 Timeout.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Watches one user may have open at once (0: no limit); system:masters members
    /// are not counted.
    #[arg(long, default_value_t = apiserver::limits::DEFAULT_MAX_WATCHES_PER_USER)]
    pub max_watches_per_user: usize,
}

impl LimitArgs {
    pub fn config(&self) -> apiserver::limits::LimitsConfig {
        apiserver::limits::LimitsConfig {
            max_requests_inflight: self.max_requests_inflight,
            max_mutating_requests_inflight: self.max_mutating_requests_inflight,
            max_watches_per_user: self.max_watches_per_user,
            request_timeout: self.request_timeout,
        }
    }
}

/// The cluster's addresses, as kube-controller-manager and kube-apiserver take them.
#[derive(Args, Clone)]
pub struct NetworkArgs {
    /// The range Pods take their addresses from; each Node gets a subnet of it as
    /// `spec.podCIDR`.
    #[arg(long, default_value = network::plan::DEFAULT_CLUSTER_CIDR)]
    pub cluster_cidr: ipnet::Ipv4Net,
    /// The range Services take their cluster IPs from.
    #[arg(long, default_value = network::plan::DEFAULT_SERVICE_CIDR)]
    pub service_cidr: ipnet::Ipv4Net,
    /// The DNS domain of Services and Pods (`<svc>.<ns>.svc.<domain>`).
    #[arg(long, default_value = network::plan::DEFAULT_CLUSTER_DOMAIN)]
    pub cluster_domain: String,
    /// The prefix length of each Node's subnet of the cluster CIDR.
    #[arg(long, default_value_t = network::plan::DEFAULT_NODE_CIDR_MASK_SIZE)]
    pub node_cidr_mask_size: u8,
    /// How nodes reach each other's subnets: `auto` (a route through the other node when
    /// they share a link, VXLAN otherwise), `host-gw` (routes only) or `vxlan` (always).
    #[arg(long, default_value = "auto")]
    pub pod_network_backend: network::plan::Backend,
}

impl NetworkArgs {
    pub fn plan(&self) -> Result<network::AddressPlan, network::PlanError> {
        network::AddressPlan::new(
            self.cluster_cidr,
            self.service_cidr,
            &self.cluster_domain,
            self.node_cidr_mask_size,
        )
        .map(|plan| plan.with_backend(self.pod_network_backend))
    }
}

/// How simulated nodes behave.
#[derive(Args, Clone)]
pub struct SimArgs {
    /// How long a simulated guest takes to boot (`500ms`, `2s`).
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub sim_boot_delay: Duration,
    /// How long a simulated guest takes to shut down.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub sim_stop_delay: Duration,
    /// How long a live migration of a simulated guest takes.
    #[arg(long, default_value = "300ms", value_parser = parse_duration)]
    pub sim_migration_delay: Duration,
}

#[derive(Args, Clone)]
pub struct TimingArgs {
    /// How often node agents report that they are alive.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,
    /// How long a node may stay silent before it is NotReady and its VMIs fail.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub node_monitor_grace_period: Duration,
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    node_agent::sim::parse_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration like 500ms, 2s or 1m"))
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct NodeArgs {
    /// Maintenance of a node instead of running one: drain, cordon, uncordon.
    #[command(subcommand)]
    pub action: Option<NodeAction>,
    #[arg(long, required = true)]
    pub kubeconfig: Option<PathBuf>,
    #[arg(long, required = true)]
    pub name: Option<String>,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[arg(long)]
    pub hypervisor: Option<String>,
    /// Address and port of the HTTPS endpoint the server reaches consoles through
    /// (port 0: any free port); published on the Node.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// As for `server`: a registry images may come from with any certificate or over HTTP.
    #[arg(long = "insecure-registry")]
    pub insecure_registries: Vec<String>,
    #[arg(long = "host-disk-dir")]
    pub host_disk_dirs: Vec<PathBuf>,
    /// Where the files behind PersistentVolumeClaims may be, besides DATA_DIR/volumes
    /// (the server's DIR/volumes, for a node sharing its host or storage).
    #[arg(long = "claim-dir")]
    pub claim_dirs: Vec<PathBuf>,
    /// When run as root, each VMI's QEMU runs as its own uid above this one (0: QEMU
    /// runs as root); all QEMUs share this number as a group.
    #[arg(long, default_value_t = node_agent::qemu_user::DEFAULT_BASE)]
    pub qemu_uid_base: u32,
    /// As for `server`: `auto`, `kvm` or `tcg`.
    #[arg(long, default_value = "auto")]
    pub accel: qemu::AccelChoice,
    /// As for `server`: `auto`, `pod` or `user`.
    #[arg(long, default_value = "auto")]
    pub pod_network: node_agent::pod_network::Mode,
    /// The address this node is reached at (published on its Node; port forwards listen
    /// there). Default: the `--listen` address, or loopback when that is unspecified.
    #[arg(long)]
    pub node_address: Option<std::net::IpAddr>,
    #[command(flatten)]
    pub sim: SimArgs,
    /// How often this agent reports that it is alive.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,
}

#[derive(Subcommand)]
pub enum NodeAction {
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
pub struct VmArgs {
    /// start, stop, restart, pause, unpause, softreboot, migrate, migrate-cancel, console,
    /// port-forward (NAME [LOCAL:]PORT) or ssh (USER@NAME).
    pub verb: String,
    pub name: String,
    /// port-forward: `[LOCAL:]PORT`, the VM's port and the local one (the same unless
    /// given).
    pub ports: Option<String>,
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// port-forward: relay this process's stdin and stdout to the port instead of
    /// listening (ssh's ProxyCommand).
    #[arg(long)]
    pub stdio: bool,
    /// port-forward: the local address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
    /// ssh: the VM's port ssh listens on.
    #[arg(short = 'p', long = "port", default_value_t = 22)]
    pub ssh_port: u16,
    /// ssh: options for ssh, after `--`.
    #[arg(last = true)]
    pub ssh_args: Vec<String>,
}
