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
        let id = tag(&port.id);
        let p = proto(port.protocol);
        let service_chain = format!("svc-{id}");
        let external_chain = format!("ext-{id}");
        let ready: Vec<&Endpoint> = port.endpoints.iter().collect();
        if ready.is_empty() {
            if let Some(ip) = port.cluster_ip {
                rejected.push(format!("{ip} . {p} . {}", port.port));
            }
            if let Some(node_port) = port.node_port {
                rejected.push(format!("0.0.0.0/0 . {p} . {node_port}"));
            }
            continue;
        }
        if let Some(ip) = port.cluster_ip {
            service_ips.push(format!("{ip} . {p} . {} : goto {service_chain}", port.port));
        }
        if let Some(node_port) = port.node_port {
            let target = if port.external_local {
                &external_chain
            } else {
                &service_chain
            };
            node_ports.push(format!("{p} . {node_port} : goto {target}"));
        }
        let _ = writeln!(chains, "    chain {service_chain} {{");
        let _ = writeln!(chains, "        # {}", port.id.replace('"', ""));
        let _ = writeln!(
            chains,
            "        ip saddr != {cluster} jump mark-for-masquerade"
        );
        write_dispatch(&mut chains, &id, &ready, port.affinity);
        let _ = writeln!(chains, "    }}");
        if port.external_local && port.node_port.is_some() {
            let local: Vec<&Endpoint> = ready.iter().copied().filter(|e| e.local).collect();
            let _ = writeln!(chains, "    chain {external_chain} {{");
            if local.is_empty() {
                let _ = writeln!(chains, "        drop");
            } else {
                write_dispatch(&mut chains, &id, &local, port.affinity);
            }
            let _ = writeln!(chains, "    }}");
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
        }
        if let Some(seconds) = port.affinity {
            for i in 0..ready.len() {
                let _ = writeln!(
                    chains,
                    "    set aff-{id}-{i} {{ type ipv4_addr; flags dynamic,timeout; timeout {seconds}s; }}"
                );
            }
        }
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
