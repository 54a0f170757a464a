//! Fixtures built at test time (a raw image with known content, its qcow2, and gzip and
//! xz of both) and a loopback HTTP(S) server serving them, plus a few misbehaving
//! servers.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use importer::{Progress, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

pub const MIB: u64 = 1 << 20;
pub const IMAGE_LEN: usize = 4 << 20;
pub const USER: &str = "user";
pub const PASSWORD: &str = "secret";
/// `Basic base64("user:secret")`.
const AUTHORIZATION: &str = "Basic dXNlcjpzZWNyZXQ=";

pub struct Fixtures {
    /// 4 MiB: a byte pattern with every third 4 KiB block zero, and a non-zero end.
    pub raw: Vec<u8>,
    pub images: HashMap<&'static str, Vec<u8>>,
}

static FIXTURES: tokio::sync::OnceCell<Fixtures> = tokio::sync::OnceCell::const_new();

fn pattern() -> Vec<u8> {
    let mut raw = vec![0u8; IMAGE_LEN];
    for (block, chunk) in raw.chunks_mut(4096).enumerate() {
        if block % 3 == 1 {
            continue;
        }
        for (i, b) in chunk.iter_mut().enumerate() {
            *b = ((block * 31 + i * 7) % 251) as u8 + 1;
        }
    }
    raw
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub async fn xz(data: &[u8]) -> Vec<u8> {
    let mut e = async_compression::tokio::bufread::XzEncoder::new(data);
    let mut out = Vec::new();
    e.read_to_end(&mut out).await.unwrap();
    out
}

pub async fn qemu_img(args: &[&str]) {
    let out = tokio::process::Command::new("qemu-img")
        .args(args)
        .output()
        .await
        .expect("qemu-img runs");
    assert!(
        out.status.success(),
        "qemu-img {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// qcow2 of `raw`, by qemu-img.
pub async fn to_qcow2(raw: &[u8]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("raw");
    let dst = dir.path().join("qcow2");
    std::fs::write(&src, raw).unwrap();
    qemu_img(&[
        "convert",
        "-f",
        "raw",
        "-O",
        "qcow2",
        src.to_str().unwrap(),
        dst.to_str().unwrap(),
    ])
    .await;
    std::fs::read(&dst).unwrap()
}

pub async fn fixtures() -> &'static Fixtures {
    FIXTURES
        .get_or_init(|| async {
            let raw = pattern();
            let qcow2 = to_qcow2(&raw).await;
            assert!(qcow2.starts_with(b"QFI\xfb"));
            let mut images = HashMap::new();
            images.insert("raw.gz", gzip(&raw));
            images.insert("raw.xz", xz(&raw).await);
            images.insert("qcow2.gz", gzip(&qcow2));
            images.insert("qcow2.xz", xz(&qcow2).await);
            images.insert("truncated.qcow2", qcow2[..200_000].to_vec());
            images.insert("raw", raw.clone());
            images.insert("qcow2", qcow2);
            Fixtures { raw, images }
        })
        .await
}

#[derive(Clone)]
struct Served {
    images: Arc<HashMap<&'static str, Vec<u8>>>,
    requests: Arc<Mutex<Vec<HeaderMap>>>,
}

impl Served {
    fn image(&self, name: &str) -> Result<Vec<u8>, StatusCode> {
        self.images.get(name).cloned().ok_or(StatusCode::NOT_FOUND)
    }
}

async fn image(
    State(s): State<Served>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    s.requests.lock().unwrap().push(headers);
    match s.image(&name) {
        Ok(data) => data.into_response(),
        Err(code) => code.into_response(),
    }
}

async fn chunked(State(s): State<Served>, UrlPath(name): UrlPath<String>) -> Response {
    match s.image(&name) {
        Ok(data) => {
            let chunks: Vec<Result<Bytes, std::io::Error>> = data
                .chunks(64 * 1024)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            Body::from_stream(futures::stream::iter(chunks)).into_response()
        }
        Err(code) => code.into_response(),
    }
}

/// 64 KiB every 20 ms, with a Content-Length: a 4 MiB image takes over a second.
async fn slow(State(s): State<Served>, UrlPath(name): UrlPath<String>) -> Response {
    match s.image(&name) {
        Ok(data) => {
            let len = data.len();
            let chunks: Vec<Bytes> = data.chunks(64 * 1024).map(Bytes::copy_from_slice).collect();
            let stream = futures::stream::unfold(chunks.into_iter(), |mut it| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                it.next().map(|c| (Ok::<_, std::io::Error>(c), it))
            });
            (
                [(header::CONTENT_LENGTH, len.to_string())],
                Body::from_stream(stream),
            )
                .into_response()
        }
        Err(code) => code.into_response(),
    }
}

async fn auth(
    State(s): State<Served>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if given != Some(AUTHORIZATION) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"images\"")],
        )
            .into_response();
    }
    match s.image(&name) {
        Ok(data) => data.into_response(),
        Err(code) => code.into_response(),
    }
}

pub struct Server {
    pub addr: SocketAddr,
    pub base: String,
    requests: Arc<Mutex<Vec<HeaderMap>>>,
    /// The CA that signed the server's certificate, for the TLS variant.
    pub ca_pem: Option<String>,
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The headers of the requests to `/img/...`, in order.
    pub fn requests(&self) -> Vec<HeaderMap> {
        self.requests.lock().unwrap().clone()
    }
}

async fn router(served: Served) -> Router {
    Router::new()
        .route("/img/{name}", get(image))
        .route("/chunked/{name}", get(chunked))
        .route("/slow/{name}", get(slow))
        .route("/auth/{name}", get(auth))
        .route(
            "/unavailable",
            get(|| async { StatusCode::SERVICE_UNAVAILABLE }),
        )
        .route("/forbidden", get(|| async { StatusCode::FORBIDDEN }))
        .with_state(served)
}

async fn served() -> Served {
    let f = fixtures().await;
    Served {
        images: Arc::new(f.images.clone()),
        requests: Arc::new(Mutex::new(Vec::new())),
    }
}

/// The fixtures over plain HTTP on loopback.
pub async fn serve() -> Server {
    let s = served().await;
    let requests = s.requests.clone();
    let app = router(s).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Server {
        addr,
        base: format!("http://{addr}"),
        requests,
        ca_pem: None,
    }
}

/// The fixtures over HTTPS on loopback, with a certificate from a fresh CA.
pub async fn serve_tls() -> Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "importer test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let s = served().await;
    let requests = s.requests.clone();
    let app = router(s).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(
                    hyper_util::rt::TokioIo::new(tls),
                    hyper_util::service::TowerToHyperService::new(app),
                )
                .await;
            });
        }
    });
    Server {
        addr,
        base: format!("https://127.0.0.1:{}", addr.port()),
        requests,
        ca_pem: Some(ca_cert.pem()),
    }
}

/// Answers every request with `200`, a Content-Length of `data`'s length, and then
/// only the first `send` bytes before closing.
pub async fn serve_short(data: Vec<u8>, send: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let data = Arc::new(data);
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            let data = data.clone();
            tokio::spawn(async move {
                read_request(&mut tcp).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
                    data.len()
                );
                let _ = tcp.write_all(head.as_bytes()).await;
                let _ = tcp.write_all(&data[..send]).await;
                let _ = tcp.flush().await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    format!("http://{addr}/image")
}

/// Accepts connections and reads requests but never answers.
pub async fn serve_silent() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            read_request(&mut tcp).await;
            held.push(tcp);
        }
    });
    format!("http://{addr}/image")
}

async fn read_request(tcp: &mut tokio::net::TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// A loopback URL where nothing listens.
pub async fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/image")
}

/// A claim file and a scratch directory in a fresh temporary directory.
pub struct Claim {
    pub dir: tempfile::TempDir,
    pub target: Target,
    pub scratch: PathBuf,
}

pub fn claim(capacity: u64) -> Claim {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let target = Target {
        path: dir.path().join("disk.img"),
        capacity_bytes: capacity,
    };
    Claim {
        dir,
        target,
        scratch,
    }
}

/// The target is exactly the claim's size, starts with `image`, and is zeros after.
pub fn assert_holds(target: &Target, image: &[u8]) {
    let got = std::fs::read(&target.path).unwrap();
    assert_eq!(got.len() as u64, target.capacity_bytes, "target length");
    if let Some(at) = got.iter().zip(image).position(|(a, b)| a != b) {
        panic!("target differs from the image at byte {at}");
    }
    if let Some(at) = got[image.len()..].iter().position(|&b| b != 0) {
        panic!(
            "target not zero after the image, at byte {}",
            image.len() + at
        );
    }
}

pub fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in {}: {left:?}", dir.display());
}

/// A progress callback that records what it is given.
#[derive(Default)]
pub struct Seen(pub Mutex<Vec<Progress>>);

impl Seen {
    pub fn callback(&self) -> impl Fn(Progress) + Send + Sync + '_ {
        move |p| self.0.lock().unwrap().push(p)
    }

    pub fn all(&self) -> Vec<Progress> {
        self.0.lock().unwrap().clone()
    }

    /// Non-decreasing, and the last is what the caller expects.
    pub fn assert_increasing(&self) {
        let all = self.all();
        assert!(!all.is_empty(), "no progress reported");
        for w in all.windows(2) {
            assert!(
                w[0].read_bytes <= w[1].read_bytes,
                "progress went down: {all:?}"
            );
        }
    }
}
