//! Import throughput of a 1 GiB (virtual) qcow2 from a loopback HTTP server into a
//! claim file, beside `curl -o scratch URL && qemu-img convert -O raw scratch target`
//! of the same file from the same server in the same run.
//!
//! A third contender runs the same curl with qemu-img given import_http's flags
//! (`-W -t none`), to tell the flags' share from the rest.
//!
//! `cargo bench -p importer --bench import` (release). The image holds DATA_MIB of
//! random data in 1 MiB blocks at random places; the rest is unallocated. Three
//! rounds each after a warm-up round, interleaved; medians and ratios (wall time and
//! CPU time) are printed. Nothing is asserted.
//! `IMPORTER_BENCH_DIR` picks where the files go (default: the system temp dir).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use importer::{import_http, CancellationToken, HttpSource, Progress, Target};
use rand::{Rng, RngCore};

const VIRTUAL: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const DATA_MIB: usize = 320;
const ROUNDS: usize = 3;

/// Whether this is the smoke profile (`BENCH_SMOKE=1`, as CI runs it): one counted round
/// of an image with 16 MiB of data, to prove the bench runs, not to measure.
fn smoke() -> bool {
    std::env::var("BENCH_SMOKE").is_ok_and(|v| v == "1")
}

fn data_mib() -> usize {
    if smoke() {
        16
    } else {
        DATA_MIB
    }
}

fn rounds() -> usize {
    if smoke() {
        1
    } else {
        ROUNDS
    }
}

fn run(cmd: &mut std::process::Command) {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A 1 GiB raw file with DATA_MIB random 1 MiB blocks, and its qcow2.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::FileExt;
    let raw = dir.join("source.raw");
    let qcow2 = dir.join("source.qcow2");
    let file = std::fs::File::create(&raw).unwrap();
    file.set_len(VIRTUAL).unwrap();
    let mut rng = rand::rng();
    let mut blocks: Vec<u64> = (0..VIRTUAL / MIB).collect();
    // A random choice of DATA_MIB distinct blocks.
    let data_mib = data_mib();
    for i in 0..data_mib {
        let j = rng.random_range(i..blocks.len());
        blocks.swap(i, j);
    }
    let mut buf = vec![0u8; MIB as usize];
    for &block in &blocks[..data_mib] {
        rng.fill_bytes(&mut buf);
        file.write_all_at(&buf, block * MIB).unwrap();
    }
    file.sync_all().unwrap();
    drop(file);
    run(std::process::Command::new("qemu-img").args([
        "convert",
        "-f",
        "raw",
        "-O",
        "qcow2",
        raw.to_str().unwrap(),
        qcow2.to_str().unwrap(),
    ]));
    (raw, qcow2)
}

/// Serves `image` at /image.qcow2 on its own runtime (so the server's threads are the
/// same for both clients); returns the URL.
fn serve(image: Bytes) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = Router::new().route(
                "/image.qcow2",
                get(move || {
                    let image = image.clone();
                    async move { Body::from(image) }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    let addr = rx.recv().unwrap();
    format!("http://{addr}/image.qcow2")
}

/// CPU seconds used so far by this process and its waited-for children (the server
/// thread counts for both contenders; qemu-img and curl are children).
fn cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name, which is in parentheses: utime is the 12th.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<u64> = after
        .split(' ')
        .skip(11)
        .take(4)
        .map(|f| f.parse().unwrap())
        .collect();
    fields.iter().sum::<u64>() as f64 / 100.0
}

/// One `curl -o scratch URL && qemu-img convert [flags] -O raw scratch target` run.
struct Baseline {
    total: Duration,
    download: Duration,
    cpu: f64,
}

impl Baseline {
    fn describe(&self) -> String {
        format!(
            "{:.3}s (curl {:.3}s, convert {:.3}s; cpu {:.2}s)",
            self.total.as_secs_f64(),
            self.download.as_secs_f64(),
            (self.total - self.download).as_secs_f64(),
            self.cpu
        )
    }
}

fn curl_then_convert(url: &str, scratch: &Path, target: &Path, flags: &[&str]) -> Baseline {
    let c = cpu();
    let t = Instant::now();
    run(std::process::Command::new("curl").args([
        "-s",
        "-f",
        "-o",
        scratch.to_str().unwrap(),
        url,
    ]));
    let download = t.elapsed();
    run(std::process::Command::new("qemu-img")
        .arg("convert")
        .args(flags)
        .args([
            "-O",
            "raw",
            scratch.to_str().unwrap(),
            target.to_str().unwrap(),
        ]));
    Baseline {
        total: t.elapsed(),
        download,
        cpu: cpu() - c,
    }
}

fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// Removes the files and flushes dirty pages, so that every run starts from the same
/// writeback state.
fn clear(paths: &[&Path]) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
    run(&mut std::process::Command::new("sync"));
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = std::env::var_os("IMPORTER_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).unwrap();
    let started = Instant::now();
    let (raw, qcow2) = build(dir.path());
    let image = Bytes::from(std::fs::read(&qcow2).unwrap());
    let size = image.len() as u64;
    println!(
        "image: {} MiB virtual, {} MiB of random data, qcow2 {:.1} MiB (built in {:.1}s)",
        VIRTUAL / MIB,
        data_mib(),
        size as f64 / MIB as f64,
        started.elapsed().as_secs_f64()
    );
    let url = serve(image);
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let target = Target {
        path: dir.path().join("disk.img"),
        capacity_bytes: VIRTUAL,
    };
    let curl_scratch = dir.path().join("curl-scratch.qcow2");
    let curl_target = dir.path().join("curl-disk.img");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut ours = Vec::new();
    let mut transfers = Vec::new();
    let mut cpu_of_ours = Vec::new();
    let mut baseline = Vec::new();
    let mut baseline_tuned = Vec::new();
    // Round 0 warms up (connections, page cache of the binaries) and is not counted.
    for round in 0..=rounds() {
        clear(&[&target.path, &curl_target, &curl_scratch]);
        let transferred: Mutex<Option<Instant>> = Mutex::new(None);
        let progress = |p: Progress| {
            if p.total_bytes == Some(p.read_bytes) {
                *transferred.lock().unwrap() = Some(Instant::now());
            }
        };
        let c = cpu();
        let t = Instant::now();
        let imported = rt
            .block_on(import_http(
                &HttpSource::new(url.clone()),
                &target,
                &scratch,
                &progress,
                &CancellationToken::new(),
            ))
            .expect("import");
        let took = t.elapsed();
        let cpu_ours = cpu() - c;
        let transfer = transferred
            .lock()
            .unwrap()
            .map(|at| at - t)
            .unwrap_or_default();
        assert_eq!(imported.virtual_size, VIRTUAL);
        assert_eq!(imported.bytes_read, size);
        if round == 0 {
            // The import is right: the disk equals the raw image it was made from.
            run(std::process::Command::new("qemu-img").args([
                "compare",
                "-q",
                "-f",
                "raw",
                "-F",
                "raw",
                raw.to_str().unwrap(),
                target.path.to_str().unwrap(),
            ]));
        }
        if round > 0 {
            ours.push(took);
            transfers.push(transfer);
            cpu_of_ours.push(cpu_ours);
        }
        clear(&[&target.path]);
        let plain = curl_then_convert(&url, &curl_scratch, &curl_target, &[]);
        clear(&[&curl_target, &curl_scratch]);
        let tuned = curl_then_convert(&url, &curl_scratch, &curl_target, &["-W", "-t", "none"]);
        clear(&[&curl_target, &curl_scratch]);
        println!(
            "round {}{}: import_http {:.3}s (transfer {:.3}s, convert {:.3}s; cpu {:.2}s) | curl + qemu-img {} | same with -W -t none {}",
            round,
            if round == 0 { " (warm-up)" } else { "" },
            took.as_secs_f64(),
            transfer.as_secs_f64(),
            (took - transfer).as_secs_f64(),
            cpu_ours,
            plain.describe(),
            tuned.describe(),
        );
        if round > 0 {
            baseline.push(plain);
            baseline_tuned.push(tuned);
        }
    }
    let (ours, transfer, cpu_ours) = (median(ours), median(transfers), median_f(cpu_of_ours));
    println!(
        "import_http:                    median {:.3}s  {:.0} MB/s of qcow2, {:.0} MB/s of disk  (transfer {:.3}s; cpu {cpu_ours:.2}s)",
        ours.as_secs_f64(),
        mb_per_s(size, ours),
        mb_per_s(VIRTUAL, ours),
        transfer.as_secs_f64()
    );
    for (name, runs) in [
        ("curl -o + qemu-img convert:", baseline),
        ("the same with -W -t none:", baseline_tuned),
    ] {
        let total = median(runs.iter().map(|r| r.total).collect());
        let download = median(runs.iter().map(|r| r.download).collect());
        let cpu = median_f(runs.iter().map(|r| r.cpu).collect());
        println!(
            "{name:<31} median {:.3}s  {:.0} MB/s of qcow2, {:.0} MB/s of disk  (curl {:.3}s; cpu {cpu:.2}s)",
            total.as_secs_f64(),
            mb_per_s(size, total),
            mb_per_s(VIRTUAL, total),
            download.as_secs_f64()
        );
        println!(
            "    ratio import_http / this: {:.3} in time, {:.3} in cpu (below 1: import_http is faster / cheaper)",
            ours.as_secs_f64() / total.as_secs_f64(),
            cpu_ours / cpu
        );
        if name.starts_with("curl -o") {
            bench_report::lower("import", "HTTP qcow2 import", ours.as_secs_f64(), "s")
                .beside("curl + qemu-img convert", total.as_secs_f64())
                .record();
            bench_report::lower("import", "HTTP qcow2 import: CPU", cpu_ours, "s")
                .beside("curl + qemu-img convert", cpu)
                .record();
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at the end: {}", load.trim());
}
