//! `migrations.kubevirt.io/v1alpha1` MigrationPolicy matching, as KubeVirt does it: a policy
//! applies to a VMI when every label of its `virtualMachineInstanceSelector` is on the VMI
//! and every label of its `namespaceSelector` is on the VMI's namespace; among those, the
//! one matching the most VMI labels wins, then the most namespace labels, then the smallest
//! name. Its settings override the cluster's for that VMI's migrations.

use std::collections::BTreeMap;

use serde_json::Value;

/// The settings a policy may set, by their `spec` (and `migrations`) name.
const OVERRIDES: [&str; 5] = [
    "allowAutoConverge",
    "bandwidthPerMigration",
    "completionTimeoutPerGiB",
    "allowPostCopy",
    "allowWorkloadDisruption",
];

/// How many of `selector`'s labels `labels` has, or `None` if one is missing or differs.
fn matched(selector: Option<&Value>, labels: &BTreeMap<String, String>) -> Option<usize> {
    let Some(selector) = selector.and_then(Value::as_object) else {
        return Some(0);
    };
    selector
        .iter()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
        .then_some(selector.len())
}

/// The policy that applies to a VMI with `vmi_labels` in a namespace with `namespace_labels`.
pub fn choose<'a>(
    policies: &'a [Value],
    vmi_labels: &BTreeMap<String, String>,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<&'a Value> {
    let mut best: Option<((usize, usize), &str, &Value)> = None;
    for policy in policies {
        let selectors = policy.pointer("/spec/selectors");
        let vmi = matched(
            selectors.and_then(|s| s.get("virtualMachineInstanceSelector")),
            vmi_labels,
        );
        let namespace = matched(
            selectors.and_then(|s| s.get("namespaceSelector")),
            namespace_labels,
        );
        let (Some(vmi), Some(namespace)) = (vmi, namespace) else {
            continue;
        };
        let name = policy
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let better = match &best {
            None => true,
            Some((score, best_name, _)) => {
                (vmi, namespace) > *score || ((vmi, namespace) == *score && name < *best_name)
            }
        };
        if better {
            best = Some(((vmi, namespace), name, policy));
        }
    }
    best.map(|(_, _, p)| p)
}

/// `configuration` with what `policy` sets.
pub fn apply(configuration: &mut Value, policy: &Value) {
    for key in OVERRIDES {
        if let Some(v) = policy.pointer(&format!("/spec/{key}")) {
            configuration[key] = v.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn policy(name: &str, vmi: Value, namespace: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": {"allowPostCopy": true,
            "selectors": {"virtualMachineInstanceSelector": vmi, "namespaceSelector": namespace}}})
    }

    #[test]
    fn the_policy_matching_the_most_labels_wins() {
        let policies = [
            policy("b-broad", json!({"tier": "web"}), json!({})),
            policy("c-narrow", json!({"tier": "web", "zone": "a"}), json!({})),
            policy("a-other", json!({"tier": "db"}), json!({})),
            policy(
                "d-namespace",
                json!({"tier": "web", "zone": "a"}),
                json!({"team": "x"}),
            ),
        ];
        let vmi = labels(&[("tier", "web"), ("zone", "a")]);
        let name = |p: Option<&Value>| p.map(|p| p["metadata"]["name"].clone());
        assert_eq!(
            name(choose(&policies, &vmi, &labels(&[]))),
            Some(json!("c-narrow"))
        );
        assert_eq!(
            name(choose(&policies, &vmi, &labels(&[("team", "x")]))),
            Some(json!("d-namespace"))
        );
        assert_eq!(
            name(choose(
                &policies,
                &labels(&[("tier", "cache")]),
                &labels(&[])
            )),
            None
        );
        // Ties go to the smallest name.
        let tied = [
            policy("z", json!({"tier": "web"}), json!({})),
            policy("m", json!({"tier": "web"}), json!({})),
        ];
        assert_eq!(name(choose(&tied, &vmi, &labels(&[]))), Some(json!("m")));
    }

    #[test]
    fn a_policy_overrides_the_cluster_settings_it_names() {
        let mut config = json!({"allowPostCopy": false, "progressTimeout": 150});
        apply(
            &mut config,
            &json!({"spec": {"allowPostCopy": true, "bandwidthPerMigration": "64Mi"}}),
        );
        assert_eq!(
            config,
            json!({"allowPostCopy": true, "progressTimeout": 150, "bandwidthPerMigration": "64Mi"})
        );
    }
}
