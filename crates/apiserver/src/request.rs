//! Parsing at the edge: a URL path and query string become a typed request, so the rest
//! of the server never looks at raw HTTP.

use apimachinery::status::Status;

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Health(String),
    Version,
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

/// `/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/<subresource>...]]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    /// Everything after the name, e.g. `status` or `portforward/22`.
    pub subresource: Option<String>,
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
            plural: plural.to_string(),
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
            (r.plural.as_str(), r.name.as_deref(), r.namespace),
            ("namespaces", Some("default"), None)
        );
        let Some(Target::Resource(r)) = parse("/apis/kubevirt.io/v1/virtualmachines") else {
            panic!("not a resource")
        };
        assert_eq!(
            (r.plural.as_str(), r.name, r.namespace),
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
