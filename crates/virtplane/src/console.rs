//! `virtplane vm console NAME`: the VMI's serial console in this terminal, over the same
//! websocket virtctl uses (`plain.kubevirt.io`). Ctrl+] leaves.

use std::sync::Arc;

use anyhow::{bail, Context};
use base64::Engine;
use futures::{SinkExt, StreamExt};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use secrecy::ExposeSecret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const ESCAPE: u8 = 0x1d; // Ctrl+]

fn tls_config(config: &kube::Config) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for der in config.root_cert.iter().flatten() {
        roots
            .add(CertificateDer::from(der.clone()))
            .context("bad certificate authority in the kubeconfig")?;
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let auth = &config.auth_info;
    let decode = |b64: &str| base64::engine::general_purpose::STANDARD.decode(b64.trim());
    match (&auth.client_certificate_data, &auth.client_key_data) {
        (Some(cert), Some(key)) => {
            let cert = decode(cert).context("client-certificate-data is not base64")?;
            let key = decode(key.expose_secret()).context("client-key-data is not base64")?;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<_, _>>()
                .context("bad client certificate")?;
            let key = PrivateKeyDer::from_pem_slice(&key).context("bad client key")?;
            Ok(builder.with_client_auth_cert(chain, key)?)
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// Puts the terminal in raw mode for as long as it lives.
struct RawTerminal(Option<rustix::termios::Termios>);

impl RawTerminal {
    fn enter() -> RawTerminal {
        let stdin = rustix::stdio::stdin();
        let Ok(saved) = rustix::termios::tcgetattr(stdin) else {
            return RawTerminal(None);
        };
        let mut raw = saved.clone();
        raw.make_raw();
        let _ = rustix::termios::tcsetattr(stdin, rustix::termios::OptionalActions::Now, &raw);
        RawTerminal(Some(saved))
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = rustix::termios::tcsetattr(
                rustix::stdio::stdin(),
                rustix::termios::OptionalActions::Now,
                saved,
            );
        }
    }
}

/// The server's websocket at `path` (a VM's or VMI's subresource), as virtctl opens it
/// (`plain.kubevirt.io`: raw bytes); `what` names it in errors.
pub async fn open(
    config: &kube::Config,
    path: &str,
    what: &str,
) -> anyhow::Result<
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
> {
    let url = &config.cluster_url;
    let host = url
        .host()
        .context("the kubeconfig's server has no host")?
        .trim_matches(['[', ']'])
        .to_string();
    let port = url.port_u16().unwrap_or(443);
    let mut request = format!("wss://{host}:{port}{path}").into_client_request()?;
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "plain.kubevirt.io".parse()?);
    if let Some(token) = &config.auth_info.token {
        request.headers_mut().insert(
            "Authorization",
            format!("Bearer {}", token.expose_secret()).parse()?,
        );
    }
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .with_context(|| format!("cannot reach {host}:{port}"))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(config)?));
    let server_name = ServerName::try_from(host.clone()).context("bad server name")?;
    let tls = connector
        .connect(server_name, tcp)
        .await
        .context("TLS handshake with the server failed")?;
    let (socket, _) = match tokio_tungstenite::client_async(request, tls).await {
        Ok(done) => done,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|s| s["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| body.to_string());
            bail!("{what}: {message}");
        }
        Err(e) => bail!("{what}: {e}"),
    };
    Ok(socket)
}

pub async fn run(config: kube::Config, namespace: &str, name: &str) -> anyhow::Result<()> {
    let path = format!("/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}/console");
    let socket = open(&config, &path, &format!("console of {name}")).await?;
    eprintln!("Successfully connected to {name} console. The escape sequence is ^]");
    let _raw = RawTerminal::enter();
    let (mut to_server, mut from_server) = socket.split();
    let keyboard = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 1024];
        loop {
            let n = match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let (input, quit) = match buf[..n].iter().position(|b| *b == ESCAPE) {
                Some(at) => (&buf[..at], true),
                None => (&buf[..n], false),
            };
            if !input.is_empty()
                && to_server
                    .send(Message::Binary(input.to_vec().into()))
                    .await
                    .is_err()
            {
                return;
            }
            if quit {
                let _ = to_server.send(Message::Close(None)).await;
                return;
            }
        }
    };
    let screen = async {
        let mut stdout = tokio::io::stdout();
        while let Some(Ok(message)) = from_server.next().await {
            let bytes = match message {
                Message::Binary(b) => b.to_vec(),
                Message::Text(t) => t.as_bytes().to_vec(),
                Message::Close(_) => break,
                _ => continue,
            };
            if stdout.write_all(&bytes).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        _ = keyboard => {}
        _ = screen => {}
    }
    Ok(())
}
