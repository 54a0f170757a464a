//! NetworkPolicy on a node, as Calico and kube-router enforce it: one nftables table
//! whose forward chain sees every packet to or from the node's Pods (bridged ones too:
//! the node's bridge hands IPv4 to the IP hooks, `bridge-nf-call-iptables`). Replies of
//! allowed connections pass first; a packet from a Pod that egress policies isolate must
//! match one of its egress rules, then a packet to a Pod that ingress policies isolate
//! one of its ingress rules, else it is dropped. Pods no policy selects are left alone.
//! Peer addresses live in sets and rules in chains that Pods selected alike share, with
//! verdict maps sending each Pod's address to its chains, so the table grows with the
//! policies rather than with Pods times peers.
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

/// What a table is made of: the peer address sets and rule chains, each written once
/// however many Pods share it (Pods a policy selects alike share its chain).
#[derive(Default)]
struct Parts {
    sets: std::collections::HashMap<Vec<Ipv4Addr>, usize>,
    chains: std::collections::HashMap<String, usize>,
    out: String,
}

impl Parts {
    /// The name of the set holding `addresses` (made on first use).
    fn set(&mut self, mut addresses: Vec<Ipv4Addr>) -> String {
        addresses.sort();
        addresses.dedup();
        let next = self.sets.len();
        let id = *self.sets.entry(addresses.clone()).or_insert_with(|| {
            let elements: Vec<String> = addresses.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                self.out,
                "    set peers_{next} {{\n        type ipv4_addr\n        elements = {{ {} }}\n    }}",
                elements.join(", ")
            );
            next
        });
        format!("peers_{id}")
    }

    /// The name of the chain with `body` (made on first use).
    fn chain(&mut self, direction: &str, body: String) -> String {
        let next = self.chains.len();
        let id = *self
            .chains
            .entry(format!("{direction}\n{body}"))
            .or_insert_with(|| {
                let _ = write!(
                    self.out,
                    "    chain {direction}_{next} {{\n{body}        counter drop\n    }}\n"
                );
                next
            });
        format!("{direction}_{id}")
    }
}

/// The matches of a rule's peers: one set of the Pods' addresses, one per block.
fn peers_match(parts: &mut Parts, peers: &[Peer], field: &str) -> Vec<String> {
    let addresses: Vec<Ipv4Addr> = peers
        .iter()
        .filter_map(|p| match p {
            Peer::Address(ip) => Some(*ip),
            Peer::Block { .. } => None,
        })
        .collect();
    let mut matches = Vec::new();
    if !addresses.is_empty() {
        matches.push(format!("ip {field} @{}", parts.set(addresses)));
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
fn admit(parts: &mut Parts, rules: &[Rule], field: &str, verdict: &str) -> String {
    let mut body = String::new();
    for rule in rules {
        let peers = match &rule.peers {
            None => vec![String::new()],
            Some(peers) => peers_match(parts, peers, field),
        };
        for peer in &peers {
            for port in ports_match(&rule.ports) {
                let _ = writeln!(body, "        {peer}{port} {verdict}");
            }
        }
    }
    body
}

/// The verdict map `name` sending each Pod's address to its chain.
fn dispatch(out: &mut String, name: &str, entries: &[(Ipv4Addr, String)]) {
    let _ = write!(out, "    map {name} {{\n        type ipv4_addr : verdict\n");
    if !entries.is_empty() {
        let elements: Vec<String> = entries
            .iter()
            .map(|(ip, chain)| format!("{ip} : jump {chain}"))
            .collect();
        let _ = writeln!(out, "        elements = {{ {} }}", elements.join(", "));
    }
    out.push_str("    }\n");
}

/// The node's policy table `table` for its Pods: egress rules return to the forward
/// chain when they admit (the ingress check follows), ingress rules accept.
pub fn ruleset(table: &str, pods: &[LocalPod]) -> String {
    let mut parts = Parts::default();
    let (mut egress, mut ingress) = (Vec::new(), Vec::new());
    for pod in pods {
        if let Some(rules) = &pod.egress {
            let body = admit(&mut parts, rules, "daddr", "return");
            egress.push((pod.address, parts.chain("egress", body)));
        }
        if let Some(rules) = &pod.ingress {
            let body = admit(&mut parts, rules, "saddr", "accept");
            ingress.push((pod.address, parts.chain("ingress", body)));
        }
    }
    let mut out = format!("add table ip {table}\ndelete table ip {table}\ntable ip {table} {{\n");
    out.push_str(&parts.out);
    dispatch(&mut out, "egress_pods", &egress);
    dispatch(&mut out, "ingress_pods", &ingress);
    out.push_str(
        "    chain forward {\n\
         \x20       type filter hook forward priority filter; policy accept;\n\
         \x20       ct state established,related accept\n\
         \x20       ip saddr vmap @egress_pods\n\
         \x20       ip daddr vmap @ingress_pods\n\
         \x20   }\n\
         }\n",
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
        let twin = LocalPod {
            address: "10.244.0.7".parse().unwrap(),
            ..db.clone()
        };
        let rules = ruleset("vpbr1_pol", &[db, free, twin]);
        // Pods selected alike share one chain and one set.
        assert_eq!(rules.matches("chain ingress_").count(), 1, "{rules}");
        assert_eq!(rules.matches("set peers_").count(), 1, "{rules}");
        assert!(rules.contains("elements = { 10.244.1.7 }"), "{rules}");
        assert!(
            rules.contains("ip saddr @peers_0 tcp dport 8080 accept"),
            "{rules}"
        );
        assert!(
            rules.contains(
                "ip saddr 192.168.0.0/16 ip saddr != { 192.168.9.0/24 } tcp dport 8080 accept"
            ),
            "{rules}"
        );
        assert!(rules.contains("10.244.0.5 : jump ingress_"), "{rules}");
        assert!(rules.contains("10.244.0.5 : jump egress_"), "{rules}");
        assert!(!rules.contains("10.244.0.6"), "{rules}");
        assert!(rules.contains("ct state established,related accept"));
    }
}
