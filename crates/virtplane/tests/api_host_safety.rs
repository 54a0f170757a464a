//! Spec values that would reach a host path or a QEMU command line are refused at
//! admission with a Kubernetes 422 Invalid Status naming the field: a hostDisk path that
//! climbs out of `--host-disk-dir`, a disk serial carrying QEMU options, a machine type
//! with properties, names that are not one path component.

mod support;

use serde_json::{json, Value};
use support::*;

const VM: &str = "virtualmachines";
const VMI: &str = "virtualmachineinstances";

/// The (reason, field, message) causes of a 422 Invalid reply, after checking its shape.
fn invalid(r: &Reply) -> Vec<(String, String, String)> {
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert_eq!(r.body["kind"], "Status", "{}", r.text);
    assert_eq!(r.body["reason"], "Invalid", "{}", r.text);
    assert_eq!(r.body["code"], 422, "{}", r.text);
    causes(r)
}

fn cause_on<'a>(
    causes: &'a [(String, String, String)],
    field: &str,
    r: &Reply,
) -> &'a (String, String, String) {
    causes
        .iter()
        .find(|(_, f, _)| f == field)
        .unwrap_or_else(|| panic!("no cause on {field}: {}", r.text))
}

fn host_disk(spec: &mut Value, path: &str) {
    spec["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "data", "disk": {"bus": "virtio"}}));
    spec["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "data", "hostDisk": {"path": path, "type": "Disk"}}));
}

#[tokio::test]
async fn hostile_spec_values_are_refused_at_admission() {
    let allowed = tempfile::tempdir().unwrap();
    let allowed_dir = allowed.path().display().to_string();
    let server = TestServer::start_with(&["--no-node", "--host-disk-dir", &allowed_dir]).await;
    let api = api_for(&server);
    let ns = "hostile";
    api.namespace(ns).await;

    // A hostDisk that climbs out of the allowed dir, on a VM and on a VMI.
    let escape = format!("{allowed_dir}/../../etc/shadow");
    let mut body = vm("escape");
    host_disk(&mut body["spec"]["template"]["spec"], &escape);
    let r = api.post(&coll(ns, VM), &body).await;
    let causes = invalid(&r);
    let field = "spec.template.spec.volumes[1].hostDisk.path";
    let (reason, _, message) = cause_on(&causes, field, &r);
    assert_eq!(reason, "FieldValueForbidden", "{}", r.text);
    assert_eq!(
        message,
        &format!("hostDisk path {escape:?} must not contain '..'")
    );
    let mut body = vmi("escape");
    host_disk(&mut body["spec"], &escape);
    let r = api.post(&coll(ns, VMI), &body).await;
    let causes = invalid(&r);
    cause_on(&causes, "spec.volumes[1].hostDisk.path", &r);
    // Elsewhere on the host: refused, saying where host disks may be.
    let mut body = vm("elsewhere");
    host_disk(&mut body["spec"]["template"]["spec"], "/etc/shadow");
    let r = api.post(&coll(ns, VM), &body).await;
    let causes = invalid(&r);
    let (_, _, message) = cause_on(&causes, field, &r);
    assert!(
        message.contains("/etc/shadow") && message.contains(&allowed_dir),
        "{message}"
    );

    // A disk serial with QEMU options in it: KubeVirt's rule and words.
    let mut body = vm("serial");
    body["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["serial"] =
        json!("x,file=/etc/passwd");
    let r = api.post(&coll(ns, VM), &body).await;
    let causes = invalid(&r);
    let field = "spec.template.spec.domain.devices.disks[0].serial";
    let (reason, _, message) = cause_on(&causes, field, &r);
    assert_eq!(reason, "FieldValueInvalid");
    assert_eq!(
        message,
        "spec.template.spec.domain.devices.disks[0] must be made up of the following characters [A-Za-z0-9_.+-], if specified"
    );

    // A machine type with machine properties after it.
    let mut body = vm("machine");
    body["spec"]["template"]["spec"]["domain"]["machine"] =
        json!({"type": "q35,memory-backend=mem0"});
    let r = api.post(&coll(ns, VM), &body).await;
    let causes = invalid(&r);
    let field = "spec.template.spec.domain.machine.type";
    let (_, _, message) = cause_on(&causes, field, &r);
    assert!(
        message.starts_with(&format!(
            "{field} is not supported: q35,memory-backend=mem0"
        )),
        "{message}"
    );

    // Disk and volume names become file names on the node: DNS-1123 labels only.
    let mut body = vm("disk-name");
    let spec = &mut body["spec"]["template"]["spec"];
    spec["domain"]["devices"]["disks"][0]["name"] = json!("../root");
    spec["volumes"][0]["name"] = json!("../root");
    let r = api.post(&coll(ns, VM), &body).await;
    let causes = invalid(&r);
    // KubeVirt's own (doubled) path for this rule.
    let field = "spec.template.spec.domain.devices.disks.domain.devices.disks[0].name";
    let (_, _, message) = cause_on(&causes, field, &r);
    assert!(
        message.starts_with("a lowercase RFC 1123 label"),
        "{message}"
    );

    // Object names become the VMI's dir: not `..`, no `/`, no upper case or commas.
    for name in ["..", "a..b", "Upper", "a,b", "a_b"] {
        let mut body = vmi("x");
        body["metadata"]["name"] = json!(name);
        let r = api.post(&coll(ns, VMI), &body).await;
        let causes = invalid(&r);
        cause_on(&causes, "metadata.name", &r);
    }
    // Nothing was stored.
    let list = api.get(&coll(ns, VMI)).await;
    assert_eq!(list.body["items"], json!([]), "{}", list.text);
    let list = api.get(&coll(ns, VM)).await;
    assert_eq!(list.body["items"], json!([]), "{}", list.text);
}
