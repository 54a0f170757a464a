//! `networking.k8s.io/v1` NetworkPolicies: which traffic may reach (ingress) and leave
//! (egress) the Pods a policy selects. Stored with kube's defaults and validation; every
//! node enforces them for its own Pods (`node-agent`'s network policy).

use apimachinery::field::FieldError;
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use apimachinery::selector::LabelSelector;
use serde_json::{json, Value};

use crate::registry::{Admission, ResourceHooks};

pub const GROUP: &str = "networking.k8s.io";

pub static NETWORK_POLICY: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "NetworkPolicy",
    list_kind: "NetworkPolicyList",
    plural: "networkpolicies",
    singular: "networkpolicy",
    short_names: &["netpol"],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: &[PrinterColumn::AGE],
    schema_name: "io.k8s.api.networking.v1.NetworkPolicy",
};

pub struct NetworkPolicyHooks;

/// kube's `ValidateNetworkPolicy*` for what a node enforces.
fn errors(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = &obj["spec"];
    selector(&spec["podSelector"], "spec.podSelector", &mut errors);
    for (i, kind) in spec["policyTypes"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let text = kind.as_str().unwrap_or("");
        if text != "Ingress" && text != "Egress" {
            errors.push(FieldError::not_supported(
                format!("spec.policyTypes[{i}]"),
                text,
                &["Egress", "Ingress"],
            ));
        }
    }
    for (direction, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in spec[direction].as_array().into_iter().flatten().enumerate() {
            let at = format!("spec.{direction}[{i}]");
            for (j, port) in rule["ports"].as_array().into_iter().flatten().enumerate() {
                port_errors(port, &format!("{at}.ports[{j}]"), &mut errors);
            }
            for (j, peer) in rule[peers].as_array().into_iter().flatten().enumerate() {
                peer_errors(peer, &format!("{at}.{peers}[{j}]"), &mut errors);
            }
        }
    }
    errors
}

fn selector(value: &Value, at: &str, errors: &mut Vec<FieldError>) {
    if let Err(message) = LabelSelector::from_label_selector_json(value) {
        errors.push(FieldError::invalid(at, value.clone(), message));
    }
}

fn port_errors(port: &Value, at: &str, errors: &mut Vec<FieldError>) {
    let protocol = port["protocol"].as_str().unwrap_or("TCP");
    if !["TCP", "UDP", "SCTP"].contains(&protocol) {
        errors.push(FieldError::not_supported(
            format!("{at}.protocol"),
            protocol,
            &["SCTP", "TCP", "UDP"],
        ));
    }
    match &port["port"] {
        Value::Null => {
            if !port["endPort"].is_null() {
                errors.push(FieldError::required(
                    format!("{at}.port"),
                    "must be specified when endPort is specified",
                ));
            }
        }
        Value::Number(n) => {
            let number = n.as_i64().unwrap_or(0);
            if !(1..=65535).contains(&number) {
                errors.push(FieldError::invalid(
                    format!("{at}.port"),
                    number,
                    "must be between 1 and 65535, inclusive",
                ));
            }
            if let Some(end) = port["endPort"].as_i64() {
                if end < number {
                    errors.push(FieldError::invalid(
                        format!("{at}.endPort"),
                        end,
                        "must be greater than or equal to `port`",
                    ));
                }
            }
        }
        Value::String(name) => {
            let valid = !name.is_empty()
                && name.len() <= 15
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && name.bytes().any(|b| b.is_ascii_lowercase());
            if !valid {
                errors.push(FieldError::invalid(
                    format!("{at}.port"),
                    name.as_str(),
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                ));
            }
            if !port["endPort"].is_null() {
                errors.push(FieldError::invalid(
                    format!("{at}.endPort"),
                    port["endPort"].clone(),
                    "may not be specified when `port` is non-numeric",
                ));
            }
        }
        other => errors.push(FieldError::invalid(
            format!("{at}.port"),
            other.clone(),
            "must be a port number or name",
        )),
    }
}

fn peer_errors(peer: &Value, at: &str, errors: &mut Vec<FieldError>) {
    let given = ["podSelector", "namespaceSelector", "ipBlock"]
        .iter()
        .filter(|k| !peer[**k].is_null())
        .count();
    if given == 0 {
        errors.push(FieldError::required(at, "must specify a peer"));
    }
    if !peer["ipBlock"].is_null() && given > 1 {
        errors.push(FieldError::forbidden(
            at,
            "may not specify both ipBlock and another peer",
        ));
    }
    for key in ["podSelector", "namespaceSelector"] {
        if !peer[key].is_null() {
            selector(&peer[key], &format!("{at}.{key}"), errors);
        }
    }
    if peer["ipBlock"].is_null() {
        return;
    }
    let cidr_text = peer["ipBlock"]["cidr"].as_str().unwrap_or("");
    let cidr = cidr_text.parse::<ipnet::IpNet>();
    if cidr_text.is_empty() {
        errors.push(FieldError::required(format!("{at}.ipBlock.cidr"), ""));
    } else if cidr.is_err() {
        errors.push(FieldError::invalid(
            format!("{at}.ipBlock.cidr"),
            cidr_text,
            "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
        ));
    }
    for (k, except) in peer["ipBlock"]["except"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let text = except.as_str().unwrap_or("");
        let field = format!("{at}.ipBlock.except[{k}]");
        match (text.parse::<ipnet::IpNet>(), &cidr) {
            (Err(_), _) => errors.push(FieldError::invalid(
                field,
                text,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            )),
            (Ok(inner), Ok(outer)) if !(outer.contains(&inner) && inner != *outer) => errors.push(
                FieldError::invalid(field, text, "must be a strict subset of `cidr`"),
            ),
            _ => {}
        }
    }
}

impl ResourceHooks for NetworkPolicyHooks {
    fn allows_unconditional_update(&self) -> bool {
        true
    }

    /// kube's defaults: TCP ports, and `policyTypes` from the rules given (Ingress always,
    /// Egress when there are egress rules).
    fn default_on_create(&self, obj: &mut Value) {
        default(obj);
    }

    fn default_on_update(&self, obj: &mut Value) {
        default(obj);
    }

    fn validate_create(&self, obj: &Value) -> Admission {
        Admission {
            errors: errors(obj),
            ..Default::default()
        }
    }

    fn validate_update(&self, _old: &Value, new: &Value, _privileged: bool) -> Admission {
        Admission {
            errors: errors(new),
            ..Default::default()
        }
    }
}

fn default(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("podSelector").or_insert_with(|| json!({}));
    for direction in ["ingress", "egress"] {
        let Some(rules) = spec.get_mut(direction).and_then(Value::as_array_mut) else {
            continue;
        };
        for rule in rules {
            let Some(ports) = rule.get_mut("ports").and_then(Value::as_array_mut) else {
                continue;
            };
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.entry("protocol").or_insert_with(|| json!("TCP"));
            }
        }
    }
    if spec.get("policyTypes").is_none_or(Value::is_null) {
        let mut types = vec![json!("Ingress")];
        if spec.get("egress").is_some_and(|e| !e.is_null()) {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".into(), Value::Array(types));
    }
}

/// OpenAPI schemas of NetworkPolicy and its list.
pub fn schemas() -> Value {
    let selector =
        json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"});
    let peer = json!({"type": "object", "properties": {
        "podSelector": selector, "namespaceSelector": selector,
        "ipBlock": {"type": "object", "required": ["cidr"], "properties": {
            "cidr": {"type": "string"}, "except": {"type": "array", "items": {"type": "string"}}}}}});
    let port = json!({"type": "object", "properties": {
        "protocol": {"type": "string"}, "port": {"x-kubernetes-int-or-string": true},
        "endPort": {"type": "integer", "format": "int32"}}});
    json!({
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector": {
            "type": "object",
            "description": "A label selector is a label query over a set of resources. The result of matchLabels and matchExpressions are ANDed. An empty label selector matches all objects. A null label selector matches no objects.",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                "matchExpressions": {"type": "array", "items": {"type": "object", "required": ["key", "operator"], "properties": {
                    "key": {"type": "string"}, "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}}}}}
            }
        },
        "io.k8s.api.networking.v1.NetworkPolicy": {
            "type": "object",
            "description": "NetworkPolicy describes what network traffic is allowed for a set of Pods",
            "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": "NetworkPolicy", "version": "v1"}],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                "spec": {"type": "object", "properties": {
                    "podSelector": selector,
                    "policyTypes": {"type": "array", "items": {"type": "string"}},
                    "ingress": {"type": "array", "items": {"type": "object", "properties": {
                        "from": {"type": "array", "items": peer}, "ports": {"type": "array", "items": port}}}},
                    "egress": {"type": "array", "items": {"type": "object", "properties": {
                        "to": {"type": "array", "items": peer}, "ports": {"type": "array", "items": port}}}}}}
            }
        },
        "io.k8s.api.networking.v1.NetworkPolicyList": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/io.k8s.api.networking.v1.NetworkPolicy"}}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(spec: Value) -> Vec<String> {
        let mut obj = json!({"spec": spec});
        default(&mut obj);
        errors(&obj).iter().map(|e| format!("{e:?}")).collect()
    }

    #[test]
    fn policies_are_defaulted_and_checked_as_kube_does() {
        let mut obj = json!({"spec": {"egress": [{"ports": [{"port": 53}]}]}});
        default(&mut obj);
        assert_eq!(obj["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(obj["spec"]["podSelector"], json!({}));
        assert_eq!(obj["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        assert!(checked(json!({"podSelector": {"matchLabels": {"app": "db"}},
                               "ingress": [{"from": [{"podSelector": {}}, {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                                            "ports": [{"port": 8080}, {"port": "http"}]}]}))
        .is_empty());
        let bad = checked(
            json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]},
                                 "policyTypes": ["Sideways"],
                                 "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33", "except": ["11.0.0.0/8"]}}, {}],
                                              "ports": [{"port": 70000}, {"protocol": "ICMP", "port": 1}]}]}),
        );
        let all = bad.join("\n");
        for field in [
            "spec.podSelector",
            "spec.policyTypes[0]",
            "spec.ingress[0].from[0].ipBlock.cidr",
            "spec.ingress[0].from[1]",
            "spec.ingress[0].ports[0].port",
            "spec.ingress[0].ports[1].protocol",
        ] {
            assert!(all.contains(field), "{field} missing from {all}");
        }
    }
}
