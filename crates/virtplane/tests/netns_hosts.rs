//! A node agent on a host of its own: a network namespace joined to this one by two veth
//! links, one to each of two servers over one etcd. The link to the agent's current server
//! is then cut silently (no reset, no ICMP: the wire goes dead, as when a host loses power),
//! while that server lives on. The agent must notice by itself, within seconds, and carry
//! on through the other server: its node keeps heart-beating, its VM keeps running, and a
//! VM created through the other server starts on it. Without keep-alives a watch on the
//! dead link would wait for minutes. Skipped loudly without etcd or without the rights to
//! make namespaces; failed instead under CI or VIRTPLANE_REQUIRE_QEMU.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use store_etcd::testing::{etcd_or_skip, required, EtcdServer};
use support::{binary, coll, condition, free_port, item, uid, vm, Api, TestServer};

/// A network namespace standing in for another host, with veth links to this one; all
/// of it removed on drop.
struct Host {
    name: String,
    links: Vec<Link>,
}

/// One veth pair: `outside` here, its peer inside the host, each end with an address.
struct Link {
    outside: String,
    outside_ip: String,
    inside_ip: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Host {
    /// A namespace with `links` veth links, link `i` on 10.(240+i).N.0/24 (N from the
    /// process id, so that concurrent test runs do not collide).
    fn create(links: usize) -> Result<Host, String> {
        let pid = std::process::id();
        let mut host = Host {
            name: format!("vp-host-{pid}"),
            links: Vec::new(),
        };
        ip(&["netns", "add", &host.name])?;
        ip(&["-n", &host.name, "link", "set", "lo", "up"])?;
        for i in 0..links {
            let subnet = format!("10.{}.{}", 240 + i, pid % 250);
            let (outside, inside) = (format!("vp{i}o{pid}"), format!("vp{i}i{pid}"));
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ])?;
            let link = Link {
                outside: outside.clone(),
                outside_ip: format!("{subnet}.1"),
                inside_ip: format!("{subnet}.2"),
            };
            host.links.push(link);
            ip(&["link", "set", &inside, "netns", &host.name])?;
            ip(&["addr", "add", &format!("{subnet}.1/24"), "dev", &outside])?;
            ip(&["link", "set", &outside, "up"])?;
            let inside_addr = format!("{subnet}.2/24");
            ip(&[
                "-n",
                &host.name,
                "addr",
                "add",
                &inside_addr,
                "dev",
                &inside,
            ])?;
            ip(&["-n", &host.name, "link", "set", &inside, "up"])?;
        }
        Ok(host)
    }

    /// Takes this side of link `i` down: the host's packets on it vanish without a word.
    fn cut(&self, i: usize) {
        ip(&["link", "set", &self.links[i].outside, "down"]).expect("cut the link");
    }

    /// `command` run inside the host.
    fn command(&self, program: &std::path::Path) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for link in &self.links {
            let _ = ip(&["link", "del", &link.outside]);
        }
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// The host, or `None` after saying loudly why not (a panic under CI).
fn host_or_skip(test: &str, links: usize) -> Option<Host> {
    match Host::create(links) {
        Ok(host) => Some(host),
        Err(why) if required() => {
            panic!("{test}: cannot make a network namespace ({why}), and VIRTPLANE_REQUIRE_QEMU or CI is set")
        }
        Err(why) => {
            eprintln!("SKIPPED: {test}: cannot make a network namespace ({why})");
            None
        }
    }
}

/// A VM that runs as soon as it is created.
fn always(name: &str) -> Value {
    let mut vm = vm(name);
    vm["spec"]["runStrategy"] = "Always".into();
    vm
}

async fn running_vmi(api: &Api, name: &str, within: Duration) -> Value {
    let path = item("default", "virtualmachineinstances", name);
    api.eventually(&path, within, |r| r.body["status"]["phase"] == "Running")
        .await
        .body
}

async fn last_heartbeat(api: &Api, node: &str) -> String {
    let node = api.get(&format!("/api/v1/nodes/{node}")).await.body;
    condition(&node, "Ready")
        .and_then(|c| c["lastHeartbeatTime"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Killed on drop.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_server_goes_silent_moves_on_by_itself() {
    let test = "netns_hosts";
    let Some(etcd_binary) = etcd_or_skip(test) else {
        return;
    };
    let Some(host) = host_or_skip(test, 2) else {
        return;
    };
    let etcd = EtcdServer::start(&etcd_binary).await;
    let store = format!("etcd={}", etcd.url);
    let (a, b) = (&host.links[0], &host.links[1]);
    let (port_a, port_b) = (free_port(), free_port());
    let url_a = format!("https://{}:{port_a}", a.outside_ip);
    let url_b = format!("https://{}:{port_b}", b.outside_ip);
    let server = |listen: String, port, own: String, peer: String, pki: Option<String>| {
        let store = store.clone();
        async move {
            let mut args = vec![
                "--no-node".to_string(),
                "--store".into(),
                store,
                "--kubeconfig-server".into(),
                own,
                "--kubeconfig-server".into(),
                peer,
            ];
            if let Some(pki) = pki {
                args.extend(["--pki-dir".into(), pki]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            TestServer::start_listening(&listen, port, &args).await
        }
    };
    let server_a = server(
        a.outside_ip.clone(),
        port_a,
        url_a.clone(),
        url_b.clone(),
        None,
    )
    .await;
    let pki = server_a.data_dir().join("pki").display().to_string();
    let server_b = server(
        b.outside_ip.clone(),
        port_b,
        url_b.clone(),
        url_a.clone(),
        Some(pki),
    )
    .await;
    // One PKI: A's admin credentials are good on both.
    let (api_a, api_b) = (
        Api::connect(&url_a, server_a.data_dir()),
        Api::connect(&url_b, server_a.data_dir()),
    );

    // The agent's host reaches A (first in its kubeconfig) and B each over its own link.
    let agent_dir = tempfile::tempdir().expect("agent data dir");
    let node = "far-node";
    let _agent = Agent(
        host.command(&binary())
            .arg("node")
            .arg("--kubeconfig")
            .arg(server_a.data_dir().join("node-join.kubeconfig"))
            .arg("--data-dir")
            .arg(agent_dir.path())
            .args(["--name", node, "--hypervisor", "sim"])
            .args(["--node-address", &b.inside_ip])
            .args(["--heartbeat-interval", "1s"])
            .args(["--sim-boot-delay", "100ms", "--sim-stop-delay", "100ms"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn virtplane node in the namespace"),
    );
    let node_path = format!("/api/v1/nodes/{node}");
    api_a
        .eventually(&node_path, Duration::from_secs(60), |r| {
            condition(&r.body, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .await;
    let vms = coll("default", "virtualmachines");
    let created = api_a.post(&vms, &always("resident")).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let resident = running_vmi(&api_a, "resident", Duration::from_secs(60)).await;
    assert_eq!(resident["status"]["nodeName"], node);

    // The wire to A goes dead; A itself lives on (it still holds its etcd session).
    let before_cut = last_heartbeat(&api_b, node).await;
    host.cut(0);
    let cut_at = Instant::now();
    let created = api_b.post(&vms, &always("newcomer")).await;
    assert_eq!(created.status, 201, "{}", created.text);
    // Only an agent watching through B sees the newcomer: A's watch is on the dead wire.
    let newcomer = running_vmi(&api_b, "newcomer", Duration::from_secs(90)).await;
    let moved_after = cut_at.elapsed();
    assert_eq!(newcomer["status"]["nodeName"], node);
    eprintln!("netns_hosts: a VM created after the cut ran after {moved_after:?}");

    // Its heartbeats come through B now, and its first VM was not touched.
    let deadline = Instant::now() + Duration::from_secs(30);
    while last_heartbeat(&api_b, node).await <= before_cut {
        assert!(
            Instant::now() < deadline,
            "no heartbeat from {node} after the cut"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let node_now = api_b.get(&node_path).await.body;
    assert_eq!(
        condition(&node_now, "Ready").map(|c| c["status"].clone()),
        Some("True".into()),
        "{node_now}"
    );
    let still = running_vmi(&api_b, "resident", Duration::from_secs(5)).await;
    assert_eq!(uid(&still), uid(&resident), "the resident VMI was replaced");
    drop(server_b);
    drop(server_a);
}
