//! A node's Pod addresses, kept on disk as the CNI `host-local` plugin keeps them: one
//! file per address handed out, named by the address and holding its owner, created
//! with `O_EXCL` so two agents (or an agent and its restart) never hand one address out
//! twice. The files are the whole state: an agent killed mid-allocation finds on restart
//! what it had handed out, and frees it by owner.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;

/// Where the search for the next free address starts (host-local's round robin).
const LAST_RESERVED: &str = "last_reserved_ip";

#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    #[error("no addresses left in {subnet}")]
    Exhausted { subnet: Ipv4Net },
    #[error("the node subnet {subnet} is too small for Pods (a /30 at most)")]
    TooSmall { subnet: Ipv4Net },
    #[error("the owner {owner:?} cannot be stored (it must be one line)")]
    BadOwner { owner: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IpamError + '_ {
    move |source| IpamError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The addresses of one node subnet, in a directory of their own.
#[derive(Debug, Clone)]
pub struct Ipam {
    dir: PathBuf,
    subnet: Ipv4Net,
}

impl Ipam {
    pub fn open(dir: impl Into<PathBuf>, subnet: Ipv4Net) -> Result<Ipam, IpamError> {
        let subnet = subnet.trunc();
        if subnet.prefix_len() > 30 {
            return Err(IpamError::TooSmall { subnet });
        }
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        Ok(Ipam { dir, subnet })
    }

    /// The bridge's address: the subnet's first, as flannel and the bridge plugin use.
    pub fn gateway(&self) -> Ipv4Addr {
        u32::from(self.subnet.network()).saturating_add(1).into()
    }

    pub fn subnet(&self) -> Ipv4Net {
        self.subnet
    }

    /// Addresses Pods may take: after the gateway, before the broadcast address.
    fn range(&self) -> (u32, u32) {
        let first = u32::from(self.gateway()) + 1;
        let last = u32::from(self.subnet.broadcast()) - 1;
        (first, last)
    }

    /// The address `owner` holds, if any.
    pub fn lookup(&self, owner: &str) -> Result<Option<Ipv4Addr>, IpamError> {
        Ipam::lookup_in(&self.dir, owner)
    }

    /// Every address handed out, with its owner.
    pub fn held(&self) -> Result<Vec<(Ipv4Addr, String)>, IpamError> {
        held_in(&self.dir)
    }

    /// The address `owner` holds in the IPAM state at `dir`, read without the subnet
    /// (by those that only look, as the agent's port-forward does).
    pub fn lookup_in(dir: &Path, owner: &str) -> Result<Option<Ipv4Addr>, IpamError> {
        Ok(held_in(dir)?
            .into_iter()
            .find(|(_, held_by)| held_by == owner)
            .map(|(ip, _)| ip))
    }

    /// An address for `owner`: the one it already holds (an allocation repeated after a
    /// restart), or the next free one.
    pub fn allocate(&self, owner: &str) -> Result<Ipv4Addr, IpamError> {
        if owner.is_empty() || owner.contains('\n') {
            return Err(IpamError::BadOwner {
                owner: owner.into(),
            });
        }
        if let Some(ip) = self.lookup(owner)? {
            return Ok(ip);
        }
        let (first, last) = self.range();
        let after = self
            .last_reserved()
            .filter(|ip| (first..=last).contains(ip));
        let start = after.map_or(first, |ip| if ip >= last { first } else { ip + 1 });
        let count = last - first + 1;
        for i in 0..count {
            let candidate = first + (start - first + i) % count;
            let ip = Ipv4Addr::from(candidate);
            let path = self.dir.join(ip.to_string());
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut file) => {
                    file.write_all(format!("{owner}\n").as_bytes())
                        .and_then(|()| file.sync_all())
                        .map_err(io(&path))?;
                    self.remember(ip);
                    return Ok(ip);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(&path)(e)),
            }
        }
        Err(IpamError::Exhausted {
            subnet: self.subnet,
        })
    }

    /// Frees whatever `owner` holds; freeing twice is no error.
    pub fn release(&self, owner: &str) -> Result<(), IpamError> {
        for (ip, held_by) in self.held()? {
            if held_by == owner {
                let path = self.dir.join(ip.to_string());
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(io(&path)(e)),
                }
            }
        }
        Ok(())
    }

    fn last_reserved(&self) -> Option<u32> {
        let text = fs::read_to_string(self.dir.join(LAST_RESERVED)).ok()?;
        text.trim().parse::<Ipv4Addr>().ok().map(u32::from)
    }

    /// Only a hint for the next search: losing it costs a longer search, nothing more.
    fn remember(&self, ip: Ipv4Addr) {
        let path = self.dir.join(LAST_RESERVED);
        if let Err(e) = fs::write(&path, ip.to_string()) {
            tracing::debug!("{}: {e}", path.display());
        }
    }
}

/// Every address handed out in the IPAM state at `dir`, with its owner.
fn held_in(dir: &Path) -> Result<Vec<(Ipv4Addr, String)>, IpamError> {
    let mut held = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(held),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let Some(ip) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<Ipv4Addr>().ok())
        else {
            continue;
        };
        let path = entry.path();
        match fs::read_to_string(&path) {
            Ok(owner) => held.push((ip, owner.trim_end().to_string())),
            // Released between the listing and the read.
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path)(e)),
        }
    }
    held.sort();
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_skip_the_gateway_and_are_never_given_twice() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::open(dir.path(), subnet("10.244.3.0/24")).unwrap();
        assert_eq!(ipam.gateway(), Ipv4Addr::new(10, 244, 3, 1));
        let a = ipam.allocate("pod-a").unwrap();
        let b = ipam.allocate("pod-b").unwrap();
        assert_eq!(a, Ipv4Addr::new(10, 244, 3, 2));
        assert_eq!(b, Ipv4Addr::new(10, 244, 3, 3));
        assert_eq!(
            ipam.allocate("pod-a").unwrap(),
            a,
            "an owner keeps its address"
        );
        // A second handle on the same directory (a restarted agent) sees the same.
        let again = Ipam::open(dir.path(), subnet("10.244.3.0/24")).unwrap();
        assert_eq!(again.lookup("pod-b").unwrap(), Some(b));
        let c = again.allocate("pod-c").unwrap();
        assert!(c != a && c != b);
    }

    #[test]
    fn a_released_address_comes_back_only_after_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::open(dir.path(), subnet("10.0.0.0/29")).unwrap();
        // .2 to .6 are for Pods: five addresses.
        let held: Vec<Ipv4Addr> = (0..5)
            .map(|i| ipam.allocate(&format!("p{i}")).unwrap())
            .collect();
        assert_eq!(held.last(), Some(&Ipv4Addr::new(10, 0, 0, 6)));
        assert!(matches!(
            ipam.allocate("p5"),
            Err(IpamError::Exhausted { .. })
        ));
        ipam.release("p1").unwrap();
        ipam.release("p1").unwrap();
        assert_eq!(ipam.allocate("p5").unwrap(), held[1]);
        assert_eq!(ipam.held().unwrap().len(), 5);
    }

    #[test]
    fn concurrent_allocations_get_distinct_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let net = subnet("10.1.0.0/24");
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let ipam = Ipam::open(dir, net).unwrap();
                    (0..20)
                        .map(|i| ipam.allocate(&format!("t{t}-{i}")).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<Ipv4Addr> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.sort();
        let before = all.len();
        all.dedup();
        assert_eq!(all.len(), before, "an address was given twice");
        assert_eq!(before, 160);
    }

    #[test]
    fn owners_must_be_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::open(dir.path(), subnet("10.1.0.0/24")).unwrap();
        assert!(matches!(
            ipam.allocate("a\nb"),
            Err(IpamError::BadOwner { .. })
        ));
        assert!(matches!(
            Ipam::open(dir.path(), subnet("10.1.0.0/31")),
            Err(IpamError::TooSmall { .. })
        ));
    }
}
