//! The HTTPS listener: TLS handshakes run per connection (one slow client never stalls
//! the others), client certificates become request identities, and every connection is
//! served by hyper with HTTP/1.1 upgrades (websockets) and HTTP/2.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use access::authn::{ClientCertificateIdentity, UserInfo};
use access::pki::Pki;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers (kube-apiserver's
/// `ReadHeaderTimeout`): a client that trickles them, or holds an idle keep-alive
/// connection that long, is disconnected. Bodies are bounded by `--request-timeout`.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("bad PEM: {0}")]
    Pem(String),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("client verifier: {0}")]
    Verifier(String),
}

/// The address a request came from (the audit log's `sourceIPs`).
#[derive(Clone, Copy, Debug)]
pub struct PeerAddress(pub std::net::SocketAddr);

/// A server configuration that asks for (but does not require) a client certificate
/// signed by our CA.
pub fn server_config(pki: &Pki) -> Result<Arc<ServerConfig>, TlsError> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pki.server_cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| TlsError::Pem(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(pki.server_key_pem.as_bytes())
        .map_err(|e| TlsError::Pem(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(pki.ca_cert_pem.as_bytes()) {
        roots.add(ca.map_err(|e| TlsError::Pem(e.to_string()))?)?;
    }
    let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let mut config = ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn identity_from_certificate(der: &CertificateDer<'_>) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let subject = cert.subject();
    let user = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    // The authenticator adds system:authenticated.
    Some(UserInfo::new(user, groups))
}

/// Accepts connections until the listener fails; each one is handled on its own task.
pub async fn serve(listener: TcpListener, config: Arc<ServerConfig>, app: Router) {
    let acceptor = TlsAcceptor::from(config);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!("TLS handshake with {peer} failed: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!("TLS handshake with {peer} timed out");
                    return;
                }
            };
            let identity = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(identity_from_certificate)
                .map(ClientCertificateIdentity);
            let service = hyper::service::service_fn(
                move |mut request: hyper::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(PeerAddress(peer));
                    if let Some(identity) = &identity {
                        request.extensions_mut().insert(identity.clone());
                    }
                    let mut app = app.clone();
                    async move {
                        tower::Service::call(&mut app, request.map(axum::body::Body::new)).await
                    }
                },
            );
            let mut builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            if let Err(e) = builder
                .serve_connection_with_upgrades(
                    hyper_util::rt::TokioIo::new(FirstByteDeadline::new(tls)),
                    service,
                )
                .await
            {
                tracing::debug!("connection from {peer} ended: {e}");
            }
        });
    }
}

/// A connection that must send its first byte within `HEADER_READ_TIMEOUT` of the
/// handshake. hyper's header timeout starts once it knows the protocol, which it learns
/// from the first bytes; a client that sends none would otherwise hold the connection.
struct FirstByteDeadline<I> {
    io: I,
    /// Until the first byte.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<I> FirstByteDeadline<I> {
    fn new(io: I) -> Self {
        FirstByteDeadline {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(HEADER_READ_TIMEOUT))),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for FirstByteDeadline<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Some(deadline) = &mut this.deadline {
            match polled {
                Poll::Ready(Ok(())) if buf.filled().len() > before => this.deadline = None,
                Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no request within the header timeout",
                    )));
                }
                _ => {}
            }
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for FirstByteDeadline<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
