//! The cluster's address plan, as `virtplane server` takes it: where Pods live
//! (`--cluster-cidr`, carved into one subnet per node of `--node-cidr-mask-size`), where
//! Services live (`--service-cidr`), and the DNS domain (`--cluster-domain`).

use ipnet::Ipv4Net;

use crate::subnets::{SubnetError, Subnets};

pub const DEFAULT_CLUSTER_CIDR: &str = "10.244.0.0/16";
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
pub const DEFAULT_NODE_CIDR_MASK_SIZE: u8 = 24;

/// How nodes reach each other's subnets (`--pod-network-backend`), as flannel's backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// A route through the peer's address when the nodes share a link, VXLAN otherwise
    /// (flannel's vxlan with `DirectRouting`).
    #[default]
    Auto,
    /// Routes through the peers' addresses only: every node must share a link.
    HostGw,
    /// VXLAN to every peer, whether they share a link or not.
    Vxlan,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::HostGw => "host-gw",
            Backend::Vxlan => "vxlan",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Backend, String> {
        [Backend::Auto, Backend::HostGw, Backend::Vxlan]
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| format!("{s:?}: use auto, host-gw or vxlan"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("--cluster-cidr {cluster} and --service-cidr {service} overlap")]
    Overlap { cluster: Ipv4Net, service: Ipv4Net },
    #[error("--node-cidr-mask-size: {0}")]
    NodeSubnets(#[from] SubnetError),
    #[error("--cluster-domain {0:?} is not a DNS domain (lower-case labels of letters, digits and '-', joined by '.')")]
    Domain(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPlan {
    pub cluster_cidr: Ipv4Net,
    pub service_cidr: Ipv4Net,
    pub cluster_domain: String,
    pub node_cidr_mask_size: u8,
    pub backend: Backend,
}

impl Default for AddressPlan {
    fn default() -> AddressPlan {
        AddressPlan {
            cluster_cidr: DEFAULT_CLUSTER_CIDR.parse().expect("a CIDR"),
            service_cidr: DEFAULT_SERVICE_CIDR.parse().expect("a CIDR"),
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.into(),
            node_cidr_mask_size: DEFAULT_NODE_CIDR_MASK_SIZE,
            backend: Backend::Auto,
        }
    }
}

fn is_domain(domain: &str) -> bool {
    !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

impl AddressPlan {
    /// The plan, checked: the two ranges apart, node subnets that fit, a DNS domain.
    pub fn new(
        cluster_cidr: Ipv4Net,
        service_cidr: Ipv4Net,
        cluster_domain: &str,
        node_cidr_mask_size: u8,
    ) -> Result<AddressPlan, PlanError> {
        let (cluster_cidr, service_cidr) = (cluster_cidr.trunc(), service_cidr.trunc());
        if cluster_cidr.contains(&service_cidr) || service_cidr.contains(&cluster_cidr) {
            return Err(PlanError::Overlap {
                cluster: cluster_cidr,
                service: service_cidr,
            });
        }
        Subnets::new(cluster_cidr, node_cidr_mask_size)?;
        if !is_domain(cluster_domain) {
            return Err(PlanError::Domain(cluster_domain.into()));
        }
        Ok(AddressPlan {
            cluster_cidr,
            service_cidr,
            cluster_domain: cluster_domain.into(),
            node_cidr_mask_size,
            backend: Backend::Auto,
        })
    }

    /// The plan with nodes reaching each other by `backend`.
    pub fn with_backend(self, backend: Backend) -> AddressPlan {
        AddressPlan { backend, ..self }
    }

    /// The node subnets of this plan, none taken yet.
    pub fn node_subnets(&self) -> Subnets {
        Subnets::new(self.cluster_cidr, self.node_cidr_mask_size).expect("checked by new")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn the_default_plan_is_kubeadm_and_flannel_s() {
        let plan = AddressPlan::default();
        let checked = AddressPlan::new(
            plan.cluster_cidr,
            plan.service_cidr,
            &plan.cluster_domain,
            plan.node_cidr_mask_size,
        )
        .unwrap();
        assert_eq!(checked, plan);
        assert_eq!(plan.node_subnets().free(), 256);
    }

    #[test]
    fn plans_that_cannot_work_are_refused_with_the_flag_named() {
        let overlap = AddressPlan::new(net("10.0.0.0/8"), net("10.96.0.0/12"), "cluster.local", 24);
        assert_eq!(
            overlap.unwrap_err().to_string(),
            "--cluster-cidr 10.0.0.0/8 and --service-cidr 10.96.0.0/12 overlap"
        );
        let mask = AddressPlan::new(
            net("10.244.0.0/16"),
            net("10.96.0.0/12"),
            "cluster.local",
            12,
        );
        assert!(mask
            .unwrap_err()
            .to_string()
            .starts_with("--node-cidr-mask-size: "));
        let domain = AddressPlan::new(
            net("10.244.0.0/16"),
            net("10.96.0.0/12"),
            "Cluster..local",
            24,
        );
        assert!(matches!(domain, Err(PlanError::Domain(_))));
    }

    #[test]
    fn backends_read_as_flannel_names_them() {
        for backend in [Backend::Auto, Backend::HostGw, Backend::Vxlan] {
            assert_eq!(backend.to_string().parse::<Backend>(), Ok(backend));
        }
        assert_eq!(
            "udp".parse::<Backend>(),
            Err("\"udp\": use auto, host-gw or vxlan".to_string())
        );
    }
}
