//! Helpers for the VM lifecycle black-box tests (`lifecycle_*.rs`): a server with
//! simulated nodes, VM builders, subresource calls, and waiting on the API with
//! deadlines (polling or watching, never fixed sleeps).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::{self, condition, Api, Next, Reply, TestServer, Watch};

/// A server under test and an API handle on it.
pub struct Cluster {
    pub server: TestServer,
    pub api: Api,
}

/// Sim delays short enough to keep tests quick, long enough to see each phase.
pub const FAST_SIM: [&str; 5] = [
    "--no-node",
    "--sim-boot-delay",
    "150ms",
    "--sim-stop-delay",
    "150ms",
];

impl Cluster {
    /// `virtplane server` with FAST_SIM, `--sim-nodes nodes` and `extra` flags.
    pub async fn start(nodes: u32, extra: &[&str]) -> Cluster {
        let nodes = nodes.to_string();
        let mut args: Vec<&str> = FAST_SIM.to_vec();
        args.extend(["--sim-nodes", &nodes]);
        args.extend(extra);
        let server = TestServer::start_with(&args).await;
        let api = support::api_for(&server);
        let cluster = Cluster { server, api };
        cluster.wait_nodes_ready(nodes.parse().unwrap_or(0)).await;
        cluster
    }

    /// Waits until at least `count` nodes are Ready.
    pub async fn wait_nodes_ready(&self, count: usize) {
        self.api
            .eventually("/api/v1/nodes", Duration::from_secs(20), |r| {
                r.status == StatusCode::OK
                    && r.body["items"].as_array().is_some_and(|items| {
                        items.iter().filter(|n| node_ready(n) == "True").count() >= count
                    })
            })
            .await;
    }

    pub async fn namespace(&self, name: &str) {
        self.api.namespace(name).await;
    }

    pub async fn create_vm(&self, ns: &str, body: &Value) -> Value {
        self.api
            .create(&support::coll(ns, "virtualmachines"), body)
            .await
    }

    pub async fn get_vm(&self, ns: &str, name: &str) -> Reply {
        self.api
            .get(&support::item(ns, "virtualmachines", name))
            .await
    }

    pub async fn get_vmi(&self, ns: &str, name: &str) -> Reply {
        self.api
            .get(&support::item(ns, "virtualmachineinstances", name))
            .await
    }

    /// PUT a subresource (`virtualmachines/<name>/start`...) with a JSON body.
    pub async fn sub(&self, ns: &str, plural: &str, name: &str, verb: &str, body: &Value) -> Reply {
        self.api
            .put(
                &format!(
                    "/apis/subresources.kubevirt.io/v1/namespaces/{ns}/{plural}/{name}/{verb}"
                ),
                body,
            )
            .await
    }

    pub async fn vm_verb(&self, ns: &str, name: &str, verb: &str) -> Reply {
        self.sub(ns, "virtualmachines", name, verb, &json!({}))
            .await
    }

    pub async fn vmi_verb(&self, ns: &str, name: &str, verb: &str) -> Reply {
        self.sub(ns, "virtualmachineinstances", name, verb, &json!({}))
            .await
    }

    /// Polls the VM until `done` holds (panics with the last VM after `within`).
    pub async fn wait_vm(
        &self,
        ns: &str,
        name: &str,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        self.api
            .eventually(&support::item(ns, "virtualmachines", name), within, |r| {
                r.status == StatusCode::OK && done(&r.body)
            })
            .await
            .body
    }

    pub async fn wait_printable(&self, ns: &str, name: &str, status: &str) -> Value {
        self.wait_vm(ns, name, Duration::from_secs(20), |vm| {
            vm["status"]["printableStatus"] == status
        })
        .await
    }

    /// Polls the VMI until `done` holds for it (`None` = it does not exist).
    pub async fn wait_vmi(
        &self,
        ns: &str,
        name: &str,
        within: Duration,
        done: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        let r = self
            .api
            .eventually(
                &support::item(ns, "virtualmachineinstances", name),
                within,
                |r| match r.status {
                    StatusCode::OK => done(Some(&r.body)),
                    StatusCode::NOT_FOUND => done(None),
                    _ => false,
                },
            )
            .await;
        (r.status == StatusCode::OK).then_some(r.body)
    }

    pub async fn wait_vmi_phase(&self, ns: &str, name: &str, phase: &str) -> Value {
        self.wait_vmi(ns, name, Duration::from_secs(20), |v| {
            v.is_some_and(|v| v["status"]["phase"] == phase)
        })
        .await
        .expect("VMI")
    }

    pub async fn wait_vmi_gone(&self, ns: &str, name: &str) {
        self.wait_vmi(ns, name, Duration::from_secs(20), |v| v.is_none())
            .await;
    }

    /// A watch on one VM (or VMI, with `plural`) by name, from `rv` (or from now when empty).
    pub async fn watch_one(&self, ns: &str, plural: &str, name: &str, rv: &str) -> Watch {
        let mut path = format!(
            "{}?watch=true&fieldSelector=metadata.name%3D{name}",
            support::coll(ns, plural)
        );
        if !rv.is_empty() {
            path.push_str(&format!("&resourceVersion={rv}"));
        }
        let watch = self.api.watch(&path).await;
        assert_eq!(watch.status, StatusCode::OK, "watch {plural}/{name}");
        watch
    }
}

/// The Ready condition status of a node (`True`, `Unknown`...), or "".
pub fn node_ready(node: &Value) -> String {
    condition(node, "Ready")
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}

/// A VM with `strategy` (`None`: neither runStrategy nor running), the given template
/// annotations (simulator knobs) and 64Mi of guest memory.
pub fn vm(name: &str, strategy: Option<&str>, annotations: Value) -> Value {
    let mut vm = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {"vm-own-label": "not-copied"}},
        "spec": {
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}, "annotations": annotations},
                "spec": {"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}
            }
        }
    });
    if let Some(s) = strategy {
        vm["spec"]["runStrategy"] = json!(s);
    }
    vm
}

/// Reads a watch until `done` holds for an event and the statuses seen so far (or the
/// deadline passes), returning the printableStatus values seen, repeats folded.
/// `seed` is the status the object had where the watch starts.
pub async fn printable_trail(
    watch: &mut Watch,
    seed: Option<&str>,
    within: Duration,
    done: impl Fn(&Value, &[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut trail: Vec<String> = seed.into_iter().map(str::to_string).collect();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match watch.poll(left).await {
            Next::Event(e) => {
                let status = e["object"]["status"]["printableStatus"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                if !status.is_empty() && trail.last() != Some(&status) {
                    trail.push(status);
                }
                if done(&e, &trail) {
                    return trail;
                }
            }
            Next::End => panic!("watch ended; statuses so far: {trail:?}"),
            Next::Timeout => {
                panic!("expected state never came within {within:?}; statuses seen: {trail:?}")
            }
        }
    }
}

/// Collects watch events until `done` holds for one (inclusive).
pub async fn events_until(
    watch: &mut Watch,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match watch.poll(left).await {
            Next::Event(e) => {
                let stop = done(&e);
                out.push(e);
                if stop {
                    return out;
                }
            }
            Next::End => panic!("watch ended; events so far: {out:?}"),
            Next::Timeout => {
                panic!("expected event never came within {within:?}; events: {out:#?}")
            }
        }
    }
}

/// The Status message virt-api's `errors.NewConflict` produces.
pub fn conflict_message(resource: &str, name: &str, why: &str) -> String {
    format!("Operation cannot be fulfilled on {resource}.kubevirt.io \"{name}\": {why}")
}

/// Asserts a 409 Conflict Status from virt-api with its exact message and details.
pub fn assert_conflict(reply: &Reply, resource: &str, name: &str, why: &str) {
    support::assert_status(
        reply,
        409,
        "Conflict",
        &conflict_message(resource, name, why),
    );
    assert_eq!(
        reply.body["details"],
        json!({"name": name, "group": "kubevirt.io", "kind": resource}),
        "{}",
        reply.text
    );
}

pub fn assert_accepted(reply: &Reply, what: &str) {
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{what}: {}", reply.text);
}
