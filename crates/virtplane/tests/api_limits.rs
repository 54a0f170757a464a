//! kube-apiserver's limits through the real server: in-flight budgets with 429 and
//! Retry-After, fair between users (a flood from one user leaves another unharmed and
//! loses no acknowledged write), watches per user, the request timeout (504), slow
//! clients, and the body, object and cloud-init sizes.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKENS: &str = "bob-token,bob,uid-bob,\"testers\"\ndave-token,dave,uid-dave,\"testers\"\n";
const NS: &str = "limits";
const CONFIGMAPS: &str = "/api/v1/namespaces/limits/configmaps";

/// A server started with `args`, namespace `limits` in which group `testers` (token
/// users bob and dave) may edit.
struct Fixture {
    server: TestServer,
    _tokens: tempfile::TempDir,
    /// A client presenting no certificate (token users send their bearer token).
    plain: reqwest::Client,
}

impl Fixture {
    async fn start(args: &[&str]) -> Fixture {
        let tokens = tempfile::tempdir().expect("temp dir");
        let file = tokens.path().join("tokens.csv");
        std::fs::write(&file, TOKENS).expect("token file");
        let mut all = vec![
            "--no-node",
            "--token-auth-file",
            file.to_str().expect("path"),
        ];
        all.extend_from_slice(args);
        let server = TestServer::start_with(&all).await;
        let api = server.api();
        api.namespace(NS).await;
        api.create(
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "testers-edit"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                    "subjects": [{"kind": "Group", "name": "testers"}]}),
        )
        .await;
        let kubeconfig = admin_kubeconfig(server.data_dir()).expect("admin kubeconfig");
        let ca = kubeconfig_field(&kubeconfig, "certificate-authority-data").expect("CA");
        let plain = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&ca).expect("CA PEM")])
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        Fixture {
            server,
            _tokens: tokens,
            plain,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url)
    }

    fn request(&self, token: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.plain
            .request(method, self.url(path))
            .bearer_auth(token)
    }

    async fn create(&self, token: &str, obj: &Value) -> Reply {
        let request = self
            .request(token, Method::POST, CONFIGMAPS)
            .header("content-type", "application/json")
            .body(obj.to_string());
        Reply::read(request.send().await.expect("create")).await
    }

    /// A create whose body arrives only when the returned sender sends it (or never):
    /// it holds its place in flight until then.
    fn held_create(
        &self,
        token: &str,
        name: &str,
    ) -> (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<Reply>,
    ) {
        let body = configmap(name).to_string().into_bytes();
        let (head, tail) = body.split_at(10);
        let (head, tail) = (head.to_vec(), tail.to_vec());
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(head) }).chain(
            futures::stream::once(async move {
                let _ = released.await;
                Ok::<_, std::io::Error>(tail)
            }),
        );
        let request = self
            .request(token, Method::POST, CONFIGMAPS)
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(stream));
        let task =
            tokio::spawn(async move { Reply::read(request.send().await.expect("held")).await });
        (release, task)
    }

    async fn names(&self) -> BTreeSet<String> {
        let list = self.server.api().get(CONFIGMAPS).await;
        assert_eq!(list.status, StatusCode::OK, "{}", list.text);
        names(&list.body)
            .into_iter()
            .filter(|n| n != "kube-root-ca.crt")
            .collect()
    }
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// kube's 429: the Status, and `Retry-After: 1`.
fn assert_too_many(reply: &Reply, message: &str) {
    assert_status_body(
        reply,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": "TooManyRequests",
               "details": {"retryAfterSeconds": 1}, "code": 429}),
    );
    assert_eq!(
        reply
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1"),
        "Retry-After"
    );
}

const TOO_MANY: &str = "Too many requests, please try again later.";

/// Creates `name` as a client-go client would: again after a 429, when Retry-After says.
async fn create_with_retries(f: &Fixture, token: &str, name: &str) -> (Reply, usize) {
    let mut refusals = 0;
    loop {
        let reply = f.create(token, &configmap(name)).await;
        if reply.status != StatusCode::TOO_MANY_REQUESTS || refusals == 100 {
            return (reply, refusals);
        }
        refusals += 1;
        let wait = reply
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .expect("a 429 says when to retry");
        // client-go waits Retry-After seconds; a tenth of it keeps the test short.
        tokio::time::sleep(Duration::from_millis(wait * 100)).await;
    }
}

#[tokio::test]
async fn over_its_share_a_user_gets_kubes_429_while_another_user_gets_in() {
    // Two mutating slots: each user's share is one.
    let f = Fixture::start(&["--max-mutating-requests-inflight", "2"]).await;
    // Once the held create is in flight, bob's share is taken. (It is itself refused
    // if it arrives while one of bob's probes is in flight: then it is sent again.)
    let mut attempt = 0;
    let (release, held, refused) = 'held: loop {
        let (release, held) = f.held_create("bob-token", "held");
        loop {
            attempt += 1;
            assert!(attempt < 500, "bob was never refused with his create held");
            let reply = f
                .create("bob-token", &configmap(&format!("early-{attempt}")))
                .await;
            if reply.status == StatusCode::TOO_MANY_REQUESTS {
                break 'held (release, held, reply);
            }
            assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
            if held.is_finished() {
                let reply = held.await.expect("held task");
                assert_too_many(&reply, TOO_MANY);
                continue 'held;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert_too_many(&refused, TOO_MANY);
    let refused_name = format!("early-{attempt}");
    // dave still gets in (a retry only if a controller briefly held the other slot).
    let (reply, _) = create_with_retries(&f, "dave-token", "dave-1").await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    // Reads have their own budget.
    let read = f.request("bob-token", Method::GET, CONFIGMAPS).send().await;
    assert_eq!(read.expect("list").status(), StatusCode::OK);
    // The admin (system:masters) is never refused.
    let admin = f.server.api();
    for i in 0..5 {
        admin
            .create(CONFIGMAPS, &configmap(&format!("admin-{i}")))
            .await;
    }
    let again = f.create("bob-token", &configmap("late")).await;
    assert_too_many(&again, TOO_MANY);
    release.send(()).expect("held request still open");
    let held = held.await.expect("held task");
    assert_eq!(held.status, StatusCode::CREATED, "{}", held.text);
    let names = f.names().await;
    assert!(
        names.contains("held") && names.contains("dave-1"),
        "{names:?}"
    );
    assert!(
        !names.contains(&refused_name) && !names.contains("late"),
        "a refused create was stored: {names:?}"
    );
}

#[tokio::test]
async fn a_flood_from_one_user_leaves_another_unharmed_and_loses_nothing() {
    let f = Arc::new(
        Fixture::start(&[
            "--max-mutating-requests-inflight",
            "2",
            "--max-requests-inflight",
            "4",
        ])
        .await,
    );
    let flood = {
        let f = f.clone();
        tokio::spawn(async move {
            let results = futures::stream::iter(0..300)
                .map(|i| {
                    let f = f.clone();
                    async move {
                        let name = format!("flood-{i}");
                        let reply = f.create("bob-token", &configmap(&name)).await;
                        (name, reply.status, reply.text)
                    }
                })
                .buffer_unordered(32)
                .collect::<Vec<_>>()
                .await;
            results
        })
    };
    let mut dave_refusals = 0;
    for i in 0..20 {
        let name = format!("dave-{i}");
        let (reply, refusals) = create_with_retries(&f, "dave-token", &name).await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "dave's create {name}: {}",
            reply.text
        );
        dave_refusals += refusals;
        let read = f.request("dave-token", Method::GET, &format!("{CONFIGMAPS}/{name}"));
        let read = Reply::read(read.send().await.expect("get")).await;
        assert_eq!(
            read.status,
            StatusCode::OK,
            "dave reads back {name}: {}",
            read.text
        );
    }
    let results = flood.await.expect("flood");
    let mut acknowledged = BTreeSet::new();
    let mut refused = BTreeSet::new();
    for (name, status, text) in &results {
        match *status {
            StatusCode::CREATED => {
                acknowledged.insert(name.clone());
            }
            StatusCode::TOO_MANY_REQUESTS => {
                refused.insert(name.clone());
            }
            other => panic!("flood create {name}: {other} {text}"),
        }
    }
    assert!(
        !refused.is_empty(),
        "300 creates, 32 at a time, over a share of one: none refused"
    );
    let stored = f.names().await;
    let daves: BTreeSet<String> = (0..20).map(|i| format!("dave-{i}")).collect();
    let expected: BTreeSet<String> = acknowledged.union(&daves).cloned().collect();
    assert_eq!(
        stored, expected,
        "stored names are exactly the acknowledged creates"
    );
    eprintln!(
        "flood: {} created, {} refused; dave: 20 created after {dave_refusals} refusals",
        acknowledged.len(),
        refused.len()
    );
}

#[tokio::test]
async fn watches_are_counted_per_user() {
    let f = Fixture::start(&["--max-watches-per-user", "2"]).await;
    let watch_url = f.url(&format!("{}?watch=true", CONFIGMAPS));
    let open = |token: &'static str| {
        let request = f
            .plain
            .get(&watch_url)
            .bearer_auth(token)
            .timeout(Duration::from_secs(600));
        async move { request.send().await.expect("watch") }
    };
    let first = open("bob-token").await;
    let second = open("bob-token").await;
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let third = Reply::read(open("bob-token").await).await;
    assert_too_many(
        &third,
        "Too many requests: user \"bob\" already has 2 watches open, the most one user may (--max-watches-per-user); close one and try again",
    );
    let daves = open("dave-token").await;
    assert_eq!(daves.status(), StatusCode::OK, "dave's watches are his own");
    // The admin is not counted.
    let admin = f.server.api();
    let mut admin_watches = Vec::new();
    for _ in 0..3 {
        let w = admin.watch(&format!("{}?watch=true", CONFIGMAPS)).await;
        assert_eq!(w.status, StatusCode::OK);
        admin_watches.push(w);
    }
    // A watch the client closes gives its place back.
    drop(first);
    let mut attempts = 0;
    loop {
        let reply = open("bob-token").await;
        if reply.status() == StatusCode::OK {
            break;
        }
        attempts += 1;
        assert!(attempts < 200, "the closed watch never gave its place back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(second);
}

#[tokio::test]
async fn the_request_timeout_answers_504_and_spares_watches() {
    let f = Fixture::start(&["--request-timeout", "2s"]).await;
    let admin = f.server.api();
    let mut watch = admin
        .watch(&format!("{}?watch=true&resourceVersion=0", CONFIGMAPS))
        .await;
    // A create whose body never comes.
    let (_never, held) = f.held_create("bob-token", "never");
    let reply = held.await.expect("held task");
    assert_status_body(
        &reply,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Timeout: request did not complete within requested timeout - context deadline exceeded",
               "reason": "Timeout", "details": {}, "code": 504}),
    );
    assert!(!f.names().await.contains("never"));
    // The watch, open for longer than the timeout by now, still delivers.
    admin.create(CONFIGMAPS, &configmap("after")).await;
    let event = watch
        .until(|e| e["object"]["metadata"]["name"] == "after")
        .await;
    assert_eq!(event["type"], "ADDED");
}

/// A TLS connection to the server that has sent `bytes` and nothing more.
async fn raw_connection(
    f: &Fixture,
    bytes: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let kubeconfig = admin_kubeconfig(f.server.data_dir()).expect("admin kubeconfig");
    let ca = kubeconfig_field(&kubeconfig, "certificate-authority-data").expect("CA");
    let mut roots = rustls::RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.expect("CA cert")).expect("root");
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", f.server.port))
        .await
        .expect("connect");
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector.connect(name, tcp).await.expect("TLS");
    tls.write_all(bytes).await.expect("write");
    tls.flush().await.expect("flush");
    tls
}

#[tokio::test]
async fn slow_clients_do_not_hold_the_server() {
    let f = Fixture::start(&[]).await;
    // Many connections that never finish their headers, and some idle ones.
    let mut slow = Vec::new();
    for i in 0..64 {
        let partial = format!("GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Slow-{i}: ");
        slow.push(raw_connection(&f, partial.as_bytes()).await);
    }
    for _ in 0..16 {
        slow.push(raw_connection(&f, b"").await);
    }
    // Everyone else is served meanwhile.
    for i in 0..10 {
        let (reply, _) = create_with_retries(&f, "dave-token", &format!("served-{i}")).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    // The server ends the slow connections (kube-apiserver's 32 s header timeout).
    for mut conn in slow {
        let mut buf = [0u8; 1024];
        let ended = tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(
            ended.is_ok(),
            "a connection without headers was never closed"
        );
    }
}

#[tokio::test]
async fn bodies_objects_and_cloud_init_have_kubes_sizes() {
    let f = Fixture::start(&[]).await;
    let admin = f.server.api();
    // A body over 3 MiB.
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                     "data": {"k": "x".repeat(3 * 1024 * 1024)}});
    let reply = admin.post(CONFIGMAPS, &big).await;
    assert_status_body(
        &reply,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Request entity too large: limit is 3145728",
               "reason": "RequestEntityTooLarge", "code": 413}),
    );
    // A VM whose body fits but which is larger than the store takes (etcd's 1.5 MiB).
    let mut large_vm = vm("large");
    large_vm["spec"]["template"]["metadata"]["annotations"] =
        json!({"example.com/blob": "y".repeat(1600 * 1024)});
    let reply = admin.post(&coll(NS, "virtualmachines"), &large_vm).await;
    assert_eq!(
        reply.status.as_u16(),
        413,
        "{}",
        &reply.text[..reply.text.len().min(400)]
    );
    assert_eq!(reply.body["reason"], "RequestEntityTooLarge");
    let message = reply.body["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("Request entity too large: etcdserver: request is too large")
            && message.ends_with("the limit is 1572864)"),
        "{message}"
    );
    assert_eq!(
        admin
            .get(&item(NS, "virtualmachines", "large"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Inline cloud-init user data over KubeVirt's 2048 bytes.
    let mut cloud = vm("cloud");
    cloud["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
        .as_array_mut()
        .expect("disks")
        .push(json!({"name": "cloudinit", "disk": {"bus": "virtio"}}));
    cloud["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .expect("volumes")
        .push(json!({"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config\n".to_string() + &"a".repeat(2048)}}));
    let reply = admin.post(&coll(NS, "virtualmachines"), &cloud).await;
    assert_eq!(reply.status.as_u16(), 422, "{}", reply.text);
    let causes = reply.body["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        causes.iter().any(|c| c["field"] == "spec.template.spec.volumes[1].cloudInitNoCloud"
            && c["message"]
                == "spec.template.spec.volumes[1].cloudInitNoCloud userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data."),
        "{}",
        reply.text
    );
}
