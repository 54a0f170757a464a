//! What the network crate's kernel tests share: namespaces that are removed whatever
//! happens, a node (a namespace with its bridge on 10.77.0.0/24) with Pods on it, and
//! the rule that a test that cannot run skips loudly, or fails under CI.
#![allow(dead_code)]

pub mod guest;

use std::io::Write;
use std::net::Ipv4Addr;

use futures::TryStreamExt;
use network::netns::{self, NetNs};
use network::sandbox::{self, PodLink};
use rtnetlink::Handle;

/// Whether a test that cannot run must fail instead of skipping (CI, `scripts/test`).
pub fn required() -> bool {
    std::env::var_os("CI").is_some()
        || std::env::var("VIRTPLANE_REQUIRE_QEMU").is_ok_and(|v| v == "1")
}

/// Says why the test does not run, or fails when it must run.
pub fn skip(why: &str) {
    if required() {
        panic!("{why}");
    }
    // Straight to stderr: the harness swallows a passing test's eprintln!.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// A namespace name unique to this test process.
pub fn name(prefix: &str, tag: &str) -> String {
    format!("{prefix}-{tag}-{}", std::process::id())
}

/// Every namespace a test made, removed on drop, after killing the process it started.
pub struct Namespaces {
    pub names: Vec<String>,
    pub kill: Option<u32>,
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        if let Some(pid) = self.kill {
            let _ = std::process::Command::new("kill")
                .arg("-9")
                .arg(pid.to_string())
                .status();
        }
        for name in &self.names {
            let _ = NetNs::named(name).delete();
        }
    }
}

pub async fn index(handle: &Handle, name: &str) -> u32 {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    links.try_next().await.unwrap().unwrap().header.index
}

/// Moves link `name` from the namespace `from` talks to into `to`.
pub async fn move_link(from: &Handle, name: &str, to: &NetNs) {
    use std::os::fd::AsRawFd;
    let link = index(from, name).await;
    let file = to.open().unwrap();
    from.link()
        .set(
            rtnetlink::LinkUnspec::new_with_index(link)
                .setns_by_fd(file.as_raw_fd())
                .build(),
        )
        .execute()
        .await
        .unwrap();
}

/// A node: namespace `<prefix>-node-<pid>`, bridge `vpbr0` with 10.77.0.1/24, and one
/// Pod per tag at 10.77.0.2, .3, … (namespace `<prefix>-<tag>-<pid>`, veth `veth<tag>`).
pub struct Node {
    pub namespaces: Namespaces,
    pub ns: NetNs,
    pub host: Handle,
    pub pods: Vec<NetNs>,
}

pub fn pod_link(prefix: &str, tag: &str, n: u8) -> PodLink {
    PodLink {
        netns: name(prefix, tag),
        host_veth: format!("veth{tag}"),
        address: format!("10.77.0.{n}/24").parse().unwrap(),
        gateway: Ipv4Addr::new(10, 77, 0, 1),
        bridge: "vpbr0".into(),
    }
}

/// The node with its Pods; `None` (after saying why) when namespaces cannot be made.
pub async fn node_with_pods(prefix: &str, tags: &[&str]) -> Option<Node> {
    let mut names = vec![name(prefix, "node")];
    names.extend(tags.iter().map(|tag| name(prefix, tag)));
    let namespaces = Namespaces { names, kill: None };
    let ns = match NetNs::create(&namespaces.names[0]) {
        Ok(ns) => ns,
        Err(e) => {
            skip(&format!(
                "cannot make network namespaces here ({e}); run as root"
            ));
            return None;
        }
    };
    let host = netns::netlink(Some(&ns)).unwrap();
    let gateway = "10.77.0.1/24".parse().unwrap();
    sandbox::ensure_bridge(&host, "vpbr0", gateway)
        .await
        .unwrap();
    let mut pods = Vec::new();
    for (i, tag) in tags.iter().enumerate() {
        let link = pod_link(prefix, tag, 2 + i as u8);
        pods.push(sandbox::attach(&host, &link).await.unwrap());
    }
    Some(Node {
        namespaces,
        ns,
        host,
        pods,
    })
}
