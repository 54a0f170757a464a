//! The controller manager's Lease: which server holds it.

use super::{Api, TestServer};

pub const CONTROLLER_LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/virtplane-controller-manager";

/// The server's name in leader elections (`DIR/server-id`).
pub fn identity(server: &TestServer) -> String {
    std::fs::read_to_string(server.data_dir().join("server-id"))
        .expect("server-id")
        .trim()
        .to_string()
}

/// Who holds the controller manager's lease ("" when nobody does).
pub async fn holder(api: &Api) -> String {
    let lease = api.get(CONTROLLER_LEASE).await.body;
    lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or("")
        .to_string()
}
