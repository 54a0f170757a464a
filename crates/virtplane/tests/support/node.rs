//! A `virtplane node` process with simulated guests that joined a test's server with its
//! join token, keeping its data (its node identity) beside the server's.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::{binary, TestServer};

/// SIGKILLed when dropped.
pub struct NodeProcess(Option<Child>);

impl NodeProcess {
    /// Node `name` with a 300 ms heartbeat and 100 ms simulated boots and stops.
    pub fn start(server: &TestServer, name: &str) -> NodeProcess {
        let child = Command::new(binary())
            .arg("node")
            .arg("--kubeconfig")
            .arg(server.data_dir().join("node-join.kubeconfig"))
            .arg("--data-dir")
            .arg(Self::data_dir(server, name))
            .args(["--name", name, "--hypervisor", "sim"])
            .args(["--heartbeat-interval", "300ms"])
            .args(["--sim-boot-delay", "100ms", "--sim-stop-delay", "100ms"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn virtplane node");
        NodeProcess(Some(child))
    }

    /// Where node `name` keeps its data.
    pub fn data_dir(server: &TestServer, name: &str) -> PathBuf {
        server.data_dir().join(format!("node-{name}"))
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.0.take() {
            child.kill().expect("SIGKILL");
            let _ = child.wait();
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}
