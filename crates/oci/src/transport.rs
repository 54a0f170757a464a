//! HTTP to registries: TLS verified against the node's trust store (plus a CA a pull
//! brings), Docker's insecure registries (HTTPS with any certificate, else plain HTTP),
//! and which failures are worth another try.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// A request that did not get an answer.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Connection refused or reset, a timeout, a body cut short: may work next time.
    Transient(String),
    /// Will not work by trying again (an untrusted certificate, a bad URL).
    Fatal(String),
}

impl Failure {
    pub fn message(&self) -> &str {
        match self {
            Failure::Transient(m) | Failure::Fatal(m) => m,
        }
    }
}

/// How a pull retries what may pass: connection failures, 5xx, 429.
#[derive(Clone, Debug)]
pub struct Retry {
    /// Tries in all (at least 1).
    pub attempts: u32,
    /// The wait after the first failure; doubled after each further one.
    pub first_delay: Duration,
    pub max_delay: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 5,
            first_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl Retry {
    /// The wait after failed try number `attempt` (0-based).
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        self.first_delay
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max_delay)
    }
}

/// The text of an error with all its causes: reqwest's own ("error sending request")
/// hides them.
pub(crate) fn error_chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// The rustls error inside `error`, if any (how an HTTP client's TLS failure is told from
/// other connection failures).
pub fn tls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    find_tls_error(error, 16)
}

/// The rustls error inside `error`, however deep: it travels inside (nested)
/// `io::Error`s, whose `source()` skips the wrapped error itself.
fn find_tls_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
    depth: usize,
) -> Option<&'a rustls::Error> {
    if depth == 0 {
        return None;
    }
    if let Some(tls) = error.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let unwrapped = error
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
        .map(|inner| inner as &(dyn std::error::Error + 'static));
    unwrapped
        .and_then(|inner| find_tls_error(inner, depth - 1))
        .or_else(|| find_tls_error(error.source()?, depth - 1))
}

/// Why rustls refused the registry's certificate, if that is what failed.
fn certificate_problem(error: &reqwest::Error) -> Option<String> {
    match find_tls_error(error, 16)? {
        rustls::Error::InvalidCertificate(why) => Some(why.to_string()),
        _ => None,
    }
}

/// Turns a reqwest error into a message that says what to do, and whether to try again.
pub(crate) fn classify(error: &reqwest::Error, url: &str, insecure: bool) -> Failure {
    let registry = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    if let Some(why) = certificate_problem(error) {
        return Failure::Fatal(format!(
            "{url}: the registry's TLS certificate is not trusted ({why}): add its CA to this node's trust store (e.g. /usr/local/share/ca-certificates/ and update-ca-certificates, or SSL_CERT_FILE), or allow the registry with --insecure-registry {registry}"
        ));
    }
    let mut text = format!("{url}: {}", error_chain(error));
    if find_tls_error(error, 16).is_some() {
        if url.starts_with("https://") && !insecure {
            text.push_str(&format!(" (a registry that serves plain HTTP must be allowed with --insecure-registry {registry})"));
        }
        return Failure::Fatal(text);
    }
    if error.is_connect() || error.is_timeout() || error.is_body() || error.is_request() {
        if error.is_connect() && url.starts_with("https://") && !insecure {
            text.push_str(&format!(" (a registry that serves plain HTTP must be allowed with --insecure-registry {registry})"));
        }
        Failure::Transient(text)
    } else {
        Failure::Fatal(text)
    }
}

/// The HTTP clients of a puller.
pub(crate) struct Http {
    /// Verifies certificates against this host's trust store (the system CA bundle, or
    /// `SSL_CERT_FILE`/`SSL_CERT_DIR`); an error when there is none.
    verified: Result<reqwest::Client, String>,
    /// For `--insecure-registry` registries: accepts any certificate (Docker's semantics).
    unverified: Result<reqwest::Client, String>,
    /// Verified against the trust store plus a pull's own CA bundle, by its SHA-256.
    with_ca: Mutex<HashMap<[u8; 32], reqwest::Client>>,
    insecure: Vec<String>,
    /// Insecure registries that turned out to speak plain HTTP.
    plain_http: Mutex<HashSet<String>>,
}

fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(15))
        .read_timeout(Duration::from_secs(60))
        .user_agent(concat!("virtplane/", env!("CARGO_PKG_VERSION")))
}

impl Http {
    pub fn new(insecure: Vec<String>) -> Http {
        let verified = builder().build().map_err(|e| {
            format!(
                "no trusted CA certificates on this node ({}): install Debian's ca-certificates or set SSL_CERT_FILE",
                error_chain(&e)
            )
        });
        let unverified = builder()
            .tls_danger_accept_invalid_certs(true)
            .build()
            .map_err(|e| error_chain(&e));
        Http {
            verified,
            unverified,
            with_ca: Mutex::new(HashMap::new()),
            insecure,
            plain_http: Mutex::new(HashSet::new()),
        }
    }

    /// Whether `host` (`host[:port]`) was named with `--insecure-registry`.
    pub fn is_insecure(&self, host: &str) -> bool {
        self.insecure.iter().any(|h| h == host)
    }

    fn client(&self, insecure: bool, ca: Option<&[u8]>) -> Result<reqwest::Client, String> {
        if insecure {
            return self.unverified.clone();
        }
        let Some(ca) = ca else {
            return self.verified.clone();
        };
        let key: [u8; 32] = Sha256::digest(ca).into();
        let mut clients = self.with_ca.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let certificates = reqwest::Certificate::from_pem_bundle(ca)
            .map_err(|e| format!("the CA bundle of this pull: {}", error_chain(&e)))?;
        if certificates.is_empty() {
            return Err("the CA bundle of this pull holds no PEM certificate".into());
        }
        let client = builder()
            .tls_certs_merge(certificates)
            .build()
            .map_err(|e| format!("the CA bundle of this pull: {}", error_chain(&e)))?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// One GET of `path` (`/v2/…`) on registry `host`: over HTTPS, and for an insecure
    /// registry with any certificate, falling back to plain HTTP.
    pub async fn get(
        &self,
        host: &str,
        path: &str,
        accept: &str,
        authorization: Option<&str>,
        ca: Option<&[u8]>,
    ) -> Result<reqwest::Response, Failure> {
        let insecure = self.is_insecure(host);
        let known_plain = self
            .plain_http
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(host);
        if known_plain {
            return self
                .send(
                    &format!("http://{host}{path}"),
                    accept,
                    authorization,
                    true,
                    ca,
                )
                .await;
        }
        match self
            .send(
                &format!("https://{host}{path}"),
                accept,
                authorization,
                insecure,
                ca,
            )
            .await
        {
            Ok(response) => Ok(response),
            Err(tls_error) if insecure => {
                let response = self
                    .send(
                        &format!("http://{host}{path}"),
                        accept,
                        authorization,
                        true,
                        ca,
                    )
                    .await
                    .map_err(|http_error| match http_error {
                        Failure::Transient(m) => Failure::Transient(format!(
                            "{}; over plain HTTP: {m}",
                            tls_error.message()
                        )),
                        Failure::Fatal(m) => {
                            Failure::Fatal(format!("{}; over plain HTTP: {m}", tls_error.message()))
                        }
                    })?;
                self.plain_http
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(host.to_string());
                Ok(response)
            }
            Err(failure) => Err(failure),
        }
    }

    /// A GET of any URL (a token realm).
    pub async fn get_url(
        &self,
        url: &reqwest::Url,
        authorization: Option<&str>,
        ca: Option<&[u8]>,
    ) -> Result<reqwest::Response, Failure> {
        let host = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        self.send(
            url.as_str(),
            "application/json",
            authorization,
            self.is_insecure(&host),
            ca,
        )
        .await
    }

    async fn send(
        &self,
        url: &str,
        accept: &str,
        authorization: Option<&str>,
        insecure: bool,
        ca: Option<&[u8]>,
    ) -> Result<reqwest::Response, Failure> {
        let client = self
            .client(insecure, ca)
            .map_err(|e| Failure::Fatal(format!("{url}: {e}")))?;
        let mut request = client.get(url).header("accept", accept);
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        request
            .send()
            .await
            .map_err(|e| classify(&e, url, insecure))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error holding its cause in a box, as hyper's client errors do.
    #[derive(Debug)]
    struct Outer(Box<dyn std::error::Error + Send + Sync>);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(self.0.as_ref())
        }
    }

    #[test]
    fn certificate_errors_are_found_inside_boxes_and_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let rewrapped = std::io::Error::other(io);
        let outer = Outer(Box::new(rewrapped));
        assert!(matches!(
            find_tls_error(&outer, 16),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ));
        let refused = Outer(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(find_tls_error(&refused, 16).is_none());
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let retry = Retry::default();
        let delays: Vec<u64> = (0..6).map(|a| retry.delay(a).as_millis() as u64).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 8000]);
        assert_eq!(retry.delay(40), Duration::from_secs(8));
    }
}
