//! `GET /api/v1/namespaces/NS/pods/NAME/log` for virt-launcher Pods (`kubectl logs`): the
//! `guest-console-log` container's log is the guest's serial console, as KubeVirt's, and
//! `compute`'s is QEMU's own log. The node agent streams the file over its endpoint;
//! `follow` keeps the response open for what the guest writes next, `tailLines` keeps the
//! last lines.

use apimachinery::status::Status;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

use crate::agent_dial::AgentDialer;
use crate::registry::Registry;
use crate::request::ResourcePath;

/// The containers of a launcher Pod, and what the agent calls their logs.
const CONTAINERS: [(&str, &str); 2] = [("compute", "qemu"), ("guest-console-log", "serial")];

fn bad_request(message: String) -> Status {
    Status::bad_request(&message)
}

/// What the query asks: the container, whether to follow, how many last lines.
struct LogQuery {
    container: Option<String>,
    follow: bool,
    tail_lines: Option<usize>,
}

fn parse_query(query: Option<&str>) -> Result<LogQuery, Status> {
    let mut parsed = LogQuery {
        container: None,
        follow: false,
        tail_lines: None,
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "container" => parsed.container = Some(value.to_string()),
            "follow" => parsed.follow = value == "true" || value == "1",
            "tailLines" => {
                parsed.tail_lines = Some(value.parse().map_err(|_| {
                    bad_request(format!(
                        "tailLines: invalid value {value:?}: must be a number"
                    ))
                })?)
            }
            _ => {}
        }
    }
    Ok(parsed)
}

/// The last `lines` lines of `text`.
fn tail(text: &[u8], lines: usize) -> &[u8] {
    let trimmed = text.strip_suffix(b"\n").unwrap_or(text);
    let start = trimmed
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(lines.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    if lines == 0 {
        return &[];
    }
    &text[start..]
}

pub async fn serve(
    registry: &Registry,
    agents: &AgentDialer,
    path: &ResourcePath,
    query: Option<&str>,
) -> Result<Response, Status> {
    let (Some(namespace), Some(name)) = (path.namespace.as_deref(), path.name.as_deref()) else {
        return Err(Status::failure(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    let asked = parse_query(query)?;
    let pods = registry
        .find("", "v1", "pods")
        .ok_or_else(|| Status::internal("no Pod registration"))?;
    let pod = registry.get(&pods, Some(namespace), name).await?;
    let vmi = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|owners| {
            owners
                .iter()
                .find(|o| o["kind"] == "VirtualMachineInstance")
        })
        .and_then(|o| o["name"].as_str())
        .ok_or_else(|| {
            bad_request(format!(
                "pod {name} is not a virt-launcher Pod: virtplane keeps no logs of it"
            ))
        })?;
    let container = asked.container.clone().unwrap_or_else(|| "compute".into());
    let Some((_, log)) = CONTAINERS.iter().find(|(c, _)| *c == container) else {
        return Err(bad_request(format!(
            "container {container} is not valid for pod {name}"
        )));
    };
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad_request(format!("pod {name} is not on any node")))?;
    let which = if asked.follow {
        format!("log/{log}/follow")
    } else {
        format!("log/{log}")
    };
    let socket = agents.dial(registry, node, namespace, vmi, &which).await?;
    let (from_agent, _) = apimachinery::wsstream::byte_halves(socket);
    let response = Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, "text/plain");
    if asked.follow {
        let body = Body::from_stream(from_agent.map(Ok::<Bytes, std::io::Error>));
        return response
            .body(body)
            .map_err(|e| Status::internal(e.to_string()));
    }
    let whole: Vec<u8> = from_agent
        .fold(Vec::new(), |mut all, chunk| async move {
            all.extend_from_slice(&chunk);
            all
        })
        .await;
    let text = match asked.tail_lines {
        Some(lines) => tail(&whole, lines).to_vec(),
        None => whole,
    };
    response
        .body(Body::from(text))
        .map_err(|e| Status::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc", 1), b"c");
        assert_eq!(tail(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(tail(b"a\nb\n", 0), b"");
    }

    #[test]
    fn the_query_is_read() {
        let q = parse_query(Some("container=guest-console-log&follow=true&tailLines=3")).unwrap();
        assert_eq!(q.container.as_deref(), Some("guest-console-log"));
        assert!(q.follow);
        assert_eq!(q.tail_lines, Some(3));
        assert_eq!(parse_query(Some("tailLines=x")).err().unwrap().code, 400);
    }
}
