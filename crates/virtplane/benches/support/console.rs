//! A guest's serial console for a bench: the VMI's console websocket through the API
//! server (as virtctl opens it, with the admin's bearer token), or a QEMU console socket
//! opened directly (a bare QEMU the bench started itself). The test guest's shell answers
//! on either (`tests/guests/README.md`).
#![allow(dead_code)] // not every bench uses every helper

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures::{SinkExt, StreamExt};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::kubeconfig::{admin_kubeconfig, kubeconfig_field, user_token};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

enum Inner {
    Api(Box<Socket>),
    Unix(tokio::net::UnixStream),
}

/// An open console; what arrived so far is kept in `seen`.
pub struct Console {
    inner: Inner,
    pub seen: String,
}

impl Console {
    /// The console websocket of VMI `namespace/name` on the server at `url`
    /// (`https://127.0.0.1:PORT`) whose data dir is `data_dir`.
    pub async fn api(url: &str, data_dir: &Path, namespace: &str, name: &str) -> Result<Console> {
        let authority = url
            .strip_prefix("https://")
            .context("the server URL is not https://")?;
        let kubeconfig = admin_kubeconfig(data_dir)?;
        let ca = kubeconfig_field(&kubeconfig, "certificate-authority-data")
            .context("no CA in admin.kubeconfig")?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca) {
            roots.add(cert.context("the CA is not PEM")?)?;
        }
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut request = format!(
            "wss://{authority}/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}/console"
        )
        .into_client_request()?;
        let headers = request.headers_mut();
        headers.insert("Sec-WebSocket-Protocol", "plain.kubevirt.io".parse()?);
        headers.insert(
            "Authorization",
            format!("Bearer {}", user_token(data_dir, "admin")?).parse()?,
        );
        let tcp = tokio::net::TcpStream::connect(authority).await?;
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from(host.to_string())?, tcp)
            .await
            .context("TLS to the server")?;
        let (socket, _) = tokio_tungstenite::client_async(request, tls)
            .await
            .with_context(|| format!("the console websocket of {namespace}/{name}"))?;
        Ok(Console {
            inner: Inner::Api(Box::new(socket)),
            seen: String::new(),
        })
    }

    /// A QEMU console socket (`-chardev socket,server=on,...`).
    pub async fn unix(path: &Path) -> Result<Console> {
        let stream = tokio::net::UnixStream::connect(path)
            .await
            .with_context(|| format!("console socket {}", path.display()))?;
        Ok(Console {
            inner: Inner::Unix(stream),
            seen: String::new(),
        })
    }

    /// Types `text`.
    pub async fn send(&mut self, text: &str) -> Result<()> {
        match &mut self.inner {
            Inner::Api(socket) => {
                socket
                    .send(Message::Binary(text.as_bytes().to_vec().into()))
                    .await?
            }
            Inner::Unix(stream) => stream.write_all(text.as_bytes()).await?,
        }
        Ok(())
    }

    /// Reads more output; `false` when the console closed.
    async fn read_more(&mut self) -> Result<bool> {
        match &mut self.inner {
            Inner::Api(socket) => match socket.next().await {
                None | Some(Ok(Message::Close(_))) => Ok(false),
                Some(Err(e)) => Err(e.into()),
                Some(Ok(Message::Binary(b))) => {
                    self.seen.push_str(&String::from_utf8_lossy(&b));
                    Ok(true)
                }
                Some(Ok(Message::Text(t))) => {
                    self.seen.push_str(t.as_str());
                    Ok(true)
                }
                Some(Ok(_)) => Ok(true),
            },
            Inner::Unix(stream) => {
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).await?;
                self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
                Ok(n > 0)
            }
        }
    }

    /// Runs `command` in the guest's shell and returns the first output line (after
    /// what was seen before) that starts with `expect` and satisfies `ok` on the rest of
    /// the line, so that the echo of the typed command does not count.
    pub async fn run_until(
        &mut self,
        command: &str,
        expect: &str,
        ok: impl Fn(&str) -> bool,
        within: Duration,
    ) -> Result<String> {
        let from = self.seen.len();
        self.send(&format!("{command}\r")).await?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let found = self.seen[from..]
                .split('\n')
                .skip(1)
                .map(|l| l.trim_end_matches('\r'))
                // A line is complete once a newline follows it.
                .take(self.seen[from..].matches('\n').count().saturating_sub(1))
                .find(|l| l.strip_prefix(expect).is_some_and(&ok))
                .map(str::to_string);
            if let Some(line) = found {
                return Ok(line);
            }
            match tokio::time::timeout_at(deadline, self.read_more()).await {
                Err(_) => bail!(
                    "no line {expect:?} within {within:?} after typing {command:?}; the console showed {:?}",
                    tail(&self.seen[from..], 600)
                ),
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => bail!("the console closed while waiting for {expect:?}"),
                Ok(Err(e)) => return Err(e.context("reading the console")),
            }
        }
    }

    /// `run_until` for any line starting with `expect`.
    pub async fn run(&mut self, command: &str, expect: &str, within: Duration) -> Result<String> {
        self.run_until(command, expect, |_| true, within).await
    }

    pub async fn close(self) {
        match self.inner {
            Inner::Api(mut socket) => {
                let _ = SinkExt::close(&mut socket).await;
            }
            Inner::Unix(mut stream) => {
                let _ = stream.shutdown().await;
            }
        }
    }
}

fn tail(text: &str, chars: usize) -> &str {
    let mut start = text.len().saturating_sub(chars);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
