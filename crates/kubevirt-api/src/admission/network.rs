//! Network and interface rules (KubeVirt's network admitter).

use std::collections::HashSet;

use apimachinery::field::ErrorType;
use serde_json::Value;

use super::Causes;
use crate::access::{bool_at, has, int_at, list_at, str_at};
use apimachinery::meta_validation::go_quote;

use crate::validation::{is_pci_address, parse_mac, port_name};

const INTERFACE_MODELS: [&str; 7] = [
    "e1000", "e1000e", "igb", "ne2k_pci", "pcnet", "rtl8139", "virtio",
];
/// The MAC of the bridge masquerade builds inside the pod.
const RESERVED_MAC: &str = "02:00:00:00:00:00";

/// On CREATE only: bindings KubeVirt removed in v1.3.
pub(super) fn discontinued_bindings(spec: &Value, p: &str, out: &mut Causes) {
    for (i, iface) in interfaces(spec).iter().enumerate() {
        for (binding, message) in [
            (
                "slirp",
                "Slirp interface support has been discontinued since v1.3",
            ),
            (
                "passt",
                "Passt network binding has been discontinued since v1.3",
            ),
            (
                "macvtap",
                "Macvtap network binding has been discontinued since v1.3",
            ),
        ] {
            if has(iface, &[binding]) {
                out.add(
                    ErrorType::Invalid,
                    format!("{p}.domain.devices.interfaces[{i}].{binding}"),
                    message,
                );
            }
        }
    }
}

fn interfaces(spec: &Value) -> &[Value] {
    list_at(spec, &["domain", "devices", "interfaces"])
}

/// The network an interface connects to; like KubeVirt's by-name index, the last one wins.
fn network_named<'a>(networks: &'a [Value], name: &str) -> Option<&'a Value> {
    networks.iter().rev().find(|n| str_at(n, &["name"]) == name)
}

fn is_pod(network: Option<&Value>) -> bool {
    network.is_some_and(|n| has(n, &["pod"]))
}

pub(super) fn rules(spec: &Value, p: &str, out: &mut Causes) {
    let networks = list_at(spec, &["networks"]);
    let ifaces = interfaces(spec);
    network_kinds(networks, p, out);
    interface_states(networks, ifaces, p, out);
    interface_bindings(networks, ifaces, p, out);
    names_match(networks, ifaces, p, out);
    for (i, iface) in ifaces.iter().enumerate() {
        interface_fields(
            iface,
            &format!("{p}.domain.devices.interfaces[{i}]"),
            network_named(networks, str_at(iface, &["name"])),
            out,
        );
    }
}

/// One pod network at most, one Multus default, and one kind of source per network.
fn network_kinds(networks: &[Value], p: &str, out: &mut Causes) {
    let pods = networks.iter().filter(|n| has(n, &["pod"])).count();
    if pods > 1 {
        out.add(
            ErrorType::Duplicate,
            format!("{p}.interfaces"),
            format!("more than one interface is connected to a pod network in {p}.interfaces"),
        );
    }
    let multus_defaults = networks
        .iter()
        .filter(|n| bool_at(n, &["multus", "default"]) == Some(true))
        .count();
    if multus_defaults > 1 {
        out.add(
            ErrorType::Invalid,
            format!("{p}.networks"),
            "Multus CNI should only have one default network",
        );
    }
    if pods > 0 && multus_defaults > 0 {
        out.add(
            ErrorType::Invalid,
            format!("{p}.networks"),
            "Pod network cannot be defined when Multus default network is defined",
        );
    }

    for (i, network) in networks.iter().enumerate() {
        let sources = ["pod", "multus", "resourceClaim"]
            .iter()
            .filter(|&&s| has(network, &[s]))
            .count();
        if sources == 0 {
            out.add(
                ErrorType::Required,
                format!("{p}.networks[{i}]"),
                "should have a network type",
            );
        } else if sources > 1 {
            out.add(
                ErrorType::Required,
                format!("{p}.networks[{i}]"),
                "should have only one network type",
            );
        }
    }
    if let Some(i) = networks
        .iter()
        .position(|n| has(n, &["multus"]) && str_at(n, &["multus", "networkName"]).is_empty())
    {
        out.add(
            ErrorType::Required,
            format!("{p}.networks[{i}]"),
            "CNI delegating plugin must have a networkName",
        );
    }
}

/// Interface states KubeVirt supports, and where.
fn interface_states(networks: &[Value], ifaces: &[Value], p: &str, out: &mut Causes) {
    let iface_path = |i: usize| format!("{p}.domain.devices.interfaces[{i}]");
    let default_network = networks
        .iter()
        .find(|n| has(n, &["pod"]) || bool_at(n, &["multus", "default"]) == Some(true));
    for (i, iface) in ifaces.iter().enumerate() {
        let name = str_at(iface, &["name"]);
        let state = str_at(iface, &["state"]);
        let field = format!("{}.state", iface_path(i));
        if !matches!(state, "" | "absent" | "down" | "up") {
            out.add(
                ErrorType::Invalid,
                &field,
                format!("logical {name} interface state value is unsupported: {state}"),
            );
        }
        if has(iface, &["sriov"]) && matches!(state, "down" | "up") {
            out.add(
                ErrorType::Invalid,
                &field,
                format!(
                    "{} interface's state {} is not supported for SR-IOV NICs",
                    go_quote(name),
                    go_quote(state)
                ),
            );
        }
        if state == "absent" && !has(iface, &["bridge"]) {
            out.add(
                ErrorType::Invalid,
                &field,
                format!(
                    "{} interface's state {} is supported only for bridge binding",
                    go_quote(name),
                    go_quote(state)
                ),
            );
        }
        if state == "absent" && default_network.is_some_and(|n| str_at(n, &["name"]) == name) {
            out.add(
                ErrorType::Invalid,
                &field,
                format!(
                    "{} interface's state {} is not supported on default networks",
                    go_quote(name),
                    go_quote(state)
                ),
            );
        }
    }
}

/// One binding per interface, each on a network it works with.
fn interface_bindings(networks: &[Value], ifaces: &[Value], p: &str, out: &mut Causes) {
    let iface_path = |i: usize| format!("{p}.domain.devices.interfaces[{i}]");
    for (i, iface) in ifaces.iter().enumerate() {
        let name = str_at(iface, &["name"]);
        let network = network_named(networks, name);
        let bindings = ["bridge", "masquerade", "sriov", "passtBinding", "binding"]
            .iter()
            .filter(|&&b| has(iface, &[b]))
            .count();
        if bindings != 1 {
            out.add(
                ErrorType::Invalid,
                iface_path(i),
                format!("logical {name} interface must have exactly one binding method or binding plugin"),
            );
        }
        if has(iface, &["masquerade"]) {
            if !is_pod(network) {
                out.add(
                    ErrorType::Invalid,
                    format!("{}.name", iface_path(i)),
                    "Masquerade interface only implemented with pod network",
                );
            }
            if str_at(iface, &["macAddress"]) == RESERVED_MAC {
                out.add(
                    ErrorType::Invalid,
                    format!("{}.macAddress", iface_path(i)),
                    "The requested MAC address is reserved for the in-pod bridge. Please choose another one.",
                );
            }
        }
        if has(iface, &["passtBinding"]) {
            out.add(
                ErrorType::Invalid,
                format!("{}.name", iface_path(i)),
                "PasstBinding feature gate is not enabled",
            );
            if !is_pod(network) {
                out.add(
                    ErrorType::Invalid,
                    format!("{}.name", iface_path(i)),
                    "PasstBinding interface only implemented with pod network",
                );
            }
        }
    }
}

/// Unique network and interface names, each network with its interface and back.
fn names_match(networks: &[Value], ifaces: &[Value], p: &str, out: &mut Causes) {
    let iface_path = |i: usize| format!("{p}.domain.devices.interfaces[{i}]");
    let mut seen = HashSet::new();
    for (i, network) in networks.iter().enumerate() {
        let name = str_at(network, &["name"]);
        if !seen.insert(name) {
            out.add(
                ErrorType::Duplicate,
                format!("{p}.networks[{i}].name"),
                format!(
                    "Network with name {} already exists, every network must have a unique name",
                    go_quote(name)
                ),
            );
        }
    }
    let iface_names: HashSet<&str> = ifaces.iter().map(|x| str_at(x, &["name"])).collect();
    for (i, network) in networks.iter().enumerate() {
        let name = str_at(network, &["name"]);
        if !iface_names.contains(name) {
            let field = format!("{p}.networks[{i}].name");
            out.add(
                ErrorType::Required,
                &field,
                format!("{field} '{name}' not found."),
            );
        }
    }
    let mut seen = HashSet::new();
    for (i, iface) in ifaces.iter().enumerate() {
        if !seen.insert(str_at(iface, &["name"])) {
            out.add(
                ErrorType::Duplicate,
                format!("{}.name", iface_path(i)),
                "Only one interface can be connected to one specific network",
            );
        }
    }
    for (i, iface) in ifaces.iter().enumerate() {
        let name = str_at(iface, &["name"]);
        if network_named(networks, name).is_none() {
            let field = format!("{}.name", iface_path(i));
            out.add(
                ErrorType::Invalid,
                &field,
                format!("{field} '{name}' not found."),
            );
        }
    }
}

fn interface_fields(iface: &Value, path: &str, network: Option<&Value>, out: &mut Causes) {
    let name = str_at(iface, &["name"]);
    let name_path = format!("{path}.name");
    if name.is_empty()
        || !name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    {
        out.add(
            ErrorType::Invalid,
            &name_path,
            "Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)",
        );
    }
    let model = str_at(iface, &["model"]);
    if !model.is_empty() && !INTERFACE_MODELS.contains(&model) {
        out.add(
            ErrorType::NotSupported,
            format!("{path}.model"),
            format!("interface {name_path} uses model {model} that is not supported."),
        );
    }
    let mac = str_at(iface, &["macAddress"]);
    if !mac.is_empty() {
        let problem = match parse_mac(mac) {
            None => Some("malformed"),
            Some(len) if len > 6 => Some("too long"),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            out.add(
                ErrorType::Invalid,
                format!("{path}.macAddress"),
                format!("interface {name_path} has {problem} MAC address ({mac})."),
            );
        }
    }
    let pci = str_at(iface, &["pciAddress"]);
    if !pci.is_empty() && !is_pci_address(pci) {
        out.add(
            ErrorType::Invalid,
            format!("{path}.pciAddress"),
            format!("interface {name_path} has malformed PCI address ({pci})."),
        );
    }
    if is_pod(network) && has(iface, &["ports"]) {
        ports(list_at(iface, &["ports"]), path, out);
    }
    if has(iface, &["portRanges"]) {
        out.add(
            ErrorType::Invalid,
            &name_path,
            "portRanges is specified on interface but the PortRangesSpec feature gate is not enabled",
        );
    }
}

fn ports(ports: &[Value], path: &str, out: &mut Causes) {
    let mut names = HashSet::new();
    for (k, port) in ports.iter().enumerate() {
        let name = str_at(port, &["name"]);
        if name.is_empty() {
            continue;
        }
        let field = format!("{path}.ports[{k}].name");
        if !names.insert(name) {
            out.add(
                ErrorType::Duplicate,
                &field,
                format!("Duplicate name of the port: {name}"),
            );
        }
        if !port_name(name).is_empty() {
            out.add(
                ErrorType::Invalid,
                &field,
                format!("Invalid name of the port: {name}"),
            );
        }
    }
    for (k, port) in ports.iter().enumerate() {
        let number = int_at(port, &["port"]).unwrap_or(0);
        if number == 0 {
            out.add(
                ErrorType::Required,
                format!("{path}.ports[{k}].port"),
                "Port field is mandatory.",
            );
        }
        if !(0..65536).contains(&number) {
            out.add(
                ErrorType::Invalid,
                format!("{path}.ports[{k}].port"),
                "Port field must be in range 0 < x < 65536.",
            );
        }
        if !matches!(str_at(port, &["protocol"]), "" | "TCP" | "UDP") {
            out.add(
                ErrorType::Invalid,
                format!("{path}.ports[{k}].protocol"),
                "Unknown protocol, only TCP or UDP allowed",
            );
        }
    }
}
