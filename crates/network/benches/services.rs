//! A node's Service table at scale, as `service_proxy` programs it: 1,000 Services of one
//! port with 10 endpoints each (10,000 endpoints) built and applied in one `nft -f`
//! transaction inside a fresh network namespace, then one endpoint changed and the
//! whole table applied again, 20 times (p50/p99). Reference in the same run: a
//! transaction of the same table with no Service (what every apply costs anyway).
//! Targets (issue 32): the full table in ≤ 1 s, one endpoint change in ≤ 100 ms p99.
//!
//! `cargo bench -p network --bench services` (root: it makes a namespace; nft from
//! Debian's nftables). Knobs: `BENCH_SERVICES` (1000), `BENCH_ENDPOINTS` (10 per
//! Service), `BENCH_CHANGES` (20); `BENCH_SMOKE=1` runs 20 × 2, 3 changes.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use network::masquerade::Protocol;
use network::netns::NetNs;
use network::services::{ruleset, update, Endpoint, ServicePort};

fn knob(name: &str, full: usize, smoke: usize) -> usize {
    let smoke_run = std::env::var("BENCH_SMOKE").is_ok_and(|v| v == "1");
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke_run { smoke } else { full })
}

fn ports(services: usize, endpoints: usize, changed: u32) -> Vec<ServicePort> {
    (0..services)
        .map(|s| {
            let s32 = s as u32;
            ServicePort {
                id: format!("bench/svc-{s}:http"),
                protocol: Protocol::Tcp,
                cluster_ip: Some(Ipv4Addr::from(0x0a60_0000 + 10 + s32)),
                port: 80,
                node_port: Some(30000 + (s % 2700) as u16),
                affinity: None,
                external_local: false,
                endpoints: (0..endpoints)
                    .map(|e| {
                        // The first endpoint of the first Service moves with each change.
                        let bump = if s == 0 && e == 0 { changed } else { 0 };
                        Endpoint {
                            address: Ipv4Addr::from(
                                0x0af4_0000
                                    + ((s32 * endpoints as u32 + e as u32 + bump) % 0xfffe)
                                    + 1,
                            ),
                            port: 8080,
                            local: e % 3 == 0,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

fn apply(ns: &NetNs, rules: &str) -> Duration {
    let began = Instant::now();
    network::nft::apply(Some(ns), rules).expect("nft applies the table");
    began.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn main() -> ExitCode {
    let services = knob("BENCH_SERVICES", 1000, 20);
    let endpoints = knob("BENCH_ENDPOINTS", 10, 2);
    let changes = knob("BENCH_CHANGES", 20, 3).max(1);
    let name = format!("vp-bench-svc-{}", std::process::id());
    let ns = match NetNs::create(&name) {
        Ok(ns) => ns,
        Err(e) => {
            let required = std::env::var_os("CI").is_some();
            eprintln!(
                "{}: services bench: cannot make a network namespace ({e}); it needs root",
                if required { "FAILED" } else { "SKIPPED" }
            );
            return if required {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let cluster = "10.244.0.0/16".parse().expect("a CIDR");
    let table = "vp_bench_svc";

    let empty = ruleset(table, cluster, &[]);
    let reference = apply(&ns, &empty);

    let began = Instant::now();
    let full = ruleset(table, cluster, &ports(services, endpoints, 0));
    let built = began.elapsed();
    let first = apply(&ns, &full);

    // One endpoint moves: the partial transaction the proxy sends, and (for comparison)
    // the whole table again.
    let mut partial = Vec::new();
    let mut whole = Vec::new();
    let mut previous = ports(services, endpoints, 0);
    for change in 1..=changes as u32 {
        let began = Instant::now();
        let next = ports(services, endpoints, change);
        let delta = update(table, cluster, &previous, &next);
        network::nft::apply(Some(&ns), &delta).expect("nft applies the change");
        partial.push(began.elapsed());
        previous = next;
    }
    for change in 1..=changes.min(5) as u32 {
        let began = Instant::now();
        let rules = ruleset(table, cluster, &ports(services, endpoints, change));
        network::nft::apply(Some(&ns), &rules).expect("nft applies the changed table");
        whole.push(began.elapsed());
    }
    partial.sort();
    whole.sort();
    let times = partial;
    let _ = ns.delete();

    println!("services bench: {services} Services x {endpoints} endpoints ({} endpoints), table {} KiB of nft text", services * endpoints, full.len() / 1024);
    println!(
        "  reference: an empty Service table applied in {:.1} ms",
        reference.as_secs_f64() * 1e3
    );
    println!(
        "  full table: built in {:.1} ms, applied in {:.1} ms (target <= 1000 ms)",
        built.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3
    );
    println!(
        "  one endpoint changed, partial transaction ({changes} times): p50 {:.1} ms, p99 {:.1} ms (target p99 <= 100 ms)",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "  the same change as the whole table again ({} times): p50 {:.1} ms",
        whole.len(),
        percentile(&whole, 0.5).as_secs_f64() * 1e3
    );
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    bench_report::lower(
        "services",
        &format!("{services} Services: full table applied"),
        ms(first),
        "ms",
    )
    .beside("an empty table", ms(reference))
    .target(1000.0)
    .record();
    bench_report::lower(
        "services",
        "one endpoint changed p99",
        ms(percentile(&times, 0.99)),
        "ms",
    )
    .beside("the whole table again p50", ms(percentile(&whole, 0.5)))
    .target(100.0)
    .record();
    ExitCode::SUCCESS
}
