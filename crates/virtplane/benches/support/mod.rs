//! What the benches share: their `main`, their knobs, the `virtplane` server they start
//! (and the processes they measure), and percentiles.

pub mod console;
pub mod etcd;
#[path = "../../tests/support/kubeconfig.rs"]
mod kubeconfig;
pub mod objects;
pub mod process;
pub mod stats;
pub mod virtplane;

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

/// A bench's `main`: `run` on a multi-threaded runtime; an error is printed after `name`.
/// (`cargo bench` passes `--bench`; the benches take no arguments of their own.)
pub fn main<F: Future<Output = anyhow::Result<()>>>(
    name: &str,
    run: impl FnOnce() -> F,
) -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A knob: the environment variable `name` parsed, or `default` when unset or unparsable.
pub fn knob<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether the bench runs its smoke profile (`BENCH_SMOKE=1`, as `scripts/bench --smoke` and
/// CI run it): every part once at a small size, to prove it still runs, not to measure.
pub fn smoke() -> bool {
    std::env::var("BENCH_SMOKE").is_ok_and(|v| v == "1")
}

/// A size knob: the environment variable `name` parsed, else `smoke` in the smoke profile
/// and `full` otherwise.
pub fn size<T: FromStr>(name: &str, full: T, smoke: T) -> T {
    knob(name, if self::smoke() { smoke } else { full })
}

/// `VIRTPLANE_BIN`, or the binary cargo built for the bench.
pub fn virtplane_binary() -> PathBuf {
    std::env::var_os("VIRTPLANE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_virtplane")))
}
