use super::*;

fn node(name: &str, cpu: &str, memory: &str, labels: Value) -> NodeView {
    let value = json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {"allocatable": {"cpu": cpu, "memory": memory},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    });
    let free = allocatable(&value);
    (name.to_string(), Arc::new(value), free)
}

fn vmi(memory: &str) -> Value {
    json!({"spec": {"domain": {"memory": {"guest": memory}, "cpu": {"sockets": 2}}}})
}

#[test]
fn requests_follow_kubevirt_defaults() {
    assert_eq!(
        requests(&vmi("1Gi")),
        Resources {
            millicpu: 200,
            memory: 1 << 30
        }
    );
    let explicit = json!({"spec": {"domain": {"resources": {"requests": {"cpu": "1500m", "memory": "64Mi"}}}}});
    assert_eq!(
        requests(&explicit),
        Resources {
            millicpu: 1500,
            memory: 64 << 20
        }
    );
}

#[test]
fn picks_the_node_with_most_free_memory() {
    let nodes = vec![
        node("a", "4", "2Gi", json!({})),
        node("b", "4", "8Gi", json!({})),
    ];
    assert_eq!(choose(&vmi("1Gi"), &nodes), Ok("b".to_string()));
}

#[test]
fn explains_why_nothing_fits() {
    let mut tainted = node("t", "4", "8Gi", json!({}));
    Arc::make_mut(&mut tainted.1)["spec"]["taints"] =
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
    let mut cordoned = node("c", "4", "8Gi", json!({}));
    Arc::make_mut(&mut cordoned.1)["spec"]["unschedulable"] = json!(true);
    let nodes = vec![node("small", "4", "512Mi", json!({})), tainted, cordoned];
    assert_eq!(
        choose(&vmi("1Gi"), &nodes),
        Err("0/3 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable.".into())
    );
    // A toleration lets it onto the tainted node.
    let mut tolerant = vmi("1Gi");
    tolerant["spec"]["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
    assert_eq!(choose(&tolerant, &nodes), Ok("t".to_string()));
}

#[test]
fn node_selector_and_required_affinity() {
    let nodes = vec![
        node("a", "4", "8Gi", json!({"zone": "x"})),
        node("b", "4", "4Gi", json!({"zone": "y", "gen": "3"})),
    ];
    let mut selected = vmi("1Gi");
    selected["spec"]["nodeSelector"] = json!({"zone": "y"});
    assert_eq!(choose(&selected, &nodes), Ok("b".to_string()));
    let mut affine = vmi("1Gi");
    affine["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["2"]}]}]}}});
    assert_eq!(choose(&affine, &nodes), Ok("b".to_string()));
    affine["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = json!(["5"]);
    assert_eq!(
        choose(&affine, &nodes),
        Err("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.".into())
    );
}

#[test]
fn not_ready_nodes_are_skipped() {
    let mut down = node("down", "4", "8Gi", json!({}));
    Arc::make_mut(&mut down.1)["status"]["conditions"] =
        json!([{"type": "Ready", "status": "Unknown"}]);
    assert_eq!(
        choose(&vmi("1Gi"), &[down]),
        Err("0/1 nodes are available: 1 node(s) were not ready.".into())
    );
}

#[test]
fn vmis_filter_alike_when_their_placement_rules_are_alike() {
    let mut a = vmi("1Gi");
    let mut b = vmi("2Gi");
    assert_eq!(
        filter_kind(&a),
        filter_kind(&b),
        "requests are not a filter"
    );
    a["spec"]["nodeSelector"] = json!({"zone": "x"});
    assert_ne!(filter_kind(&a), filter_kind(&b));
    b["spec"]["nodeSelector"] = json!({"zone": "x"});
    assert_eq!(filter_kind(&a), filter_kind(&b));
    b["spec"]["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
    assert_ne!(filter_kind(&a), filter_kind(&b));
}

fn node_object(name: &str, version: &str, rack: &str) -> Arc<DynamicObject> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": version, "labels": {"rack": rack}},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap(),
    )
}

#[test]
fn a_node_view_is_made_again_only_when_the_node_changed() {
    let mut views = NodeViews::default();
    let used: HashMap<String, Resources> = [(
        "b".to_string(),
        Resources {
            millicpu: 500,
            memory: 1 << 30,
        },
    )]
    .into();
    let first = views.free(
        &[node_object("b", "7", "r1"), node_object("a", "3", "r1")],
        &used,
    );
    assert_eq!(first[0].0, "a");
    assert_eq!(first[1].2.millicpu, 1500);
    assert_eq!(first[1].2.memory, 3 << 30);
    let again = views.free(
        &[node_object("a", "3", "r1"), node_object("b", "8", "r2")],
        &used,
    );
    assert!(Arc::ptr_eq(&first[0].1, &again[0].1), "a is unchanged");
    assert!(!Arc::ptr_eq(&first[1].1, &again[1].1), "b changed");
    assert_eq!(again[1].1["metadata"]["labels"]["rack"], "r2");
    let gone = views.free(&[node_object("a", "3", "r1")], &HashMap::new());
    assert_eq!(gone.len(), 1);
    assert_eq!(views.0.len(), 1, "a removed node's view is dropped");
}
