//! KubeVirt admission through the API: the validating webhooks' rejections (422 with
//! `admission webhook "<name>" denied the request: ...` and KubeVirt's causes and field
//! paths), their warnings, the defaults the mutating webhooks fill in, and the migration
//! create checks that read the VMI and its other migrations (400 with KubeVirt's message).

mod support;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

const VM: &str = "virtualmachines";
const VMI: &str = "virtualmachineinstances";
const VMIM: &str = "virtualmachineinstancemigrations";
const VM_WEBHOOK: &str = "virtualmachine-validator.kubevirt.io";
const VMI_WEBHOOK: &str = "virtualmachineinstances-create-validator.kubevirt.io";

/// The whole Status of a webhook denial: KubeVirt's message(s) joined with ", ", and
/// details holding only the causes.
fn denial(webhook: &str, causes: &[(&str, &str, &str)]) -> Value {
    let message = causes.iter().map(|c| c.2).collect::<Vec<_>>().join(", ");
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("admission webhook \"{webhook}\" denied the request: {message}"),
        "reason": "Invalid",
        "details": {"causes": causes.iter().map(|(reason, field, message)| {
            let mut cause = json!({"reason": reason, "message": message});
            if !field.is_empty() {
                cause["field"] = json!(field);
            }
            cause
        }).collect::<Vec<_>>()},
        "code": 422})
}

/// A VM whose template spec is changed by `edit`.
fn vm_with(name: &str, edit: impl Fn(&mut Value)) -> Value {
    let mut body = vm(name);
    edit(&mut body["spec"]["template"]["spec"]);
    body
}

fn with_network(spec: &mut Value) {
    spec["domain"]["devices"]["interfaces"] = json!([{"name": "default", "masquerade": {}}]);
    spec["networks"] = json!([{"name": "default", "pod": {}}]);
}

/// What is wrong, the VM, and the causes (reason, field, message) KubeVirt reports.
type Case = (&'static str, Value, Vec<(&'static str, String, String)>);

#[tokio::test]
async fn vm_admission_rules() {
    let api = api().await;
    let ns = "adm-vm";
    api.namespace(ns).await;
    let c = coll(ns, VM);
    let t = "spec.template.spec";
    let cases: Vec<Case> = vec![
        (
            "running and runStrategy",
            {
                let mut b = vm("x");
                b["spec"]["running"] = json!(false);
                b
            },
            vec![(
                "FieldValueInvalid",
                "spec.running".into(),
                "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead".into(),
            )],
        ),
        (
            "neither running nor runStrategy",
            {
                let mut b = vm("x");
                b["spec"].as_object_mut().unwrap().remove("runStrategy");
                b
            },
            vec![("FieldValueInvalid", "spec.running".into(), "RunStrategy must be specified".into())],
        ),
        (
            "disk without volume",
            vm_with("x", |s| {
                s["domain"]["devices"]["disks"] =
                    json!([{"name": "root", "disk": {"bus": "virtio"}}, {"name": "data", "disk": {"bus": "virtio"}}]);
            }),
            vec![(
                "FieldValueInvalid",
                format!("{t}.domain.devices.disks[1].name"),
                format!("{t}.domain.devices.disks[1].Name 'data' not found."),
            )],
        ),
        (
            "duplicate disk names",
            vm_with("x", |s| {
                s["domain"]["devices"]["disks"] =
                    json!([{"name": "root", "disk": {"bus": "virtio"}}, {"name": "root", "disk": {"bus": "virtio"}}]);
            }),
            vec![(
                "FieldValueInvalid",
                format!("{t}.domain.devices.disks[1].name"),
                format!("{t}.domain.devices.disks[1] and {t}.domain.devices.disks[0] must not have the same Name."),
            )],
        ),
        (
            "duplicate volume names",
            vm_with("x", |s| {
                s["volumes"] = json!([
                    {"name": "root", "containerDisk": {"image": "registry.local/guest:1"}},
                    {"name": "root", "emptyDisk": {"capacity": "1Gi"}}
                ]);
            }),
            vec![(
                "FieldValueInvalid",
                format!("{t}.volumes[1].name"),
                format!("{t}.volumes[1] and {t}.volumes[0] must not have the same Name."),
            )],
        ),
        (
            "interface without network",
            vm_with("x", |s| {
                with_network(s);
                s["domain"]["devices"]["interfaces"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "extra", "bridge": {}}));
            }),
            vec![(
                "FieldValueInvalid",
                format!("{t}.domain.devices.interfaces[1].name"),
                format!("{t}.domain.devices.interfaces[1].name 'extra' not found."),
            )],
        ),
        (
            "duplicate interface names",
            vm_with("x", |s| {
                with_network(s);
                s["domain"]["devices"]["interfaces"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "default", "masquerade": {}}));
            }),
            vec![(
                "FieldValueDuplicate",
                format!("{t}.domain.devices.interfaces[1].name"),
                "Only one interface can be connected to one specific network".into(),
            )],
        ),
        (
            "duplicate network names",
            vm_with("x", |s| {
                with_network(s);
                // (bridge binds to either kind of network, so only the duplicate is wrong)
                s["domain"]["devices"]["interfaces"] = json!([{"name": "default", "bridge": {}}]);
                s["networks"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "default", "multus": {"networkName": "br"}}));
            }),
            vec![(
                "FieldValueDuplicate",
                format!("{t}.networks[1].name"),
                "Network with name \"default\" already exists, every network must have a unique name".into(),
            )],
        ),
        (
            "reserved MAC address",
            vm_with("x", |s| {
                with_network(s);
                s["domain"]["devices"]["interfaces"][0]["macAddress"] = json!("02:00:00:00:00:00");
            }),
            vec![(
                "FieldValueInvalid",
                format!("{t}.domain.devices.interfaces[0].macAddress"),
                "The requested MAC address is reserved for the in-pod bridge. Please choose another one.".into(),
            )],
        ),
        (
            "duplicate boot order",
            vm_with("x", |s| {
                s["domain"]["devices"]["disks"] = json!([
                    {"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 1},
                    {"name": "data", "disk": {"bus": "virtio"}, "bootOrder": 1}
                ]);
                s["volumes"] = json!([
                    {"name": "root", "containerDisk": {"image": "registry.local/guest:1"}},
                    {"name": "data", "emptyDisk": {"capacity": "1Gi"}}
                ]);
            }),
            vec![(
                "FieldValueInvalid",
                format!("{t}.domain.devices.disks[1].bootOrder"),
                format!("Boot order for {t}.domain.devices.disks[1].bootOrder already set for a different device."),
            )],
        ),
    ];
    for (what, body, want) in cases {
        let want: Vec<(&str, &str, &str)> = want
            .iter()
            .map(|(r, f, m)| (*r, f.as_str(), m.as_str()))
            .collect();
        let r = api.post(&c, &body).await;
        assert_status_body(&r, denial(VM_WEBHOOK, &want));
        assert_eq!(
            api.get(&item(ns, VM, "x")).await.status,
            StatusCode::NOT_FOUND,
            "{what}"
        );
        // Updates are checked by the same webhook.
        let r = api.post(&c, &vm("good")).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        let mut update = body.clone();
        update["metadata"]["name"] = json!("good");
        let r = api
            .patch(
                &format!("{}?fieldValidation=Ignore", item(ns, VM, "good")),
                "application/merge-patch+json",
                &json!({"spec": update["spec"]}).to_string(),
            )
            .await;
        if what != "neither running nor runStrategy" {
            // (a merge patch cannot remove what is absent from the patch)
            assert_status_body(&r, denial(VM_WEBHOOK, &want));
        }
        api.delete(&item(ns, VM, "good"), None).await;
        api.eventually(
            &item(ns, VM, "good"),
            std::time::Duration::from_secs(20),
            |r| r.status == 404,
        )
        .await;
    }
    // Several problems: every cause, messages joined with ", ".
    let mut three = vm_with("x", |s| {
        with_network(s);
        s["domain"]["devices"]["interfaces"][0]["macAddress"] = json!("02:00:00:00:00:00");
        s["domain"]["devices"]["disks"] = json!([{"name": "root", "disk": {"bus": "virtio"}}, {"name": "root", "disk": {"bus": "virtio"}}]);
    });
    three["spec"]["running"] = json!(true);
    let r = api.post(&c, &three).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    let got = causes(&r);
    assert_eq!(got.len(), 3, "{got:?}");
    let joined = got
        .iter()
        .map(|c| c.2.clone())
        .collect::<Vec<_>>()
        .join(", ");
    assert_eq!(
        r.body["message"],
        format!("admission webhook \"{VM_WEBHOOK}\" denied the request: {joined}")
    );
}

/// Schema validation (the CRD's structural schema from the seed contract) runs before the
/// webhooks: values the schema forbids never reach KubeVirt's checks.
#[tokio::test]
async fn schema_rules_come_first() {
    let api = api().await;
    let ns = "adm-schema";
    api.namespace(ns).await;
    let c = coll(ns, VM);
    let mut body = vm("x");
    body["spec"]["runStrategy"] = json!("Sometimes");
    let r = api.post(&c, &body).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(r.body["reason"], "Invalid");
    assert_eq!(r.body["details"]["kind"], "VirtualMachine");
    assert_eq!(r.body["details"]["name"], "x");
    let c0 = &causes(&r)[0];
    assert_eq!(
        (c0.0.as_str(), c0.1.as_str()),
        ("FieldValueNotSupported", "spec.runStrategy")
    );
    assert!(
        c0.2.starts_with("Unsupported value: \"Sometimes\": supported values: \"Always\", \"RerunOnFailure\", \"Manual\", \"Halted\", \"Once\""),
        "{}",
        c0.2
    );
    assert_eq!(
        r.body["message"],
        format!(
            "VirtualMachine.kubevirt.io \"x\" is invalid: spec.runStrategy: {}",
            c0.2
        )
    );

    let t = "spec.template.spec.domain.devices.interfaces[0].macAddress";
    let body = vm_with("x", |s| {
        with_network(s);
        s["domain"]["devices"]["interfaces"][0]["macAddress"] = json!("de:ad:be:ef");
    });
    let r = api.post(&c, &body).await;
    let detail = format!("Invalid value: \"de:ad:be:ef\": {t} in body should match '^([0-9A-Fa-f]{{2}}:){{5}}[0-9A-Fa-f]{{2}}$'");
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("VirtualMachine.kubevirt.io \"x\" is invalid: {t}: {detail}"),
            "reason": "Invalid",
            "details": {"name": "x", "group": "kubevirt.io", "kind": "VirtualMachine",
                "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": t}]},
            "code": 422}),
    );
    // Ports outside 1..65535 (the seed contract's bounds) are refused by the schema.
    let t = "spec.template.spec.domain.devices.interfaces[0].ports[0].port";
    for (port, bound) in [
        (70000, "less than or equal to 65535"),
        (0, "greater than or equal to 1"),
    ] {
        let body = vm_with("x", |s| {
            with_network(s);
            s["domain"]["devices"]["interfaces"][0]["ports"] =
                json!([{"name": "http", "port": port}]);
        });
        let r = api.post(&c, &body).await;
        let detail = format!("Invalid value: {port}: {t} in body should be {bound}");
        assert_status(
            &r,
            422,
            "Invalid",
            &format!("VirtualMachine.kubevirt.io \"x\" is invalid: {t}: {detail}"),
        );
        assert_eq!(
            causes(&r),
            [("FieldValueInvalid".to_string(), t.to_string(), detail)]
        );
    }
    // The template is required by the schema.
    let mut body = vm("x");
    body["spec"].as_object_mut().unwrap().remove("template");
    let r = api.post(&c, &body).await;
    assert_status_body(
        &r,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "VirtualMachine.kubevirt.io \"x\" is invalid: spec.template: Required value",
            "reason": "Invalid",
            "details": {"name": "x", "group": "kubevirt.io", "kind": "VirtualMachine",
                "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.template"}]},
            "code": 422}),
    );
    // Wrong types are schema errors too.
    let mut body = vm("x");
    body["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["bootOrder"] = json!("first");
    let r = api.post(&c, &body).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(causes(&r)[0].0, "FieldValueTypeInvalid", "{}", r.text);
    assert_eq!(
        causes(&r)[0].1,
        "spec.template.spec.domain.devices.disks[0].bootOrder"
    );
}

#[tokio::test]
async fn vm_warnings() {
    let api = api().await;
    let ns = "adm-warn";
    api.namespace(ns).await;
    let mut body = vm("deprecated");
    body["spec"].as_object_mut().unwrap().remove("runStrategy");
    body["spec"]["running"] = json!(false);
    let r = api.post(&coll(ns, VM), &body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        warnings(&r),
        ["spec.running is deprecated, please use spec.runStrategy instead."]
    );
}

#[tokio::test]
async fn vmi_admission_rules() {
    let api = api().await;
    let ns = "adm-vmi";
    api.namespace(ns).await;
    let c = coll(ns, VMI);
    let mut body = vmi("x");
    body["spec"]["domain"]["devices"]["disks"] = json!([{"name": "root", "disk": {"bus": "virtio"}}, {"name": "data", "disk": {"bus": "virtio"}}]);
    let r = api.post(&c, &body).await;
    assert_status_body(
        &r,
        denial(
            VMI_WEBHOOK,
            &[(
                "FieldValueInvalid",
                "spec.domain.devices.disks[1].name",
                "spec.domain.devices.disks[1].Name 'data' not found.",
            )],
        ),
    );
    let mut body = vmi("x");
    body["spec"]["domain"]["devices"]["interfaces"] = json!([{"name": "default", "masquerade": {}, "ports": [{"name": "web", "port": 80}, {"name": "web", "port": 81}]}]);
    body["spec"]["networks"] = json!([{"name": "default", "pod": {}}]);
    let r = api.post(&c, &body).await;
    assert_status_body(
        &r,
        denial(
            VMI_WEBHOOK,
            &[(
                "FieldValueDuplicate",
                "spec.domain.devices.interfaces[0].ports[1].name",
                "Duplicate name of the port: web",
            )],
        ),
    );
    // A VMI needs some memory.
    let mut body = vmi("x");
    body["spec"]["domain"]
        .as_object_mut()
        .unwrap()
        .remove("memory");
    let r = api.post(&c, &body).await;
    assert_status_body(
        &r,
        denial(
            VMI_WEBHOOK,
            &[("FieldValueRequired", "", "no memory requested, at least one of 'spec.domain.memory.guest', 'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' must be set")],
        ),
    );

    // Users may not change a VMI's spec once created; metadata is fine.
    api.create(&c, &vmi("fixed")).await;
    let path = item(ns, VMI, "fixed");
    let r = api
        .merge(
            &path,
            &json!({"spec": {"domain": {"memory": {"guest": "256Mi"}}}}),
        )
        .await;
    assert_status_body(
        &r,
        denial(
            "virtualmachineinstances-update-validator.kubevirt.io",
            &[(
                "FieldValueNotSupported",
                "",
                "update of VMI object is restricted",
            )],
        ),
    );
    let r = api
        .merge(&path, &json!({"metadata": {"labels": {"free": "yes"}}}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn migration_admission_rules() {
    let api = api().await;
    let ns = "adm-vmim";
    api.namespace(ns).await;
    let c = coll(ns, VMIM);
    // Migrations are admitted only for an existing VMI (on this --no-node server it stays
    // Pending, which passes the target checks).
    api.create(&coll(ns, VMI), &vmi("a")).await;
    let r = api.post(&c, &vmim("m", "")).await;
    assert_status_body(
        &r,
        denial(
            "migration-create-validator.kubevirt.io",
            &[("FieldValueRequired", "spec.vmiName", "vmiName is missing")],
        ),
    );
    api.create(&c, &vmim("m", "a")).await;
    let r = api
        .merge(&item(ns, VMIM, "m"), &json!({"spec": {"vmiName": "b"}}))
        .await;
    assert_status_body(
        &r,
        denial(
            "migration-update-validator.kubevirt.io",
            &[(
                "FieldValueNotSupported",
                "",
                "update of Migration object's spec is restricted",
            )],
        ),
    );
    // The mutating webhook labels a migration with its VMI and adds the migration
    // controller's finalizer.
    let r = api.get(&item(ns, VMIM, "m")).await;
    assert_eq!(r.body["metadata"]["labels"]["kubevirt.io/vmi-name"], "a");
    assert_eq!(
        r.body["metadata"]["finalizers"],
        json!([MIGRATION_FINALIZER])
    );
    // An unfinished migration keeps that label.
    let r = api
        .merge(
            &item(ns, VMIM, "m"),
            &json!({"metadata": {"labels": {"kubevirt.io/vmi-name": "b"}}}),
        )
        .await;
    assert_status_body(
        &r,
        denial(
            "migration-update-validator.kubevirt.io",
            &[(
                "FieldValueNotSupported",
                "",
                "selector label can't be modified on an in-flight migration",
            )],
        ),
    );
}

/// 400 with only KubeVirt's message: how its migration create webhook answers when the
/// VMI or the other migrations forbid the migration.
fn bad_request(message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "BadRequest", "code": 400})
}

#[tokio::test]
async fn migration_create_checks_its_vmi() {
    let api = api().await;
    let ns = "adm-vmim-target";
    api.namespace(ns).await;
    let c = coll(ns, VMIM);

    // The VMI must exist in the migration's namespace.
    let r = api.post(&c, &vmim("m1", "nope")).await;
    assert_status_body(
        &r,
        bad_request(&format!("the VMI \"{ns}/nope\" does not exist")),
    );
    assert_eq!(
        api.get(&item(ns, VMIM, "m1")).await.status,
        StatusCode::NOT_FOUND
    );

    // spec.priority is virt-controller's alone.
    api.create(&coll(ns, VMI), &vmi("v")).await;
    let mut prioritized = vmim("m1", "v");
    prioritized["spec"]["priority"] = json!("user-triggered");
    let r = api.post(&c, &prioritized).await;
    assert_status_body(
        &r,
        denial(
            "migration-create-validator.kubevirt.io",
            &[(
                "FieldValueForbidden",
                "spec.migrationPriority",
                "Migration priority queue, only virt-controller is allowed to set priority field",
            )],
        ),
    );

    // One migration in flight per VMI.
    let first = api.create(&c, &vmim("m1", "v")).await;
    let r = api.post(&c, &vmim("m2", "v")).await;
    assert_status_body(
        &r,
        bad_request(&format!(
            "in-flight migration detected. Active migration job ({}) is currently already in progress for VMI v.",
            uid(&first)
        )),
    );
    // A final one does not count (written as the migration controller would).
    let r = api
        .merge(
            &format!("{}/status", item(ns, VMIM, "m1")),
            &json!({"status": {"phase": "Failed"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    api.create(&c, &vmim("m2", "v")).await;

    // A VMI its node agent found not live-migratable. VMIs have no status subresource:
    // status travels with the object, as the node agent writes it.
    api.create(&coll(ns, VMI), &vmi("pinned")).await;
    let pinned = item(ns, VMI, "pinned");
    api.settle(&pinned).await;
    let r = api
        .put_fresh(&pinned, |vmi| {
            let mut conditions = vmi["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            conditions.push(json!({"type": "LiveMigratable", "status": "False",
                "reason": "DisksNotLiveMigratable",
                "message": "cannot migrate VMI: PVC root is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"}));
            vmi["status"]["conditions"] = json!(conditions);
        })
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = api.post(&c, &vmim("m3", "pinned")).await;
    assert_status_body(
        &r,
        bad_request("Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: cannot migrate VMI: PVC root is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"),
    );

    // A VMI that has finished cannot move.
    api.create(&coll(ns, VMI), &vmi("done")).await;
    let done = item(ns, VMI, "done");
    api.settle(&done).await;
    let r = api
        .put_fresh(&done, |vmi| vmi["status"]["phase"] = json!("Succeeded"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = api.post(&c, &vmim("m4", "done")).await;
    assert_status_body(&r, bad_request("Cannot migrate VMI in finalized state."));
}

#[tokio::test]
async fn vm_defaults() {
    let api = api().await;
    let ns = "adm-vm-defaults";
    api.namespace(ns).await;
    let created = api.create(&coll(ns, VM), &vm("d")).await;
    let spec = &created["spec"]["template"]["spec"];
    assert_eq!(spec["architecture"], "amd64");
    assert_eq!(spec["domain"]["machine"]["type"], "q35");
    let uuid = spec["domain"]["firmware"]["uuid"]
        .as_str()
        .expect("firmware uuid");
    assert_eq!(uuid.len(), 36);
    assert!(spec["domain"]["firmware"]["serial"].is_string());
    // The VM spec is otherwise not defaulted: no disks buses, networks or CPU topology.
    assert!(spec.get("networks").is_none(), "{spec}");
    assert!(spec["domain"].get("cpu").is_none(), "{spec}");
    assert_eq!(
        spec["domain"]["devices"]["disks"][0]["disk"]["bus"],
        "virtio"
    );
    // Firmware identity is fixed at creation: updates keep it.
    let path = item(ns, VM, "d");
    let r = api
        .merge(&path, &json!({"spec": {"runStrategy": "Manual"}}))
        .await;
    assert_eq!(
        r.body["spec"]["template"]["spec"]["domain"]["firmware"]["uuid"],
        uuid
    );
    // A VM created with its own firmware uuid keeps it.
    let mut own = vm("own");
    own["spec"]["template"]["spec"]["domain"]["firmware"] =
        json!({"uuid": "5d307ca9-b3ef-428c-8861-06e72d69f223"});
    let created = api.create(&coll(ns, VM), &own).await;
    assert_eq!(
        created["spec"]["template"]["spec"]["domain"]["firmware"]["uuid"],
        "5d307ca9-b3ef-428c-8861-06e72d69f223"
    );
}

#[tokio::test]
async fn vmi_defaults() {
    let api = api().await;
    let ns = "adm-vmi-defaults";
    api.namespace(ns).await;
    let body = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "d"},
        "spec": {
            "domain": {
                "resources": {"requests": {"memory": "64Mi"}},
                "devices": {"disks": [{"name": "root"}, {"name": "cd", "cdrom": {}}]}
            },
            "volumes": [
                {"name": "root", "containerDisk": {"image": "registry.local/guest"}},
                {"name": "cd", "containerDisk": {"image": "registry.local/iso:1.0"}},
                {"name": "scratch", "emptyDisk": {"capacity": "1Gi"}}
            ]
        }
    });
    let r = api.post(&coll(ns, VMI), &body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let vmi = r.body;
    let spec = &vmi["spec"];
    assert_eq!(spec["architecture"], "amd64");
    assert_eq!(spec["domain"]["machine"]["type"], "q35");
    assert_eq!(spec["domain"]["cpu"]["sockets"], 1);
    assert_eq!(spec["domain"]["cpu"]["cores"], 1);
    assert_eq!(spec["domain"]["cpu"]["threads"], 1);
    assert_eq!(spec["domain"]["cpu"]["model"], "host-model");
    assert_eq!(
        spec["domain"]["memory"]["guest"], "64Mi",
        "guest memory from the request"
    );
    assert!(spec["domain"]["firmware"]["uuid"].is_string());
    let disks = spec["domain"]["devices"]["disks"].as_array().unwrap();
    assert_eq!(disks.len(), 3, "a disk for every volume: {disks:?}");
    assert_eq!(disks[0], json!({"name": "root", "disk": {"bus": "sata"}}));
    assert_eq!(
        disks[1],
        json!({"name": "cd", "cdrom": {"bus": "sata", "readonly": true, "tray": "closed"}})
    );
    assert_eq!(
        disks[2],
        json!({"name": "scratch", "disk": {"bus": "sata"}})
    );
    // The pod network with the default binding.
    assert_eq!(spec["networks"], json!([{"name": "default", "pod": {}}]));
    assert_eq!(
        spec["domain"]["devices"]["interfaces"][0]["name"],
        "default"
    );
    // Pull policy: Always for untagged/latest images, IfNotPresent for tags.
    assert_eq!(
        spec["volumes"][0]["containerDisk"]["imagePullPolicy"],
        "Always"
    );
    assert_eq!(
        spec["volumes"][1]["containerDisk"]["imagePullPolicy"],
        "IfNotPresent"
    );
    // Status starts Pending with its transition recorded.
    assert_eq!(vmi["status"]["phase"], "Pending");
    assert_eq!(
        vmi["status"]["phaseTransitionTimestamps"][0]["phase"],
        "Pending"
    );
}
