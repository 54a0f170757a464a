//! Reaching the console or VNC of a VMI on a remote node: the server dials that node's
//! agent as kube-apiserver dials a kubelet (and virt-api a virt-handler). It finds the
//! agent at the Node's `status.addresses` and `status.daemonEndpoints.kubeletEndpoint.Port`,
//! presents its own client certificate, and trusts only the self-signed serving
//! certificate whose SHA-256 the agent published on its Node.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::status::Status;
use futures::StreamExt;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::console::PROTOCOL;
use crate::registry::Registry;
use crate::tls::TlsError;

/// The Node annotation holding the hex SHA-256 of the agent's serving certificate
/// (written by the node agent's endpoint).
pub const FINGERPRINT_ANNOTATION: &str =
    kubevirt_api::names::annotations::AGENT_SERVING_CERT_SHA256;

/// Connect, TLS and websocket handshake together: a console request never hangs on a
/// silent agent.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

pub type AgentSocket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<TcpStream>>;

/// Where a node's agent listens, and the certificate it must present.
#[derive(Debug, PartialEq, Eq)]
struct Endpoint {
    host: String,
    port: u16,
    fingerprint: String,
}

impl Endpoint {
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The agent endpoint a Node publishes, or what it lacks.
fn endpoint(node: &Value) -> Result<Endpoint, &'static str> {
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .ok_or("publishes no agent endpoint (status.daemonEndpoints.kubeletEndpoint.Port)")?;
    let addresses = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    // kube-apiserver's default --kubelet-preferred-address-types, minus the DNS kinds.
    let host = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|kind| {
            addresses
                .iter()
                .filter(|a| a["type"] == *kind)
                .find_map(|a| a["address"].as_str().filter(|s| !s.is_empty()))
        })
        .ok_or("publishes no address (status.addresses)")?;
    let fingerprint = node
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(FINGERPRINT_ANNOTATION))
        .and_then(Value::as_str)
        .filter(|f| f.len() == 64 && f.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or("publishes no serving certificate fingerprint (annotation virtplane.io/agent-serving-cert-sha256)")?;
    Ok(Endpoint {
        host: host.to_string(),
        port,
        fingerprint: fingerprint.to_ascii_lowercase(),
    })
}

fn sha256_hex(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Trusts exactly one certificate, by fingerprint: the agent's is self-signed, and the
/// Node it published that on can only be written by cluster credentials.
#[derive(Debug)]
pub struct Pinned {
    fingerprint: String,
    provider: Arc<CryptoProvider>,
}

impl Pinned {
    pub fn new(fingerprint: &str, provider: Arc<CryptoProvider>) -> Pinned {
        Pinned {
            fingerprint: fingerprint.to_ascii_lowercase(),
            provider,
        }
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if sha256_hex(end_entity) == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn unavailable(message: String) -> Status {
    Status::failure(503, "ServiceUnavailable", message)
}

/// Dials node agents with the server's agent-client certificate.
pub struct AgentDialer {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl AgentDialer {
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<AgentDialer, TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| TlsError::Pem(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| TlsError::Pem(e.to_string()))?;
        Ok(AgentDialer {
            chain,
            key,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        })
    }

    fn tls_config(&self, fingerprint: &str) -> Result<ClientConfig, rustls::Error> {
        let verifier = Pinned::new(fingerprint, self.provider.clone());
        ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
    }

    /// Opens the `which` (`console` or `vnc`) websocket of VMI `namespace/name` at the
    /// agent of `node`.
    pub async fn dial(
        &self,
        registry: &Registry,
        node: &str,
        namespace: &str,
        name: &str,
        which: &str,
    ) -> Result<AgentSocket, Status> {
        let path = format!("/v1/namespaces/{namespace}/virtualmachineinstances/{name}/{which}");
        self.dial_path(registry, node, &format!("{which} of VMI {name}"), &path)
            .await
    }

    /// Everything the agent of `node` sends on `path` (`what` it is, for errors), until it
    /// closes the socket.
    pub async fn fetch(
        &self,
        registry: &Registry,
        node: &str,
        what: &str,
        path: &str,
    ) -> Result<Vec<u8>, Status> {
        let socket = self.dial_path(registry, node, what, path).await?;
        let (from_agent, _) = apimachinery::wsstream::byte_halves(socket);
        Ok(from_agent
            .fold(Vec::new(), |mut all, chunk| async move {
                all.extend_from_slice(&chunk);
                all
            })
            .await)
    }

    async fn dial_path(
        &self,
        registry: &Registry,
        node: &str,
        what: &str,
        path: &str,
    ) -> Result<AgentSocket, Status> {
        let nodes = registry
            .find("", "v1", "nodes")
            .ok_or_else(|| Status::internal("no Node registration"))?;
        let node_object =
            registry
                .get(&nodes, None, node)
                .await
                .map_err(|status| match status.code {
                    404 => unavailable(format!(
                        "the {what} cannot be reached: its node {node} does not exist"
                    )),
                    _ => status,
                })?;
        let endpoint = endpoint(&node_object).map_err(|why| {
            unavailable(format!(
                "the {what} cannot be reached: node {node} {why}; is its agent running?"
            ))
        })?;
        let address = endpoint.authority();
        let attempt = self.connect(&endpoint, path);
        match tokio::time::timeout(DIAL_TIMEOUT, attempt).await {
            Ok(Ok(socket)) => Ok(socket),
            Ok(Err(failure)) => Err(failure.status(node, &address)),
            Err(_) => Err(unavailable(format!(
                "the agent of node {node} at {address} did not answer within {DIAL_TIMEOUT:?}"
            ))),
        }
    }

    async fn connect(&self, endpoint: &Endpoint, path: &str) -> Result<AgentSocket, DialFailure> {
        let config = self
            .tls_config(&endpoint.fingerprint)
            .map_err(|e| DialFailure::Setup(e.to_string()))?;
        let server_name = ServerName::try_from(endpoint.host.clone())
            .map_err(|e| DialFailure::Setup(format!("address {:?}: {e}", endpoint.host)))?;
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| DialFailure::Unreachable(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(server_name, tcp)
            .await
            .map_err(|e| {
                let pin_failed = e
                    .get_ref()
                    .and_then(|e| e.downcast_ref::<rustls::Error>())
                    .is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_)));
                DialFailure::Unreachable(if pin_failed {
                    format!(
                        "its certificate is not the one the Node names ({FINGERPRINT_ANNOTATION})"
                    )
                } else {
                    format!("TLS: {e}")
                })
            })?;
        let mut request = format!("wss://{}{path}", endpoint.authority())
            .into_client_request()
            .map_err(|e| DialFailure::Setup(e.to_string()))?;
        request.headers_mut().insert(
            http::header::SEC_WEBSOCKET_PROTOCOL,
            http::HeaderValue::from_static(PROTOCOL),
        );
        match tokio_tungstenite::client_async(request, tls).await {
            Ok((socket, _)) => Ok(socket),
            Err(tungstenite::Error::Http(response)) => Err(DialFailure::Refused {
                code: response.status().as_u16(),
                message: response
                    .body()
                    .as_deref()
                    .map(|b| String::from_utf8_lossy(b).trim().to_string())
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| response.status().to_string()),
            }),
            Err(e) => Err(DialFailure::Unreachable(e.to_string())),
        }
    }
}

enum DialFailure {
    Setup(String),
    Unreachable(String),
    /// The agent answered with an HTTP error instead of a websocket.
    Refused {
        code: u16,
        message: String,
    },
}

impl DialFailure {
    fn status(self, node: &str, address: &str) -> Status {
        match self {
            DialFailure::Setup(why) => {
                Status::internal(format!("dialing the agent of node {node}: {why}"))
            }
            DialFailure::Unreachable(why) => unavailable(format!(
                "cannot reach the agent of node {node} at {address}: {why}"
            )),
            // The VMI is not (or no longer) on that node: the agent's own words.
            DialFailure::Refused { code: 404, message } => {
                Status::failure(404, "NotFound", message)
            }
            // What the agent could not do for this request (a port nothing listens on,
            // a VMI without a Pod IP): its words, its code.
            DialFailure::Refused { code: 400, message } => Status::bad_request(&message),
            DialFailure::Refused { code: 503, message } => unavailable(message),
            DialFailure::Refused { code, message } => Status::internal(format!(
                "the agent of node {node} refused the connection ({code}): {message}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FP: &str = "ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01";

    fn node(status: Value) -> Value {
        json!({"metadata": {"name": "n2", "annotations": {FINGERPRINT_ANNOTATION: FP.to_uppercase()}},
               "status": status})
    }

    #[test]
    fn endpoint_prefers_the_internal_ip_and_needs_port_address_and_fingerprint() {
        let published = node(json!({
            "addresses": [{"type": "Hostname", "address": "n2"}, {"type": "InternalIP", "address": "10.0.0.2"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}));
        assert_eq!(
            endpoint(&published),
            Ok(Endpoint {
                host: "10.0.0.2".into(),
                port: 10250,
                fingerprint: FP.into()
            })
        );
        let v6 = node(
            json!({"addresses": [{"type": "InternalIP", "address": "::1"}],
                             "daemonEndpoints": {"kubeletEndpoint": {"Port": 7}}}),
        );
        assert_eq!(endpoint(&v6).unwrap().authority(), "[::1]:7");
        let hostname_only = node(json!({"addresses": [{"type": "Hostname", "address": "n2"}],
                                        "daemonEndpoints": {"kubeletEndpoint": {"Port": 7}}}));
        assert_eq!(endpoint(&hostname_only).unwrap().host, "n2");

        let no_port = node(json!({"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}));
        assert!(endpoint(&no_port).unwrap_err().contains("kubeletEndpoint"));
        let zero_port = node(
            json!({"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
                                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}}),
        );
        assert!(endpoint(&zero_port).is_err());
        let no_address = node(json!({"daemonEndpoints": {"kubeletEndpoint": {"Port": 7}}}));
        assert!(endpoint(&no_address).unwrap_err().contains("address"));
        let mut no_fingerprint = published.clone();
        no_fingerprint["metadata"]["annotations"] = json!({FINGERPRINT_ANNOTATION: "abc"});
        assert!(endpoint(&no_fingerprint)
            .unwrap_err()
            .contains("fingerprint"));
    }

    #[test]
    fn pinned_verifier_accepts_only_the_published_certificate() {
        let cert = |name: &str| {
            rcgen::generate_simple_self_signed(vec![name.to_string()])
                .unwrap()
                .cert
                .der()
                .clone()
        };
        let (ours, theirs) = (cert("agent"), cert("agent"));
        let verifier = Pinned::new(
            &sha256_hex(&ours),
            Arc::new(rustls::crypto::ring::default_provider()),
        );
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let verify = |c: &CertificateDer<'_>| {
            verifier.verify_server_cert(c, &[], &name, &[], UnixTime::now())
        };
        assert!(verify(&ours).is_ok());
        assert!(verify(&theirs).is_err());
    }
}
