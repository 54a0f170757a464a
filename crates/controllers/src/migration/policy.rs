//! `migrations.kubevirt.io/v1alpha1` MigrationPolicy matching, as KubeVirt does it: a policy
//! applies to a VMI when every label of its `virtualMachineInstanceSelector` is on the VMI
//! and every label of its `namespaceSelector` is on the VMI's namespace; among those, the
//! one matching the most VMI labels wins, then the most namespace labels, then the smallest
//! name. Its settings override the cluster's for that VMI's migrations.

use std::collections::BTreeMap;
use std::sync::Arc;

use kubevirt_api::model::MigrationPolicy;
use serde_json::{json, Value};

/// How many of `selector`'s labels `labels` has, or `None` if one is missing or differs.
fn matched(
    selector: Option<&BTreeMap<String, String>>,
    labels: &BTreeMap<String, String>,
) -> Option<usize> {
    let Some(selector) = selector else {
        return Some(0);
    };
    selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
        .then_some(selector.len())
}

/// The policy that applies to a VMI with `vmi_labels` in a namespace with `namespace_labels`.
pub fn choose<'a>(
    policies: &'a [Arc<MigrationPolicy>],
    vmi_labels: &BTreeMap<String, String>,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<&'a MigrationPolicy> {
    let mut best: Option<((usize, usize), &MigrationPolicy)> = None;
    for policy in policies {
        let selectors = policy.spec.selectors.as_ref();
        let vmi = matched(
            selectors.and_then(|s| s.virtual_machine_instance_selector.as_ref()),
            vmi_labels,
        );
        let namespace = matched(
            selectors.and_then(|s| s.namespace_selector.as_ref()),
            namespace_labels,
        );
        let (Some(vmi), Some(namespace)) = (vmi, namespace) else {
            continue;
        };
        let better = match &best {
            None => true,
            Some((score, best)) => {
                (vmi, namespace) > *score
                    || ((vmi, namespace) == *score && policy.name() < best.name())
            }
        };
        if better {
            best = Some(((vmi, namespace), policy));
        }
    }
    best.map(|(_, p)| p)
}

/// `configuration` with what `policy` sets.
pub fn apply(configuration: &mut Value, policy: &MigrationPolicy) {
    let spec = &policy.spec;
    let overrides = [
        (
            "allowAutoConverge",
            spec.allow_auto_converge.map(|v| json!(v)),
        ),
        (
            "bandwidthPerMigration",
            spec.bandwidth_per_migration.clone(),
        ),
        (
            "completionTimeoutPerGiB",
            spec.completion_timeout_per_gib.map(|v| json!(v)),
        ),
        ("allowPostCopy", spec.allow_post_copy.map(|v| json!(v))),
        (
            "allowWorkloadDisruption",
            spec.allow_workload_disruption.map(|v| json!(v)),
        ),
    ];
    for (key, value) in overrides {
        if let Some(value) = value {
            configuration[key] = value;
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

    fn policy(name: &str, vmi: Value, namespace: Value) -> Arc<MigrationPolicy> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"allowPostCopy": true,
                "selectors": {"virtualMachineInstanceSelector": vmi, "namespaceSelector": namespace}}}))
            .unwrap(),
        )
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
        let name = |p: Option<&MigrationPolicy>| p.map(|p| json!(p.name()));
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
            &serde_json::from_value(
                json!({"spec": {"allowPostCopy": true, "bandwidthPerMigration": "64Mi"}}),
            )
            .unwrap(),
        );
        assert_eq!(
            config,
            json!({"allowPostCopy": true, "progressTimeout": 150, "bandwidthPerMigration": "64Mi"})
        );
    }
}
