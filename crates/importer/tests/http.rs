//! `import_http` against a loopback server: every format, auth, TLS, the server's
//! refusals, bodies cut short, images that do not fit, and cancellation.

mod support;

use std::time::{Duration, Instant};

use importer::{
    import_http, CancellationToken, Compression, Format, HttpSource, ImportError, Imported,
};
use support::*;

async fn import(source: &HttpSource, claim: &Claim, seen: &Seen) -> Result<Imported, ImportError> {
    let cb = seen.callback();
    import_http(
        source,
        &claim.target,
        &claim.scratch,
        &cb,
        &CancellationToken::new(),
    )
    .await
}

/// Imports `/img/{name}` into an 8 MiB claim and checks the claim, the scratch dir and
/// the progress.
async fn imports(name: &str, format: Format, compression: Option<Compression>) {
    let f = fixtures().await;
    let server = serve().await;
    let claim = claim(8 * MIB);
    let seen = Seen::default();
    let got = import(
        &HttpSource::new(server.url(&format!("/img/{name}"))),
        &claim,
        &seen,
    )
    .await
    .unwrap();
    let sent = f.images[name].len() as u64;
    assert_eq!(
        got,
        Imported {
            format,
            compression,
            virtual_size: IMAGE_LEN as u64,
            bytes_read: sent,
        }
    );
    assert_holds(&claim.target, &f.raw);
    assert_empty(&claim.scratch);
    seen.assert_increasing();
    let all = seen.all();
    assert_eq!(all[0].read_bytes, 0);
    let last = all.last().unwrap();
    assert_eq!(last.total_bytes, Some(sent));
    assert_eq!(last.cdi_progress(), "100.00%");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_streams_into_the_claim() {
    imports("raw", Format::Raw, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_gz_is_decompressed_on_the_fly() {
    imports("raw.gz", Format::Raw, Some(Compression::Gzip)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_xz_is_decompressed_on_the_fly() {
    imports("raw.xz", Format::Raw, Some(Compression::Xz)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qcow2_is_converted() {
    imports("qcow2", Format::Qcow2, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qcow2_gz_is_decompressed_and_converted() {
    imports("qcow2.gz", Format::Qcow2, Some(Compression::Gzip)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qcow2_xz_is_decompressed_and_converted() {
    imports("qcow2.xz", Format::Qcow2, Some(Compression::Xz)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_stays_sparse() {
    use std::os::unix::fs::MetadataExt;
    let server = serve().await;
    for name in ["raw", "raw.xz", "qcow2", "qcow2.gz"] {
        let claim = claim(64 * MIB);
        import(
            &HttpSource::new(server.url(&format!("/img/{name}"))),
            &claim,
            &Seen::default(),
        )
        .await
        .unwrap();
        let allocated = std::fs::metadata(&claim.target.path).unwrap().blocks() * 512;
        // Two thirds of the 4 MiB image are data; the other 60 MiB are holes.
        assert!(
            allocated <= 3 * MIB + MIB / 2,
            "{name}: {allocated} bytes allocated"
        );
    }
}

/// The import runs on a spawned task (its future is Send), as the node agent runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_runs_on_a_spawned_task() {
    let f = fixtures().await;
    let server = serve().await;
    let claim = claim(4 * MIB);
    let source = HttpSource::new(server.url("/img/qcow2.xz"));
    let target = claim.target.clone();
    let scratch = claim.scratch.clone();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(async move {
        let progress = |_: importer::Progress| {};
        import_http(&source, &target, &scratch, &progress, &cancel).await
    });
    task.await.unwrap().unwrap();
    assert_holds(&claim.target, &f.raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_larger_target_is_cut_to_the_claim_and_zeroed() {
    let f = fixtures().await;
    let server = serve().await;
    let claim = claim(6 * MIB);
    std::fs::write(&claim.target.path, vec![0xAAu8; 10 << 20]).unwrap();
    for name in ["raw", "qcow2"] {
        import(
            &HttpSource::new(server.url(&format!("/img/{name}"))),
            &claim,
            &Seen::default(),
        )
        .await
        .unwrap();
        assert_holds(&claim.target, &f.raw);
        std::fs::write(&claim.target.path, vec![0x55u8; 10 << 20]).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_content_length_progress_is_not_available() {
    let f = fixtures().await;
    let server = serve().await;
    for name in ["raw", "qcow2.gz"] {
        let claim = claim(4 * MIB);
        let seen = Seen::default();
        let got = import(
            &HttpSource::new(server.url(&format!("/chunked/{name}"))),
            &claim,
            &seen,
        )
        .await
        .unwrap();
        assert_eq!(got.virtual_size, IMAGE_LEN as u64);
        assert_eq!(got.bytes_read, f.images[name].len() as u64);
        assert_holds(&claim.target, &f.raw);
        assert_empty(&claim.scratch);
        seen.assert_increasing();
        for p in seen.all() {
            assert_eq!(p.total_bytes, None);
            assert_eq!(p.cdi_progress(), "N/A");
        }
        assert_eq!(
            seen.all().last().unwrap().read_bytes,
            f.images[name].len() as u64
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_moves_while_a_slow_download_runs() {
    let f = fixtures().await;
    let server = serve().await;
    let claim = claim(4 * MIB);
    let seen = Seen::default();
    import(&HttpSource::new(server.url("/slow/qcow2")), &claim, &seen)
        .await
        .unwrap();
    assert_holds(&claim.target, &f.raw);
    seen.assert_increasing();
    let all = seen.all();
    let middle: Vec<_> = all
        .iter()
        .filter(|p| p.read_bytes > 0 && Some(p.read_bytes) < p.total_bytes)
        .collect();
    // About 1.4 s of transfer at one report per 250 ms at most.
    assert!(middle.len() >= 2, "{all:?}");
    assert!(all.len() <= 12, "reported too often: {} times", all.len());
    assert_eq!(all.last().unwrap().cdi_progress(), "100.00%");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_is_sent_and_its_absence_is_permanent() {
    let f = fixtures().await;
    let server = serve().await;
    let claim = claim(4 * MIB);
    let mut source = HttpSource::new(server.url("/auth/qcow2"));
    let err = import(&source, &claim, &Seen::default()).await.unwrap_err();
    assert_eq!(
        err,
        ImportError::Permanent(
            "Unable to connect to http data source: expected status code 200, got 401. Status: 401 Unauthorized".into()
        )
    );
    source.basic_auth = Some((USER.into(), "wrong".into()));
    let err = import(&source, &claim, &Seen::default()).await.unwrap_err();
    assert!(
        !err.is_transient() && err.to_string().contains("got 401"),
        "{err}"
    );
    source.basic_auth = Some((USER.into(), PASSWORD.into()));
    import(&source, &claim, &Seen::default()).await.unwrap();
    assert_holds(&claim.target, &f.raw);
    assert_empty(&claim.scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_headers_are_sent() {
    let server = serve().await;
    let claim = claim(4 * MIB);
    let mut source = HttpSource::new(server.url("/img/raw"));
    source.extra_headers = vec![("X-Mirror-Token".into(), "abc".into())];
    import(&source, &claim, &Seen::default()).await.unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["x-mirror-token"], "abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_is_permanent_with_the_servers_answer() {
    let server = serve().await;
    let claim = claim(4 * MIB);
    let err = import(
        &HttpSource::new(server.url("/img/nothing-here.qcow2")),
        &claim,
        &Seen::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        ImportError::Permanent(
            "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found".into()
        )
    );
    let err = import(
        &HttpSource::new(server.url("/forbidden")),
        &claim,
        &Seen::default(),
    )
    .await
    .unwrap_err();
    assert!(
        !err.is_transient() && err.to_string().ends_with("Status: 403 Forbidden"),
        "{err}"
    );
    assert_empty(&claim.scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_unavailable_is_transient() {
    let server = serve().await;
    let claim = claim(4 * MIB);
    let err = import(
        &HttpSource::new(server.url("/unavailable")),
        &claim,
        &Seen::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        ImportError::Transient(
            "Unable to connect to http data source: expected status code 200, got 503. Status: 503 Service Unavailable".into()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_transient() {
    let claim = claim(4 * MIB);
    let err = import(
        &HttpSource::new(refused_url().await),
        &claim,
        &Seen::default(),
    )
    .await
    .unwrap_err();
    assert!(err.is_transient(), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("Unable to connect to http data source: HTTP request errored: ")
            && text.contains("refused"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_times_out_as_transient() {
    let claim = claim(4 * MIB);
    let mut source = HttpSource::new(serve_silent().await);
    source.read_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = import(&source, &claim, &Seen::default()).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_shorter_than_its_content_length_is_transient_never_ok() {
    let f = fixtures().await;
    for name in ["qcow2", "raw", "raw.gz"] {
        let data = f.images[name].clone();
        for send in [0, 100, data.len() / 2, data.len() - 1] {
            let url = serve_short(data.clone(), send).await;
            let claim = claim(8 * MIB);
            let err = import(&HttpSource::new(url), &claim, &Seen::default())
                .await
                .expect_err("a short body must not succeed");
            assert!(err.is_transient(), "{name} cut at {send}: {err}");
            assert_empty(&claim.scratch);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_qcow2_is_permanent_in_qemu_imgs_words() {
    let server = serve().await;
    let claim = claim(8 * MIB);
    let err = import(
        &HttpSource::new(server.url("/img/truncated.qcow2")),
        &claim,
        &Seen::default(),
    )
    .await
    .unwrap_err();
    assert!(!err.is_transient(), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("Unable to convert source data to target format: ")
            && text.contains("errors were found on the image"),
        "{text}"
    );
    assert_empty(&claim.scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_after_a_gzip_magic_is_permanent() {
    let claim = claim(8 * MIB);
    let mut data = vec![0x1f, 0x8b];
    data.extend_from_slice(&[0x42; 10_000]);
    let listener_url = serve_short(data.clone(), data.len()).await;
    let err = import(&HttpSource::new(listener_url), &claim, &Seen::default())
        .await
        .unwrap_err();
    assert!(!err.is_transient(), "{err}");
    assert!(
        err.to_string()
            .starts_with("Unable to obtain information about data source: "),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_larger_than_the_claim_fails_with_cdis_message() {
    let server = serve().await;
    let expected = ImportError::Permanent(
        "virtual image size 4194304 is larger than the reported available storage 2097152. A larger PVC is required".into(),
    );
    for name in ["qcow2", "raw", "raw.gz", "raw.xz", "qcow2.xz"] {
        let claim = claim(2 * MIB);
        let err = import(
            &HttpSource::new(server.url(&format!("/img/{name}"))),
            &claim,
            &Seen::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(err, expected, "{name}");
        assert!(err.is_too_small());
        assert_empty(&claim.scratch);
    }
    // One byte short is still too small.
    let claim = claim(IMAGE_LEN as u64 - 1);
    let err = import(
        &HttpSource::new(server.url("/chunked/raw")),
        &claim,
        &Seen::default(),
    )
    .await
    .unwrap_err();
    assert!(err.is_too_small(), "{err}");
    // Exactly the image's size fits.
    let claim = support::claim(IMAGE_LEN as u64);
    for name in ["qcow2", "raw.xz"] {
        import(
            &HttpSource::new(server.url(&format!("/img/{name}"))),
            &claim,
            &Seen::default(),
        )
        .await
        .unwrap();
        assert_holds(&claim.target, &fixtures().await.raw);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qcow2_with_a_backing_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.raw");
    std::fs::write(&secret, vec![0x77u8; 1 << 20]).unwrap();
    let overlay = dir.path().join("overlay.qcow2");
    qemu_img(&[
        "create",
        "-f",
        "qcow2",
        "-F",
        "raw",
        "-b",
        secret.to_str().unwrap(),
        overlay.to_str().unwrap(),
    ])
    .await;
    let data = std::fs::read(&overlay).unwrap();
    let url = serve_short(data.clone(), data.len()).await;
    let claim = claim(4 * MIB);
    let err = import(&HttpSource::new(url), &claim, &Seen::default())
        .await
        .unwrap_err();
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("backing file"), "{err}");
    assert_empty(&claim.scratch);
}

async fn cancels(name: &str) {
    let server = serve().await;
    let claim = claim(8 * MIB);
    let cancel = CancellationToken::new();
    let seen = Seen::default();
    let cb = seen.callback();
    let source = HttpSource::new(server.url(&format!("/slow/{name}")));
    let started = Instant::now();
    let trigger = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            cancel.cancel();
        })
    };
    let mut spool_seen = false;
    let import = import_http(&source, &claim.target, &claim.scratch, &cb, &cancel);
    tokio::pin!(import);
    let result = loop {
        tokio::select! {
            r = &mut import => break r,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                spool_seen |= std::fs::read_dir(&claim.scratch).unwrap().next().is_some();
            }
        }
    };
    trigger.await.unwrap();
    assert_eq!(result, Err(ImportError::Cancelled));
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1000),
        "cancel took effect after {took:?}"
    );
    assert_empty(&claim.scratch);
    if name.starts_with("qcow2") {
        assert!(spool_seen, "the qcow2 was never spooled to scratch");
    }
    let last = seen.all().last().copied().unwrap();
    assert!(last.total_bytes.is_some_and(|t| last.read_bytes < t));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_qcow2_download_stops_it_and_removes_scratch() {
    cancels("qcow2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_raw_download_stops_it() {
    cancels("raw").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_the_given_ca() {
    let f = fixtures().await;
    let server = serve_tls().await;
    let claim = claim(4 * MIB);
    let mut source = HttpSource::new(server.url("/img/qcow2.xz"));

    // Not trusted without the CA: a certificate problem, not worth retrying.
    let err = import(&source, &claim, &Seen::default()).await.unwrap_err();
    assert!(!err.is_transient(), "{err}");

    source.ca_pem =
        Some(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".to_vec());
    let err = import(&source, &claim, &Seen::default()).await.unwrap_err();
    assert!(!err.is_transient(), "{err}");
    source.ca_pem = Some(b"no pem at all".to_vec());
    let err = import(&source, &claim, &Seen::default()).await.unwrap_err();
    assert!(!err.is_transient(), "{err}");

    source.ca_pem = server.ca_pem.clone().map(String::into_bytes);
    let got = import(&source, &claim, &Seen::default()).await.unwrap();
    assert_eq!(got.compression, Some(Compression::Xz));
    assert_holds(&claim.target, &f.raw);
    assert_empty(&claim.scratch);

    let mut auth = HttpSource::new(server.url("/auth/raw"));
    auth.ca_pem = source.ca_pem.clone();
    auth.basic_auth = Some((USER.into(), PASSWORD.into()));
    import(&auth, &claim, &Seen::default()).await.unwrap();
    assert_holds(&claim.target, &f.raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_that_is_not_http_is_permanent() {
    let claim = claim(4 * MIB);
    for url in ["ftp://example.com/x.img", "not a url"] {
        let err = import(&HttpSource::new(url), &claim, &Seen::default())
            .await
            .unwrap_err();
        assert!(!err.is_transient(), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_body_is_an_empty_raw_disk() {
    let url = serve_short(Vec::new(), 0).await;
    let claim = claim(MIB);
    let got = import(&HttpSource::new(url), &claim, &Seen::default())
        .await
        .unwrap();
    assert_eq!(got.format, Format::Raw);
    assert_eq!(got.virtual_size, 0);
    assert_holds(&claim.target, &[]);
}
