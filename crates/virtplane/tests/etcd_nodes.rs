//! Node agents on two servers over one etcd, with real QEMU guests. Each server writes
//! kubeconfigs naming both (`--kubeconfig-server`, its own URL first), and one agent
//! joins through each, so the two agents talk to different servers. A running guest
//! moves live from one agent to the other; then the server of the guest's new node is
//! killed, and that agent moves to the surviving server without touching its guest: the
//! QEMU is the same process, the guest was not rebooted, the node keeps heart-beating,
//! its console answers through the survivor, and a VM created through the survivor starts
//! on it. Skipped loudly without etcd or QEMU; failed instead under CI or
//! VIRTPLANE_REQUIRE_QEMU.

mod qemu;
mod support;

use std::time::Duration;

use qemu::{guests, kernel_vm, Env, NodeAgent};
use reqwest::StatusCode;
use serde_json::{json, Value};
use store_etcd::testing::{etcd_or_skip, EtcdServer};
use support::{condition, free_port, uid, TestServer};

const VMIMS: &str = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations";

/// A server on `port` over `store` whose kubeconfigs name `own` first, then `peer`.
async fn server(port: u16, store: &str, own: &str, peer: &str, pki: Option<&str>) -> TestServer {
    let mut args = vec![
        "--no-node",
        "--store",
        store,
        "--kubeconfig-server",
        own,
        "--kubeconfig-server",
        peer,
    ];
    if let Some(pki) = pki {
        args.extend(["--pki-dir", pki]);
    }
    TestServer::start_on(port, &args).await
}

/// The Ready condition's last heartbeat of `node`, as the API shows it.
async fn heartbeat(env: &Env, node: &str) -> String {
    let node = env.api.get(&format!("/api/v1/nodes/{node}")).await.body;
    condition(&node, "Ready")
        .and_then(|c| c["lastHeartbeatTime"].as_str())
        .unwrap_or("")
        .to_string()
}

async fn migration_done(env: &Env, name: &str) -> Value {
    let path = format!("{VMIMS}/{name}");
    let done = env
        .api
        .eventually(&path, Duration::from_secs(120), |r| {
            matches!(
                r.body["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
        })
        .await;
    done.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_moves_to_the_surviving_server_and_its_guest_runs_on() {
    let Some(g) = guests() else { return };
    let Some(binary) = etcd_or_skip("etcd_nodes") else {
        return;
    };
    let etcd = EtcdServer::start(&binary).await;
    let store = format!("etcd={}", etcd.url);
    let (port_a, port_b) = (free_port(), free_port());
    let (url_a, url_b) = (
        format!("https://127.0.0.1:{port_a}"),
        format!("https://127.0.0.1:{port_b}"),
    );
    let mut server_a = server(port_a, &store, &url_a, &url_b, None).await;
    let pki = server_a.data_dir().join("pki").display().to_string();
    let mut server_b = server(port_b, &store, &url_b, &url_a, Some(&pki)).await;
    let host_disks = tempfile::tempdir().expect("host disk dir");
    let agent_args = [
        "--hypervisor",
        "qemu",
        "--insecure-registry",
        &g.registry,
        "--heartbeat-interval",
        "1s",
    ];
    // node-1 joins through A (A first in A's kubeconfig), node-2 through B.
    let node_1 = NodeAgent::start(server_a.data_dir(), "node-1", &agent_args);
    let node_2 = NodeAgent::start(server_b.data_dir(), "node-2", &agent_args);
    // A's admin credentials, good on both servers (one PKI).
    let credentials = server_a.data_dir().to_path_buf();
    let on = |url: &str, agent: &NodeAgent| {
        Env::new(url, &credentials, host_disks.path()).on_node(agent)
    };
    on(&url_a, &node_1).wait_node_ready().await;
    on(&url_a, &node_2).wait_node_ready().await;

    let name = "traveller";
    on(&url_a, &node_1)
        .create_vm(&kernel_vm(g, name, "Always", None))
        .await;
    let vmi = on(&url_a, &node_1).wait_running(name).await;
    let first_uid = uid(&vmi);
    let source = vmi["status"]["nodeName"]
        .as_str()
        .expect("node")
        .to_string();
    let (from, to) = if source == "node-1" {
        (&node_1, &node_2)
    } else {
        (&node_2, &node_1)
    };
    on(&url_a, from).wait_ready(name).await;
    let up_before = on(&url_a, from).uptime(name).await;

    // A live migration between agents attached to different servers.
    let vmim = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                      "metadata": {"name": "across"}, "spec": {"vmiName": name}});
    let created = on(&url_a, from).api.post(VMIMS, &vmim).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let done = migration_done(&on(&url_b, from), "across").await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
    assert_eq!(done["status"]["migrationState"]["targetNode"], to.name);
    let qemu_pid = on(&url_a, to).qemu_pid(name).expect("QEMU on the target");

    // The guest's node now talks to the server it joined through: kill that one.
    let (dead, survivor) = if to.name == "node-1" {
        (&mut server_a, url_b.clone())
    } else {
        (&mut server_b, url_a.clone())
    };
    let before_kill = heartbeat(&on(&survivor, to), &to.name).await;
    dead.kill9();
    let here = on(&survivor, to);
    let api = &here.api;
    let node_path = format!("/api/v1/nodes/{}", to.name);
    api.eventually(&node_path, Duration::from_secs(30), |r| {
        condition(&r.body, "Ready")
            .and_then(|c| c["lastHeartbeatTime"].as_str())
            .is_some_and(|t| t > before_kill.as_str())
    })
    .await;
    // Seconds later, the node is still Ready through the survivor.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = api.get(&node_path).await.body;
    assert_eq!(
        condition(&node, "Ready").map(|c| c["status"].clone()),
        Some(json!("True")),
        "{}",
        node["status"]
    );
    let vmi = here.vmi(name).await.expect("vmi");
    assert_eq!(uid(&vmi), first_uid, "the VMI was not made anew");
    assert_eq!(vmi["status"]["phase"], "Running", "{}", vmi["status"]);
    assert_eq!(vmi["status"]["nodeName"], to.name);
    assert_eq!(here.qemu_pid(name), Some(qemu_pid), "the same QEMU runs");
    assert!(qemu::alive(qemu_pid), "QEMU {qemu_pid} is gone");
    let up_after = here.uptime(name).await;
    assert!(
        up_after >= up_before,
        "rebooted: up {up_before} s, then {up_after} s"
    );

    // The agent's watches moved too: a VM made through the survivor starts on its node.
    let newcomer = "newcomer";
    let mut vm = kernel_vm(g, newcomer, "Always", None);
    vm["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": to.name});
    here.create_vm(&vm).await;
    let vmi = here.wait_running(newcomer).await;
    assert_eq!(vmi["status"]["nodeName"], to.name, "{}", vmi["status"]);
    here.wait_ready(newcomer).await;
}
