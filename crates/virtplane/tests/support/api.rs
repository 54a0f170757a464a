//! A handle on a server for one test: its HTTPS clients (admin and anonymous), requests,
//! and waiting on objects.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::{
    admin_kubeconfig, coll, install_crypto, item, kubeconfig_field, namespace, user_token, Next,
    Reply, Watch, NAMESPACES, VM_FINALIZER,
};

/// A handle on a server with its own HTTPS clients (clients are bound to the runtime of
/// the test that built them, so every test builds its own).
pub struct Api {
    pub url: String,
    pub client: reqwest::Client,
    /// A client that presents no credentials.
    pub anonymous: reqwest::Client,
    pub data_dir: PathBuf,
}

impl Api {
    pub fn connect(url: &str, dir: &Path) -> Api {
        install_crypto();
        let kubeconfig = admin_kubeconfig(dir).expect("admin.kubeconfig");
        let ca = kubeconfig_field(&kubeconfig, "certificate-authority-data").expect("CA");
        let cert = kubeconfig_field(&kubeconfig, "client-certificate-data").expect("client cert");
        let key = kubeconfig_field(&kubeconfig, "client-key-data").expect("client key");
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
        user_token(&self.data_dir, user).unwrap_or_else(|e| panic!("{e:#}"))
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
        Reply::read(builder.send().await.expect("request")).await
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
        self.send_json(Method::POST, path, body).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.send_json(Method::PUT, path, body).await
    }

    async fn send_json(&self, method: Method, path: &str, body: &Value) -> Reply {
        let bytes = serde_json::to_vec(body).unwrap();
        self.request(method, path, "application/json", Some(bytes))
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
