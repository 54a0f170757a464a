//! The HTTPS listener: TLS handshakes run per connection (one slow client never stalls
//! the others), client certificates become request identities, and every connection is
//! served by hyper with HTTP/1.1 upgrades (websockets) and HTTP/2.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::auth::UserInfo;
use crate::pki::Pki;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("bad PEM: {0}")]
    Pem(String),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("client verifier: {0}")]
    Verifier(String),
}

/// The identity proven by a verified client certificate: CN is the user, O the groups.
#[derive(Clone, Debug)]
pub struct ClientCertificateIdentity(pub UserInfo);

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
                    if let Some(identity) = &identity {
                        request.extensions_mut().insert(identity.clone());
                    }
                    let mut app = app.clone();
                    async move {
                        tower::Service::call(&mut app, request.map(axum::body::Body::new)).await
                    }
                },
            );
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tls), service)
                .await
            {
                tracing::debug!("connection from {peer} ended: {e}");
            }
        });
    }
}
