//! KubeVirt's controllers, written as ordinary Kubernetes controllers with kube-rs
//! against our own API: inside `virtplane server` they reach it in-process.

mod cached;
pub mod certificates;
pub mod datavolume;
pub mod endpoint_slices;
pub mod evacuation;
mod informer;
pub mod launcher_pod;
pub mod leader;
pub mod migration;
pub mod node_ipam;
pub mod node_lifecycle;
pub mod resources;
pub mod run_strategy;
pub mod scheduler;
pub mod vm;
pub mod vm_volumes;
pub mod volumes;
pub mod workqueue;
mod writes;

use std::time::Duration;

/// How many objects one controller syncs at once. Unbounded, a restart over 100,000 VMs
/// held a pending sync for every one of them at once (about 5 KiB each); 32 (the order of
/// virt-controller's worker threads) made 10,000 VMs starting together wait on each
/// other's round trips to the server.
const CONCURRENT_SYNCS: u16 = 256;

/// The configuration every controller here runs with.
pub(crate) fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(CONCURRENT_SYNCS)
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot build an object: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Unpack(#[from] cached::UnpackError),
}

/// A watch of every object of kind `K` that `config` selects, into a cache: the cache,
/// and each object as it changes (or goes), once the cache holds the change. The cache
/// follows the watch only while the stream is read.
pub(crate) fn reflect<K>(
    client: &kube::Client,
    config: kube::runtime::watcher::Config,
) -> (
    kube::runtime::reflector::Store<K>,
    impl futures::Stream<Item = std::sync::Arc<K>> + Send + 'static,
)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    let writer = kube::runtime::reflector::store::Writer::default();
    let store = writer.as_reader();
    let events = kube::runtime::reflector(
        writer,
        kube::runtime::watcher(kube::Api::<K>::all(client.clone()), config),
    )
    .default_backoff()
    .touched_objects()
    .filter_map(|event| futures::future::ready(event.ok().map(std::sync::Arc::new)));
    (store, events)
}

/// Tunables of the control loops.
#[derive(Clone)]
pub struct Config {
    /// How long a node may go without a heartbeat before it is NotReady and its VMIs fail.
    pub node_monitor_grace_period: Duration,
    /// Where claims' disk files live (`DIR/volumes`).
    pub volume_pool: std::path::PathBuf,
    /// Where the upload proxy leaves uploaded images (`DIR/uploads`).
    pub uploads: std::path::PathBuf,
    /// Registries DataVolume `registry` sources may use over plain HTTP or unverified HTTPS.
    pub insecure_registries: Vec<String>,
    /// Where DataVolume imports stage images while they convert them (`DIR/import-scratch`).
    pub import_scratch: std::path::PathBuf,
    /// Issues the TLS credentials of a migration whose target listens at these hosts
    /// (`None`: migrations run without TLS).
    pub migration_credentials: Option<migration::IssueCredentials>,
    /// Signs approved client certificate requests (`None`: they stay unsigned).
    pub certificate_signer: Option<certificates::SignRequest>,
    /// The cluster's addresses: node IPAM carves each Node's pod CIDR from them.
    pub address_plan: network::AddressPlan,
}

/// Runs every controller until the process ends.
pub async fn run(client: kube::Client, config: Config) {
    let shared = informer::Shared::start(&client);
    tokio::join!(
        vm::run(client.clone(), shared.clone()),
        scheduler::run(client.clone(), shared.clone()),
        node_lifecycle::run(client.clone(), config.node_monitor_grace_period),
        node_ipam::run(client.clone(), config.address_plan),
        volumes::run(client.clone(), config.volume_pool),
        datavolume::run(
            client.clone(),
            datavolume::Dirs {
                scratch: config.import_scratch,
                uploads: config.uploads,
            },
            config.insecure_registries,
        ),
        migration::run(client.clone(), config.migration_credentials, shared.clone()),
        certificates::run(client.clone(), config.certificate_signer),
        launcher_pod::run(client.clone(), shared.clone()),
        endpoint_slices::run(client.clone()),
        evacuation::run(client, shared),
    );
}
