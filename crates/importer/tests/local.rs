//! `import_file` (uploads spooled to a file) and `clone_file` (claim to claim).

mod support;

use std::os::unix::fs::{FileExt, MetadataExt};

use importer::{
    clone_file, import_file, CancellationToken, Compression, Format, ImportError, Imported,
};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_format_imports_from_a_file() {
    let f = fixtures().await;
    let cases = [
        ("raw", Format::Raw, None),
        ("raw.gz", Format::Raw, Some(Compression::Gzip)),
        ("raw.xz", Format::Raw, Some(Compression::Xz)),
        ("qcow2", Format::Qcow2, None),
        ("qcow2.gz", Format::Qcow2, Some(Compression::Gzip)),
        ("qcow2.xz", Format::Qcow2, Some(Compression::Xz)),
    ];
    for (name, format, compression) in cases {
        let claim = claim(5 * MIB);
        // The upload's name says nothing: detection is by content.
        let upload = claim.dir.path().join("upload.bin");
        std::fs::write(&upload, &f.images[name]).unwrap();
        let seen = Seen::default();
        let cb = seen.callback();
        let got = import_file(
            &upload,
            &claim.target,
            &claim.scratch,
            &cb,
            &CancellationToken::new(),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let len = f.images[name].len() as u64;
        assert_eq!(
            got,
            Imported {
                format,
                compression,
                virtual_size: IMAGE_LEN as u64,
                bytes_read: len,
            },
            "{name}"
        );
        assert_holds(&claim.target, &f.raw);
        assert_empty(&claim.scratch);
        seen.assert_increasing();
        assert_eq!(seen.all().last().unwrap().cdi_progress(), "100.00%");
        // The upload itself is left for its owner.
        assert!(upload.exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_or_too_large_upload_fails_permanently() {
    let f = fixtures().await;
    let claim = claim(8 * MIB);
    let upload = claim.dir.path().join("upload");
    std::fs::write(&upload, &f.images["truncated.qcow2"]).unwrap();
    let err = import_file(
        &upload,
        &claim.target,
        &claim.scratch,
        &|_| {},
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(
        !err.is_transient() && err.to_string().contains("errors were found on the image"),
        "{err}"
    );

    let small = support::claim(MIB);
    for name in ["qcow2", "raw.gz"] {
        std::fs::write(&upload, &f.images[name]).unwrap();
        let err = import_file(
            &upload,
            &small.target,
            &small.scratch,
            &|_| {},
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "virtual image size 4194304 is larger than the reported available storage 1048576. A larger PVC is required"
        );
        assert_empty(&small.scratch);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_file_import_leaves_no_scratch() {
    let f = fixtures().await;
    let claim = claim(8 * MIB);
    let upload = claim.dir.path().join("upload");
    std::fs::write(&upload, &f.images["qcow2.xz"]).unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    for name in ["qcow2.xz", "qcow2", "raw"] {
        std::fs::write(&upload, &f.images[name]).unwrap();
        let err = import_file(&upload, &claim.target, &claim.scratch, &|_| {}, &cancel)
            .await
            .unwrap_err();
        assert_eq!(err, ImportError::Cancelled, "{name}");
        assert_empty(&claim.scratch);
    }
}

/// A 48 MiB disk file: data at a few places, holes elsewhere, one all-zero data block.
fn sparse_source(path: &std::path::Path) -> Vec<(u64, Vec<u8>)> {
    let file = std::fs::File::create(path).unwrap();
    file.set_len(48 * MIB).unwrap();
    let pieces: Vec<(u64, Vec<u8>)> = vec![
        (0, (0..8192u32).map(|i| (i % 249) as u8 + 1).collect()),
        (5 * MIB + 123, vec![0x11; 3 * MIB as usize]),
        (20 * MIB, vec![0; 1 << 20]),
        (48 * MIB - 10, vec![0x99; 10]),
    ];
    for (at, data) in &pieces {
        file.write_all_at(data, *at).unwrap();
    }
    pieces
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_copies_the_data_and_keeps_holes() {
    let claim = claim(64 * MIB);
    let source = claim.dir.path().join("source.img");
    let pieces = sparse_source(&source);
    let seen = Seen::default();
    let cb = seen.callback();
    let got = clone_file(&source, &claim.target, &cb, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        got,
        Imported {
            format: Format::Raw,
            compression: None,
            virtual_size: 48 * MIB,
            bytes_read: 48 * MIB,
        }
    );
    let expected = std::fs::read(&source).unwrap();
    assert_holds(&claim.target, &expected);
    for (at, data) in &pieces {
        let got = std::fs::read(&claim.target.path).unwrap();
        assert_eq!(&got[*at as usize..*at as usize + data.len()], &data[..]);
    }
    let allocated = std::fs::metadata(&claim.target.path).unwrap().blocks() * 512;
    assert!(allocated <= 4 * MIB, "{allocated} bytes allocated");
    seen.assert_increasing();
    assert_eq!(seen.all().last().unwrap().cdi_progress(), "100.00%");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_into_a_smaller_claim_or_cancelled_fails() {
    let claim = claim(32 * MIB);
    let source = claim.dir.path().join("source.img");
    sparse_source(&source);
    let err = clone_file(&source, &claim.target, &|_| {}, &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "virtual image size 50331648 is larger than the reported available storage 33554432. A larger PVC is required"
    );
    let cancel = CancellationToken::new();
    cancel.cancel();
    let big = support::claim(64 * MIB);
    let err = clone_file(&source, &big.target, &|_| {}, &cancel)
        .await
        .unwrap_err();
    assert_eq!(err, ImportError::Cancelled);
    let err = clone_file(
        &claim.dir.path().join("missing"),
        &big.target,
        &|_| {},
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(!err.is_transient(), "{err}");
}

/// A qcow2 that keeps its data in another file (here, "the host's secret") is refused,
/// as one with a backing file is: an import reads nothing but the image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qcow2_with_an_external_data_file_is_refused() {
    let claim = claim(8 * MIB);
    let data = claim.dir.path().join("host-secret.raw");
    let image = claim.dir.path().join("with-data-file.qcow2");
    qemu_img(&[
        "create",
        "-f",
        "qcow2",
        "-o",
        &format!("data_file={},data_file_raw=on", data.display()),
        image.to_str().unwrap(),
        "4M",
    ])
    .await;
    std::fs::write(&data, vec![0x5au8; 4 << 20]).unwrap();
    let err = import_file(
        &image,
        &claim.target,
        &claim.scratch,
        &|_| {},
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("host-secret.raw"), "{err}");
    assert_empty(&claim.scratch);
}
