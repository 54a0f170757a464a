use super::*;

fn node(name: &str, cpu: &str, memory: &str, labels: Value) -> NodeView {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {"allocatable": {"cpu": cpu, "memory": memory},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    let free = allocatable(&node);
    (name.to_string(), Arc::new(node), free)
}

/// The spec of a VMI written as JSON.
fn spec(vmi: &Value) -> VmiSpec {
    serde_json::from_value(vmi["spec"].clone()).unwrap()
}

fn choose(vmi: &Value, nodes: &[NodeView]) -> Result<String, String> {
    super::choose(&spec(vmi), nodes)
}

fn requests(vmi: &Value) -> Resources {
    super::requests(&spec(vmi))
}

fn filter_kind(vmi: &Value) -> String {
    super::filter_kind(&spec(vmi))
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
    Arc::make_mut(&mut tainted.1).spec.taints = Some(vec![k8s_openapi::api::core::v1::Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }]);
    let mut cordoned = node("c", "4", "8Gi", json!({}));
    Arc::make_mut(&mut cordoned.1).spec.unschedulable = Some(true);
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
    for ready in Arc::make_mut(&mut down.1)
        .status
        .conditions
        .iter_mut()
        .flatten()
    {
        ready.status = "Unknown".into();
    }
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

#[test]
fn free_nodes_are_sorted_and_take_what_is_used() {
    let node = |name: &str| -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "2", "memory": "4Gi"},
                           "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap(),
        )
    };
    let used: HashMap<String, Resources> = [(
        "b".to_string(),
        Resources {
            millicpu: 500,
            memory: 1 << 30,
        },
    )]
    .into();
    let free = free_nodes(&[node("b"), node("a")], &used);
    assert_eq!(free[0].0, "a");
    assert_eq!(free[0].2.millicpu, 2000);
    assert_eq!(free[1].2.millicpu, 1500);
    assert_eq!(free[1].2.memory, 3 << 30);
}
