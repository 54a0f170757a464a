//! Cluster DNS, served by each node agent on its bridge's gateway address (what its
//! guests get by DHCP as their DNS server), as CoreDNS's kubernetes plugin answers:
//! `<svc>.<ns>.svc.<domain>` is the Service's cluster IP (a headless Service's ready
//! endpoints), `<hostname>.<svc>.<ns>.svc.<domain>` the endpoint that carries that
//! hostname (KubeVirt's `spec.hostname` + `spec.subdomain`), `a-b-c-d.<ns>.pod.<domain>`
//! the address it spells. Other names are relayed to the host's own resolver.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::Store;
use kube::ResourceExt;
use tokio::net::UdpSocket;

/// CoreDNS's default TTL for cluster records.
const TTL: u32 = 5;
/// How long an upstream resolver may take.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);

/// The cluster's names, lower-case and without the final dot, to their addresses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Records {
    names: HashMap<String, Vec<Ipv4Addr>>,
}

impl Records {
    /// The records of `services` and their `slices`, under `domain`.
    pub fn build(
        domain: &str,
        services: &[Arc<Service>],
        slices: &[Arc<EndpointSlice>],
    ) -> Records {
        let mut by_service: HashMap<(String, String), Vec<&EndpointSlice>> = HashMap::new();
        for slice in slices {
            if let (Some(ns), Some(name)) = (
                slice.namespace(),
                slice.labels().get("kubernetes.io/service-name"),
            ) {
                by_service
                    .entry((ns, name.clone()))
                    .or_default()
                    .push(slice);
            }
        }
        let mut names: HashMap<String, Vec<Ipv4Addr>> = HashMap::new();
        for service in services {
            let (Some(ns), name) = (service.namespace(), service.name_any()) else {
                continue;
            };
            let base = format!("{name}.{ns}.svc.{domain}");
            let spec = service.spec.as_ref();
            let headless = spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None");
            let slices = by_service.get(&(ns.clone(), name.clone()));
            for slice in slices.into_iter().flatten() {
                for endpoint in slice.endpoints.iter().flatten() {
                    let ready = endpoint
                        .conditions
                        .as_ref()
                        .and_then(|c| c.ready)
                        .unwrap_or(true);
                    let Some(ip) = endpoint.addresses.first().and_then(|a| a.parse().ok()) else {
                        continue;
                    };
                    if !ready {
                        continue;
                    }
                    if headless {
                        names.entry(base.clone()).or_default().push(ip);
                    }
                    if let Some(hostname) = &endpoint.hostname {
                        names
                            .entry(format!("{hostname}.{base}"))
                            .or_default()
                            .push(ip);
                    }
                }
            }
            if !headless {
                if let Some(ip) = spec
                    .and_then(|s| s.cluster_ip.as_deref())
                    .and_then(|ip| ip.parse().ok())
                {
                    names.insert(base, vec![ip]);
                }
            }
        }
        for list in names.values_mut() {
            list.sort();
            list.dedup();
        }
        Records { names }
    }

    /// The addresses of `name` (lower-case, no final dot), if the cluster knows it.
    pub fn lookup(&self, name: &str, domain: &str) -> Option<Vec<Ipv4Addr>> {
        if let Some(found) = self.names.get(name) {
            return Some(found.clone());
        }
        // a-b-c-d.<ns>.pod.<domain>
        let rest = name.strip_suffix(&format!(".pod.{domain}"))?;
        let (dashed, _namespace) = rest.split_once('.')?;
        let ip: Ipv4Addr = dashed.replace('-', ".").parse().ok()?;
        Some(vec![ip])
    }
}

/// What the server answers from.
pub struct Zone {
    pub domain: String,
    pub records: RwLock<Records>,
    /// The host's resolvers, for names outside the cluster.
    pub upstream: Vec<SocketAddr>,
}

/// The resolvers of the host's /etc/resolv.conf (the agent's own).
pub fn host_resolvers() -> Vec<SocketAddr> {
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|ip| ip.trim().parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

enum Answer {
    Reply(Vec<u8>),
    /// Not a cluster name: the query goes upstream as it is.
    Relay,
}

/// The reply to `query` from the cluster's records, or `Relay` for other names.
fn answer(zone: &Zone, query: &[u8]) -> Answer {
    let Ok(request) = Message::from_vec(query) else {
        return Answer::Relay;
    };
    let Some(question) = request.queries.first() else {
        return Answer::Relay;
    };
    let asked = question.name().to_ascii().to_ascii_lowercase();
    let name = asked.trim_end_matches('.');
    let domain = zone.domain.as_str();
    if name != domain && !name.ends_with(&format!(".{domain}")) {
        return Answer::Relay;
    }
    let mut reply = Message::new(request.metadata.id, MessageType::Response, OpCode::Query);
    reply.metadata.authoritative = true;
    reply.metadata.recursion_desired = request.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.add_query(question.clone());
    let found = zone
        .records
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .lookup(name, domain);
    match found {
        None => reply.metadata.response_code = ResponseCode::NXDomain,
        Some(addresses) => {
            if matches!(question.query_type(), RecordType::A | RecordType::ANY) {
                for ip in addresses {
                    reply.add_answer(Record::from_rdata(
                        question.name().clone(),
                        TTL,
                        RData::A(A(ip)),
                    ));
                }
            }
        }
    }
    match reply.to_vec() {
        Ok(bytes) => Answer::Reply(bytes),
        Err(e) => {
            tracing::warn!("cluster DNS: cannot encode the answer for {name}: {e}");
            Answer::Relay
        }
    }
}

/// Asks the host's resolvers, one after another, what they say to `query`.
async fn relay(zone: &Zone, query: &[u8]) -> Option<Vec<u8>> {
    for upstream in &zone.upstream {
        let bind: SocketAddr = if upstream.is_ipv4() {
            "0.0.0.0:0".parse().ok()?
        } else {
            "[::]:0".parse().ok()?
        };
        let Ok(socket) = UdpSocket::bind(bind).await else {
            continue;
        };
        if socket.send_to(query, upstream).await.is_err() {
            continue;
        }
        let mut buf = vec![0u8; 4096];
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(UPSTREAM_TIMEOUT, socket.recv_from(&mut buf)).await
        {
            buf.truncate(n);
            return Some(buf);
        }
    }
    None
}

/// SERVFAIL for a query nobody could answer.
fn server_failure(query: &[u8]) -> Option<Vec<u8>> {
    let request = Message::from_vec(query).ok()?;
    let mut reply = Message::new(
        request.metadata.id,
        MessageType::Response,
        request.metadata.op_code,
    );
    reply.metadata.response_code = ResponseCode::ServFail;
    reply.metadata.recursion_available = true;
    for question in &request.queries {
        reply.add_query(question.clone());
    }
    reply.to_vec().ok()
}

/// Serves DNS on `socket` until the process ends.
pub async fn serve(socket: UdpSocket, zone: Arc<Zone>) {
    let socket = Arc::new(socket);
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(e) => {
                tracing::warn!("cluster DNS: receive failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let query = buf[..n].to_vec();
        match answer(&zone, &query) {
            Answer::Reply(bytes) => {
                if let Err(e) = socket.send_to(&bytes, from).await {
                    tracing::debug!("cluster DNS: reply to {from}: {e}");
                }
            }
            Answer::Relay => {
                let (socket, zone) = (socket.clone(), zone.clone());
                tokio::spawn(async move {
                    let reply = match relay(&zone, &query).await {
                        Some(reply) => Some(reply),
                        None => server_failure(&query),
                    };
                    if let Some(reply) = reply {
                        let _ = socket.send_to(&reply, from).await;
                    }
                });
            }
        }
    }
}

/// The rebuilt records, from the caches.
pub fn rebuild(zone: &Zone, services: &Store<Service>, slices: &Store<EndpointSlice>) {
    let records = Records::build(&zone.domain, &services.state(), &slices.state());
    *zone.records.write().unwrap_or_else(|p| p.into_inner()) = records;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(name: &str, cluster_ip: &str) -> Arc<Service> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
                                          "spec": {"clusterIP": cluster_ip}}))
            .unwrap(),
        )
    }

    #[test]
    fn services_hosts_and_pods_have_names() {
        let slice: Arc<EndpointSlice> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "db-x", "namespace": "default", "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.244.0.7"], "hostname": "primary", "conditions": {"ready": true}},
                              {"addresses": ["10.244.1.8"], "conditions": {"ready": false}}]}))
            .unwrap(),
        );
        let records = Records::build(
            "cluster.local",
            &[service("web", "10.96.0.20"), service("db", "None")],
            &[slice],
        );
        let look = |name: &str| records.lookup(name, "cluster.local");
        assert_eq!(
            look("web.default.svc.cluster.local"),
            Some(vec![Ipv4Addr::new(10, 96, 0, 20)])
        );
        assert_eq!(
            look("db.default.svc.cluster.local"),
            Some(vec![Ipv4Addr::new(10, 244, 0, 7)])
        );
        assert_eq!(
            look("primary.db.default.svc.cluster.local"),
            Some(vec![Ipv4Addr::new(10, 244, 0, 7)])
        );
        assert_eq!(
            look("10-244-3-4.default.pod.cluster.local"),
            Some(vec![Ipv4Addr::new(10, 244, 3, 4)])
        );
        assert_eq!(look("nothing.default.svc.cluster.local"), None);
    }

    #[test]
    fn cluster_names_are_answered_and_others_relayed() {
        let zone = Zone {
            domain: "cluster.local".into(),
            records: RwLock::new(Records::build(
                "cluster.local",
                &[service("web", "10.96.0.20")],
                &[],
            )),
            upstream: Vec::new(),
        };
        let query = |name: &str| {
            let mut m = Message::new(7, MessageType::Query, OpCode::Query);
            m.add_query(hickory_proto::op::Query::query(
                name.parse().unwrap(),
                RecordType::A,
            ));
            m.to_vec().unwrap()
        };
        let Answer::Reply(bytes) = answer(&zone, &query("web.default.svc.cluster.local.")) else {
            panic!("relayed a cluster name");
        };
        let reply = Message::from_vec(&bytes).unwrap();
        assert_eq!(reply.metadata.id, 7);
        assert_eq!(reply.answers.len(), 1);
        let Answer::Reply(bytes) = answer(&zone, &query("gone.default.svc.cluster.local.")) else {
            panic!("relayed a cluster name");
        };
        assert_eq!(
            Message::from_vec(&bytes).unwrap().metadata.response_code,
            ResponseCode::NXDomain
        );
        assert!(matches!(
            answer(&zone, &query("example.com.")),
            Answer::Relay
        ));
    }
}
