//! Live migration through the real binary, with real QEMU (software emulation) on two
//! nodes: the server's local node and a `virtplane node` joined to it. A running guest
//! moves while it keeps running: its RAM, what it wrote to its containerDisk overlay and
//! its emptyDisk before the move, its uptime and its console all carry on; the VMIM goes
//! through KubeVirt's phases; the masquerade port forward answers on the new node.

mod qemu;
mod support;

use std::time::{Duration, Instant};

use qemu::{add_volume, guests, host_port, kernel_vm, Cluster, Console, Env, NodeAgent, NS, SHORT};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The guest's checksum of `what` (a shell command printing data), as `sum-<md5>`.
async fn checksum(console: &mut Console, what: &str) -> String {
    console
        .run(
            &format!("echo sum-$({what} | md5sum | cut -c1-32)"),
            "sum-",
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|| panic!("no checksum of {what}: {:?}", console.seen))
}

/// The migration's phases as `status.phaseTransitionTimestamps` lists them.
fn phases(vmim: &Value) -> Vec<String> {
    vmim["status"]["phaseTransitionTimestamps"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|t| t["phase"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_final(env: &Env, name: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let r = env
            .api
            .get(&format!(
                "/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstancemigrations/{name}"
            ))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let phase = r.body["status"]["phase"].as_str().unwrap_or("");
        let released = r.body["metadata"]
            .get("finalizers")
            .is_none_or(|f| f == &json!([]));
        // Final, and let go by the controller (its state copied, its finalizer removed).
        if (phase == "Succeeded" || phase == "Failed") && released {
            return r.body;
        }
        assert!(
            Instant::now() < deadline,
            "migration {name} still {phase}: {}",
            r.body["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the cluster's KubeVirt configuration (in the `kubevirt` namespace the server
/// makes at start) with these `spec.configuration.migrations`.
async fn configure_migrations(env: &Env, migrations: Value) {
    let kv = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"},
        "spec": {"configuration": {"migrations": migrations}}});
    let kv = env
        .api
        .post("/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts", &kv)
        .await;
    assert_eq!(kv.status, StatusCode::CREATED, "{}", kv.body);
}

/// The server's QEMU node and a second one, `node-b`, joined and Ready.
async fn two_nodes(g: &qemu::Guests) -> (Cluster, NodeAgent) {
    let cluster = Cluster::start(g, &[]).await;
    let agent = NodeAgent::start(
        cluster.server.data_dir(),
        "node-b",
        &["--hypervisor", "qemu", "--insecure-registry", &g.registry],
    );
    let base = cluster.env();
    Env::new(&base.url, &base.data_dir, &base.host_disk_dir)
        .on_node(&agent)
        .wait_node_ready()
        .await;
    (cluster, agent)
}

fn migration(name: &str, vmi: &str) -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
           "metadata": {"name": name}, "spec": {"vmiName": vmi}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_guest_moves_to_another_node_and_carries_on() {
    let Some(g) = guests() else { return };
    let (cluster, agent) = two_nodes(g).await;
    let base = cluster.env();
    let on_b = Env::new(&base.url, &base.data_dir, &base.host_disk_dir).on_node(&agent);

    let name = "mover";
    let mut vm = kernel_vm(
        g,
        name,
        "Always",
        Some("#cloud-config\n#virtplane: serve 8080\n"),
    );
    add_volume(
        &mut vm,
        json!({"name": "data", "disk": {"bus": "virtio"}}),
        json!({"name": "data", "containerDisk": {"image": g.disk_image()}}),
    );
    add_volume(
        &mut vm,
        json!({"name": "scratch", "disk": {"bus": "virtio"}}),
        json!({"name": "scratch", "emptyDisk": {"capacity": "64Mi"}}),
    );
    base.create_vm(&vm).await;
    let vmi = base.wait_running(name).await;
    let source = vmi["status"]["nodeName"]
        .as_str()
        .expect("node")
        .to_string();
    let (from, to) = if source == base.node {
        (base, on_b)
    } else {
        (on_b, base)
    };
    from.wait_ready(name).await;
    let vmi = from.vmi(name).await.expect("vmi");
    assert_eq!(
        support::condition(&vmi, "LiveMigratable").map(|c| c["status"].clone()),
        Some(json!("True")),
        "{}",
        vmi["status"]
    );
    assert_eq!(vmi["status"]["migrationMethod"], "BlockMigration");
    let port_before = host_port(&vmi, 8080);
    from.hello(port_before, SHORT).await;

    // RAM, the containerDisk overlay (vdb) and the emptyDisk (vdc) get data; a ticker
    // counts on the console.
    let mut console = from.console(name).await.expect("console");
    console.send("\r").await;
    console
        .run(
            "dd if=/dev/urandom of=/tmp/ram bs=1k count=512 2>/dev/null; echo wrote",
            "wrote",
            Duration::from_secs(60),
        )
        .await
        .expect("ram data");
    console
        .run(
            "dd if=/tmp/ram of=/dev/vdb bs=1k seek=4096 oflag=direct 2>/dev/null; dd if=/tmp/ram of=/dev/vdc bs=1k oflag=direct 2>/dev/null; sync; echo written",
            "written",
            Duration::from_secs(60),
        )
        .await
        .expect("disk data");
    let ram = checksum(&mut console, "cat /tmp/ram").await;
    let overlay = checksum(
        &mut console,
        "dd if=/dev/vdb bs=1k skip=4096 count=512 iflag=direct 2>/dev/null",
    )
    .await;
    let scratch = checksum(
        &mut console,
        "dd if=/dev/vdc bs=1k count=512 iflag=direct 2>/dev/null",
    )
    .await;
    assert_eq!(ram, overlay);
    assert_eq!(ram, scratch);
    let up_before = console.uptime().await;
    console
        .run(
            "(i=0; while true; do i=$((i+1)); echo tick-$i; sleep 1; done) & echo ticking",
            "ticking",
            Duration::from_secs(30),
        )
        .await
        .expect("ticker");
    assert!(
        console
            .read_until(0, "tick-2", Duration::from_secs(30))
            .await,
        "{:?}",
        console.seen
    );
    console.close().await;

    let created = from
        .api
        .post(
            &format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstancemigrations"),
            &migration("move-1", name),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(
        created.body["metadata"]["labels"]["kubevirt.io/vmi-name"],
        name
    );
    assert_eq!(
        created.body["metadata"]["finalizers"],
        json!(["kubevirt.io/migrationJobFinalize"])
    );

    let done = wait_final(&from, "move-1", Duration::from_secs(120)).await;
    assert_eq!(
        done["status"]["phase"],
        "Succeeded",
        "{}\nsource: {}\ntarget: {}",
        done["status"],
        from.diagnostics(name),
        to.diagnostics(name)
    );
    assert_eq!(
        phases(&done),
        [
            "Pending",
            "Scheduling",
            "Scheduled",
            "PreparingTarget",
            "TargetReady",
            "Running",
            "Succeeded"
        ]
    );
    let state = &done["status"]["migrationState"];
    assert_eq!(state["sourceNode"], source);
    assert_eq!(state["targetNode"], to.node);
    assert_eq!(state["completed"], true);
    assert!(state.get("failed").is_none_or(|f| f == false), "{state}");
    assert!(
        state["startTimestamp"].is_string() && state["endTimestamp"].is_string(),
        "{state}"
    );
    let transfer = &state["transfer"];
    assert!(
        transfer["totalTimeMilliseconds"]
            .as_u64()
            .is_some_and(|t| t > 0),
        "{state}"
    );
    assert!(
        transfer["diskBytes"]
            .as_u64()
            .is_some_and(|b| b >= 512 * 1024),
        "{state}"
    );
    // The server's metrics tell the migration's downtime and how long it took.
    let downtime = transfer["downtimeMilliseconds"].as_u64().expect("downtime") as f64 / 1000.0;
    let deadline = Instant::now() + SHORT;
    loop {
        let metrics = to.api.get("/metrics").await.text;
        let shown = metrics_sample(
            &metrics,
            "kubevirt_vmi_migration_last_downtime_duration_seconds",
            &format!("name=\"{name}\""),
        );
        let total = metrics_sample(
            &metrics,
            "kubevirt_vmi_migration_total_time_seconds_count",
            "",
        );
        let succeeded = metrics_sample(
            &metrics,
            "kubevirt_vmi_migration_phase_transition_time_from_creation_seconds_count",
            "phase=\"Succeeded\"",
        );
        if shown == Some(downtime) && total >= Some(1.0) && succeeded >= Some(1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "downtime {downtime} s: {shown:?}, total-time count {total:?}, Succeeded count {succeeded:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Encrypted by default, with credentials the controller signed for this migration.
    assert_eq!(
        state["migrationConfiguration"]["disableTLS"], false,
        "{state}"
    );
    let secret = to
        .api
        .get(&format!(
            "/api/v1/namespaces/{NS}/secrets/virtplane-migration-{}",
            done["metadata"]["uid"].as_str().unwrap()
        ))
        .await;
    assert_eq!(secret.status, StatusCode::OK, "{}", secret.body);
    assert_eq!(
        secret.body["metadata"]["ownerReferences"][0]["name"],
        "move-1"
    );
    for file in [
        "ca-cert.pem",
        "server-cert.pem",
        "server-key.pem",
        "client-cert.pem",
        "client-key.pem",
    ] {
        assert!(
            secret.body["data"][file].is_string(),
            "{file} in {}",
            secret.body["data"]
        );
    }
    assert!(
        !to.vmi_dir(name).join("migration-tls").exists(),
        "the target kept the migration's keys"
    );

    let vmi = to.vmi(name).await.expect("vmi");
    assert_eq!(vmi["status"]["nodeName"], to.node);
    assert_eq!(vmi["metadata"]["labels"]["kubevirt.io/nodeName"], to.node);
    assert!(
        vmi["metadata"]["labels"]
            .get("kubevirt.io/migrationTargetNodeName")
            .is_none(),
        "{}",
        vmi["metadata"]
    );
    assert_eq!(vmi["status"]["phase"], "Running");

    // The source lets its stopped copy go.
    let deadline = Instant::now() + SHORT;
    while !from.qemus(name).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the source QEMU stayed: {:?}",
            from.qemus(name)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(to.qemus(name).len(), 1, "{}", to.diagnostics(name));

    // The same guest, not a rebooted one: the ticker goes on, RAM and disks are the same.
    let mut console = to.console(name).await.expect("console on the target");
    console.send("\r").await;
    assert!(
        console
            .read_until(0, "tick-", Duration::from_secs(30))
            .await,
        "{:?}",
        console.seen
    );
    assert_eq!(checksum(&mut console, "cat /tmp/ram").await, ram);
    console
        .run(
            "echo 3 > /proc/sys/vm/drop_caches; echo dropped",
            "dropped",
            Duration::from_secs(30),
        )
        .await
        .expect("drop caches");
    assert_eq!(
        checksum(
            &mut console,
            "dd if=/dev/vdb bs=1k skip=4096 count=512 iflag=direct 2>/dev/null"
        )
        .await,
        overlay
    );
    assert_eq!(
        checksum(
            &mut console,
            "dd if=/dev/vdc bs=1k count=512 iflag=direct 2>/dev/null"
        )
        .await,
        scratch
    );
    assert!(console.uptime().await >= up_before);
    console.close().await;
    let target_serial = to.serial(name);
    assert!(
        target_serial.contains("tick-"),
        "the target's console log: {target_serial:?}"
    );
    assert!(
        !target_serial.contains("virtplane-guest: booted"),
        "the guest booted again on the target"
    );
    eprintln!("migrated {name} from {source} to {}: {transfer}", to.node);

    // The port forward moved with the guest.
    let port_after = host_port(&vmi, 8080);
    to.hello(port_after, SHORT).await;

    // And back: a QEMU that received its guest sends it on (its own incoming migration,
    // completed, is not taken for this one).
    let back = to
        .api
        .post(
            &format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstancemigrations"),
            &migration("move-2", name),
        )
        .await;
    assert_eq!(back.status, StatusCode::CREATED, "{}", back.body);
    let done = wait_final(&to, "move-2", Duration::from_secs(120)).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
    assert!(
        done["status"]["migrationState"]["transfer"]["memoryBytes"]
            .as_u64()
            .is_some_and(|b| b > 0),
        "{}",
        done["status"]
    );
    assert_eq!(
        from.vmi(name).await.expect("vmi")["status"]["nodeName"],
        from.node
    );
    let mut console = from.console(name).await.expect("console back home");
    console.send("\r").await;
    assert_eq!(checksum(&mut console, "cat /tmp/ram").await, ram);
    console.close().await;

    // With TLS turned off in the cluster's configuration, a guest that arrived over TLS
    // leaves without it.
    configure_migrations(&to, json!({"disableTLS": true})).await;
    let plain = to
        .api
        .post(
            &format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstancemigrations"),
            &migration("move-3", name),
        )
        .await;
    assert_eq!(plain.status, StatusCode::CREATED, "{}", plain.body);
    let done = wait_final(&to, "move-3", Duration::from_secs(120)).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
    assert_eq!(
        done["status"]["migrationState"]["migrationConfiguration"]["disableTLS"],
        true
    );
    assert_eq!(
        to.vmi(name).await.expect("vmi")["status"]["nodeName"],
        to.node
    );

    let vm = to.vm(name).await;
    assert_eq!(vm["status"]["printableStatus"], "Running");
    to.delete_vm(name).await;
    to.wait_vmi_gone(name, SHORT).await;
}

const VMIMS: &str = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations";

/// Creates migration `name` of `vmi` and waits until its memory copy runs.
async fn start_moving(env: &Env, name: &str, vmi: &str) -> Value {
    let created = env.api.post(VMIMS, &migration(name, vmi)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let deadline = Instant::now() + SHORT;
    loop {
        let r = env.api.get(&format!("{VMIMS}/{name}")).await;
        let phase = r.body["status"]["phase"].as_str().unwrap_or("").to_string();
        if phase == "Running" {
            return r.body;
        }
        assert!(
            phase != "Failed" && phase != "Succeeded" && Instant::now() < deadline,
            "migration {name} is {phase}, not Running: {}",
            r.body["status"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The guest answers on its console, on the node `env` names.
async fn still_runs(env: &Env, name: &str, word: &str) {
    let mut console = env.console(name).await.expect("console");
    console.send("\r").await;
    let line = console
        .run(
            &format!("echo alive-{word}"),
            &format!("alive-{word}"),
            Duration::from_secs(60),
        )
        .await;
    if line.as_deref() != Some(format!("alive-{word}").as_str()) {
        let vmi = env.vmi(name).await;
        panic!(
            "the guest did not answer on its console ({:?}); its VMI's status: {}\n{}",
            console.seen,
            vmi.map(|v| v["status"].clone()).unwrap_or_default(),
            env.diagnostics(name)
        );
    }
    console.close().await;
}

async fn wait_gone(env: &Env, path: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while env.api.get(path).await.status != StatusCode::NOT_FOUND {
        assert!(Instant::now() < deadline, "{path} is still there");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the first sample of `metric` whose labels hold `labels`.
fn metrics_sample(text: &str, metric: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with(['{', ' ']))
        .filter(|l| l.contains(labels))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Cancel, a killed target QEMU and a killed target agent: each migration fails, the
/// guest runs on at the source, and the target lets go of what it prepared. The cluster's
/// KubeVirt configuration caps the bandwidth, so that each migration is caught mid-way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_or_broken_migration_leaves_the_guest_running_at_the_source() {
    let Some(g) = guests() else { return };
    let cluster = Cluster::start(
        g,
        &[
            "--heartbeat-interval",
            "1s",
            "--node-monitor-grace-period",
            "4s",
        ],
    )
    .await;
    let mut agent = NodeAgent::start(
        cluster.server.data_dir(),
        "node-b",
        &[
            "--hypervisor",
            "qemu",
            "--insecure-registry",
            &g.registry,
            "--heartbeat-interval",
            "1s",
        ],
    );
    let from = cluster.env();
    let to = Env::new(&from.url, &from.data_dir, &from.host_disk_dir).on_node(&agent);
    to.wait_node_ready().await;
    configure_migrations(&from, json!({"bandwidthPerMigration": "1Mi"})).await;

    // The guest starts on the server's node (node-b cordoned meanwhile), so that node-b
    // is the target each time.
    let cordon = |on: bool| json!({"spec": {"unschedulable": on}});
    from.api.merge("/api/v1/nodes/node-b", &cordon(true)).await;
    let name = "stayer";
    let mut vm = kernel_vm(g, name, "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "scratch", "disk": {"bus": "virtio"}}),
        json!({"name": "scratch", "emptyDisk": {"capacity": "16Mi"}}),
    );
    from.create_vm(&vm).await;
    let vmi = from.wait_running(name).await;
    assert_eq!(vmi["status"]["nodeName"], from.node);
    from.api.merge("/api/v1/nodes/node-b", &cordon(false)).await;
    from.wait_ready(name).await;

    // 1. Cancel: deleting the running migration aborts it. Before that, the source's
    // metrics show it on its way.
    let running = start_moving(&from, "cancel-me", name).await;
    assert_eq!(running["status"]["migrationState"]["targetNode"], "node-b");
    let on_its_way = format!("name=\"{name}\"");
    let deadline = Instant::now() + SHORT;
    loop {
        let path = format!("/api/v1/nodes/{}/proxy/metrics", from.node);
        let metrics = from.api.get(&path).await.text;
        let gauge = |metric: &str| metrics_sample(&metrics, metric, &on_its_way);
        let processed = gauge("kubevirt_vmi_migration_data_processed_bytes");
        let remaining = gauge("kubevirt_vmi_migration_data_remaining_bytes");
        let total = gauge("kubevirt_vmi_migration_data_bytes_total");
        let rate = gauge("kubevirt_vmi_migration_memory_transfer_rate_bytes");
        if processed > Some(0.0)
            && remaining > Some(0.0)
            && total >= Some((128u64 << 20) as f64)
            && rate > Some(0.0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no progress of the migration in the source's metrics: processed {processed:?}, remaining {remaining:?}, total {total:?}, rate {rate:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deleted = from.api.delete(&format!("{VMIMS}/cancel-me"), None).await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    wait_gone(&from, &format!("{VMIMS}/cancel-me"), SHORT).await;
    let vmi = from.vmi(name).await.expect("vmi");
    let state = &vmi["status"]["migrationState"];
    assert_eq!(state["failed"], true, "{state}");
    assert_eq!(state["abortRequested"], true, "{state}");
    assert_eq!(state["abortStatus"], "Succeeded", "{state}");
    assert_eq!(
        state["failureReason"], "Live migration has been aborted",
        "{state}"
    );
    assert_eq!(vmi["status"]["nodeName"], from.node);
    assert!(vmi["metadata"]["labels"]
        .get("kubevirt.io/migrationTargetNodeName")
        .is_none());
    still_runs(&from, name, "after-cancel").await;
    let deadline = Instant::now() + SHORT;
    while !to.qemus(name).is_empty() || to.vmi_dir(name).exists() {
        assert!(
            Instant::now() < deadline,
            "the target kept its QEMU or files after the cancel"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(from.vm(name).await["status"]["printableStatus"], "Running");

    // 2. The target QEMU dies mid-way.
    start_moving(&from, "target-qemu-dies", name).await;
    let target_qemus = to.qemus(name);
    assert_eq!(target_qemus.len(), 1, "{}", to.diagnostics(name));
    qemu::kill9(target_qemus[0]);
    let done = wait_final(&from, "target-qemu-dies", SHORT).await;
    assert_eq!(done["status"]["phase"], "Failed", "{}", done["status"]);
    assert_eq!(done["status"]["migrationState"]["failed"], true);
    still_runs(&from, name, "after-target-qemu").await;
    let deadline = Instant::now() + SHORT;
    while to.vmi_dir(name).exists() {
        assert!(
            Instant::now() < deadline,
            "the target kept its files after its QEMU died"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // 3. The target agent dies mid-way: its node goes NotReady and the migration fails.
    start_moving(&from, "target-agent-dies", name).await;
    agent.kill9();
    let done = wait_final(&from, "target-agent-dies", Duration::from_secs(90)).await;
    assert_eq!(done["status"]["phase"], "Failed", "{}", done["status"]);
    assert_eq!(
        done["status"]["migrationState"]["failureReason"], "Target node node-b is down",
        "{}",
        done["status"]
    );
    still_runs(&from, name, "after-target-agent").await;
    let vmi = from.vmi(name).await.expect("vmi");
    assert_eq!(vmi["status"]["nodeName"], from.node);
    assert_eq!(vmi["status"]["phase"], "Running");
    from.delete_vm(name).await;
    from.wait_vmi_gone(name, SHORT).await;
}

/// The source agent restarts while the guest moves: the new agent finds QEMU's outgoing
/// migration, which its driver no longer follows, cancels it and reports it failed; the
/// guest runs on at the source and the target lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_agent_that_restarts_mid_way_ends_the_migration_in_a_defined_state() {
    let Some(g) = guests() else { return };
    let cluster = Cluster::start(g, &[]).await;
    let mut agent = NodeAgent::start(
        cluster.server.data_dir(),
        "node-b",
        &["--hypervisor", "qemu", "--insecure-registry", &g.registry],
    );
    let server_node = cluster.env();
    let from = Env::new(
        &server_node.url,
        &server_node.data_dir,
        &server_node.host_disk_dir,
    )
    .on_node(&agent);
    from.wait_node_ready().await;
    configure_migrations(&from, json!({"bandwidthPerMigration": "1Mi"})).await;
    // The guest starts on node-b, so that its (separate) agent is the source.
    let node = format!("/api/v1/nodes/{}", server_node.node);
    from.api
        .merge(&node, &json!({"spec": {"unschedulable": true}}))
        .await;
    let name = "restarted";
    from.create_vm(&kernel_vm(g, name, "Always", None)).await;
    let vmi = from.wait_running(name).await;
    assert_eq!(vmi["status"]["nodeName"], "node-b");
    from.api
        .merge(&node, &json!({"spec": {"unschedulable": false}}))
        .await;
    from.wait_ready(name).await;

    start_moving(&from, "interrupted", name).await;
    agent.restart();
    let done = wait_final(&from, "interrupted", Duration::from_secs(90)).await;
    assert_eq!(done["status"]["phase"], "Failed", "{}", done["status"]);
    assert_eq!(
        done["status"]["migrationState"]["failureReason"],
        "the source node agent restarted during the migration",
        "{}",
        done["status"]
    );
    from.wait_node_ready().await;
    still_runs(&from, name, "after-source-restart").await;
    let vmi = from.vmi(name).await.expect("vmi");
    assert_eq!(vmi["status"]["nodeName"], "node-b");
    let deadline = Instant::now() + SHORT;
    while !server_node.qemus(name).is_empty() {
        assert!(Instant::now() < deadline, "the target kept its QEMU");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    from.delete_vm(name).await;
    from.wait_vmi_gone(name, SHORT).await;
}

/// `virtplane node drain` of the server's node with two real guests on it: the one with
/// `evictionStrategy: LiveMigrate` moves live to the other node (same VMI, no reboot, an
/// evacuation migration that succeeded); the other is stopped and, as its runStrategy
/// asks, started again on the other node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_moves_one_guest_live_and_restarts_the_other_elsewhere() {
    let Some(g) = guests() else { return };
    let (cluster, agent) = two_nodes(g).await;
    let on_a = cluster.env();
    let on_b = Env::new(&on_a.url, &on_a.data_dir, &on_a.host_disk_dir).on_node(&agent);
    let cordon = |on: bool| json!({"spec": {"unschedulable": on}});
    let node_b = format!("/api/v1/nodes/{}", on_b.node);
    on_a.api.merge(&node_b, &cordon(true)).await;

    let (mover, stopper) = ("evacuee", "restarted");
    let mut vm = kernel_vm(g, mover, "Always", None);
    vm["spec"]["template"]["spec"]["evictionStrategy"] = json!("LiveMigrate");
    on_a.create_vm(&vm).await;
    on_a.create_vm(&kernel_vm(g, stopper, "Always", None)).await;
    let mut uids = Vec::new();
    for name in [mover, stopper] {
        let vmi = on_a.wait_running(name).await;
        assert_eq!(vmi["status"]["nodeName"], on_a.node, "{}", vmi["status"]);
        uids.push(vmi["metadata"]["uid"].as_str().unwrap().to_string());
        on_a.wait_ready(name).await;
    }
    on_a.api.merge(&node_b, &cordon(false)).await;
    let up_before = on_a.uptime(mover).await;

    let out = std::process::Command::new(support::binary())
        .args([
            "node",
            "drain",
            &on_a.node,
            "--timeout",
            "180s",
            "--kubeconfig",
        ])
        .arg(on_a.kubeconfig())
        .env_remove("RUST_LOG")
        .output()
        .expect("run virtplane node drain");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "stdout {stdout} stderr {stderr}\n{}\n{}",
        on_a.diagnostics(mover),
        on_b.diagnostics(mover)
    );
    assert!(
        stdout.contains(&format!("node/{} drained", on_a.node)),
        "{stdout}"
    );

    let on_node_b = |v: Option<&Value>| {
        v.is_some_and(|v| {
            qemu::phase(v) == "Running" && v["status"]["nodeName"] == on_b.node.as_str()
        })
    };
    let moved = on_b
        .wait_vmi(mover, SHORT, "Running on node-b", on_node_b)
        .await
        .expect("moved VMI");
    assert_eq!(
        moved["metadata"]["uid"],
        uids[0].as_str(),
        "moved live, same VMI"
    );
    assert_eq!(
        moved["status"]["nodeName"], on_b.node,
        "{}",
        moved["status"]
    );
    let evacuations = on_a
        .api
        .get(&format!(
            "{VMIMS}?labelSelector=kubevirt.io/vmi-name={mover}"
        ))
        .await
        .body;
    let items = evacuations["items"].as_array().expect("migrations");
    assert_eq!(items.len(), 1, "{evacuations}");
    assert!(items[0]["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n.starts_with("kubevirt-evacuation-")));
    assert_eq!(
        items[0]["status"]["phase"], "Succeeded",
        "{}",
        items[0]["status"]
    );
    let up_after = on_b.uptime(mover).await;
    assert!(
        up_after >= up_before,
        "rebooted: up {up_before} s before, {up_after} s after"
    );

    let restarted = on_b.wait_running_not(stopper, &uids[1]).await;
    assert_eq!(
        restarted["status"]["nodeName"], on_b.node,
        "{}",
        restarted["status"]
    );
    on_b.wait_ready(stopper).await;
    still_runs(&on_b, stopper, "restarted").await;
    let deadline = Instant::now() + SHORT;
    while !(on_a.qemus(mover).is_empty() && on_a.qemus(stopper).is_empty()) {
        assert!(
            Instant::now() < deadline,
            "QEMU still runs on the drained node"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// KubeVirt's completion timeout on a real QEMU: a migration that cannot finish in time
/// (its bandwidth capped, one second per GiB) is aborted with KubeVirt's reason and the
/// guest runs on at the source; with `allowWorkloadDisruption` (here from a
/// MigrationPolicy) and no post-copy the guest is paused instead, the migration finishes
/// in mode `Paused`, and the guest runs again on the target without a reboot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_out_of_time_is_aborted_or_pauses_the_guest_when_allowed() {
    let Some(g) = guests() else { return };
    let (cluster, agent) = two_nodes(g).await;
    let base = cluster.env();
    let on_b = Env::new(&base.url, &base.data_dir, &base.host_disk_dir).on_node(&agent);
    configure_migrations(
        &base,
        json!({"bandwidthPerMigration": "8Mi", "completionTimeoutPerGiB": 1, "allowAutoConverge": false}),
    )
    .await;
    let name = "slowpoke";
    let mut vm = kernel_vm(g, name, "Always", None);
    vm["spec"]["template"]["metadata"]["labels"]["disruption"] = json!("allowed");
    base.create_vm(&vm).await;
    let vmi = base.wait_running(name).await;
    let source = vmi["status"]["nodeName"]
        .as_str()
        .expect("node")
        .to_string();
    let (from, to) = if source == base.node {
        (base, on_b)
    } else {
        (on_b, base)
    };
    from.wait_ready(name).await;

    let created = from.api.post(VMIMS, &migration("out-of-time", name)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let failed = wait_final(&from, "out-of-time", Duration::from_secs(120)).await;
    assert_eq!(failed["status"]["phase"], "Failed", "{}", failed["status"]);
    assert_eq!(
        failed["status"]["migrationState"]["failureReason"],
        "Live migration is not completed after 1 sec and has been aborted",
        "{}",
        failed["status"]
    );
    still_runs(&from, name, "after-timeout").await;
    let up_before = from.uptime(name).await;

    let policy = json!({"apiVersion": "migrations.kubevirt.io/v1alpha1", "kind": "MigrationPolicy",
        "metadata": {"name": "may-pause"},
        "spec": {"selectors": {"virtualMachineInstanceSelector": {"disruption": "allowed"}},
                 "allowWorkloadDisruption": true}});
    let r = from
        .api
        .post(
            "/apis/migrations.kubevirt.io/v1alpha1/migrationpolicies",
            &policy,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let created = from.api.post(VMIMS, &migration("paused", name)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let done = wait_final(&from, "paused", Duration::from_secs(180)).await;
    let state = &done["status"]["migrationState"];
    assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
    assert_eq!(state["mode"], "Paused", "{state}");
    assert_eq!(state["migrationPolicyName"], "may-pause", "{state}");
    assert_eq!(state["targetNode"], to.node, "{state}");
    let vmi = to.vmi(name).await.expect("vmi");
    assert!(
        support::condition(&vmi, "Paused").is_none_or(|c| c["status"] != "True"),
        "the guest runs again after its move: {}",
        vmi["status"]
    );
    still_runs(&to, name, "after-pause").await;
    let up_after = to.uptime(name).await;
    assert!(
        up_after >= up_before,
        "rebooted: up {up_before} s, then {up_after} s"
    );
}
