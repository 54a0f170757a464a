//! The agent's HTTPS endpoint, through which the API server reaches the consoles of this
//! node's VMIs (virt-handler's console server): websockets at virt-handler's paths
//! `/v1/namespaces/NS/virtualmachineinstances/NAME/{console,vnc}`, relayed to the QEMU
//! sockets of that VMI in this node's dir, and `.../NAME/portforward/PORT/tcp`, relayed
//! to that port at the VMI's Pod IP.
//!
//! Only the API server gets in: its client certificate must chain to the cluster CA
//! (from the agent's kubeconfig) and name `system:virtplane-apiserver`. The serving
//! certificate is self-signed and made anew at each start, so no key is kept on disk;
//! the server trusts it by the SHA-256 fingerprint the agent publishes on its Node.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apimachinery::wsstream;
use futures::{future, SinkExt, StreamExt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio_tungstenite::tungstenite::handshake::server::{
    Callback, ErrorResponse, Request, Response,
};
use tokio_tungstenite::tungstenite::http;
use tokio_util::codec::{BytesCodec, FramedWrite};
use tokio_util::io::ReaderStream;

use qemu::console::Takeovers;

use crate::connections::{Connections, Kind};

/// The client the endpoint serves (the API server's `AGENT_CLIENT_USER`).
pub const APISERVER_USER: &str = "system:virtplane-apiserver";
/// The Node annotation with the hex SHA-256 of the serving certificate.
pub const FINGERPRINT_ANNOTATION: &str =
    kubevirt_api::names::annotations::AGENT_SERVING_CERT_SHA256;
const PROTOCOL: &str = "plain.kubevirt.io";
/// TLS and websocket handshakes each; a silent client holds no task for longer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read from QEMU's socket at once.
const GUEST_READ: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("serving certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("client verifier: {0}")]
    Verifier(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

pub struct EndpointConfig {
    pub listen: SocketAddr,
    /// The cluster CA (DER) the API server's client certificate must chain to.
    pub client_ca: Vec<Vec<u8>>,
    pub node_name: String,
    /// `DIR/node/<node>`, holding `vmi/<ns>/<name>/run/{console,vnc}.sock`.
    pub node_dir: PathBuf,
    /// Whose guests `/v1/metrics` reports on (none: it reports none).
    pub hypervisor: Option<std::sync::Arc<dyn crate::hypervisor::Hypervisor>>,
}

/// What the Node publishes about the endpoint.
#[derive(Clone, Debug)]
pub struct Published {
    pub port: u16,
    /// Hex SHA-256 of the serving certificate (DER).
    pub fingerprint: String,
}

fn sha256_hex(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn tls_config(
    config: &EndpointConfig,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, EndpointError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in &config.client_ca {
        roots.add(CertificateDer::from(ca.clone()))?;
    }
    // Without a verified client certificate the handshake fails.
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| EndpointError::Verifier(e.to_string()))?;
    let server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)?;
    Ok(Arc::new(server))
}

/// Binds the endpoint and serves it in the background.
pub async fn serve(config: EndpointConfig) -> Result<Published, EndpointError> {
    let names = vec![config.node_name.clone(), config.listen.ip().to_string()];
    let certified = rcgen::generate_simple_self_signed(names)?;
    let cert = certified.cert.der().clone();
    let fingerprint = sha256_hex(&cert);
    let key = PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()).into();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls_config(&config, cert, key)?);
    let listen_error = |source| EndpointError::Listen {
        addr: config.listen,
        source,
    };
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(listen_error)?;
    let port = listener.local_addr().map_err(listen_error)?.port();
    tracing::info!(
        "console endpoint of node {} on port {port}",
        config.node_name
    );
    tokio::spawn(accept_loop(
        listener,
        acceptor,
        Arc::new(config),
        Arc::new(Kept::default()),
    ));
    Ok(Published { port, fingerprint })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    config: Arc<EndpointConfig>,
    kept: Arc<Kept>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!("console endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let config = config.clone();
        let kept = kept.clone();
        tokio::spawn(async move {
            if let Err(why) = handle(tcp, acceptor, &config, &kept).await {
                tracing::debug!("console endpoint: connection from {peer}: {why}");
            }
        });
    }
}

/// The user a client certificate names (its CN).
fn common_name(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// The VMI a request path names, and what of it.
#[derive(Debug, PartialEq, Eq)]
struct Target<'a> {
    namespace: &'a str,
    name: &'a str,
    what: What,
}

#[derive(Debug, PartialEq, Eq)]
enum What {
    /// A QEMU socket: `console.sock`, `vnc.sock`.
    Socket(&'static str),
    /// A TCP port of the guest, at its Pod IP.
    Port(u16),
    /// A log of the VMI (`serial`: the guest's console, `qemu`: QEMU's), read to its end
    /// and, when following, on as it grows.
    Log { serial: bool, follow: bool },
}

/// What the endpoint relays to.
#[derive(Debug)]
enum Guest {
    /// A QEMU socket, which the newest client takes over (by its path), and what it is
    /// to the VMI (namespace, name).
    Socket(
        PathBuf,
        std::os::unix::net::UnixStream,
        Kind,
        String,
        String,
    ),
    /// A guest's port, for the VMI (namespace, name).
    Port(std::net::TcpStream, String, String),
    Log(PathBuf, bool),
    /// The node's metrics, sent as one message.
    Metrics,
    /// What the node and its guests use now (`crate::usage::Report`), as one message.
    Usage,
}

/// What the endpoint keeps between connections.
#[derive(Default)]
struct Kept {
    takeovers: Arc<Takeovers>,
    connections: Arc<Connections>,
    usage: crate::usage::Usage,
}

/// Where the API server asks for the node's metrics.
const METRICS_PATH: &str = "/v1/metrics";
/// Where the API server asks what the node and its guests use (`kubectl top`).
const USAGE_PATH: &str = metrics::usage::USAGE_PATH;

/// How long a port-forward waits for the guest to accept.
const PORT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A DNS-1123 name: also keeps the path inside the node dir.
fn is_name(s: &str) -> bool {
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    s.len() <= 253
        && edge(s.as_bytes().first())
        && edge(s.as_bytes().last())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

fn target(path: &str) -> Option<Target<'_>> {
    let parts: Vec<&str> = path.strip_prefix("/v1/namespaces/")?.split('/').collect();
    let what = match parts[..] {
        [_, "virtualmachineinstances", _, "console"] => What::Socket("console.sock"),
        [_, "virtualmachineinstances", _, "vnc"] => What::Socket("vnc.sock"),
        [_, "virtualmachineinstances", _, "portforward", port, "tcp"] => {
            What::Port(port.parse().ok().filter(|p| *p > 0)?)
        }
        [_, "virtualmachineinstances", _, "log", which, ref rest @ ..] => What::Log {
            serial: match which {
                "serial" => true,
                "qemu" => false,
                _ => return None,
            },
            follow: match rest {
                [] => false,
                ["follow"] => true,
                _ => return None,
            },
        },
        _ => return None,
    };
    let (namespace, name) = (parts[0], parts[2]);
    (is_name(namespace) && is_name(name)).then_some(Target {
        namespace,
        name,
        what,
    })
}

/// Why a request is refused: an HTTP status and a message for the API server to pass on.
type Refusal = (http::StatusCode, String);

/// Opens the QEMU socket or guest port a request asks for, or says why not.
fn open(
    config: &EndpointConfig,
    client: Option<&str>,
    request: &Request,
) -> Result<Guest, Refusal> {
    if client != Some(APISERVER_USER) {
        return Err((
            http::StatusCode::FORBIDDEN,
            format!(
                "only the API server ({APISERVER_USER}) may use this endpoint, not {}",
                client.unwrap_or("an anonymous client")
            ),
        ));
    }
    let path = request.uri().path();
    match path {
        METRICS_PATH => return Ok(Guest::Metrics),
        USAGE_PATH => return Ok(Guest::Usage),
        _ => {}
    }
    let Some(target) = target(path) else {
        return Err((
            http::StatusCode::NOT_FOUND,
            format!("no such endpoint: {path}"),
        ));
    };
    let socket = match target.what {
        What::Socket(socket) => socket,
        What::Port(port) => {
            return connect_port(config, &target, port)
                .map(|stream| Guest::Port(stream, target.namespace.into(), target.name.into()))
        }
        What::Log { serial, follow } => {
            let dir = config
                .node_dir
                .join("vmi")
                .join(target.namespace)
                .join(target.name);
            let file = if serial {
                dir.join(crate::qemu_user::RUN_DIR).join("serial.log")
            } else {
                dir.join("qemu.log")
            };
            if !file.exists() {
                return Err((
                    http::StatusCode::NOT_FOUND,
                    format!(
                        "VMI {}/{} has no log on node {}",
                        target.namespace, target.name, config.node_name
                    ),
                ));
            }
            return Ok(Guest::Log(file, follow));
        }
    };
    let socket_path = config
        .node_dir
        .join("vmi")
        .join(target.namespace)
        .join(target.name)
        .join(crate::qemu_user::RUN_DIR)
        .join(socket);
    // A blocking connect, but to a local listening socket: it does not wait.
    let stream = qemu::socket::connect_blocking(&socket_path).map_err(|e| {
        (
            http::StatusCode::NOT_FOUND,
            format!(
                "VMI {}/{} does not run on node {} (no {socket}: {e})",
                target.namespace, target.name, config.node_name
            ),
        )
    })?;
    let kind = if socket == "vnc.sock" {
        Kind::Vnc
    } else {
        Kind::Console
    };
    Ok(Guest::Socket(
        socket_path,
        stream,
        kind,
        target.namespace.into(),
        target.name.into(),
    ))
}

/// Connects to `port` at the VMI's Pod IP. A blocking connect, inside the websocket
/// handshake (which has no asynchronous hook), to an address on this node's bridge:
/// answered at once, or given up after `PORT_CONNECT_TIMEOUT`.
fn connect_port(
    config: &EndpointConfig,
    target: &Target<'_>,
    port: u16,
) -> Result<std::net::TcpStream, Refusal> {
    let unavailable = |message: String| (http::StatusCode::SERVICE_UNAVAILABLE, message);
    let ip = crate::pod_network::pod_ip(&config.node_dir, target.namespace, target.name)
        .map_err(|e| unavailable(format!("reading the Pod IPs of node {}: {e}", config.node_name)))?
        .ok_or_else(|| {
            (
                http::StatusCode::BAD_REQUEST,
                format!(
                    "VMI {}/{} has no Pod IP on node {}: port-forward needs the pod network (a node with --pod-network user forwards the ports listed in status.portForwards instead)",
                    target.namespace, target.name, config.node_name
                ),
            )
        })?;
    let address = SocketAddr::from((ip, port));
    let stream =
        std::net::TcpStream::connect_timeout(&address, PORT_CONNECT_TIMEOUT).map_err(|e| {
            unavailable(format!(
                "error forwarding port {port} to VMI {}/{}: connecting to {address}: {e}",
                target.namespace, target.name
            ))
        })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Answers the websocket handshake: opens the QEMU socket the request names (into
/// `guest`) and accepts, or refuses with an HTTP error.
struct Handshake<'a> {
    config: &'a EndpointConfig,
    client: Option<&'a str>,
    guest: &'a mut Option<Guest>,
}

impl Callback for Handshake<'_> {
    fn on_request(
        self,
        request: &Request,
        mut response: Response,
    ) -> Result<Response, ErrorResponse> {
        match open(self.config, self.client, request) {
            Ok(guest) => *self.guest = Some(guest),
            Err((code, message)) => {
                let mut refusal = ErrorResponse::new(Some(message));
                *refusal.status_mut() = code;
                return Err(refusal);
            }
        }
        let offered = request
            .headers()
            .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|p| p.trim() == PROTOCOL));
        if offered {
            response.headers_mut().insert(
                http::header::SEC_WEBSOCKET_PROTOCOL,
                http::HeaderValue::from_static(PROTOCOL),
            );
        }
        Ok(response)
    }
}

async fn handle(
    tcp: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    config: &EndpointConfig,
    kept: &Kept,
) -> Result<(), String> {
    let _ = tcp.set_nodelay(true);
    let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
        .await
        .map_err(|_| "TLS handshake timed out".to_string())?
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let client = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(common_name);
    let mut guest = None;
    let handshake = Handshake {
        config,
        client: client.as_deref(),
        guest: &mut guest,
    };
    let socket = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tokio_tungstenite::accept_hdr_async(tls, handshake),
    )
    .await
    .map_err(|_| "websocket handshake timed out".to_string())?
    .map_err(|e| format!("websocket handshake: {e}"))?;
    match guest {
        None => Err("handshake completed without a target".into()),
        Some(Guest::Socket(path, guest, kind, namespace, name)) => {
            let _open = kept.connections.open(kind, &namespace, &name);
            let mut claim = kept.takeovers.claim(&path);
            guest
                .set_nonblocking(true)
                .map_err(|e| format!("QEMU socket: {e}"))?;
            let guest = UnixStream::from_std(guest).map_err(|e| format!("QEMU socket: {e}"))?;
            relay(socket, guest, claim.superseded()).await;
            Ok(())
        }
        Some(Guest::Log(path, follow)) => {
            send_log(socket, &path, follow).await;
            Ok(())
        }
        Some(Guest::Metrics) => {
            let began = std::time::Instant::now();
            let readings = match &config.hypervisor {
                Some(hypervisor) => hypervisor.readings().await,
                None => Vec::new(),
            };
            let scrape = crate::node_metrics::Scrape {
                node: &config.node_name,
                guests: &readings,
                connections: &kept.connections.now(),
                read_seconds: began.elapsed().as_secs_f64(),
            };
            let text = crate::node_metrics::render(&scrape);
            send_once(socket, text.into_bytes(), "metrics").await
        }
        Some(Guest::Usage) => {
            let report = match &config.hypervisor {
                Some(hypervisor) => kept.usage.report(hypervisor.as_ref()).await,
                None => metrics::usage::Report::default(),
            };
            let json = serde_json::to_vec(&report).map_err(|e| format!("usage: {e}"))?;
            send_once(socket, json, "usage").await
        }
        // Every port-forward connection is its own; none takes another's over.
        Some(Guest::Port(guest, namespace, name)) => {
            let _open = kept.connections.open(Kind::PortForward, &namespace, &name);
            guest
                .set_nonblocking(true)
                .map_err(|e| format!("guest port: {e}"))?;
            let guest = TcpStream::from_std(guest).map_err(|e| format!("guest port: {e}"))?;
            relay(socket, guest, future::pending::<()>()).await;
            Ok(())
        }
    }
}

/// Sends `message` as the whole answer and closes.
async fn send_once<S>(
    mut socket: tokio_tungstenite::WebSocketStream<S>,
    message: Vec<u8>,
    what: &str,
) -> Result<(), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    socket
        .send(tokio_tungstenite::tungstenite::Message::binary(message))
        .await
        .map_err(|e| format!("sending {what}: {e}"))?;
    let _ = socket.close(None).await;
    Ok(())
}

/// Sends the log at `path` to its end and, when `follow`ing, what is added to it, until
/// the API server's side goes.
async fn send_log<S>(
    socket: tokio_tungstenite::WebSocketStream<S>,
    path: &std::path::Path,
    follow: bool,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures::SinkExt;
    use tokio::io::AsyncReadExt;
    use tokio_tungstenite::tungstenite::Message;
    let (mut to_server, mut from_server) = socket.split();
    let mut file = match tokio::fs::File::open(path).await {
        Ok(file) => file,
        Err(e) => {
            tracing::warn!("log {}: {e}", path.display());
            return;
        }
    };
    let mut buf = vec![0u8; GUEST_READ];
    loop {
        let n = match file.read(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("log {}: {e}", path.display());
                break;
            }
        };
        if n > 0 {
            if to_server
                .send(Message::Binary(buf[..n].to_vec().into()))
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        if !follow {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
            message = from_server.next() => {
                if !matches!(message, Some(Ok(m)) if !m.is_close()) {
                    return;
                }
            }
        }
    }
    let _ = to_server.close().await;
}

/// Copies bytes between the API server's websocket and the guest (a QEMU socket, a
/// port) until either side closes or `ended` resolves (a newer client took over).
async fn relay<S, G>(
    socket: tokio_tungstenite::WebSocketStream<S>,
    guest: G,
    ended: impl std::future::Future<Output = ()>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    G: tokio::io::AsyncRead + tokio::io::AsyncWrite,
{
    let (from_server, to_server) = wsstream::byte_halves(socket);
    let (guest_in, guest_out) = tokio::io::split(guest);
    let from_guest = ReaderStream::with_capacity(guest_in, GUEST_READ)
        .take_while(|read| future::ready(read.is_ok()))
        .filter_map(|read| future::ready(read.ok()));
    let to_guest = FramedWrite::new(guest_out, BytesCodec::new());
    wsstream::relay(from_server, to_server, from_guest, to_guest, ended).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_a_vmi_socket_and_stay_inside_the_node_dir() {
        assert_eq!(
            target("/v1/namespaces/default/virtualmachineinstances/vm-1/console"),
            Some(Target {
                namespace: "default",
                name: "vm-1",
                what: What::Socket("console.sock")
            })
        );
        assert_eq!(
            target("/v1/namespaces/ns/virtualmachineinstances/a.b/vnc").map(|t| t.what),
            Some(What::Socket("vnc.sock"))
        );
        assert_eq!(
            target("/v1/namespaces/ns/virtualmachineinstances/vm/portforward/22/tcp")
                .map(|t| t.what),
            Some(What::Port(22))
        );
        for bad in [
            "/v1/namespaces/default/virtualmachineinstances/vm/qmp",
            "/v1/namespaces/default/virtualmachines/vm/console",
            "/v1/namespaces/default/virtualmachineinstances/vm/console/x",
            "/v1/namespaces/default/virtualmachineinstances/../console",
            "/v1/namespaces/../virtualmachineinstances/vm/console",
            "/v1/namespaces/default/virtualmachineinstances//console",
            "/v1/namespaces/default/virtualmachineinstances/VM/console",
            "/v1/namespaces/default/virtualmachineinstances/-vm/console",
            "/v2/namespaces/default/virtualmachineinstances/vm/console",
            "/v1/namespaces/default/virtualmachineinstances/vm/portforward/0/tcp",
            "/v1/namespaces/default/virtualmachineinstances/vm/portforward/70000/tcp",
            "/v1/namespaces/default/virtualmachineinstances/vm/portforward/22/udp",
            "/v1/namespaces/default/virtualmachineinstances/vm/portforward/22",
        ] {
            assert_eq!(target(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_the_api_server_is_let_in() {
        let config = EndpointConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            client_ca: Vec::new(),
            node_name: "n2".into(),
            node_dir: PathBuf::from("/nonexistent"),
            hypervisor: None,
        };
        let request = Request::builder()
            .uri("/v1/namespaces/default/virtualmachineinstances/vm/console")
            .body(())
            .unwrap();
        let refusal = |client| open(&config, client, &request).unwrap_err();
        assert_eq!(refusal(None).0, http::StatusCode::FORBIDDEN);
        assert_eq!(refusal(Some("admin")).0, http::StatusCode::FORBIDDEN);
        // The API server gets past the check, to a VMI that does not run here.
        let (code, message) = refusal(Some(APISERVER_USER));
        assert_eq!(code, http::StatusCode::NOT_FOUND);
        assert!(message.contains("does not run on node n2"), "{message}");
    }
}
