//! Services on a node, as kube-proxy's nftables mode programs them: one table, replaced
//! whole in one `nft -f` transaction on every change. A packet to a cluster IP (or to a
//! node port on any of the node's addresses) is looked up in a verdict map and sent to
//! its Service's chain, which picks an endpoint at random (or the one a client was sent
//! to before, with ClientIP affinity) and DNATs to it; traffic from outside the cluster
//! CIDR, and a Pod reaching itself through its Service (hairpin), is masqueraded so that
//! the reply comes back this way. A Service without endpoints rejects connections.

use std::fmt::Write;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use crate::masquerade::Protocol;

/// One port of one Service, with where its traffic goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// `namespace/name:port-name`, for comments and chain names.
    pub id: String,
    pub protocol: Protocol,
    /// `None` for a headless Service (no cluster IP: only node ports, if any).
    pub cluster_ip: Option<Ipv4Addr>,
    pub port: u16,
    pub node_port: Option<u16>,
    /// ClientIP affinity, for this many seconds.
    pub affinity: Option<u32>,
    /// `externalTrafficPolicy: Local`: node-port traffic goes only to this node's endpoints.
    pub external_local: bool,
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub address: Ipv4Addr,
    pub port: u16,
    /// On this node.
    pub local: bool,
}

/// FNV-1a of the port's id: short, stable chain names.
fn tag(id: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

fn proto(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
    }
}

/// The mark of packets to masquerade on their way out (kube-proxy's 0x4000).
const MASQUERADE_MARK: u32 = 0x4000;

/// What one Service port puts in the table: its chains and sets (in table-block syntax),
/// their names (referrers first, so they can be deleted in this order), and its map and
/// set elements (key, and the whole element with its verdict).
struct PortRules {
    chains: String,
    chain_names: Vec<String>,
    set_names: Vec<String>,
    service_ip: Option<(String, String)>,
    node_port: Option<(String, String)>,
    rejected: Vec<String>,
}

fn port_rules(port: &ServicePort, cluster: Ipv4Net) -> PortRules {
    let id = tag(&port.id);
    let p = proto(port.protocol);
    let service_chain = format!("svc-{id}");
    let external_chain = format!("ext-{id}");
    let mut rules = PortRules {
        chains: String::new(),
        chain_names: Vec::new(),
        set_names: Vec::new(),
        service_ip: None,
        node_port: None,
        rejected: Vec::new(),
    };
    let ready: Vec<&Endpoint> = port.endpoints.iter().collect();
    if ready.is_empty() {
        if let Some(ip) = port.cluster_ip {
            rules.rejected.push(format!("{ip} . {p} . {}", port.port));
        }
        if let Some(node_port) = port.node_port {
            rules
                .rejected
                .push(format!("0.0.0.0/0 . {p} . {node_port}"));
        }
        return rules;
    }
    if let Some(ip) = port.cluster_ip {
        let key = format!("{ip} . {p} . {}", port.port);
        rules.service_ip = Some((key.clone(), format!("{key} : goto {service_chain}")));
    }
    let external = port.external_local && port.node_port.is_some();
    if let Some(node_port) = port.node_port {
        let target = if external {
            &external_chain
        } else {
            &service_chain
        };
        let key = format!("{p} . {node_port}");
        rules.node_port = Some((key.clone(), format!("{key} : goto {target}")));
    }
    let chains = &mut rules.chains;
    let _ = writeln!(chains, "    chain {service_chain} {{");
    let _ = writeln!(chains, "        # {}", port.id.replace('"', ""));
    let _ = writeln!(
        chains,
        "        ip saddr != {cluster} jump mark-for-masquerade"
    );
    write_dispatch(chains, &id, &ready, port.affinity);
    let _ = writeln!(chains, "    }}");
    rules.chain_names.push(service_chain);
    if external {
        let local: Vec<&Endpoint> = ready.iter().copied().filter(|e| e.local).collect();
        let _ = writeln!(chains, "    chain {external_chain} {{");
        if local.is_empty() {
            let _ = writeln!(chains, "        drop");
        } else {
            write_dispatch(chains, &id, &local, port.affinity);
        }
        let _ = writeln!(chains, "    }}");
        rules.chain_names.push(external_chain);
    }
    for (i, endpoint) in ready.iter().enumerate() {
        let _ = writeln!(chains, "    chain ep-{id}-{i} {{");
        let _ = writeln!(
            chains,
            "        ip saddr {} jump mark-for-masquerade",
            endpoint.address
        );
        if port.affinity.is_some() {
            let _ = writeln!(chains, "        update @aff-{id}-{i} {{ ip saddr }}");
        }
        let _ = writeln!(
            chains,
            "        meta l4proto {p} dnat to {}:{}",
            endpoint.address, endpoint.port
        );
        let _ = writeln!(chains, "    }}");
        rules.chain_names.push(format!("ep-{id}-{i}"));
    }
    if let Some(seconds) = port.affinity {
        for i in 0..ready.len() {
            let _ = writeln!(
                chains,
                "    set aff-{id}-{i} {{ type ipv4_addr; flags dynamic,timeout; timeout {seconds}s; }}"
            );
            rules.set_names.push(format!("aff-{id}-{i}"));
        }
    }
    rules
}

/// The changes that turn the table made for `old` into the one for `new`, as one
/// transaction touching only the Service ports that differ (kube-proxy's partial
/// sync): their elements, chains and sets are taken out and made again. Empty when
/// nothing differs.
pub fn update(table: &str, cluster: Ipv4Net, old: &[ServicePort], new: &[ServicePort]) -> String {
    use std::collections::HashMap;
    let before: HashMap<&str, &ServicePort> = old.iter().map(|p| (p.id.as_str(), p)).collect();
    let after: HashMap<&str, &ServicePort> = new.iter().map(|p| (p.id.as_str(), p)).collect();
    let gone: Vec<&ServicePort> = old
        .iter()
        .filter(|p| after.get(p.id.as_str()) != Some(p))
        .collect();
    let coming: Vec<&ServicePort> = new
        .iter()
        .filter(|p| before.get(p.id.as_str()) != Some(p))
        .collect();
    let mut out = String::new();
    for port in gone {
        let rules = port_rules(port, cluster);
        if let Some((key, _)) = &rules.service_ip {
            let _ = writeln!(out, "delete element ip {table} service-ips {{ {key} }}");
        }
        if let Some((key, _)) = &rules.node_port {
            let _ = writeln!(
                out,
                "delete element ip {table} service-nodeports {{ {key} }}"
            );
        }
        for key in &rules.rejected {
            let _ = writeln!(out, "delete element ip {table} no-endpoints {{ {key} }}");
        }
        for chain in &rules.chain_names {
            let _ = writeln!(out, "flush chain ip {table} {chain}");
        }
        for chain in &rules.chain_names {
            let _ = writeln!(out, "delete chain ip {table} {chain}");
        }
        for set in &rules.set_names {
            let _ = writeln!(out, "delete set ip {table} {set}");
        }
    }
    for port in coming {
        let rules = port_rules(port, cluster);
        if !rules.chains.is_empty() {
            let _ = write!(out, "table ip {table} {{\n{}}}\n", rules.chains);
        }
        if let Some((_, element)) = &rules.service_ip {
            let _ = writeln!(out, "add element ip {table} service-ips {{ {element} }}");
        }
        if let Some((_, element)) = &rules.node_port {
            let _ = writeln!(
                out,
                "add element ip {table} service-nodeports {{ {element} }}"
            );
        }
        for key in &rules.rejected {
            let _ = writeln!(out, "add element ip {table} no-endpoints {{ {key} }}");
        }
    }
    out
}

/// The whole table `table` for `ports`, given the cluster CIDR (traffic from elsewhere is
/// masqueraded).
pub fn ruleset(table: &str, cluster: Ipv4Net, ports: &[ServicePort]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "add table ip {table}\ndelete table ip {table}\ntable ip {table} {{"
    );
    let mut service_ips = Vec::new();
    let mut node_ports = Vec::new();
    let mut rejected = Vec::new();
    let mut chains = String::new();
    for port in ports {
        let rules = port_rules(port, cluster);
        service_ips.extend(rules.service_ip.map(|(_, element)| element));
        node_ports.extend(rules.node_port.map(|(_, element)| element));
        rejected.extend(rules.rejected);
        chains.push_str(&rules.chains);
    }
    let elements = |list: &[String]| {
        if list.is_empty() {
            String::new()
        } else {
            format!(" elements = {{ {} }};", list.join(", "))
        }
    };
    let _ = writeln!(
        out,
        "    map service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict;{} }}",
        elements(&service_ips)
    );
    let _ = writeln!(
        out,
        "    map service-nodeports {{ type inet_proto . inet_service : verdict;{} }}",
        elements(&node_ports)
    );
    let _ = writeln!(
        out,
        "    set no-endpoints {{ type ipv4_addr . inet_proto . inet_service; flags interval;{} }}",
        elements(&rejected)
    );
    let _ = write!(
        out,
        "    chain mark-for-masquerade {{
        meta mark set meta mark | {MASQUERADE_MARK:#x}
    }}
    chain masquerading {{
        meta mark & {MASQUERADE_MARK:#x} == 0 return
        meta mark set meta mark ^ {MASQUERADE_MARK:#x}
        masquerade fully-random
    }}
    chain services {{
        ip daddr . meta l4proto . th dport vmap @service-ips
        fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports
    }}
    chain nat-prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        jump services
    }}
    chain nat-output {{
        type nat hook output priority -100; policy accept;
        jump services
    }}
    chain nat-postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        jump masquerading
    }}
    chain reject-no-endpoints {{
        ip daddr . meta l4proto . th dport @no-endpoints reject
    }}
    chain filter-input {{
        type filter hook input priority filter - 10; policy accept;
        ct state new jump reject-no-endpoints
    }}
    chain filter-forward {{
        type filter hook forward priority filter - 10; policy accept;
        ct state new jump reject-no-endpoints
    }}
    chain filter-output {{
        type filter hook output priority filter - 10; policy accept;
        ct state new jump reject-no-endpoints
    }}
"
    );
    out.push_str(&chains);
    out.push_str("}\n");
    out
}

/// The jump to one of `endpoints`: the one this client had (affinity), else at random.
fn write_dispatch(out: &mut String, id: &str, endpoints: &[&Endpoint], affinity: Option<u32>) {
    if affinity.is_some() {
        for i in 0..endpoints.len() {
            let _ = writeln!(out, "        ip saddr @aff-{id}-{i} goto ep-{id}-{i}");
        }
    }
    if endpoints.len() == 1 {
        let _ = writeln!(out, "        goto ep-{id}-0");
        return;
    }
    let arms: Vec<String> = (0..endpoints.len())
        .map(|i| format!("{i} : goto ep-{id}-{i}"))
        .collect();
    let _ = writeln!(
        out,
        "        numgen random mod {} vmap {{ {} }}",
        endpoints.len(),
        arms.join(", ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(endpoints: Vec<Endpoint>) -> ServicePort {
        ServicePort {
            id: "default/web:http".into(),
            protocol: Protocol::Tcp,
            cluster_ip: Some(Ipv4Addr::new(10, 96, 0, 20)),
            port: 80,
            node_port: Some(30080),
            affinity: None,
            external_local: false,
            endpoints,
        }
    }

    #[test]
    fn a_service_dnats_to_its_endpoints_at_random() {
        let endpoints = vec![
            Endpoint {
                address: Ipv4Addr::new(10, 244, 0, 2),
                port: 8080,
                local: true,
            },
            Endpoint {
                address: Ipv4Addr::new(10, 244, 1, 2),
                port: 8080,
                local: false,
            },
        ];
        let rules = ruleset(
            "vp_svc",
            "10.244.0.0/16".parse().unwrap(),
            &[port(endpoints)],
        );
        let id = tag("default/web:http");
        assert!(
            rules.contains(&format!("10.96.0.20 . tcp . 80 : goto svc-{id}")),
            "{rules}"
        );
        assert!(
            rules.contains(&format!("tcp . 30080 : goto svc-{id}")),
            "{rules}"
        );
        assert!(
            rules.contains(&format!(
                "numgen random mod 2 vmap {{ 0 : goto ep-{id}-0, 1 : goto ep-{id}-1 }}"
            )),
            "{rules}"
        );
        assert!(
            rules.contains("meta l4proto tcp dnat to 10.244.1.2:8080"),
            "{rules}"
        );
        assert!(
            rules.contains("ip saddr != 10.244.0.0/16 jump mark-for-masquerade"),
            "{rules}"
        );
    }

    /// The ruleset as nft reads it (`nft -c`: checked, not applied), when nft runs here.
    #[test]
    fn nft_accepts_the_ruleset() {
        let endpoints = vec![
            Endpoint {
                address: Ipv4Addr::new(10, 244, 0, 2),
                port: 8080,
                local: true,
            },
            Endpoint {
                address: Ipv4Addr::new(10, 244, 1, 2),
                port: 8080,
                local: false,
            },
        ];
        let mut affine = port(endpoints.clone());
        affine.id = "default/sticky:ssh".into();
        affine.affinity = Some(10800);
        affine.external_local = true;
        affine.node_port = Some(30022);
        affine.port = 22;
        let mut empty = port(Vec::new());
        empty.id = "default/empty:x".into();
        empty.port = 81;
        empty.node_port = Some(30081);
        let rules = ruleset(
            "vp_check",
            "10.244.0.0/16".parse().unwrap(),
            &[port(endpoints), affine, empty],
        );
        let checked = std::process::Command::new("nft")
            .args(["-c", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(rules.as_bytes())?;
                child.wait_with_output()
            });
        match checked {
            Ok(out) => assert!(
                out.status.success(),
                "{}\n{rules}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) if std::env::var_os("CI").is_some() => panic!("nft cannot run: {e}"),
            Err(e) => eprintln!("SKIPPED: nft -c: {e}"),
        }
    }

    #[test]
    fn an_endpoint_change_touches_only_its_service() {
        let cluster = "10.244.0.0/16".parse().unwrap();
        let one = |address: [u8; 4]| Endpoint {
            address: Ipv4Addr::from(address),
            port: 8080,
            local: false,
        };
        let mut other = port(vec![one([10, 244, 2, 2])]);
        other.id = "default/other:http".into();
        other.cluster_ip = Some(Ipv4Addr::new(10, 96, 0, 30));
        other.node_port = None;
        let old = vec![port(vec![one([10, 244, 0, 2])]), other.clone()];
        let new = vec![port(vec![one([10, 244, 0, 3])]), other];
        let delta = update("vp_svc", cluster, &old, &new);
        let id = tag("default/web:http");
        assert!(
            delta.contains(&format!("delete chain ip vp_svc ep-{id}-0")),
            "{delta}"
        );
        assert!(delta.contains("dnat to 10.244.0.3:8080"), "{delta}");
        assert!(!delta.contains(&tag("default/other:http")), "{delta}");
        assert!(update("vp_svc", cluster, &new, &new).is_empty());
    }

    #[test]
    fn a_service_without_endpoints_rejects() {
        let rules = ruleset(
            "vp_svc",
            "10.244.0.0/16".parse().unwrap(),
            &[port(Vec::new())],
        );
        assert!(
            rules.contains("elements = { 10.96.0.20 . tcp . 80, 0.0.0.0/0 . tcp . 30080 }"),
            "{rules}"
        );
        assert!(!rules.contains("chain svc-"), "{rules}");
    }
}
