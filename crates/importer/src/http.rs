//! The HTTP side of an import: a client trusting the extra CA, the GET, and the answer
//! turned into a byte stream or a classified error.

use std::io;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

use crate::error::{chain, ImportError};
use crate::source::{ByteStream, SourceError};

/// Where and how to fetch an image over HTTP(S): CDI's `spec.source.http`.
#[derive(Clone)]
pub struct HttpSource {
    pub url: String,
    /// `accessKeyId` and `secretKey` of the DataVolume's `secretRef`, sent as basic auth.
    pub basic_auth: Option<(String, String)>,
    /// PEM certificates trusted besides the system's (the `certConfigMap`'s CA).
    pub ca_pem: Option<Vec<u8>>,
    /// Sent with the request (CDI's `extraHeaders` and `secretExtraHeaders`).
    pub extra_headers: Vec<(String, String)>,
    pub connect_timeout: Duration,
    /// The longest wait for the next bytes of the answer.
    pub read_timeout: Duration,
}

impl HttpSource {
    pub fn new(url: impl Into<String>) -> HttpSource {
        HttpSource {
            url: url.into(),
            basic_auth: None,
            ca_pem: None,
            extra_headers: Vec::new(),
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
        }
    }
}

impl std::fmt::Debug for HttpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSource")
            .field("url", &self.url)
            .field(
                "basic_auth",
                &self
                    .basic_auth
                    .as_ref()
                    .map(|(user, _)| (user, "<redacted>")),
            )
            .field("ca_pem", &self.ca_pem.as_ref().map(|p| p.len()))
            .field(
                "extra_headers",
                &self
                    .extra_headers
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .finish()
    }
}

/// CDI's prefix for everything that goes wrong before the body flows.
const CONNECT: &str = "Unable to connect to http data source";

fn client(source: &HttpSource) -> Result<reqwest::Client, ImportError> {
    // Harmless when the binary installed it already; reqwest is built without a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = || {
        reqwest::Client::builder()
            .connect_timeout(source.connect_timeout)
            .read_timeout(source.read_timeout)
    };
    let Some(pem) = &source.ca_pem else {
        return builder().build().map_err(|e| {
            ImportError::Permanent(format!(
                "{CONNECT}: Error creating http client: {}",
                chain(&e)
            ))
        });
    };
    let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
        ImportError::Permanent(format!(
            "{CONNECT}: Error getting system certs: invalid CA PEM: {}",
            chain(&e)
        ))
    })?;
    if certs.is_empty() {
        return Err(ImportError::Permanent(format!(
            "{CONNECT}: Error getting system certs: the CA holds no PEM certificate"
        )));
    }
    match builder().tls_certs_merge(certs.clone()).build() {
        Ok(client) => Ok(client),
        // No system roots on this node: the given CA alone still lets this import work.
        Err(_) => builder().tls_certs_only(certs).build().map_err(|e| {
            ImportError::Permanent(format!(
                "{CONNECT}: Error creating http client: {}",
                chain(&e)
            ))
        }),
    }
}

/// A failed request: a refused certificate will be refused again; anything else on the
/// way there (refused, reset, timed out, DNS) may well work later.
fn request_error(e: &reqwest::Error) -> ImportError {
    let text = format!("{CONNECT}: HTTP request errored: {}", chain(e));
    match oci::tls_error(e) {
        Some(rustls::Error::InvalidCertificate(_)) => ImportError::Permanent(text),
        _ if e.is_builder() => ImportError::Permanent(text),
        _ => ImportError::Transient(text),
    }
}

fn status_error(status: StatusCode) -> ImportError {
    // Go's resp.Status is "404 Not Found"; reqwest's StatusCode prints the same.
    let text = format!(
        "{CONNECT}: expected status code 200, got {}. Status: {}",
        status.as_u16(),
        status
    );
    if status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
    {
        ImportError::Transient(text)
    } else {
        ImportError::Permanent(text)
    }
}

/// GETs the image and returns its body and length (when the server gave one).
pub(crate) async fn open(
    source: &HttpSource,
    cancel: &CancellationToken,
) -> Result<(ByteStream, Option<u64>), ImportError> {
    let url = reqwest::Url::parse(&source.url).map_err(|e| {
        ImportError::Permanent(format!("unable to parse endpoint {:?}: {e}", source.url))
    })?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(ImportError::Permanent(format!(
            "unable to parse endpoint {:?}: unsupported scheme {:?}",
            source.url,
            url.scheme()
        )));
    }
    let client = client(source)?;
    let mut request = client.get(url);
    for (name, value) in &source.extra_headers {
        request = request.header(name, value);
    }
    if let Some((user, password)) = &source.basic_auth {
        request = request.basic_auth(user, Some(password));
    }
    let response = tokio::select! {
        r = request.send() => r.map_err(|e| request_error(&e))?,
        _ = cancel.cancelled() => return Err(ImportError::Cancelled),
    };
    let status = response.status();
    if status != StatusCode::OK {
        return Err(status_error(status));
    }
    let length = response.content_length();
    tracing::debug!(url = %source.url, ?length, "import: download started");
    let body = response
        .bytes_stream()
        .map_err(|e| {
            io::Error::other(SourceError::Transient(format!(
                "reading the http body: {}",
                chain(&e)
            )))
        })
        .boxed();
    Ok((body, length))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        let e = status_error(StatusCode::NOT_FOUND);
        assert_eq!(
            e,
            ImportError::Permanent(
                "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found".into()
            )
        );
        assert!(!status_error(StatusCode::UNAUTHORIZED).is_transient());
        assert!(!status_error(StatusCode::FORBIDDEN).is_transient());
        assert!(!status_error(StatusCode::PARTIAL_CONTENT).is_transient());
        assert!(status_error(StatusCode::SERVICE_UNAVAILABLE).is_transient());
        assert!(status_error(StatusCode::BAD_GATEWAY).is_transient());
        assert!(status_error(StatusCode::TOO_MANY_REQUESTS).is_transient());
    }

    #[test]
    fn debug_hides_the_password() {
        let mut s = HttpSource::new("http://x/");
        s.basic_auth = Some(("user".into(), "hunter2".into()));
        s.extra_headers = vec![("X-Token".into(), "secret".into())];
        let text = format!("{s:?}");
        assert!(text.contains("user") && text.contains("X-Token"));
        assert!(!text.contains("hunter2") && !text.contains("secret"));
    }
}
