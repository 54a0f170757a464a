//! NetworkPolicy on a node, as Calico and kube-router enforce it: one nftables table
//! whose forward chain sees every packet to or from the node's Pods (bridged ones too:
//! the node's bridge hands IPv4 to the IP hooks, `bridge-nf-call-iptables`). Replies of
//! allowed connections pass first; a packet from a Pod that egress policies isolate must
//! match one of its egress rules, then a packet to a Pod that ingress policies isolate
//! one of its ingress rules, else it is dropped. Pods no policy selects are left alone.
//! The table is replaced in one transaction, so a change (or an agent restarting) never
//! opens a window for traffic a policy denies.

use std::fmt::Write;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// A transport protocol a policy port names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// Ports a rule admits: `from..=to` of `protocol` (`None`: every port of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports {
    pub protocol: Protocol,
    pub range: Option<(u16, u16)>,
}

/// Who a rule admits: Pods by address, or an address block less its exceptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    Address(Ipv4Addr),
    Block { cidr: Ipv4Net, except: Vec<Ipv4Net> },
}

/// One ingress or egress rule: its peers (`None`: anyone) and ports (empty: any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub peers: Option<Vec<Peer>>,
    pub ports: Vec<Ports>,
}

/// A Pod of this node as the policies that select it decide: `None` where no policy
/// isolates it in that direction, else the rules that admit traffic (none: all denied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPod {
    pub address: Ipv4Addr,
    pub ingress: Option<Vec<Rule>>,
    pub egress: Option<Vec<Rule>>,
}

fn peers_match(peers: &[Peer], field: &str) -> Vec<String> {
    let addresses: Vec<String> = peers
        .iter()
        .filter_map(|p| match p {
            Peer::Address(ip) => Some(ip.to_string()),
            Peer::Block { .. } => None,
        })
        .collect();
    let mut matches = Vec::new();
    if !addresses.is_empty() {
        matches.push(format!("ip {field} {{ {} }}", addresses.join(", ")));
    }
    for peer in peers {
        if let Peer::Block { cidr, except } = peer {
            if except.is_empty() {
                matches.push(format!("ip {field} {cidr}"));
            } else {
                let except: Vec<String> = except.iter().map(ToString::to_string).collect();
                matches.push(format!(
                    "ip {field} {cidr} ip {field} != {{ {} }}",
                    except.join(", ")
                ));
            }
        }
    }
    matches
}

fn ports_match(ports: &[Ports]) -> Vec<String> {
    if ports.is_empty() {
        return vec![String::new()];
    }
    ports
        .iter()
        .map(|p| match p.range {
            None => format!(" meta l4proto {}", p.protocol.nft()),
            Some((from, to)) if from == to => format!(" {} dport {from}", p.protocol.nft()),
            Some((from, to)) => format!(" {} dport {from}-{to}", p.protocol.nft()),
        })
        .collect()
}

/// The statements admitting what `rules` allow, ending in `verdict`; the peer address
/// is the packet's `field` (`saddr` for ingress, `daddr` for egress).
fn admit(out: &mut String, rules: &[Rule], field: &str, verdict: &str) {
    for rule in rules {
        let peers = match &rule.peers {
            None => vec![String::new()],
            Some(peers) => peers_match(peers, field),
        };
        for peer in &peers {
            for port in ports_match(&rule.ports) {
                let _ = writeln!(out, "        {peer}{port} {verdict}");
            }
        }
    }
}

/// The node's policy table `table` for its Pods.
pub fn ruleset(table: &str, pods: &[LocalPod]) -> String {
    let mut out = format!("add table ip {table}\ndelete table ip {table}\ntable ip {table} {{\n");
    let mut dispatch = String::new();
    for (i, pod) in pods.iter().enumerate() {
        if let Some(rules) = &pod.egress {
            let _ = writeln!(out, "    chain egress_{i} {{");
            admit(&mut out, rules, "daddr", "return");
            out.push_str("        counter drop\n    }\n");
            let _ = writeln!(dispatch, "        ip saddr {} jump egress_{i}", pod.address);
        }
    }
    for (i, pod) in pods.iter().enumerate() {
        if let Some(rules) = &pod.ingress {
            let _ = writeln!(out, "    chain ingress_{i} {{");
            admit(&mut out, rules, "saddr", "accept");
            out.push_str("        counter drop\n    }\n");
            let _ = writeln!(
                dispatch,
                "        ip daddr {} jump ingress_{i}",
                pod.address
            );
        }
    }
    let _ = write!(
        out,
        "    chain forward {{\n\
         \x20       type filter hook forward priority filter; policy accept;\n\
         \x20       ct state established,related accept\n\
         {dispatch}\
         \x20   }}\n\
         }}\n"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolated_pods_get_their_rules_and_others_none() {
        let db = LocalPod {
            address: "10.244.0.5".parse().unwrap(),
            ingress: Some(vec![Rule {
                peers: Some(vec![
                    Peer::Address("10.244.1.7".parse().unwrap()),
                    Peer::Block {
                        cidr: "192.168.0.0/16".parse().unwrap(),
                        except: vec!["192.168.9.0/24".parse().unwrap()],
                    },
                ]),
                ports: vec![Ports {
                    protocol: Protocol::Tcp,
                    range: Some((8080, 8080)),
                }],
            }]),
            egress: Some(vec![]),
        };
        let free = LocalPod {
            address: "10.244.0.6".parse().unwrap(),
            ingress: None,
            egress: None,
        };
        let rules = ruleset("vpbr1_pol", &[db, free]);
        assert!(
            rules.contains("ip saddr { 10.244.1.7 } tcp dport 8080 accept"),
            "{rules}"
        );
        assert!(
            rules.contains(
                "ip saddr 192.168.0.0/16 ip saddr != { 192.168.9.0/24 } tcp dport 8080 accept"
            ),
            "{rules}"
        );
        assert!(
            rules.contains("ip daddr 10.244.0.5 jump ingress_0"),
            "{rules}"
        );
        assert!(
            rules.contains("ip saddr 10.244.0.5 jump egress_0"),
            "{rules}"
        );
        assert!(!rules.contains("10.244.0.6"), "{rules}");
        assert!(rules.contains("ct state established,related accept"));
    }
}
