//! Several API servers behind one client: an agent whose kubeconfig names several
//! servers of one cluster (one context each, the same CA and user) sends every request to
//! the current one and moves to the next when a request cannot reach it. The failed
//! request is not sent again (its body is gone): the agent's loops retry with backoff,
//! and the retry goes to the next server. A server dying does not touch the agent's VMs;
//! the watches re-list or resume on the next server (resourceVersions are the shared
//! store's, so they mean the same on every server).
//!
//! A server whose host vanishes sends no reset: without help, a watch on it would sit
//! silent until its read timeout (minutes), and so would a request already sent. Every
//! connection therefore probes its peer with TCP keep-alives and gives up on data the
//! peer has not acknowledged within `UNANSWERED_LIMIT`, and connects give up after
//! `CONNECT_TIMEOUT`; the failure then moves the agent on like any other.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ConfigExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use tower::ServiceBuilder;

/// Idle time before a connection's first keep-alive probe, and the time between probes.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(3);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_PROBES: u32 = 3;
/// How long a connection's peer may leave data (a request, a probe) unacknowledged
/// before the connection fails: a vanished server is given up on after about this long.
const UNANSWERED_LIMIT: Duration = Duration::from_secs(8);
/// How long a connect may take; a server on another host answers in milliseconds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The contexts of `kubeconfig` that reach the same cluster as its current one: the
/// current context first, then every other one with the same user and a cluster with the
/// same CA, in the order the kubeconfig lists them.
pub fn cluster_contexts(kubeconfig: &Kubeconfig) -> Vec<String> {
    let Some(current) = kubeconfig.current_context.clone() else {
        return Vec::new();
    };
    let context = |name: &str| {
        kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.context.as_ref())
    };
    let ca = |cluster: &str| {
        kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == cluster)
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.certificate_authority_data.clone())
    };
    let Some(first) = context(&current) else {
        return vec![current];
    };
    let first_ca = ca(&first.cluster);
    let mut names = vec![current.clone()];
    for named in &kubeconfig.contexts {
        let Some(other) = named.context.as_ref() else {
            continue;
        };
        if named.name != current
            && other.user == first.user
            && first_ca.is_some()
            && ca(&other.cluster) == first_ca
        {
            names.push(named.name.clone());
        }
    }
    names
}

/// One client over every server of `kubeconfig`'s cluster (`cluster_contexts`), and the
/// first server's configuration (its CA, for the agent's endpoint).
pub async fn client(kubeconfig: &Kubeconfig) -> Result<(Client, kube::Config), kube::Error> {
    let mut servers = Vec::new();
    let mut first = None;
    for context in cluster_contexts(kubeconfig) {
        let options = KubeConfigOptions {
            context: Some(context),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &options).await?;
        let url = config.cluster_url.to_string();
        let client = watchful_client(&config)?;
        servers.push(Server { url, client });
        first.get_or_insert(config);
    }
    let Some(first) = first else {
        return Err(kube::config::KubeconfigError::CurrentContextNotSet.into());
    };
    if servers.len() == 1 {
        let only = servers.remove(0).client;
        return Ok((only, first));
    }
    let namespace = first.default_namespace.clone();
    let failover = Failover(Arc::new(Servers {
        servers,
        current: AtomicUsize::new(0),
    }));
    Ok((Client::new(failover, namespace), first))
}

/// A client for `config`'s server whose connections notice a peer that stopped
/// answering (see the module's comment). kube's own stack, less its tracing and retry
/// layers, over a connector with those socket options.
fn watchful_client(config: &kube::Config) -> Result<Client, kube::Error> {
    let mut connector = HttpConnector::new();
    connector.enforce_http(false);
    connector.set_keepalive(Some(KEEPALIVE_IDLE));
    connector.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    connector.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    connector.set_tcp_user_timeout(Some(UNANSWERED_LIMIT));
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let https = config.rustls_https_connector_with_connector(connector)?;
    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace.clone()))
}

struct Server {
    url: String,
    client: Client,
}

struct Servers {
    servers: Vec<Server>,
    current: AtomicUsize,
}

impl Servers {
    /// After a request to server `failed` could not get through: the next server, unless
    /// another request moved on already.
    fn move_on(&self, failed: usize, error: &kube::Error) {
        let next = (failed + 1) % self.servers.len();
        if self
            .current
            .compare_exchange(failed, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::warn!(
                "API server {} cannot be reached ({error}); moving to {}",
                self.servers[failed].url,
                self.servers[next].url
            );
        }
    }
}

/// The tower service behind the agent's client: each request to the current server.
#[derive(Clone)]
struct Failover(Arc<Servers>);

type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

impl tower::Service<Request<Body>> for Failover {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let servers = self.0.clone();
        Box::pin(async move {
            let index = servers.current.load(Ordering::Acquire);
            let answer = servers.servers[index].client.send(request).await;
            if let Err(error) = &answer {
                servers.move_on(index, error);
            }
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(text: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(text).expect("kubeconfig")
    }

    const TWO_SERVERS: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: a\n  cluster:\n    server: https://a:6443\n    certificate-authority-data: Q0E=\n- name: b\n  cluster:\n    server: https://b:6443\n    certificate-authority-data: Q0E=\n- name: other\n  cluster:\n    server: https://other:6443\n    certificate-authority-data: T1RIRVI=\ncontexts:\n- name: on-b\n  context:\n    cluster: b\n    user: me\n- name: on-a\n  context:\n    cluster: a\n    user: me\n- name: elsewhere\n  context:\n    cluster: other\n    user: me\n- name: someone-else\n  context:\n    cluster: b\n    user: you\ncurrent-context: on-a\nusers:\n- name: me\n  user:\n    token: t\n- name: you\n  user:\n    token: u\n";

    #[test]
    fn the_current_context_comes_first_then_the_same_cluster_and_user() {
        assert_eq!(
            cluster_contexts(&kubeconfig(TWO_SERVERS)),
            vec!["on-a".to_string(), "on-b".to_string()]
        );
    }

    #[test]
    fn a_kubeconfig_without_a_current_context_names_no_server() {
        let text = TWO_SERVERS.replace("current-context: on-a\n", "");
        assert!(cluster_contexts(&kubeconfig(&text)).is_empty());
    }
}
