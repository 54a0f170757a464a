//! The web console in a browser with many VMs: how long the VM list takes to show them
//! all, and how soon a change reaches it, beside what the API takes to list them in the
//! same run.
//!
//! 1. The server (`--no-node`) holds `BENCH_VMS` (10,000) Halted VMs of ~1.5 KiB each.
//! 2. Reference: `GET /apis/kubevirt.io/v1/virtualmachines` in one request, and paged by
//!    500 as the console lists (reqwest, same machine), p50 of `BENCH_RUNS` (5).
//! 3. The browser (`web_console_browser.py`: Debian's chromium, Playwright): signed in,
//!    `BENCH_RUNS` fresh loads of `/ui/vms`, from navigation start to the first row and to
//!    the list holding all VMs; then a VM POSTed from the page to its row shown, through
//!    the list's watch. Targets (issue 35): all VMs shown < 1 s, a change shown ≤ 200 ms.
//!
//! `scripts/build-ui && cargo bench -p virtplane --bench web_console` (the binary embeds
//! `ui/dist` when it is built). Knobs: `BENCH_VMS`, `BENCH_RUNS`, `VIRTPLANE_BIN`,
//! `BENCH_KEEP=1` (keep the temp dir with the server log).

mod support;

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use serde_json::Value;
use support::stats::{ms, percentile};
use support::virtplane::{Launch, Virtplane};

fn main() -> ExitCode {
    support::main("web_console", run)
}

const BROWSER_SCRIPT: &str = include_str!("web_console_browser.py");
const VMS_PATH: &str = "/apis/kubevirt.io/v1/virtualmachines";

async fn run() -> Result<()> {
    let vms: usize = support::size("BENCH_VMS", 10_000, 200);
    let runs: usize = support::size("BENCH_RUNS", 5, 1);
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let server = Virtplane::start(Launch {
        data: data.clone(),
        log: dir.path().join("server.log"),
        args: &["--no-node"],
        env: &[("RUST_LOG", "warn".to_string())],
        nodes: 0,
        within: Duration::from_secs(60),
    })
    .await?;
    let client = server.client(Some(Duration::from_secs(120)))?;
    let index = client.get(format!("{}/ui/", server.url)).send().await?;
    if !index.text().await?.contains("/ui/assets/") {
        bail!(
            "this binary was built without the web console: run scripts/build-ui, then build again"
        );
    }

    let began = Instant::now();
    let creates = futures::stream::iter(0..vms)
        .map(|i| {
            let server = &server;
            async move {
                let vm = support::objects::vm(&format!("vm-{i:05}"));
                server
                    .create(
                        "/apis/kubevirt.io/v1/namespaces/default/virtualmachines",
                        &vm,
                    )
                    .await
            }
        })
        .buffer_unordered(32);
    let failed: Vec<anyhow::Error> = creates.filter_map(|r| async { r.err() }).collect().await;
    if let Some(e) = failed.into_iter().next() {
        return Err(e.context("creating the VMs"));
    }
    println!(
        "web_console: {vms} VMs created in {:.1} s; {runs} runs; binary {}",
        began.elapsed().as_secs_f64(),
        support::virtplane_binary().display()
    );

    let mut whole = Vec::new();
    let mut paged = Vec::new();
    let mut body_bytes = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let body = client
            .get(format!("{}{VMS_PATH}", server.url))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        whole.push(t.elapsed());
        body_bytes = body.len();
        let t = Instant::now();
        let mut token = String::new();
        loop {
            // Continue tokens are base64url: nothing in them needs escaping.
            let page: Value = client
                .get(format!(
                    "{}{VMS_PATH}?limit=500&continue={token}",
                    server.url
                ))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            token = page["metadata"]["continue"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if token.is_empty() {
                break;
            }
        }
        paged.push(t.elapsed());
    }

    let token = admin_token(&data)?;
    let out = Command::new("python3")
        .args(["-c", BROWSER_SCRIPT, &server.url, &token])
        .args([vms.to_string(), runs.to_string()])
        .output()
        .context("cannot run python3 with Playwright (scripts/install-deps test)")?;
    if !out.status.success() {
        bail!(
            "the browser half failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let browser: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "the browser half printed no figures: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    let p50 = |key: &str| -> f64 {
        let mut values: Vec<Duration> = browser[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .map(|v| Duration::from_secs_f64(v / 1000.0))
            .collect();
        values.sort();
        match values.is_empty() {
            true => f64::NAN,
            false => ms(percentile(&values, 0.5)),
        }
    };
    whole.sort();
    paged.sort();
    println!(
        "  the API (reference): LIST of {vms} VMs in one request p50 {:.1} ms ({:.1} MB), paged by 500 p50 {:.1} ms",
        ms(percentile(&whole, 0.5)),
        body_bytes as f64 / 1e6,
        ms(percentile(&paged, 0.5)),
    );
    println!(
        "  the browser, a new tab: first rows at {:.0} ms, all {vms} VMs listed at {:.0} ms after navigation start (p50); target < 1000 ms",
        p50("first_row_ms"),
        p50("all_ms"),
    );
    println!(
        "  the browser, the same tab reloaded: first rows at {:.0} ms, all {vms} VMs listed at {:.0} ms (p50)",
        p50("reload_first_row_ms"),
        p50("reload_all_ms"),
    );
    println!(
        "  a VM POSTed from the page shown in the list {:.0} ms after the POST was sent (the POST itself {:.0} ms); target <= 200 ms",
        p50("watch_ms"),
        p50("post_ms"),
    );
    bench_report::lower(
        "web_console",
        &format!("{vms} VMs: all listed in a new tab"),
        p50("all_ms"),
        "ms",
    )
    .beside("the API's LIST in one request", ms(percentile(&whole, 0.5)))
    .target(1000.0)
    .record();
    bench_report::lower(
        "web_console",
        &format!("{vms} VMs: all listed in the same tab reloaded"),
        p50("reload_all_ms"),
        "ms",
    )
    .beside("the API's LIST in one request", ms(percentile(&whole, 0.5)))
    .target(1000.0)
    .record();
    bench_report::lower(
        "web_console",
        "a new VM's row after its POST",
        p50("watch_ms"),
        "ms",
    )
    .beside("the POST itself", p50("post_ms"))
    .target(200.0)
    .record();
    if support::knob("BENCH_KEEP", 0) == 1 {
        println!("  kept {}", dir.keep().display());
    }
    Ok(())
}

/// The admin's bearer token, from the server's `tokens.json`.
fn admin_token(data: &std::path::Path) -> Result<String> {
    let path = data.join("pki/tokens.json");
    let tokens: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    tokens
        .as_object()
        .into_iter()
        .flatten()
        .find(|(_, user)| user["user"] == "admin")
        .map(|(token, _)| token.clone())
        .with_context(|| format!("no admin token in {}", path.display()))
}
