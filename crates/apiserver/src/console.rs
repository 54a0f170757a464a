//! The VMI `console` and `vnc` subresources: websockets with virtctl's `plain.kubevirt.io`
//! subprotocol (raw bytes, no channel prefix), relayed to the serial console or VNC socket
//! that the VMI's QEMU serves on a node of this server.

use std::collections::HashMap;
use std::path::PathBuf;

use apimachinery::status::Status;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::FromRequestParts;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use http::request::Parts;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::registry::Registry;
use crate::request::ResourcePath;

pub const PROTOCOL: &str = "plain.kubevirt.io";

/// Where the runtime files of each node served by this process live
/// (`DIR/node/<node>`), so consoles can be reached without a network hop.
pub type NodeDirs = HashMap<String, PathBuf>;

fn bad_request(message: &str) -> Status {
    Status::bad_request(message)
}

pub async fn serve(
    registry: &Registry,
    node_dirs: &NodeDirs,
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
    let vmi = registry.get(&reg, Some(namespace), name).await?;
    match vmi.pointer("/status/phase").and_then(|p| p.as_str()) {
        Some("Running") => {}
        Some("Failed") => return Err(Status::failure(409, "Conflict", "VMI is in failed status")),
        _ => return Err(bad_request("VMI is not running")),
    }
    if which == "console"
        && vmi.pointer("/spec/domain/devices/autoattachSerialConsole")
            == Some(&serde_json::json!(false))
    {
        return Err(bad_request("No serial consoles are present."));
    }
    if which == "vnc"
        && vmi.pointer("/spec/domain/devices/autoattachGraphicsDevice")
            == Some(&serde_json::json!(false))
    {
        return Err(bad_request("No graphics devices are present."));
    }
    let node = vmi
        .pointer("/status/nodeName")
        .and_then(|n| n.as_str())
        .unwrap_or("");
    let Some(node_dir) = node_dirs.get(node) else {
        return Err(bad_request(&format!(
            "the {which} of VMIs on node {node:?} cannot be reached from this server"
        )));
    };
    let socket = node_dir
        .join("vmi")
        .join(namespace)
        .join(name)
        .join(if which == "vnc" {
            "vnc.sock"
        } else {
            "console.sock"
        });
    let stream = UnixStream::connect(&socket)
        .await
        .map_err(|e| bad_request(&format!("cannot connect to the {which} of VMI {name}: {e}")))?;
    let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &())
        .await
        .map_err(|e| bad_request(&format!("a websocket upgrade is required: {e}")))?;
    Ok(upgrade
        .protocols([PROTOCOL])
        .on_upgrade(move |socket| relay(socket, stream)))
}

/// Copies bytes both ways until either side closes.
async fn relay(socket: WebSocket, stream: UnixStream) {
    let (mut ws_out, mut ws_in) = socket.split();
    let (mut unix_in, mut unix_out) = stream.into_split();
    let to_guest = async {
        while let Some(Ok(message)) = ws_in.next().await {
            let bytes = match message {
                Message::Binary(b) => b.to_vec(),
                Message::Text(t) => t.as_bytes().to_vec(),
                Message::Close(_) => break,
                _ => continue,
            };
            if unix_out.write_all(&bytes).await.is_err() {
                break;
            }
        }
    };
    let from_guest = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match unix_in.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if ws_out
                        .send(Message::Binary(buf[..n].to_vec().into()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = ws_out.send(Message::Close(None)).await;
    };
    tokio::select! {
        _ = to_guest => {}
        _ = from_guest => {}
    }
}
