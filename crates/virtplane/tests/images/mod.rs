//! Disk images served over loopback HTTP for the DataVolume tests: a raw image with a
//! known pattern, its qcow2 form (made with `qemu-img`), compressed copies (`xz`,
//! `gzip`), a truncated qcow2, a route behind basic auth, one that fails twice with 503
//! before it answers, and a slow one that notes when its client went away.

// Each test binary uses its own part.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

pub const USER: &str = "importer";
pub const PASSWORD: &str = "s3cret";
/// The raw image's size.
pub const RAW_SIZE: usize = 4 << 20;

/// The raw image: a pattern no two 4 KiB blocks share, with a hole in the middle.
pub fn raw_image() -> Vec<u8> {
    let mut data: Vec<u8> = (0..RAW_SIZE)
        .map(|i| ((i / 4096 * 31 + i) % 251) as u8)
        .collect();
    data[RAW_SIZE / 2..RAW_SIZE / 2 + (256 << 10)].fill(0);
    data
}

pub struct Images {
    pub url: String,
    pub dir: tempfile::TempDir,
    /// Set when the slow route's client closed the connection before the end.
    pub slow_abandoned: Arc<AtomicBool>,
    /// Requests the flaky route has answered.
    pub flaky_requests: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct Served {
    dir: PathBuf,
    slow_abandoned: Arc<AtomicBool>,
    flaky_requests: Arc<AtomicUsize>,
}

fn tool(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run fixture tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the images and serves them, or says (loudly) what is missing; CI fails then.
pub async fn serve() -> Option<Images> {
    for needed in ["qemu-img", "xz", "gzip"] {
        if !tool(needed) {
            let message =
                format!("DataVolume tests need {needed}; scripts/install-deps installs it");
            assert!(std::env::var_os("CI").is_none(), "{message}");
            eprintln!("SKIPPED: {message}");
            return None;
        }
    }
    let dir = tempfile::tempdir().expect("image dir");
    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("disk.raw"), raw_image()).expect("raw image");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .arg(path("disk.raw"))
        .arg(path("disk.qcow2")));
    for (tool, ext, input) in [("xz", "xz", "disk.qcow2"), ("gzip", "gz", "disk.raw")] {
        let out = Command::new(tool)
            .arg("-c")
            .arg(path(input))
            .output()
            .expect("compress");
        assert!(out.status.success());
        std::fs::write(path(&format!("{input}.{ext}")), out.stdout).expect("compressed image");
    }
    let qcow2 = std::fs::read(path("disk.qcow2")).expect("qcow2");
    std::fs::write(path("truncated.qcow2"), &qcow2[..qcow2.len() / 2]).expect("truncated");
    let served = listen(dir.path()).await;
    Some(Images {
        url: served.url.clone(),
        dir,
        slow_abandoned: served.state.slow_abandoned,
        flaky_requests: served.state.flaky_requests,
    })
}

pub struct Listening {
    /// `http://127.0.0.1:PORT`; the files of the dir are under `/images/`.
    pub url: String,
    state: Served,
}

/// Serves the files of `dir` (and the special routes) on a loopback port.
pub async fn listen(dir: &Path) -> Listening {
    let served = Served {
        dir: dir.to_path_buf(),
        slow_abandoned: Arc::new(AtomicBool::new(false)),
        flaky_requests: Arc::new(AtomicUsize::new(0)),
    };
    let app = Router::new()
        .route("/images/{name}", get(file))
        .route("/auth/{name}", get(authenticated))
        .route("/flaky/{name}", get(flaky))
        .route("/slow/{name}", get(slow))
        .with_state(served.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Listening { url, state: served }
}

fn read(dir: &Path, name: &str) -> Option<Vec<u8>> {
    if name.contains('/') || name.contains("..") {
        return None;
    }
    std::fs::read(dir.join(name)).ok()
}

async fn file(
    State(s): State<Served>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    match read(&s.dir, &name) {
        Some(bytes) => bytes.into_response(),
        None => (StatusCode::NOT_FOUND, "404 page not found").into_response(),
    }
}

async fn authenticated(
    State(s): State<Served>,
    axum::extract::Path(name): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    use base64::Engine as _;
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    if headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        != Some(expected.as_str())
    {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"images\"")],
            "unauthorized",
        )
            .into_response();
    }
    file(State(s), axum::extract::Path(name)).await
}

async fn flaky(
    State(s): State<Served>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    if s.flaky_requests.fetch_add(1, Ordering::SeqCst) < 2 {
        return (StatusCode::SERVICE_UNAVAILABLE, "try again later").into_response();
    }
    file(State(s), axum::extract::Path(name)).await
}

/// Notes an abandoned transfer when dropped before the last chunk was taken.
struct Abandoned(Arc<AtomicBool>, bool);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// 64 KiB every 50 ms, with a Content-Length: 4 MiB take about 3 s.
async fn slow(
    State(s): State<Served>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    let Some(bytes) = read(&s.dir, &name) else {
        return (StatusCode::NOT_FOUND, "404 page not found").into_response();
    };
    let length = bytes.len();
    let guard = Abandoned(s.slow_abandoned.clone(), false);
    let chunks: Vec<Vec<u8>> = bytes.chunks(64 << 10).map(<[u8]>::to_vec).collect();
    let count = chunks.len();
    let stream = futures::stream::unfold(
        (chunks.into_iter().enumerate(), guard),
        move |(mut it, mut guard)| async move {
            let (i, chunk) = it.next()?;
            tokio::time::sleep(Duration::from_millis(50)).await;
            if i + 1 == count {
                guard.1 = true;
            }
            Some((
                Ok::<_, std::io::Error>(bytes::Bytes::from(chunk)),
                (it, guard),
            ))
        },
    );
    Response::builder()
        .header(header::CONTENT_LENGTH, length)
        .body(Body::from_stream(stream))
        .expect("response")
}
