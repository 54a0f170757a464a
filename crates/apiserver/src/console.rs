//! The VMI `console` and `vnc` subresources and the VM and VMI `portforward/PORT[/PROTO]`
//! ones: websockets with virtctl's `plain.kubevirt.io` subprotocol (raw bytes, no channel
//! prefix), relayed to the agent of the VMI's node (`agent_dial`), which relays them to
//! the serial console or VNC socket of its QEMU, or to the port at the VMI's Pod IP. A
//! node run by this process is reached the same way, so the server never opens QEMU's
//! sockets itself.

use apimachinery::status::Status;
use apimachinery::wsstream;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::FromRequestParts;
use axum::response::Response;
use bytes::Bytes;
use futures::{future, Sink, SinkExt, Stream, StreamExt};
use http::request::Parts;
use kubevirt_api::model::VmiPhase;

use crate::agent_dial::AgentDialer;
use crate::registry::Registry;
use crate::request::ResourcePath;

pub const PROTOCOL: &str = "plain.kubevirt.io";

/// How the server reaches consoles: through the agents of the nodes.
pub struct Consoles {
    pub agents: AgentDialer,
}

fn bad_request(message: &str) -> Status {
    Status::bad_request(message)
}

pub async fn serve(
    registry: &Registry,
    consoles: &Consoles,
    mut parts: Parts,
    path: &ResourcePath,
) -> Result<Response, Status> {
    let (Some(namespace), Some(name)) = (path.namespace.as_deref(), path.name.as_deref()) else {
        return Err(Status::failure(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    let which = match path.subresource.as_deref().unwrap_or("") {
        forward if forward.starts_with("portforward") => port_forward(forward)?,
        // VMs have only the port-forward of these.
        _ if path.resource != "virtualmachineinstances" => {
            return Err(Status::failure(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ))
        }
        other => other.to_string(),
    };
    let which = which.as_str();
    // A VM's port-forward goes to its VMI, which has the VM's name.
    let reg = registry
        .find("kubevirt.io", "v1", "virtualmachineinstances")
        .ok_or_else(|| Status::internal("no VMI registration"))?;
    let vmi: kubevirt_api::model::VirtualMachineInstance =
        serde_json::from_value(registry.get(&reg, Some(namespace), name).await?)
            .map_err(|e| Status::internal(format!("the stored VMI does not decode: {e}")))?;
    match vmi.phase() {
        VmiPhase::Running => {}
        VmiPhase::Failed => {
            return Err(Status::failure(409, "Conflict", "VMI is in failed status"))
        }
        _ => return Err(bad_request("VMI is not running")),
    }
    let devices = vmi.spec.devices();
    if which == "console" && devices.and_then(|d| d.autoattach_serial_console) == Some(false) {
        return Err(bad_request("No serial consoles are present."));
    }
    if which == "vnc" && devices.and_then(|d| d.autoattach_graphics_device) == Some(false) {
        return Err(bad_request("No graphics devices are present."));
    }
    let node = vmi.node_name().unwrap_or("");
    let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &())
        .await
        .map_err(|e| bad_request(&format!("a websocket upgrade is required: {e}")))?
        .protocols([PROTOCOL]);
    if node.is_empty() {
        return Err(bad_request(&format!("VMI {name} is not on any node")));
    }
    let agent = consoles
        .agents
        .dial(registry, node, namespace, name, which)
        .await?;
    let (from_agent, to_agent) = wsstream::byte_halves(agent);
    // The agent gives its socket to the newest client and closes this relay's stream.
    Ok(upgrade.on_upgrade(move |socket| async move {
        let (from_client, to_client) = client_byte_halves(socket);
        wsstream::relay(
            from_client,
            to_client,
            from_agent,
            to_agent,
            future::pending::<()>(),
        )
        .await
    }))
}

/// The agent's path tail for `portforward/PORT[/PROTO]`: `portforward/PORT/PROTO`, the
/// port checked and the protocol `tcp` unless named.
fn port_forward(subresource: &str) -> Result<String, Status> {
    let mut parts = subresource.split('/').skip(1);
    let port = parts.next().unwrap_or("");
    let protocol = parts.next().unwrap_or("tcp");
    if parts.next().is_some() {
        return Err(bad_request(&format!(
            "invalid port-forward path: {subresource}"
        )));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(bad_request(&format!("invalid port: {port:?}"))),
    }
    match protocol {
        "tcp" => Ok(format!("portforward/{port}/tcp")),
        "udp" => Err(bad_request(
            "port-forward of udp is not supported by virtplane nodes; use tcp",
        )),
        other => Err(bad_request(&format!("invalid protocol: {other:?}"))),
    }
}

/// The client's websocket (axum's) as bytes in and bytes out, as
/// `apimachinery::wsstream::byte_halves` sees the agent's.
fn client_byte_halves(
    socket: WebSocket,
) -> (
    impl Stream<Item = Bytes>,
    impl Sink<Bytes, Error = axum::Error>,
) {
    let (sink, stream) = socket.split();
    let incoming = stream
        .take_while(|m| future::ready(matches!(m, Ok(m) if !matches!(m, Message::Close(_)))))
        .filter_map(|m| {
            future::ready(match m {
                Ok(Message::Binary(b)) => Some(b),
                Ok(Message::Text(t)) => Some(Bytes::copy_from_slice(t.as_str().as_bytes())),
                _ => None,
            })
        });
    let outgoing = sink.with(|b: Bytes| future::ready(Ok(Message::Binary(b))));
    (incoming, outgoing)
}
