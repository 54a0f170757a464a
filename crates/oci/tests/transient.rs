//! A registry that fails the way networks and busy registries do (503, 429, a body cut
//! short, nothing listening yet), served on loopback by the test: the puller tries again
//! with backoff and gets the image; and two pulls of one image at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use oci::{Config, Platform, PullOptions, PullPolicy, Puller, Retry};
use serde_json::json;
use sha2::{Digest, Sha256};

struct Fake {
    manifest: Vec<u8>,
    layer: Vec<u8>,
    layer_digest: String,
    /// Manifest GETs answered 503, then one 429, before the manifest.
    failing_manifests: usize,
    manifest_requests: AtomicUsize,
    /// Layer GETs whose body is cut off halfway.
    cut_layers: usize,
    /// Every manifest GET is answered 403, as a registry that bans the client does.
    forbidden: bool,
    /// Layer bodies stop halfway and never go on.
    stall_layers: bool,
    layer_requests: AtomicUsize,
}

async fn serve(State(fake): State<Arc<Fake>>, uri: Uri) -> Response {
    let path = uri.path();
    if path.ends_with("/manifests/latest") {
        let n = fake.manifest_requests.fetch_add(1, Ordering::SeqCst);
        if fake.forbidden {
            let body = json!({"errors": [{"code": "DENIED", "message": "requested access to the resource is denied"}]});
            return (StatusCode::FORBIDDEN, axum::Json(body)).into_response();
        }
        if n < fake.failing_manifests {
            return (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response();
        }
        if n == fake.failing_manifests && fake.failing_manifests > 0 {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "0")],
                "slow down",
            )
                .into_response();
        }
        return (
            [("content-type", "application/vnd.oci.image.manifest.v1+json")],
            fake.manifest.clone(),
        )
            .into_response();
    }
    if path.ends_with(&format!("/blobs/{}", fake.layer_digest)) {
        let n = fake.layer_requests.fetch_add(1, Ordering::SeqCst);
        if fake.stall_layers {
            let half: Result<Vec<u8>, std::io::Error> =
                Ok(fake.layer[..fake.layer.len() / 2].to_vec());
            let body = Body::from_stream(futures::StreamExt::chain(
                futures::stream::iter(vec![half]),
                futures::stream::pending(),
            ));
            return ([("content-length", fake.layer.len().to_string())], body).into_response();
        }
        if n < fake.cut_layers {
            let half = fake.layer[..fake.layer.len() / 2].to_vec();
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                vec![Ok(half), Err(std::io::Error::other("cut"))];
            let body = Body::from_stream(futures::stream::iter(chunks));
            return ([("content-length", fake.layer.len().to_string())], body).into_response();
        }
        return fake.layer.clone().into_response();
    }
    StatusCode::NOT_FOUND.into_response()
}

fn image(files: &[(&str, &[u8])]) -> (Vec<u8>, Vec<u8>, String) {
    let layer = oci::testing::layer(files);
    let layer_digest = format!("sha256:{:x}", Sha256::digest(&layer));
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": layer.len()}],
    }))
    .unwrap();
    (manifest, layer, layer_digest)
}

async fn start(fake: Fake, listener: tokio::net::TcpListener) -> Arc<Fake> {
    let fake = Arc::new(fake);
    let app = axum::Router::new().fallback(serve).with_state(fake.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    fake
}

fn puller(cache: &std::path::Path, registry: &str) -> Puller {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Puller::new(Config {
        retry: Retry {
            attempts: 6,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(400),
        },
        platform: Platform::new("linux", "amd64"),
        ..Config::new(cache.to_path_buf(), vec![registry.to_string()])
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_registries_and_cut_bodies_are_retried() {
    let (manifest, layer, layer_digest) = image(&[("disk/disk.img", &[7u8; 100_000])]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let registry = listener.local_addr().unwrap().to_string();
    let fake = start(
        Fake {
            manifest,
            layer,
            layer_digest,
            failing_manifests: 2,
            manifest_requests: AtomicUsize::new(0),
            cut_layers: 1,
            forbidden: false,
            stall_layers: false,
            layer_requests: AtomicUsize::new(0),
        },
        listener,
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let puller = puller(cache.path(), &registry);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let options = PullOptions {
        policy: PullPolicy::Always,
        progress: Some(oci::Progress(Arc::new(move |done, total| {
            record.lock().unwrap().push((done, total));
        }))),
        ..PullOptions::default()
    };
    let disk = puller
        .pull_disk(&format!("{registry}/guest:latest"), &options, None)
        .await
        .expect("pulled after retries");
    assert_eq!(std::fs::read(&disk.path).unwrap(), vec![7u8; 100_000]);
    // 503, 503, 429, then the manifest; a cut layer, then the whole one.
    assert_eq!(fake.manifest_requests.load(Ordering::SeqCst), 4);
    assert_eq!(fake.layer_requests.load(Ordering::SeqCst), 2);
    // Progress went up to the layer's size (and back down for the fetch after the cut).
    let seen = seen.lock().unwrap().clone();
    let size = fake.layer.len() as u64;
    assert_eq!(seen.last(), Some(&(size, size)), "{seen:?}");
    assert!(seen.iter().all(|(_, total)| *total == size), "{seen:?}");
    assert!(
        seen.iter().any(|(done, _)| *done < size / 2 + 1),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_is_not_up_yet_is_waited_for() {
    let (manifest, layer, layer_digest) = image(&[("disk/disk.img", b"late")]);
    // A port nothing listens on yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let registry = format!("127.0.0.1:{port}");
    let cache = tempfile::tempdir().unwrap();
    let puller = puller(cache.path(), &registry);
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        start(
            Fake {
                manifest,
                layer,
                layer_digest,
                failing_manifests: 0,
                manifest_requests: AtomicUsize::new(0),
                cut_layers: 0,
                forbidden: false,
                stall_layers: false,
                layer_requests: AtomicUsize::new(0),
            },
            listener,
        )
        .await
    });
    let started = Instant::now();
    let disk = puller
        .pull_disk(
            &format!("{registry}/guest:latest"),
            &PullOptions::default(),
            None,
        )
        .await
        .expect("pulled once the registry is up");
    assert_eq!(std::fs::read(&disk.path).unwrap(), b"late");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let _fake = late.await.unwrap();
}

/// Two VMIs of one image pulling it at the same moment both get every file (they once
/// shared a staging dir, and one emptied it under the other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pulls_of_one_image_both_get_its_files() {
    let filler: Vec<(String, Vec<u8>)> = (0..300)
        .map(|i| (format!("filler/{i}"), vec![b'x'; 4096]))
        .collect();
    let mut files: Vec<(&str, &[u8])> = filler
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice()))
        .collect();
    files.push(("boot/vmlinux", b"kernel"));
    let (manifest, layer, layer_digest) = image(&files);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let registry = listener.local_addr().unwrap().to_string();
    start(
        Fake {
            manifest,
            layer,
            layer_digest,
            failing_manifests: 0,
            manifest_requests: AtomicUsize::new(0),
            cut_layers: 0,
            forbidden: false,
            stall_layers: false,
            layer_requests: AtomicUsize::new(0),
        },
        listener,
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let puller = puller(cache.path(), &registry);
    let image = format!("{registry}/guest:latest");
    let options = PullOptions::default();
    let (a, b) = tokio::join!(
        puller.pull(&image, &options, &["/boot/"]),
        puller.pull(&image, &options, &["/boot/"])
    );
    for pulled in [a, b] {
        let files = pulled.expect("pull").files;
        assert!(
            files.iter().any(|(name, _)| name == "/boot/vmlinux"),
            "{files:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_is_reported_with_the_registry_words() {
    let (manifest, layer, layer_digest) = image(&[("disk/disk.img", b"x")]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let registry = listener.local_addr().unwrap().to_string();
    let fake = start(
        Fake {
            manifest,
            layer,
            layer_digest,
            failing_manifests: 0,
            manifest_requests: AtomicUsize::new(0),
            cut_layers: 0,
            forbidden: true,
            stall_layers: false,
            layer_requests: AtomicUsize::new(0),
        },
        listener,
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let puller = puller(cache.path(), &registry);
    let image = format!("{registry}/guest:latest");
    let error = puller
        .pull_disk(&image, &PullOptions::default(), None)
        .await
        .unwrap_err();
    assert!(matches!(error, oci::PullError::Denied { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!("denied: {registry} answered 403 Forbidden for {image}: DENIED: requested access to the resource is denied")
    );
    // Not worth trying again.
    assert_eq!(fake.manifest_requests.load(Ordering::SeqCst), 1);
}

/// A pull given up mid-layer (its future dropped, as when a DataVolume is deleted during
/// its import) leaves nothing behind in the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_pull_leaves_no_partial_files() {
    let (manifest, layer, layer_digest) = image(&[("disk/disk.img", &[1u8; 200_000])]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let registry = listener.local_addr().unwrap().to_string();
    let fake = start(
        Fake {
            manifest,
            layer,
            layer_digest,
            failing_manifests: 0,
            manifest_requests: AtomicUsize::new(0),
            cut_layers: 0,
            forbidden: false,
            stall_layers: true,
            layer_requests: AtomicUsize::new(0),
        },
        listener,
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let puller = Arc::new(puller(cache.path(), &registry));
    let image = format!("{registry}/guest:latest");
    let pulling = {
        let puller = puller.clone();
        tokio::spawn(async move {
            puller
                .pull_disk(&image, &PullOptions::default(), None)
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.layer_requests.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the layer was never asked for");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let leftovers = || -> Vec<String> {
        std::fs::read_dir(cache.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    // Half the layer arrived: the staging dir and the layer file are there.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !leftovers().iter().any(|n| n.ends_with(".layer")) {
        assert!(
            Instant::now() < deadline,
            "no layer file: {:?}",
            leftovers()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pulling.abort();
    let _ = pulling.await;
    assert!(leftovers().is_empty(), "{:?}", leftovers());
}
