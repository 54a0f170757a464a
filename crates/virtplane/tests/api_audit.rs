//! The audit log through the real server: `--audit-log` with an `--audit-policy`, requests
//! by several users (a token user, the admin, the admin impersonating, a refused user,
//! nobody), and the file's lines checked against the policy: levels, bodies present or
//! absent, users, verbs, objectRefs, codes, decisions, stages, the Audit-Id header.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use support::*;

const TOKENS: &str = "bob-token,bob,uid-bob,\"testers\"\ndave-token,dave,uid-dave\n";

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitManagedFields: true
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
  # The server's own controllers.
  - level: None
    userGroups: ["system:virtplane-components"]
  - level: Metadata
    resources: [{group: "", resources: ["secrets"]}]
    omitStages: ["RequestReceived"]
  - level: RequestResponse
    namespaces: ["audited"]
    resources: [{group: kubevirt.io, resources: ["virtualmachines"]}]
  - level: Request
"#;

/// The base64 of the Secret's value: it must appear nowhere in the log.
const SECRET_VALUE: &str = "aHVudGVyMg==";

struct Fixture {
    server: TestServer,
    _files: tempfile::TempDir,
    log: std::path::PathBuf,
    plain: reqwest::Client,
}

impl Fixture {
    async fn start() -> Fixture {
        let files = tempfile::tempdir().expect("temp dir");
        let tokens = files.path().join("tokens.csv");
        let policy = files.path().join("policy.yaml");
        let log = files.path().join("audit.log");
        std::fs::write(&tokens, TOKENS).expect("token file");
        std::fs::write(&policy, POLICY).expect("policy file");
        let server = TestServer::start_with(&[
            "--no-node",
            "--token-auth-file",
            tokens.to_str().expect("path"),
            "--audit-log",
            log.to_str().expect("path"),
            "--audit-policy",
            policy.to_str().expect("path"),
        ])
        .await;
        let kubeconfig = admin_kubeconfig(server.data_dir()).expect("admin kubeconfig");
        let ca = kubeconfig_field(&kubeconfig, "certificate-authority-data").expect("CA");
        let plain = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&ca).expect("CA PEM")])
            .user_agent("audit-test/1.0")
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        Fixture {
            server,
            _files: files,
            log,
            plain,
        }
    }

    /// A request as a token user (`None`: no credentials at all).
    async fn send(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Reply {
        let mut request = self
            .plain
            .request(method, format!("{}{path}", self.server.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        Reply::read(request.send().await.expect("request")).await
    }

    /// Every event of the requests with these audit IDs, once each has its
    /// ResponseComplete line (the log is written after the response).
    fn events(&self, ids: &[&str]) -> BTreeMap<String, Vec<Value>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let all = read_log(&self.log);
            let mut by_id: BTreeMap<String, Vec<Value>> = BTreeMap::new();
            for event in all {
                let id = event["auditID"].as_str().unwrap_or("").to_string();
                if ids.contains(&id.as_str()) {
                    by_id.entry(id).or_default().push(event);
                }
            }
            let complete = ids.iter().all(|id| {
                by_id
                    .get(*id)
                    .is_some_and(|e| e.iter().any(|e| e["stage"] == "ResponseComplete"))
            });
            if complete {
                return by_id;
            }
            assert!(
                Instant::now() < deadline,
                "the log never completed {ids:?}: {by_id:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn read_log(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

fn audit_id(reply: &Reply) -> String {
    let id = reply
        .headers
        .get("audit-id")
        .and_then(|v| v.to_str().ok())
        .expect("every answer has an Audit-Id")
        .to_string();
    uuid_like(&id);
    id
}

fn uuid_like(id: &str) {
    let parts: Vec<&str> = id.split('-').collect();
    let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
    assert_eq!(lens, vec![8, 4, 4, 4, 12], "not a UUID: {id}");
}

/// The one event of `stage`, with the shape every event has.
fn stage<'a>(events: &'a [Value], stage: &str) -> &'a Value {
    let matching: Vec<&Value> = events.iter().filter(|e| e["stage"] == stage).collect();
    assert_eq!(matching.len(), 1, "one {stage} event in {events:#?}");
    let event = matching[0];
    assert_eq!(event["kind"], "Event");
    assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
    for field in ["requestReceivedTimestamp", "stageTimestamp"] {
        let text = event[field].as_str().expect(field);
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap_or_else(|e| panic!("{field} {text}: {e}"));
        let fraction = text.split('.').nth(1).expect("fraction");
        assert_eq!(fraction.len(), 7, "{field} {text}: microseconds and Z");
        assert!(text.ends_with('Z'), "{field} {text}");
    }
    event
}

fn secret() -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
           "data": {"password": SECRET_VALUE}})
}

#[tokio::test]
async fn the_log_follows_the_policy() {
    let f = Fixture::start().await;
    let admin = f.server.api();
    for ns in ["audited", "other"] {
        admin.namespace(ns).await;
    }
    admin
        .create(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/audited/rolebindings",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "testers-edit"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                    "subjects": [{"kind": "Group", "name": "testers"}]}),
        )
        .await;
    let bob = Some("bob-token");

    // Secrets: Metadata, without RequestReceived.
    let created_secret = f
        .send(
            bob,
            Method::POST,
            "/api/v1/namespaces/audited/secrets",
            Some(&secret()),
        )
        .await;
    assert_eq!(
        created_secret.status,
        StatusCode::CREATED,
        "{}",
        created_secret.text
    );
    let read_secret = f
        .send(
            bob,
            Method::GET,
            "/api/v1/namespaces/audited/secrets/db",
            None,
        )
        .await;
    assert_eq!(read_secret.status, StatusCode::OK);
    // VMs in `audited`: RequestResponse.
    let created_vm = f
        .send(
            bob,
            Method::POST,
            &coll("audited", "virtualmachines"),
            Some(&vm("vm1")),
        )
        .await;
    assert_eq!(
        created_vm.status,
        StatusCode::CREATED,
        "{}",
        created_vm.text
    );
    // Refused: bob may not create VMs in `other` (Request level, no body read).
    let refused = f
        .send(
            bob,
            Method::POST,
            &coll("other", "virtualmachines"),
            Some(&vm("vm2")),
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
    // The admin as bob: the policy sees the admin, the event names both.
    let impersonated = admin
        .send(
            Method::GET,
            &coll("audited", "virtualmachines"),
            &[
                ("Impersonate-User", "bob"),
                ("Impersonate-Group", "testers"),
            ],
            None,
        )
        .await;
    assert_eq!(impersonated.status, StatusCode::OK, "{}", impersonated.text);
    // Nobody: 401, still logged (Request level, no user).
    let unauthenticated = f.send(None, Method::GET, "/api", None).await;
    assert_eq!(unauthenticated.status, StatusCode::UNAUTHORIZED);
    // Health: level None.
    let health = f.send(None, Method::GET, "/healthz", None).await;
    assert_eq!(health.status, StatusCode::OK);
    // A watch: ResponseStarted, then ResponseComplete when it ends.
    let watch = f
        .send(
            bob,
            Method::GET,
            &format!(
                "{}?watch=true&timeoutSeconds=1",
                coll("audited", "virtualmachines")
            ),
            None,
        )
        .await;
    assert_eq!(watch.status, StatusCode::OK);

    let ids: Vec<String> = [
        &created_secret,
        &read_secret,
        &created_vm,
        &refused,
        &impersonated,
        &unauthenticated,
        &watch,
    ]
    .iter()
    .map(|r| audit_id(r))
    .collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let events = f.events(&id_refs);
    let of = |reply: &Reply| -> &[Value] { &events[&audit_id(reply)] };

    // Secrets at Metadata: who, what, the code and the decision; no bodies.
    let secret_events = of(&created_secret);
    assert!(
        secret_events
            .iter()
            .all(|e| e["stage"] != "RequestReceived"),
        "omitted stage"
    );
    let e = stage(secret_events, "ResponseComplete");
    assert_eq!(e["level"], "Metadata");
    assert_eq!(e["verb"], "create");
    assert_eq!(e["requestURI"], "/api/v1/namespaces/audited/secrets");
    assert_eq!(
        e["user"],
        json!({"username": "bob", "uid": "uid-bob", "groups": ["testers", "system:authenticated"]})
    );
    assert_eq!(e["sourceIPs"], json!(["127.0.0.1"]));
    assert_eq!(e["userAgent"], "audit-test/1.0");
    assert_eq!(
        e["objectRef"],
        json!({"resource": "secrets", "namespace": "audited", "name": "db", "apiVersion": "v1"})
    );
    assert_eq!(e["responseStatus"], json!({"metadata": {}, "code": 201}));
    assert!(
        e.get("requestObject").is_none() && e.get("responseObject").is_none(),
        "{e}"
    );
    assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "allow");
    let reason = e["annotations"]["authorization.k8s.io/reason"]
        .as_str()
        .unwrap_or("");
    assert!(
        reason.starts_with("RBAC: allowed by RoleBinding \"testers-edit/audited\""),
        "{reason}"
    );
    let e = stage(of(&read_secret), "ResponseComplete");
    assert_eq!(
        (e["level"].as_str(), e["verb"].as_str()),
        (Some("Metadata"), Some("get"))
    );
    assert!(e.get("responseObject").is_none(), "{e}");
    let text = std::fs::read_to_string(&f.log).expect("log");
    assert!(
        !text.contains(SECRET_VALUE),
        "a Secret's data is in the audit log"
    );

    // VMs in `audited` at RequestResponse: both bodies, managedFields omitted.
    let vm_events = of(&created_vm);
    let received = stage(vm_events, "RequestReceived");
    assert!(received.get("responseStatus").is_none() && received.get("annotations").is_none());
    let e = stage(vm_events, "ResponseComplete");
    assert_eq!(e["level"], "RequestResponse");
    assert_eq!(
        e["objectRef"],
        json!({"resource": "virtualmachines", "namespace": "audited", "name": "vm1",
               "apiGroup": "kubevirt.io", "apiVersion": "v1"})
    );
    assert_eq!(e["requestObject"], vm("vm1"));
    assert_eq!(
        e["responseObject"]["metadata"]["uid"],
        created_vm.body["metadata"]["uid"]
    );
    assert!(created_vm.body["metadata"].get("managedFields").is_some());
    assert!(
        e["responseObject"]["metadata"]
            .get("managedFields")
            .is_none(),
        "omitManagedFields"
    );
    assert_eq!(e["responseStatus"]["code"], 201);
    assert_eq!(
        received["requestReceivedTimestamp"],
        e["requestReceivedTimestamp"]
    );

    // The refusal: forbid, the whole 403 Status, no body (never read).
    let e = stage(of(&refused), "ResponseComplete");
    assert_eq!(e["level"], "Request");
    assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "forbid");
    let mut status = refused.body.clone();
    if let Some(o) = status.as_object_mut() {
        o.remove("kind");
        o.remove("apiVersion");
    }
    assert_eq!(e["responseStatus"], status);
    assert_eq!(e["responseStatus"]["reason"], "Forbidden");
    assert!(e.get("requestObject").is_none(), "{e}");

    // Impersonation: the admin is the user, bob the impersonated user.
    let imp_events = of(&impersonated);
    let e = stage(imp_events, "ResponseComplete");
    assert_eq!(
        e["level"], "RequestResponse",
        "the policy sees the authenticated user"
    );
    assert!(
        e["user"]["groups"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("system:masters"))),
        "{e}"
    );
    assert_eq!(
        e["impersonatedUser"],
        json!({"username": "bob", "groups": ["testers", "system:authenticated"]})
    );
    assert!(stage(imp_events, "RequestReceived")
        .get("impersonatedUser")
        .is_none());
    assert_eq!(e["verb"], "list");
    assert_eq!(e["responseObject"]["kind"], "VirtualMachineList");

    // Nobody: no user, the 401.
    let e = stage(of(&unauthenticated), "ResponseComplete");
    assert_eq!(e["user"], json!({}));
    assert_eq!(
        (e["verb"].as_str(), e["responseStatus"]["code"].as_u64()),
        (Some("get"), Some(401))
    );
    assert!(e.get("objectRef").is_none());

    // The watch: started and complete, no response body.
    let watch_events = of(&watch);
    let started = stage(watch_events, "ResponseStarted");
    let e = stage(watch_events, "ResponseComplete");
    assert_eq!(
        (started["verb"].as_str(), e["verb"].as_str()),
        (Some("watch"), Some("watch"))
    );
    assert!(e.get("responseObject").is_none());

    // Health and the controllers: nothing.
    let all = read_log(&f.log);
    assert!(
        all.iter().all(|e| e["requestURI"] != "/healthz"),
        "health was logged"
    );
    assert!(
        all.iter().all(|e| !e["user"]["groups"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("system:virtplane-components")))),
        "the controllers' requests were logged"
    );
    assert!(!all.iter().any(|e| e["auditID"] == audit_id(&health)));
}

#[tokio::test]
async fn a_bad_policy_stops_the_server_with_one_clear_line() {
    let files = tempfile::tempdir().expect("temp dir");
    let policy = files.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n",
    )
    .expect("policy");
    let log = files.path().join("audit.log");
    let run = |args: &[&str]| {
        std::process::Command::new(binary())
            .arg("server")
            .arg("--data-dir")
            .arg(files.path().join("data"))
            .args(["--listen", "127.0.0.1:0", "--no-node"])
            .args(args)
            .output()
            .expect("run virtplane")
    };
    let out = run(&[
        "--audit-log",
        log.to_str().expect("path"),
        "--audit-policy",
        policy.to_str().expect("path"),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("policy.yaml: rules[0]: unknown variant `Everything`, expected one of `None`, `Metadata`, `Request`, `RequestResponse`"),
        "{stderr}"
    );
    // A log without a policy: kube logs nothing then; say so instead of starting.
    let out = run(&["--audit-log", log.to_str().expect("path")]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs --audit-policy FILE"), "{stderr}");
    assert!(!log.exists(), "nothing written");
}
