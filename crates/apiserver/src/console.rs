//! The VMI `console` and `vnc` subresources: websockets with virtctl's `plain.kubevirt.io`
//! subprotocol (raw bytes, no channel prefix), relayed to the agent of the VMI's node
//! (`agent_dial`), which relays them to the serial console or VNC socket of its QEMU. A
//! node run by this process is reached the same way, so the server never opens QEMU's
//! sockets itself.

use apimachinery::status::Status;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::FromRequestParts;
use axum::response::Response;
use bytes::Bytes;
use futures::{Sink, SinkExt, Stream, StreamExt};
use http::request::Parts;
use kubevirt_api::model::VmiPhase;

use crate::agent_dial::{self, AgentDialer};
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
    let which = path.subresource.as_deref().unwrap_or("");
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
    let (incoming, outgoing) = agent_dial::byte_halves(agent);
    // The agent gives its socket to the newest client and closes this relay's stream.
    Ok(upgrade.on_upgrade(move |socket| relay(socket, incoming, outgoing)))
}

/// Copies bytes between the client's websocket and the agent's until either side closes
/// (the agent closes its side when a newer client takes the socket).
async fn relay(
    socket: WebSocket,
    from_guest: impl Stream<Item = Bytes>,
    to_guest: impl Sink<Bytes>,
) {
    let (mut ws_out, mut ws_in) = socket.split();
    let upstream = async {
        let mut to_guest = std::pin::pin!(to_guest);
        while let Some(Ok(message)) = ws_in.next().await {
            let bytes = match message {
                Message::Binary(b) => b,
                Message::Text(t) => Bytes::copy_from_slice(t.as_str().as_bytes()),
                Message::Close(_) => break,
                _ => continue,
            };
            if to_guest.send(bytes).await.is_err() {
                break;
            }
        }
        let _ = to_guest.close().await;
    };
    let downstream = async {
        let mut from_guest = std::pin::pin!(from_guest);
        while let Some(bytes) = from_guest.next().await {
            if ws_out.send(Message::Binary(bytes)).await.is_err() {
                break;
            }
        }
        let _ = ws_out.send(Message::Close(None)).await;
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}
