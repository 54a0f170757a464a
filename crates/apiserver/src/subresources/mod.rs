//! `subresources.kubevirt.io/v1`: the lifecycle verbs virtctl calls (start, stop,
//! restart, migrate on VMs; pause, unpause, softreboot on VMIs) over HTTP. This layer
//! checks the path and method, reads the objects, asks `rules` for virt-api's decision,
//! has `apply` make its writes, and turns the outcome into a response or a Status.

use apimachinery::status::{GroupResource, Status};
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::registry::Registry;
use crate::request::ResourcePath;
use rules::{Refusal, Verb};

mod apply;
mod rules;

pub const GROUP: &str = "subresources.kubevirt.io";

/// Resources advertised in discovery for `subresources.kubevirt.io/v1`, as virt-api does.
pub fn discovery_entries() -> Vec<crate::discovery::ExtraResource> {
    const NAMES: [&str; 11] = [
        "virtualmachineinstances/console",
        "virtualmachineinstances/vnc",
        "virtualmachineinstances/portforward",
        "virtualmachines/portforward",
        "virtualmachines/start",
        "virtualmachines/stop",
        "virtualmachines/restart",
        "virtualmachines/migrate",
        "virtualmachineinstances/pause",
        "virtualmachineinstances/unpause",
        "virtualmachineinstances/softreboot",
    ];
    NAMES
        .iter()
        .map(|name| crate::discovery::ExtraResource {
            group: GROUP,
            version: "v1",
            name,
            kind: "",
            namespaced: true,
            verbs: if name.ends_with("/console")
                || name.ends_with("/vnc")
                || name.ends_with("/portforward")
            {
                &["get"]
            } else {
                &["update"]
            },
        })
        .collect()
}

/// virt-api's `errors.NewConflict(v1.Resource("virtualmachine"), name, err)`:
/// `Operation cannot be fulfilled on virtualmachine.kubevirt.io "<name>": <message>`.
fn conflict(name: &str, message: &str) -> Status {
    Status::conflict(
        &GroupResource::new("kubevirt.io", "virtualmachine"),
        name,
        message,
    )
}

/// The same for the VMI subresources (`v1.Resource("virtualmachineinstance")`).
fn vmi_conflict(name: &str, message: &str) -> Status {
    Status::conflict(
        &GroupResource::new("kubevirt.io", "virtualmachineinstance"),
        name,
        message,
    )
}

/// virt-api reports a missing object with the singular resource name
/// (`virtualmachine.kubevirt.io "x" not found`).
fn not_found_as(resource: &str, name: &str, status: Status) -> Status {
    if status.code == 404 {
        Status::not_found(&GroupResource::new("kubevirt.io", resource), name)
    } else {
        status
    }
}

/// The Status virt-api answers a refusal with; conflicts name the object of the path.
fn refused(name: &str, refusal: Refusal) -> Status {
    match refusal {
        Refusal::VmConflict(message) => conflict(name, &message),
        Refusal::VmiConflict(message) => vmi_conflict(name, &message),
        Refusal::BadRequest(message) => Status::bad_request(message),
        Refusal::Internal(message) => Status::internal(message),
    }
}

/// The request body as JSON or YAML; an empty one is `{}`.
fn parse_body(body: &[u8], what: &str) -> Result<Value, Status> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let text = std::str::from_utf8(body).map_err(|e| {
        Status::bad_request(format!(
            "Can not unmarshal Request body to struct, error: {e}"
        ))
    })?;
    let value = serde_json::from_str::<Value>(text)
        .or_else(|_| apimachinery::yaml::from_str(text))
        .map_err(|e| {
            Status::bad_request(format!(
                "Can not unmarshal Request body to struct, error: {e}"
            ))
        })?;
    if !value.is_object() {
        return Err(Status::bad_request(format!(
            "Can not unmarshal Request body to struct, error: {what} must be an object"
        )));
    }
    Ok(value)
}

/// A stored object as its typed kind.
fn typed<T: serde::de::DeserializeOwned>(stored: Value) -> Result<T, Status> {
    serde_json::from_value(stored)
        .map_err(|e| Status::internal(format!("a stored object does not decode: {e}")))
}

/// A path this group does not serve.
fn not_found_path() -> Status {
    Status::failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// `PUT .../namespaces/<ns>/<resource>/<name>/<verb>`: 202 for the VM verbs, 200 for the
/// VMI ones, as virt-api answers.
pub async fn handle(
    registry: &Registry,
    method: &Method,
    path: &ResourcePath,
    body: &[u8],
) -> Result<Response, Status> {
    let (Some(namespace), Some(name), Some(verb)) = (
        path.namespace.as_deref(),
        path.name.as_deref(),
        path.subresource.as_deref(),
    ) else {
        return Err(not_found_path());
    };
    if method != Method::PUT {
        return Err(Status::failure(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported on {verb}"),
        ));
    }
    let vm_reg = registry
        .find("kubevirt.io", "v1", "virtualmachines")
        .ok_or_else(|| Status::internal("no VM registration"))?;
    let vmi_reg = registry
        .find("kubevirt.io", "v1", "virtualmachineinstances")
        .ok_or_else(|| Status::internal("no VMI registration"))?;
    let target = apply::Target {
        registry,
        namespace,
        name,
    };
    match Verb::parse(&path.resource, verb).ok_or_else(not_found_path)? {
        Verb::Vm(vm_verb) => {
            let vm = registry
                .get(&vm_reg, Some(namespace), name)
                .await
                .map_err(|s| not_found_as("virtualmachine", name, s))?;
            let vmi = match registry.get(&vmi_reg, Some(namespace), name).await {
                Ok(v) => Some(v),
                Err(s) if s.code == 404 => None,
                Err(s) => return Err(s),
            };
            let body = parse_body(body, verb)?;
            let vm = typed(vm)?;
            let vmi = vmi.map(typed).transpose()?;
            let decision = rules::decide_vm(vm_verb, &body, &vm, vmi.as_ref())
                .map_err(|r| refused(name, r))?;
            target.apply(&decision).await?;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        Verb::Vmi(vmi_verb) => {
            let vmi = registry
                .get(&vmi_reg, Some(namespace), name)
                .await
                .map_err(|s| not_found_as("virtualmachineinstance", name, s))?;
            let body = parse_body(body, verb)?;
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            let decision = rules::decide_vmi(vmi_verb, &body, &typed(vmi)?, &now)
                .map_err(|r| refused(name, r))?;
            target.apply(&decision).await?;
            Ok(StatusCode::OK.into_response())
        }
    }
}
