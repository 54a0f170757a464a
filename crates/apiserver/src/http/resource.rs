//! A request for a registered resource: the checks every verb shares, then the verb's
//! handler (`read`, `stream`, `write`).

use std::sync::Arc;

use apimachinery::status::Status;
use axum::response::Response;
use http::request::Parts;
use http::{header, HeaderMap, Method};

use super::response::not_found_path;
use super::routes::{route, Request, Route};
use super::write::{field_manager, field_validation};
use super::ApiServer;
use crate::negotiate::{self, Format};
use crate::registry::{Refusals, Registration, WriteOptions};
use crate::request::{Query, ResourcePath, Verb};
use access::authn::UserInfo;

/// A request for a registered resource, with what every verb's handler reads.
pub(super) struct ResourceRequest<'a> {
    pub reg: Arc<Registration>,
    pub path: &'a ResourcePath,
    pub query: &'a Query,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    pub user: &'a UserInfo,
    pub authorizer: &'a Arc<access::authz::Authorizer>,
    /// The body's media type, lower-cased, without parameters.
    pub content_type: String,
}

impl ResourceRequest<'_> {
    pub fn namespace(&self) -> Option<&str> {
        self.path.namespace.as_deref()
    }

    /// The representation the client accepts. Custom resources are served as JSON and
    /// YAML only, built-in kinds also as protobuf upstream.
    pub fn negotiate(&self, table_allowed: bool) -> Result<Format, Status> {
        let accept = self
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        negotiate::negotiate(accept, table_allowed).map_err(|status| {
            if self.reg.serving.protobuf {
                status
            } else {
                Status::not_acceptable(&["application/json", "application/yaml"])
            }
        })
    }

    pub fn write_options(&self) -> Result<WriteOptions, Status> {
        let info = self.reg.info;
        let guard = if crate::rbac::kinds::is_rbac(info.group, info.plural) {
            access::authz::escalation::guard(
                self.authorizer,
                self.user,
                info.plural,
                self.namespace().unwrap_or(""),
                self.path.name.as_deref().unwrap_or(""),
            )
            .map(crate::registry::WriteGuard)
        } else {
            None
        };
        let node_guard = crate::authz::node_authorizer::node_of(self.user).and_then(|node| {
            crate::authz::node_authorizer::write_guard(node, info.group, info.plural)
        });
        let guard = match (guard, node_guard) {
            (Some(a), Some(b)) => Some(a.and(b)),
            (a, b) => a.or(b),
        };
        Ok(WriteOptions {
            dry_run: self.query.dry_run,
            field_manager: field_manager(self.query, self.headers)?,
            field_validation: field_validation(self.query)?,
            privileged: self.user.is_component(),
            guard,
        })
    }
}

impl ApiServer {
    /// Serves a resource request: by its route's handler when it has one (`routes`), else
    /// by the generic registry.
    pub(super) async fn serve_resource(
        &self,
        parts: &Parts,
        verb: &Verb,
        path: &ResourcePath,
        query: &Query,
        body: &[u8],
        user: &UserInfo,
    ) -> Result<Response, Status> {
        let (method, headers) = (&parts.method, &parts.headers);
        let authorizer = &self.authorizer;
        match route(&Request { path, method }) {
            Some(Route::SelfSubjectAccessReview) => {
                return crate::review::self_subject_access_review(authorizer, body, user)
            }
            Some(Route::SubjectAccessReview) => {
                return crate::review::subject_access_review(authorizer, body, None)
            }
            Some(Route::LocalSubjectAccessReview) => {
                if let Some(namespace) = path.namespace.as_deref() {
                    return crate::review::subject_access_review(authorizer, body, Some(namespace));
                }
            }
            Some(Route::SelfSubjectRulesReview) => {
                return crate::review::self_subject_rules_review(authorizer, body, user)
            }
            Some(Route::SelfSubjectReview) => return Ok(crate::review::self_subject_review(user)),
            Some(Route::UploadTokenRequest) => {
                if path.version != crate::upload::VERSION {
                    return Err(not_found_path());
                }
                let request = self.uploads.token_request(verb, path, body)?;
                return Ok(super::response::json_response(
                    http::StatusCode::CREATED,
                    &request,
                ));
            }
            Some(Route::KubeVirtSubresource) => {
                return crate::subresources::handle(&self.registry, method, path, body).await
            }
            Some(Route::ResourceMetrics) => {
                if path.version != crate::resource_metrics::VERSION {
                    return Err(not_found_path());
                }
                // The Nodes or Pods the selectors choose, as a LIST of them would.
                let objects = self
                    .registry
                    .find("", "v1", &path.resource)
                    .ok_or_else(not_found_path)?;
                let selection =
                    super::read::list_request(&objects, path.namespace.as_deref(), query)?;
                let agents = &self.consoles.agents;
                let body = crate::resource_metrics::serve(&self.registry, agents, path, &selection)
                    .await?;
                return Ok(super::response::json_response(http::StatusCode::OK, &body));
            }
            Some(Route::Console | Route::Rbac | Route::PodLog | Route::NodeMetrics) | None => {}
        }
        let reg = self
            .registry
            .find(&path.group, &path.version, &path.resource)
            .ok_or_else(not_found_path)?;
        let info = reg.info;
        if info.namespaced && path.name.is_some() && path.namespace.is_none() {
            return Err(not_found_path());
        }
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
        let request = ResourceRequest {
            reg,
            path,
            query,
            headers,
            body,
            user,
            authorizer: &self.authorizer,
            content_type,
        };
        let req = &request;
        match (verb, path.name.as_deref()) {
            (Verb::List, None) => self.list(req).await,
            (Verb::Watch, None) => self.watch(req).await,
            (Verb::Get, Some(name)) => self.get(req, name).await,
            (Verb::Create, None) => self.create(req).await,
            (Verb::Update, Some(name)) => self.update(req, name).await,
            (Verb::Patch, Some(name)) => self.patch(req, name).await,
            (Verb::Delete, Some(name)) => self.delete(req, name).await,
            (Verb::DeleteCollection, None) => self.delete_collection(req).await,
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
