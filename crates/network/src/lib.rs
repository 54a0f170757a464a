//! virtplane's cluster network, without Kubernetes types: the address plan (cluster,
//! service and node CIDRs), node subnets carved from the cluster CIDR as
//! kube-controller-manager's node IPAM does, and a node's Pod addresses kept on disk as
//! the CNI `host-local` plugin keeps them, and Pod sandboxes: network namespaces joined
//! to the node's bridge by veth pairs, as the CNI `bridge` plugin makes them.

pub mod dhcp;
pub mod ipam;
pub mod masquerade;
pub mod netns;
pub mod nft;
pub mod node;
pub mod plan;
pub mod policy;
pub mod routes;
pub mod sandbox;
pub mod secondary;
pub mod services;
pub mod subnets;
pub mod vxlan;

pub use ipam::{Ipam, IpamError};
pub use plan::{AddressPlan, PlanError};
pub use subnets::{SubnetError, Subnets};
