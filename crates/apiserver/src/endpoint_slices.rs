//! `discovery.k8s.io/v1` EndpointSlices: where a Service's traffic goes (the addresses
//! of the Pods its selector matches, with their readiness and node), kept by the
//! endpoint-slice controller and read by every node's service proxy and by DNS.

use apimachinery::field::FieldError;
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use serde_json::{json, Value};

use crate::registry::{Admission, ResourceHooks};

pub const GROUP: &str = "discovery.k8s.io";

pub static ENDPOINT_SLICE: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "EndpointSlice",
    list_kind: "EndpointSliceList",
    plural: "endpointslices",
    singular: "endpointslice",
    short_names: &[],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: &[
        PrinterColumn {
            name: "AddressType",
            column_type: "string",
            json_path: ".addressType",
            description: "The type of address carried by this EndpointSlice.",
            priority: 0,
        },
        PrinterColumn {
            name: "Ports",
            column_type: "string",
            json_path: ".ports[*].port",
            description: "The ports exposed by this EndpointSlice.",
            priority: 0,
        },
        PrinterColumn {
            name: "Endpoints",
            column_type: "string",
            json_path: ".endpoints[*].addresses[0]",
            description: "The addresses of the endpoints of this EndpointSlice.",
            priority: 0,
        },
        PrinterColumn::AGE,
    ],
    schema_name: "io.k8s.api.discovery.v1.EndpointSlice",
};

pub struct EndpointSliceHooks;

impl EndpointSliceHooks {
    /// The parts of kube's `ValidateEndpointSlice` that keep a slice usable.
    fn errors(obj: &Value) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let address_type = obj["addressType"].as_str().unwrap_or("");
        match address_type {
            "IPv4" | "IPv6" | "FQDN" => {}
            "" => errors.push(FieldError::required("addressType", "")),
            other => errors.push(FieldError::not_supported(
                "addressType",
                other,
                &["FQDN", "IPv4", "IPv6"],
            )),
        }
        for (i, endpoint) in obj["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let addresses = endpoint["addresses"]
                .as_array()
                .map_or(&[][..], Vec::as_slice);
            if addresses.is_empty() {
                errors.push(FieldError::required(
                    format!("endpoints[{i}].addresses"),
                    "must contain at least 1 address",
                ));
            }
            for (j, address) in addresses.iter().enumerate() {
                let text = address.as_str().unwrap_or("");
                if address_type == "IPv4" && text.parse::<std::net::Ipv4Addr>().is_err() {
                    errors.push(FieldError::invalid(
                        format!("endpoints[{i}].addresses[{j}]"),
                        text,
                        "must be a valid IPv4 address",
                    ));
                }
            }
        }
        for (i, port) in obj["ports"].as_array().into_iter().flatten().enumerate() {
            if let Some(number) = port["port"].as_i64() {
                if !(1..=65535).contains(&number) {
                    errors.push(FieldError::invalid(
                        format!("ports[{i}].port"),
                        number,
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
        errors
    }
}

impl ResourceHooks for EndpointSliceHooks {
    fn allows_unconditional_update(&self) -> bool {
        true
    }

    fn validate_create(&self, obj: &Value) -> Admission {
        Admission {
            errors: Self::errors(obj),
            ..Default::default()
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, _privileged: bool) -> Admission {
        let mut errors = Self::errors(new);
        if old["addressType"] != new["addressType"] {
            errors.push(FieldError::invalid(
                "addressType",
                new["addressType"].clone(),
                "field is immutable",
            ));
        }
        Admission {
            errors,
            ..Default::default()
        }
    }
}

/// OpenAPI schemas of EndpointSlice and EndpointSliceList.
pub fn schemas() -> Value {
    json!({
        "io.k8s.api.discovery.v1.EndpointSlice": {
            "type": "object",
            "description": "A subset of the endpoints that implement a Service.",
            "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": "EndpointSlice", "version": "v1"}],
            "required": ["addressType", "endpoints"],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                "addressType": {"type": "string", "description": "IPv4, IPv6 or FQDN."},
                "endpoints": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                    "addresses": {"type": "array", "items": {"type": "string"}},
                    "conditions": {"type": "object", "properties": {
                        "ready": {"type": "boolean"}, "serving": {"type": "boolean"}, "terminating": {"type": "boolean"}}},
                    "hostname": {"type": "string"},
                    "nodeName": {"type": "string"},
                    "targetRef": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "port": {"type": "integer"}, "protocol": {"type": "string"},
                    "appProtocol": {"type": "string"}}}}
            }
        },
        "io.k8s.api.discovery.v1.EndpointSliceList": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/io.k8s.api.discovery.v1.EndpointSlice"}}
            }
        }
    })
}
