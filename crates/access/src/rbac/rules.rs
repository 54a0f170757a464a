//! `rbac.authorization.k8s.io/v1` PolicyRules: what one allows (kube's RBAC authorizer's
//! `RuleAllows`), whether a set of rules covers another (the escalation check's
//! `Covers`), and the compact text escalation errors list missing rules in.

use std::collections::{BTreeMap, BTreeSet};

use apimachinery::meta_validation::go_quote;
use serde::{Deserialize, Deserializer, Serialize};

pub const ALL: &str = "*";

/// A list field that may be absent or `null` in stored JSON.
fn nullable<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

/// One rule: verbs on resources of API groups (optionally named ones), or verbs on
/// non-resource URL paths.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default, deserialize_with = "nullable")]
    pub verbs: Vec<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub api_groups: Vec<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resources: Vec<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_names: Vec<String>,
    #[serde(
        default,
        rename = "nonResourceURLs",
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

impl PolicyRule {
    /// `verbs` on `resources` of `groups`.
    pub fn resources(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: strings(verbs),
            api_groups: strings(groups),
            resources: strings(resources),
            ..Default::default()
        }
    }

    /// `verbs` on the non-resource `urls`.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: strings(verbs),
            non_resource_urls: strings(urls),
            ..Default::default()
        }
    }

    /// Only these names of the resources.
    pub fn named(mut self, names: &[&str]) -> PolicyRule {
        self.resource_names = strings(names);
        self
    }

    pub fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == ALL || v == verb)
    }

    pub fn group_matches(&self, group: &str) -> bool {
        self.api_groups.iter().any(|g| g == ALL || g == group)
    }

    /// `combined` is `resource` or `resource/subresource`; a rule's `*/subresource`
    /// matches that subresource of every resource.
    pub fn resource_matches(&self, combined: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            r == ALL
                || r == combined
                || (!subresource.is_empty()
                    && r.len() == subresource.len() + 2
                    && r.starts_with("*/")
                    && r.ends_with(subresource))
        })
    }

    /// No names means every name (also none: lists, creates).
    pub fn name_matches(&self, name: &str) -> bool {
        self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == name)
    }

    /// `*`, the path itself, or a prefix ending in `*`.
    pub fn url_matches(&self, path: &str) -> bool {
        self.non_resource_urls.iter().any(|u| {
            u == ALL || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*')))
        })
    }

    /// kube's `CompactString`: the non-empty fields, each in Go's `%q` of a []string.
    pub fn compact_string(&self) -> String {
        let list = |values: &[String]| {
            let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
            format!("[{}]", quoted.join(" "))
        };
        let mut parts = Vec::new();
        for (label, values) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !values.is_empty() {
                parts.push(format!("{label}:{}", list(values)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }

    /// The rule as single-verb, single-resource (and single-name) rules, then one per
    /// non-resource URL and verb (`BreakdownRule`).
    fn breakdown(&self) -> Vec<PolicyRule> {
        let one = |v: &String| vec![v.clone()];
        let mut out = Vec::new();
        for group in &self.api_groups {
            for resource in &self.resources {
                for verb in &self.verbs {
                    let base = PolicyRule {
                        verbs: one(verb),
                        api_groups: one(group),
                        resources: one(resource),
                        ..Default::default()
                    };
                    if self.resource_names.is_empty() {
                        out.push(base);
                    } else {
                        for name in &self.resource_names {
                            out.push(PolicyRule {
                                resource_names: one(name),
                                ..base.clone()
                            });
                        }
                    }
                }
            }
        }
        for url in &self.non_resource_urls {
            for verb in &self.verbs {
                out.push(PolicyRule {
                    verbs: one(verb),
                    non_resource_urls: one(url),
                    ..Default::default()
                });
            }
        }
        out
    }

    /// Whether this (owner) rule covers `sub`, one of `breakdown`'s atoms.
    fn covers_atom(&self, sub: &PolicyRule) -> bool {
        let has = |set: &[String], value: &str| set.iter().any(|s| s == value);
        let has_all = |set: &[String], values: &[String]| values.iter().all(|v| has(set, v));
        let verbs = has(&self.verbs, ALL) || has_all(&self.verbs, &sub.verbs);
        let groups = has(&self.api_groups, ALL) || has_all(&self.api_groups, &sub.api_groups);
        let resources = has(&self.resources, ALL)
            || sub.resources.iter().all(|path| {
                has(&self.resources, path)
                    || path
                        .split_once('/')
                        .is_some_and(|(_, sub)| has(&self.resources, &format!("*/{sub}")))
            });
        let urls = sub.non_resource_urls.iter().all(|path| {
            self.non_resource_urls.iter().any(|owner| {
                owner == path
                    || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
            })
        });
        let names = if sub.resource_names.is_empty() {
            self.resource_names.is_empty()
        } else {
            self.resource_names.is_empty() || has_all(&self.resource_names, &sub.resource_names)
        };
        verbs && groups && resources && urls && names
    }
}

/// Whether `owner` covers every permission of `servant`; when not, the atoms it misses.
pub fn covers(owner: &[PolicyRule], servant: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let missing: Vec<PolicyRule> = servant
        .iter()
        .flat_map(PolicyRule::breakdown)
        .filter(|atom| !owner.iter().any(|o| o.covers_atom(atom)))
        .collect();
    (missing.is_empty(), missing)
}

/// `CompactRules`: rules with one group, one resource and nothing but verbs are merged
/// per group and resource; others stay as they are.
pub fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let mut simple: BTreeMap<(String, String), PolicyRule> = BTreeMap::new();
    for rule in rules {
        let is_simple = rule.resource_names.is_empty()
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            out.push(rule);
            continue;
        }
        let key = (rule.api_groups[0].clone(), rule.resources[0].clone());
        match simple.get_mut(&key) {
            Some(existing) => existing.verbs.extend(rule.verbs),
            None => {
                simple.insert(key, rule);
            }
        }
    }
    out.extend(simple.into_values());
    out
}

/// The lines an escalation error lists: the missing rules, compacted, each as its
/// `CompactString`, sorted and without repeats (`sets.String.List()`).
pub fn missing_descriptions(missing: Vec<PolicyRule>) -> Vec<String> {
    compact(missing)
        .iter()
        .map(PolicyRule::compact_string)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Go's `%q` of a []string: `["a" "b"]`.
pub fn go_quoted_list(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
        PolicyRule::resources(verbs, groups, resources)
    }

    #[test]
    fn matching_follows_the_rbac_authorizer() {
        let r = rule(&["get", "list"], &["kubevirt.io"], &["virtualmachines"]);
        assert!(r.verb_matches("get") && !r.verb_matches("delete"));
        assert!(r.group_matches("kubevirt.io") && !r.group_matches(""));
        assert!(r.resource_matches("virtualmachines", ""));
        assert!(!r.resource_matches("virtualmachines/status", "status"));
        let sub = rule(
            &["update"],
            &["*"],
            &["*/start", "virtualmachineinstances/console"],
        );
        assert!(sub.resource_matches("virtualmachines/start", "start"));
        assert!(sub.resource_matches("virtualmachineinstances/console", "console"));
        assert!(!sub.resource_matches("virtualmachines", ""));
        assert!(!sub.resource_matches("virtualmachines/restart", "restart"));
        let named = r.clone().named(&["vm1"]);
        assert!(named.name_matches("vm1") && !named.name_matches("") && !named.name_matches("vm2"));
        assert!(r.name_matches(""));
        let urls = PolicyRule::urls(&["get"], &["/healthz", "/apis/*"]);
        assert!(urls.url_matches("/healthz") && urls.url_matches("/apis/kubevirt.io/v1"));
        assert!(
            urls.url_matches("/apis/")
                && !urls.url_matches("/apis")
                && !urls.url_matches("/healthz/x")
        );
        assert!(PolicyRule::urls(&["*"], &["*"]).url_matches("/anything"));
    }

    #[test]
    fn covers_as_the_escalation_check() {
        let owner = vec![
            rule(&["*"], &["kubevirt.io"], &["virtualmachines"]),
            rule(&["get"], &[""], &["configmaps"]).named(&["a", "b"]),
            rule(&["update"], &["subresources.kubevirt.io"], &["*/start"]),
            PolicyRule::urls(&["get"], &["/apis/*"]),
        ];
        let ok = vec![
            rule(&["get", "delete"], &["kubevirt.io"], &["virtualmachines"]),
            rule(&["get"], &[""], &["configmaps"]).named(&["a"]),
            rule(
                &["update"],
                &["subresources.kubevirt.io"],
                &["virtualmachines/start"],
            ),
            PolicyRule::urls(&["get"], &["/apis/kubevirt.io"]),
        ];
        assert_eq!(covers(&owner, &ok), (true, vec![]));
        // All names are more than two names; another verb is missing as itself.
        let more = vec![
            rule(&["get", "list"], &[""], &["configmaps"]),
            rule(
                &["get"],
                &["kubevirt.io"],
                &["virtualmachines", "virtualmachineinstances"],
            ),
        ];
        let (covered, missing) = covers(&owner, &more);
        assert!(!covered);
        assert_eq!(
            missing_descriptions(missing),
            [
                "{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"get\" \"list\"]}",
                "{APIGroups:[\"kubevirt.io\"], Resources:[\"virtualmachineinstances\"], Verbs:[\"get\"]}",
            ]
        );
        // cluster-admin covers everything.
        let admin = vec![
            rule(&["*"], &["*"], &["*"]),
            PolicyRule::urls(&["*"], &["*"]),
        ];
        assert!(covers(&admin, &more).0 && covers(&admin, &ok).0);
        assert!(!covers(&ok, &admin).0);
    }

    #[test]
    fn compact_strings() {
        let r = PolicyRule {
            verbs: vec!["get".into()],
            api_groups: vec!["".into()],
            resources: vec!["secrets".into()],
            resource_names: vec!["s".into()],
            non_resource_urls: vec![],
        };
        assert_eq!(
            r.compact_string(),
            "{APIGroups:[\"\"], Resources:[\"secrets\"], ResourceNames:[\"s\"], Verbs:[\"get\"]}"
        );
        assert_eq!(
            PolicyRule::urls(&["get"], &["/x"]).compact_string(),
            "{NonResourceURLs:[\"/x\"], Verbs:[\"get\"]}"
        );
    }

    #[test]
    fn stored_json_reads_with_nulls() {
        let r: PolicyRule = serde_json::from_value(serde_json::json!(
            {"verbs": ["get"], "apiGroups": null, "nonResourceURLs": ["/x"]}
        ))
        .unwrap();
        assert_eq!(r, PolicyRule::urls(&["get"], &["/x"]));
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"verbs": ["get"], "nonResourceURLs": ["/x"]})
        );
    }
}
