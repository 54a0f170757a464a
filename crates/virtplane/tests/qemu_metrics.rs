//! Tier B: a real guest's metrics under KubeVirt's names. The node's readings come
//! through the API server (`/api/v1/nodes/NAME/proxy/metrics`, as the kubelet's) and
//! move as the guest burns CPU and reads its disk; both expositions pass `promtool check
//! metrics`; a real Prometheus scraping the server and the node answers the OpenShift
//! console's own queries with a series. Skipped loudly without QEMU, promtool or
//! Prometheus; failed instead under CI or VIRTPLANE_REQUIRE_QEMU.

mod qemu;
mod support;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use qemu::{add_volume, guests, kernel_vm, shared, Env};
use serde_json::{json, Value};

/// The value of the first sample of `metric` about VMI `name`.
fn sample(text: &str, metric: &str, name: &str, extra: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| l.contains(&format!("name=\"{name}\"")) && l.contains(extra))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

async fn node_metrics(env: &Env) -> String {
    let reply = env
        .api
        .get(&format!("/api/v1/nodes/{}/proxy/metrics", env.node))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.text
}

fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("VIRTPLANE_REQUIRE_QEMU").is_some()
}

/// `metrics.k8s.io` has the guest's launcher Pod and its node, and `kubectl top` shows them.
async fn top_shows_the_guest(env: &Env, name: &str) {
    let pods = env
        .api
        .get(&format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=vm.kubevirt.io/name={name}"
        ))
        .await;
    assert_eq!(pods.status, 200, "{}", pods.text);
    let body: Value = serde_json::from_str(&pods.text).unwrap();
    assert_eq!(body["kind"], "PodMetricsList", "{body}");
    let items = body["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{body}");
    let launcher = items[0]["metadata"]["name"].as_str().unwrap().to_string();
    assert!(
        launcher.starts_with(&format!("virt-launcher-{name}-")),
        "{body}"
    );
    let compute = &items[0]["containers"][0];
    assert_eq!(compute["name"], "compute", "{body}");
    let kib: u64 = compute["usage"]["memory"]
        .as_str()
        .and_then(|m| m.strip_suffix("Ki"))
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("memory of {body}"));
    assert!(kib > 1024, "{body}");
    assert!(
        compute["usage"]["cpu"]
            .as_str()
            .is_some_and(|c| c.ends_with('n')),
        "{body}"
    );

    let node = env
        .api
        .get(&format!("/apis/metrics.k8s.io/v1beta1/nodes/{}", env.node))
        .await;
    assert_eq!(node.status, 200, "{}", node.text);
    let node: Value = serde_json::from_str(&node.text).unwrap();
    assert_eq!(node["kind"], "NodeMetrics", "{node}");
    assert!(
        node["usage"]["memory"]
            .as_str()
            .is_some_and(|m| m.ends_with("Ki")),
        "{node}"
    );
    let missing = env
        .api
        .get("/apis/metrics.k8s.io/v1beta1/nodes/nowhere")
        .await;
    assert_eq!(missing.status, 404, "{}", missing.text);
    assert!(
        missing
            .text
            .contains(r#"nodemetrics.metrics.k8s.io \"nowhere\" not found"#),
        "{}",
        missing.text
    );

    let kubeconfig = env.kubeconfig();
    let top = |args: &[&str]| {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("top")
            .args(args)
            .output()
    };
    match top(&["pod", "-n", "default", "--containers", &launcher]) {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains(&launcher) && text.contains("compute"),
                "kubectl top pod: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let out = top(&["node", &env.node]).expect("kubectl");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("CPU(cores)") && text.contains(&env.node),
                "kubectl top node: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(e) => {
            assert!(!required(), "kubectl: {e}");
            eprintln!("SKIP kubectl top: kubectl cannot run: {e}");
        }
    }
}

/// A Debian tool the test needs, or `None` after saying loudly that it is missing.
fn tool(name: &str, test: &str) -> Option<&'static str> {
    let path: &'static str = match name {
        "promtool" => "/usr/bin/promtool",
        _ => "/usr/bin/prometheus",
    };
    if Path::new(path).exists() {
        return Some(path);
    }
    assert!(
        !required(),
        "{test}: {path} is missing (Debian's prometheus package; scripts/install-deps test)"
    );
    eprintln!("SKIP {test}: {path} is missing (install Debian's prometheus package)");
    None
}

/// `text` with the keys of `kubernetes_vmi_label_*` labels in lower case. They copy the
/// VMI's label keys with their case, as KubeVirt's do (`kubevirt.io/nodeName`), which
/// promtool's snake_case lint flags; everything else must pass it as written.
fn vmi_label_keys_lowered(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("kubernetes_vmi_label_") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find('=').map_or(rest.len(), |e| at + e);
        out.push_str(&rest[at..end].to_lowercase());
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn promtool_accepts(promtool: &str, text: &str, what: &str) {
    let text = vmi_label_keys_lowered(text);
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics on {what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guests_metrics_move_as_it_works_and_prometheus_reads_them() {
    let Some(g) = guests() else { return };
    let test = "a_guests_metrics_move_as_it_works_and_prometheus_reads_them";
    let env = shared(g).await;
    let name = "metered";
    let mut vm = kernel_vm(g, name, "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "scratch", "disk": {"bus": "virtio"}}),
        json!({"name": "scratch", "emptyDisk": {"capacity": "64Mi"}}),
    );
    env.create_vm(&vm).await;
    let vmi = env.wait_running(name).await;
    env.wait_ready(name).await;
    let scratch = vmi["status"]["volumeStatus"]
        .as_array()
        .and_then(|list| list.iter().find(|v| v["name"] == "scratch"))
        .and_then(|v| v["target"].as_str())
        .unwrap_or_else(|| panic!("no target of scratch: {}", vmi["status"]))
        .to_string();

    // Figures, not checks: what a scrape of a node with one guest takes here (debug build),
    // and how much of it reading the guest took.
    for _ in 0..3 {
        let began = std::time::Instant::now();
        let text = node_metrics(&env).await;
        eprintln!(
            "node scrape with one guest: {:?}, of which reading it {:?} s",
            began.elapsed(),
            sample(&text, "virtplane_vmi_metrics_read_seconds", name, "")
        );
    }
    let before = node_metrics(&env).await;
    let cpu = |text: &str| sample(text, "kubevirt_vmi_cpu_usage_seconds_total", name, "");
    let read = |text: &str| {
        sample(
            text,
            "kubevirt_vmi_storage_read_traffic_bytes_total",
            name,
            "drive=\"scratch\"",
        )
    };
    let cpu_before = cpu(&before).unwrap_or_else(|| panic!("no CPU of {name} in\n{before}"));
    let read_before = read(&before).unwrap_or_else(|| panic!("no scratch drive in\n{before}"));
    assert!(
        sample(&before, "kubevirt_vmi_vcpu_seconds_total", name, "id=\"0\"").is_some(),
        "{before}"
    );
    assert!(
        sample(
            &before,
            "kubevirt_vmi_vcpu_delay_seconds_total",
            name,
            "id=\"0\""
        )
        .is_some(),
        "{before}"
    );
    assert_eq!(
        sample(&before, "kubevirt_vmi_memory_domain_bytes", name, ""),
        Some((128u64 << 20) as f64),
        "{before}"
    );
    assert!(
        sample(&before, "kubevirt_vmi_memory_resident_bytes", name, "").is_some_and(|b| b > 0.0),
        "{before}"
    );

    // The VMI's labels ride on its series; QEMU's memory beyond the guest's is its
    // overhead, a part of what it holds.
    assert!(
        before.lines().any(|l| l.starts_with(&format!(
            "kubevirt_vmi_cpu_usage_seconds_total{{node=\"{}\",namespace=\"default\",name=\"{name}\",",
            env.node
        )) && l.contains(&format!("kubernetes_vmi_label_kubevirt_io_vm=\"{name}\""))),
        "{before}"
    );
    let resident = sample(&before, "kubevirt_vmi_memory_resident_bytes", name, "").unwrap();
    let overhead = sample(
        &before,
        "kubevirt_vmi_launcher_memory_overhead_bytes",
        name,
        "",
    );
    assert!(
        overhead.is_some_and(|o| o > 0.0 && o < resident),
        "overhead {overhead:?} of resident {resident}"
    );

    // The guest burns CPU and reads its scratch disk: both counters move. Its console
    // counts as open meanwhile.
    let mut console = env.console(name).await.expect("a console");
    let open = node_metrics(&env).await;
    assert_eq!(
        open.lines()
            .find(|l| l.starts_with("kubevirt_console_active_connections{")
                && l.contains(&format!("vmi=\"{name}\"")))
            .and_then(|l| l.rsplit(' ').next()),
        Some("1"),
        "{open}"
    );
    let said = console
        .run(
            &format!("dd if=/dev/{scratch} of=/dev/null bs=64k count=512 2>/dev/null; i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; echo WORKED-$i"),
            "WORKED-",
            Duration::from_secs(120),
        )
        .await;
    console.close().await;
    assert_eq!(said.as_deref(), Some("WORKED-30000"));
    let after = node_metrics(&env).await;
    // The balloon's stats, asked for at the first scrape, come every 5 s: the guest's
    // own account of its memory, used less than it has.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = node_metrics(&env).await;
        let available = sample(&text, "kubevirt_vmi_memory_available_bytes", name, "");
        let used = sample(&text, "kubevirt_vmi_memory_used_bytes", name, "");
        let balloon = sample(&text, "kubevirt_vmi_memory_actual_balloon_bytes", name, "");
        if let (Some(available), Some(used)) = (available, used) {
            assert!(
                used > 0.0 && used < available && available <= (128u64 << 20) as f64,
                "used {used} of available {available}"
            );
            assert_eq!(balloon, Some((128u64 << 20) as f64), "{text}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no balloon stats of {name}:\n{text}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while node_metrics(&env)
        .await
        .contains("kubevirt_console_active_connections{")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "a closed console still counts"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        cpu(&after).unwrap() > cpu_before,
        "CPU did not move:\n{after}"
    );
    assert!(
        read(&after).unwrap() >= read_before + (16 << 20) as f64,
        "reads did not move: {read_before} → {:?}",
        read(&after)
    );

    top_shows_the_guest(&env, name).await;

    let server = env.api.get("/metrics").await;
    assert_eq!(server.status, 200, "{}", server.text);
    assert!(
        sample(&server.text, "kubevirt_vmi_info", name, "phase=\"running\"") == Some(1.0),
        "{}",
        server.text
    );
    if let Some(promtool) = tool("promtool", test) {
        promtool_accepts(promtool, &after, "the node's metrics");
        promtool_accepts(promtool, &server.text, "the server's metrics");
    }
    if let Some(prometheus) = tool("prometheus", test) {
        prometheus_answers_the_consoles_queries(prometheus, &env, name).await;
    }
    env.delete_vm(name).await;
}

/// A Prometheus that scrapes the server and the node every second (with the admin's
/// client certificate) answers the queries the OpenShift console draws its charts from.
async fn prometheus_answers_the_consoles_queries(prometheus: &str, env: &Env, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::admin_kubeconfig(&env.data_dir).unwrap();
    for (field, file) in [
        ("certificate-authority-data", "ca.crt"),
        ("client-certificate-data", "client.crt"),
        ("client-key-data", "client.key"),
    ] {
        let pem = support::kubeconfig_field(&kubeconfig, field).expect(field);
        std::fs::write(dir.path().join(file), pem).unwrap();
    }
    let target = env.url.trim_start_matches("https://").to_string();
    let tls = format!(
        "    scheme: https\n    tls_config:\n      ca_file: {0}/ca.crt\n      cert_file: {0}/client.crt\n      key_file: {0}/client.key\n      insecure_skip_verify: false\n",
        dir.path().display()
    );
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: apiserver\n{tls}    static_configs:\n      - targets: ['{target}']\n  - job_name: node\n    metrics_path: /api/v1/nodes/{node}/proxy/metrics\n{tls}    static_configs:\n      - targets: ['{target}']\n",
        node = env.node
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let port = support::free_port();
    let mut child = Command::new(prometheus)
        .arg(format!(
            "--config.file={}/prometheus.yml",
            dir.path().display()
        ))
        .arg(format!("--storage.tsdb.path={}/data", dir.path().display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prometheus");
    let queries = [
        format!("rate(kubevirt_vmi_cpu_usage_seconds_total{{name=\"{name}\"}}[1m])"),
        format!("rate(kubevirt_vmi_storage_read_traffic_bytes_total{{name=\"{name}\"}}[1m])"),
        format!("kubevirt_vmi_memory_domain_bytes{{name=\"{name}\"}}"),
        format!("last_over_time(kubevirt_vmi_memory_used_bytes{{name=\"{name}\"}}[1m])"),
        format!("kubevirt_vmi_info{{name=\"{name}\"}}"),
        "sum(rate(apiserver_request_total[1m]))".to_string(),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut missing: Vec<String> = queries.to_vec();
    while !missing.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        missing.retain(|q| !query_has_series(port, q));
    }
    let _ = child.kill();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let _ = child.wait();
    assert!(
        missing.is_empty(),
        "Prometheus had no series for {missing:?}; its log:\n{}",
        stderr.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
}

/// Whether Prometheus on `port` answers `query` with at least one series.
fn query_has_series(port: u16, query: &str) -> bool {
    let encoded: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let request = format!("GET /api/v1/query?query={encoded} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let Some((_, body)) = answer.split_once("\r\n\r\n") else {
        return false;
    };
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["data"]["result"].as_array().map(|r| !r.is_empty()))
        .unwrap_or(false)
}
