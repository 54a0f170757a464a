//! The virtplane binary: wiring only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};

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
    Server(ServerArgs),
    /// Join a server as one more node.
    Node(NodeArgs),
    /// The virtctl verbs: start, stop, restart, pause, unpause, migrate, console.
    Vm(VmArgs),
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
    /// A registry (HOST:PORT) containerDisk images may come from over plain HTTP.
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    /// A directory hostDisk volumes may live in.
    #[arg(long = "host-disk-dir")]
    host_disk_dirs: Vec<PathBuf>,
}

#[derive(Args)]
struct NodeArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long)]
    name: String,
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[arg(long)]
    hypervisor: Option<String>,
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    #[arg(long = "host-disk-dir")]
    host_disk_dirs: Vec<PathBuf>,
}

#[derive(Args)]
struct VmArgs {
    /// start, stop, restart, pause, unpause, migrate or console.
    verb: String,
    name: String,
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Server(args) => run_server(args),
        Command::Node(args) => not_yet("virtplane node", &args.name),
        Command::Vm(args) => not_yet(&format!("virtplane vm {}", args.verb), &args.name),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("virtplane: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn not_yet(what: &str, _subject: &str) -> anyhow::Result<()> {
    bail!("{what} is not available in this build yet (node agents and the virtctl verbs come with the VM lifecycle); run `virtplane server --no-node` for the API alone")
}

fn run_server(args: ServerArgs) -> anyhow::Result<()> {
    if args.store != "sqlite" {
        if args.store.starts_with("etcd=") {
            bail!(
                "--store {}: the etcd backend is not built yet; use the default SQLite store (omit --store)",
                args.store
            );
        }
        bail!(
            "--store {}: unknown store; use `sqlite` or `etcd=URL[,URL...]`",
            args.store
        );
    }
    if let Some(n) = args.sim_nodes {
        bail!("--sim-nodes {n}: simulated nodes are not built yet; run without --sim-nodes");
    }
    if let Some(h) = &args.hypervisor {
        bail!("--hypervisor {h}: node agents are not built yet; run with --no-node");
    }
    let _ = (&args.node_name, &args.insecure_registries, &args.host_disk_dirs);
    let _ = rustls::crypto::ring::default_provider().install_default();
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create data dir {}", args.data_dir.display()))?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let db = args.data_dir.join("state.db");
        let store = store_sqlite::SqliteStore::open(&db)
            .with_context(|| format!("cannot open the store at {}", db.display()))?;
        let server = apiserver::start(apiserver::ServerConfig {
            data_dir: args.data_dir.clone(),
            listen: args.listen,
            store: Arc::new(store),
        })
        .await?;
        if !args.no_node {
            tracing::warn!("no local node agent yet: VMs are accepted but not run (this build has the API only)");
        }
        tracing::info!(
            "serving {} — kubectl --kubeconfig {}",
            server.url,
            args.data_dir.join("admin.kubeconfig").display()
        );
        tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        Ok(())
    })
}
