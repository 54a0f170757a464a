//! RBAC through the real server with real users: client certificates from `virtplane
//! user add` and bearer tokens from `--token-auth-file`. A permission matrix (role ×
//! verb × resource × namespace → allowed, or 403 with kube-apiserver's exact body,
//! subresources and the console/VNC websockets included), the escalation check with
//! `bind` and `escalate`, impersonation, the review endpoints, aggregation and
//! revocation taking effect on the next request.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};
use support::*;

const TOKENS: &str = "bob-token,bob,uid-bob,\"viewers\"\ndave-token,dave,uid-dave\nerin-token,erin,uid-erin,\"migrators,viewers\"\n";

/// A server with namespaces team-a and team-b, VM `vm1` in each, and users:
/// - admin: the admin kubeconfig (system:masters);
/// - alice (certificate): kubevirt.io:edit in team-a;
/// - bob (token, group viewers): view in team-a, through the group;
/// - carol (certificate): admin in team-a;
/// - dave (token): nothing bound;
/// - erin (token, groups migrators, viewers): kubevirt.io:migrate in team-a, and view.
struct Fixture {
    server: TestServer,
    _tokens: tempfile::TempDir,
    users: BTreeMap<&'static str, User>,
}

struct User {
    client: reqwest::Client,
    token: Option<&'static str>,
}

impl User {
    async fn send(
        &self,
        url: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let method_is_patch = method == Method::PATCH;
        let mut request = self.client.request(method, format!("{url}{path}"));
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        if let Some(body) = body {
            let content_type = if method_is_patch {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            request = request
                .header("content-type", content_type)
                .body(body.to_string());
        }
        Reply::read(request.send().await.expect("request")).await
    }
}

fn ca_of(kubeconfig: &str) -> reqwest::Certificate {
    let ca = kubeconfig_field(kubeconfig, "certificate-authority-data").expect("CA");
    reqwest::Certificate::from_pem(&ca).expect("CA PEM")
}

/// An HTTP/1.1 client (websocket upgrades are HTTP/1.1) with the kubeconfig's client
/// certificate, if it has one.
fn client_of(kubeconfig: &str) -> reqwest::Client {
    install_crypto();
    let mut builder = reqwest::Client::builder()
        .tls_certs_only([ca_of(kubeconfig)])
        .http1_only()
        .timeout(std::time::Duration::from_secs(60));
    if let (Some(mut cert), Some(key)) = (
        kubeconfig_field(kubeconfig, "client-certificate-data"),
        kubeconfig_field(kubeconfig, "client-key-data"),
    ) {
        cert.extend_from_slice(&key);
        builder = builder.identity(reqwest::Identity::from_pem(&cert).expect("identity"));
    }
    builder.build().expect("client")
}

/// `virtplane user add`, as a user would run it beside the server's data dir.
fn user_add(data_dir: &Path, args: &[&str]) -> (PathBuf, String) {
    let out = std::process::Command::new(binary())
        .args(["user", "add"])
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("run virtplane user add");
    assert!(
        out.status.success(),
        "virtplane user add {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (path, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn role_binding(ns: &str, name: &str, role: &str, subject: (&str, &str)) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": name, "namespace": ns},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": [{"kind": subject.0, "name": subject.1}]})
}

fn cluster_role_binding(name: &str, role: &str, subject: (&str, &str)) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": name},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": [{"kind": subject.0, "name": subject.1}]})
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": name}, "rules": rules})
}

fn rbac_coll(ns: Option<&str>, plural: &str) -> String {
    match ns {
        Some(ns) => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{plural}"),
        None => format!("/apis/rbac.authorization.k8s.io/v1/{plural}"),
    }
}

impl Fixture {
    async fn start() -> Fixture {
        let tokens = tempfile::tempdir().expect("temp dir");
        let file = tokens.path().join("tokens.csv");
        std::fs::write(&file, TOKENS).expect("token file");
        let server = TestServer::start_with(&[
            "--no-node",
            "--token-auth-file",
            file.to_str().expect("path"),
        ])
        .await;
        let api = server.api();
        for ns in ["team-a", "team-b"] {
            api.namespace(ns).await;
            api.create(&coll(ns, "virtualmachines"), &vm("vm1")).await;
        }
        let data = server.data_dir().to_path_buf();
        let (alice, said) = user_add(
            &data,
            &[
                "alice",
                "--group",
                "team-a-devs",
                "--namespace",
                "team-a",
                "--role",
                "kubevirt.io:edit",
            ],
        );
        assert!(said.contains("kubevirt.io:edit"), "{said}");
        assert_eq!(alice, data.join("users/alice.kubeconfig"));
        let (carol, _) = user_add(
            &data,
            &["carol", "--namespace", "team-a", "--role", "admin"],
        );
        for binding in [
            role_binding("team-a", "viewers-view", "view", ("Group", "viewers")),
            role_binding(
                "team-a",
                "erin-migrate",
                "kubevirt.io:migrate",
                ("User", "erin"),
            ),
        ] {
            api.create(&rbac_coll(Some("team-a"), "rolebindings"), &binding)
                .await;
        }
        let admin_kubeconfig = admin_kubeconfig(&data).expect("admin kubeconfig");
        let mut users = BTreeMap::new();
        users.insert(
            "admin",
            User {
                client: client_of(&admin_kubeconfig),
                token: None,
            },
        );
        for (name, path) in [("alice", &alice), ("carol", &carol)] {
            let kubeconfig = std::fs::read_to_string(path).expect("user kubeconfig");
            users.insert(
                name,
                User {
                    client: client_of(&kubeconfig),
                    token: None,
                },
            );
        }
        // Token users present no certificate.
        let anonymous = {
            let mut k = admin_kubeconfig.clone();
            k = k
                .lines()
                .filter(|l| {
                    !l.contains("client-certificate-data") && !l.contains("client-key-data")
                })
                .collect::<Vec<_>>()
                .join("\n");
            client_of(&k)
        };
        for (name, token) in [
            ("bob", "bob-token"),
            ("dave", "dave-token"),
            ("erin", "erin-token"),
        ] {
            users.insert(
                name,
                User {
                    client: anonymous.clone(),
                    token: Some(token),
                },
            );
        }
        Fixture {
            server,
            _tokens: tokens,
            users,
        }
    }

    fn user(&self, name: &str) -> &User {
        &self.users[name]
    }

    async fn send(
        &self,
        user: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        self.user(user)
            .send(&self.server.url, method, path, body, headers)
            .await
    }
}

/// The 403 body kube-apiserver writes when `user` may not `verb` the resource.
fn forbidden(
    user: &str,
    verb: &str,
    (group, resource, subresource): (&str, &str, &str),
    namespace: &str,
    name: &str,
) -> Value {
    let shown = if subresource.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{subresource}")
    };
    let scope = if namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{namespace}\"")
    };
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let subject = if name.is_empty() {
        qualified
    } else {
        format!("{qualified} \"{name}\"")
    };
    let mut details = Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(resource));
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{shown}\" in API group \"{group}\" {scope}"),
           "reason": "Forbidden", "details": details, "code": 403})
}

/// One row of the matrix: a request, what RBAC sees in it, who may, and what those
/// who may get.
struct Case {
    what: &'static str,
    method: Method,
    path: String,
    body: Option<Value>,
    headers: &'static [(&'static str, &'static str)],
    /// verb, (group, resource, subresource), namespace, name.
    verb: &'static str,
    resource: (&'static str, &'static str, &'static str),
    namespace: &'static str,
    name: &'static str,
    allowed: &'static [&'static str],
    /// The codes an allowed request may get (the handler's answer).
    ok: &'static [u16],
}

const ALL: [&str; 6] = ["admin", "alice", "bob", "carol", "dave", "erin"];
const WEBSOCKET: &[(&str, &str)] = &[
    ("connection", "Upgrade"),
    ("upgrade", "websocket"),
    ("sec-websocket-version", "13"),
    ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("sec-websocket-protocol", "plain.kubevirt.io"),
];

fn cases() -> Vec<Case> {
    let vms_a = coll("team-a", "virtualmachines");
    let sub = "/apis/subresources.kubevirt.io/v1/namespaces/team-a";
    let case = |what, method, path: String, verb, resource, namespace, name, allowed, ok| Case {
        what,
        method,
        path,
        body: None,
        headers: &[],
        verb,
        resource,
        namespace,
        name,
        allowed,
        ok,
    };
    let vm = ("kubevirt.io", "virtualmachines", "");
    vec![
        case(
            "list VMs in team-a",
            Method::GET,
            vms_a.clone(),
            "list",
            vm,
            "team-a",
            "",
            &["admin", "alice", "bob", "carol", "erin"],
            &[200],
        ),
        case(
            "list VMs in team-b",
            Method::GET,
            coll("team-b", "virtualmachines"),
            "list",
            vm,
            "team-b",
            "",
            &["admin"],
            &[200],
        ),
        case(
            "list VMs everywhere",
            Method::GET,
            format!("{KUBEVIRT}/virtualmachines"),
            "list",
            vm,
            "",
            "",
            &["admin"],
            &[200],
        ),
        case(
            "get a VM",
            Method::GET,
            format!("{vms_a}/vm1"),
            "get",
            vm,
            "team-a",
            "vm1",
            &["admin", "alice", "bob", "carol", "erin"],
            &[200],
        ),
        Case {
            body: Some(Value::Null), // filled per user
            ..case(
                "create a VM",
                Method::POST,
                vms_a.clone(),
                "create",
                vm,
                "team-a",
                "",
                &["admin", "alice", "carol"],
                &[201],
            )
        },
        case(
            "delete a VM",
            Method::DELETE,
            format!("{vms_a}/ghost"),
            "delete",
            vm,
            "team-a",
            "ghost",
            &["admin", "alice", "carol"],
            &[404],
        ),
        case(
            "delete all VMs",
            Method::DELETE,
            format!("{vms_a}?labelSelector=app%3Dnone"),
            "deletecollection",
            vm,
            "team-a",
            "",
            &["admin", "carol"],
            &[200],
        ),
        case(
            "watch VMs",
            Method::GET,
            format!("{vms_a}?watch=true&timeoutSeconds=1"),
            "watch",
            vm,
            "team-a",
            "",
            &["admin", "alice", "bob", "carol", "erin"],
            &[200],
        ),
        case(
            "watch one VM in team-b",
            Method::GET,
            format!(
                "{}?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dvm1",
                coll("team-b", "virtualmachines")
            ),
            "watch",
            vm,
            "team-b",
            "vm1",
            &["admin"],
            &[200],
        ),
        Case {
            body: Some(json!({})),
            ..case(
                "start a VM",
                Method::PUT,
                format!("{sub}/virtualmachines/vm1/start"),
                "update",
                ("subresources.kubevirt.io", "virtualmachines", "start"),
                "team-a",
                "vm1",
                &["admin", "alice", "carol"],
                &[200, 202, 409],
            )
        },
        Case {
            body: Some(json!({})),
            ..case(
                "migrate a VM",
                Method::PUT,
                format!("{sub}/virtualmachines/vm1/migrate"),
                "update",
                ("subresources.kubevirt.io", "virtualmachines", "migrate"),
                "team-a",
                "vm1",
                &["admin", "erin"],
                &[200, 202, 409],
            )
        },
        Case {
            headers: WEBSOCKET,
            ..case(
                "console websocket",
                Method::GET,
                format!("{sub}/virtualmachineinstances/vm1/console"),
                "get",
                (
                    "subresources.kubevirt.io",
                    "virtualmachineinstances",
                    "console",
                ),
                "team-a",
                "vm1",
                &["admin", "alice", "carol"],
                &[400, 404],
            )
        },
        Case {
            headers: WEBSOCKET,
            ..case(
                "VNC websocket",
                Method::GET,
                format!("{sub}/virtualmachineinstances/vm1/vnc"),
                "get",
                ("subresources.kubevirt.io", "virtualmachineinstances", "vnc"),
                "team-a",
                "vm1",
                &["admin", "alice", "carol"],
                &[400, 404],
            )
        },
        Case {
            body: Some(json!({"status": {}})),
            ..case(
                "patch a VM's status",
                Method::PATCH,
                format!("{vms_a}/vm1/status"),
                "patch",
                ("kubevirt.io", "virtualmachines", "status"),
                "team-a",
                "vm1",
                &["admin"],
                &[200],
            )
        },
        case(
            "list Secrets",
            Method::GET,
            "/api/v1/namespaces/team-a/secrets".into(),
            "list",
            ("", "secrets", ""),
            "team-a",
            "",
            &["admin", "carol"],
            &[200],
        ),
        case(
            "get a ConfigMap",
            Method::GET,
            "/api/v1/namespaces/team-a/configmaps/ghost".into(),
            "get",
            ("", "configmaps", ""),
            "team-a",
            "ghost",
            &["admin", "bob", "carol", "erin"],
            &[404],
        ),
        case(
            "list Nodes",
            Method::GET,
            "/api/v1/nodes".into(),
            "list",
            ("", "nodes", ""),
            "",
            "",
            &["admin"],
            &[200],
        ),
        case(
            "get its Namespace",
            Method::GET,
            "/api/v1/namespaces/team-a".into(),
            "get",
            ("", "namespaces", ""),
            "team-a",
            "team-a",
            &["admin", "bob", "carol", "erin"],
            &[200],
        ),
        case(
            "list DataVolumes",
            Method::GET,
            "/apis/cdi.kubevirt.io/v1beta1/namespaces/team-a/datavolumes".into(),
            "list",
            ("cdi.kubevirt.io", "datavolumes", ""),
            "team-a",
            "",
            &["admin", "bob", "carol", "erin"],
            &[200],
        ),
        Case {
            body: Some(Value::Null), // filled per user
            ..case(
                "bind view in team-a",
                Method::POST,
                rbac_coll(Some("team-a"), "rolebindings"),
                "create",
                ("rbac.authorization.k8s.io", "rolebindings", ""),
                "team-a",
                "",
                &["admin", "carol"],
                &[201],
            )
        },
    ]
}

#[tokio::test]
async fn permission_matrix() {
    let f = Fixture::start().await;
    for case in cases() {
        let replies = futures::future::join_all(ALL.iter().map(|user| {
            let body = match &case.body {
                Some(Value::Null) if case.resource.1 == "virtualmachines" => {
                    Some(vm(&format!("new-{user}")))
                }
                Some(Value::Null) => Some(role_binding(
                    "team-a",
                    &format!("by-{user}"),
                    "view",
                    ("User", "someone"),
                )),
                other => other.clone(),
            };
            let method = case.method.clone();
            let f = &f;
            let path = case.path.clone();
            async move {
                (
                    *user,
                    f.send(user, method, &path, body.as_ref(), case.headers)
                        .await,
                )
            }
        }))
        .await;
        for (user, reply) in replies {
            if case.allowed.contains(&user) {
                assert!(
                    case.ok.contains(&reply.status.as_u16()),
                    "{}: {user} may, and gets {}: {}",
                    case.what,
                    reply.status,
                    reply.text
                );
            } else {
                let expected = forbidden(user, case.verb, case.resource, case.namespace, case.name);
                assert_eq!(
                    (reply.status, &reply.body),
                    (StatusCode::FORBIDDEN, &expected),
                    "{}: {user} may not\n got: {}",
                    case.what,
                    reply.text
                );
            }
        }
    }
    // Discovery is for every authenticated user; paths nobody serves are 403 unless one
    // may see every path (then 404).
    for user in ALL {
        let r = f.send(user, Method::GET, "/apis", None, &[]).await;
        assert_eq!(r.status, StatusCode::OK, "{user}: {}", r.text);
        let r = f.send(user, Method::GET, "/no/such/path", None, &[]).await;
        if user == "admin" {
            assert_eq!(r.status, StatusCode::NOT_FOUND);
        } else {
            assert_status_body(
                &r,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": format!("forbidden: User \"{user}\" cannot get path \"/no/such/path\""),
                       "reason": "Forbidden", "details": {}, "code": 403}),
            );
        }
    }
    // Health and version need no credentials; everything else does.
    let anonymous = &f.user("dave").client;
    for (path, code) in [
        ("/healthz", 200),
        ("/readyz", 200),
        ("/version", 200),
        ("/apis", 401),
    ] {
        let r = Reply::read(
            anonymous
                .get(format!("{}{path}", f.server.url))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(r.status.as_u16(), code, "{path}: {}", r.text);
    }
}

fn escalation(user: &str, groups: &str, plural: &str, name: &str, missing: &[&str]) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("{plural}.rbac.authorization.k8s.io \"{name}\" is forbidden: user \"{user}\" (groups={groups}) is attempting to grant RBAC permissions not currently held:\n{}", missing.join("\n")),
           "reason": "Forbidden",
           "details": {"name": name, "group": "rbac.authorization.k8s.io", "kind": plural}, "code": 403})
}

#[tokio::test]
async fn no_one_grants_what_they_do_not_hold() {
    let f = Fixture::start().await;
    let api = f.server.api();
    let carol_groups = "[\"system:authenticated\"]";
    let bindings_a = rbac_coll(Some("team-a"), "rolebindings");
    let roles_a = rbac_coll(Some("team-a"), "roles");
    // carol is admin in team-a: she may bind what she holds, not cluster-admin.
    let r = f
        .send(
            "carol",
            Method::POST,
            &bindings_a,
            Some(&role_binding(
                "team-a",
                "carol-root",
                "cluster-admin",
                ("User", "carol"),
            )),
            &[],
        )
        .await;
    assert_status_body(
        &r,
        escalation(
            "carol",
            carol_groups,
            "rolebindings",
            "carol-root",
            &[
                "{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}",
                "{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}",
            ],
        ),
    );
    let r = f
        .send(
            "carol",
            Method::POST,
            &bindings_a,
            Some(&role_binding(
                "team-a",
                "dave-edit",
                "kubevirt.io:edit",
                ("User", "dave"),
            )),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    // Roles: rules she holds, yes; others, no; also when added by an update.
    let role = |rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "vm-reader", "namespace": "team-a"}, "rules": rules})
    };
    let reader = json!([{"verbs": ["get", "list"], "apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"]}]);
    let r = f
        .send(
            "carol",
            Method::POST,
            &roles_a,
            Some(&role(reader.clone())),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let nodes = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]}]);
    let mut with_nodes = role(nodes.clone());
    with_nodes["metadata"]["name"] = json!("nodes-reader");
    let r = f
        .send("carol", Method::POST, &roles_a, Some(&with_nodes), &[])
        .await;
    assert_status_body(
        &r,
        escalation(
            "carol",
            carol_groups,
            "roles",
            "nodes-reader",
            &["{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\"]}"],
        ),
    );
    let r = f
        .send(
            "carol",
            Method::PATCH,
            &format!("{roles_a}/vm-reader"),
            Some(&json!({"rules": [reader[0].clone(), nodes[0].clone()]})),
            &[],
        )
        .await;
    assert_status_body(
        &r,
        escalation(
            "carol",
            carol_groups,
            "roles",
            "vm-reader",
            &["{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\"]}"],
        ),
    );
    // Labels are not rules, but kube checks every change but the garbage collector's.
    let r = f
        .send(
            "carol",
            Method::PATCH,
            &format!("{roles_a}/vm-reader"),
            Some(&json!({"metadata": {"labels": {"a": "b"}}})),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);

    // `bind`: dave may create bindings in team-b and bind ClusterRole edit only.
    api.create(&rbac_coll(None, "clusterroles"), &cluster_role("binder", json!([
        {"verbs": ["create"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"]},
        {"verbs": ["bind"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["edit"]},
    ]))).await;
    api.create(
        &rbac_coll(Some("team-b"), "rolebindings"),
        &role_binding("team-b", "dave-binder", "binder", ("User", "dave")),
    )
    .await;
    let bindings_b = rbac_coll(Some("team-b"), "rolebindings");
    let r = f
        .send(
            "dave",
            Method::POST,
            &bindings_b,
            Some(&role_binding("team-b", "bob-edit", "edit", ("User", "bob"))),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let r = f
        .send(
            "dave",
            Method::POST,
            &bindings_b,
            Some(&role_binding(
                "team-b",
                "bob-admin",
                "admin",
                ("User", "bob"),
            )),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let prefix = "rolebindings.rbac.authorization.k8s.io \"bob-admin\" is forbidden: user \"dave\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:";
    let message = r.body["message"].as_str().unwrap();
    assert!(message.starts_with(prefix), "{}", r.text);
    assert!(
        message.contains("\n{APIGroups:[\"kubevirt.io\"], Resources:[\"virtualmachines\"], Verbs:[\"get\" \"delete\""),
        "{}",
        r.text
    );
    // A role that does not exist is not found (unless one may bind it anyway).
    let r = f
        .send(
            "dave",
            Method::POST,
            &bindings_b,
            Some(&role_binding("team-b", "bob-nope", "nope", ("User", "bob"))),
            &[],
        )
        .await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "clusterrole.rbac.authorization.k8s.io \"nope\" not found", "reason": "NotFound",
               "details": {"name": "nope", "group": "rbac.authorization.k8s.io", "kind": "clusterrole"},
               "code": 404}),
    );

    // `escalate`: erin may write roles in team-b with rules she does not hold.
    api.create(&rbac_coll(None, "clusterroles"), &cluster_role("escalator", json!([
        {"verbs": ["create", "escalate"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"]},
    ]))).await;
    api.create(
        &rbac_coll(Some("team-b"), "rolebindings"),
        &role_binding("team-b", "erin-escalator", "escalator", ("User", "erin")),
    )
    .await;
    let mut nodes_b = with_nodes.clone();
    nodes_b["metadata"]["namespace"] = json!("team-b");
    let r = f
        .send(
            "erin",
            Method::POST,
            &rbac_coll(Some("team-b"), "roles"),
            Some(&nodes_b),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);

    // An aggregationRule gathers anything: cluster-admin only.
    api.create(&rbac_coll(None, "clusterroles"), &cluster_role("clusterrole-writer", json!([
        {"verbs": ["create"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"]},
    ]))).await;
    api.create(
        &rbac_coll(None, "clusterrolebindings"),
        &cluster_role_binding(
            "dave-clusterrole-writer",
            "clusterrole-writer",
            ("User", "dave"),
        ),
    )
    .await;
    let mut aggregated = cluster_role("agg", json!([]));
    aggregated["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]});
    let r = f
        .send(
            "dave",
            Method::POST,
            &rbac_coll(None, "clusterroles"),
            Some(&aggregated),
            &[],
        )
        .await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "clusterroles.rbac.authorization.k8s.io \"agg\" is forbidden: must have cluster-admin privileges to use the aggregationRule",
               "reason": "Forbidden", "details": {"name": "agg", "group": "rbac.authorization.k8s.io", "kind": "clusterroles"},
               "code": 403}),
    );
    // The admin (system:masters) is never checked.
    let r = api
        .post(&rbac_coll(None, "clusterroles"), &aggregated)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb() {
    let f = Fixture::start().await;
    let api = f.server.api();
    let vms_a = coll("team-a", "virtualmachines");
    let vms_b = coll("team-b", "virtualmachines");
    // The admin may act as anyone: then alice's rights apply.
    let as_alice = [("Impersonate-User", "alice")];
    let r = f.send("admin", Method::GET, &vms_a, None, &as_alice).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = f.send("admin", Method::GET, &vms_b, None, &as_alice).await;
    assert_status_body(
        &r,
        forbidden(
            "alice",
            "list",
            ("kubevirt.io", "virtualmachines", ""),
            "team-b",
            "",
        ),
    );
    // alice may not act as bob.
    let r = f
        .send(
            "alice",
            Method::GET,
            &vms_a,
            None,
            &[("Impersonate-User", "bob")],
        )
        .await;
    assert_status_body(
        &r,
        forbidden("alice", "impersonate", ("", "users", ""), "", "bob"),
    );
    // carol may act as bob and in group viewers, not in system:masters.
    api.create(&rbac_coll(None, "clusterroles"), &cluster_role("impersonator", json!([
        {"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"]},
        {"verbs": ["impersonate"], "apiGroups": [""], "resources": ["groups"], "resourceNames": ["viewers"]},
    ]))).await;
    api.create(
        &rbac_coll(None, "clusterrolebindings"),
        &cluster_role_binding("carol-impersonator", "impersonator", ("User", "carol")),
    )
    .await;
    // As bob without groups: bob's token groups are not his, so view (bound to viewers)
    // does not apply.
    let r = f
        .send(
            "carol",
            Method::GET,
            &vms_a,
            None,
            &[("Impersonate-User", "bob")],
        )
        .await;
    assert_status_body(
        &r,
        forbidden(
            "bob",
            "list",
            ("kubevirt.io", "virtualmachines", ""),
            "team-a",
            "",
        ),
    );
    let as_viewer = [
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "viewers"),
    ];
    let r = f.send("carol", Method::GET, &vms_a, None, &as_viewer).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = f
        .send(
            "carol",
            Method::POST,
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
            &as_viewer,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        r.body["status"]["userInfo"],
        json!({"username": "bob", "groups": ["viewers", "system:authenticated"]})
    );
    let r = f
        .send(
            "carol",
            Method::GET,
            &vms_a,
            None,
            &[
                ("Impersonate-User", "bob"),
                ("Impersonate-Group", "system:masters"),
            ],
        )
        .await;
    assert_status_body(
        &r,
        forbidden(
            "carol",
            "impersonate",
            ("", "groups", ""),
            "",
            "system:masters",
        ),
    );
    let r = f
        .send(
            "carol",
            Method::GET,
            &vms_a,
            None,
            &[("Impersonate-Group", "viewers")],
        )
        .await;
    assert_status(
        &r,
        400,
        "BadRequest",
        "requested [{Group  viewers    }] without impersonating a user",
    );
}

#[tokio::test]
async fn reviews_answer_for_real() {
    let f = Fixture::start().await;
    let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let review = |verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"verb": verb, "group": "kubevirt.io", "resource": "virtualmachines", "namespace": ns}}})
    };
    let r = f
        .send(
            "alice",
            Method::POST,
            ssar,
            Some(&review("create", "team-a")),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        r.body["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"alice-kubevirt.io:edit/team-a\" of ClusterRole \"kubevirt.io:edit\" to User \"alice\""})
    );
    let r = f
        .send(
            "alice",
            Method::POST,
            ssar,
            Some(&review("create", "team-b")),
            &[],
        )
        .await;
    assert_eq!(r.body["status"], json!({"allowed": false}), "{}", r.text);
    let path = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                      "spec": {"nonResourceAttributes": {"verb": "get", "path": "/apis"}}});
    let r = f.send("dave", Method::POST, ssar, Some(&path), &[]).await;
    assert_eq!(r.body["status"]["allowed"], true, "{}", r.text);
    let r = f
        .send("dave", Method::POST, ssar, Some(&json!({"spec": {}})), &[])
        .await;
    assert_status(&r, 422, "Invalid", "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified");

    // SubjectAccessReview: the admin asks about others; dave may not ask.
    let sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let about = |user: &str, groups: &[&str], verb: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": user, "groups": groups, "resourceAttributes":
                   {"verb": verb, "group": "kubevirt.io", "resource": "virtualmachines", "namespace": "team-a"}}})
    };
    let r = f
        .send(
            "admin",
            Method::POST,
            sar,
            Some(&about("bob", &["viewers"], "list")),
            &[],
        )
        .await;
    assert_eq!(r.body["status"]["allowed"], true, "{}", r.text);
    let r = f
        .send(
            "admin",
            Method::POST,
            sar,
            Some(&about("bob", &["viewers"], "delete")),
            &[],
        )
        .await;
    assert_eq!(r.body["status"]["allowed"], false, "{}", r.text);
    let r = f
        .send(
            "dave",
            Method::POST,
            sar,
            Some(&about("bob", &[], "list")),
            &[],
        )
        .await;
    assert_status_body(
        &r,
        forbidden(
            "dave",
            "create",
            ("authorization.k8s.io", "subjectaccessreviews", ""),
            "",
            "",
        ),
    );

    // SelfSubjectRulesReview: what alice holds in team-a.
    let r = f
        .send(
            "alice",
            Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            Some(
                &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                           "spec": {"namespace": "team-a"}}),
            ),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let rules = r.body["status"]["resourceRules"].as_array().unwrap();
    assert!(rules.contains(&json!({"verbs": ["update"], "apiGroups": ["subresources.kubevirt.io"],
        "resources": ["virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart",
                      "virtualmachines/addvolume", "virtualmachines/removevolume", "virtualmachines/memorydump",
                      "virtualmachines/removememorydump", "virtualmachines/evacuate/cancel"]})), "{}", r.text);
    assert_eq!(r.body["status"]["incomplete"], false);

    // SelfSubjectReview: a token user with its uid and groups.
    let r = f
        .send(
            "bob",
            Method::POST,
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
            &[],
        )
        .await;
    assert_eq!(
        r.body["status"]["userInfo"],
        json!({"username": "bob", "uid": "uid-bob", "groups": ["viewers", "system:authenticated"]}),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn changes_take_effect_on_the_next_request() {
    let f = Fixture::start().await;
    let api = f.server.api();
    let console =
        "/apis/subresources.kubevirt.io/v1/namespaces/team-a/virtualmachineinstances/vm1/console";
    let refused = forbidden(
        "bob",
        "get",
        (
            "subresources.kubevirt.io",
            "virtualmachineinstances",
            "console",
        ),
        "team-a",
        "vm1",
    );
    let r = f.send("bob", Method::GET, console, None, WEBSOCKET).await;
    assert_status_body(&r, refused.clone());
    // A ClusterRole labelled to aggregate into view gives its rules to every viewer...
    let mut extra = cluster_role(
        "console-for-viewers",
        json!([
            {"verbs": ["get"], "apiGroups": ["subresources.kubevirt.io"], "resources": ["virtualmachineinstances/console"]}
        ]),
    );
    extra["metadata"]["labels"] = json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"});
    api.create(&rbac_coll(None, "clusterroles"), &extra).await;
    let r = f.send("bob", Method::GET, console, None, WEBSOCKET).await;
    assert_ne!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    // ... and the aggregation controller writes them into view.
    let view_has = |view: &Value| {
        view["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"] == json!(["virtualmachineinstances/console"]))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let view = api
            .get(&format!("{}/view", rbac_coll(None, "clusterroles")))
            .await;
        if view_has(&view.body) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "view never aggregated: {}",
            view.text
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Removing it takes the right away again.
    let r = api
        .delete(
            &format!("{}/console-for-viewers", rbac_coll(None, "clusterroles")),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = f.send("bob", Method::GET, console, None, WEBSOCKET).await;
    assert_status_body(&r, refused);

    // Revocation: without her binding alice is refused at once.
    let vms_a = coll("team-a", "virtualmachines");
    let r = api
        .delete(
            &format!(
                "{}/alice-kubevirt.io:edit",
                rbac_coll(Some("team-a"), "rolebindings")
            ),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = f.send("alice", Method::GET, &vms_a, None, &[]).await;
    assert_status_body(
        &r,
        forbidden(
            "alice",
            "list",
            ("kubevirt.io", "virtualmachines", ""),
            "team-a",
            "",
        ),
    );
    // A binding to a role that does not exist says so in the refusal.
    api.create(
        &rbac_coll(Some("team-a"), "rolebindings"),
        &role_binding("team-a", "alice-ghost", "ghost-role", ("User", "alice")),
    )
    .await;
    let r = f.send("alice", Method::GET, &vms_a, None, &[]).await;
    let mut expected = forbidden(
        "alice",
        "list",
        ("kubevirt.io", "virtualmachines", ""),
        "team-a",
        "",
    );
    expected["message"] = json!(format!(
        "{}: RBAC: clusterrole.rbac.authorization.k8s.io \"ghost-role\" not found",
        expected["message"].as_str().unwrap()
    ));
    assert_status_body(&r, expected);
}
