//! What a request asks to do, in the terms RBAC rules speak (kube's
//! `authorizer.Attributes`), and the 403 kube-apiserver answers when it may not.

use apimachinery::meta_validation::go_quote;
use apimachinery::status::{GroupResource, Status, StatusDetails};

use crate::rbac::PolicyRule;
use crate::request::{Query, RequestInfo, Target};

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

    /// The attributes kube-apiserver's RequestInfoFactory gives a request: a path under
    /// `namespaces/NS/` is in namespace NS (a namespace itself is in its own namespace,
    /// so a RoleBinding there lets one read it), and a list or watch whose field
    /// selector asks for one `metadata.name` is about that name.
    pub fn of_request(info: &RequestInfo, query: &Query) -> Attributes {
        let Target::Resource(path) = &info.target else {
            return Attributes::non_resource(info.verb.as_str(), &info.path);
        };
        let mut attrs = ResourceAttributes {
            namespace: path.namespace.clone().unwrap_or_default(),
            group: path.group.clone(),
            version: path.version.clone(),
            resource: path.resource.clone(),
            subresource: path.subresource.clone().unwrap_or_default(),
            name: path.name.clone().unwrap_or_default(),
        };
        if path.namespace.is_none() && path.resource == "namespaces" && !attrs.name.is_empty() {
            // `/namespaces/NS/status|finalize` are the namespace's own subresources;
            // anything else under it is a namespaced resource kube-apiserver would parse
            // as such (this server's parser only knows the kinds it serves).
            let namespace = attrs.name.clone();
            match attrs.subresource.as_str() {
                "" | "status" | "finalize" => attrs.namespace = namespace,
                rest => {
                    let mut parts = rest.splitn(3, '/');
                    attrs.resource = parts.next().unwrap_or("").to_string();
                    attrs.name = parts.next().unwrap_or("").to_string();
                    attrs.subresource = parts.next().unwrap_or("").to_string();
                    attrs.namespace = namespace;
                }
            }
        }
        let verb = info.verb.as_str();
        if attrs.name.is_empty() && matches!(verb, "list" | "watch") {
            if let Some(name) = query
                .field_selector
                .as_deref()
                .and_then(selected_name)
                .filter(|n| !n.is_empty() && *n != "." && *n != ".." && !n.contains(['/', '%']))
            {
                attrs.name = name.to_string();
            }
        }
        Attributes::resource(verb, attrs)
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

/// `fieldSelector` terms `metadata.name=X` or `metadata.name==X` (`RequiresExactMatch`).
fn selected_name(selector: &str) -> Option<&str> {
    selector.split(',').find_map(|term| {
        let term = term.trim();
        term.strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn attrs(method: Method, uri: &str) -> Attributes {
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let target = crate::request::parse_path(path, |g, _, p| {
            matches!(g, "kubevirt.io" | "subresources.kubevirt.io")
                && p.starts_with("virtualmachine")
                || g.is_empty() && p == "configmaps"
        })
        .unwrap();
        let query = Query::parse(Some(query)).unwrap();
        let info = RequestInfo::new(&method, path, target, &query);
        Attributes::of_request(&info, &query)
    }

    fn resource(a: &Attributes) -> (&str, &str, &str, &str, &str, &str) {
        let r = a.resource.as_ref().unwrap();
        (
            a.verb.as_str(),
            r.group.as_str(),
            r.resource.as_str(),
            r.subresource.as_str(),
            r.namespace.as_str(),
            r.name.as_str(),
        )
    }

    #[test]
    fn attributes_as_kube_request_info() {
        let vms = "/apis/kubevirt.io/v1/namespaces/team-a/virtualmachines";
        assert_eq!(
            resource(&attrs(
                Method::GET,
                &format!("{vms}?watch=true&fieldSelector=metadata.name%3Dvm1")
            )),
            (
                "watch",
                "kubevirt.io",
                "virtualmachines",
                "",
                "team-a",
                "vm1"
            )
        );
        assert_eq!(
            resource(&attrs(
                Method::GET,
                &format!("{vms}?fieldSelector=metadata.name!%3Dvm1")
            )),
            ("list", "kubevirt.io", "virtualmachines", "", "team-a", "")
        );
        assert_eq!(
            resource(&attrs(
                Method::PUT,
                "/apis/subresources.kubevirt.io/v1/namespaces/team-a/virtualmachines/vm1/start"
            )),
            (
                "update",
                "subresources.kubevirt.io",
                "virtualmachines",
                "start",
                "team-a",
                "vm1"
            )
        );
        assert_eq!(
            resource(&attrs(Method::GET, "/api/v1/namespaces/team-a")),
            ("get", "", "namespaces", "", "team-a", "team-a")
        );
        // A kind this server does not serve still reads as kube reads it.
        assert_eq!(
            resource(&attrs(Method::GET, "/api/v1/namespaces/team-a/pods/p1/log")),
            ("get", "", "pods", "log", "team-a", "p1")
        );
        assert_eq!(
            resource(&attrs(Method::GET, "/apis/kubevirt.io/v1/virtualmachines")),
            ("list", "kubevirt.io", "virtualmachines", "", "", "")
        );
        let health = attrs(Method::GET, "/healthz");
        assert_eq!(
            (health.verb.as_str(), health.path.as_str(), health.resource),
            ("get", "/healthz", None)
        );
    }

    #[test]
    fn forbidden_bodies_as_kube_apiserver_writes_them() {
        let delete = attrs(
            Method::DELETE,
            "/apis/kubevirt.io/v1/namespaces/team-a/virtualmachines/x",
        );
        assert_eq!(
            forbidden("alice", &delete, "").to_json(),
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "virtualmachines.kubevirt.io \"x\" is forbidden: User \"alice\" cannot delete resource \"virtualmachines\" in API group \"kubevirt.io\" in the namespace \"team-a\"",
                "reason": "Forbidden", "details": {"name": "x", "group": "kubevirt.io", "kind": "virtualmachines"}, "code": 403})
        );
        let list = attrs(Method::GET, "/apis/kubevirt.io/v1/virtualmachines");
        assert_eq!(
            forbidden("alice", &list, "").message,
            "virtualmachines.kubevirt.io is forbidden: User \"alice\" cannot list resource \"virtualmachines\" in API group \"kubevirt.io\" at the cluster scope"
        );
        let console = attrs(
            Method::GET,
            "/apis/subresources.kubevirt.io/v1/namespaces/a/virtualmachineinstances/v/console",
        );
        assert_eq!(
            forbidden("bob", &console, "RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found").message,
            "virtualmachineinstances.subresources.kubevirt.io \"v\" is forbidden: User \"bob\" cannot get resource \"virtualmachineinstances/console\" in API group \"subresources.kubevirt.io\" in the namespace \"a\": RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found"
        );
        let path = Attributes::non_resource("get", "/apis");
        assert_eq!(
            forbidden("system:anonymous", &path, "").to_json(),
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "forbidden: User \"system:anonymous\" cannot get path \"/apis\"",
                "reason": "Forbidden", "details": {}, "code": 403})
        );
    }
}
