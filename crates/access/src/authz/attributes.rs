//! What a request asks to do, in the terms RBAC rules speak (kube's
//! `authorizer.Attributes`), and the 403 kube-apiserver answers when it may not.

use apimachinery::meta_validation::go_quote;
use apimachinery::status::{GroupResource, Status, StatusDetails};

use crate::rbac::PolicyRule;

/// A resource request's attributes; empty strings for what does not apply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    pub namespace: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    /// `None` for a non-resource request (discovery, health, version, OpenAPI).
    pub resource: Option<ResourceAttributes>,
    /// The URL path, which non-resource rules match.
    pub path: String,
}

impl Attributes {
    pub fn resource(verb: &str, resource: ResourceAttributes) -> Attributes {
        Attributes {
            verb: verb.to_string(),
            resource: Some(resource),
            path: String::new(),
        }
    }

    pub fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.to_string(),
            resource: None,
            path: path.to_string(),
        }
    }

    pub fn namespace(&self) -> &str {
        self.resource.as_ref().map_or("", |r| r.namespace.as_str())
    }

    /// `RuleAllows`.
    pub fn allowed_by(&self, rule: &PolicyRule) -> bool {
        if !rule.verb_matches(&self.verb) {
            return false;
        }
        match &self.resource {
            None => rule.url_matches(&self.path),
            Some(r) => {
                if !rule.group_matches(&r.group) || !rule.name_matches(&r.name) {
                    return false;
                }
                if r.subresource.is_empty() {
                    rule.resource_matches(&r.resource, "")
                } else {
                    let combined = format!("{}/{}", r.resource, r.subresource);
                    rule.resource_matches(&combined, &r.subresource)
                }
            }
        }
    }
}

/// kube's `sanitizer`: the characters an HTML page could misread.
fn sanitize(message: &str) -> String {
    message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The 403 of kube-apiserver's authorization filter (`responsewriters.Forbidden`):
/// `virtualmachines.kubevirt.io "x" is forbidden: User "alice" cannot delete resource
/// "virtualmachines" in API group "kubevirt.io" in the namespace "team-a"`, with `: reason`
/// when the authorizer gave one; `forbidden: User "x" cannot get path "/y"` for a path.
pub fn forbidden(user: &str, attrs: &Attributes, reason: &str) -> Status {
    let user = go_quote(user);
    let verb = &attrs.verb;
    let mut message = match &attrs.resource {
        None => format!("User {user} cannot {verb} path {}", go_quote(&attrs.path)),
        Some(r) => {
            let resource = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let scope = if r.namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace {}", go_quote(&r.namespace))
            };
            format!(
                "User {user} cannot {verb} resource {} in API group {} {scope}",
                go_quote(&resource),
                go_quote(&r.group)
            )
        }
    };
    message = sanitize(&message);
    if !reason.is_empty() {
        message = format!("{message}: {reason}");
    }
    match &attrs.resource {
        Some(r) => Status::forbidden(
            &GroupResource::new(&r.group, &r.resource),
            &r.name,
            &message,
        ),
        None => {
            let mut status = Status::failure(403, "Forbidden", format!("forbidden: {message}"));
            status.details = Some(Box::new(StatusDetails::default()));
            status
        }
    }
}
