//! Nodes as the API serves them (registered and heart-beaten by node agents; list, get,
//! watch, patch, Table) and the scheduler's placement rules: allocatable CPU/memory,
//! nodeSelector, required node affinity, taints/tolerations, cordoned nodes, with the
//! reason a VMI cannot be placed shown on the VM (ErrorUnschedulable). Tier A.

mod lifecycle;
mod support;

use std::time::Duration;

use lifecycle::{node_ready, Cluster};
use serde_json::{json, Value};
use support::{condition, printable};

const NS: &str = "sched";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

async fn node(c: &Cluster, name: &str) -> Value {
    let r = c.api.get(&format!("/api/v1/nodes/{name}")).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    r.body
}

async fn merge_node(c: &Cluster, name: &str, patch: Value) {
    let r = c.api.merge(&format!("/api/v1/nodes/{name}"), &patch).await;
    assert_eq!(r.status.as_u16(), 200, "patch node {name}: {}", r.text);
}

#[tokio::test]
async fn nodes_are_registered_heartbeaten_and_patchable() {
    let c = Cluster::start(3, &["--heartbeat-interval", "300ms"]).await;
    let list = c.api.get("/api/v1/nodes").await;
    assert_eq!(list.status.as_u16(), 200, "{}", list.text);
    assert_eq!(list.body["kind"], "NodeList");
    let mut names = support::names(&list.body);
    names.sort();
    assert_eq!(names, ["sim-node-0", "sim-node-1", "sim-node-2"]);

    let n = node(&c, "sim-node-1").await;
    assert_eq!(n["kind"], "Node");
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], "sim-node-1");
    assert_eq!(labels["kubevirt.io/schedulable"], "true");
    assert_eq!(labels["virtplane.io/hypervisor"], "sim");
    for field in ["capacity", "allocatable"] {
        for resource in ["cpu", "memory"] {
            assert!(
                n["status"][field][resource].is_string(),
                "{field}.{resource}: {}",
                n["status"]
            );
        }
    }
    let ready = condition(&n, "Ready").expect("Ready condition");
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "KubeletReady");
    assert!(ready["lastHeartbeatTime"].is_string());
    let missing = c.api.get("/api/v1/nodes/nowhere").await;
    support::assert_status(&missing, 404, "NotFound", "nodes \"nowhere\" not found");

    // Table: NAME STATUS AGE.
    let r = c
        .api
        .send(
            reqwest::Method::GET,
            "/api/v1/nodes",
            &[("accept", TABLE)],
            None,
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    let columns: Vec<&str> = r.body["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter(|c| c["priority"] == 0)
        .map(|c| c["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(columns, ["Name", "Status", "Roles", "Age", "Version"]);
    let wide: Vec<&str> = r.body["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter(|c| c["priority"] == 1)
        .map(|c| c["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        wide,
        [
            "Internal-IP",
            "External-IP",
            "OS-Image",
            "Kernel-Version",
            "Container-Runtime"
        ]
    );
    for row in r.body["rows"].as_array().expect("rows") {
        let cells = &row["cells"];
        assert_eq!(cells[1], "Ready", "{row}");
        assert_eq!(cells[2], "<none>", "{row}");
        assert!(
            cells[4].as_str().unwrap().starts_with("virtplane-"),
            "{row}"
        );
        assert_eq!(cells[5], "127.0.0.1", "{row}");
        assert_eq!(cells[6], "<none>", "{row}");
        assert_eq!(cells[9], "sim", "{row}");
    }

    // Labels and taints set by an administrator survive the agent's heartbeats.
    let rv = n["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    merge_node(
        &c,
        "sim-node-1",
        json!({"metadata": {"labels": {"rack": "r7"}},
               "spec": {"taints": [{"key": "maintenance", "value": "soon", "effect": "PreferNoSchedule"}]}}),
    )
    .await;
    let mut watch = c
        .api
        .watch(&format!(
            "/api/v1/nodes?watch=true&fieldSelector=metadata.name%3Dsim-node-1&resourceVersion={rv}"
        ))
        .await;
    // Our own patch, then heartbeats (and node IPAM's writes, which may land after our
    // patch): each keeps them. Watched until the heartbeat annotation (written with the
    // first beat, then once a minute) came after the patch too.
    let (mut seen, mut annotated) = (0, false);
    while seen < 3 || !annotated {
        let e = watch.next().await;
        assert_eq!(e["type"], "MODIFIED", "{e}");
        let obj = &e["object"];
        if obj["metadata"]["labels"]["rack"] != "r7" {
            continue;
        }
        assert_eq!(obj["spec"]["taints"][0]["key"], "maintenance", "{obj}");
        assert_eq!(node_ready(obj), "True");
        annotated |= obj["metadata"]["annotations"]["kubevirt.io/heartbeat"].is_string();
        seen += 1;
        assert!(
            seen < 100,
            "no heartbeat annotation after 100 writes: {obj}"
        );
    }
    let later = node(&c, "sim-node-1").await;
    assert_eq!(later["metadata"]["labels"]["rack"], "r7");
    assert_eq!(later["spec"]["taints"][0]["key"], "maintenance");
    assert_eq!(node_ready(&later), "True");
    assert!(
        later["metadata"]["annotations"]["kubevirt.io/heartbeat"].is_string(),
        "{}",
        later["metadata"]
    );
}

/// A VM pinned to nothing in particular: 64Mi, with `spec` merged into its template spec.
fn vm_with(name: &str, spec: Value) -> Value {
    let mut vm = lifecycle::vm(name, Some("Always"), json!({}));
    let template = &mut vm["spec"]["template"]["spec"];
    if let (Some(t), Some(extra)) = (template.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            t.insert(k.clone(), v.clone());
        }
    }
    vm
}

async fn unschedulable_message(c: &Cluster, name: &str) -> String {
    let vm = c.wait_printable(NS, name, "ErrorUnschedulable").await;
    let cond = condition(&vm, "PodScheduled").unwrap_or_else(|| panic!("no PodScheduled on {vm}"));
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "Unschedulable");
    assert_eq!(vm["status"]["ready"], false);
    // The VMI waits in Scheduling, on no node.
    let vmi = c.get_vmi(NS, name).await.body;
    assert_eq!(vmi["status"]["phase"], "Scheduling");
    assert!(vmi["status"].get("nodeName").is_none(), "{}", vmi["status"]);
    cond["message"].as_str().unwrap_or("").to_string()
}

async fn running_on(c: &Cluster, name: &str) -> String {
    c.wait_printable(NS, name, "Running").await;
    let vmi = c.get_vmi(NS, name).await.body;
    vmi["status"]["nodeName"].as_str().unwrap_or("").to_string()
}

#[tokio::test]
async fn scheduling_honours_selectors_affinity_taints_and_capacity() {
    let c = Cluster::start(3, &[]).await;
    c.namespace(NS).await;
    merge_node(
        &c,
        "sim-node-1",
        json!({"metadata": {"labels": {"pool": "gpu"}},
               "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}),
    )
    .await;

    c.create_vm(
        NS,
        &vm_with("notol", json!({"nodeSelector": {"pool": "gpu"}})),
    )
    .await;
    assert_eq!(
        unschedulable_message(&c, "notol").await,
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 node(s) didn't match Pod's node affinity/selector."
    );
    c.create_vm(
        NS,
        &vm_with(
            "tol",
            json!({"nodeSelector": {"pool": "gpu"},
                   "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}),
        ),
    )
    .await;
    assert_eq!(running_on(&c, "tol").await, "sim-node-1");
    c.create_vm(
        NS,
        &vm_with(
            "aff",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["sim-node-2"]}]}]}}}}),
        ),
    )
    .await;
    assert_eq!(running_on(&c, "aff").await, "sim-node-2");

    let mut huge = vm_with("huge", json!({}));
    huge["spec"]["template"]["spec"]["domain"]["memory"]["guest"] = json!("100Ti");
    c.create_vm(NS, &huge).await;
    assert_eq!(
        unschedulable_message(&c, "huge").await,
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient memory."
    );
    let mut greedy = vm_with("greedy", json!({}));
    greedy["spec"]["template"]["spec"]["domain"]["resources"] =
        json!({"requests": {"cpu": "5000"}});
    c.create_vm(NS, &greedy).await;
    assert_eq!(
        unschedulable_message(&c, "greedy").await,
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu."
    );

    // A cordoned node takes nothing new; kubectl shows it as such.
    merge_node(&c, "sim-node-2", json!({"spec": {"unschedulable": true}})).await;
    let table = c
        .api
        .send(
            reqwest::Method::GET,
            "/api/v1/nodes/sim-node-2",
            &[("accept", TABLE)],
            None,
        )
        .await;
    assert_eq!(
        table.body["rows"][0]["cells"][1], "Ready,SchedulingDisabled",
        "{}",
        table.text
    );
    c.create_vm(
        NS,
        &vm_with(
            "cordoned",
            json!({"nodeSelector": {"kubernetes.io/hostname": "sim-node-2"}}),
        ),
    )
    .await;
    assert_eq!(
        unschedulable_message(&c, "cordoned").await,
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable."
    );
    // Uncordoning lets it run there.
    merge_node(&c, "sim-node-2", json!({"spec": {"unschedulable": null}})).await;
    assert_eq!(running_on(&c, "cordoned").await, "sim-node-2");

    // A matching untainted node appears: the waiting VMI is placed there and the VM
    // drops its PodScheduled condition.
    merge_node(
        &c,
        "sim-node-0",
        json!({"metadata": {"labels": {"pool": "gpu"}}}),
    )
    .await;
    assert_eq!(running_on(&c, "notol").await, "sim-node-0");
    let vm = c.get_vm(NS, "notol").await.body;
    assert!(condition(&vm, "PodScheduled").is_none(), "{}", vm["status"]);
    assert_eq!(printable(&vm), "Running");
}

fn pod_cidr(node: &Value) -> Option<String> {
    node["spec"]["podCIDR"].as_str().map(str::to_string)
}

/// Node IPAM: each Node gets its own /24 of the cluster CIDR as `spec.podCIDR(s)`; when
/// the cluster CIDR is full a Node waits, and gets the subnet of a Node deleted later.
#[tokio::test]
async fn nodes_get_pod_cidrs_of_their_own_from_the_cluster_cidr() {
    let c = Cluster::start(3, &["--cluster-cidr", "10.250.0.0/23"]).await;
    let list = c
        .api
        .eventually("/api/v1/nodes", Duration::from_secs(20), |r| {
            r.body["items"]
                .as_array()
                .is_some_and(|items| items.iter().filter(|n| pod_cidr(n).is_some()).count() == 2)
        })
        .await;
    let items = list.body["items"].as_array().unwrap();
    let mut held: Vec<String> = items.iter().filter_map(pod_cidr).collect();
    held.sort();
    assert_eq!(held, ["10.250.0.0/24", "10.250.1.0/24"]);
    for n in items.iter().filter(|n| pod_cidr(n).is_some()) {
        assert_eq!(n["spec"]["podCIDRs"], json!([pod_cidr(n).unwrap()]), "{n}");
    }
    let waiting = items
        .iter()
        .find(|n| pod_cidr(n).is_none())
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .expect("a node without a subnet");
    let holder = items.iter().find(|n| pod_cidr(n).is_some()).unwrap();
    let (holder_name, freed) = (
        holder["metadata"]["name"].as_str().unwrap().to_string(),
        pod_cidr(holder).unwrap(),
    );
    // A full cluster CIDR: the third node stays without one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pod_cidr(&node(&c, &waiting).await), None);

    let r = c
        .api
        .delete(&format!("/api/v1/nodes/{holder_name}"), None)
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    let r = c
        .api
        .eventually(
            &format!("/api/v1/nodes/{waiting}"),
            Duration::from_secs(60),
            |r| pod_cidr(&r.body).is_some(),
        )
        .await;
    assert_eq!(pod_cidr(&r.body), Some(freed));
}

/// Simulated nodes have no namespaces, but their VMIs get Pod IPs all the same: each from
/// its node's subnet, never one twice, on the VMI and on its virt-launcher Pod.
#[tokio::test]
async fn vmis_on_simulated_nodes_get_pod_ips_from_their_nodes_subnet() {
    let c = Cluster::start(2, &[]).await;
    c.namespace(NS).await;
    for name in ["ip-a", "ip-b", "ip-c"] {
        c.create_vm(NS, &vm_with(name, json!({}))).await;
    }
    let mut seen = Vec::new();
    for name in ["ip-a", "ip-b", "ip-c"] {
        let node_name = running_on(&c, name).await;
        let vmi = c.get_vmi(NS, name).await.body;
        let ip = vmi["status"]["interfaces"][0]["ipAddress"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no IP: {}", vmi["status"]))
            .to_string();
        let subnet: ipnet::Ipv4Net = pod_cidr(&node(&c, &node_name).await)
            .expect("the node's subnet")
            .parse()
            .unwrap();
        assert!(
            subnet.contains(&ip.parse::<std::net::Ipv4Addr>().unwrap()),
            "{name} on {node_name} has {ip}, outside {subnet}"
        );
        assert!(!seen.contains(&ip), "{ip} handed out twice");
        let pods = c
            .api
            .eventually(
                &format!("/api/v1/namespaces/{NS}/pods?labelSelector=vm.kubevirt.io/name={name}"),
                Duration::from_secs(20),
                |r| r.body["items"][0]["status"]["podIP"] == ip.as_str(),
            )
            .await;
        assert_eq!(
            pods.body["items"][0]["spec"]["nodeName"],
            node_name.as_str()
        );
        seen.push(ip);
    }
}

/// What `virtplane server` with `flags` says on stderr as it refuses to start.
fn server_refuses(flags: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(support::binary())
        .args([
            "server",
            "--no-node",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .args(flags)
        .output()
        .unwrap();
    assert!(!out.status.success(), "started with {flags:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_cluster_network_that_cannot_work_stops_the_server_with_the_flag_named() {
    let stderr = server_refuses(&["--cluster-cidr", "10.0.0.0/8"]);
    assert!(
        stderr.contains("--cluster-cidr 10.0.0.0/8 and --service-cidr 10.96.0.0/12 overlap"),
        "{stderr}"
    );
    let stderr = server_refuses(&["--node-cidr-mask-size", "8"]);
    assert!(stderr.contains("--node-cidr-mask-size: "), "{stderr}");
}
