//! What a request asks to do in RBAC's terms (kube's RequestInfoFactory feeding
//! `authorizer.Attributes`), from the API server's typed request info.

use access::authz::{Attributes, ResourceAttributes};

use crate::request::{Query, RequestInfo, Target};

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

/// `fieldSelector` terms `metadata.name=X` or `metadata.name==X` (`RequiresExactMatch`).
fn selected_name(selector: &str) -> Option<&str> {
    selector.split(',').find_map(|term| {
        let term = term.trim();
        term.strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use access::authz::forbidden;
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
        of_request(&info, &query)
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
