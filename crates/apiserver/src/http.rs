//! The HTTP edge: authenticates, parses the request into a typed target, calls the
//! registry, and writes the answer in the representation the client asked for.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::status::Status;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::StreamExt;
use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::{json, Value};

use crate::auth::{Authenticator, UserInfo};
use crate::discovery::Discovery;
use crate::negotiate::{self, Format};
use crate::registry::{
    Change, DeleteOptions, DeleteResult, FieldValidation, ListRequest, Outcome, Propagation,
    Refusals, Registration, Registry, WriteOptions,
};
use crate::request::{self, Query, RequestInfo, ResourcePath, Target, Verb};
use crate::stored;
use crate::tls::ClientCertificateIdentity;
use crate::watch::{WatchEvent, WatchStart};

/// kube-apiserver's request body limit.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

pub struct ApiServer {
    pub registry: Arc<Registry>,
    pub authenticator: Authenticator,
    pub discovery: Discovery,
    pub openapi: crate::openapi::OpenApi,
    /// `host:port` clients use to reach us, for `/api`'s serverAddressByClientCIDRs.
    pub server_address: String,
    /// How VMI consoles are reached: directly or through node agents.
    pub consoles: crate::console::Consoles,
    /// Where writes are announced while they are being prepared, so the store's group
    /// commit can wait for them (`None` if the store does not batch).
    pub write_gauge: Option<store::WriteGauge>,
}

pub fn router(server: Arc<ApiServer>) -> Router {
    Router::new().fallback(handle).with_state(server)
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    json_bytes_response(code, serde_json::to_vec(body).unwrap_or_default())
}

fn json_bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (code, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub fn status_response(status: &Status) -> Response {
    let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &status.to_json())
}

fn not_found_path() -> Status {
    Status::failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
    .with_empty_details()
}

trait EmptyDetails {
    fn with_empty_details(self) -> Self;
}

impl EmptyDetails for Status {
    fn with_empty_details(mut self) -> Self {
        self.details = Some(Default::default());
        self
    }
}

fn add_warnings(response: &mut Response, warnings: &[String]) {
    for warning in warnings {
        let text = format!(
            "299 - {}",
            serde_json::to_string(warning).unwrap_or_default()
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
}

/// Writes `body` as JSON or YAML.
fn object_response(code: StatusCode, body: &Value, format: Format) -> Response {
    match format {
        Format::Yaml => {
            let mut response = (code, crate::yaml::to_string(body)).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/yaml"),
            );
            response
        }
        _ => json_response(code, body),
    }
}

async fn handle(State(server): State<Arc<ApiServer>>, request: Request) -> Response {
    match server.serve(request).await {
        Ok(response) => response,
        Err(status) => status_response(&status),
    }
}

impl ApiServer {
    async fn serve(&self, request: Request) -> Result<Response, Status> {
        let (parts, body) = request.into_parts();
        let registry = &self.registry;
        let target = request::parse_path(parts.uri.path(), |g, v, p| {
            let g = if g == crate::subresources::GROUP {
                "kubevirt.io"
            } else {
                g
            };
            registry.find(g, v, p).is_some_and(|r| r.info.namespaced)
        });
        match &target {
            Some(Target::Health(_)) => return Ok((StatusCode::OK, "ok").into_response()),
            Some(Target::Version) => {
                return Ok(json_response(StatusCode::OK, &crate::version::info()))
            }
            _ => {}
        }
        // Authentication comes before routing: an unknown path is 401 to strangers too.
        let certificate = parts.extensions.get::<ClientCertificateIdentity>();
        let user = self
            .authenticator
            .authenticate(&parts.headers, certificate)
            .ok_or_else(Status::unauthorized)?;
        let target = target.ok_or_else(not_found_path)?;
        let query = Query::parse(parts.uri.query())?;
        let info = RequestInfo::new(&parts.method, parts.uri.path(), target, &query);
        let accept = parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        match &info.target {
            Target::CoreVersions | Target::Groups => {
                let core = info.target == Target::CoreVersions;
                if accept.is_some_and(|a| a.contains("as=APIGroupDiscoveryList")) {
                    let mut response =
                        json_response(StatusCode::OK, &self.discovery.aggregated(core));
                    response.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static(
                            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
                        ),
                    );
                    response
                        .headers_mut()
                        .insert(header::VARY, HeaderValue::from_static("Accept"));
                    return Ok(response);
                }
                let doc = if core {
                    self.discovery.api_versions(&self.server_address)
                } else {
                    self.discovery.group_list()
                };
                Ok(json_response(StatusCode::OK, &doc))
            }
            Target::Group(group) => self
                .discovery
                .group(group)
                .map(|d| json_response(StatusCode::OK, &d))
                .ok_or_else(not_found_path),
            Target::GroupVersion { group, version } => self
                .discovery
                .resource_list(group, version)
                .map(|d| json_response(StatusCode::OK, &d))
                .ok_or_else(not_found_path),
            Target::OpenApiV3Root => Ok(json_response(StatusCode::OK, &self.openapi.root())),
            Target::OpenApiV3 { group, version } => {
                self.openapi
                    .group_version(group, version, query.hash.as_deref())
            }
            Target::OpenApiV2 => Err(not_found_path()),
            // A websocket upgrade is a GET (HEAD, also `get`, is refused by the handler).
            Target::Resource(path)
                if path.group == crate::subresources::GROUP
                    && matches!(path.subresource.as_deref(), Some("console" | "vnc"))
                    && parts.method == Method::GET =>
            {
                crate::console::serve(&self.registry, &self.consoles, parts, path).await
            }
            Target::Resource(path) => {
                let serve = async {
                    let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
                        .await
                        .map_err(|_| Status::request_too_large(MAX_BODY_BYTES))?;
                    self.serve_resource(&parts, &info.verb, path, &query, &body, &user)
                        .await
                };
                match &self.write_gauge {
                    Some(gauge) if info.verb.writes() => gauge.announce(serve).await,
                    _ => serve.await,
                }
            }
            Target::Health(_) | Target::Version => Err(not_found_path()),
        }
    }

    async fn serve_resource(
        &self,
        parts: &Parts,
        verb: &Verb,
        path: &ResourcePath,
        query: &Query,
        body: &[u8],
        user: &UserInfo,
    ) -> Result<Response, Status> {
        let (method, headers) = (&parts.method, &parts.headers);
        if path.group == "authorization.k8s.io"
            && path.resource == "selfsubjectaccessreviews"
            && *verb == Verb::Create
        {
            return Ok(crate::review::self_subject_access_review(body, user));
        }
        if path.group == crate::subresources::GROUP && path.version == "v1" {
            return crate::subresources::handle(&self.registry, method, path, body).await;
        }
        let reg = self
            .registry
            .find(&path.group, &path.version, &path.resource)
            .ok_or_else(not_found_path)?;
        let info = reg.info;
        if info.namespaced && path.name.is_some() && path.namespace.is_none() {
            return Err(not_found_path());
        }
        let namespace = path.namespace.as_deref();
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
        let content_type = negotiate::content_type_essence(
            headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
        );
        let subresource = path.subresource.as_deref();
        match subresource {
            None => {}
            Some("status") if info.status_subresource => {}
            // A subresource the kind does not have: the object's own NotFound, as the
            // custom resource handler answers.
            Some(_) => {
                return Err(Status::not_found(
                    &info.group_resource(),
                    path.name.as_deref().unwrap_or(""),
                ))
            }
        }
        if let Some(refusal) =
            method_refusal(&reg, verb, path.name.is_some(), subresource.is_some())
        {
            return Err(refusal);
        }
        // HEAD is `get` to Kubernetes, but no route here serves it.
        if method == Method::HEAD {
            return Err(Status::method_not_allowed(
                &info.group_resource(),
                "this method",
            ));
        }
        crate::options::validate_request(verb, &content_type, query)?;
        let negotiate = |table_allowed: bool| {
            negotiate::negotiate(accept, table_allowed).map_err(|status| {
                if reg.serving.protobuf {
                    status
                } else {
                    Status::not_acceptable(&["application/json", "application/yaml"])
                }
            })
        };
        let write_options = || -> Result<WriteOptions, Status> {
            Ok(WriteOptions {
                dry_run: query.dry_run,
                field_manager: field_manager(query, headers)?,
                field_validation: field_validation(query)?,
                privileged: user.is_component(),
            })
        };
        let kind = info.kind;
        let version = info.version;
        match (verb, path.name.as_deref()) {
            (Verb::List | Verb::Watch, None) => {
                let format = negotiate(true)?;
                let list_request = list_request(&reg, namespace, query)?;
                if *verb == Verb::Watch {
                    return self.serve_watch(reg, list_request, query, format).await;
                }
                let result = self.registry.list(&reg, &list_request).await?;
                let mut metadata = json!({"resourceVersion": result.resource_version.to_string()});
                if let Some(token) = &result.continue_token {
                    metadata["continue"] = json!(token);
                }
                if let Some(remaining) = result.remaining {
                    metadata["remainingItemCount"] = json!(remaining);
                }
                if format == Format::Json {
                    return stored_list_response(info, metadata, &result.items);
                }
                let items = result
                    .items
                    .iter()
                    .map(stored::decode)
                    .collect::<Result<Vec<_>, _>>()?;
                if format == Format::Table {
                    let table = crate::printing::table(
                        info,
                        &items,
                        metadata,
                        query.include_object.as_deref(),
                    );
                    return Ok(table_response(&table));
                }
                if format == Format::Metadata {
                    let items: Vec<Value> = items.iter().map(partial_metadata).collect();
                    let mut list = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                                      "metadata": metadata});
                    list["items"] = Value::Array(items);
                    return Ok(json_response(StatusCode::OK, &list));
                }
                // The items move into the list: `json!` would deep-copy them through `to_value`.
                let mut list = json!({"apiVersion": info.api_version(), "kind": info.list_kind, "metadata": metadata});
                list["items"] = Value::Array(items);
                Ok(object_response(StatusCode::OK, &list, format))
            }
            (Verb::Get, Some(name)) => {
                let format = negotiate(true)?;
                let obj = self.registry.get(&reg, namespace, name).await?;
                if format == Format::Table {
                    let rv = crate::object::meta_str(&obj, "resourceVersion")
                        .unwrap_or("")
                        .to_string();
                    let table = crate::printing::table(
                        info,
                        &[obj],
                        json!({"resourceVersion": rv}),
                        query.include_object.as_deref(),
                    );
                    return Ok(table_response(&table));
                }
                if format == Format::Metadata {
                    return Ok(json_response(StatusCode::OK, &partial_metadata(&obj)));
                }
                Ok(object_response(StatusCode::OK, &obj, format))
            }
            (Verb::Create, None) => {
                let format = negotiate(false)?;
                let obj = negotiate::decode_body(&content_type, body, kind, version)?;
                let outcome = self
                    .registry
                    .create(&reg, namespace, obj, &write_options()?)
                    .await?;
                Ok(outcome_response(outcome, format))
            }
            (Verb::Update, Some(name)) => {
                let format = negotiate(false)?;
                let obj = negotiate::decode_body(&content_type, body, kind, version)?;
                // The handler checks the namespace, then the name, before storage is asked.
                let body_namespace = crate::object::namespace(&obj);
                if info.namespaced
                    && !body_namespace.is_empty()
                    && Some(body_namespace) != namespace
                {
                    return Err(Status::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                if crate::object::name(&obj) != name {
                    return Err(Status::bad_request(format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        crate::object::name(&obj)
                    )));
                }
                let options = write_options()?;
                // A PUT body is decoded like a POST body: unknown fields under Strict are a
                // decoding error (400), not the 422 of a patch.
                if options.field_validation == FieldValidation::Strict && subresource.is_none() {
                    let unknown = reg.schema.prune(&mut obj.clone());
                    if !unknown.is_empty() {
                        let texts: Vec<String> = unknown
                            .iter()
                            .map(|p| format!("unknown field {p:?}"))
                            .collect();
                        return Err(Status::bad_request(format!(
                            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
                            texts.join(", ")
                        )));
                    }
                }
                let outcome = self
                    .registry
                    .update_with(&reg, namespace, name, subresource, &options, |old| {
                        // A uid in the body is a storage precondition (checked first).
                        let body_uid = crate::object::uid(&obj);
                        if !body_uid.is_empty() && body_uid != crate::object::uid(old) {
                            return Err(Status::conflict(
                                &info.group_resource(),
                                name,
                                &format!(
                                    "StorageError: invalid object, Code: 4, Key: {}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {body_uid}, UID in object meta: {}",
                                    crate::registry::Registry::key(info, namespace, name),
                                    crate::object::uid(old)
                                ),
                            ));
                        }
                        // Checked once the object is known to exist (a missing one is 404),
                        // with upstream's resource-as-kind and Go's `%#v` of 0.
                        if !reg.hooks.allows_unconditional_update()
                            && crate::object::meta_str(&obj, "resourceVersion").is_none_or(str::is_empty)
                        {
                            let err = apimachinery::field::FieldError::webhook(
                                apimachinery::field::ErrorType::Invalid,
                                "metadata.resourceVersion",
                                "Invalid value: 0x0: must be specified for an update",
                            );
                            let kind = apimachinery::status::GroupKind::new(info.group, info.plural);
                            let mut status = Status::invalid(&kind, name, &[err]);
                            status.message = format!(
                                "{} {name:?} is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                                kind.qualified()
                            );
                            return Err(status);
                        }
                        Ok(Change::replace(obj.clone()))
                    })
                    .await?;
                Ok(outcome_response(outcome, format))
            }
            (Verb::Patch, Some(name)) => {
                let format = negotiate(false)?;
                crate::patching::patch(
                    &self.registry,
                    &reg,
                    namespace,
                    name,
                    subresource,
                    &content_type,
                    body,
                    query,
                    &write_options()?,
                )
                .await
                .map(|outcome| outcome_response(outcome, format))
            }
            (Verb::Delete, Some(name)) => {
                let format = negotiate(false)?;
                let options = delete_options(query, body)?;
                let outcome = self
                    .registry
                    .delete(&reg, namespace, name, &options)
                    .await?;
                Ok(match outcome.value {
                    DeleteResult::Deleted(obj) => {
                        let status = Status::success_deleted(
                            &info.group_resource(),
                            name,
                            crate::object::uid(&obj),
                        );
                        object_response(StatusCode::OK, &status.to_json(), format)
                    }
                    DeleteResult::Pending(obj) => object_response(StatusCode::OK, &obj, format),
                })
            }
            (Verb::DeleteCollection, None) => {
                let format = negotiate(false)?;
                let options = delete_options(query, body)?;
                let list_request = list_request(&reg, namespace, query)?;
                let listed = self.registry.list(&reg, &list_request).await?;
                let mut deleted = Vec::new();
                for kv in &listed.items {
                    let obj = stored::decode(kv)?;
                    let ns = crate::object::namespace(&obj).to_string();
                    let ns = (!ns.is_empty()).then_some(ns);
                    match self
                        .registry
                        .delete(&reg, ns.as_deref(), crate::object::name(&obj), &options)
                        .await
                    {
                        Ok(outcome) => deleted.push(match outcome.value {
                            DeleteResult::Deleted(o) | DeleteResult::Pending(o) => o,
                        }),
                        Err(status) if status.code == 404 => {}
                        Err(status) => return Err(status),
                    }
                }
                let list = json!({"apiVersion": info.api_version(), "kind": info.list_kind,
                    "metadata": {"resourceVersion": self.registry.store.current_revision().to_string()}, "items": deleted});
                Ok(object_response(StatusCode::OK, &list, format))
            }
            (verb, _) => {
                let action = match verb {
                    Verb::Create => "create",
                    Verb::Update => "update",
                    Verb::Patch => "patch",
                    _ => "this method",
                };
                Err(Status::method_not_allowed(&info.group_resource(), action))
            }
        }
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

/// Verbs a path does not serve. `/status` serves get, update and patch only; custom
/// resources answer other verbs with MethodNotAllowed naming the verb, and update or
/// patch without a name with `name must be provided`; built-in kinds (go-restful) answer
/// a method without a route with a generic 405 (namespaces have no deletecollection).
fn method_refusal(
    reg: &Registration,
    verb: &Verb,
    named: bool,
    subresource: bool,
) -> Option<Status> {
    if matches!(verb, Verb::Get | Verb::List | Verb::Watch) {
        return None;
    }
    let info = reg.info;
    if reg.serving.refusals == Refusals::Routes {
        let served = match verb {
            Verb::Create => !named && !subresource,
            Verb::Update | Verb::Patch => named,
            Verb::Delete => named && !subresource,
            _ => false,
        };
        if served {
            return None;
        }
        let mut status = Status::failure(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
        status.details = Some(Default::default());
        return Some(status);
    }
    let served = if subresource {
        matches!(verb, Verb::Update | Verb::Patch)
    } else {
        matches!(
            verb,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    };
    if !served {
        return Some(Status::method_not_allowed(
            &info.group_resource(),
            verb.as_str(),
        ));
    }
    if !named && matches!(verb, Verb::Update | Verb::Patch) {
        return Some(Status::bad_request("name must be provided"));
    }
    None
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

/// An object reduced to its metadata, as `meta.k8s.io/v1` PartialObjectMetadata.
fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
           "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({}))})
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

/// A JSON list of stored objects, written without decoding them.
fn stored_list_response(
    info: &apimachinery::resource::ResourceInfo,
    metadata: Value,
    items: &[store::KeyValue],
) -> Result<Response, Status> {
    let head =
        json!({"apiVersion": info.api_version(), "kind": info.list_kind, "metadata": metadata});
    let mut body = serde_json::to_vec(&head).map_err(Status::internal)?;
    // Replace the head's closing brace with the items.
    body.pop();
    body.extend_from_slice(b",\"items\":[");
    for (i, kv) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        stored::write_json(kv, &mut body)?;
    }
    body.extend_from_slice(b"]}");
    Ok(json_bytes_response(StatusCode::OK, body))
}

fn table_response(table: &Value) -> Response {
    let mut response = json_response(StatusCode::OK, table);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(negotiate::TABLE_CONTENT_TYPE),
    );
    response
}

fn outcome_response(outcome: Outcome<Value>, format: Format) -> Response {
    let code = if outcome.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut body = Vec::new();
    let mut response = match &outcome.stored {
        Some(kv) if format == Format::Json && stored::write_json(kv, &mut body).is_ok() => {
            json_bytes_response(code, body)
        }
        _ => object_response(code, &outcome.value, format),
    };
    add_warnings(&mut response, &outcome.warnings);
    response
}

fn parse_revision(rv: &str) -> Result<i64, Status> {
    rv.parse::<i64>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| Status::bad_request(format!("invalid resource version {rv:?}")))
}

/// The manager a write is recorded under: `fieldManager`, else the client's name.
fn field_manager(query: &Query, headers: &HeaderMap) -> Result<String, Status> {
    if let Some(manager) = &query.field_manager {
        if manager.len() > 128 || manager.chars().any(|c| c.is_control()) {
            return Err(Status::bad_request(
                "fieldManager: Invalid value: must be at most 128 printable characters",
            ));
        }
        return Ok(manager.clone());
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    Ok(agent
        .split('/')
        .next()
        .unwrap_or(agent)
        .chars()
        .take(128)
        .collect())
}

fn field_validation(query: &Query) -> Result<FieldValidation, Status> {
    match query.field_validation.as_deref() {
        None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
        Some("Strict") => Ok(FieldValidation::Strict),
        Some("Ignore") => Ok(FieldValidation::Ignore),
        Some(other) => Err(Status::bad_request(format!(
            "fieldValidation parameter unsupported: {other}. Expected one of \"Ignore\", \"Warn\" or \"Strict\""
        ))),
    }
}

fn list_request(
    reg: &Registration,
    namespace: Option<&str>,
    query: &Query,
) -> Result<ListRequest, Status> {
    let label = match &query.label_selector {
        Some(s) => apimachinery::selector::LabelSelector::parse(s).map_err(Status::bad_request)?,
        None => Default::default(),
    };
    let field = match &query.field_selector {
        Some(s) => apimachinery::selector::FieldSelector::parse(s).map_err(Status::bad_request)?,
        None => Default::default(),
    };
    let supported = crate::printing::selectable_fields(reg.info);
    for name in field.fields() {
        if name != "metadata.name" && name != "metadata.namespace" && !supported.contains(&name) {
            return Err(Status::bad_request(
                apimachinery::selector::field_label_not_supported(name),
            ));
        }
    }
    let rv_match = query.resource_version_match.as_deref();
    // (The options were validated for a list or a watch by `options::validate_request`;
    // these list-only rules must not refuse a watch with sendInitialEvents.)
    if rv_match.is_some() && query.resource_version.is_none() && !query.watch {
        return Err(Status::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if rv_match.is_some() && query.continue_token.is_some() {
        return Err(Status::bad_request(
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    if query.send_initial_events.is_some() && !query.watch {
        return Err(Status::bad_request(
            "sendInitialEvents is forbidden for list",
        ));
    }
    let rv = match query.resource_version.as_deref() {
        Some(rv) => Some(parse_revision(rv)?),
        None => None,
    };
    let (exact, min) = match (rv_match, rv) {
        (Some("Exact"), Some(0)) => {
            return Err(Status::bad_request(
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ))
        }
        (Some("Exact"), Some(r)) => (Some(r), None),
        (Some("NotOlderThan") | None, Some(r)) if r > 0 && !query.watch => (None, Some(r)),
        (Some("NotOlderThan") | None, _) => (None, None),
        (Some(other), _) => {
            return Err(Status::bad_request(format!(
                "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
            )))
        }
    };
    Ok(ListRequest {
        namespace: namespace.map(str::to_string),
        label,
        field,
        limit: if query.watch { None } else { query.limit },
        continue_token: query.continue_token.clone(),
        exact_revision: exact,
        min_revision: min,
    })
}

fn delete_options(query: &Query, body: &[u8]) -> Result<DeleteOptions, Status> {
    let mut options = DeleteOptions {
        dry_run: query.dry_run,
        ..Default::default()
    };
    let mut policy = query.propagation_policy.clone();
    if !body.is_empty() {
        let parsed: Value = serde_json::from_slice(body)
            .map_err(|e| Status::bad_request(format!("DeleteOptions cannot be decoded: {e}")))?;
        if let Some(p) = parsed.get("propagationPolicy").and_then(Value::as_str) {
            policy = Some(p.to_string());
        }
        if parsed.get("orphanDependents").and_then(Value::as_bool) == Some(true) && policy.is_none()
        {
            policy = Some("Orphan".into());
        }
        if let Some(pre) = parsed.get("preconditions") {
            options.precondition_uid = pre.get("uid").and_then(Value::as_str).map(str::to_string);
            options.precondition_resource_version = pre
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        if let Some(dry) = parsed.get("dryRun").and_then(Value::as_array) {
            let values: Vec<String> = dry
                .iter()
                .map(|d| d.as_str().unwrap_or_default().to_string())
                .collect();
            let errors = crate::options::dry_run_errors(&values);
            if !errors.is_empty() {
                return Err(crate::options::invalid("DeleteOptions", &errors));
            }
            options.dry_run |= !values.is_empty();
        }
    }
    let errors = crate::options::delete_errors(&[], policy.as_deref());
    if !errors.is_empty() {
        return Err(crate::options::invalid("DeleteOptions", &errors));
    }
    options.propagation = match policy.as_deref() {
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        _ => Propagation::Background,
    };
    Ok(options)
}
