//! The virtplane binary: wiring only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

mod admin;
mod cli;
mod console;
mod hypervisors;
mod port_forward;
mod store_choice;
mod upload;
mod user;

use anyhow::{bail, Context};
use clap::Parser;

use cli::{Cli, Command, NodeAction, NodeArgs, ServerArgs, UserAction, VmArgs};
use hypervisors::{hypervisor, sim_hypervisor, HostSettings};

/// The API server parses, copies and drops many small JSON values on every thread; with
/// glibc malloc that was about a third of its CPU (benches/api_vs_etcd.rs), with mimalloc
/// a small fraction. mimalloc is built without transparent huge pages (`no_thp`): with them,
/// each fresh or purged 2 MiB region was zeroed whole, about 8% of the server's CPU under
/// a create load. Guests are unaffected: QEMU asks for huge pages for guest RAM itself.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // One TLS implementation for every client and server in the process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    match cli.log_format {
        cli::LogFormat::Text => logs.init(),
        cli::LogFormat::Json => logs.json().with_current_span(false).init(),
    }
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
                    token,
                    data_dir,
                },
        } => user::add(user::AddUser {
            name,
            groups,
            namespace,
            role,
            token,
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
        pod_network: args.pod_network,
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
            hypervisor: Some(hypervisor.clone()),
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
        "port-forward" => ("virtualmachines", "port-forward"),
        "ssh" => {
            let namespace = args.namespace.clone().unwrap_or_else(|| "default".into());
            let status = port_forward::ssh(
                args.kubeconfig.as_deref(),
                &namespace,
                &args.name,
                args.ssh_port,
                &args.ssh_args,
            )?;
            std::process::exit(status.code().unwrap_or(1));
        }
        "migrate-cancel" => ("virtualmachineinstancemigrations", "migrate-cancel"),
        other => {
            bail!("unknown verb {other:?}; use start, stop, restart, pause, unpause, softreboot, migrate, migrate-cancel, console, port-forward or ssh")
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
        if verb == "port-forward" {
            let ports = args
                .ports
                .as_deref()
                .context("port-forward NAME [LOCAL:]PORT: which port?")?;
            let ports = port_forward::parse_ports(ports)?;
            return port_forward::run(
                config,
                &namespace,
                &args.name,
                ports,
                &args.address,
                args.stdio,
            )
            .await;
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
    endpoint: Option<node_agent::endpoint::Published>,
) {
    let config = node_agent::AgentConfig {
        nodes,
        address,
        heartbeat_interval: heartbeat,
        endpoint,
    };
    tokio::spawn(async move {
        if let Err(e) = node_agent::run(client, config, hypervisor).await {
            tracing::error!("local node agent stopped: {e}");
        }
    });
}

/// The DER certificates of a PEM bundle (the cluster CA, for the local node's endpoint).
fn certificates_der(pem: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|cert| cert.map(|cert| cert.to_vec()))
        .collect::<Result<_, _>>()
        .context("the cluster CA certificate is not PEM")
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
    let address_plan = args.network.plan()?;
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
        pod_network: args.pod_network,
    };
    let local = if args.no_node {
        None
    } else {
        Some(hypervisor(args.hypervisor.as_deref(), &args.sim, &host)?)
    };
    runtime()?.block_on(async move {
        if args.no_signals {
            event_recorder::disable();
        }
        let store = store_choice.open(&args.data_dir, &args.etcd).await?;
        let server = apiserver::start(apiserver::ServerConfig {
            data_dir: args.data_dir.clone(),
            listen: args.listen,
            store: store.clone(),
            host_disk_dirs: args.host_disk_dirs.clone(),
            token_auth_file: args.token_auth_file.clone(),
            pki_dir: args.pki_dir.clone(),
            limits: args.limits.config(),
            audit_log: args.audit_log.clone(),
            audit_policy: args.audit_policy.clone(),
            kubeconfig_servers: args.kubeconfig_servers.clone(),
            service_cidr: address_plan.service_cidr,
            event_ttl: args.event_ttl,
            signals: !args.no_signals,
        })
        .await?;
        // This process's controllers and node agents write their events to the registry.
        match apiserver::event_writer::RegistryEventWriter::new(server.registry.clone()) {
            Some(writer) => event_recorder::write_in_process(Arc::new(writer)),
            None => tracing::warn!("no Event resource registered: events go through the API"),
        }
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
            address_plan,
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
            // The server reaches this node's consoles through its endpoint, as it
            // reaches other nodes'.
            let endpoint = node_agent::endpoint::serve(node_agent::endpoint::EndpointConfig {
                listen: SocketAddr::new(args.node_address, 0),
                client_ca: certificates_der(&server.pki.ca_cert_pem)?,
                node_name: node_name.clone(),
                node_dir: args.data_dir.join("node").join(&node_name),
                hypervisor: Some(hypervisor.clone()),
            })
            .await
            .context("cannot serve the local node's console endpoint")?;
            spawn_agent(
                client.clone(),
                vec![node_name.clone()],
                hypervisor,
                args.timing.heartbeat_interval,
                args.node_address.to_string(),
                Some(endpoint),
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
                None,
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
