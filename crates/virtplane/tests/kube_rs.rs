//! kube-rs as an unmodified client of the real binary over HTTPS, configured from the
//! admin kubeconfig the server writes: `Api<DynamicObject>` and a typed
//! `Api<VirtualMachine>` (list, get, create, merge/JSON/apply patches, delete), and a
//! `kube::runtime::watcher` that survives a 410 Gone by re-listing.

mod support;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::{Client, Config, Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use support::TestServer;

/// A hand-written typed VirtualMachine: the fields these tests use, the rest kept as JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct VirtualMachine {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: ObjectMeta,
    spec: VirtualMachineSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<VirtualMachineStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VirtualMachineSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run_strategy: Option<String>,
    template: Value,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VirtualMachineStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    printable_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ready: Option<bool>,
}

impl Resource for VirtualMachine {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "VirtualMachine".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "kubevirt.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "virtualmachines".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn typed_vm(name: &str, run_strategy: &str) -> VirtualMachine {
    let manifest = support::vm(name);
    VirtualMachine {
        api_version: "kubevirt.io/v1".into(),
        kind: "VirtualMachine".into(),
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("app".to_string(), "kube-rs".to_string())])),
            ..Default::default()
        },
        spec: VirtualMachineSpec {
            run_strategy: Some(run_strategy.into()),
            template: manifest["spec"]["template"].clone(),
        },
        status: None,
    }
}

async fn client_for(server: &TestServer) -> Client {
    support::install_crypto();
    let kubeconfig =
        Kubeconfig::read_from(server.data_dir().join("admin.kubeconfig")).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config from kubeconfig");
    assert_eq!(config.default_namespace, "default");
    Client::try_from(config).expect("client")
}

fn vm_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    )
}

async fn create_namespace(server: &TestServer, name: &str) {
    let reply = server
        .api()
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
        .await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
}

fn manager_ops(metadata: &ObjectMeta) -> Vec<(String, String)> {
    metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn kube_rs_dynamic_and_typed_apis() {
    let server = TestServer::start().await;
    let client = client_for(&server).await;

    // Discovery through kube's own client: the group and its resources.
    let discovery = kube::discovery::Discovery::new(client.clone())
        .filter(&["kubevirt.io"])
        .run()
        .await
        .expect("discovery");
    let (resource, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk(
            "kubevirt.io",
            "v1",
            "VirtualMachine",
        ))
        .expect("VirtualMachine discovered");
    assert_eq!(resource.plural, "virtualmachines");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    assert!(caps.supports_operation(kube::discovery::verbs::WATCH));

    // Every group, both discovery forms (legacy per group-version, and aggregated).
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine");
    let legacy = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .expect("legacy discovery");
    assert!(legacy.resolve_gvk(&gvk).is_some());
    assert!(legacy.has_group("subresources.kubevirt.io"));
    let aggregated = kube::discovery::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    let (namespaces, _) = aggregated
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"))
        .expect("namespaces in aggregated discovery");
    assert_eq!(namespaces.plural, "namespaces");
    let (vm, caps) = aggregated
        .resolve_gvk(&gvk)
        .expect("VirtualMachine in aggregated discovery");
    assert_eq!(vm.plural, "virtualmachines");
    // kube-rs names a subresource by its own name.
    assert!(caps
        .subresources
        .iter()
        .any(|(sub, _)| sub.plural == "status"));

    create_namespace(&server, "kubers").await;
    let ar = vm_resource();
    let dynamic: Api<DynamicObject> = Api::namespaced_with(client.clone(), "kubers", &ar);

    // create + get + list
    let mut obj: DynamicObject =
        serde_json::from_value(support::vm("dyn1")).expect("dynamic object");
    obj.metadata.namespace = Some("kubers".into());
    let created = dynamic
        .create(&PostParams::default(), &obj)
        .await
        .expect("create");
    assert_eq!(created.name_any(), "dyn1");
    assert_eq!(created.metadata.generation, Some(1));
    let uid = created.uid().expect("uid");
    let got = dynamic.get("dyn1").await.expect("get");
    assert_eq!(got.uid().as_deref(), Some(uid.as_str()));
    assert_eq!(got.data["spec"]["runStrategy"], "Halted");
    let listed = dynamic.list(&ListParams::default()).await.expect("list");
    assert_eq!(
        listed
            .items
            .iter()
            .map(|o| o.name_any())
            .collect::<Vec<_>>(),
        ["dyn1"]
    );
    assert!(listed.metadata.resource_version.is_some());
    let err = dynamic
        .create(&PostParams::default(), &obj)
        .await
        .expect_err("duplicate create");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "AlreadyExists");
            assert_eq!(
                status.message,
                "virtualmachines.kubevirt.io \"dyn1\" already exists"
            );
        }
        other => panic!("expected a 409 Status, got {other:?}"),
    }
    assert!(dynamic.get_opt("missing").await.expect("get_opt").is_none());

    // merge patch, JSON patch, server-side apply
    let merged = dynamic
        .patch(
            "dyn1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runStrategy": "Manual"}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(merged.data["spec"]["runStrategy"], "Manual");
    assert_eq!(merged.metadata.generation, Some(2));
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/labels/patched", "value": "json"},
        {"op": "replace", "path": "/spec/runStrategy", "value": "Always"}
    ]))
    .expect("json patch");
    let jsonpatched = dynamic
        .patch("dyn1", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .expect("json patch");
    assert_eq!(
        jsonpatched.labels().get("patched").map(String::as_str),
        Some("json")
    );
    assert_eq!(jsonpatched.data["spec"]["runStrategy"], "Always");
    let failing: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/spec/runStrategy", "value": "Halted"}]),
    )
    .unwrap();
    match dynamic
        .patch("dyn1", &PatchParams::default(), &Patch::Json::<()>(failing))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 422),
        other => panic!("a failing JSON-patch test op must be 422, got {other:?}"),
    }
    let applied = dynamic
        .patch(
            "dyn-applied",
            &PatchParams::apply("kube-rs-e2e"),
            &Patch::Apply(support::vm("dyn-applied")),
        )
        .await
        .expect("server-side apply (create)");
    assert_eq!(applied.name_any(), "dyn-applied");
    assert!(manager_ops(&applied.metadata).contains(&("kube-rs-e2e".into(), "Apply".into())));

    // The typed API.
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), "kubers");
    let typed = vms
        .create(&PostParams::default(), &typed_vm("typed1", "Halted"))
        .await
        .expect("typed create");
    assert_eq!(typed.spec.run_strategy.as_deref(), Some("Halted"));
    assert_eq!(typed.metadata.namespace.as_deref(), Some("kubers"));
    let all = vms
        .list(&ListParams::default().labels("app=kube-rs"))
        .await
        .expect("typed list");
    assert_eq!(
        all.items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>(),
        ["typed1"]
    );
    let got = vms.get("typed1").await.expect("typed get");
    assert_eq!(got.uid(), typed.uid());

    let patched = vms
        .patch(
            "typed1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runStrategy": "Always"}})),
        )
        .await
        .expect("typed merge patch");
    assert_eq!(patched.spec.run_strategy.as_deref(), Some("Always"));

    // Apply conflicts between two managers, then force.
    let ssa = vms
        .patch(
            "typed2",
            &PatchParams::apply("owner"),
            &Patch::Apply(typed_vm("typed2", "Halted")),
        )
        .await
        .expect("typed apply create");
    assert!(manager_ops(&ssa.metadata).contains(&("owner".into(), "Apply".into())));
    let conflict = vms
        .patch(
            "typed2",
            &PatchParams::apply("intruder"),
            &Patch::Apply(typed_vm("typed2", "Always")),
        )
        .await
        .expect_err("conflict");
    match conflict {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(
                status.message,
                "Apply failed with 1 conflict: conflict with \"owner\": .spec.runStrategy"
            );
        }
        other => panic!("expected 409, got {other:?}"),
    }
    let forced = vms
        .patch(
            "typed2",
            &PatchParams::apply("intruder").force(),
            &Patch::Apply(typed_vm("typed2", "Always")),
        )
        .await
        .expect("forced apply");
    assert_eq!(forced.spec.run_strategy.as_deref(), Some("Always"));

    // The status subresource.
    let status = vms
        .patch_status(
            "typed1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"printableStatus": "Provisioning"}})),
        )
        .await
        .expect("status patch");
    assert_eq!(
        status.status.and_then(|s| s.printable_status).as_deref(),
        Some("Provisioning")
    );

    // delete: the object (held by finalizers) or a Status, then gone.
    for name in ["typed1", "typed2", "dyn1", "dyn-applied"] {
        let deleted = dynamic
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
        if let Some(obj) = deleted.clone().left() {
            assert!(
                obj.metadata.deletion_timestamp.is_some(),
                "{name} returned without deletionTimestamp"
            );
        } else {
            let status = deleted.right().expect("a Status");
            assert_eq!(
                status.status,
                Some(kube::core::response::StatusSummary::Success)
            );
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = dynamic
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len();
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} objects still present after delete"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match dynamic.delete("dyn1", &DeleteParams::default()).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 404);
            assert_eq!(
                status.message,
                "virtualmachines.kubevirt.io \"dyn1\" not found"
            );
        }
        other => panic!("expected 404, got {other:?}"),
    }
}

/// With history compacted every second, a watch resumed from an old resourceVersion
/// gets 410 Expired; the runtime watcher must re-list and carry on.
#[tokio::test]
async fn kube_rs_watcher_survives_410_and_relists() {
    let server = TestServer::start_with(&["--no-node", "--compaction-interval", "1s"]).await;
    let client = client_for(&server).await;
    create_namespace(&server, "watched").await;
    create_namespace(&server, "noise").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), "watched");
    vms.create(&PostParams::default(), &typed_vm("first", "Halted"))
        .await
        .expect("create first");

    // Writes elsewhere move the store revision on, so compaction passes the watcher's
    // resourceVersion; they do not show up in this watch.
    let noise: Api<DynamicObject> = Api::namespaced_with(client.clone(), "noise", &vm_resource());
    let writer = tokio::spawn(async move {
        for i in 0..300 {
            let mut obj: DynamicObject =
                serde_json::from_value(support::vm(&format!("noise{i}"))).expect("object");
            obj.metadata.namespace = Some("noise".into());
            let _ = noise.create(&PostParams::default(), &obj).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });

    // The server ends each watch after 1s; the watcher then resumes from the last
    // resourceVersion it saw, which compaction soon makes too old.
    let config = watcher::Config::default().timeout(1);
    let mut events = watcher(vms.clone(), config).default_backoff().boxed();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (mut inits, mut gone) = (0, 0);
    let (mut seen_first, mut created_second) = (false, false);
    loop {
        let next = match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(next)) => next,
            Ok(None) => panic!("watcher stream ended"),
            Err(_) => panic!(
                "after 60s: {inits} lists, {gone} 410s, first seen: {seen_first}, second created: {created_second}"
            ),
        };
        match next {
            Ok(watcher::Event::Init) => inits += 1,
            Ok(watcher::Event::InitApply(vm) | watcher::Event::Apply(vm)) => {
                seen_first |= vm.name_any() == "first";
                if vm.name_any() == "second" {
                    break;
                }
            }
            Ok(watcher::Event::InitDone | watcher::Event::Delete(_)) => {}
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                assert_eq!(status.reason, "Expired", "{status:?}");
                gone += 1;
            }
            Err(e) => panic!("unexpected watcher error: {e}"),
        }
        if gone > 0 && inits >= 2 && !created_second {
            // After the re-list, the watcher still sees new objects.
            vms.create(&PostParams::default(), &typed_vm("second", "Halted"))
                .await
                .expect("create second");
            created_second = true;
        }
    }
    writer.abort();
    assert!(seen_first, "the initial list delivered the existing VM");
    assert!(gone >= 1 && inits >= 2, "{inits} lists, {gone} 410s");
}
