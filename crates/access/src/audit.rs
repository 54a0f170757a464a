//! kube-apiserver's audit policy (`audit.k8s.io/v1` Policy): rules tried in order, the
//! first that matches a request gives its level; a request no rule matches is not
//! logged.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::authn::UserInfo;
use crate::authz::Attributes;

/// How much of a request is logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

/// When in a request an event is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    RequestReceived,
    /// Once the response headers are sent, for long-running requests only.
    ResponseStarted,
    ResponseComplete,
    Panic,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: Option<bool>,
}

#[derive(Debug)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<Stage>,
    omit_managed_fields: bool,
}

/// What the policy says about one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

impl Verdict {
    pub fn none() -> Verdict {
        Verdict {
            level: Level::None,
            omit_stages: Vec::new(),
            omit_managed_fields: false,
        }
    }

    pub fn logs(&self, stage: Stage) -> bool {
        self.level > Level::None && !self.omit_stages.contains(&stage)
    }
}

impl Policy {
    /// Reads a policy file (YAML or JSON); the error says what is wrong where.
    pub fn load(path: &Path) -> Result<Policy, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
        Policy::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Policy, String> {
        let doc =
            apimachinery::yaml::from_str(text).map_err(|e| format!("not YAML or JSON: {e}"))?;
        let Value::Object(doc) = doc else {
            return Err("not an object".into());
        };
        let field = |name: &str| doc.get(name).and_then(Value::as_str).unwrap_or("");
        if field("apiVersion") != "audit.k8s.io/v1" || field("kind") != "Policy" {
            return Err(format!(
                "apiVersion {:?}, kind {:?}: expected apiVersion audit.k8s.io/v1, kind Policy",
                field("apiVersion"),
                field("kind")
            ));
        }
        for key in doc.keys() {
            let known = [
                "apiVersion",
                "kind",
                "metadata",
                "rules",
                "omitStages",
                "omitManagedFields",
            ];
            if !known.contains(&key.as_str()) {
                return Err(format!("unknown field {key:?}"));
            }
        }
        let omit_stages: Vec<Stage> = decode(&doc, "omitStages")?.unwrap_or_default();
        let omit_managed_fields: bool = decode(&doc, "omitManagedFields")?.unwrap_or(false);
        let mut rules = Vec::new();
        let listed: Vec<Value> = decode(&doc, "rules")?.unwrap_or_default();
        for (i, rule) in listed.into_iter().enumerate() {
            let rule: Rule =
                serde_json::from_value(rule).map_err(|e| format!("rules[{i}]: {e}"))?;
            validate(&rule).map_err(|e| format!("rules[{i}]: {e}"))?;
            rules.push(rule);
        }
        Ok(Policy {
            rules,
            omit_stages,
            omit_managed_fields,
        })
    }

    /// The first matching rule's level (None when none matches). `user` is the
    /// authenticated user, before impersonation; `None` when authentication failed.
    pub fn verdict(&self, user: Option<&UserInfo>, attrs: &Attributes) -> Verdict {
        let Some(rule) = self.rules.iter().find(|r| r.matches(user, attrs)) else {
            return Verdict::none();
        };
        let mut omit_stages = self.omit_stages.clone();
        omit_stages.extend(rule.omit_stages.iter().copied());
        Verdict {
            level: rule.level,
            omit_stages,
            omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    doc: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<T>, String> {
    doc.get(key)
        .filter(|v| !v.is_null())
        .map(|v| serde_json::from_value(v.clone()).map_err(|e| format!("{key}: {e}")))
        .transpose()
}

/// kube's policy validation.
fn validate(rule: &Rule) -> Result<(), String> {
    if !rule.non_resource_urls.is_empty()
        && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
    {
        return Err("rules cannot apply to non-resource URLs as well as resources".into());
    }
    for url in &rule.non_resource_urls {
        if url == "*" {
            continue;
        }
        if !url.starts_with('/') {
            return Err(format!(
                "nonResourceURLs: {url:?}: non-resource URL rules must begin with a '/' character"
            ));
        }
        if url.trim_end_matches('*').contains('*') {
            return Err(format!("nonResourceURLs: {url:?}: non-resource URL wildcards ('*') must be the final character of the rule"));
        }
    }
    for (j, group) in rule.resources.iter().enumerate() {
        if !group.resource_names.is_empty() && group.resources.is_empty() {
            return Err(format!(
                "resources[{j}].resourceNames: using resourceNames requires at least one resource"
            ));
        }
    }
    Ok(())
}

impl Rule {
    fn matches(&self, user: Option<&UserInfo>, attrs: &Attributes) -> bool {
        if !self.users.is_empty() && !user.is_some_and(|u| self.users.contains(&u.name)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !user.is_some_and(|u| u.groups.iter().any(|g| self.user_groups.contains(g)))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&attrs.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(attrs);
        }
        if !self.non_resource_urls.is_empty() {
            return attrs.resource.is_none()
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(&attrs.path, spec));
        }
        true
    }

    fn matches_resource(&self, attrs: &Attributes) -> bool {
        let Some(resource) = &attrs.resource else {
            return false;
        };
        // Cluster-scoped resources are in the namespace "".
        if !self.namespaces.is_empty() && !self.namespaces.contains(&resource.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = match resource.subresource.as_str() {
            "" => resource.resource.clone(),
            sub => format!("{}/{sub}", resource.resource),
        };
        self.resources.iter().any(|gr| {
            if gr.group != resource.group {
                return false;
            }
            if gr.resources.is_empty() {
                return true;
            }
            if !gr.resource_names.is_empty() && !gr.resource_names.contains(&resource.name) {
                return false;
            }
            gr.resources.iter().any(|res| {
                res == "*"
                    || *res == combined
                    || (!resource.subresource.is_empty()
                        && res.strip_prefix("*/") == Some(resource.subresource.as_str()))
                    || res.strip_suffix("/*") == Some(resource.resource.as_str())
            })
        })
    }
}

/// `*` matches everything, `/prefix*` every path that starts with `/prefix`.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::ResourceAttributes;

    fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes::resource(
            verb,
            ResourceAttributes {
                namespace: ns.into(),
                group: group.into(),
                version: "v1".into(),
                resource: resource.into(),
                subresource: sub.into(),
                name: name.into(),
            },
        )
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz", "/livez"]
  - level: Metadata
    resources: [{group: "", resources: ["secrets"]}]
  - level: RequestResponse
    namespaces: ["audited"]
    resources: [{group: kubevirt.io, resources: ["virtualmachines", "*/status"]}]
    omitStages: [ResponseStarted]
  - level: None
    users: ["system:serviceaccount:kubevirt:kubevirt-controller"]
  - level: Request
    userGroups: ["testers"]
    verbs: ["create", "delete"]
    resources: [{group: kubevirt.io, resources: ["virtualmachines/*"], resourceNames: ["vm1"]}]
  - level: Metadata
"#;

    #[test]
    fn the_first_matching_rule_wins() {
        let policy = Policy::parse(POLICY).expect("policy");
        let bob = UserInfo::new("bob", vec!["testers".into()]);
        let controller =
            UserInfo::new("system:serviceaccount:kubevirt:kubevirt-controller", vec![]);
        let level = |user: Option<&UserInfo>, attrs: &Attributes| policy.verdict(user, attrs).level;
        assert_eq!(
            level(
                Some(&bob),
                &Attributes::non_resource("get", "/healthz/ping")
            ),
            Level::None
        );
        assert_eq!(
            level(Some(&bob), &Attributes::non_resource("get", "/version")),
            Level::Metadata
        );
        assert_eq!(
            level(
                Some(&controller),
                &resource("get", "", "secrets", "", "x", "s")
            ),
            Level::Metadata,
            "secrets before the controller's rule"
        );
        let vm = resource(
            "update",
            "kubevirt.io",
            "virtualmachines",
            "",
            "audited",
            "vm1",
        );
        assert_eq!(level(Some(&controller), &vm), Level::RequestResponse);
        let status = resource(
            "update",
            "kubevirt.io",
            "virtualmachineinstances",
            "status",
            "audited",
            "x",
        );
        assert_eq!(
            level(Some(&bob), &status),
            Level::RequestResponse,
            "*/status"
        );
        let elsewhere = resource(
            "update",
            "kubevirt.io",
            "virtualmachines",
            "",
            "other",
            "vm1",
        );
        assert_eq!(level(Some(&controller), &elsewhere), Level::None);
        let start = resource(
            "create",
            "kubevirt.io",
            "virtualmachines",
            "start",
            "other",
            "vm1",
        );
        assert_eq!(
            level(Some(&bob), &start),
            Level::Request,
            "virtualmachines/* by name"
        );
        let start2 = resource(
            "create",
            "kubevirt.io",
            "virtualmachines",
            "start",
            "other",
            "vm2",
        );
        assert_eq!(level(Some(&bob), &start2), Level::Metadata, "another name");
        assert_eq!(
            level(None, &start),
            Level::Metadata,
            "no user: user rules do not match"
        );
        let verdict = policy.verdict(Some(&bob), &vm);
        assert_eq!(
            verdict.omit_stages,
            vec![Stage::RequestReceived, Stage::ResponseStarted]
        );
        assert!(!verdict.logs(Stage::RequestReceived) && verdict.logs(Stage::ResponseComplete));
    }

    #[test]
    fn no_rules_log_nothing() {
        let policy = Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\n").expect("policy");
        assert_eq!(
            policy
                .verdict(None, &Attributes::non_resource("get", "/api"))
                .level,
            Level::None
        );
    }

    #[test]
    fn bad_policies_say_what_is_wrong() {
        let cases = [
            ("kind: Policy\napiVersion: audit.k8s.io/v1beta1\n", "expected apiVersion audit.k8s.io/v1"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n", "rules[0]: unknown variant `Everything`"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- verbs: [get]\n", "rules[0]: missing field `level`"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  user: [x]\n", "rules[0]: unknown field `user`"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [healthz]\n", "must begin with a '/'"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [/a]\n  namespaces: [x]\n", "as well as resources"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Sometimes]\n", "omitStages: unknown variant"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrulez: []\n", "unknown field \"rulez\""),
            ("[", "not YAML or JSON"),
        ];
        for (text, expected) in cases {
            let err = Policy::parse(text).expect_err(text);
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }
}
