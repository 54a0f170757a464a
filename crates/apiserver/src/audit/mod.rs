//! kube-apiserver's audit log: `--audit-log FILE` with `--audit-policy FILE` writes an
//! `audit.k8s.io/v1` Event line for each stage of each request the policy selects.
//!
//! The policy (which requests, at what level) is `access::audit`'s; here, one module per
//! job: `event` (the line), `log` (the file). A `Trail` gathers what a request's events say while the request is
//! served: the authenticated user and the impersonated one, what it addresses, the
//! authorization decision, the bodies.

mod event;
mod log;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use apimachinery::status::Status;
use axum::response::Response;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{header, HeaderMap, HeaderValue};

pub use access::audit::{Level, Policy, Stage, Verdict};
use access::authn::UserInfo;
use access::authz::Attributes;
pub use event::{Body, ObjectRef, Record, ResponseStatus, User};

/// The response header that names a request's audit ID, as kube-apiserver sends it.
pub const AUDIT_ID_HEADER: &str = "audit-id";

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("--audit-log {0} needs --audit-policy FILE: kube-apiserver logs nothing without a policy; give an audit.k8s.io/v1 Policy file")]
    NoPolicy(PathBuf),
    #[error("--audit-policy {0} needs --audit-log FILE (or - for standard output) to write to")]
    NoLog(PathBuf),
    #[error("the audit policy {path}: {message}; fix it (an audit.k8s.io/v1 Policy, as kube-apiserver's --audit-policy-file)")]
    Policy { path: PathBuf, message: String },
    #[error("cannot open the audit log {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub struct Auditor {
    policy: Policy,
    log: log::Log,
}

impl Auditor {
    /// The auditor the flags ask for: none without either, an error with only one.
    pub fn from_flags(
        log: Option<&Path>,
        policy: Option<&Path>,
    ) -> Result<Option<Auditor>, AuditError> {
        let (log_path, policy_path) = match (log, policy) {
            (None, None) => return Ok(None),
            (Some(log), None) => return Err(AuditError::NoPolicy(log.to_path_buf())),
            (None, Some(policy)) => return Err(AuditError::NoLog(policy.to_path_buf())),
            (Some(log), Some(policy)) => (log, policy),
        };
        let policy = Policy::load(policy_path).map_err(|message| AuditError::Policy {
            path: policy_path.to_path_buf(),
            message,
        })?;
        let log = log::Log::open(log_path).map_err(|source| AuditError::Open {
            path: log_path.to_path_buf(),
            source,
        })?;
        Ok(Some(Auditor { policy, log }))
    }

    /// Decides the request's level and writes its RequestReceived event. `user` is who
    /// authenticated (`None`: nobody, the 401 case).
    pub fn begin(&self, trail: &mut Trail, user: Option<&UserInfo>, attrs: &Attributes) {
        trail.verdict = self.policy.verdict(user, attrs);
        if trail.verdict.level == Level::None {
            return;
        }
        trail.verb = attrs.verb.clone();
        trail.user = user.map(User::from).unwrap_or_default();
        trail.object_ref = attrs.resource.as_ref().map(|r| ObjectRef {
            resource: r.resource.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            api_group: r.group.clone(),
            api_version: r.version.clone(),
            subresource: r.subresource.clone(),
        });
        if trail.verdict.logs(Stage::RequestReceived) {
            self.log
                .send(trail.record(Stage::RequestReceived, None, None));
        }
    }

    /// Writes the request's last events and returns the response to send: at once for
    /// most requests; a long-running one writes ResponseStarted now and ResponseComplete
    /// when its body ends.
    pub async fn finish(
        &self,
        trail: Trail,
        response: Response,
        failure: Option<&Status>,
    ) -> Response {
        if trail.verdict.level == Level::None {
            return response;
        }
        let status = response_status(response.status().as_u16(), failure);
        if trail.long_running {
            if trail.verdict.logs(Stage::ResponseStarted) {
                let started = trail.record(Stage::ResponseStarted, Some(status.clone()), None);
                self.log.send(started);
            }
            if !trail.verdict.logs(Stage::ResponseComplete) {
                return response;
            }
            let completion = Completion {
                log: self.log.clone(),
                record: Some(trail.record(Stage::ResponseComplete, Some(status), None)),
            };
            return crate::http::hold(response, completion);
        }
        if !trail.verdict.logs(Stage::ResponseComplete) {
            return response;
        }
        let (response, body) = if trail.verdict.level == Level::RequestResponse {
            split_body(response).await
        } else {
            (response, None)
        };
        self.log
            .send(trail.record(Stage::ResponseComplete, Some(status), body));
        response
    }

    /// Waits until every event so far is in the file.
    pub async fn flush(&self) {
        self.log.flush().await;
    }
}

fn response_status(code: u16, failure: Option<&Status>) -> ResponseStatus {
    match failure {
        Some(status) => ResponseStatus::Failure(status.clone()),
        None => ResponseStatus::Code(code),
    }
}

/// The body of a response that is whole in memory, and the same response to send.
async fn split_body(response: Response) -> (Response, Option<Body>) {
    let (parts, body) = response.into_parts();
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => {
            let kept = Body {
                bytes: bytes.clone(),
                content_type,
                kind: "",
            };
            (
                Response::from_parts(parts, axum::body::Body::from(bytes)),
                Some(kept),
            )
        }
        Err(e) => {
            tracing::warn!("audit: cannot read a response body to log it: {e}");
            (Response::from_parts(parts, axum::body::Body::empty()), None)
        }
    }
}

/// Writes a long-running request's ResponseComplete when its body is dropped.
struct Completion {
    log: log::Log,
    record: Option<Record>,
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(mut record) = self.record.take() {
            record.at = Utc::now();
            self.log.send(record);
        }
    }
}

/// What a request's audit events say, gathered while it is served.
pub struct Trail {
    pub id: String,
    received: DateTime<Utc>,
    request_uri: String,
    source_ips: Vec<String>,
    user_agent: String,
    verdict: Verdict,
    verb: String,
    user: User,
    impersonated: Option<User>,
    object_ref: Option<ObjectRef>,
    annotations: BTreeMap<String, String>,
    request_body: Option<Body>,
    long_running: bool,
}

impl Trail {
    /// A request's trail: its audit ID (the client's `Audit-ID` if it sent a sane one,
    /// as kube-apiserver keeps it) and, when `audited`, what the request says of itself.
    pub fn begin(
        headers: &HeaderMap,
        uri: &http::Uri,
        peer: Option<std::net::IpAddr>,
        audited: bool,
    ) -> Trail {
        let id = headers
            .get(AUDIT_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= 64)
            .map(str::to_string)
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut trail = Trail {
            id,
            received: Utc::now(),
            request_uri: String::new(),
            source_ips: Vec::new(),
            user_agent: String::new(),
            verdict: Verdict::none(),
            verb: String::new(),
            user: User::default(),
            impersonated: None,
            object_ref: None,
            annotations: BTreeMap::new(),
            request_body: None,
            long_running: false,
        };
        if audited {
            trail.request_uri = uri
                .path_and_query()
                .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string());
            trail.source_ips = source_ips(headers, peer);
            trail.user_agent = headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
        }
        trail
    }

    /// Whether the request is logged at all (what is worth gathering).
    pub fn audited(&self) -> bool {
        self.verdict.level > Level::None
    }

    pub fn impersonating(&mut self, user: &UserInfo) {
        if self.audited() {
            self.impersonated = Some(User::from(user));
        }
    }

    /// kube's authorization filter's annotations.
    pub fn decision(&mut self, allowed: bool, reason: &str) {
        if self.audited() {
            let decision = if allowed { "allow" } else { "forbid" };
            self.annotations
                .insert("authorization.k8s.io/decision".into(), decision.into());
            self.annotations
                .insert("authorization.k8s.io/reason".into(), reason.into());
        }
    }

    /// The request's body; `kind` is what it should hold (protobuf does not say).
    pub fn request_body(&mut self, bytes: &Bytes, headers: &HeaderMap, kind: &'static str) {
        if self.audited() && !bytes.is_empty() {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            self.request_body = Some(Body {
                bytes: bytes.clone(),
                content_type,
                kind,
            });
        }
    }

    pub fn long_running(&mut self) {
        self.long_running = true;
    }

    /// The audit ID as a header value (a UUID, or what the client sent and we checked).
    pub fn id_header(&self) -> Option<HeaderValue> {
        HeaderValue::from_str(&self.id).ok()
    }

    fn record(
        &self,
        stage: Stage,
        status: Option<ResponseStatus>,
        response: Option<Body>,
    ) -> Record {
        Record {
            level: self.verdict.level,
            audit_id: self.id.clone(),
            stage,
            request_uri: self.request_uri.clone(),
            verb: self.verb.clone(),
            user: self.user.clone(),
            // RequestReceived is written before impersonation is known, as upstream.
            impersonated_user: match stage {
                Stage::RequestReceived => None,
                _ => self.impersonated.clone(),
            },
            source_ips: self.source_ips.clone(),
            user_agent: self.user_agent.clone(),
            object_ref: self.object_ref.clone(),
            response_status: status,
            request_body: self.request_body.clone(),
            response_body: response,
            omit_managed_fields: self.verdict.omit_managed_fields,
            received: self.received,
            at: Utc::now(),
            annotations: match stage {
                Stage::RequestReceived => BTreeMap::new(),
                _ => self.annotations.clone(),
            },
        }
    }
}

/// kube's `SourceIPs`: X-Forwarded-For, then X-Real-Ip, then the peer, each once.
fn source_ips(headers: &HeaderMap, peer: Option<std::net::IpAddr>) -> Vec<String> {
    let mut ips: Vec<String> = Vec::new();
    let mut add = |ip: std::net::IpAddr| {
        let ip = ip.to_string();
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    };
    let header_ips = |name: &str| -> Vec<std::net::IpAddr> {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
            .unwrap_or_default()
    };
    for ip in header_ips("x-forwarded-for") {
        add(ip);
    }
    for ip in header_ips("x-real-ip") {
        add(ip);
    }
    if let Some(peer) = peer {
        add(peer);
    }
    ips
}
