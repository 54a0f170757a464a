//! `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-*`
//! (`kubectl --as`, `--as-group`, `--as-uid`): the request is served as the user named,
//! if the requester may `impersonate` each part (kube-apiserver's impersonation filter).

use std::collections::BTreeMap;

use apimachinery::status::Status;
use http::HeaderMap;

use super::{forbidden, Attributes, Authorizer, ResourceAttributes};
use crate::authn::{UserInfo, ANONYMOUS_USER, AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// One thing to impersonate (kube's ObjectReference), in header order.
#[derive(Clone, Debug)]
enum Request {
    ServiceAccount { namespace: String, name: String },
    User(String),
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

impl Request {
    /// Go's `%v` of the ObjectReference kube builds:
    /// `{Kind Namespace Name UID APIVersion ResourceVersion FieldPath}`.
    fn go_value(&self) -> String {
        let (kind, namespace, name, api_version, field_path) = match self {
            Request::ServiceAccount { namespace, name } => {
                ("ServiceAccount", namespace.as_str(), name.as_str(), "", "")
            }
            Request::User(name) => ("User", "", name.as_str(), "", ""),
            Request::Group(name) => ("Group", "", name.as_str(), "", ""),
            Request::Extra { key, value } => (
                "UserExtra",
                "",
                value.as_str(),
                "authentication.k8s.io/v1",
                key.as_str(),
            ),
            Request::Uid(uid) => ("UID", "", uid.as_str(), "authentication.k8s.io/v1", ""),
        };
        format!("{{{kind} {namespace} {name}  {api_version}  {field_path}}}")
    }

    /// What the requester must be allowed to `impersonate`.
    fn attributes(&self) -> Attributes {
        let (group, resource, subresource, namespace, name) = match self {
            Request::ServiceAccount { namespace, name } => {
                ("", "serviceaccounts", "", namespace.as_str(), name.as_str())
            }
            Request::User(name) => ("", "users", "", "", name.as_str()),
            Request::Group(name) => ("", "groups", "", "", name.as_str()),
            Request::Extra { key, value } => (
                "authentication.k8s.io",
                "userextras",
                key.as_str(),
                "",
                value.as_str(),
            ),
            Request::Uid(uid) => ("authentication.k8s.io", "uids", "", "", uid.as_str()),
        };
        Attributes::resource(
            "impersonate",
            ResourceAttributes {
                namespace: namespace.into(),
                group: group.into(),
                version: "v1".into(),
                resource: resource.into(),
                subresource: subresource.into(),
                name: name.into(),
            },
        )
    }
}

/// `%`-decoding of an extra key, kept as sent when it does not decode.
fn unescape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            match key
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                None => return key.to_string(),
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

fn requests(headers: &HeaderMap) -> Result<Vec<Request>, Status> {
    let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let mut out = Vec::new();
    let user = headers.get(USER).map(text).filter(|u| !u.is_empty());
    if let Some(user) = &user {
        match user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains(':'))
        {
            Some((namespace, name)) => out.push(Request::ServiceAccount {
                namespace: namespace.into(),
                name: name.into(),
            }),
            None => out.push(Request::User(user.clone())),
        }
    }
    let mut others = false;
    for group in headers.get_all(GROUP) {
        others = true;
        out.push(Request::Group(text(group)));
    }
    let mut extras: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
            extras
                .entry(unescape(&key.to_ascii_lowercase()))
                .or_default()
                .push(text(value));
        }
    }
    for (key, values) in extras {
        others = true;
        for value in values {
            out.push(Request::Extra {
                key: key.clone(),
                value,
            });
        }
    }
    if let Some(uid) = headers.get(UID).map(text).filter(|u| !u.is_empty()) {
        others = true;
        out.push(Request::Uid(uid));
    }
    if others && user.is_none() {
        let listed: Vec<String> = out.iter().map(Request::go_value).collect();
        return Err(Status::bad_request(format!(
            "requested [{}] without impersonating a user",
            listed.join(" ")
        )));
    }
    Ok(out)
}

/// The user a request acts as: the requester, or whom its headers impersonate if every
/// part is allowed; otherwise kube's 403 for the first part that is not.
pub fn acting_user(
    authorizer: &Authorizer,
    requester: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, Status> {
    let requests = requests(headers)?;
    if requests.is_empty() {
        return Ok(requester);
    }
    let groups_given = headers.get(GROUP).is_some();
    let mut user = UserInfo::default();
    for request in &requests {
        let attrs = request.attributes();
        if let Err(reason) = authorizer.allows(&requester, &attrs) {
            return Err(forbidden(&requester.name, &attrs, &reason));
        }
        match request {
            Request::ServiceAccount { namespace, name } => {
                user.name = crate::rbac::service_account_user(namespace, name);
                if !groups_given {
                    user.groups = vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{namespace}"),
                    ];
                }
            }
            Request::User(name) => user.name = name.clone(),
            Request::Group(group) => user.groups.push(group.clone()),
            Request::Extra { key, value } => user
                .extra
                .entry(key.clone())
                .or_default()
                .push(value.clone()),
            Request::Uid(uid) => user.uid = uid.clone(),
        }
    }
    if user.name != ANONYMOUS_USER {
        let has_either = user
            .groups
            .iter()
            .any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP);
        if !has_either {
            user.groups.push(AUTHENTICATED_GROUP.into());
        }
    } else if !user.in_group(UNAUTHENTICATED_GROUP) {
        user.groups.push(UNAUTHENTICATED_GROUP.into());
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn headers_become_requests() {
        let r = requests(&headers(&[
            ("Impersonate-User", "system:serviceaccount:ns:sa"),
            ("Impersonate-Group", "a"),
            ("Impersonate-Extra-Scopes%2Fx", "v"),
        ]))
        .unwrap();
        assert_eq!(r.len(), 3);
        assert!(
            matches!(&r[0], Request::ServiceAccount { namespace, name } if namespace == "ns" && name == "sa")
        );
        assert!(matches!(&r[2], Request::Extra { key, .. } if key == "scopes/x"));
        let err = requests(&headers(&[("Impersonate-Group", "devs")])).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "requested [{Group  devs    }] without impersonating a user"
        );
    }
}
