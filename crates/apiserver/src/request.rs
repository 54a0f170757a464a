//! Parsing at the edge: a method, URL path and query string become a typed request (a
//! `RequestInfo` and a `Query`), so the rest of the server never looks at raw HTTP.

use apimachinery::status::Status;
use http::Method;

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Health(String),
    Version,
    /// `/metrics`
    Metrics,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`
    GroupVersion {
        group: String,
        version: String,
    },
    OpenApiV3Root,
    OpenApiV3 {
        group: String,
        version: String,
    },
    OpenApiV2,
    Resource(ResourcePath),
}

/// `/apis/<group>/<version>[/namespaces/<ns>]/<resource>[/<name>[/<subresource>...]]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// The API group, empty for the core group (`/api/v1`).
    pub group: String,
    pub version: String,
    /// The namespace the object lives in: `None` for cluster-scoped resources, so
    /// `/api/v1/namespaces/x` names namespace `x` in no namespace (Kubernetes' RequestInfo
    /// would also say namespace `x`).
    pub namespace: Option<String>,
    /// The resource's plural name, e.g. `virtualmachines`.
    pub resource: String,
    pub name: Option<String>,
    /// Everything after the name, e.g. `status` or `portforward/22`.
    pub subresource: Option<String>,
}

/// What a request does, in Kubernetes' names (the verbs RBAC rules list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// Any other method, lower-cased (`options`): what non-resource rules and the custom
    /// resource handler's MethodNotAllowed call it.
    Other(String),
}

impl Verb {
    pub fn as_str(&self) -> &str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Other(verb) => verb,
        }
    }

    /// Kubernetes' RequestInfoFactory: the method gives the verb, and a request without
    /// a name is a list, a watch or a deletecollection. Subresource connections keep the
    /// method's verb (`get` for a console websocket, `update` for a PUT to `start`), as
    /// KubeVirt's roles expect.
    fn of_resource_request(method: &Method, named: bool, watch: bool) -> Verb {
        match *method {
            Method::GET | Method::HEAD if named => Verb::Get,
            Method::GET | Method::HEAD if watch => Verb::Watch,
            Method::GET | Method::HEAD => Verb::List,
            Method::POST => Verb::Create,
            Method::PUT => Verb::Update,
            Method::PATCH => Verb::Patch,
            Method::DELETE if named => Verb::Delete,
            Method::DELETE => Verb::DeleteCollection,
            _ => Verb::Other(method.as_str().to_ascii_lowercase()),
        }
    }

    /// A non-resource URL's verb is the lower-cased method (`get`, `post`).
    fn of_non_resource_request(method: &Method) -> Verb {
        match method.as_str().to_ascii_lowercase().as_str() {
            "get" => Verb::Get,
            "patch" => Verb::Patch,
            "delete" => Verb::Delete,
            other => Verb::Other(other.to_string()),
        }
    }

    /// Whether the request may write (what the store's group commit waits for).
    pub fn writes(&self) -> bool {
        !matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
}

/// A request as the server understands it, parsed once at the edge: what it does and
/// what it addresses (Kubernetes' `RequestInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    pub verb: Verb,
    /// The URL path as sent, which non-resource rules match.
    pub path: String,
    pub target: Target,
}

impl RequestInfo {
    /// `target` is what `parse_path` made of `path`; `query` gives `watch`.
    pub fn new(method: &Method, path: &str, target: Target, query: &Query) -> RequestInfo {
        let verb = match &target {
            Target::Resource(resource) => {
                Verb::of_resource_request(method, resource.name.is_some(), query.watch)
            }
            _ => Verb::of_non_resource_request(method),
        };
        RequestInfo {
            verb,
            path: path.to_string(),
            target,
        }
    }

    /// Whether it addresses a resource (else a non-resource URL: discovery, OpenAPI,
    /// health, version).
    pub fn is_resource_request(&self) -> bool {
        matches!(self.target, Target::Resource(_))
    }

    pub fn resource(&self) -> Option<&ResourcePath> {
        match &self.target {
            Target::Resource(resource) => Some(resource),
            _ => None,
        }
    }
}

/// Splits a path into a target. `is_namespaced_plural(group, version, plural)` tells the
/// parser whether `namespaces/<x>/<y>` means a collection inside namespace `x`.
pub fn parse_path(
    path: &str,
    is_namespaced_plural: impl Fn(&str, &str, &str) -> bool,
) -> Option<Target> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let segments: Vec<String> = segments.iter().map(|s| percent_decode(s)).collect();
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["healthz"] | ["livez"] | ["readyz"] => Some(Target::Health(s[0].to_string())),
        ["healthz" | "livez" | "readyz", check] => Some(Target::Health(check.to_string())),
        ["version"] => Some(Target::Version),
        ["metrics"] => Some(Target::Metrics),
        ["api"] => Some(Target::CoreVersions),
        ["apis"] => Some(Target::Groups),
        ["openapi", "v3"] => Some(Target::OpenApiV3Root),
        ["openapi", "v2"] => Some(Target::OpenApiV2),
        ["openapi", "v3", "api", version] => Some(Target::OpenApiV3 {
            group: String::new(),
            version: version.to_string(),
        }),
        ["openapi", "v3", "apis", group, version] => Some(Target::OpenApiV3 {
            group: group.to_string(),
            version: version.to_string(),
        }),
        ["apis", group] => Some(Target::Group(group.to_string())),
        ["api", version] => Some(Target::GroupVersion {
            group: String::new(),
            version: version.to_string(),
        }),
        ["apis", group, version] => Some(Target::GroupVersion {
            group: group.to_string(),
            version: version.to_string(),
        }),
        ["api", version, rest @ ..] => resource_path("", version, rest, &is_namespaced_plural),
        ["apis", group, version, rest @ ..] => {
            resource_path(group, version, rest, &is_namespaced_plural)
        }
        _ => None,
    }
}

fn resource_path(
    group: &str,
    version: &str,
    rest: &[&str],
    is_namespaced_plural: &impl Fn(&str, &str, &str) -> bool,
) -> Option<Target> {
    let build = |namespace: Option<&str>, rest: &[&str]| -> Option<Target> {
        let (plural, tail) = rest.split_first()?;
        if plural.is_empty() {
            return None;
        }
        let (name, sub) = match tail.split_first() {
            None => (None, None),
            Some((name, sub)) => (
                Some(name.to_string()),
                (!sub.is_empty()).then(|| sub.join("/")),
            ),
        };
        Some(Target::Resource(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            namespace: namespace.map(str::to_string),
            resource: plural.to_string(),
            name,
            subresource: sub,
        }))
    };
    match rest {
        ["namespaces", ns, plural, tail @ ..] if is_namespaced_plural(group, version, plural) => {
            let mut parts = vec![*plural];
            parts.extend_from_slice(tail);
            build(Some(ns), &parts)
        }
        _ => build(None, rest),
    }
}

fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(v) = segment
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query parameters the API understands, parsed and checked once.
#[derive(Debug, Default, Clone)]
pub struct Query {
    pub watch: bool,
    pub verbose: bool,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub dry_run: bool,
    /// Every `dryRun` value as sent; `dry_run` holds when they are all `All`
    /// (anything else is refused by `options::validate_request`).
    pub dry_run_values: Vec<String>,
    pub field_manager: Option<String>,
    pub field_validation: Option<String>,
    pub force: Option<bool>,
    pub propagation_policy: Option<String>,
    pub grace_period_seconds: Option<i64>,
    pub include_object: Option<String>,
    pub hash: Option<String>,
}

fn parse_bool(name: &str, value: &str) -> Result<bool, Status> {
    match value {
        "true" | "1" | "True" | "TRUE" => Ok(true),
        "false" | "0" | "False" | "FALSE" | "" => Ok(false),
        other => Err(Status::bad_request(format!(
            "invalid value {other:?} for query parameter {name:?}: must be true or false"
        ))),
    }
}

fn parse_number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, Status> {
    value.parse().map_err(|_| {
        Status::bad_request(format!(
            "invalid value {value:?} for query parameter {name:?}: must be an integer"
        ))
    })
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Result<Query, Status> {
        let mut q = Query::default();
        let Some(raw) = raw else { return Ok(q) };
        for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
            let v = value.as_ref();
            match key.as_ref() {
                "watch" => q.watch = parse_bool("watch", v)?,
                // Health endpoints list their checks with `?verbose` (any value).
                "verbose" => q.verbose = true,
                "labelSelector" => q.label_selector = Some(v.to_string()),
                "fieldSelector" => q.field_selector = Some(v.to_string()),
                "limit" => {
                    let limit: i64 = parse_number("limit", v)?;
                    q.limit = (limit > 0).then_some(limit as usize);
                }
                "continue" => q.continue_token = (!v.is_empty()).then(|| v.to_string()),
                "resourceVersion" => q.resource_version = (!v.is_empty()).then(|| v.to_string()),
                "resourceVersionMatch" => {
                    q.resource_version_match = (!v.is_empty()).then(|| v.to_string())
                }
                "timeoutSeconds" => q.timeout_seconds = Some(parse_number("timeoutSeconds", v)?),
                "timeout" => {}
                "allowWatchBookmarks" => {
                    q.allow_watch_bookmarks = parse_bool("allowWatchBookmarks", v)?
                }
                "sendInitialEvents" => {
                    q.send_initial_events = Some(parse_bool("sendInitialEvents", v)?)
                }
                "dryRun" => {
                    q.dry_run_values.push(v.to_string());
                    q.dry_run = q.dry_run_values.iter().all(|d| d == "All");
                }
                "fieldManager" => q.field_manager = Some(v.to_string()),
                "fieldValidation" => q.field_validation = Some(v.to_string()),
                "force" => q.force = Some(parse_bool("force", v)?),
                "propagationPolicy" => q.propagation_policy = Some(v.to_string()),
                "gracePeriodSeconds" => {
                    q.grace_period_seconds = Some(parse_number("gracePeriodSeconds", v)?)
                }
                "includeObject" => q.include_object = Some(v.to_string()),
                "hash" => q.hash = Some(v.to_string()),
                // Accepted and meaningless here, as upstream.
                _ => {}
            }
        }
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(path: &str) -> Option<Target> {
        parse_path(path, |g, _, p| {
            g == "kubevirt.io" && p == "virtualmachines"
                || g.is_empty() && p == "persistentvolumeclaims"
        })
    }

    /// As the server parses: the subresources group names KubeVirt's namespaced kinds.
    fn info(method: Method, uri: &str) -> RequestInfo {
        let (path, query) = match uri.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (uri, None),
        };
        let target = parse_path(path, |g, _, p| match g {
            "kubevirt.io" | "subresources.kubevirt.io" => p.starts_with("virtualmachine"),
            "" => matches!(p, "persistentvolumeclaims" | "configmaps" | "secrets"),
            _ => false,
        })
        .expect("a path the server knows");
        let query = Query::parse(query).expect("a valid query");
        RequestInfo::new(&method, path, target, &query)
    }

    /// verb, group, resource, namespace, name, subresource.
    fn summary(info: &RequestInfo) -> (&str, &str, &str, Option<&str>, Option<&str>, Option<&str>) {
        let r = info.resource().expect("a resource request");
        (
            info.verb.as_str(),
            r.group.as_str(),
            r.resource.as_str(),
            r.namespace.as_deref(),
            r.name.as_deref(),
            r.subresource.as_deref(),
        )
    }

    #[test]
    fn kubectl_resource_requests() {
        let vms = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines";
        let cases = [
            (Method::GET, format!("{vms}?limit=500"), ("list", None, None)),
            (
                Method::GET,
                format!("{vms}?allowWatchBookmarks=true&fieldSelector=metadata.name%3Dvm1&resourceVersion=1075&timeoutSeconds=565&watch=true"),
                ("watch", None, None),
            ),
            (Method::GET, format!("{vms}?watch=1"), ("watch", None, None)),
            (Method::GET, format!("{vms}?watch=false"), ("list", None, None)),
            (Method::GET, format!("{vms}/vm1"), ("get", Some("vm1"), None)),
            (Method::GET, format!("{vms}/vm1/status"), ("get", Some("vm1"), Some("status"))),
            (
                Method::POST,
                format!("{vms}?fieldManager=kubectl-create&fieldValidation=Strict"),
                ("create", None, None),
            ),
            (
                Method::PUT,
                format!("{vms}/vm1?fieldManager=kubectl-replace&fieldValidation=Strict"),
                ("update", Some("vm1"), None),
            ),
            (
                Method::PATCH,
                format!("{vms}/vm1/status?fieldManager=kubectl-patch"),
                ("patch", Some("vm1"), Some("status")),
            ),
            (
                Method::PATCH,
                format!("{vms}/testvm?fieldManager=kubectl&fieldValidation=Strict&force=true"),
                ("patch", Some("testvm"), None),
            ),
            (Method::DELETE, format!("{vms}/vm1"), ("delete", Some("vm1"), None)),
            (Method::DELETE, format!("{vms}?labelSelector=app%3Dx"), ("deletecollection", None, None)),
            // A POST with a name is still `create`; the handler refuses it.
            (Method::POST, format!("{vms}/vm1"), ("create", Some("vm1"), None)),
            (Method::HEAD, format!("{vms}/vm1"), ("get", Some("vm1"), None)),
            (Method::OPTIONS, format!("{vms}/vm1"), ("options", Some("vm1"), None)),
        ];
        for (method, uri, (verb, name, subresource)) in cases {
            let info = info(method, &uri);
            assert!(info.is_resource_request());
            assert_eq!(
                summary(&info),
                (
                    verb,
                    "kubevirt.io",
                    "virtualmachines",
                    Some("default"),
                    name,
                    subresource
                ),
                "{uri}"
            );
        }
        // Across all namespaces.
        let all = info(
            Method::GET,
            "/apis/kubevirt.io/v1/virtualmachines?limit=500",
        );
        assert_eq!(
            summary(&all),
            ("list", "kubevirt.io", "virtualmachines", None, None, None)
        );
        assert_eq!(all.path, "/apis/kubevirt.io/v1/virtualmachines");
    }

    #[test]
    fn core_and_cluster_scoped_requests() {
        let review = info(
            Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        );
        assert_eq!(
            summary(&review),
            (
                "create",
                "authorization.k8s.io",
                "selfsubjectaccessreviews",
                None,
                None,
                None
            )
        );
        // A namespace is cluster-scoped: it is named, not a namespace of its own.
        let ns = info(Method::DELETE, "/api/v1/namespaces/test");
        assert_eq!(
            summary(&ns),
            ("delete", "", "namespaces", None, Some("test"), None)
        );
        let finalize = info(Method::PUT, "/api/v1/namespaces/test/finalize");
        assert_eq!(
            summary(&finalize),
            (
                "update",
                "",
                "namespaces",
                None,
                Some("test"),
                Some("finalize")
            )
        );
        let cm = info(
            Method::GET,
            "/api/v1/namespaces/test/configmaps/sysprep%20answers",
        );
        assert_eq!(
            summary(&cm),
            (
                "get",
                "",
                "configmaps",
                Some("test"),
                Some("sysprep answers"),
                None
            )
        );
        let nodes = info(Method::GET, "/api/v1/nodes?watch=true&resourceVersion=0");
        assert_eq!(summary(&nodes), ("watch", "", "nodes", None, None, None));
    }

    #[test]
    fn virtctl_subresources_keep_the_method_verb() {
        let start = info(
            Method::PUT,
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/vm1/start",
        );
        assert_eq!(
            summary(&start),
            (
                "update",
                "subresources.kubevirt.io",
                "virtualmachines",
                Some("default"),
                Some("vm1"),
                Some("start")
            )
        );
        let console = info(
            Method::GET,
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/vm1/console",
        );
        assert_eq!(summary(&console).0, "get");
        assert_eq!(summary(&console).5, Some("console"));
        let forward = info(
            Method::GET,
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/vm1/portforward/22/tcp",
        );
        assert_eq!(summary(&forward).5, Some("portforward/22/tcp"));
    }

    #[test]
    fn kubectl_non_resource_requests() {
        let cases = [
            ("/api?timeout=32s", Target::CoreVersions),
            ("/apis?timeout=32s", Target::Groups),
            (
                "/api/v1?timeout=32s",
                Target::GroupVersion {
                    group: String::new(),
                    version: "v1".into(),
                },
            ),
            (
                "/apis/kubevirt.io/v1?timeout=32s",
                Target::GroupVersion {
                    group: "kubevirt.io".into(),
                    version: "v1".into(),
                },
            ),
            ("/openapi/v3?timeout=32s", Target::OpenApiV3Root),
            (
                "/openapi/v3/apis/kubevirt.io/v1?hash=KUBEVIRT0001&timeout=32s",
                Target::OpenApiV3 {
                    group: "kubevirt.io".into(),
                    version: "v1".into(),
                },
            ),
            ("/openapi/v2?timeout=32s", Target::OpenApiV2),
            ("/version?timeout=32s", Target::Version),
            ("/healthz/ping", Target::Health("ping".into())),
        ];
        for (uri, target) in cases {
            let info = info(Method::GET, uri);
            assert!(!info.is_resource_request(), "{uri}");
            assert_eq!((info.verb, info.target), (Verb::Get, target), "{uri}");
        }
        assert_eq!(
            info(Method::POST, "/healthz").verb,
            Verb::Other("post".into())
        );
        assert_eq!(parse("/metrics"), Some(Target::Metrics));
        assert_eq!(parse("/metricsz"), None);
    }

    #[test]
    fn namespaced_and_cluster_paths() {
        let Some(Target::Resource(r)) =
            parse("/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm1/status")
        else {
            panic!("not a resource")
        };
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("vm1"));
        assert_eq!(r.subresource.as_deref(), Some("status"));
        let Some(Target::Resource(r)) = parse("/api/v1/namespaces/default") else {
            panic!("not a resource")
        };
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.namespace),
            ("namespaces", Some("default"), None)
        );
        let Some(Target::Resource(r)) = parse("/apis/kubevirt.io/v1/virtualmachines") else {
            panic!("not a resource")
        };
        assert_eq!(
            (r.resource.as_str(), r.name, r.namespace),
            ("virtualmachines", None, None)
        );
        assert_eq!(
            parse("/apis/kubevirt.io/v1"),
            Some(Target::GroupVersion {
                group: "kubevirt.io".into(),
                version: "v1".into()
            })
        );
    }

    #[test]
    fn bad_query_values_are_400() {
        assert_eq!(Query::parse(Some("limit=abc")).unwrap_err().code, 400);
        assert_eq!(Query::parse(Some("watch=maybe")).unwrap_err().code, 400);
        assert!(Query::parse(Some("watch=1&limit=5")).unwrap().watch);
    }
}
