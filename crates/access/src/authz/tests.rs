//! The authorizer over fixed roles and bindings: bindings by user, group and
//! ServiceAccount, cluster-wide and per namespace, aggregation, reasons, escalation.

use serde_json::{json, Value};

use super::escalation::confirm_no_escalation;
use super::snapshot::Objects;
use super::*;

fn cluster_role(name: &str, labels: Value, rules: Value) -> (String, Value) {
    (
        format!("{STORE_PREFIX}clusterroles/{name}"),
        json!({"metadata": {"name": name, "labels": labels}, "rules": rules}),
    )
}

fn binding(
    kind: &str,
    ns: &str,
    name: &str,
    role: (&str, &str),
    subjects: Value,
) -> (String, Value) {
    let key = match kind {
        "rolebindings" => format!("{STORE_PREFIX}rolebindings/{ns}/{name}"),
        _ => format!("{STORE_PREFIX}clusterrolebindings/{name}"),
    };
    let mut meta = json!({"name": name});
    if !ns.is_empty() {
        meta["namespace"] = json!(ns);
    }
    (
        key,
        json!({"metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
               "subjects": subjects}),
    )
}

fn vm_attrs(verb: &str, ns: &str, name: &str) -> Attributes {
    Attributes::resource(
        verb,
        ResourceAttributes {
            namespace: ns.into(),
            group: "kubevirt.io".into(),
            version: "v1".into(),
            resource: "virtualmachines".into(),
            subresource: String::new(),
            name: name.into(),
        },
    )
}

fn authorizer(objects: Vec<(String, Value)>) -> Authorizer {
    let objects: Objects = objects.into_iter().collect();
    Authorizer::fixed(Snapshot::build(&objects, 1))
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo::new(name, groups.iter().map(|g| g.to_string()).collect())
}

#[test]
fn bindings_by_user_group_and_service_account() {
    let az = authorizer(vec![
        cluster_role(
            "vm-editor",
            json!({}),
            json!([{"verbs": ["get", "delete"], "apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"]}]),
        ),
        binding(
            "rolebindings",
            "team-a",
            "alice",
            ("ClusterRole", "vm-editor"),
            json!([{"kind": "User", "name": "alice"}]),
        ),
        binding(
            "rolebindings",
            "team-b",
            "devs",
            ("ClusterRole", "vm-editor"),
            json!([{"kind": "Group", "name": "devs"}, {"kind": "ServiceAccount", "name": "robot"}]),
        ),
        binding(
            "clusterrolebindings",
            "",
            "ops",
            ("ClusterRole", "vm-editor"),
            json!([{"kind": "Group", "name": "ops"}]),
        ),
    ]);
    let alice = user("alice", &["system:authenticated"]);
    assert!(az
        .allows(&alice, &vm_attrs("delete", "team-a", "x"))
        .is_ok());
    assert!(az
        .allows(&alice, &vm_attrs("delete", "team-b", "x"))
        .is_err());
    assert!(az
        .allows(&alice, &vm_attrs("create", "team-a", ""))
        .is_err());
    let dev = user("bob", &["devs"]);
    assert!(az.allows(&dev, &vm_attrs("get", "team-b", "x")).is_ok());
    let robot = user("system:serviceaccount:team-b:robot", &[]);
    assert!(az.allows(&robot, &vm_attrs("get", "team-b", "x")).is_ok());
    assert!(az.allows(&robot, &vm_attrs("get", "team-a", "x")).is_err());
    let ops = user("carol", &["ops"]);
    assert!(az.allows(&ops, &vm_attrs("get", "", "")).is_ok());
    assert_eq!(
        az.decide(&ops, &vm_attrs("get", "x", "")).reason,
        "RBAC: allowed by ClusterRoleBinding \"ops\" of ClusterRole \"vm-editor\" to Group \"ops\""
    );
    assert_eq!(
        az.decide(&dev, &vm_attrs("get", "team-b", "")).reason,
        "RBAC: allowed by RoleBinding \"devs/team-b\" of ClusterRole \"vm-editor\" to Group \"devs\""
    );
    let masters = user("root", &["system:masters"]);
    assert!(az
        .allows(&masters, &vm_attrs("deletecollection", "", ""))
        .is_ok());
}

#[test]
fn a_missing_role_is_the_reason() {
    let az = authorizer(vec![binding(
        "rolebindings",
        "team-a",
        "alice",
        ("ClusterRole", "nope"),
        json!([{"kind": "User", "name": "alice"}]),
    )]);
    let alice = user("alice", &[]);
    assert_eq!(
        az.allows(&alice, &vm_attrs("get", "team-a", "x")),
        Err("RBAC: clusterrole.rbac.authorization.k8s.io \"nope\" not found".to_string())
    );
    assert_eq!(
        az.allows(&alice, &vm_attrs("get", "team-b", "x")),
        Err(String::new())
    );
}

#[test]
fn aggregated_roles_gather_by_label_through_chains() {
    let az = authorizer(vec![
        (
            format!("{STORE_PREFIX}clusterroles/edit"),
            json!({"metadata": {"name": "edit", "labels": {"agg-admin": "true"}},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg-edit": "true"}}]}}),
        ),
        (
            format!("{STORE_PREFIX}clusterroles/admin"),
            json!({"metadata": {"name": "admin"},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg-admin": "true"}}]}}),
        ),
        cluster_role(
            "vm-edit",
            json!({"agg-edit": "true"}),
            json!([{"verbs": ["create"], "apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"]}]),
        ),
        cluster_role(
            "extra-admin",
            json!({"agg-admin": "true"}),
            json!([{"verbs": ["delete"], "apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"]}]),
        ),
        binding(
            "rolebindings",
            "a",
            "x",
            ("ClusterRole", "admin"),
            json!([{"kind": "User", "name": "u"}]),
        ),
        binding(
            "rolebindings",
            "a",
            "y",
            ("ClusterRole", "edit"),
            json!([{"kind": "User", "name": "e"}]),
        ),
    ]);
    let admin = user("u", &[]);
    assert!(az.allows(&admin, &vm_attrs("create", "a", "")).is_ok());
    assert!(az.allows(&admin, &vm_attrs("delete", "a", "v")).is_ok());
    let editor = user("e", &[]);
    assert!(az.allows(&editor, &vm_attrs("create", "a", "")).is_ok());
    assert!(az.allows(&editor, &vm_attrs("delete", "a", "v")).is_err());
    let snapshot = az.snapshot();
    let (want, have) = &snapshot.aggregated["admin"];
    assert_eq!(want.len(), 2);
    assert!(have.is_empty());
}

#[test]
fn escalation_message_as_kube() {
    let az = authorizer(vec![
        cluster_role(
            "reader",
            json!({}),
            json!([{"verbs": ["get"], "apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"]}]),
        ),
        binding(
            "rolebindings",
            "a",
            "x",
            ("ClusterRole", "reader"),
            json!([{"kind": "User", "name": "u"}]),
        ),
    ]);
    let u = user("u", &["devs", "system:authenticated"]);
    let wanted = vec![PolicyRule::resources(
        &["get", "delete", "list"],
        &["kubevirt.io"],
        &["virtualmachines"],
    )];
    assert_eq!(
        confirm_no_escalation(&az, &u, "a", &wanted),
        Err("user \"u\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"kubevirt.io\"], Resources:[\"virtualmachines\"], Verbs:[\"delete\" \"list\"]}".to_string())
    );
    assert!(confirm_no_escalation(&az, &u, "a", &wanted[..0]).is_ok());
}

/// What one decision costs with the bootstrap policy and one user bound to
/// kubevirt.io:edit by a RoleBinding (the bench's case), beside system:masters':
/// `cargo test -p apiserver --release -- --ignored decision_cost --nocapture`.
#[test]
#[ignore]
fn decision_cost() {
    let mut objects: Vec<(String, Value)> = Vec::new();
    for role in crate::rbac::bootstrap::cluster_roles() {
        objects.push((
            format!(
                "{STORE_PREFIX}clusterroles/{}",
                crate::rbac::metadata_str(&role, "name")
            ),
            role,
        ));
    }
    for b in crate::rbac::bootstrap::cluster_role_bindings() {
        objects.push((
            format!(
                "{STORE_PREFIX}clusterrolebindings/{}",
                crate::rbac::metadata_str(&b, "name")
            ),
            b,
        ));
    }
    objects.push(binding(
        "rolebindings",
        "bench",
        "editor",
        ("ClusterRole", "kubevirt.io:edit"),
        json!([{"kind": "User", "name": "editor"}]),
    ));
    let az = authorizer(objects);
    let editor = user("editor", &["bench-users", "system:authenticated"]);
    let admin = user("admin", &["system:masters", "system:authenticated"]);
    let create = vm_attrs("create", "bench", "");
    let elsewhere = vm_attrs("create", "other", "");
    assert!(az.allows(&editor, &create).is_ok());
    assert!(az.allows(&editor, &elsewhere).is_err());
    let time = |who: &UserInfo, attrs: &Attributes| {
        let n = 200_000;
        let start = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(
                az.allows(std::hint::black_box(who), std::hint::black_box(attrs))
                    .is_ok(),
            );
        }
        start.elapsed().as_nanos() as f64 / n as f64
    };
    println!(
        "allows(): system:masters {:.0} ns; kubevirt.io:edit allowed {:.0} ns; refused {:.0} ns",
        time(&admin, &create),
        time(&editor, &create),
        time(&editor, &elsewhere)
    );
}
