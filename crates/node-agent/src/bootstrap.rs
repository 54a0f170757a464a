//! A node agent's own identity, obtained as the kubelet's TLS bootstrap does: with the
//! join credential (which may do nothing else) it asks for a client certificate for
//! `system:node:NAME` in `system:nodes` through a CertificateSigningRequest, waits for it
//! to be approved and issued, and keeps it beside its data (`DIR/node-NAME.kubeconfig`)
//! for its next starts, until it expires.

use std::path::{Path, PathBuf};
use std::time::Duration;

use apimachinery::identity::{node_user, KUBELET_CLIENT_SIGNER, NODES_GROUP};
use base64::Engine;
use kube::api::PostParams;
use kube::config::{AuthInfo, Kubeconfig};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde_json::json;

/// How long the agent waits for its request to be approved and signed.
const ISSUE_TIMEOUT: Duration = Duration::from_secs(600);
/// A certificate this close to its end is asked for again at start.
const RENEW_BEFORE: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("cannot make a key or certificate request: {0}")]
    Request(#[from] rcgen::Error),
    #[error("asking the API server for a node certificate: {0}")]
    Api(#[from] kube::Error),
    #[error("certificate request {name} was {outcome}: {message}")]
    Refused {
        name: String,
        outcome: String,
        message: String,
    },
    #[error("certificate request {0} was not issued within {ISSUE_TIMEOUT:?}; approve it with `kubectl certificate approve {0}`")]
    NotIssued(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Kubeconfig(String),
}

/// Where the node's own kubeconfig is kept.
pub fn kubeconfig_path(data_dir: &Path, node: &str) -> PathBuf {
    data_dir.join(format!("node-{node}.kubeconfig"))
}

/// Whether a kubeconfig's current user authenticates with a client certificate.
pub fn has_client_certificate(kubeconfig: &Kubeconfig) -> bool {
    current_auth(kubeconfig)
        .is_some_and(|a| a.client_certificate_data.is_some() || a.client_certificate.is_some())
}

fn current_auth(kubeconfig: &Kubeconfig) -> Option<&AuthInfo> {
    let context = kubeconfig.current_context.as_deref()?;
    let user = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?
        .user
        .clone()?;
    kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == user)?
        .auth_info
        .as_ref()
}

/// The node's kubeconfig: the kept one while its certificate is for this node and not
/// near its end, otherwise a new one asked for with `join` (and kept).
pub async fn node_kubeconfig(
    join: &Kubeconfig,
    join_client: &Client,
    data_dir: &Path,
    node: &str,
) -> Result<Kubeconfig, BootstrapError> {
    let path = kubeconfig_path(data_dir, node);
    if let Ok(kept) = Kubeconfig::read_from(&path) {
        match same_cluster(&kept, join).and_then(|()| usable(&kept, node)) {
            Ok(()) => return Ok(kept),
            Err(why) => tracing::info!(
                "{}: {why}; asking for a new node certificate",
                path.display()
            ),
        }
    }
    let (cert, key) = request_certificate(join_client, node).await?;
    let kubeconfig = with_certificate(join, node, &cert, &key)?;
    let text = serde_json::to_string_pretty(&kubeconfig)
        .map_err(|e| BootstrapError::Kubeconfig(e.to_string()))?;
    write_private(&path, &text)?;
    tracing::info!(
        "node {node}: identity {} issued, kept in {}",
        node_user(node),
        path.display()
    );
    Ok(kubeconfig)
}

/// The current context's cluster (server and CA) of a kubeconfig.
fn cluster(kubeconfig: &Kubeconfig) -> Option<(Option<String>, Option<String>)> {
    let context = kubeconfig.current_context.as_deref()?;
    let name = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?
        .cluster
        .clone();
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == name)?
        .cluster
        .as_ref()?;
    Some((
        cluster.server.clone(),
        cluster.certificate_authority_data.clone(),
    ))
}

/// A kept identity is for the server the join kubeconfig names, with the same CA (a
/// server made anew has another CA, and the old certificate means nothing to it).
fn same_cluster(kept: &Kubeconfig, join: &Kubeconfig) -> Result<(), String> {
    if cluster(kept).is_some() && cluster(kept) == cluster(join) {
        Ok(())
    } else {
        Err("it is for another server or cluster CA than the join kubeconfig".into())
    }
}

/// Why a kept kubeconfig will not do, if it will not.
fn usable(kubeconfig: &Kubeconfig, node: &str) -> Result<(), String> {
    let pem = current_auth(kubeconfig)
        .and_then(|a| a.client_certificate_data.as_deref())
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
        .ok_or("it has no client certificate")?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).map_err(|e| e.to_string())?;
    let cert = pem.parse_x509().map_err(|e| e.to_string())?;
    let cn: String = cert
        .subject()
        .iter_common_name()
        .filter_map(|c| c.as_str().ok())
        .collect();
    if cn != node_user(node) {
        return Err(format!("its certificate is for {cn:?}"));
    }
    let left = cert.validity().time_to_expiration();
    if left.is_none_or(|left| left.whole_seconds() < RENEW_BEFORE.as_secs() as i64) {
        return Err("its certificate expires within a day".into());
    }
    Ok(())
}

fn csr_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("certificates.k8s.io", "v1", "CertificateSigningRequest"),
        "certificatesigningrequests",
    )
}

/// Creates a request for the node's identity and waits for its certificate.
async fn request_certificate(
    client: &Client,
    node: &str,
) -> Result<(String, String), BootstrapError> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, node_user(node));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, NODES_GROUP);
    let request = params.serialize_request(&key)?.pem()?;
    let api = Api::<DynamicObject>::all_with(client.clone(), &csr_resource());
    let csr: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "node-csr-"},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(&request),
                 "signerName": KUBELET_CLIENT_SIGNER,
                 "usages": ["digital signature", "client auth"]}}))
    .map_err(|e| BootstrapError::Kubeconfig(e.to_string()))?;
    let created = api.create(&PostParams::default(), &csr).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!("node {node}: certificate request {name} sent");
    let deadline = tokio::time::Instant::now() + ISSUE_TIMEOUT;
    let mut wait = Duration::from_millis(50);
    while tokio::time::Instant::now() < deadline {
        let now = api.get(&name).await?;
        let status = &now.data["status"];
        for outcome in ["Denied", "Failed"] {
            let found = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == outcome);
            if let Some(c) = found {
                return Err(BootstrapError::Refused {
                    name,
                    outcome: outcome.to_lowercase(),
                    message: c["message"].as_str().unwrap_or("").to_string(),
                });
            }
        }
        let cert = status["certificate"]
            .as_str()
            .and_then(|c| base64::engine::general_purpose::STANDARD.decode(c).ok())
            .and_then(|c| String::from_utf8(c).ok());
        if let Some(cert) = cert.filter(|c| !c.is_empty()) {
            return Ok((cert, key.serialize_pem()));
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(2));
    }
    Err(BootstrapError::NotIssued(name))
}

/// `join` with its current user's credentials replaced by the certificate and key.
fn with_certificate(
    join: &Kubeconfig,
    node: &str,
    cert: &str,
    key: &str,
) -> Result<Kubeconfig, BootstrapError> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let mut value =
        serde_json::to_value(join).map_err(|e| BootstrapError::Kubeconfig(e.to_string()))?;
    let user = node_user(node);
    value["users"] = json!([{"name": user, "user": {
        "client-certificate-data": b64(cert), "client-key-data": b64(key)}}]);
    // Every server of the cluster the join kubeconfig names, with the node's identity.
    let servers = crate::servers::cluster_contexts(join);
    let contexts = value["contexts"]
        .as_array_mut()
        .ok_or_else(|| BootstrapError::Kubeconfig("the join kubeconfig has no contexts".into()))?;
    contexts.retain(|c| {
        c["name"]
            .as_str()
            .is_some_and(|n| servers.iter().any(|s| s == n))
    });
    for context in contexts.iter_mut() {
        context["context"]["user"] = json!(user);
    }
    serde_json::from_value(value).map_err(|e| BootstrapError::Kubeconfig(e.to_string()))
}

fn write_private(path: &Path, contents: &str) -> Result<(), BootstrapError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| BootstrapError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
