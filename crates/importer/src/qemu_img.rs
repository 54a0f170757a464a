//! The qemu-img runs of an import: `info`, `check` and `convert`, each stopped (the
//! child killed and reaped) when the import is cancelled.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::detect::Format;
use crate::error::ImportError;

const QEMU_IMG: &str = "qemu-img";

/// `info` and `check` read metadata only; an image that keeps them busy longer than
/// this is hostile or broken (CDI limits `info` the same way).
const METADATA_TIMEOUT: Duration = Duration::from_secs(60);

/// The prefix CDI puts before conversion failures.
const CONVERT: &str = "Unable to convert source data to target format";

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Output {
    /// What qemu-img said, on one line.
    fn words(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.stderr).trim().to_string();
        let out = String::from_utf8_lossy(&self.stdout).trim().to_string();
        if !out.is_empty() && !out.starts_with('{') {
            if !text.is_empty() {
                text.push_str("; ");
            }
            text.push_str(&out);
        }
        if text.is_empty() {
            text = format!("qemu-img exited with {}", self.status);
        }
        text.split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

async fn run(
    args: &[&std::ffi::OsStr],
    cancel: &CancellationToken,
    timeout: Option<Duration>,
) -> Result<Output, ImportError> {
    let mut child = Command::new(QEMU_IMG)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ImportError::Permanent(format!("{CONVERT}: cannot run {QEMU_IMG}: {e}")))?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let work = async {
        let read_out = async {
            let mut v = Vec::new();
            if let Some(s) = stdout.as_mut() {
                let _ = s.read_to_end(&mut v).await;
            }
            v
        };
        let read_err = async {
            let mut v = Vec::new();
            if let Some(s) = stderr.as_mut() {
                let _ = s.read_to_end(&mut v).await;
            }
            v
        };
        let (status, stdout, stderr) = tokio::join!(child.wait(), read_out, read_err);
        status.map(|status| Output {
            status,
            stdout,
            stderr,
        })
    };
    let limit = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        out = work => Some(out),
        _ = cancel.cancelled() => None,
        _ = limit => {
            let _ = child.kill().await;
            return Err(ImportError::Permanent(format!(
                "{CONVERT}: qemu-img {} did not finish within {}s",
                args.first().map(|a| a.to_string_lossy()).unwrap_or_default(),
                timeout.unwrap_or_default().as_secs()
            )));
        }
    };
    match outcome {
        Some(Ok(out)) => Ok(out),
        Some(Err(e)) => Err(ImportError::Permanent(format!(
            "{CONVERT}: waiting for qemu-img: {e}"
        ))),
        None => {
            // Kill and reap before returning, so nothing writes the target afterwards.
            let _ = child.kill().await;
            Err(ImportError::Cancelled)
        }
    }
}

/// The parts of `qemu-img info --output=json` an import looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Info {
    pub virtual_size: u64,
    pub format: String,
    pub backing_file: Option<String>,
    pub data_file: Option<String>,
}

pub(crate) fn parse_info(json: &[u8]) -> Option<Info> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    Some(Info {
        virtual_size: v.get("virtual-size")?.as_u64()?,
        format: v.get("format")?.as_str()?.to_string(),
        backing_file: v
            .get("backing-filename")
            .or_else(|| v.get("full-backing-filename"))
            .and_then(|b| b.as_str())
            .map(str::to_string),
        data_file: v
            .pointer("/format-specific/data/data-file")
            .and_then(|b| b.as_str())
            .map(str::to_string),
    })
}

pub(crate) async fn info(
    path: &Path,
    format: Format,
    cancel: &CancellationToken,
) -> Result<Info, ImportError> {
    let out = run(
        &[
            "info".as_ref(),
            "--output=json".as_ref(),
            "-f".as_ref(),
            format.as_str().as_ref(),
            path.as_os_str(),
        ],
        cancel,
        Some(METADATA_TIMEOUT),
    )
    .await?;
    if !out.status.success() {
        return Err(ImportError::Permanent(format!(
            "{CONVERT}: {}",
            out.words()
        )));
    }
    parse_info(&out.stdout).ok_or_else(|| {
        ImportError::Permanent(format!(
            "{CONVERT}: Invalid json for image {}",
            path.display()
        ))
    })
}

/// `qemu-img check`: a qcow2 cut short still converts (reads past its end give zeros),
/// so it is refused here. Leaked clusters alone (exit 3) are harmless.
pub(crate) async fn check(path: &Path, cancel: &CancellationToken) -> Result<(), ImportError> {
    let out = run(
        &[
            "check".as_ref(),
            "-f".as_ref(),
            "qcow2".as_ref(),
            path.as_os_str(),
        ],
        cancel,
        Some(METADATA_TIMEOUT),
    )
    .await?;
    match out.status.code() {
        Some(0) | Some(3) => Ok(()),
        _ => Err(ImportError::Permanent(format!(
            "{CONVERT}: the image is corrupt or incomplete: {}",
            first_lines(&out.words(), 6)
        ))),
    }
}

fn first_lines(text: &str, n: usize) -> String {
    let parts: Vec<&str> = text.split("; ").collect();
    if parts.len() <= n {
        return text.to_string();
    }
    // Keep qemu-img's summary ("N errors were found on the image.") which comes last.
    let mut kept: Vec<&str> = parts[..n - 1].to_vec();
    kept.push("...");
    kept.extend(parts.iter().rev().take(3).rev());
    kept.join("; ")
}

/// Converts `src` into the existing, zero-filled raw file `dst` (which is at least the
/// image's virtual size), keeping `dst`'s zeros as holes. With `direct`, the target is
/// written with O_DIRECT (`-t none`), which made a durable import faster than writing
/// through the page cache and syncing afterwards (benches/import.rs).
pub(crate) async fn convert(
    src: &Path,
    format: Format,
    dst: &Path,
    direct: bool,
    cancel: &CancellationToken,
) -> Result<(), ImportError> {
    let cache = if direct { "none" } else { "writeback" };
    let out = run(
        &[
            "convert".as_ref(),
            "-n".as_ref(),
            "--target-is-zero".as_ref(),
            // Out-of-order writes: the raw target does not care, and it is faster.
            "-W".as_ref(),
            "-t".as_ref(),
            cache.as_ref(),
            "-f".as_ref(),
            format.as_str().as_ref(),
            "-O".as_ref(),
            "raw".as_ref(),
            src.as_os_str(),
            dst.as_os_str(),
        ],
        cancel,
        None,
    )
    .await?;
    if !out.status.success() {
        return Err(ImportError::Permanent(format!(
            "{CONVERT}: could not convert image to raw: {}",
            out.words()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields() {
        let json = br#"{"virtual-size": 4194304, "filename": "x", "format": "qcow2",
            "backing-filename": "/etc/passwd",
            "format-specific": {"type": "qcow2", "data": {"data-file": "/dev/sda"}}}"#;
        assert_eq!(
            parse_info(json),
            Some(Info {
                virtual_size: 4194304,
                format: "qcow2".into(),
                backing_file: Some("/etc/passwd".into()),
                data_file: Some("/dev/sda".into()),
            })
        );
        let plain = br#"{"virtual-size": 10, "format": "qcow2"}"#;
        assert_eq!(parse_info(plain).unwrap().backing_file, None);
        assert_eq!(parse_info(b"not json"), None);
        assert_eq!(parse_info(br#"{"format": "qcow2"}"#), None);
    }

    #[test]
    fn long_check_output_keeps_its_summary() {
        let text = (1..=10)
            .map(|i| format!("ERROR {i}"))
            .chain(["3 errors were found on the image.".to_string()])
            .collect::<Vec<_>>()
            .join("; ");
        let short = first_lines(&text, 6);
        assert!(short.starts_with("ERROR 1; "));
        assert!(short.ends_with("3 errors were found on the image."));
        assert!(short.contains("..."));
        assert_eq!(first_lines("a; b", 6), "a; b");
    }

    /// A TCP server that accepts and never speaks: qemu-img's NBD client waits on it
    /// forever, which makes a qemu-img that only cancellation or a timeout can end.
    async fn silent_nbd() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                held.push(tcp);
            }
        });
        (format!("nbd://127.0.0.1:{port}/"), task)
    }

    fn running_with(arg: &str) -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.starts_with("qemu-img") && c.contains(arg))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancel_kills_a_running_convert() {
        let (url, server) = silent_nbd().await;
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("dst");
        std::fs::File::create(&dst)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let cancel = CancellationToken::new();
        let trigger = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                cancel.cancel();
            })
        };
        let started = std::time::Instant::now();
        let result = convert(Path::new(&url), Format::Qcow2, &dst, false, &cancel).await;
        assert_eq!(result, Err(ImportError::Cancelled));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(2),
            "{took:?}"
        );
        assert!(
            running_with(&url).is_empty(),
            "still running: {:?}",
            running_with(&url)
        );
        trigger.await.unwrap();
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_metadata_read_times_out_as_permanent() {
        let (url, server) = silent_nbd().await;
        let started = std::time::Instant::now();
        let result = run(
            &[
                "info".as_ref(),
                "-f".as_ref(),
                "qcow2".as_ref(),
                url.as_ref(),
            ],
            &CancellationToken::new(),
            Some(Duration::from_millis(300)),
        )
        .await;
        match result {
            Err(ImportError::Permanent(m)) => assert!(m.contains("did not finish"), "{m}"),
            _ => panic!("expected a permanent timeout"),
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(running_with(&url).is_empty());
        server.abort();
    }

    /// Both cache modes give the same disk (page cache where O_DIRECT is refused).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn converts_with_and_without_direct_io() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw");
        let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 253) as u8).collect();
        std::fs::write(&raw, &data).unwrap();
        let qcow2 = dir.path().join("qcow2");
        let made = tokio::process::Command::new(QEMU_IMG)
            .args(["convert", "-f", "raw", "-O", "qcow2"])
            .arg(&raw)
            .arg(&qcow2)
            .status()
            .await
            .unwrap();
        assert!(made.success());
        for direct in [false, true] {
            let dst = dir.path().join(format!("dst-{direct}"));
            std::fs::File::create(&dst)
                .unwrap()
                .set_len(4 << 20)
                .unwrap();
            convert(
                &qcow2,
                Format::Qcow2,
                &dst,
                direct,
                &CancellationToken::new(),
            )
            .await
            .unwrap();
            let got = std::fs::read(&dst).unwrap();
            assert_eq!(got.len(), 4 << 20);
            assert!(got[..data.len()] == data[..], "direct={direct}");
            assert!(got[data.len()..].iter().all(|&b| b == 0));
        }
    }
}
