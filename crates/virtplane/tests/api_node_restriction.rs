//! Node identities and what they may do, through the real server and two real
//! `virtplane node` processes that joined with the join token: each obtained its own
//! identity (`system:node:NAME`) through an auto-approved CertificateSigningRequest, and
//! with node-a's credentials a test touches node-b's Node and VMI, and the Secrets only
//! node-b's VMI uses, and is refused (kube's Node authorizer and NodeRestriction), while
//! node-a's own objects stay open to it and node-b's agent carries on.

mod support;

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

const NS: &str = "default";
const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

fn node_dir(server: &TestServer, name: &str) -> std::path::PathBuf {
    NodeProcess::data_dir(server, name)
}

/// An `Api` whose client presents the identity in a kubeconfig the agent wrote.
fn api_with_kubeconfig(admin: &Api, path: &Path) -> Api {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("node kubeconfig");
    let user = kubeconfig.auth_infos[0].auth_info.clone().expect("user");
    let decode = |s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("base64")
    };
    let mut identity = decode(&user.client_certificate_data.expect("certificate"));
    let key = user.client_key_data.expect("key");
    identity.extend(decode(secrecy::ExposeSecret::expose_secret(&key)));
    let ca = kubeconfig.clusters[0]
        .cluster
        .clone()
        .and_then(|c| c.certificate_authority_data)
        .expect("CA");
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&decode(&ca)).expect("CA PEM")])
        .identity(reqwest::Identity::from_pem(&identity).expect("identity"))
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    Api {
        url: admin.url.clone(),
        client,
        anonymous: admin.anonymous.clone(),
        data_dir: admin.data_dir.clone(),
    }
}

/// A VM pinned to `node` whose cloud-init user data is the Secret `secret`.
fn vm_on(name: &str, node: &str, secret: &str) -> Value {
    let mut body = vm(name);
    body["spec"]["runStrategy"] = json!("Always");
    body["spec"].as_object_mut().unwrap().remove("running");
    let spec = &mut body["spec"]["template"]["spec"];
    spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    spec["domain"]["devices"]["disks"] = json!([{"name": "ci", "disk": {"bus": "virtio"}}]);
    spec["volumes"] = json!([{"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": secret}}}]);
    body
}

fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
           "stringData": {"userdata": "#cloud-config\n"}})
}

fn assert_forbidden(reply: &Reply, message_part: &str) {
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    assert_eq!(reply.body["reason"], "Forbidden", "{}", reply.body);
    let message = reply.body["message"].as_str().unwrap_or("");
    assert!(
        message.contains(message_part),
        "{message:?} does not say {message_part:?}"
    );
}

async fn wait_running_on(api: &Api, name: &str, node: &str) {
    let path = item(NS, "virtualmachineinstances", name);
    api.eventually(&path, Duration::from_secs(60), |r| {
        r.body["status"]["phase"] == "Running" && r.body["status"]["nodeName"] == node
    })
    .await;
}

#[tokio::test]
async fn each_node_touches_only_its_own_node_vmis_and_what_they_use() {
    let server = TestServer::start_with(&["--no-node"]).await;
    let admin = server.api();
    let _a = NodeProcess::start(&server, "node-a");
    let _b = NodeProcess::start(&server, "node-b");
    for name in ["s-a", "s-b", "s-free"] {
        admin.create(SECRETS, &secret(name)).await;
    }
    admin
        .create(
            &coll(NS, "virtualmachines"),
            &vm_on("on-a", "node-a", "s-a"),
        )
        .await;
    admin
        .create(
            &coll(NS, "virtualmachines"),
            &vm_on("on-b", "node-b", "s-b"),
        )
        .await;
    // Both agents joined with the token alone, so each asked for and got its identity.
    wait_running_on(&admin, "on-a", "node-a").await;
    wait_running_on(&admin, "on-b", "node-b").await;
    let csrs = admin.get(CSRS).await.body;
    let requests = csrs["items"].as_array().expect("CSRs");
    assert_eq!(requests.len(), 2, "{csrs}");
    for csr in requests {
        assert_eq!(csr["spec"]["username"], "system:node-joiner", "{csr}");
        assert_eq!(
            csr["spec"]["signerName"],
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        assert!(condition(csr, "Approved").is_some(), "{csr}");
        assert!(csr["status"]["certificate"].as_str().is_some(), "{csr}");
    }

    let node_a = api_with_kubeconfig(
        &admin,
        &node_dir(&server, "node-a").join("node-node-a.kubeconfig"),
    );
    let who = node_a
        .post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await;
    assert_eq!(who.status, StatusCode::CREATED, "{}", who.body);
    assert_eq!(
        who.body["status"]["userInfo"]["username"],
        "system:node:node-a"
    );

    // Nodes: every Node may be read, only its own changed.
    assert_eq!(
        node_a.get("/api/v1/nodes/node-b").await.status,
        StatusCode::OK
    );
    let label = json!({"metadata": {"labels": {"owned": "yes"}}});
    let r = node_a.merge("/api/v1/nodes/node-b", &label).await;
    assert_forbidden(&r, "node 'node-a' cannot modify node 'node-b'");
    let r = node_a
        .merge(
            "/api/v1/nodes/node-b/status",
            &json!({"status": {"conditions": []}}),
        )
        .await;
    assert_forbidden(&r, "node 'node-a' cannot modify node 'node-b'");
    let r = node_a.delete("/api/v1/nodes/node-b", None).await;
    assert_forbidden(&r, "cannot delete resource \"nodes\"");
    let r = node_a
        .post(
            "/api/v1/nodes",
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-c"}}),
        )
        .await;
    assert_forbidden(
        &r,
        "node \"node-a\" is not allowed to modify node \"node-c\"",
    );
    let r = node_a.merge("/api/v1/nodes/node-a", &label).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    // VMIs (whose status is written with the object, as KubeVirt's): its own may be
    // read and written but for the spec and the binding; node-b's not even read.
    let on_a = item(NS, "virtualmachineinstances", "on-a");
    let on_b = item(NS, "virtualmachineinstances", "on-b");
    let r = node_a.get(&on_b).await;
    assert_forbidden(
        &r,
        "no relationship found between node 'node-a' and this object",
    );
    let r = node_a
        .merge(&on_b, &json!({"status": {"phase": "Failed"}}))
        .await;
    assert_forbidden(
        &r,
        "no relationship found between node 'node-a' and this object",
    );
    assert_eq!(node_a.get(&on_a).await.status, StatusCode::OK);
    let r = node_a
        .merge(
            &on_a,
            &json!({"metadata": {"annotations": {"seen-by": "node-a"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = node_a
        .merge(&on_a, &json!({"spec": {"domain": {"cpu": {"cores": 8}}}}))
        .await;
    assert_forbidden(&r, "may not change the spec of a virtualmachineinstance");
    let r = node_a
        .merge(&on_a, &json!({"status": {"nodeName": "node-b"}}))
        .await;
    assert_forbidden(&r, "may not bind a virtualmachineinstance to another node");
    let r = node_a.delete(&on_a, None).await;
    assert_forbidden(&r, "cannot delete resource \"virtualmachineinstances\"");

    // Lists and watches: of its own VMIs only, asked for by its node.
    let vmis = coll(NS, "virtualmachineinstances");
    let r = node_a
        .get("/apis/kubevirt.io/v1/virtualmachineinstances")
        .await;
    assert_forbidden(
        &r,
        "can only list/watch virtualmachineinstances with field selector status.nodeName=node-a",
    );
    let r = node_a
        .get(&format!("{vmis}?fieldSelector=status.nodeName%3Dnode-b"))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = node_a
        .get(&format!("{vmis}?fieldSelector=status.nodeName%3Dnode-a"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(names(&r.body), ["on-a"]);
    let r = node_a
        .get(&format!(
            "{vmis}?watch=true&timeoutSeconds=1&fieldSelector=status.nodeName%3Dnode-b"
        ))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);

    // Secrets: only what its VMIs use.
    let secrets = SECRETS.to_string();
    assert_eq!(
        node_a.get(&format!("{secrets}/s-a")).await.status,
        StatusCode::OK
    );
    for other in ["s-b", "s-free", "does-not-exist"] {
        let r = node_a.get(&format!("{secrets}/{other}")).await;
        assert_forbidden(
            &r,
            "no relationship found between node 'node-a' and this object",
        );
    }
    let r = node_a.get(&secrets).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    // Nothing its role does not give: VMs, service accounts, RBAC. (Namespaces it
    // reads: NetworkPolicies select by their labels, as Calico's node agent reads them.)
    for path in [
        coll(NS, "virtualmachines"),
        format!("/api/v1/namespaces/{NS}/serviceaccounts"),
        "/apis/rbac.authorization.k8s.io/v1/clusterroles".to_string(),
    ] {
        let r = node_a.get(&path).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}: {}", r.body);
    }

    // The join token asks for identities and does nothing else.
    let join = format!("Bearer {}", admin.token("system:node-joiner"));
    for path in ["/api/v1/nodes".to_string(), secrets.clone(), vmis.clone()] {
        let r = admin
            .anonymous
            .get(format!("{}{path}", admin.url))
            .header("authorization", &join)
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "join token: {path}");
    }

    // node-b's agent is unharmed: its guest still runs there, and it still heart-beats.
    wait_running_on(&admin, "on-b", "node-b").await;
    let b = admin.get("/api/v1/nodes/node-b").await.body;
    let ready = condition(&b, "Ready").expect("Ready");
    assert_eq!(ready["status"], "True", "{b}");
    assert!(b["metadata"]["labels"].get("owned").is_none());
}

#[tokio::test]
async fn a_certificate_request_is_checked_and_its_requester_is_the_creator() {
    let server = TestServer::start().await;
    let admin = server.api();
    let key = rcgen::KeyPair::generate().unwrap();
    let request = |cn: &str, org: &str| {
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, org);
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        base64::engine::general_purpose::STANDARD.encode(pem)
    };
    let csr = |name: &str, request: String| {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": name},
               "spec": {"request": request, "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "usages": ["digital signature", "client auth"],
                        "username": "someone-else", "groups": ["system:masters"]}})
    };
    // Malformed requests are 422 with the field.
    let mut bad = csr("bad", "bm90IGEgcmVxdWVzdA==".into());
    bad["spec"]["usages"] = json!(["flying"]);
    let r = admin.post(CSRS, &bad).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    let fields: Vec<String> = causes(&r).into_iter().map(|(_, f, _)| f).collect();
    assert_eq!(fields, ["spec.request", "spec.usages[0]"], "{}", r.body);

    // The requester is who created it, and the token's request for a subject that is no
    // node (an administrator's name in system:masters) is never approved, while a node's is.
    let join = format!("Bearer {}", admin.token("system:node-joiner"));
    let post = |body: Value| {
        let (client, url, join) = (
            admin.anonymous.clone(),
            format!("{}{CSRS}", admin.url),
            join.clone(),
        );
        async move {
            let r = client
                .post(url)
                .header("authorization", join)
                .json(&body)
                .send()
                .await
                .expect("request");
            Reply::read(r).await
        }
    };
    let r = post(csr("not-a-node", request("admin", "system:masters"))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["spec"]["username"], "system:node-joiner");
    assert_eq!(
        r.body["spec"]["groups"],
        json!(["system:bootstrappers", "system:authenticated"])
    );
    let r = post(csr("a-node", request("system:node:edge", "system:nodes"))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let issued = admin
        .settle_until(&format!("{CSRS}/a-node"), |csr| {
            csr["status"]["certificate"].as_str().is_some()
        })
        .await;
    assert!(condition(&issued, "Approved").is_some(), "{issued}");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(issued["status"]["certificate"].as_str().unwrap())
        .unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).expect("PEM");
    let cert = pem.parse_x509().expect("certificate");
    assert_eq!(
        cert.subject().to_string(),
        "CN=system:node:edge, O=system:nodes"
    );
    let pending = admin.get(&format!("{CSRS}/not-a-node")).await.body;
    assert!(pending["status"].get("certificate").is_none(), "{pending}");
    assert!(condition(&pending, "Approved").is_none(), "{pending}");
    // kubectl's table says where each stands.
    let table = admin
        .send(
            reqwest::Method::GET,
            CSRS,
            &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
            None,
        )
        .await
        .body;
    let rows: Vec<(String, String)> = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["cells"][0].as_str().unwrap().to_string(),
                r["cells"][5].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        rows.contains(&("a-node".into(), "Approved,Issued".into())),
        "{rows:?}"
    );
    assert!(
        rows.contains(&("not-a-node".into(), "Pending".into())),
        "{rows:?}"
    );
}
