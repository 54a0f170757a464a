//! The virtplane API server: Kubernetes API semantics for KubeVirt's resources over
//! HTTPS, on any `store::Store`.

pub mod agent_dial;
pub mod audit;
pub mod authz;
mod cdi;
mod certificates;
pub mod console;
mod coordination;
mod core;
pub mod discovery;
pub mod endpoint_slices;
pub mod event_writer;
pub mod events;
mod gc;
mod health;
pub mod http;
mod kubevirt;
pub mod limits;
pub mod metrics;
pub mod negotiate;
pub mod network_attachments;
pub mod network_policies;
pub mod object;
mod openapi;
mod options;
mod patching;
mod pod_logs;
mod printing;
mod protobuf;
pub mod rbac;
pub mod registry;
pub mod request;
mod resource_metrics;
mod review;
mod stored;
pub mod subresources;
pub mod tls;
pub mod upload;
mod version;
pub mod watch;
mod web_console;

/// The private body decoders, for the fuzz targets in `fuzz/` only.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::protobuf::decode_object as decode_protobuf;
    pub use apimachinery::yaml::{from_str as yaml_from_str, to_string as yaml_to_string};
}

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use store::Store;

use crate::discovery::{Discovery, ExtraResource};
use crate::registry::{Registration, Registry, Serving, WriteOptions};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("certificates: {0}")]
    Pki(#[from] access::pki::PkiError),
    #[error("TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("schema of {kind}: {message}")]
    Schema { kind: &'static str, message: String },
    // Transparent: main prints the source chain, which would say it twice.
    #[error(transparent)]
    TokenFile(#[from] access::authn::TokenFileError),
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    /// `name` says what: `namespace/default`, `storageprofile/local`.
    #[error("creating {name} at start: {status}")]
    Bootstrap {
        name: String,
        status: Box<apimachinery::status::Status>,
    },
    #[error("the upload directory {path}: {source}")]
    Uploads {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub struct ServerConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub store: Arc<dyn Store>,
    /// Directories hostDisk volumes may live in (`--host-disk-dir`).
    pub host_disk_dirs: Vec<PathBuf>,
    /// kube-apiserver's `--token-auth-file`: bearer tokens in CSV
    /// (`token,user,uid,"group1,group2"`).
    pub token_auth_file: Option<PathBuf>,
    /// The PKI's directory (`--pki-dir`; `DIR/pki` when not given).
    pub pki_dir: Option<PathBuf>,
    /// In-flight budgets, request timeout, watches per user.
    pub limits: limits::LimitsConfig,
    /// `--audit-log`: where audit events go (`-`: standard output).
    pub audit_log: Option<PathBuf>,
    /// `--audit-policy`: which requests are logged, at what level.
    pub audit_policy: Option<PathBuf>,
    /// `--kubeconfig-server`: the URLs the kubeconfigs this server writes name (every
    /// server's, when there are several); empty: this server's own.
    pub kubeconfig_servers: Vec<String>,
    /// `--service-cidr`: where Services' cluster IPs come from.
    pub service_cidr: ipnet::Ipv4Net,
    /// `--event-ttl`: how long Events are kept after their last write.
    pub event_ttl: std::time::Duration,
    /// Whether the server keeps metrics (`--no-signals` turns them and events off).
    pub signals: bool,
}

/// The host of an `https://HOST[:PORT]` URL (an IPv6 address without its brackets).
fn url_host(url: &str) -> Option<String> {
    let uri: ::http::Uri = url.parse().ok()?;
    let host = uri.host()?;
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
}

/// The garbage collector and namespace deletion over `registry`, until the future is
/// dropped: run by the one server that holds the controller manager's lease.
pub fn garbage_collector(
    registry: Arc<Registry>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    gc::run(registry)
}

/// A server that is listening; dropping it does not stop it.
pub struct RunningServer {
    pub registry: Arc<Registry>,
    /// The API as an in-process service for the server's own controllers and node
    /// agents (e.g. `kube::Client::new(internal, "default")`): no TCP, no TLS, with the
    /// identity of a virtplane component.
    pub internal: axum::Router,
    pub local_addr: SocketAddr,
    pub url: String,
    /// The cluster CA, for what the server's controllers sign (migration credentials).
    pub pki: Arc<access::pki::Pki>,
    api: Arc<http::ApiServer>,
}

impl RunningServer {
    /// Before the process exits: writes out what the audit log still holds.
    pub async fn shutdown(&self) {
        if let Some(audit) = &self.api.audit {
            audit.flush().await;
        }
    }
}

/// Every schema the server knows, in OpenAPI components form.
fn components() -> Map<String, Value> {
    let mut all = Map::new();
    if let Some(kubevirt) = kubevirt_api::schema::openapi_components().as_object() {
        all.extend(kubevirt.clone());
    }
    if let Value::Object(core) = core::schemas() {
        all.extend(core);
    }
    if let Value::Object(rbac) = rbac::kinds::schemas() {
        all.extend(rbac);
    }
    if let Value::Object(csr) = certificates::schemas() {
        all.extend(csr);
    }
    if let Value::Object(lease) = coordination::schemas() {
        all.extend(lease);
    }
    if let Value::Object(slices) = endpoint_slices::schemas() {
        all.extend(slices);
    }
    if let Value::Object(attachments) = network_attachments::schemas() {
        all.extend(attachments);
    }
    if let Value::Object(policies) = network_policies::schemas() {
        all.extend(policies);
    }
    if let Value::Object(events) = events::schemas() {
        all.extend(events);
    }
    all
}

fn registrations(
    components: &Map<String, Value>,
    host_disks: kubevirt::HostDiskPolicy,
    service_cidr: ipnet::Ipv4Net,
    event_ttl: std::time::Duration,
) -> Result<Vec<Registration>, ServerError> {
    let components_value = Value::Object(components.clone());
    let schema = |info: &'static apimachinery::resource::ResourceInfo| {
        apimachinery::schema::Schema::from_components(&components_value, info.schema_name).map_err(
            |message| ServerError::Schema {
                kind: info.kind,
                message,
            },
        )
    };
    let mut out = Vec::new();
    let csr: (
        &'static apimachinery::resource::ResourceInfo,
        Box<dyn registry::ResourceHooks>,
    ) = (
        &certificates::CERTIFICATE_SIGNING_REQUEST,
        Box::new(certificates::CsrHooks),
    );
    let lease: (
        &'static apimachinery::resource::ResourceInfo,
        Box<dyn registry::ResourceHooks>,
    ) = (&coordination::LEASE, Box::new(coordination::LeaseHooks));
    let slice: (
        &'static apimachinery::resource::ResourceInfo,
        Box<dyn registry::ResourceHooks>,
    ) = (
        &endpoint_slices::ENDPOINT_SLICE,
        Box::new(endpoint_slices::EndpointSliceHooks),
    );
    let policy: (
        &'static apimachinery::resource::ResourceInfo,
        Box<dyn registry::ResourceHooks>,
    ) = (
        &network_policies::NETWORK_POLICY,
        Box::new(network_policies::NetworkPolicyHooks),
    );
    let events = [&events::EVENT, &events::EVENT_V1].map(|view| {
        let hooks: Box<dyn registry::ResourceHooks> = Box::new(events::EventHooks {
            ttl: event_ttl,
            view,
        });
        (view, hooks)
    });
    for (info, hooks) in core::registrations(service_cidr)
        .into_iter()
        .chain(rbac::kinds::registrations())
        .chain([csr, lease, slice, policy])
        .chain(events)
    {
        out.push(Registration {
            info,
            schema: schema(info)?,
            hooks,
            serving: Serving::BUILT_IN,
        });
    }
    // KubeVirt's, CDI's and Multus' kinds are custom resources upstream.
    let attachments: (
        &'static apimachinery::resource::ResourceInfo,
        Box<dyn registry::ResourceHooks>,
    ) = (
        &network_attachments::NETWORK_ATTACHMENT_DEFINITION,
        Box::new(network_attachments::NetworkAttachmentHooks),
    );
    let custom = kubevirt::registrations(host_disks)
        .into_iter()
        .chain(cdi::registrations())
        .chain([attachments]);
    for (info, hooks) in custom {
        out.push(Registration {
            info,
            schema: schema(info)?,
            hooks,
            serving: Serving::CUSTOM_RESOURCE,
        });
    }
    Ok(out)
}

fn extra_resources() -> Vec<ExtraResource> {
    let mut extras = subresources::discovery_entries();
    // kube-apiserver's review endpoints, in its discovery order.
    for (group, name, kind, namespaced) in [
        (
            "authentication.k8s.io",
            "selfsubjectreviews",
            "SelfSubjectReview",
            false,
        ),
        (
            "authorization.k8s.io",
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            true,
        ),
        (
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
        ),
        (
            "authorization.k8s.io",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            false,
        ),
        (
            "authorization.k8s.io",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
        ),
    ] {
        extras.push(ExtraResource {
            group,
            version: "v1",
            name,
            kind,
            namespaced,
            verbs: &["create"],
        });
    }
    // metrics-server's resources, which `kubectl top` looks for.
    for (name, kind, namespaced) in [
        ("nodes", "NodeMetrics", false),
        ("pods", "PodMetrics", true),
    ] {
        extras.push(ExtraResource {
            group: resource_metrics::GROUP,
            version: resource_metrics::VERSION,
            name,
            kind,
            namespaced,
            verbs: &["get", "list"],
        });
    }
    extras.push(ExtraResource {
        group: upload::GROUP,
        version: upload::VERSION,
        name: upload::RESOURCE,
        kind: upload::KIND,
        namespaced: true,
        verbs: &["create"],
    });
    extras
}

async fn ensure_namespaces(registry: &Registry) -> Result<(), ServerError> {
    let Some(reg) = registry.find("", "v1", "namespaces") else {
        return Ok(());
    };
    let options = WriteOptions {
        field_manager: "virtplane".into(),
        ..Default::default()
    };
    for name in core::SYSTEM_NAMESPACES
        .iter()
        .chain(&core::INSTALL_NAMESPACES)
    {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match registry.create(&reg, None, obj, &options).await {
            Ok(_) => {}
            Err(status) if status.code == 409 => {}
            Err(status) => {
                return Err(ServerError::Bootstrap {
                    name: format!("namespace/{name}"),
                    status: Box::new(status),
                })
            }
        }
    }
    Ok(())
}

/// Compacts the store's history every `interval` (kube-apiserver's
/// `--etcd-compaction-interval`), up to the revision current one interval earlier, until
/// the future is dropped, so watches and continue tokens stay valid for at least one
/// interval. Run by the one server that holds the controller manager's lease.
pub async fn compact_periodically(store: Arc<dyn Store>, interval: Duration) {
    let mut previous = store.current_revision();
    loop {
        tokio::time::sleep(interval).await;
        if let Err(e) = store.compact(previous).await {
            tracing::warn!("compaction to revision {previous} failed: {e}");
        }
        previous = store.current_revision();
    }
}

/// Starts serving: certificates and kubeconfigs in the data dir and the HTTPS listener.
/// The garbage collector is the caller's to run (`garbage_collector`), on
/// the one server that runs the controllers.
pub async fn start(config: ServerConfig) -> Result<RunningServer, ServerError> {
    // First: a bad audit policy stops the server before it writes or listens anywhere.
    let auditor =
        audit::Auditor::from_flags(config.audit_log.as_deref(), config.audit_policy.as_deref())?;
    let hostname = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let mut hosts = vec![config.listen.ip().to_string()];
    if !hostname.is_empty() {
        hosts.push(hostname);
    }
    // Clients reach the API at the kubeconfigs' URLs: the certificate names their hosts.
    hosts.extend(
        config
            .kubeconfig_servers
            .iter()
            .filter_map(|url| url_host(url)),
    );
    let pki_dir = config
        .pki_dir
        .clone()
        .unwrap_or_else(|| config.data_dir.join("pki"));
    let pki = access::pki::Pki::load_or_create(&pki_dir, &hosts)?;
    let tls_config = tls::server_config(&pki)?;
    let (agent_cert, agent_key) = pki.agent_client_certificate()?;
    let agents = agent_dial::AgentDialer::new(&agent_cert, &agent_key)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServerError::Listen {
            addr: config.listen,
            source,
        })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| ServerError::Listen {
            addr: config.listen,
            source,
        })?;
    let host = if local_addr.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        local_addr.ip().to_string()
    };
    let server_address = if local_addr.is_ipv6() {
        format!("[{host}]:{}", local_addr.port())
    } else {
        format!("{host}:{}", local_addr.port())
    };
    let url = format!("https://{server_address}");

    let components = components();
    let registry = Arc::new(Registry::new(
        events::EventsView::wrap(config.store.clone()),
        registrations(
            &components,
            kubevirt::HostDiskPolicy(config.host_disk_dirs.clone()),
            config.service_cidr,
            config.event_ttl,
        )?,
    ));
    registry.follow_namespaces();
    ensure_namespaces(&registry).await?;
    cdi::ensure_storage_profile(&registry)
        .await
        .map_err(|status| ServerError::Bootstrap {
            name: "storageprofile/local".into(),
            status: Box::new(status),
        })?;
    if let Err(status) = cdi::publish_upload_proxy(&registry, &url, &pki.ca_cert_pem).await {
        tracing::warn!("cannot publish the upload proxy in CDIConfig config: {status}");
    }
    let uploads_dir = config.data_dir.join("uploads");
    let uploads = Arc::new(
        upload::Uploads::new(
            registry.clone(),
            pki.derived_secret(upload::token::KEY_PURPOSE),
            &uploads_dir,
        )
        .map_err(|source| ServerError::Uploads {
            path: uploads_dir,
            source,
        })?,
    );
    rbac::ensure(&registry)
        .await
        .map_err(|(name, status)| ServerError::Bootstrap {
            name,
            status: Box::new(status),
        })?;
    let authorizer =
        authz::start(registry.clone())
            .await
            .map_err(|status| ServerError::Bootstrap {
                name: "RBAC authorizer".into(),
                status: Box::new(status),
            })?;
    let mut authenticator = access::authn::Authenticator::new([])
        .with_server_tokens(&access::pki::tokens_path(&pki.dir))?;
    if let Some(path) = &config.token_auth_file {
        authenticator = authenticator.with_token_file(path)?;
    }
    let infos: Vec<&'static apimachinery::resource::ResourceInfo> =
        registry.registrations().iter().map(|r| r.info).collect();
    let server_metrics = Arc::new(metrics::ServerMetrics::new(config.signals));
    server_metrics.follow_phases(registry.store.clone());
    let server = Arc::new(http::ApiServer {
        registry: registry.clone(),
        authenticator,
        authorizer,
        discovery: Discovery::new(infos.clone(), extra_resources()),
        openapi: openapi::OpenApi::new(
            &infos,
            &[&kubevirt_api::cdi::resources::UPLOAD_TOKEN_REQUEST],
            &components,
        ),
        server_address,
        consoles: console::Consoles { agents },
        write_gauge: config.store.write_gauge(),
        uploads: uploads.clone(),
        limits: limits::Limits::new(&config.limits),
        audit: auditor,
        metrics: server_metrics,
        sessions: web_console::Sessions::default(),
    });
    let kubeconfig_servers = match config.kubeconfig_servers.as_slice() {
        [] => vec![url.clone()],
        urls => urls.to_vec(),
    };
    pki.write_kubeconfigs(&config.data_dir, &kubeconfig_servers)?;
    // The in-process identity of the controllers and local node agents: like
    // kube-apiserver's loopback client, a member of system:masters.
    let component = access::authn::UserInfo::new(
        "system:serviceaccount:kubevirt:kubevirt-controller",
        vec![
            "system:virtplane-components".into(),
            access::authn::MASTERS_GROUP.into(),
        ],
    );
    let internal = http::router(server.clone()).layer(axum::Extension(
        access::authn::ClientCertificateIdentity(component),
    ));
    tokio::spawn(tls::serve(
        listener,
        tls_config,
        http::router(server.clone()),
    ));
    tokio::spawn(uploads.sweep_periodically());
    Ok(RunningServer {
        registry,
        internal,
        local_addr,
        url,
        pki: Arc::new(pki),
        api: server,
    })
}
