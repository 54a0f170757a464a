//! Node subnets carved from the cluster CIDR, as kube-controller-manager's range
//! allocator hands out `spec.podCIDR`: every subnet of the node mask size is free or
//! taken, allocation goes round from the last one handed out (so a subnet freed by a
//! deleted node is not reused at once), and what nodes already hold is marked taken at
//! start.

use std::collections::BTreeSet;

use ipnet::Ipv4Net;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubnetError {
    #[error("the node CIDR mask size {mask} must be at least the cluster CIDR's prefix length {prefix} and at most 30")]
    MaskSize { mask: u8, prefix: u8 },
    #[error("the cluster CIDR {cluster} would have {count} node subnets of /{mask}, more than the 65536 tracked")]
    TooMany {
        cluster: Ipv4Net,
        mask: u8,
        count: u64,
    },
    #[error("{subnet} is not a /{mask} subnet of the cluster CIDR {cluster}")]
    Outside {
        subnet: Ipv4Net,
        cluster: Ipv4Net,
        mask: u8,
    },
    #[error("{subnet} is already taken")]
    Taken { subnet: Ipv4Net },
}

/// Which node subnets of a cluster CIDR are taken.
#[derive(Debug, Clone)]
pub struct Subnets {
    cluster: Ipv4Net,
    mask: u8,
    count: u32,
    taken: BTreeSet<u32>,
    /// Where the next search starts.
    next: u32,
}

impl Subnets {
    pub fn new(cluster: Ipv4Net, mask: u8) -> Result<Subnets, SubnetError> {
        let cluster = cluster.trunc();
        let prefix = cluster.prefix_len();
        if mask < prefix || mask > 30 {
            return Err(SubnetError::MaskSize { mask, prefix });
        }
        let count = 1u64 << (mask - prefix);
        if count > 1 << 16 {
            return Err(SubnetError::TooMany {
                cluster,
                mask,
                count,
            });
        }
        Ok(Subnets {
            cluster,
            mask,
            count: count as u32,
            taken: BTreeSet::new(),
            next: 0,
        })
    }

    pub fn cluster(&self) -> Ipv4Net {
        self.cluster
    }

    fn subnet(&self, index: u32) -> Ipv4Net {
        let size = 1u32 << (32 - self.mask);
        let base = u32::from(self.cluster.network()) + index * size;
        Ipv4Net::new(base.into(), self.mask).expect("the mask was checked")
    }

    fn index(&self, subnet: Ipv4Net) -> Result<u32, SubnetError> {
        let outside = SubnetError::Outside {
            subnet,
            cluster: self.cluster,
            mask: self.mask,
        };
        if subnet.prefix_len() != self.mask
            || subnet.network() != subnet.addr()
            || !self.cluster.contains(&subnet)
        {
            return Err(outside);
        }
        let offset = u32::from(subnet.network()) - u32::from(self.cluster.network());
        Ok(offset >> (32 - self.mask))
    }

    /// Marks a subnet a node already holds as taken (at start, from the stored Nodes).
    pub fn occupy(&mut self, subnet: Ipv4Net) -> Result<(), SubnetError> {
        let index = self.index(subnet)?;
        if !self.taken.insert(index) {
            return Err(SubnetError::Taken { subnet });
        }
        Ok(())
    }

    /// Takes exactly these subnets (what the Nodes hold now), keeping the round-robin
    /// position; those that do not fit the cluster CIDR or come twice are returned.
    pub fn reset(&mut self, taken: impl IntoIterator<Item = Ipv4Net>) -> Vec<SubnetError> {
        self.taken.clear();
        taken
            .into_iter()
            .filter_map(|subnet| self.occupy(subnet).err())
            .collect()
    }

    /// The next free subnet, now taken; `None` when every one is.
    pub fn allocate(&mut self) -> Option<Ipv4Net> {
        let index = (0..self.count)
            .map(|i| (self.next + i) % self.count)
            .find(|i| !self.taken.contains(i))?;
        self.taken.insert(index);
        self.next = (index + 1) % self.count;
        Some(self.subnet(index))
    }

    /// Frees a subnet (its node was deleted). Subnets not of this cluster are ignored.
    pub fn release(&mut self, subnet: Ipv4Net) {
        if let Ok(index) = self.index(subnet) {
            self.taken.remove(&index);
        }
    }

    pub fn free(&self) -> u32 {
        self.count - self.taken.len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn subnets_go_round_and_skip_what_nodes_hold() {
        let mut subnets = Subnets::new(net("10.244.0.0/16"), 24).unwrap();
        subnets.occupy(net("10.244.1.0/24")).unwrap();
        assert_eq!(subnets.allocate(), Some(net("10.244.0.0/24")));
        assert_eq!(subnets.allocate(), Some(net("10.244.2.0/24")));
        subnets.release(net("10.244.0.0/24"));
        // A freed subnet waits for its turn.
        assert_eq!(subnets.allocate(), Some(net("10.244.3.0/24")));
        assert_eq!(subnets.free(), 256 - 3);
        let refused = subnets.reset([
            net("10.244.9.0/24"),
            net("10.244.9.0/24"),
            net("10.9.0.0/24"),
        ]);
        assert_eq!(refused.len(), 2);
        assert_eq!(subnets.free(), 255);
        // The round goes on where it was.
        assert_eq!(subnets.allocate(), Some(net("10.244.4.0/24")));
    }

    #[test]
    fn an_exhausted_cluster_cidr_allocates_nothing_until_a_subnet_is_freed() {
        let mut subnets = Subnets::new(net("10.0.0.0/23"), 24).unwrap();
        assert_eq!(subnets.allocate(), Some(net("10.0.0.0/24")));
        assert_eq!(subnets.allocate(), Some(net("10.0.1.0/24")));
        assert_eq!(subnets.allocate(), None);
        subnets.release(net("10.0.0.0/24"));
        assert_eq!(subnets.allocate(), Some(net("10.0.0.0/24")));
    }

    #[test]
    fn subnets_that_do_not_fit_are_refused() {
        let mut subnets = Subnets::new(net("10.244.0.0/16"), 24).unwrap();
        assert!(matches!(
            subnets.occupy(net("10.245.0.0/24")),
            Err(SubnetError::Outside { .. })
        ));
        assert!(matches!(
            subnets.occupy(net("10.244.0.0/25")),
            Err(SubnetError::Outside { .. })
        ));
        subnets.occupy(net("10.244.7.0/24")).unwrap();
        assert_eq!(
            subnets.occupy(net("10.244.7.0/24")),
            Err(SubnetError::Taken {
                subnet: net("10.244.7.0/24")
            })
        );
        assert_eq!(
            Subnets::new(net("10.244.0.0/16"), 8).unwrap_err(),
            SubnetError::MaskSize {
                mask: 8,
                prefix: 16
            }
        );
        assert!(matches!(
            Subnets::new(net("10.0.0.0/8"), 30),
            Err(SubnetError::TooMany { .. })
        ));
    }
}
