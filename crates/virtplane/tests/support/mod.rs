//! Helpers shared by the API test files: one server per test binary (killed at exit),
//! a per-test HTTPS client, object builders, Status assertions and a watch reader.
#![allow(dead_code)]

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::{self, Reply, TestServer};

pub const KUBEVIRT: &str = "/apis/kubevirt.io/v1";
pub const NAMESPACES: &str = "/api/v1/namespaces";
/// The finalizer KubeVirt's VM controller keeps on every VM.
pub const VM_FINALIZER: &str = "kubevirt.io/virtualMachineControllerFinalize";

static SHARED: OnceLock<Mutex<TestServer>> = OnceLock::new();

extern "C" {
    fn atexit(callback: extern "C" fn()) -> i32;
}

/// Statics are never dropped: kill the shared server and remove its data dir when the
/// test binary exits.
extern "C" fn stop_shared() {
    if let Some(server) = SHARED.get() {
        if let Ok(mut server) = server.lock() {
            server.kill9();
            let _ = std::fs::remove_dir_all(server.data_dir());
        }
    }
}

/// A handle on a server with its own HTTPS clients (clients are bound to the runtime of
/// the test that built them, so every test builds its own).
pub struct Api {
    pub url: String,
    pub client: reqwest::Client,
    pub anonymous: reqwest::Client,
    pub data_dir: std::path::PathBuf,
}

/// The server shared by every test of this binary, started on first use.
pub async fn api() -> Api {
    let shared = SHARED.get_or_init(|| {
        let server = std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(TestServer::start())
        })
        .join()
        .expect("server start");
        // SAFETY: registering a plain function with the C runtime.
        unsafe {
            atexit(stop_shared);
        }
        Mutex::new(server)
    });
    let (url, dir) = {
        let server = shared.lock().unwrap_or_else(|e| e.into_inner());
        (server.url.clone(), server.data_dir().to_path_buf())
    };
    Api::connect(&url, &dir)
}

/// An `Api` on a server a test owns.
pub fn api_for(server: &TestServer) -> Api {
    Api::connect(&server.url, server.data_dir())
}

impl Api {
    pub fn connect(url: &str, dir: &std::path::Path) -> Api {
        common::install_crypto();
        let kubeconfig =
            std::fs::read_to_string(dir.join("admin.kubeconfig")).expect("admin.kubeconfig");
        let ca = common::kubeconfig_field(&kubeconfig, "certificate-authority-data").expect("CA");
        let cert =
            common::kubeconfig_field(&kubeconfig, "client-certificate-data").expect("client cert");
        let key = common::kubeconfig_field(&kubeconfig, "client-key-data").expect("client key");
        let ca = reqwest::Certificate::from_pem(&ca).expect("CA PEM");
        let mut identity = cert;
        identity.extend_from_slice(&key);
        let identity = reqwest::Identity::from_pem(&identity).expect("identity PEM");
        let client = reqwest::Client::builder()
            .tls_certs_only([ca.clone()])
            .identity(identity)
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let anonymous = reqwest::Client::builder()
            .tls_certs_only([ca])
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        Api {
            url: url.to_string(),
            client,
            anonymous,
            data_dir: dir.to_path_buf(),
        }
    }

    pub fn token(&self, user: &str) -> String {
        let tokens: Value = serde_json::from_slice(
            &std::fs::read(self.data_dir.join("pki/tokens.json")).expect("tokens"),
        )
        .expect("json");
        tokens
            .as_object()
            .and_then(|m| m.iter().find(|(_, u)| u["user"] == user))
            .map(|(t, _)| t.clone())
            .expect("token for user")
    }

    /// Any request; `headers` are added as given.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Reply {
        let mut builder = self.client.request(method, format!("{}{path}", self.url));
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        if let Some(body) = body {
            builder = builder.body(body);
        }
        TestServer::reply(builder.send().await.expect("request")).await
    }

    pub async fn request(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Option<Vec<u8>>,
    ) -> Reply {
        match body {
            Some(body) => {
                self.send(method, path, &[("content-type", content_type)], Some(body))
                    .await
            }
            None => self.send(method, path, &[], None).await,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.request(Method::GET, path, "", None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.request(
            Method::POST,
            path,
            "application/json",
            Some(serde_json::to_vec(body).unwrap()),
        )
        .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.request(
            Method::PUT,
            path,
            "application/json",
            Some(serde_json::to_vec(body).unwrap()),
        )
        .await
    }

    pub async fn patch(&self, path: &str, content_type: &str, body: &str) -> Reply {
        self.request(
            Method::PATCH,
            path,
            content_type,
            Some(body.as_bytes().to_vec()),
        )
        .await
    }

    pub async fn merge(&self, path: &str, body: &Value) -> Reply {
        self.patch(path, "application/merge-patch+json", &body.to_string())
            .await
    }

    pub async fn delete(&self, path: &str, body: Option<&Value>) -> Reply {
        self.request(
            Method::DELETE,
            path,
            "application/json",
            body.map(|b| serde_json::to_vec(b).unwrap()),
        )
        .await
    }

    /// Creates a namespace and checks it worked.
    pub async fn namespace(&self, name: &str) {
        let r = self.post(NAMESPACES, &namespace(name)).await;
        assert_eq!(
            r.status,
            StatusCode::CREATED,
            "create namespace {name}: {}",
            r.text
        );
    }

    /// POSTs and expects 201; returns the created object.
    pub async fn create(&self, collection: &str, body: &Value) -> Value {
        let r = self.post(collection, body).await;
        assert_eq!(
            r.status,
            StatusCode::CREATED,
            "create in {collection}: {}",
            r.text
        );
        r.body
    }

    pub async fn watch(&self, path: &str) -> Watch {
        Watch::open(&self.client, &format!("{}{path}", self.url)).await
    }

    /// Waits until controllers have stopped changing the object at `path` (no watch event
    /// for half a second after `ready` holds), then returns it as stored. Controllers act
    /// on VMs and VMIs as KubeVirt's do (finalizers, status); tests that compare whole
    /// objects or resourceVersions start from a settled object.
    pub async fn settle_until(&self, path: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let (collection, name) = path.rsplit_once('/').expect("object path");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut current = self.get(path).await;
        assert_eq!(
            current.status,
            StatusCode::OK,
            "settle {path}: {}",
            current.text
        );
        while !ready(&current.body) {
            assert!(
                Instant::now() < deadline,
                "{path} never became ready: {}",
                current.text
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
            current = self.get(path).await;
        }
        let rv = current.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("0")
            .to_string();
        let mut watch = self
            .watch(&format!(
                "{collection}?watch=true&fieldSelector=metadata.name%3D{name}&resourceVersion={rv}"
            ))
            .await;
        loop {
            assert!(Instant::now() < deadline, "{path} never settled");
            match watch.poll(Duration::from_millis(500)).await {
                Next::Timeout | Next::End => break,
                Next::Event(_) => {}
            }
        }
        let r = self.get(path).await;
        assert_eq!(r.status, StatusCode::OK, "settle {path}: {}", r.text);
        r.body
    }

    pub async fn settle(&self, path: &str) -> Value {
        self.settle_until(path, |_| true).await
    }

    /// Creates a VM and waits for the VM controller to have added its finalizer and status.
    pub async fn settled_vm(&self, ns: &str, body: &Value) -> Value {
        let name = body["metadata"]["name"].as_str().expect("name").to_string();
        self.create(&coll(ns, "virtualmachines"), body).await;
        self.settle_until(&item(ns, "virtualmachines", &name), |vm| {
            vm["status"]["printableStatus"].is_string()
                && vm["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f == VM_FINALIZER))
        })
        .await
    }

    /// GET, change, PUT — again on a 409 from a concurrent controller write (as clients
    /// do); for tests about what a PUT does rather than about optimistic concurrency.
    pub async fn put_fresh(&self, path: &str, change: impl Fn(&mut Value)) -> Reply {
        for _ in 0..10 {
            let mut obj = self.get(path).await.body;
            change(&mut obj);
            let r = self.put(path, &obj).await;
            if r.status != StatusCode::CONFLICT {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("PUT {path} kept conflicting");
    }

    /// Polls `path` until `done` holds for the reply, or panics after `within`.
    pub async fn eventually(
        &self,
        path: &str,
        within: Duration,
        done: impl Fn(&Reply) -> bool,
    ) -> Reply {
        let deadline = Instant::now() + within;
        loop {
            let r = self.get(path).await;
            if done(&r) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "condition on {path} never held; last: {} {}",
                r.status,
                r.text
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `/apis/kubevirt.io/v1/namespaces/<ns>/<plural>`
pub fn coll(ns: &str, plural: &str) -> String {
    format!("{KUBEVIRT}/namespaces/{ns}/{plural}")
}

/// `/apis/kubevirt.io/v1/namespaces/<ns>/<plural>/<name>`
pub fn item(ns: &str, plural: &str, name: &str) -> String {
    format!("{KUBEVIRT}/namespaces/{ns}/{plural}/{name}")
}

pub fn vm(name: &str) -> Value {
    common::vm(name)
}

/// A small valid VirtualMachineInstance.
pub fn vmi(name: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "labels": {"app": "demo"}},
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                "memory": {"guest": "128Mi"}
            },
            "volumes": [{"name": "root", "containerDisk": {"image": "registry.local/guest:1"}}]
        }
    })
}

/// A VirtualMachineInstanceMigration of `vmi`.
pub fn vmim(name: &str, vmi: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name},
        "spec": {"vmiName": vmi}
    })
}

pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// metadata.resourceVersion as a number (it is a decimal string).
pub fn rv(obj: &Value) -> i64 {
    let text = obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no resourceVersion string in {obj}"));
    text.parse()
        .unwrap_or_else(|_| panic!("resourceVersion {text:?} is not decimal"))
}

pub fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Checks the common shape of a failure Status and its code, reason and message.
pub fn assert_status(reply: &Reply, code: u16, reason: &str, message: &str) {
    assert_eq!(
        reply.status.as_u16(),
        code,
        "HTTP code; body: {}",
        reply.text
    );
    let body = &reply.body;
    assert_eq!(body["kind"], "Status", "{}", reply.text);
    assert_eq!(body["apiVersion"], "v1", "{}", reply.text);
    assert_eq!(body["metadata"], json!({}), "{}", reply.text);
    assert_eq!(body["status"], "Failure", "{}", reply.text);
    assert_eq!(body["code"], json!(code), "{}", reply.text);
    assert_eq!(body["reason"], reason, "{}", reply.text);
    assert_eq!(body["message"], message, "{}", reply.text);
    let ct = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(ct.starts_with("application/json"), "content-type {ct}");
}

/// The whole Status body, for exact comparisons.
pub fn assert_status_body(reply: &Reply, expected: Value) {
    let code = expected["code"].as_u64().expect("code in expected") as u16;
    assert_eq!(
        reply.status.as_u16(),
        code,
        "HTTP code; body: {}",
        reply.text
    );
    assert_eq!(
        reply.body, expected,
        "\n got: {}\nwant: {}",
        reply.text, expected
    );
}

/// `details.causes` as (reason, field, message) triples.
pub fn causes(reply: &Reply) -> Vec<(String, String, String)> {
    reply.body["details"]["causes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["reason"].as_str().unwrap_or("").to_string(),
                        c["field"].as_str().unwrap_or("").to_string(),
                        c["message"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The `Warning` headers of a reply, decoded from `299 - "<text>"`.
pub fn warnings(reply: &Reply) -> Vec<String> {
    reply
        .headers
        .get_all("warning")
        .iter()
        .map(|v| {
            let raw = v.to_str().expect("ascii warning");
            let text = raw
                .strip_prefix("299 - ")
                .unwrap_or_else(|| panic!("warning {raw:?} lacks 299 - "));
            serde_json::from_str::<String>(text)
                .unwrap_or_else(|_| panic!("warning text {text:?} is not quoted"))
        })
        .collect()
}

/// A watch response read line by line.
pub struct Watch {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    response: reqwest::Response,
    buf: Vec<u8>,
    ended: bool,
}

pub enum Next {
    Event(Value),
    End,
    Timeout,
}

impl Watch {
    pub async fn open(client: &reqwest::Client, url: &str) -> Watch {
        // Watches may outlive the client's default request timeout.
        let response = client
            .get(url)
            .timeout(Duration::from_secs(600))
            .send()
            .await
            .expect("watch request");
        Watch {
            status: response.status(),
            headers: response.headers().clone(),
            response,
            buf: Vec::new(),
            ended: false,
        }
    }

    /// The next event, the end of the stream, or a timeout.
    pub async fn poll(&mut self, within: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let text = String::from_utf8_lossy(&line[..line.len() - 1]).to_string();
                let event: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("watch line {text:?} is not JSON: {e}"));
                return Next::Event(event);
            }
            if self.ended {
                assert!(
                    self.buf.is_empty(),
                    "watch ended inside a line: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return Next::End;
            }
            match tokio::time::timeout_at(deadline, self.response.chunk()).await {
                Err(_) => return Next::Timeout,
                Ok(Ok(Some(chunk))) => self.buf.extend_from_slice(&chunk),
                Ok(Ok(None)) => self.ended = true,
                Ok(Err(e)) => panic!("watch stream failed: {e}"),
            }
        }
    }

    /// The next event; panics on end or timeout.
    pub async fn next(&mut self) -> Value {
        match self.poll(Duration::from_secs(10)).await {
            Next::Event(e) => e,
            Next::End => panic!("watch ended while an event was expected"),
            Next::Timeout => panic!("no watch event within 10s"),
        }
    }

    /// The next event, which must be `kind` for object `name`.
    pub async fn expect(&mut self, kind: &str, name: &str) -> Value {
        let event = self.next().await;
        assert_eq!(event["type"], kind, "event {event}");
        assert_eq!(event["object"]["metadata"]["name"], name, "event {event}");
        event
    }

    /// Skips events until one satisfies `pred`.
    pub async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.poll(left).await {
                Next::Event(e) if pred(&e) => return e,
                Next::Event(_) => {}
                Next::End => panic!("watch ended before the expected event"),
                Next::Timeout => panic!("expected watch event never came"),
            }
        }
    }

    /// Asserts that nothing arrives for `quiet`.
    pub async fn assert_quiet(&mut self, quiet: Duration) {
        match self.poll(quiet).await {
            Next::Timeout => {}
            Next::Event(e) => panic!("unexpected watch event {e}"),
            Next::End => panic!("watch ended unexpectedly"),
        }
    }

    /// Reads until the server closes the stream (within `within`), returning the events.
    pub async fn drain(&mut self, within: Duration) -> Vec<Value> {
        let deadline = Instant::now() + within;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.poll(left).await {
                Next::Event(e) => out.push(e),
                Next::End => return out,
                Next::Timeout => panic!("watch not closed within {within:?}; got {out:?}"),
            }
        }
    }
}
