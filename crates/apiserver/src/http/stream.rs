//! WATCH: events as JSON lines, with bookmarks, initial events and the deadline.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::status::Status;
use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;
use http::{header, HeaderValue};
use serde_json::{json, Value};

use super::read::{list_request, parse_revision};
use super::resource::ResourceRequest;
use super::response::partial_metadata;
use super::ApiServer;
use crate::negotiate::Format;
use crate::registry::{ListRequest, Registration};
use crate::request::Query;
use crate::stored;
use crate::watch::{WatchEvent, WatchStart};

impl ApiServer {
    pub(super) async fn watch(&self, req: &ResourceRequest<'_>) -> Result<Response, Status> {
        let format = req.negotiate(true)?;
        let list_request = list_request(&req.reg, req.namespace(), req.query)?;
        self.serve_watch(req.reg.clone(), list_request, req.query, format)
            .await
    }

    async fn serve_watch(
        &self,
        reg: Arc<Registration>,
        list_request: ListRequest,
        query: &Query,
        format: Format,
    ) -> Result<Response, Status> {
        let start = match (query.send_initial_events, query.resource_version.as_deref()) {
            (Some(true), _) => {
                if query.resource_version_match.as_deref() != Some("NotOlderThan") {
                    return Err(Status::bad_request(
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    ));
                }
                WatchStart::WithInitialState {
                    end_marker: query.allow_watch_bookmarks,
                }
            }
            // sendInitialEvents=false: no synthetic events, start at the most recent state.
            (Some(false), None | Some("0")) => {
                WatchStart::After(self.registry.store.current_revision())
            }
            (_, None) | (_, Some("0")) => WatchStart::WithInitialState { end_marker: false },
            (_, Some(rv)) => WatchStart::After(parse_revision(rv)?),
        };
        // Bookmarks before the first event carry the revision the watch starts from.
        let start_revision = match &start {
            WatchStart::After(rv) => Some(*rv),
            WatchStart::WithInitialState { .. } => None,
        };
        let initial_events_end =
            query.send_initial_events == Some(true) && query.allow_watch_bookmarks;
        if query.resource_version_match.is_some() && query.send_initial_events.is_none() {
            return Err(Status::bad_request(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        let events = self.registry.watch(&reg, list_request, start).await?;
        // Without a timeout the server ends a watch after a random 30-60 minutes, as upstream.
        let timeout = Duration::from_secs(
            query
                .timeout_seconds
                .unwrap_or_else(|| 1800 + rand::random::<u64>() % 1800),
        );
        let bookmarks = query.allow_watch_bookmarks;
        let info = reg.info;
        let include = query.include_object.clone();
        let mut last_revision = start_revision;
        let mut first_table = true;
        let deadline = tokio::time::sleep(timeout);
        let ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(30),
            Duration::from_secs(30),
        );
        // Like the watch cache, also bookmark 2s before the deadline, so a client that
        // asked for bookmarks gets a resume point before the server closes the watch.
        let pre_deadline = timeout
            .checked_sub(Duration::from_secs(2))
            .filter(|d| !d.is_zero());
        let watching = self.metrics.watching(info);
        let lines = async_stream_lines(events, deadline, ticker, pre_deadline, move |event| {
            if let Some(rv) = event.as_ref().and_then(WatchEvent::revision) {
                last_revision = Some(rv);
            }
            let event = match event {
                Some(event) => event,
                // A tick: a bookmark when the client accepts them.
                None => {
                    let rv = last_revision?;
                    if !bookmarks {
                        return None;
                    }
                    WatchEvent::Bookmark(rv)
                }
            };
            if matches!(
                event,
                WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_)
            ) {
                watching.sent();
            }
            let (kind, object) = match event {
                WatchEvent::Added(kv) => ("ADDED", kv),
                WatchEvent::Modified(kv) => ("MODIFIED", kv),
                WatchEvent::Deleted(kv) => ("DELETED", kv),
                WatchEvent::Bookmark(rv) => {
                    return Some(watch_line("BOOKMARK", &bookmark_object(info, rv, false)))
                }
                WatchEvent::InitialEventsEnd(rv) => {
                    return initial_events_end
                        .then(|| watch_line("BOOKMARK", &bookmark_object(info, rv, true)));
                }
                WatchEvent::Error(status) => return Some(watch_line("ERROR", &status.to_json())),
            };
            if format == Format::Json {
                let mut line = watch_line_head(kind);
                return Some(match stored::write_json(&object, &mut line) {
                    Ok(()) => {
                        line.extend_from_slice(b"}\n");
                        line
                    }
                    Err(status) => watch_line("ERROR", &status.to_json()),
                });
            }
            let rv = object.mod_revision.to_string();
            let object = match stored::decode(&object) {
                Ok(object) => object,
                Err(status) => return Some(watch_line("ERROR", &status.to_json())),
            };
            let object = if format == Format::Metadata {
                partial_metadata(&object)
            } else if format == Format::Table {
                let mut table = crate::printing::table(
                    info,
                    &[object],
                    json!({"resourceVersion": rv}),
                    include.as_deref(),
                );
                if !first_table {
                    table["columnDefinitions"] = Value::Null;
                }
                first_table = false;
                table
            } else {
                object
            };
            Some(watch_line(kind, &object))
        });
        let mut response = Response::new(Body::from_stream(lines.map(Ok::<_, std::io::Error>)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
        Ok(response)
    }
}

/// Turns watch events (and periodic ticks, passed as `None`) into body chunks until the
/// deadline or the end of the events.
fn async_stream_lines(
    events: crate::watch::EventStream,
    deadline: tokio::time::Sleep,
    ticker: tokio::time::Interval,
    pre_deadline: Option<Duration>,
    mut render: impl FnMut(Option<WatchEvent>) -> Option<Vec<u8>> + Send + 'static,
) -> impl futures::Stream<Item = Vec<u8>> + Send {
    let last_tick = futures::stream::iter(pre_deadline)
        .then(|after| async move { tokio::time::sleep(after).await })
        .map(|_| None);
    let ticks = futures::stream::select(
        tokio_stream::wrappers::IntervalStream::new(ticker).map(|_| Some(None)),
        last_tick.map(Some),
    );
    // The watch ends with its events (a closed store watch), right after an ERROR event
    // (as kube-apiserver ends a watch once it has sent one), or at the deadline; the
    // ticks alone never keep it open.
    let events = events
        .flat_map(|event| {
            let last = matches!(event, WatchEvent::Error(_));
            let end: Option<Option<Option<WatchEvent>>> = last.then_some(None);
            futures::stream::iter(std::iter::once(Some(Some(event))).chain(end))
        })
        .chain(futures::stream::once(futures::future::ready(None)));
    let merged = futures::stream::select(events, ticks)
        .take_while(|item| futures::future::ready(item.is_some()))
        .filter_map(futures::future::ready);
    let until_deadline = merged.take_until(deadline);
    until_deadline.filter_map(move |event| futures::future::ready(render(event)))
}

fn bookmark_object(
    info: &apimachinery::resource::ResourceInfo,
    rv: i64,
    initial_end: bool,
) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": metadata})
}

/// One line of a watch stream.
fn watch_line(kind: &str, object: &Value) -> Vec<u8> {
    let mut line = watch_line_head(kind);
    // Writing a `Value` into a Vec cannot fail: its map keys are strings.
    let _ = serde_json::to_writer(&mut line, object);
    line.extend_from_slice(b"}\n");
    line
}

/// A watch line up to its object, which the caller appends before `}\n`.
fn watch_line_head(kind: &str) -> Vec<u8> {
    format!("{{\"type\":\"{kind}\",\"object\":").into_bytes()
}
