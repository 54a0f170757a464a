//! The node's service proxy, as kube-proxy in nftables mode: Services and their
//! EndpointSlices watched into caches, and on every change (a burst taken as one) the
//! node's whole Service table rebuilt and applied in one `nft -f` transaction, and the
//! cluster DNS records (`cluster_dns`) rebuilt from the same caches. Nothing is applied
//! until both caches are complete, so a restarted agent never programs a partial view;
//! the previous rules keep working meanwhile.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::reflector::{self, reflector, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};
use network::masquerade::Protocol;
use network::services::{self, Endpoint, ServicePort};
use tokio::sync::Notify;

use crate::pod_network::{PodNetworkSlot, Ready};

/// How long a change waits for the ones right behind it (one transaction for a burst).
const SETTLE: Duration = Duration::from_millis(20);

/// Where the Services of one port go, from the Service and its slices.
fn service_ports(service: &Service, slices: &[Arc<EndpointSlice>], node: &str) -> Vec<ServicePort> {
    let Some(spec) = service.spec.as_ref() else {
        return Vec::new();
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Vec::new();
    }
    let cluster_ip = spec
        .cluster_ip
        .as_deref()
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok());
    let affinity = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .map_or(10_800, |s| s.max(1) as u32)
    });
    let external_local = spec.external_traffic_policy.as_deref() == Some("Local");
    let id = format!(
        "{}/{}",
        service.namespace().unwrap_or_default(),
        service.name_any()
    );
    spec.ports
        .iter()
        .flatten()
        .filter_map(|port| {
            let protocol = match port.protocol.as_deref().unwrap_or("TCP") {
                "TCP" => Protocol::Tcp,
                "UDP" => Protocol::Udp,
                _ => return None,
            };
            let name = port.name.clone().unwrap_or_default();
            let endpoints = slices
                .iter()
                .flat_map(|slice| {
                    let target = slice
                        .ports
                        .iter()
                        .flatten()
                        .find(|p| p.name.clone().unwrap_or_default() == name);
                    let target_port = target.and_then(|p| p.port).or(match &port.target_port {
                        Some(IntOrString::Int(n)) => Some(*n),
                        _ => None,
                    });
                    slice.endpoints.iter().flatten().filter_map(move |e| {
                        let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                        let address = e.addresses.first()?.parse().ok()?;
                        (ready && target_port.is_some()).then(|| Endpoint {
                            address,
                            port: target_port.unwrap_or_default() as u16,
                            local: e.node_name.as_deref() == Some(node),
                        })
                    })
                })
                .collect();
            Some(ServicePort {
                id: format!("{id}:{name}:{}", port.port),
                protocol,
                cluster_ip,
                port: u16::try_from(port.port).ok()?,
                node_port: port.node_port.and_then(|p| u16::try_from(p).ok()),
                affinity,
                external_local,
                endpoints,
            })
        })
        .collect()
}

/// The node's Service ports from the caches, in a stable order.
fn ports(node: &str, services: &Store<Service>, slices: &Store<EndpointSlice>) -> Vec<ServicePort> {
    let mut by_service: HashMap<(String, String), Vec<Arc<EndpointSlice>>> = HashMap::new();
    for slice in slices.state() {
        if let (Some(namespace), Some(name)) = (
            slice.namespace(),
            slice.labels().get("kubernetes.io/service-name").cloned(),
        ) {
            by_service.entry((namespace, name)).or_default().push(slice);
        }
    }
    let mut ports: Vec<ServicePort> = services
        .state()
        .iter()
        .flat_map(|service| {
            let key = (service.namespace().unwrap_or_default(), service.name_any());
            let slices = by_service.get(&key).map_or(&[][..], Vec::as_slice);
            service_ports(service, slices, node)
        })
        .collect();
    ports.sort_by(|a, b| a.id.cmp(&b.id));
    ports
}

/// The node's Service table: named after its bridge (nodes sharing a host keep apart).
pub fn table(ready: &Ready) -> String {
    format!("{}_svc", ready.network.bridge())
}

/// A cache of every object of `K`, with `changed` notified on each event.
pub(crate) fn cache<K>(
    client: &kube::Client,
    changed: Arc<Notify>,
    synced: Arc<Notify>,
) -> (Store<K>, impl std::future::Future<Output = ()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let writer = reflector::store::Writer::default();
    let store = writer.as_reader();
    let events = reflector(
        writer,
        watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .for_each(move |event| {
        if matches!(event, Ok(watcher::Event::InitDone)) {
            synced.notify_one();
        }
        changed.notify_one();
        futures::future::ready(())
    });
    (store, events)
}

/// Runs the node's service proxy until the process ends.
pub async fn run(client: kube::Client, slot: Arc<PodNetworkSlot>) {
    let ready = loop {
        if let Some(ready) = slot.wait(Duration::from_secs(3600)).await {
            break ready;
        }
    };
    let changed = Arc::new(Notify::new());
    let (services_synced, slices_synced) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (services, follow_services) =
        cache::<Service>(&client, changed.clone(), services_synced.clone());
    let (slices, follow_slices) =
        cache::<EndpointSlice>(&client, changed.clone(), slices_synced.clone());
    tokio::spawn(follow_services);
    tokio::spawn(follow_slices);
    services_synced.notified().await;
    slices_synced.notified().await;
    let node = slot.node().to_string();
    let zone = Arc::new(crate::cluster_dns::Zone {
        domain: ready.plan.domain.clone(),
        records: Default::default(),
        upstream: crate::cluster_dns::host_resolvers(),
    });
    crate::cluster_dns::rebuild(&zone, &services, &slices);
    let dns_address = std::net::SocketAddr::from((ready.network.gateway(), 53));
    match tokio::net::UdpSocket::bind(dns_address).await {
        Ok(socket) => {
            tracing::info!("node {node}: cluster DNS for {} on {dns_address}", zone.domain);
            tokio::spawn(crate::cluster_dns::serve(socket, zone.clone()));
        }
        Err(e) => tracing::error!(
            "node {node}: cannot serve cluster DNS on {dns_address}: {e}; guests here resolve no cluster names"
        ),
    }
    // What the table holds, once a whole table went in: later changes go as partial
    // transactions; after a failure the whole table is made again.
    let mut applied: Option<Vec<ServicePort>> = None;
    let mut backoff = Duration::from_millis(200);
    let (table, cluster) = (table(&ready), ready.plan.cluster_cidr);
    loop {
        tokio::time::sleep(SETTLE).await;
        crate::cluster_dns::rebuild(&zone, &services, &slices);
        let wanted = ports(&node, &services, &slices);
        let text = match &applied {
            Some(held) if *held == wanted => String::new(),
            Some(held) => services::update(&table, cluster, held, &wanted),
            None => services::ruleset(&table, cluster, &wanted),
        };
        if !text.is_empty() {
            let bytes = text.len();
            match network::nft::apply_blocking(None, text).await {
                Ok(()) => {
                    tracing::debug!("node {node}: Service rules applied ({bytes} bytes)");
                    applied = Some(wanted);
                    backoff = Duration::from_millis(200);
                }
                Err(e) => {
                    applied = None;
                    tracing::error!(
                        "node {node}: applying the Service rules: {e}; the whole table again in {backoff:?}"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
        }
        changed.notified().await;
    }
}
