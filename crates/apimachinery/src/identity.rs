//! The names Kubernetes gives node identities and their certificates' signers, shared by
//! the API server (which authorizes them), the CSR controllers (which issue them) and
//! node agents (which ask for them).

/// A node's user name is this prefix and the node's name (`system:node:NAME`).
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group of every node identity.
pub const NODES_GROUP: &str = "system:nodes";
/// The group of the join credential: it may only ask for a node identity.
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
/// The signer of kubelet (here: node agent) client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of other client certificates, issued once an administrator approves.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";

/// The user name of node `name`.
pub fn node_user(name: &str) -> String {
    format!("{NODE_USER_PREFIX}{name}")
}
