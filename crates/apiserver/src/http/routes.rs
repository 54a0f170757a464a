//! The resources served by handlers of their own rather than by the generic registry, in
//! one table: the access and identity reviews (answered, never stored), CDI's upload
//! token requests, KubeVirt's subresource API with its console and VNC websockets,
//! launcher Pods' logs, node agents' metrics and `metrics.k8s.io`, and
//! the RBAC kinds (stored by the registry, but a write waits until authorization sees it).

use http::Method;

use crate::request::ResourcePath;

/// A handler of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    SelfSubjectAccessReview,
    SubjectAccessReview,
    /// Namespaced: in the path's namespace.
    LocalSubjectAccessReview,
    SelfSubjectRulesReview,
    SelfSubjectReview,
    /// `upload.cdi.kubevirt.io/v1beta1` UploadTokenRequest.
    UploadTokenRequest,
    /// `subresources.kubevirt.io/v1`: start, stop, migrate, pause...
    KubeVirtSubresource,
    /// The `console` and `vnc` websockets of a VMI (a websocket upgrade is a GET).
    Console,
    /// The registry's, then wait until the authorizer sees the write.
    Rbac,
    /// A launcher Pod's log (`kubectl logs`).
    PodLog,
    /// A node agent's metrics (`/api/v1/nodes/NAME/proxy/metrics`, as the kubelet's).
    NodeMetrics,
    /// `metrics.k8s.io` NodeMetrics and PodMetrics (`kubectl top`).
    ResourceMetrics,
}

/// How a route is matched: group, resource, which requests, and whether its resource is
/// namespaced (for parsing paths the registry does not know).
struct Entry {
    group: &'static str,
    /// Empty: every resource of the group.
    resources: &'static [&'static str],
    matches: fn(&Request<'_>) -> bool,
    namespaced: bool,
    route: Route,
}

/// What a route looks at.
pub(super) struct Request<'a> {
    pub path: &'a ResourcePath,
    pub method: &'a Method,
}

fn create(r: &Request<'_>) -> bool {
    *r.method == Method::POST && r.path.name.is_none() && r.path.subresource.is_none()
}

fn any(_: &Request<'_>) -> bool {
    true
}

fn console(r: &Request<'_>) -> bool {
    *r.method == Method::GET
        && match r.path.subresource.as_deref() {
            Some("console" | "vnc") => true,
            Some(sub) => sub == "portforward" || sub.starts_with("portforward/"),
            None => false,
        }
}

fn pod_log(r: &Request<'_>) -> bool {
    *r.method == Method::GET && r.path.subresource.as_deref() == Some("log")
}

fn node_metrics(r: &Request<'_>) -> bool {
    *r.method == Method::GET && r.path.subresource.as_deref() == Some("proxy/metrics")
}

fn read(r: &Request<'_>) -> bool {
    *r.method == Method::GET
}

fn kubevirt_v1(r: &Request<'_>) -> bool {
    r.path.version == "v1"
}

const AUTHORIZATION: &str = "authorization.k8s.io";
const RBAC: &str = "rbac.authorization.k8s.io";

/// First match wins.
const ROUTES: &[Entry] = &[
    Entry {
        group: AUTHORIZATION,
        resources: &["selfsubjectaccessreviews"],
        matches: create,
        namespaced: false,
        route: Route::SelfSubjectAccessReview,
    },
    Entry {
        group: AUTHORIZATION,
        resources: &["subjectaccessreviews"],
        matches: create,
        namespaced: false,
        route: Route::SubjectAccessReview,
    },
    Entry {
        group: AUTHORIZATION,
        resources: &["localsubjectaccessreviews"],
        matches: create,
        namespaced: true,
        route: Route::LocalSubjectAccessReview,
    },
    Entry {
        group: AUTHORIZATION,
        resources: &["selfsubjectrulesreviews"],
        matches: create,
        namespaced: false,
        route: Route::SelfSubjectRulesReview,
    },
    Entry {
        group: "authentication.k8s.io",
        resources: &["selfsubjectreviews"],
        matches: create,
        namespaced: false,
        route: Route::SelfSubjectReview,
    },
    Entry {
        group: crate::upload::GROUP,
        resources: &[crate::upload::RESOURCE],
        matches: any,
        namespaced: true,
        route: Route::UploadTokenRequest,
    },
    Entry {
        group: "",
        resources: &["pods"],
        matches: pod_log,
        namespaced: true,
        route: Route::PodLog,
    },
    Entry {
        group: "",
        resources: &["nodes"],
        matches: node_metrics,
        namespaced: false,
        route: Route::NodeMetrics,
    },
    Entry {
        group: crate::resource_metrics::GROUP,
        resources: &["nodes"],
        matches: read,
        namespaced: false,
        route: Route::ResourceMetrics,
    },
    Entry {
        group: crate::resource_metrics::GROUP,
        resources: &["pods"],
        matches: read,
        namespaced: true,
        route: Route::ResourceMetrics,
    },
    Entry {
        group: crate::subresources::GROUP,
        resources: &[],
        matches: console,
        namespaced: false,
        route: Route::Console,
    },
    Entry {
        group: crate::subresources::GROUP,
        resources: &[],
        matches: kubevirt_v1,
        namespaced: false,
        route: Route::KubeVirtSubresource,
    },
    Entry {
        group: RBAC,
        resources: &[
            "roles",
            "clusterroles",
            "rolebindings",
            "clusterrolebindings",
        ],
        matches: any,
        namespaced: false,
        route: Route::Rbac,
    },
];

/// The handler of its own that serves `request`, if one does.
pub(super) fn route(request: &Request<'_>) -> Option<Route> {
    ROUTES
        .iter()
        .find(|e| {
            e.group == request.path.group
                && (e.resources.is_empty() || e.resources.contains(&request.path.resource.as_str()))
                && (e.matches)(request)
        })
        .map(|e| e.route)
}

/// Whether `group/plural` is a namespaced resource that only a route serves (the
/// registry knows the others).
pub(super) fn namespaced_route(group: &str, plural: &str) -> bool {
    ROUTES
        .iter()
        .any(|e| e.namespaced && e.group == group && e.resources.contains(&plural))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(group: &str, resource: &str, name: Option<&str>, sub: Option<&str>) -> ResourcePath {
        ResourcePath {
            group: group.into(),
            version: "v1".into(),
            namespace: Some("default".into()),
            resource: resource.into(),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
        }
    }

    fn routed(method: Method, path: &ResourcePath) -> Option<Route> {
        route(&Request {
            path,
            method: &method,
        })
    }

    #[test]
    fn each_special_resource_has_its_route() {
        let review = path(AUTHORIZATION, "selfsubjectaccessreviews", None, None);
        assert_eq!(
            routed(Method::POST, &review),
            Some(Route::SelfSubjectAccessReview)
        );
        // Reviews are only created; other verbs fall to the registry (and its NotFound).
        assert_eq!(routed(Method::GET, &review), None);
        let console = path(
            crate::subresources::GROUP,
            "virtualmachineinstances",
            Some("vm1"),
            Some("vnc"),
        );
        assert_eq!(routed(Method::GET, &console), Some(Route::Console));
        assert_eq!(
            routed(Method::PUT, &console),
            Some(Route::KubeVirtSubresource)
        );
        let role = path(RBAC, "roles", Some("r"), None);
        assert_eq!(routed(Method::DELETE, &role), Some(Route::Rbac));
        let vm = path("kubevirt.io", "virtualmachines", Some("vm1"), None);
        assert_eq!(routed(Method::GET, &vm), None);
        assert!(namespaced_route(AUTHORIZATION, "localsubjectaccessreviews"));
        assert!(namespaced_route(
            crate::upload::GROUP,
            crate::upload::RESOURCE
        ));
        assert!(!namespaced_route(AUTHORIZATION, "subjectaccessreviews"));
        let top = path(crate::resource_metrics::GROUP, "pods", None, None);
        assert_eq!(routed(Method::GET, &top), Some(Route::ResourceMetrics));
        assert!(namespaced_route(crate::resource_metrics::GROUP, "pods"));
        assert!(!namespaced_route(crate::resource_metrics::GROUP, "nodes"));
    }
}
