//! NetworkPolicy at scale on one node, as `network_policy` programs it: 1,000
//! NetworkPolicies (10 in each of 100 namespaces) over 5,000 Pods (50 per namespace), of
//! which this node runs `BENCH_LOCAL` (100). Each policy isolates one app's Pods for
//! ingress, admitting its namespace's clients on two ports and an address block. Timed:
//! the node's table computed from the objects and applied in one `nft -f` transaction in
//! a fresh namespace; then one Pod's label changed and the table computed and applied
//! again, 20 times (p50/p99). Reference in the same run: a transaction of the same table
//! with no Pod isolated (what every apply costs anyway).
//! Targets (issue 33): 1,000 policies over 5,000 Pods in ≤ 2 s; a label change reflected
//! in ≤ 100 ms p99.
//!
//! `cargo bench -p node-agent --bench policies` (root: it makes a namespace; nft from
//! Debian's nftables). Knobs: `BENCH_NAMESPACES` (100), `BENCH_LOCAL` (100),
//! `BENCH_CHANGES` (20); `BENCH_SMOKE=1` runs 10 namespaces, 10 local Pods, 3 changes.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use network::netns::NetNs;
use node_agent::network_policy::ruleset;
use serde_json::json;

const NODE: &str = "bench-node";
const TABLE: &str = "vpbrbench_pol";

fn knob(name: &str, full: usize, smoke: usize) -> usize {
    let smoke_run = std::env::var("BENCH_SMOKE").is_ok_and(|v| v == "1");
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke_run { smoke } else { full })
}

fn pod(namespace: usize, i: usize, local: bool, role: &str) -> Arc<Pod> {
    let index = namespace * 50 + i;
    let node = if local {
        NODE.to_string()
    } else {
        format!("node-{}", index % 49)
    };
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("pod-{i}"), "namespace": format!("ns-{namespace}"),
                         "labels": {"app": format!("app-{}", i % 10), "role": role}},
            "spec": {"nodeName": node, "containers": [{"name": "compute",
                     "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"podIP": format!("10.{}.{}.{}", 200 + index / 65_000, (index / 250) % 256, index % 250 + 2)}
        }))
        .expect("a Pod"),
    )
}

fn policy(namespace: usize, i: usize) -> Arc<NetworkPolicy> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("policy-{i}"), "namespace": format!("ns-{namespace}")},
            "spec": {"podSelector": {"matchLabels": {"app": format!("app-{i}")}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}},
                                           {"ipBlock": {"cidr": "192.168.0.0/16", "except": ["192.168.9.0/24"]}}],
                                  "ports": [{"port": 8080}, {"port": "http"}]}]}
        }))
        .expect("a NetworkPolicy"),
    )
}

fn apply(ns: &NetNs, rules: &str) -> Duration {
    let began = Instant::now();
    network::nft::apply(Some(ns), rules).expect("nft applies the table");
    began.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() -> ExitCode {
    let namespaces_count = knob("BENCH_NAMESPACES", 100, 10);
    let local = knob("BENCH_LOCAL", 100, 10);
    let changes = knob("BENCH_CHANGES", 20, 3).max(1);
    let name = format!("vpbench-pol-{}", std::process::id());
    let ns = match NetNs::create(&name) {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("policies: cannot make a network namespace ({e}); run as root");
            return ExitCode::FAILURE;
        }
    };
    let namespaces: Vec<Arc<Namespace>> = (0..namespaces_count)
        .map(|n| {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": format!("ns-{n}")}}))
                    .expect("a Namespace"),
            )
        })
        .collect();
    let mut pods: Vec<Arc<Pod>> = Vec::new();
    for n in 0..namespaces_count {
        for i in 0..50 {
            let is_local = n * 50 + i < local;
            let role = if i % 5 == 0 { "client" } else { "server" };
            pods.push(pod(n, i, is_local, role));
        }
    }
    let policies: Vec<Arc<NetworkPolicy>> = (0..namespaces_count)
        .flat_map(|n| (0..10).map(move |i| policy(n, i)))
        .collect();
    println!(
        "policies: {} NetworkPolicies over {} Pods in {namespaces_count} namespaces, {local} on this node",
        policies.len(),
        pods.len()
    );

    let empty = ruleset(NODE, TABLE, &[], &pods, &namespaces);
    let empty_apply = apply(&ns, &empty);
    let began = Instant::now();
    let rules = ruleset(NODE, TABLE, &policies, &pods, &namespaces);
    let computed = began.elapsed();
    let applied = apply(&ns, &rules);
    println!(
        "  whole table: computed {:.1} ms ({} KiB, {} lines), applied {:.1} ms; total {:.1} ms (target ≤ 2000 ms)",
        ms(computed),
        rules.len() / 1024,
        rules.lines().count(),
        ms(applied),
        ms(computed + applied)
    );
    println!(
        "  reference: the table with no Pod isolated applied in {:.1} ms",
        ms(empty_apply)
    );

    // One Pod's label changes (a client stops being one, and back): recompute, reapply.
    let mut times = Vec::new();
    for c in 0..changes {
        let role = if c % 2 == 0 { "server" } else { "client" };
        pods[5] = pod(0, 5, true, role);
        let began = Instant::now();
        let rules = ruleset(NODE, TABLE, &policies, &pods, &namespaces);
        apply(&ns, &rules);
        times.push(began.elapsed());
    }
    times.sort();
    println!(
        "  one label change, {changes} times: p50 {:.1} ms, p99 {:.1} ms (target ≤ 100 ms p99)",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99))
    );
    bench_report::lower(
        "policies",
        &format!("{} NetworkPolicies: whole table", policies.len()),
        ms(computed + applied),
        "ms",
    )
    .beside("no Pod isolated", ms(empty_apply))
    .target(2000.0)
    .record();
    bench_report::lower(
        "policies",
        "one label change p99",
        ms(percentile(&times, 0.99)),
        "ms",
    )
    .target(100.0)
    .record();
    let _ = ns.delete();
    ExitCode::SUCCESS
}
