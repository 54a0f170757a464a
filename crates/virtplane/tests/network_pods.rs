//! The pod network, black-box: two node agents, each in a network namespace standing in
//! for a host of its own, on one LAN (a bridge here) with the server. Each VMI runs in a
//! Pod on its node's bridge with an address of the node's subnet; a guest takes its
//! lease from the agent's DHCP server, answers at its Pod IP from outside the cluster
//! (this host routes to the nodes' subnets as a LAN router would) and from a guest on
//! the other node (host-gw routes between the nodes). Deleting a VM takes its Pod down
//! and frees its address. Skipped loudly without QEMU, root or nftables; failed
//! instead under CI or VIRTPLANE_REQUIRE_QEMU.

mod qemu;
mod support;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qemu::{guests, kernel_vm, Console, Env, Guests, NodeAgent, BOOT};
use serde_json::{json, Value};
use support::{free_port, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// The hosts' network: on one LAN (a bridge here holding `.1` of `10.250.N.0/24`, N
/// from the process id), or routed (each host on a network of its own,
/// `10.25{1+i}.N.0/24`, this host the router between them); a namespace per host. All of
/// it, and the routes added, removed on drop.
struct Lan {
    bridge: Option<String>,
    /// Each host's network prefix (`10.250.7`): one for all on a LAN.
    prefixes: Vec<String>,
    hosts: Vec<String>,
    routes: Vec<String>,
    /// Pod namespaces agents made here, removed should an agent die before it does.
    pods: Vec<String>,
    /// This host's forwarding as it was before it became the router.
    forwarding: Option<String>,
}

/// Which test a Lan is for.
#[derive(Clone, Copy)]
enum Tag {
    Pods,
    Routed,
    House,
    Policy,
}

impl Lan {
    /// Hosts on one LAN (`routed`: each on its own network); `tag` tells apart the
    /// names and networks of the Lans of one test process.
    fn create(hosts: usize, routed: bool, tag: Tag) -> Result<Lan, String> {
        let pid = std::process::id();
        let (tag, lan_octet) = match tag {
            Tag::Pods => ("l", 250),
            Tag::Routed => ("r", 0),
            Tag::House => ("h", 249),
            Tag::Policy => ("p", 248),
        };
        let mut lan = Lan {
            bridge: None,
            prefixes: (0..hosts)
                .map(|i| {
                    let second = if routed { 251 + i } else { lan_octet };
                    format!("10.{second}.{}", pid % 250)
                })
                .collect(),
            hosts: Vec::new(),
            routes: Vec::new(),
            pods: Vec::new(),
            forwarding: None,
        };
        if routed {
            let setting = "/proc/sys/net/ipv4/ip_forward";
            let before = std::fs::read_to_string(setting).map_err(|e| format!("{setting}: {e}"))?;
            std::fs::write(setting, "1").map_err(|e| format!("{setting}: {e}"))?;
            lan.forwarding = Some(before);
        } else {
            let bridge = format!("vplan{tag}{}", pid % 100_000);
            ip(&["link", "add", &bridge, "type", "bridge"])?;
            lan.bridge = Some(bridge.clone());
            ip(&[
                "addr",
                "add",
                &format!("{}/24", lan.gateway()),
                "dev",
                &bridge,
            ])?;
            ip(&["link", "set", &bridge, "up"])?;
        }
        for i in 0..hosts {
            let name = format!("vph{tag}{i}-{pid}");
            ip(&["netns", "add", &name])?;
            lan.hosts.push(name.clone());
            let outside = format!("vp{tag}{i}o{}", pid % 100_000);
            let inside = "lan0";
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", inside, "netns", &name,
            ])?;
            match &lan.bridge {
                Some(bridge) => ip(&["link", "set", &outside, "master", bridge])?,
                None => ip(&[
                    "addr",
                    "add",
                    &format!("{}/24", lan.router(i)),
                    "dev",
                    &outside,
                ])?,
            }
            ip(&["link", "set", &outside, "up"])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            let address = format!("{}/24", lan.address(i));
            ip(&["-n", &name, "addr", "add", &address, "dev", inside])?;
            ip(&["-n", &name, "link", "set", inside, "up"])?;
            ip(&[
                "-n",
                &name,
                "route",
                "add",
                "default",
                "via",
                &lan.router(i),
            ])?;
        }
        Ok(lan)
    }

    /// The address of host `i`.
    fn address(&self, i: usize) -> String {
        match self.bridge {
            Some(_) => format!("{}.{}", self.prefixes[i], i + 2),
            None => format!("{}.2", self.prefixes[i]),
        }
    }

    /// This host's address on host `i`'s network: its default gateway.
    fn router(&self, i: usize) -> String {
        format!("{}.1", self.prefixes[i])
    }

    /// An address of this host that every host reaches.
    fn gateway(&self) -> String {
        self.router(0)
    }

    /// Routes `subnet` through `via` here, as the LAN's router would.
    fn route(&mut self, subnet: &str, via: &str) {
        ip(&["route", "replace", subnet, "via", via]).expect("route to a node's subnet");
        self.routes.push(subnet.to_string());
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for route in &self.routes {
            let _ = ip(&["route", "del", route]);
        }
        for host in self.hosts.iter().chain(&self.pods) {
            let _ = ip(&["netns", "del", host]);
        }
        if let Some(bridge) = &self.bridge {
            let _ = ip(&["link", "del", bridge]);
        }
        if let Some(before) = &self.forwarding {
            let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", before);
        }
    }
}

fn required() -> bool {
    ["CI", "VIRTPLANE_REQUIRE_QEMU"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty() && v != "0"))
}

/// The LAN, or `None` after saying loudly why not (a panic under CI).
fn lan_or_skip(test: &str, routed: bool, tag: Tag) -> Option<Lan> {
    let nft = Command::new("nft").arg("--version").output();
    let made = match nft {
        Ok(out) if out.status.success() => Lan::create(2, routed, tag),
        _ => Err("nft (Debian's nftables) does not run".into()),
    };
    match made {
        Ok(lan) => Some(lan),
        Err(why) if required() => {
            panic!(
                "{test}: cannot build the hosts ({why}), and VIRTPLANE_REQUIRE_QEMU or CI is set"
            )
        }
        Err(why) => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {test}: cannot build the hosts ({why})"
            );
            None
        }
    }
}

/// Relays `listen` to `to`: the loopback registry, reachable from the hosts' namespaces.
async fn relay(listen: String, to: String) {
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .expect("relay listens");
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        let to = to.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(&to).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// What `address:port` answers to one connection, or `None` if nothing does.
async fn hello(address: &str, port: u16) -> Option<String> {
    let connect = tokio::net::TcpStream::connect((address, port));
    let mut stream = tokio::time::timeout(Duration::from_secs(3), connect)
        .await
        .ok()?
        .ok()?;
    stream.write_all(b"\n").await.ok()?;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
        .await
        .ok()?
        .ok()?;
    Some(answer.trim().to_string())
}

async fn node(env: &Env, name: &str, within: Duration) -> Value {
    let path = format!("/api/v1/nodes/{name}");
    env.api
        .eventually(&path, within, |r| {
            r.body["spec"]["podCIDR"].is_string()
                && r.body["metadata"]["labels"]["network.virtplane.io/mode"] == "pod"
                && support::condition(&r.body, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .await
        .body
}

/// A server on the hosts' network (`--no-node`) and an agent in each host, their Nodes
/// on the pod network with their subnets routed from this host.
struct Cluster {
    server: TestServer,
    /// The test registry, as the hosts reach it.
    registry: String,
    names: Vec<String>,
    agents: Vec<NodeAgent>,
    host_disks: tempfile::TempDir,
    env: Env,
    subnets: Vec<ipnet::Ipv4Net>,
}

impl Cluster {
    async fn start(g: &Guests, lan: &mut Lan, cluster_cidr: &str, tag: &str) -> Cluster {
        let pid = std::process::id();
        let server = TestServer::start_listening(
            &lan.gateway(),
            free_port(),
            &["--no-node", "--cluster-cidr", cluster_cidr],
        )
        .await;
        let registry = format!("{}:{}", lan.gateway(), free_port());
        tokio::spawn(relay(registry.clone(), g.registry.clone()));
        let names: Vec<String> = ["a", "b"]
            .iter()
            .map(|n| format!("{tag}-{n}-{pid}"))
            .collect();
        let agents: Vec<NodeAgent> = (0..2)
            .map(|i| {
                let address = lan.address(i);
                NodeAgent::start_in(
                    &lan.hosts[i],
                    server.data_dir(),
                    &names[i],
                    &[
                        "--pod-network",
                        "pod",
                        "--listen",
                        &format!("{address}:0"),
                        "--node-address",
                        &address,
                        "--insecure-registry",
                        &registry,
                        "--heartbeat-interval",
                        "2s",
                    ],
                )
            })
            .collect();
        let host_disks = tempfile::tempdir().unwrap();
        let env = Env::new(&server.url, server.data_dir(), host_disks.path());
        let mut subnets = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let node = node(&env, name, Duration::from_secs(60)).await;
            let subnet = node["spec"]["podCIDR"].as_str().unwrap().to_string();
            assert!(
                subnet.starts_with(&cluster_cidr[..cluster_cidr.len() - 6]),
                "{subnet}"
            );
            lan.route(&subnet, &lan.address(i));
            subnets.push(subnet.parse::<ipnet::Ipv4Net>().unwrap());
        }
        Cluster {
            server,
            registry,
            names,
            agents,
            host_disks,
            env,
            subnets,
        }
    }
}

/// The guest `from` fetches port 8080 of `address` and reads the VM `to`'s greeting.
async fn reaches(env: &Env, from: &str, address: &str, to: &str) {
    let mut console = env.console(from).await.expect("a console");
    let answer = console
        .run(
            &format!("nc {address} 8080 </dev/null"),
            &format!("hello from {to}"),
            Duration::from_secs(60),
        )
        .await;
    assert!(
        answer.is_some(),
        "{from} could not reach {to}: {}",
        console.seen
    );
    console.close().await;
}

/// A VM of the test guest serving port 8080 on `node`, its kernel from `registry`.
fn web_vm(g: &Guests, registry: &str, name: &str, node: &str) -> Value {
    let mut vm = kernel_vm(g, name, "Always", Some("#virtplane: serve 8080\n"));
    let spec = &mut vm["spec"]["template"]["spec"];
    spec["domain"]["firmware"]["kernelBoot"]["container"]["image"] =
        json!(g.kernel_image().replace(&g.registry, registry));
    spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    vm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_on_two_nodes_reach_each_other_and_are_reached_at_their_pod_ips() {
    let Some(g) = guests() else { return };
    let test = "guests_on_two_nodes_reach_each_other_and_are_reached_at_their_pod_ips";
    let Some(mut lan) = lan_or_skip(test, false, Tag::Pods) else {
        return;
    };
    let pid = std::process::id();
    let cluster_cidr = format!("10.{}.0.0/16", 120 + pid % 100);
    let Cluster {
        server,
        registry,
        names,
        mut agents,
        host_disks,
        env,
        subnets,
    } = Cluster::start(g, &mut lan, &cluster_cidr, "pods").await;

    // One VM per node, each serving port 8080.
    let vms = ["web-a", "web-b"];
    for (i, vm_name) in vms.iter().enumerate() {
        let mut vm = web_vm(g, &registry, vm_name, &names[i]);
        vm["spec"]["template"]["metadata"]["labels"]["app"] = json!("web");
        let key = format!("{}/{vm_name}", qemu::NS);
        lan.pods.push(network::node::pod_names(&names[i], &key).0);
        env.create_vm(&vm).await;
    }
    let mut addresses = Vec::new();
    for (i, vm_name) in vms.iter().enumerate() {
        let vmi = env.wait_running(vm_name).await;
        assert_eq!(vmi["status"]["nodeName"], names[i].as_str());
        let iface = &vmi["status"]["interfaces"][0];
        let address: Ipv4Addr = iface["ipAddress"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no Pod IP in {}", vmi["status"]));
        assert!(
            subnets[i].contains(&address),
            "{vm_name} has {address}, not in its node's {}",
            subnets[i]
        );
        assert_eq!(iface["ipAddresses"], json!([address.to_string()]));
        assert!(vmi["status"]["portForwards"].is_null(), "{}", vmi["status"]);
        addresses.push(address.to_string());
        Env::new(&server.url, server.data_dir(), host_disks.path())
            .on_node(&agents[i])
            .wait_guest_line(vm_name, "virtplane-guest: serve 8080", BOOT)
            .await;
    }

    // Each VMI has its virt-launcher Pod on its node, with the VMI's IP.
    for (i, vm_name) in vms.iter().enumerate() {
        let pods = env
            .api
            .eventually(
                &format!(
                    "/api/v1/namespaces/default/pods?labelSelector=vm.kubevirt.io/name={vm_name}"
                ),
                Duration::from_secs(30),
                |r| r.body["items"][0]["status"]["podIP"] == addresses[i].as_str(),
            )
            .await
            .body;
        let pod = &pods["items"][0];
        assert_eq!(pods["items"].as_array().unwrap().len(), 1, "{pods}");
        let name = pod["metadata"]["name"].as_str().unwrap();
        assert!(
            name.starts_with(&format!("virt-launcher-{vm_name}-")),
            "{name}"
        );
        assert_eq!(pod["spec"]["nodeName"], names[i].as_str());
        assert_eq!(pod["status"]["phase"], "Running");
        assert_eq!(pod["metadata"]["labels"]["kubevirt.io"], "virt-launcher");
        assert_eq!(pod["metadata"]["labels"]["kubevirt.io/vm"], *vm_name);
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["kind"],
            "VirtualMachineInstance"
        );
        assert_eq!(pod["status"]["hostIP"], lan.address(i).as_str());
    }
    let kubeconfig = server.data_dir().join("admin.kubeconfig");
    match Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "pods", "-o", "wide"])
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let header = text.lines().next().unwrap_or("");
            assert!(
                header
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .starts_with(&["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]),
                "{text}"
            );
            let row = text
                .lines()
                .find(|l| l.starts_with("virt-launcher-web-a-"))
                .unwrap_or_else(|| panic!("{text}"));
            let cells: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(&cells[1..3], ["2/2", "Running"], "{row}");
            assert_eq!(cells[5], addresses[0], "{row}");
            assert_eq!(cells[6], names[0], "{row}");
        }
        Err(e) if required() => panic!("kubectl cannot run: {e}"),
        Err(e) => eprintln!("SKIPPED: kubectl get pods: {e}"),
    }
    // `kubectl logs` of a launcher Pod: the guest's serial console, as KubeVirt's
    // guest-console-log container, through the node agent.
    let launcher = env
        .api
        .get("/api/v1/namespaces/default/pods?labelSelector=vm.kubevirt.io/name=web-a")
        .await
        .body["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let log = env
        .api
        .get(&format!(
            "/api/v1/namespaces/default/pods/{launcher}/log?container=guest-console-log"
        ))
        .await;
    assert_eq!(log.status, 200, "{}", log.text);
    assert!(
        log.text.contains("virtplane-guest: serve 8080"),
        "{}",
        log.text
    );
    let last = env
        .api
        .get(&format!(
            "/api/v1/namespaces/default/pods/{launcher}/log?container=guest-console-log&tailLines=1"
        ))
        .await;
    assert_eq!(last.text.trim_end().lines().count(), 1, "{}", last.text);
    let wrong = env
        .api
        .get(&format!(
            "/api/v1/namespaces/default/pods/{launcher}/log?container=nope"
        ))
        .await;
    assert_eq!(wrong.status, 400, "{}", wrong.text);
    match Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["logs", &launcher, "-c", "guest-console-log"])
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("virtplane-guest: ready"),
                "kubectl logs: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(e) if required() => panic!("kubectl cannot run: {e}"),
        Err(e) => eprintln!("SKIPPED: kubectl logs: {e}"),
    }

    // From outside the cluster, at each Pod IP: the guest answers (DNAT to 10.0.2.2).
    for (vm_name, address) in vms.iter().zip(&addresses) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match hello(address, 8080).await {
                Some(answer) if answer == format!("hello from {vm_name}") => break,
                other => assert!(
                    Instant::now() < deadline,
                    "{vm_name} at {address}:8080 answered {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    // Guest to guest across the nodes: web-b fetches from web-a's Pod IP, and the
    // guest learned its name from our DHCP server's lease.
    reaches(&env, "web-b", &addresses[0], "web-a").await;
    let mut console = env.console("web-b").await.expect("console of web-b");
    let named = console
        .run(
            "echo name=$(hostname)",
            "name=web-b",
            Duration::from_secs(30),
        )
        .await;
    assert!(named.is_some(), "web-b's hostname: {}", console.seen);
    console.close().await;

    // Port-forward through the API (virtctl port-forward's websocket), to a VMI and to
    // a VM: server -> agent -> the Pod IP.
    for (resource, name, which) in [
        ("virtualmachineinstances", "web-a", "portforward/8080/tcp"),
        ("virtualmachines", "web-b", "portforward/8080"),
    ] {
        let mut forward = Console::open_at(&env, resource, name, which)
            .await
            .unwrap_or_else(|e| panic!("{resource}/{name}/{which}: {e}"));
        forward.send("\n").await;
        assert!(
            forward
                .read_until(0, &format!("hello from {name}"), Duration::from_secs(20))
                .await,
            "{resource}/{name}/{which} answered {:?}",
            forward.seen
        );
        forward.close().await;
    }
    // `virtplane vm port-forward`, as `virtctl port-forward`: a local port to the VM's.
    let local = free_port();
    let mut forwarder = Command::new(support::binary())
        .args([
            "vm",
            "port-forward",
            "web-a",
            &format!("{local}:8080"),
            "--kubeconfig",
        ])
        .arg(server.data_dir().join("admin.kubeconfig"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("virtplane vm port-forward");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match hello("127.0.0.1", local).await {
            Some(answer) if answer == "hello from web-a" => break,
            other => assert!(
                Instant::now() < deadline,
                "virtplane vm port-forward answered {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let _ = forwarder.kill();
    let _ = forwarder.wait();
    let refused = Console::open(&env, "web-a", "portforward/9999/tcp").await;
    let Err(why) = refused else {
        panic!("a port nothing listens on was forwarded");
    };
    assert!(why.contains("HTTP 503") && why.contains("9999"), "{why}");
    let bad = Console::open(&env, "web-a", "portforward/99999").await;
    assert!(
        matches!(&bad, Err(why) if why.contains("HTTP 400") && why.contains("invalid port")),
        "{:?}",
        bad.err()
    );

    // KubeVirt's bridge binding: the guest takes the Pod's own address by DHCP, answers
    // on every port at it, and is not live-migratable on the pod network.
    let mut bridged = kernel_vm(g, "bridged", "Always", Some("#virtplane: serve 8080\n"));
    let spec = &mut bridged["spec"]["template"]["spec"];
    spec["domain"]["firmware"]["kernelBoot"]["container"]["image"] =
        json!(g.kernel_image().replace(&g.registry, &registry));
    spec["domain"]["devices"]["interfaces"] = json!([{"name": "default", "bridge": {}}]);
    spec["nodeSelector"] = json!({"kubernetes.io/hostname": names[0]});
    lan.pods
        .push(network::node::pod_names(&names[0], &format!("{}/bridged", qemu::NS)).0);
    env.create_vm(&bridged).await;
    let vmi = env.wait_running("bridged").await;
    let bridged_ip = vmi["status"]["interfaces"][0]["ipAddress"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        subnets[0].contains(&bridged_ip.parse::<Ipv4Addr>().unwrap()),
        "{bridged_ip}"
    );
    let lines = Env::new(&server.url, server.data_dir(), host_disks.path())
        .on_node(&agents[0])
        .wait_guest_line("bridged", "virtplane-guest: serve 8080", BOOT)
        .await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("virtplane-guest: ip eth0 {bridged_ip}"))),
        "the bridged guest did not take its Pod IP {bridged_ip} by DHCP: {lines:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while hello(&bridged_ip, 8080).await.as_deref() != Some("hello from bridged") {
        assert!(
            Instant::now() < deadline,
            "the bridged guest does not answer at {bridged_ip}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let migratable = vmi["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "LiveMigratable"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(migratable["status"], "False", "{}", vmi["status"]);
    env.delete_vm("bridged").await;
    env.wait_vmi_gone("bridged", Duration::from_secs(60)).await;

    // A Service over both guests (as `virtctl expose` makes one), by its cluster IP from
    // a guest and by its node port from outside; a Service without endpoints refuses.
    let web = env
        .api
        .create(
            "/api/v1/namespaces/default/services",
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                    "spec": {"type": "NodePort", "selector": {"app": "web"},
                             "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
        )
        .await;
    let cluster_ip = web["spec"]["clusterIP"].as_str().unwrap().to_string();
    let node_port = web["spec"]["ports"][0]["nodePort"].as_u64().unwrap() as u16;
    env.api
        .eventually(
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io/service-name=web",
            Duration::from_secs(30),
            |r| r.body["items"][0]["endpoints"].as_array().is_some_and(|e| e.len() == 2),
        )
        .await;
    let mut console = env.console("web-b").await.expect("console of web-b");
    let seen = console
        .run(
            &format!("for i in 1 2 3 4 5 6; do nc {cluster_ip} 80 </dev/null; done"),
            "hello from web-",
            Duration::from_secs(60),
        )
        .await;
    assert!(
        seen.is_some(),
        "the cluster IP {cluster_ip} did not answer web-b: {}",
        console.seen
    );
    // Cluster DNS from the node, as the guest's lease names it: the Service's name (through
    // the search domains our DHCP gave), its full name, and a name outside the cluster
    // refused by nobody but answered (NXDOMAIN from upstream or an address) or failed.
    for name in ["web", "web.default.svc.cluster.local"] {
        let from = console.seen.len();
        console.send(&format!("nslookup {name}\n")).await;
        assert!(
            console
                .read_until(
                    from,
                    &format!("Address: {cluster_ip}"),
                    Duration::from_secs(30)
                )
                .await,
            "nslookup {name} in web-b: {}",
            &console.seen[from..]
        );
    }
    let from = console.seen.len();
    console
        .send("nslookup nothing.default.svc.cluster.local; echo done-$?\n")
        .await;
    assert!(
        console
            .read_until(from, "done-1", Duration::from_secs(30))
            .await,
        "a missing cluster name resolved: {}",
        &console.seen[from..]
    );
    console.close().await;
    for i in 0..2 {
        let node = lan.address(i);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match hello(&node, node_port).await {
                Some(answer) if answer.starts_with("hello from web-") => break,
                other => assert!(
                    Instant::now() < deadline,
                    "node port {node}:{node_port} answered {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let lonely = env
        .api
        .create(
            "/api/v1/namespaces/default/services",
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lonely"},
                    "spec": {"type": "NodePort", "selector": {"app": "nobody"},
                             "ports": [{"port": 80}]}}),
        )
        .await;
    let lonely_port = lonely["spec"]["ports"][0]["nodePort"].as_u64().unwrap() as u16;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let refused = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect((lan.address(0).as_str(), lonely_port)),
        )
        .await;
        match refused {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            other => assert!(
                Instant::now() < deadline,
                "a Service without endpoints answered {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // An agent killed and started again finds its Pods as they were: the guest answers
    // at the same address, which stays held, and nothing is made twice.
    let held_b = agents[1]
        .data_dir()
        .join("node")
        .join(&names[1])
        .join("network/ipam")
        .join(&addresses[1]);
    let count = |dir: &std::path::Path| std::fs::read_dir(dir).map_or(0, |d| d.count());
    let ipam_files = count(held_b.parent().unwrap());
    agents[1].restart();
    node(&env, &names[1], Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if hello(&addresses[1], 8080).await.as_deref() == Some("hello from web-b") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "web-b stopped answering after its agent restarted"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        held_b.exists(),
        "{} was freed by the restart",
        held_b.display()
    );
    assert_eq!(
        count(held_b.parent().unwrap()),
        ipam_files,
        "the restart handed out addresses"
    );

    // A guest that moves: live-migrated to the other node, it gets a Pod there with an
    // address of that node's subnet, goes on answering at it, and its Service follows.
    let mut mover = kernel_vm(g, "mover", "Always", Some("#virtplane: serve 8080\n"));
    mover["spec"]["template"]["spec"]["domain"]["firmware"]["kernelBoot"]["container"]["image"] =
        json!(g.kernel_image().replace(&g.registry, &registry));
    mover["spec"]["template"]["metadata"]["labels"]["app"] = json!("mover");
    let key = format!("{}/mover", qemu::NS);
    for name in &names {
        lan.pods.push(network::node::pod_names(name, &key).0);
    }
    env.create_vm(&mover).await;
    let vmi = env.wait_running("mover").await;
    let from = names
        .iter()
        .position(|n| vmi["status"]["nodeName"] == n.as_str())
        .expect("mover on one of the nodes");
    let to = 1 - from;
    Env::new(&server.url, server.data_dir(), host_disks.path())
        .on_node(&agents[from])
        .wait_guest_line("mover", "virtplane-guest: serve 8080", BOOT)
        .await;
    let before = vmi["status"]["interfaces"][0]["ipAddress"]
        .as_str()
        .unwrap()
        .to_string();
    let moving = env
        .api
        .create(
            "/api/v1/namespaces/default/services",
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mover"},
                    "spec": {"type": "NodePort", "selector": {"app": "mover"},
                             "ports": [{"port": 80, "targetPort": 8080}]}}),
        )
        .await;
    let mover_port = moving["spec"]["ports"][0]["nodePort"].as_u64().unwrap() as u16;
    env.api
        .create(
            "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations",
            &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                    "metadata": {"name": "move"}, "spec": {"vmiName": "mover"}}),
        )
        .await;
    let moved = env
        .api
        .eventually(
            "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/mover",
            BOOT,
            |r| {
                r.body["status"]["nodeName"] == names[to].as_str()
                    && r.body["status"]["migrationState"]["completed"] == true
                    && r.body["status"]["interfaces"][0]["ipAddress"]
                        .as_str()
                        .is_some_and(|ip| ip != before)
            },
        )
        .await
        .body;
    let after = moved["status"]["interfaces"][0]["ipAddress"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        subnets[to].contains(&after.parse::<Ipv4Addr>().unwrap()),
        "after the move {after} is not in {}",
        subnets[to]
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let direct = hello(&after, 8080).await;
        let by_service = hello(&lan.address(from), mover_port).await;
        if direct.as_deref() == Some("hello from mover")
            && by_service.as_deref() == Some("hello from mover")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the move: Pod IP {after} answered {direct:?}, the Service {by_service:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pods = env
        .api
        .eventually(
            "/api/v1/namespaces/default/pods?labelSelector=vm.kubevirt.io/name=mover",
            Duration::from_secs(30),
            |r| {
                r.body["items"].as_array().is_some_and(|items| {
                    items.len() == 1 && items[0]["spec"]["nodeName"] == names[to].as_str()
                })
            },
        )
        .await;
    assert_eq!(pods.body["items"][0]["status"]["podIP"], after.as_str());
    env.delete_vm("mover").await;
    env.wait_vmi_gone("mover", Duration::from_secs(60)).await;

    // Deleting a VM takes its Pod down: its address is free again on its node.
    let ipam = agents[0]
        .data_dir()
        .join("node")
        .join(&names[0])
        .join("network/ipam")
        .join(&addresses[0]);
    assert!(ipam.exists(), "{} is not held", ipam.display());
    env.delete_vm("web-a").await;
    env.wait_vmi_gone("web-a", Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ipam.exists() {
        assert!(
            Instant::now() < deadline,
            "{} was never freed",
            ipam.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(hello(&addresses[0], 8080).await, None);
    let pods = env
        .api
        .eventually(
            "/api/v1/namespaces/default/pods?labelSelector=vm.kubevirt.io/name=web-a",
            Duration::from_secs(30),
            |r| r.body["items"].as_array().is_some_and(Vec::is_empty),
        )
        .await;
    assert_eq!(pods.body["items"], json!([]));
    env.delete_vm("web-b").await;
    env.wait_vmi_gone("web-b", Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while held_b.exists() {
        assert!(
            Instant::now() < deadline,
            "{} was never freed",
            held_b.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (netns_b, _) = network::node::pod_names(&names[1], &format!("{}/web-b", qemu::NS));
    assert!(
        !std::path::Path::new("/run/netns").join(&netns_b).exists(),
        "the Pod namespace {netns_b} of a deleted VMI is left"
    );
    drop(agents);
}

/// Nodes on networks of their own, this host routing between them: no route through
/// the other node can work, so each node reaches the other's subnet through its VXLAN
/// device (flannel's vxlan), and the guests reach each other by Pod IP all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_on_nodes_without_a_shared_link_reach_each_other_over_vxlan() {
    let Some(g) = guests() else { return };
    let test = "guests_on_nodes_without_a_shared_link_reach_each_other_over_vxlan";
    let Some(mut lan) = lan_or_skip(test, true, Tag::Routed) else {
        return;
    };
    let cluster_cidr = format!("10.{}.0.0/16", 30 + std::process::id() % 50);
    let Cluster {
        server,
        registry,
        names,
        agents,
        host_disks,
        env,
        subnets,
    } = Cluster::start(g, &mut lan, &cluster_cidr, "vx").await;
    let vms = ["far-a", "far-b"];
    for (i, vm_name) in vms.iter().enumerate() {
        let key = format!("{}/{vm_name}", qemu::NS);
        lan.pods.push(network::node::pod_names(&names[i], &key).0);
        env.create_vm(&web_vm(g, &registry, vm_name, &names[i]))
            .await;
    }
    let mut addresses = Vec::new();
    for (i, vm_name) in vms.iter().enumerate() {
        let vmi = env.wait_running(vm_name).await;
        let address = vmi["status"]["interfaces"][0]["ipAddress"]
            .as_str()
            .unwrap_or_else(|| panic!("no Pod IP in {}", vmi["status"]))
            .to_string();
        assert!(subnets[i].contains(&address.parse::<Ipv4Addr>().unwrap()));
        addresses.push(address);
        Env::new(&server.url, server.data_dir(), host_disks.path())
            .on_node(&agents[i])
            .wait_guest_line(vm_name, "virtplane-guest: serve 8080", BOOT)
            .await;
    }
    // Each host routes the other's subnet through its VXLAN device.
    for (i, host) in lan.hosts.iter().enumerate() {
        let device = network::vxlan::device_name(&names[i]);
        let out = Command::new("ip")
            .args(["-n", host, "route", "show", &subnets[1 - i].to_string()])
            .output()
            .unwrap();
        let route = String::from_utf8_lossy(&out.stdout);
        assert!(
            route.contains(&format!("dev {device}")) && route.contains("onlink"),
            "{host}: {route}"
        );
    }
    reaches(&env, "far-b", &addresses[0], "far-a").await;
    for vm_name in vms {
        env.delete_vm(vm_name).await;
    }
}

/// A LAN beside the cluster (a house network): a namespace with a bridge holding
/// `.1` of `192.168.N.0/24` and dnsmasq serving DHCP on it, and on each host a bridge
/// `brlan` joined to it, as each host's NIC would be. Removed on drop.
struct HouseLan {
    netns: String,
    prefix: String,
    dnsmasq: std::process::Child,
    _leases: tempfile::TempDir,
}

impl HouseLan {
    fn create(lan: &Lan) -> Result<HouseLan, String> {
        let pid = std::process::id();
        let netns = format!("vphouse-{pid}");
        let prefix = format!("192.168.{}", 100 + pid % 100);
        ip(&["netns", "add", &netns])?;
        ip(&["-n", &netns, "link", "add", "house0", "type", "bridge"])?;
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{prefix}.1/24"),
            "dev",
            "house0",
        ])?;
        ip(&["-n", &netns, "link", "set", "house0", "up"])?;
        for (i, host) in lan.hosts.iter().enumerate() {
            ip(&["-n", host, "link", "add", "brlan", "type", "bridge"])?;
            ip(&["-n", host, "link", "set", "brlan", "up"])?;
            let (here, there) = (format!("uplink{i}"), format!("port{i}"));
            ip(&[
                "-n", host, "link", "add", &here, "type", "veth", "peer", "name", &there, "netns",
                &netns,
            ])?;
            ip(&["-n", host, "link", "set", &here, "master", "brlan", "up"])?;
            ip(&[
                "-n", &netns, "link", "set", &there, "master", "house0", "up",
            ])?;
        }
        let leases = tempfile::tempdir().map_err(|e| e.to_string())?;
        let dnsmasq = Command::new("ip")
            .args(["netns", "exec", &netns, "dnsmasq", "--keep-in-foreground"])
            .args([
                "--no-resolv",
                "--no-hosts",
                "--port=0",
                "--interface=house0",
            ])
            .arg("--bind-interfaces")
            .arg(format!("--dhcp-range={prefix}.100,{prefix}.150,1h"))
            .arg(format!(
                "--dhcp-leasefile={}",
                leases.path().join("leases").display()
            ))
            .arg(format!(
                "--pid-file={}",
                leases.path().join("pid").display()
            ))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("dnsmasq: {e}"))?;
        Ok(HouseLan {
            netns,
            prefix,
            dnsmasq,
            _leases: leases,
        })
    }

    /// What `address:port` answers from the house LAN, or `None`.
    fn hello(&self, address: &str, port: u16) -> Option<String> {
        use std::io::{Read, Write};
        let to: std::net::SocketAddr = format!("{address}:{port}").parse().ok()?;
        let answer = network::netns::NetNs::named(&self.netns)
            .run(move || -> std::io::Result<String> {
                let mut stream = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(3))?;
                stream.set_read_timeout(Some(Duration::from_secs(5)))?;
                stream.write_all(b"\n")?;
                let mut text = String::new();
                stream.read_to_string(&mut text)?;
                Ok(text)
            })
            .ok()?
            .ok()?;
        Some(answer.trim().to_string())
    }
}

impl Drop for HouseLan {
    fn drop(&mut self) {
        let _ = self.dnsmasq.kill();
        let _ = self.dnsmasq.wait();
        let _ = ip(&["netns", "del", &self.netns]);
    }
}

/// The address the guest's serial console says `ifc` took, once it says so.
async fn guest_address(env: &Env, vm: &str, ifc: &str, within: Duration) -> String {
    let said = format!("virtplane-guest: ip {ifc} ");
    let deadline = Instant::now() + within;
    loop {
        if let Some(line) = env.guest_lines(vm).iter().find(|l| l.starts_with(&said)) {
            return line[said.len()..].trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "{vm} never said which address {ifc} took: {:?}",
            env.guest_lines(vm)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A guest on a LAN beside the cluster, through a NetworkAttachmentDefinition of the
/// CNI bridge plugin (KubeVirt's `multus` network with the `bridge` binding): it takes
/// its address from the LAN's own DHCP server (dnsmasq), answers there, keeps it across
/// a live migration to the other node (which has the bridge too), and what cannot be
/// attached says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_on_a_lan_bridge_takes_the_lans_lease_and_keeps_it_across_a_migration() {
    let Some(g) = guests() else { return };
    let test = "a_guest_on_a_lan_bridge_takes_the_lans_lease_and_keeps_it_across_a_migration";
    let dnsmasq = Command::new("dnsmasq").arg("--version").output();
    if !dnsmasq.is_ok_and(|o| o.status.success()) {
        if required() {
            panic!("{test}: dnsmasq (Debian's dnsmasq-base) does not run, and CI or VIRTPLANE_REQUIRE_QEMU is set");
        }
        eprintln!("SKIPPED: {test}: dnsmasq (Debian's dnsmasq-base) does not run");
        return;
    }
    let Some(mut lan) = lan_or_skip(test, false, Tag::House) else {
        return;
    };
    let house = HouseLan::create(&lan).expect("the house LAN");
    let cluster_cidr = format!("10.{}.0.0/16", 80 + std::process::id() % 15);
    let Cluster {
        server,
        registry,
        names,
        agents,
        host_disks,
        env,
        ..
    } = Cluster::start(g, &mut lan, &cluster_cidr, "lan").await;

    // Kube's validation of a NetworkAttachmentDefinition's CNI configuration.
    let nads = "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions";
    let broken = env
        .api
        .post(
            nads,
            &json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                    "metadata": {"name": "broken"}, "spec": {"config": "{\"type\": "}}),
        )
        .await;
    assert_eq!(broken.status, 422, "{}", broken.text);
    assert!(broken.text.contains("spec.config"), "{}", broken.text);
    for (name, bridge) in [("lan", "brlan"), ("nowhere", "brnone")] {
        let config = json!({"cniVersion": "0.3.1", "type": "bridge", "bridge": bridge});
        env.api
            .create(
                nads,
                &json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                        "metadata": {"name": name}, "spec": {"config": config.to_string()}}),
            )
            .await;
    }

    let on_lan = |vm_name: &str, network: &str| {
        let mut vm = web_vm(g, &registry, vm_name, &names[0]);
        let spec = &mut vm["spec"]["template"]["spec"];
        spec["domain"]["devices"]["interfaces"] = json!([
            {"name": "default", "masquerade": {}},
            {"name": "house", "bridge": {}, "macAddress": "02:5a:00:00:00:01"}
        ]);
        spec["networks"] = json!([
            {"name": "default", "pod": {}},
            {"name": "house", "multus": {"networkName": network}}
        ]);
        vm
    };
    for name in &names {
        for vm in ["lanvm", "lost", "nobridge"] {
            let key = format!("{}/{vm}", qemu::NS);
            lan.pods.push(network::node::pod_names(name, &key).0);
        }
    }
    // Free to move: on whichever node, then to the other.
    let mut movable = on_lan("lanvm", "lan");
    movable["spec"]["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("nodeSelector");
    env.create_vm(&movable).await;
    env.create_vm(&on_lan("lost", "default/nope")).await;
    env.create_vm(&on_lan("nobridge", "nowhere")).await;

    // A network whose definition is missing, or whose bridge this node lacks: said so.
    for (vm, words) in [
        (
            "lost",
            "failed to locate network attachment definition default/nope",
        ),
        ("nobridge", "brnone"),
    ] {
        env.api
            .eventually(
                &format!("/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/{vm}"),
                Duration::from_secs(60),
                |r| r.body["status"].to_string().contains(words),
            )
            .await;
    }
    let (half_made, _) = network::node::pod_names(&names[0], &format!("{}/nobridge", qemu::NS));
    assert!(
        !std::path::Path::new("/run/netns").join(&half_made).exists(),
        "the Pod of a VMI whose network could not be attached is left"
    );

    let vmi = env.wait_running("lanvm").await;
    let from = names
        .iter()
        .position(|n| vmi["status"]["nodeName"] == n.as_str())
        .expect("lanvm on one of the nodes");
    let to = 1 - from;
    let on_a = Env::new(&server.url, server.data_dir(), host_disks.path()).on_node(&agents[from]);
    let address = guest_address(&on_a, "lanvm", "eth1", BOOT).await;
    assert!(
        address.starts_with(&format!("{}.", house.prefix)),
        "eth1 took {address}, not an address of the house LAN"
    );
    on_a.wait_guest_line("lanvm", "virtplane-guest: serve 8080", BOOT)
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while house.hello(&address, 8080).as_deref() != Some("hello from lanvm") {
        assert!(
            Instant::now() < deadline,
            "lanvm does not answer at {address} on the house LAN"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let vmi = env.wait_running("lanvm").await;
    assert_eq!(vmi["status"]["interfaces"][1]["mac"], "02:5a:00:00:00:01");

    // Live-migrated to the other node, which has the bridge too: same MAC, same address.
    env.api
        .create(
            "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations",
            &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                    "metadata": {"name": "lanvm-move"}, "spec": {"vmiName": "lanvm"}}),
        )
        .await;
    let deadline = Instant::now() + BOOT;
    loop {
        let vmi = env
            .api
            .get("/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/lanvm")
            .await
            .body;
        if vmi["status"]["nodeName"] == names[to].as_str()
            && vmi["status"]["migrationState"]["completed"] == true
        {
            break;
        }
        if Instant::now() > deadline {
            let migration = env
                .api
                .get("/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations/lanvm-move")
                .await;
            panic!(
                "lanvm did not move: VMI status {}\nmigration {}",
                vmi["status"], migration.text
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while house.hello(&address, 8080).as_deref() != Some("hello from lanvm") {
        assert!(
            Instant::now() < deadline,
            "after its migration lanvm does not answer at {address} on the house LAN"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for vm in ["lanvm", "lost", "nobridge"] {
        env.delete_vm(vm).await;
    }
}

/// Whether the guest `from` gets a greeting from port 8080 of `address` (asked with a
/// 2 s timeout; the answer is read, so a slow console is not taken for a refusal).
/// Waits (up to a minute) until the agent running `vm` serves its console again.
async fn console_serves(env: &Env, vm: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match env.console(vm).await {
            Ok(console) => return console.close().await,
            Err(e) if Instant::now() < deadline => {
                eprintln!("{vm}'s agent not serving yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{vm}'s agent did not come back: {e}"),
        }
    }
}

/// The policy table of the host `netns`, without counters, if it has one.
fn policy_table(netns: &str) -> Option<String> {
    let tables = Command::new("ip")
        .args(["netns", "exec", netns, "nft", "list", "tables"])
        .output()
        .expect("nft list tables");
    let listed = String::from_utf8_lossy(&tables.stdout);
    let name = listed
        .lines()
        .filter_map(|l| l.strip_prefix("table ip "))
        .find(|t| t.ends_with("_pol"))?
        .to_string();
    let table = Command::new("ip")
        .args([
            "netns", "exec", netns, "nft", "-s", "list", "table", "ip", &name,
        ])
        .output()
        .expect("nft list table");
    table
        .status
        .success()
        .then(|| String::from_utf8_lossy(&table.stdout).into_owned())
}

async fn guest_reaches(env: &Env, from: &str, address: &str) -> bool {
    let mut console = env.console(from).await.expect("a console");
    let said = console
        .run(
            &format!("echo REACH-$(nc -w 2 {address} 8080 </dev/null | grep -c hello)"),
            "REACH-",
            Duration::from_secs(30),
        )
        .await;
    console.close().await;
    match said.as_deref() {
        Some("REACH-1") => true,
        Some("REACH-0") => false,
        other => panic!("{from} asking {address}: {other:?}"),
    }
}

/// Waits (up to 30 s: policies apply asynchronously) until `from` reaching `address`
/// is `wanted`.
async fn reach_becomes(env: &Env, from: &str, address: &str, wanted: bool, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while guest_reaches(env, from, address).await != wanted {
        assert!(
            Instant::now() < deadline,
            "{why}: {from} → {address} is not {wanted}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// NetworkPolicy between real guests, on one node (bridged) and across nodes: a policy
/// isolating a VM for ingress cuts every other VM off, one admitting a label lets that
/// VM back (and only it), an egress policy cuts a VM's own connections; bad policies
/// get kube's validation errors. An agent killed and restarted leaves its node's table
/// in place and replaces it with the same rules; one killed as a policy arrives applies
/// it when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_policies_cut_guests_off_and_let_the_admitted_ones_back() {
    let Some(g) = guests() else { return };
    let test = "network_policies_cut_guests_off_and_let_the_admitted_ones_back";
    let Some(mut lan) = lan_or_skip(test, false, Tag::Policy) else {
        return;
    };
    let cluster_cidr = format!("10.{}.0.0/16", 220 + std::process::id() % 20);
    // Held to the end: dropping the server or an agent stops it.
    let Cluster {
        server,
        registry,
        names,
        mut agents,
        host_disks,
        env,
        ..
    } = Cluster::start(g, &mut lan, &cluster_cidr, "pol").await;
    let policies = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies";
    let bad = env
        .api
        .post(
            policies,
            &json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": "bad"},
                    "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 0}],
                             "from": [{"ipBlock": {"cidr": "10.0.0.0/40"}}]}]}}),
        )
        .await;
    assert_eq!(bad.status, 422, "{}", bad.text);
    for field in [
        "spec.ingress[0].ports[0].port",
        "spec.ingress[0].from[0].ipBlock.cidr",
    ] {
        assert!(bad.text.contains(field), "{field}: {}", bad.text);
    }

    // db and other on node a (one bridge), client on node b.
    let vms = [("db", 0), ("other", 0), ("client", 1)];
    for (vm_name, node) in vms {
        let key = format!("{}/{vm_name}", qemu::NS);
        lan.pods
            .push(network::node::pod_names(&names[node], &key).0);
        let mut vm = web_vm(g, &registry, vm_name, &names[node]);
        vm["spec"]["template"]["metadata"]["labels"]["app"] = json!(vm_name);
        env.create_vm(&vm).await;
    }
    let mut ips = HashMap::new();
    for (vm_name, node) in vms {
        let vmi = env.wait_running(vm_name).await;
        let ip = vmi["status"]["interfaces"][0]["ipAddress"]
            .as_str()
            .unwrap()
            .to_string();
        ips.insert(vm_name, ip);
        Env::new(&server.url, server.data_dir(), host_disks.path())
            .on_node(&agents[node])
            .wait_guest_line(vm_name, "virtplane-guest: serve 8080", BOOT)
            .await;
    }
    let db = ips["db"].clone();
    // Before any policy (the guests may still be booting: waited for).
    reach_becomes(&env, "client", &db, true, "no policy").await;
    reach_becomes(&env, "other", &db, true, "no policy").await;

    // db isolated for ingress, nothing admitted: both cut off.
    env.api
        .create(
            policies,
            &json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": "db-deny"},
                    "spec": {"podSelector": {"matchLabels": {"app": "db"}}}}),
        )
        .await;
    reach_becomes(&env, "client", &db, false, "db denies all ingress").await;
    reach_becomes(&env, "other", &db, false, "db denies all ingress").await;

    // app=client admitted on 8080: client is back, other stays out.
    env.api
        .create(
            policies,
            &json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": "db-from-client"},
                    "spec": {"podSelector": {"matchLabels": {"app": "db"}},
                             "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                                          "ports": [{"port": 8080}]}]}}),
        )
        .await;
    reach_becomes(&env, "client", &db, true, "app=client is admitted").await;
    assert!(
        !guest_reaches(&env, "other", &db).await,
        "other was let in too"
    );

    // Node a's agent killed and started again: its table stays in the kernel the whole
    // time and is replaced, in one transaction, by the same rules.
    let host_a = lan.hosts[0].clone();
    let before = policy_table(&host_a).expect("node a has a policy table");
    agents[0].kill9();
    let watcher = {
        let host_a = host_a.clone();
        let before = before.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_watching = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut seen = 0;
            while !stop.load(Ordering::Relaxed) {
                let now = policy_table(&host_a);
                assert_eq!(
                    now.as_deref(),
                    Some(before.as_str()),
                    "node a's policy table changed around its agent's restart"
                );
                seen += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            seen
        });
        (stop_watching, handle)
    };
    std::thread::sleep(Duration::from_millis(500));
    agents[0].restart();
    // Reaching the guest's console means the agent is serving again; its policy loop
    // syncs its caches and applies at once after that.
    console_serves(&env, "other").await;
    assert!(
        !guest_reaches(&env, "other", &db).await,
        "other reached db after node a's agent restarted"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    watcher.0.store(true, Ordering::Relaxed);
    let listings = watcher.1.join().expect("the table never changed");
    assert!(listings > 50, "only {listings} listings of the table");
    assert!(guest_reaches(&env, "client", &db).await, "client lost db");

    // Egress: client may send nowhere. Node b's agent is killed as the policy arrives
    // (before or while it programs it) and comes back to apply it.
    env.api
        .create(
            policies,
            &json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": "client-silent"},
                    "spec": {"podSelector": {"matchLabels": {"app": "client"}},
                             "policyTypes": ["Egress"]}}),
        )
        .await;
    agents[1].kill9();
    agents[1].restart();
    console_serves(&env, "client").await;
    reach_becomes(&env, "client", &db, false, "client's egress is denied").await;
    reach_becomes(
        &env,
        "client",
        &ips["other"],
        false,
        "client's egress is denied",
    )
    .await;

    // The policies gone: all pass again.
    for name in ["db-deny", "db-from-client", "client-silent"] {
        env.api.delete(&format!("{policies}/{name}"), None).await;
    }
    reach_becomes(&env, "other", &db, true, "no policy left").await;
    for (vm_name, _) in vms {
        env.delete_vm(vm_name).await;
    }
}
