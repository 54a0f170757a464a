//! The HTTP edge: authenticates, parses the request once into a `RequestInfo`, calls the
//! registry, and writes the answer in the representation the client asked for.
//!
//! One module per job: `resource` (the checks every resource verb shares and the
//! dispatch), `read` (get, list), `stream` (watch), `write` (create, update, patch,
//! delete) and `response` (representations).

use std::sync::Arc;

use apimachinery::status::Status;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::Router;
use http::{header, HeaderValue, StatusCode};
use tracing::Instrument;

use crate::audit::{Trail, AUDIT_ID_HEADER};
use crate::discovery::Discovery;
use crate::registry::Registry;
use crate::request::{self, Query, RequestInfo, Target, Verb};
use crate::tls::PeerAddress;
use access::authn::ClientCertificateIdentity;
use access::authn::{Authentication, Authenticator, UserInfo};
use access::authz::{Attributes, Authorizer};

mod guarded;
mod read;
mod resource;
mod response;
mod routes;
mod stream;
mod write;

pub(crate) use guarded::hold;
pub use response::status_response;
use response::{json_response, not_found_path};

/// kube-apiserver's request body limit.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

pub struct ApiServer {
    pub registry: Arc<Registry>,
    pub authenticator: Authenticator,
    pub authorizer: Arc<Authorizer>,
    pub discovery: Discovery,
    pub openapi: crate::openapi::OpenApi,
    /// `host:port` clients use to reach us, for `/api`'s serverAddressByClientCIDRs.
    pub server_address: String,
    /// How VMI consoles are reached: directly or through node agents.
    pub consoles: crate::console::Consoles,
    /// Where writes are announced while they are being prepared, so the store's group
    /// commit can wait for them (`None` if the store does not batch).
    pub write_gauge: Option<store::WriteGauge>,
    /// CDI's upload tokens and upload proxy.
    pub uploads: Arc<crate::upload::Uploads>,
    /// In-flight budgets, the request timeout and the watch count per user.
    pub limits: crate::limits::Limits,
    /// The audit log, when `--audit-log` and `--audit-policy` are given.
    pub audit: Option<crate::audit::Auditor>,
    /// What `/metrics` answers.
    pub metrics: Arc<crate::metrics::ServerMetrics>,
    /// The web console's signed-in browsers.
    pub sessions: crate::web_console::Sessions,
}

pub fn router(server: Arc<ApiServer>) -> Router {
    Router::new().fallback(handle).with_state(server)
}

async fn handle(State(server): State<Arc<ApiServer>>, request: Request) -> Response {
    server.handle(request).await
}

fn user_agent(request: &Request) -> String {
    request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// What a request's metrics need, learnt while it is served.
#[derive(Default)]
struct Measured {
    labels: Option<(crate::metrics::RequestLabels, bool)>,
    long_running: bool,
    /// Held until the answer is ready (a request in flight).
    in_flight: Option<crate::metrics::InFlight>,
    /// Handed to the response body (a long-running request open).
    long_running_guard: Option<crate::metrics::InFlight>,
}

impl ApiServer {
    /// kube-apiserver's outer filters: every answer names its audit ID, and the audit
    /// log gets the request's events.
    async fn handle(&self, request: Request) -> Response {
        let peer = request.extensions().get::<PeerAddress>().map(|p| p.0.ip());
        let mut trail = Trail::begin(request.headers(), request.uri(), peer, self.audit.is_some());
        let started = std::time::Instant::now();
        let mut measured = Measured::default();
        // Every line logged while the request is served names its audit ID (an error-level
        // span, so that no filter drops the context of the lines it keeps).
        let span = tracing::error_span!("request", audit_id = %trail.id);
        let asked = tracing::enabled!(tracing::Level::DEBUG).then(|| {
            (
                request.method().clone(),
                request.uri().clone(),
                user_agent(&request),
            )
        });
        let served = self.serve(request, &mut trail, &mut measured);
        let (mut response, failure) = match served.instrument(span.clone()).await {
            Ok(response) => (response, None),
            Err(status) => (status_response(&status), Some(status)),
        };
        // kube-apiserver's `HTTP` line (its -v=3), at debug, in the request's span (entered:
        // the JSON format lists the current span, not an event's explicit parent).
        if let Some((method, uri, user_agent)) = asked {
            span.in_scope(|| {
                tracing::debug!(
                    verb = %method,
                    uri = %uri,
                    code = response.status().as_u16(),
                    latency_ms = started.elapsed().as_secs_f64() * 1000.0,
                    user_agent,
                    src = ?peer,
                    "HTTP"
                )
            });
        }
        if let Some((labels, dry_run)) = &measured.labels {
            let took = (!measured.long_running).then(|| started.elapsed());
            self.metrics
                .answered(labels, *dry_run, response.status().as_u16(), took);
            if let Some(open) = measured.long_running_guard.take() {
                // Counted as long-running while its body streams.
                response = guarded::hold(response, open);
            }
        }
        if let Some(id) = trail.id_header() {
            response.headers_mut().insert(AUDIT_ID_HEADER, id);
        }
        match &self.audit {
            Some(audit) => audit.finish(trail, response, failure.as_ref()).await,
            None => response,
        }
    }

    async fn serve(
        &self,
        request: Request,
        trail: &mut Trail,
        measured: &mut Measured,
    ) -> Result<Response, Status> {
        let (parts, body) = request.into_parts();
        // CDI's upload proxy (a service of its own upstream, not audited by
        // kube-apiserver): authenticated by the upload token alone, and its body
        // streamed to disk rather than read whole.
        if let Some(endpoint) = crate::upload::Endpoint::of_path(parts.uri.path()) {
            return Ok(self.uploads.serve(endpoint, parts, body).await);
        }
        // The web console's page, files and sign-in (its API calls come below, as any).
        if crate::web_console::is_console_request(&parts) {
            return Ok(
                crate::web_console::serve(&self.sessions, &self.authenticator, parts, body).await,
            );
        }
        let registry = &self.registry;
        let target = request::parse_path(parts.uri.path(), |g, v, p| {
            if routes::namespaced_route(g, p) {
                return true;
            }
            let g = if g == crate::subresources::GROUP {
                "kubevirt.io"
            } else {
                g
            };
            registry.find(g, v, p).is_some_and(|r| r.info.namespaced)
        });
        // Authentication comes before routing: an unknown path is 401 to strangers too.
        // Requests without credentials are anonymous only where kube-apiserver's
        // anonymous authenticator would be configured to let them in (health, version).
        let certificate = parts.extensions.get::<ClientCertificateIdentity>();
        let proven = match self.sessions.authenticate(&parts, &self.authenticator) {
            Some(session) => Authentication::User(session?),
            None => self.authenticator.authenticate(&parts.headers, certificate),
        };
        let user = match proven {
            Authentication::User(user) => Some(user),
            Authentication::None if matches!(target, Some(Target::Health(_) | Target::Version)) => {
                Some(UserInfo::anonymous())
            }
            Authentication::None | Authentication::Failed => None,
        };
        // What the request asks for, as authorization and the audit policy see it (a bad
        // query is refused below, after impersonation, as before).
        let query = Query::parse(parts.uri.query());
        let no_query = Query::default();
        let seen = query.as_ref().unwrap_or(&no_query);
        let info =
            target.map(|target| RequestInfo::new(&parts.method, parts.uri.path(), target, seen));
        let attrs = match &info {
            Some(info) => crate::authz::request_attributes::of_request(info, seen),
            None => Attributes::non_resource(
                &parts.method.as_str().to_ascii_lowercase(),
                parts.uri.path(),
            ),
        };
        if let Some(audit) = &self.audit {
            audit.begin(trail, user.as_ref(), &attrs);
        }
        let Some(user) = user else {
            return Err(Status::unauthorized());
        };
        let authenticated = trail.audited().then(|| user.clone());
        let user =
            access::authz::impersonation::acting_user(&self.authorizer, user, &parts.headers)?;
        if authenticated.is_some_and(|a| a != user) {
            trail.impersonating(&user);
        }
        let Some(info) = info else {
            // Still authorized first, as a non-resource path: 403 unless one may see it.
            self.authorize(&user, &attrs, trail)?;
            return Err(not_found_path());
        };
        let query = query?;
        let labels = crate::metrics::RequestLabels::of(&info, query.dry_run);
        // kube's order: max-in-flight after impersonation, before authorization.
        let long_running = crate::limits::is_long_running(&info);
        let counted = self.metrics.in_flight(&labels.0, long_running);
        measured.labels = Some(labels);
        measured.long_running = long_running;
        if long_running {
            measured.long_running_guard = Some(counted);
        } else {
            measured.in_flight = Some(counted);
        }
        let _in_flight = match long_running {
            true => None,
            false => self.limits.admit(&user, &info)?,
        };
        self.authorize(&user, &attrs, trail)?;
        if let Some(node) = crate::authz::node_authorizer::node_of(&user) {
            if let Err(reason) =
                crate::authz::node_authorizer::authorize(&self.registry, node, &attrs, &query).await
            {
                trail.decision(false, &reason);
                return Err(access::authz::forbidden(&user.name, &attrs, &reason));
            }
        }
        if long_running {
            trail.long_running();
            let watch_slot = match info.verb {
                Verb::Watch => self.limits.admit_watch(&user)?,
                _ => None,
            };
            let response = self
                .dispatch(parts, body, &info, &query, &user, trail)
                .await?;
            // The watch keeps its place until the client or the server ends it.
            return Ok(match watch_slot {
                Some(slot) => guarded::hold(response, slot),
                None => response,
            });
        }
        let dispatch = self.dispatch(parts, body, &info, &query, &user, trail);
        match tokio::time::timeout(self.limits.request_timeout, dispatch).await {
            Ok(result) => result,
            // The message of kube's request-deadline: what clients and people grep for.
            Err(_) => Err(Status::timeout(
                "request did not complete within requested timeout - context deadline exceeded",
            )),
        }
    }

    /// Answers an authenticated, authorized request.
    async fn dispatch(
        &self,
        parts: http::request::Parts,
        body: axum::body::Body,
        info: &RequestInfo,
        query: &Query,
        user: &UserInfo,
        trail: &mut Trail,
    ) -> Result<Response, Status> {
        let accept = parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        match &info.target {
            Target::Health(endpoint) => Ok(crate::health::answer(
                endpoint,
                self.registry.store.as_ref(),
                query,
            )),
            Target::Version => Ok(json_response(StatusCode::OK, &crate::version::info())),
            Target::Metrics => {
                let (content_type, body) = self.metrics.scrape(&self.registry, accept).await;
                Ok(Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, content_type)
                    .body(axum::body::Body::from(body))
                    .expect("a valid response"))
            }
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
            Target::OpenApiV2 => Ok(crate::openapi::v2(accept)),
            Target::Resource(path) => {
                let route = routes::route(&routes::Request {
                    path,
                    method: &parts.method,
                });
                match route {
                    Some(routes::Route::Console) => {
                        crate::console::serve(&self.registry, &self.consoles, parts, path).await
                    }
                    Some(routes::Route::NodeMetrics) => {
                        let node = path.name.as_deref().unwrap_or_default();
                        let text = self
                            .consoles
                            .agents
                            .fetch(&self.registry, node, "metrics", "/v1/metrics")
                            .await?;
                        let open = String::from_utf8_lossy(&text);
                        let (content_type, body) =
                            if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
                                (metrics::OPENMETRICS, open.into_owned())
                            } else {
                                (metrics::TEXT, metrics::classic(&open))
                            };
                        Ok(Response::builder()
                            .status(StatusCode::OK)
                            .header(header::CONTENT_TYPE, content_type)
                            .body(axum::body::Body::from(body))
                            .expect("a valid response"))
                    }
                    Some(routes::Route::PodLog) => {
                        crate::pod_logs::serve(
                            &self.registry,
                            &self.consoles.agents,
                            path,
                            parts.uri.query(),
                        )
                        .await
                    }
                    Some(routes::Route::Rbac) => {
                        let kind = self.kind_of(path, trail);
                        let body = read_body(body, &parts.headers, kind, trail).await?;
                        let response = self
                            .serve_resource(&parts, &info.verb, path, query, &body, user)
                            .await?;
                        // Whoever changed a role or binding sees the change on their next
                        // request.
                        if info.verb.writes() && response.status().is_success() {
                            self.authorizer
                                .wait_for(self.registry.store.current_revision())
                                .await;
                        }
                        Ok(response)
                    }
                    _ => {
                        let serve = async {
                            let kind = self.kind_of(path, trail);
                            let body = read_body(body, &parts.headers, kind, trail).await?;
                            self.serve_resource(&parts, &info.verb, path, query, &body, user)
                                .await
                        };
                        match &self.write_gauge {
                            Some(gauge) if info.verb.writes() => gauge.announce(serve).await,
                            _ => serve.await,
                        }
                    }
                }
            }
        }
    }

    /// The kind a resource path's body holds, for the audit log ("" when not audited
    /// or not registered).
    fn kind_of(&self, path: &request::ResourcePath, trail: &Trail) -> &'static str {
        if !trail.audited() {
            return "";
        }
        self.registry
            .find(&path.group, &path.version, &path.resource)
            .map_or("", |r| r.info.kind)
    }

    /// kube-apiserver's authorization filter: a 403 unless the user may; the decision
    /// and its reason go into the audit log.
    fn authorize(
        &self,
        user: &UserInfo,
        attrs: &Attributes,
        trail: &mut Trail,
    ) -> Result<(), Status> {
        if !trail.audited() {
            return self
                .authorizer
                .allows(user, attrs)
                .map_err(|reason| access::authz::forbidden(&user.name, attrs, &reason));
        }
        let decision = self.authorizer.decide(user, attrs);
        trail.decision(decision.allowed, &decision.reason);
        match decision.allowed {
            true => Ok(()),
            false => Err(access::authz::forbidden(
                &user.name,
                attrs,
                &decision.reason,
            )),
        }
    }
}

/// The whole body, at most `MAX_BODY_BYTES` (413 beyond, as kube-apiserver).
async fn read_body(
    body: axum::body::Body,
    headers: &http::HeaderMap,
    kind: &'static str,
    trail: &mut Trail,
) -> Result<bytes::Bytes, Status> {
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                Status::request_too_large(MAX_BODY_BYTES)
            } else {
                // The client went away or broke the framing mid-body.
                Status::bad_request(format!("reading the request body: {e}"))
            }
        })?;
    trail.request_body(&bytes, headers, kind);
    Ok(bytes)
}
