//! Services: ClusterIP (an address of `--service-cidr`, handed out once), NodePort (a port
//! of 30000–32767 on every node), headless (`clusterIP: None`), LoadBalancer (served as
//! NodePort, with an empty ingress: virtplane has no load balancer) and ExternalName,
//! defaulted and validated with kube-apiserver's rules and messages.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use apimachinery::field::{ErrorType, FieldError};
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use apimachinery::status::{GroupKind, Status};
use ipnet::Ipv4Net;
use serde_json::{json, Value};

use crate::registry::{Admission, ResourceHooks};

pub static SERVICE: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Service",
    list_kind: "ServiceList",
    plural: "services",
    singular: "service",
    short_names: &["svc"],
    categories: &["all"],
    namespaced: true,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn {
            name: "Type",
            column_type: "string",
            json_path: ".spec.type",
            description: "The type of the Service",
            priority: 0,
        },
        PrinterColumn {
            name: "Cluster-IP",
            column_type: "string",
            json_path: ".spec.clusterIP",
            description: "The address of the Service inside the cluster",
            priority: 0,
        },
        PrinterColumn {
            name: "External-IP",
            column_type: "string",
            json_path: ".status.loadBalancer.ingress[*].ip",
            description: "Addresses of the Service outside the cluster",
            priority: 0,
        },
        PrinterColumn {
            name: "Port(s)",
            column_type: "string",
            json_path: ".spec.ports",
            description: "The ports of the Service",
            priority: 0,
        },
        PrinterColumn::AGE,
        PrinterColumn {
            name: "Selector",
            column_type: "string",
            json_path: ".spec.selector",
            description: "The labels of the Pods behind the Service",
            priority: 1,
        },
    ],
    schema_name: "io.k8s.api.core.v1.Service",
};

/// kube-apiserver's default `--service-node-port-range`.
pub const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;
const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];

pub struct ServiceHooks {
    /// `--service-cidr`.
    pub range: Ipv4Net,
}

fn kind(obj: &Value) -> &str {
    obj.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

fn has_node_ports(obj: &Value) -> bool {
    matches!(kind(obj), "NodePort" | "LoadBalancer")
}

fn cluster_ip(obj: &Value) -> Option<&str> {
    obj.pointer("/spec/clusterIP").and_then(Value::as_str)
}

fn is_headless(obj: &Value) -> bool {
    cluster_ip(obj) == Some("None")
}

fn ports(obj: &Value) -> Vec<Value> {
    obj.pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The node ports and cluster IPs `stored` Services hold, but for the one named like `obj`.
fn taken(obj: &Value, stored: &[Value]) -> (HashSet<u16>, HashSet<Ipv4Addr>) {
    let me = (
        crate::object::namespace(obj).to_string(),
        crate::object::name(obj).to_string(),
    );
    let mut node_ports = HashSet::new();
    let mut ips = HashSet::new();
    for other in stored {
        let them = (
            crate::object::namespace(other).to_string(),
            crate::object::name(other).to_string(),
        );
        if them == me {
            continue;
        }
        for port in ports(other) {
            if let Some(node_port) = port["nodePort"].as_u64() {
                node_ports.insert(node_port as u16);
            }
        }
        if let Some(ip) = cluster_ip(other).and_then(|ip| ip.parse().ok()) {
            ips.insert(ip);
        }
    }
    (node_ports, ips)
}

/// An Invalid value error whose value Go prints with `%#v` (`[]string{"10.0.0.1"}`).
fn invalid_printed(field: &str, printed: String, detail: String) -> FieldError {
    FieldError {
        kind: ErrorType::Invalid,
        field: field.to_string(),
        value: None,
        detail: format!("{printed}: {detail}"),
        verbatim: false,
    }
}

/// IANA_SVC_NAME, as a named targetPort must be.
fn is_iana_svc_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

impl ServiceHooks {
    /// A free address of the range: after the network address and the first (the
    /// `kubernetes` Service's by convention) and before the broadcast address; spread by
    /// the name, so that concurrent servers rarely pick the same.
    fn free_ip(&self, name: &str, taken: &HashSet<Ipv4Addr>) -> Option<Ipv4Addr> {
        let first = u32::from(self.range.network()) + 1;
        let last = u32::from(self.range.broadcast()).saturating_sub(1);
        let size = last.checked_sub(first)? + 1;
        let seed = name.bytes().fold(2_166_136_261u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16_777_619)
        });
        (0..size)
            .map(|i| Ipv4Addr::from(first + (seed.wrapping_add(i) % size)))
            .find(|ip| !taken.contains(ip))
    }

    fn allocate_ip(
        &self,
        old: Option<&Value>,
        obj: &mut Value,
        taken: &HashSet<Ipv4Addr>,
    ) -> Vec<FieldError> {
        if kind(obj) == "ExternalName" || is_headless(obj) {
            return Vec::new();
        }
        let held = old
            .and_then(cluster_ip)
            .filter(|ip| *ip != "None" && !ip.is_empty());
        match cluster_ip(obj).filter(|ip| !ip.is_empty()) {
            Some(asked) if Some(asked) == held => Vec::new(),
            Some(asked) if held.is_some() => vec![FieldError::invalid(
                "spec.clusterIPs[0]",
                asked,
                "may not change once set",
            )],
            Some(asked) => match asked.parse::<Ipv4Addr>() {
                Err(_) => vec![FieldError::invalid(
                    "spec.clusterIPs[0]",
                    asked,
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                )],
                Ok(ip) if !self.range.contains(&ip) => vec![invalid_printed(
                    "spec.clusterIPs",
                    format!("[]string{{\"{asked}\"}}"),
                    format!("failed to allocate IP {asked}: the provided IP ({asked}) is not in the valid range. The range of valid IPs is {}", self.range),
                )],
                Ok(ip) if taken.contains(&ip) => vec![invalid_printed(
                    "spec.clusterIPs",
                    format!("[]string{{\"{asked}\"}}"),
                    format!("failed to allocate IP {asked}: provided IP is already allocated"),
                )],
                Ok(_) => {
                    obj["spec"]["clusterIPs"] = json!([asked]);
                    Vec::new()
                }
            },
            None => match held.map(str::to_string).or_else(|| {
                self.free_ip(crate::object::name(obj), taken)
                    .map(|ip| ip.to_string())
            }) {
                Some(ip) => {
                    obj["spec"]["clusterIP"] = json!(ip);
                    obj["spec"]["clusterIPs"] = json!([ip]);
                    Vec::new()
                }
                None => vec![invalid_printed(
                    "spec.clusterIPs",
                    "[]string{}".into(),
                    format!("failed to allocate a serviceIP: range is full ({})", self.range),
                )],
            },
        }
    }
}

/// Node ports for the ports that need one: those given are checked, the others handed
/// out (an update keeps the ones the stored Service holds for the same port).
fn allocate_node_ports(
    old: Option<&Value>,
    obj: &mut Value,
    taken: &HashSet<u16>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut list = ports(obj);
    let wants = has_node_ports(obj);
    let held: Vec<Value> = old.map(ports).unwrap_or_default();
    let mut mine: HashSet<u16> = HashSet::new();
    for (i, port) in list.iter_mut().enumerate() {
        let path = format!("spec.ports[{i}].nodePort");
        // 0 asks for a port to be handed out, as no nodePort does.
        if port["nodePort"] == 0 {
            if let Some(fields) = port.as_object_mut() {
                fields.remove("nodePort");
            }
        }
        match port["nodePort"].as_u64() {
            Some(_) if !wants => {
                errors.push(FieldError::forbidden(
                    &path,
                    format!("may not be used when `type` is '{}'", kind(obj)),
                ));
            }
            Some(asked) => {
                let asked_port = u16::try_from(asked).unwrap_or(0);
                if !NODE_PORTS.contains(&asked_port) {
                    errors.push(FieldError::invalid(
                        &path,
                        asked,
                        format!(
                            "provided port is not in the valid range. The range of valid ports is {}-{}",
                            NODE_PORTS.start(),
                            NODE_PORTS.end()
                        ),
                    ));
                } else if taken.contains(&asked_port) || !mine.insert(asked_port) {
                    errors.push(FieldError::invalid(
                        &path,
                        asked,
                        "provided port is already allocated",
                    ));
                }
            }
            None if wants => {
                let same = held
                    .iter()
                    .find(|h| h["port"] == port["port"] && h["protocol"] == port["protocol"]);
                let kept = same.and_then(|h| h["nodePort"].as_u64()).map(|p| p as u16);
                let chosen = kept.or_else(|| {
                    NODE_PORTS
                        .clone()
                        .find(|p| !taken.contains(p) && !mine.contains(p))
                });
                match chosen {
                    Some(p) => {
                        mine.insert(p);
                        port["nodePort"] = json!(p);
                    }
                    None => errors.push(FieldError::invalid(
                        &path,
                        0,
                        "failed to allocate a nodePort: range is full",
                    )),
                }
            }
            None => {}
        }
    }
    if !list.is_empty() {
        obj["spec"]["ports"] = Value::Array(list);
    }
    errors
}

fn port_errors(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let list = ports(obj);
    if list.is_empty() && kind(obj) != "ExternalName" && !is_headless(obj) {
        errors.push(FieldError::required("spec.ports", ""));
    }
    let mut names = HashSet::new();
    let mut pairs = HashSet::new();
    for (i, port) in list.iter().enumerate() {
        let at = |f: &str| format!("spec.ports[{i}].{f}");
        let name = port["name"].as_str().unwrap_or("");
        if list.len() > 1 && name.is_empty() {
            errors.push(FieldError::required(at("name"), ""));
        } else if !name.is_empty() && !names.insert(name.to_string()) {
            errors.push(FieldError::duplicate(at("name"), name));
        }
        let number = port["port"].as_i64().unwrap_or(0);
        if !(1..=65535).contains(&number) {
            errors.push(FieldError::invalid(
                at("port"),
                number,
                "must be between 1 and 65535, inclusive",
            ));
        }
        let protocol = port["protocol"].as_str().unwrap_or("TCP");
        if !PROTOCOLS.contains(&protocol) {
            errors.push(FieldError::not_supported(
                at("protocol"),
                protocol,
                &PROTOCOLS,
            ));
        }
        if !pairs.insert((number, protocol.to_string())) {
            errors.push(FieldError::duplicate(
                format!("spec.ports[{i}]"),
                format!("{{port: {number}, protocol: {protocol}}}"),
            ));
        }
        match &port["targetPort"] {
            Value::Number(n) if !(1..=65535).contains(&n.as_i64().unwrap_or(0)) => {
                errors.push(FieldError::invalid(
                    at("targetPort"),
                    n.clone(),
                    "must be between 1 and 65535, inclusive",
                ))
            }
            Value::String(s) if !is_iana_svc_name(s) => {
                errors.push(FieldError::invalid(
                    at("targetPort"),
                    s.clone(),
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-), at most 15 characters, at least one letter",
                ))
            }
            _ => {}
        }
    }
    errors
}

fn spec_errors(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let service_type = kind(obj);
    if !TYPES.contains(&service_type) {
        errors.push(FieldError::not_supported("spec.type", service_type, &TYPES));
    }
    if service_type == "ExternalName"
        && obj
            .pointer("/spec/externalName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        errors.push(FieldError::required("spec.externalName", ""));
    }
    let affinity = obj
        .pointer("/spec/sessionAffinity")
        .and_then(Value::as_str)
        .unwrap_or("None");
    if !["ClientIP", "None"].contains(&affinity) {
        errors.push(FieldError::not_supported(
            "spec.sessionAffinity",
            affinity,
            &["ClientIP", "None"],
        ));
    }
    if let Some(policy) = obj
        .pointer("/spec/externalTrafficPolicy")
        .and_then(Value::as_str)
    {
        if !has_node_ports(obj) {
            errors.push(FieldError::invalid(
                "spec.externalTrafficPolicy",
                policy,
                "may only be set when `type` is 'NodePort' or 'LoadBalancer'",
            ));
        } else if !["Cluster", "Local"].contains(&policy) {
            errors.push(FieldError::not_supported(
                "spec.externalTrafficPolicy",
                policy,
                &["Cluster", "Local"],
            ));
        }
    }
    if is_headless(obj) && has_node_ports(obj) {
        errors.push(FieldError::invalid(
            "spec.clusterIPs[0]",
            "None",
            "may not be set to 'None' for NodePort services",
        ));
    }
    errors.extend(port_errors(obj));
    errors
}

impl ResourceHooks for ServiceHooks {
    fn allows_unconditional_update(&self) -> bool {
        true
    }

    fn default_on_create(&self, obj: &mut Value) {
        defaults(obj);
    }

    fn default_on_update(&self, obj: &mut Value) {
        defaults(obj);
    }

    fn allocates(&self) -> bool {
        true
    }

    fn allocate(
        &self,
        old: Option<&Value>,
        obj: &mut Value,
        stored: &[Value],
    ) -> Result<(), Status> {
        // Malformed specs are for validation to report, with every error at once.
        if !spec_errors(obj).is_empty() {
            return Ok(());
        }
        let (ports, ips) = taken(obj, stored);
        let mut errors = self.allocate_ip(old, obj, &ips);
        errors.extend(allocate_node_ports(old, obj, &ports));
        if !errors.is_empty() {
            return Err(Status::invalid(
                &GroupKind::new("", SERVICE.kind),
                crate::object::name(obj),
                &errors,
            ));
        }
        if kind(obj) == "LoadBalancer" {
            // No load balancer answers for it: it stays as NodePort, with no ingress.
            obj["status"] = json!({"loadBalancer": {}});
        }
        Ok(())
    }

    fn validate_create(&self, obj: &Value) -> Admission {
        Admission {
            errors: spec_errors(obj),
            ..Default::default()
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, _privileged: bool) -> Admission {
        let mut errors = spec_errors(new);
        let (was, is) = (cluster_ip(old), cluster_ip(new));
        if was.is_some_and(|w| !w.is_empty()) && was != is && kind(new) != "ExternalName" {
            errors.push(FieldError::invalid(
                "spec.clusterIPs[0]",
                is.unwrap_or(""),
                "may not change once set",
            ));
        }
        Admission {
            errors,
            ..Default::default()
        }
    }
}

/// kube-apiserver's defaults for a Service.
fn defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let service_type = spec
        .entry("type")
        .or_insert_with(|| json!("ClusterIP"))
        .as_str()
        .unwrap_or("ClusterIP")
        .to_string();
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    if service_type == "ExternalName" {
        return;
    }
    spec.entry("internalTrafficPolicy")
        .or_insert_with(|| json!("Cluster"));
    spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
    spec.entry("ipFamilyPolicy")
        .or_insert_with(|| json!("SingleStack"));
    if matches!(service_type.as_str(), "NodePort" | "LoadBalancer") {
        spec.entry("externalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if service_type == "LoadBalancer" {
        spec.entry("allocateLoadBalancerNodePorts")
            .or_insert_with(|| json!(true));
    }
    if spec.get("clusterIP").and_then(Value::as_str) == Some("None") {
        spec.insert("clusterIPs".into(), json!(["None"]));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.entry("protocol").or_insert_with(|| json!("TCP"));
            if !port.contains_key("targetPort") {
                if let Some(number) = port.get("port").cloned() {
                    port.insert("targetPort".into(), number);
                }
            }
        }
    }
}

/// kubectl's cells of a Service: `PORT(S)` as `80/TCP` or `80:30080/TCP`, `<none>` or
/// `<pending>` where there is nothing.
pub fn computed_cell(column: &str, obj: &Value, read: Value) -> Value {
    match column {
        "Port(s)" => {
            let list: Vec<String> = ports(obj)
                .iter()
                .map(|p| {
                    let protocol = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_u64() {
                        Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                        None => format!("{}/{protocol}", p["port"]),
                    }
                })
                .collect();
            json!(if list.is_empty() {
                "<none>".to_string()
            } else {
                list.join(",")
            })
        }
        "External-IP" if kind(obj) == "LoadBalancer" && read.as_str().is_none_or(str::is_empty) => {
            json!("<pending>")
        }
        "External-IP" if kind(obj) == "ExternalName" => {
            json!(obj
                .pointer("/spec/externalName")
                .cloned()
                .unwrap_or(json!("<none>")))
        }
        "Selector" => match obj.pointer("/spec/selector").and_then(Value::as_object) {
            Some(selector) if !selector.is_empty() => json!(selector
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")),
            _ => json!("<none>"),
        },
        _ if read.is_null() || read == "" => json!("<none>"),
        _ => read,
    }
}

/// OpenAPI schemas of Service and ServiceList.
pub fn schemas() -> Value {
    json!({
        "io.k8s.api.core.v1.Service": {
            "type": "object",
            "description": "A named abstraction of software service (e.g. a VM's ssh) on a set of Pods.",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Service", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                    "type": {"type": "string", "description": "ClusterIP, NodePort, LoadBalancer or ExternalName."},
                    "clusterIP": {"type": "string"},
                    "clusterIPs": {"type": "array", "items": {"type": "string"}},
                    "selector": {"type": "object", "additionalProperties": {"type": "string"}},
                    "ports": {"type": "array", "items": {"type": "object", "properties": {
                        "name": {"type": "string"}, "protocol": {"type": "string"},
                        "port": {"type": "integer"}, "nodePort": {"type": "integer"},
                        "targetPort": {"x-kubernetes-int-or-string": true},
                        "appProtocol": {"type": "string"}}}},
                    "sessionAffinity": {"type": "string"},
                    "externalTrafficPolicy": {"type": "string"},
                    "internalTrafficPolicy": {"type": "string"},
                    "externalName": {"type": "string"},
                    "publishNotReadyAddresses": {"type": "boolean"}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        },
        "io.k8s.api.core.v1.ServiceList": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Service"}}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hooks() -> ServiceHooks {
        ServiceHooks {
            range: "10.96.0.0/12".parse().unwrap(),
        }
    }

    fn service(name: &str, spec: Value) -> Value {
        let mut obj = json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec});
        defaults(&mut obj);
        obj
    }

    #[test]
    fn cluster_ips_and_node_ports_are_handed_out_once() {
        let h = hooks();
        let mut a = service("a", json!({"type": "NodePort", "ports": [{"port": 80}]}));
        h.allocate(None, &mut a, &[]).unwrap();
        let ip: Ipv4Addr = cluster_ip(&a).unwrap().parse().unwrap();
        assert!(h.range.contains(&ip));
        assert_eq!(a["spec"]["ports"][0]["targetPort"], 80);
        let node_port = a["spec"]["ports"][0]["nodePort"].as_u64().unwrap() as u16;
        assert!(NODE_PORTS.contains(&node_port));

        let mut b = service(
            "b",
            json!({"type": "NodePort", "clusterIP": ip.to_string(),
                   "ports": [{"port": 80, "nodePort": node_port}]}),
        );
        let err = h.allocate(None, &mut b, &[a.clone()]).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(err.message.contains(&format!("spec.clusterIPs: Invalid value: []string{{\"{ip}\"}}: failed to allocate IP {ip}: provided IP is already allocated")), "{}", err.message);
        assert!(err.message.contains(&format!("spec.ports[0].nodePort: Invalid value: {node_port}: provided port is already allocated")), "{}", err.message);

        let mut outside = service(
            "c",
            json!({"clusterIP": "10.0.0.1", "ports": [{"port": 80, "nodePort": 80}]}),
        );
        let err = h.allocate(None, &mut outside, &[]).unwrap_err();
        assert!(
            err.message
                .contains("The range of valid IPs is 10.96.0.0/12"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains(
                "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"
            ),
            "{}",
            err.message
        );

        // An update keeps what the Service holds.
        let mut again = a.clone();
        again["spec"]["ports"][0]
            .as_object_mut()
            .unwrap()
            .remove("nodePort");
        again["spec"].as_object_mut().unwrap().remove("clusterIP");
        h.allocate(Some(&a), &mut again, &[a.clone()]).unwrap();
        assert_eq!(again["spec"]["ports"][0]["nodePort"], node_port);
        assert_eq!(again["spec"]["clusterIP"], ip.to_string());
    }

    #[test]
    fn headless_and_external_name_get_no_address() {
        let h = hooks();
        let mut headless = service("h", json!({"clusterIP": "None", "selector": {"a": "b"}}));
        h.allocate(None, &mut headless, &[]).unwrap();
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        assert!(
            spec_errors(&headless).is_empty(),
            "{:?}",
            spec_errors(&headless)
        );
        let external = service("e", json!({"type": "ExternalName"}));
        let messages: Vec<String> = spec_errors(&external)
            .iter()
            .map(FieldError::message)
            .collect();
        assert_eq!(messages, ["spec.externalName: Required value"]);
        let none = service("n", json!({}));
        let messages: Vec<String> = spec_errors(&none).iter().map(FieldError::message).collect();
        assert_eq!(messages, ["spec.ports: Required value"]);
    }

    #[test]
    fn kubectl_cells() {
        let a = service(
            "a",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}], "selector": {"app": "web"}}),
        );
        assert_eq!(computed_cell("Port(s)", &a, Value::Null), "80:30080/TCP");
        assert_eq!(computed_cell("Selector", &a, Value::Null), "app=web");
        assert_eq!(computed_cell("External-IP", &a, Value::Null), "<none>");
    }
}
