//! Discovery documents, legacy (`APIResourceList` per group-version) and aggregated
//! (`APIGroupDiscoveryList`), built once from the registrations.

use apimachinery::resource::ResourceInfo;
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A group-version served without resources of the generic registry, e.g. the
/// `authorization.k8s.io/v1` review endpoints or virtctl's subresource group.
pub struct ExtraResource {
    pub group: &'static str,
    pub version: &'static str,
    pub name: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
}

const VERBS: [&str; 8] = [
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];
const NAMESPACE_VERBS: [&str; 6] = ["create", "delete", "get", "list", "patch", "watch"];

fn verbs(info: &ResourceInfo) -> Vec<&'static str> {
    if info.plural == "namespaces" {
        NAMESPACE_VERBS.to_vec()
    } else {
        VERBS.to_vec()
    }
}

fn storage_version_hash(info: &ResourceInfo) -> String {
    let digest =
        Sha256::digest(format!("{}/{}/{}", info.group, info.version, info.kind).as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

pub struct Discovery {
    infos: Vec<&'static ResourceInfo>,
    extras: Vec<ExtraResource>,
}

impl Discovery {
    pub fn new(infos: Vec<&'static ResourceInfo>, extras: Vec<ExtraResource>) -> Self {
        Discovery { infos, extras }
    }

    /// Group-versions in the order they are advertised (core first).
    fn group_versions(&self) -> Vec<(&'static str, &'static str)> {
        let mut out: Vec<(&str, &str)> = Vec::new();
        let all = self
            .infos
            .iter()
            .map(|i| (i.group, i.version))
            .chain(self.extras.iter().map(|e| (e.group, e.version)));
        for gv in all {
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
        out
    }

    pub fn serves(&self, group: &str, version: &str) -> bool {
        self.group_versions()
            .iter()
            .any(|(g, v)| *g == group && *v == version)
    }

    pub fn api_versions(&self, server_address: &str) -> Value {
        json!({"kind": "APIVersions", "versions": ["v1"],
               "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
    }

    fn group_json(group: &str, versions: &[&str]) -> Value {
        let versions: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
            .collect();
        json!({"name": group, "versions": versions.clone(), "preferredVersion": versions[0].clone()})
    }

    fn versions_of(&self, group: &str) -> Vec<&'static str> {
        self.group_versions()
            .into_iter()
            .filter(|(g, _)| *g == group)
            .map(|(_, v)| v)
            .collect()
    }

    pub fn group_list(&self) -> Value {
        let mut groups: Vec<&str> = Vec::new();
        for (g, _) in self.group_versions() {
            if !g.is_empty() && !groups.contains(&g) {
                groups.push(g);
            }
        }
        let groups: Vec<Value> = groups
            .iter()
            .map(|g| Self::group_json(g, &self.versions_of(g)))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    pub fn group(&self, group: &str) -> Option<Value> {
        let versions = self.versions_of(group);
        if versions.is_empty() || group.is_empty() {
            return None;
        }
        let mut doc = Self::group_json(group, &versions);
        doc["kind"] = json!("APIGroup");
        doc["apiVersion"] = json!("v1");
        Some(doc)
    }

    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        if !self.serves(group, version) {
            return None;
        }
        let mut resources = Vec::new();
        for info in self
            .infos
            .iter()
            .filter(|i| i.group == group && i.version == version)
        {
            resources.push(json!({
                "name": info.plural, "singularName": info.singular, "namespaced": info.namespaced,
                "kind": info.kind, "verbs": verbs(info), "shortNames": info.short_names,
                "categories": info.categories, "storageVersionHash": storage_version_hash(info),
            }));
            if info.status_subresource {
                resources.push(json!({"name": format!("{}/status", info.plural), "singularName": "",
                    "namespaced": info.namespaced, "kind": info.kind, "verbs": ["get", "patch", "update"]}));
            }
        }
        for extra in self
            .extras
            .iter()
            .filter(|e| e.group == group && e.version == version)
        {
            resources.push(
                json!({"name": extra.name, "singularName": "", "namespaced": extra.namespaced,
                "kind": extra.kind, "verbs": extra.verbs}),
            );
        }
        let group_version = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
        )
    }

    /// The aggregated form for `/api` (core only) or `/apis` (every named group).
    pub fn aggregated(&self, core: bool) -> Value {
        let mut items = Vec::new();
        let mut groups: Vec<&str> = Vec::new();
        for (g, _) in self.group_versions() {
            if g.is_empty() == core && !groups.contains(&g) {
                groups.push(g);
            }
        }
        for group in groups {
            let versions: Vec<Value> = self
                .versions_of(group)
                .into_iter()
                .map(|version| {
                    let mut resources: Vec<Value> = self
                        .infos
                        .iter()
                        .filter(|i| i.group == group && i.version == version)
                        .map(|info| {
                            let kind = json!({"group": group, "version": version, "kind": info.kind});
                            let mut r = json!({"resource": info.plural, "responseKind": kind.clone(),
                                "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": info.singular, "verbs": verbs(info),
                                "shortNames": info.short_names, "categories": info.categories});
                            if info.status_subresource {
                                r["subresources"] = json!([{"subresource": "status", "responseKind": kind,
                                    "verbs": ["get", "patch", "update"]}]);
                            }
                            r
                        })
                        .collect();
                    for extra in self.extras.iter().filter(|e| e.group == group && e.version == version) {
                        let scope = if extra.namespaced { "Namespaced" } else { "Cluster" };
                        let kind = if extra.kind.is_empty() {
                            json!({"group": "", "version": "", "kind": ""})
                        } else {
                            json!({"group": group, "version": version, "kind": extra.kind})
                        };
                        // `parent/sub` entries become subresources of `parent`, creating the
                        // parent when the group has none (kube-aggregator's conversion of
                        // an aggregated API server's legacy discovery, e.g. virt-api's).
                        if let Some((parent, sub)) = extra.name.split_once('/') {
                            let subresource = json!({"subresource": sub, "responseKind": kind, "verbs": extra.verbs});
                            match resources.iter_mut().find(|r| r["resource"] == parent) {
                                Some(r) => match r["subresources"].as_array_mut() {
                                    Some(subs) => subs.push(subresource),
                                    None => r["subresources"] = json!([subresource]),
                                },
                                None => resources.push(json!({"resource": parent, "scope": scope,
                                    "responseKind": {"group": "", "version": "", "kind": ""},
                                    "singularResource": "", "verbs": [], "subresources": [subresource]})),
                            }
                            continue;
                        }
                        resources.push(json!({"resource": extra.name, "responseKind": kind, "scope": scope,
                            "singularResource": extra.name.trim_end_matches('s'), "verbs": extra.verbs}));
                    }
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            items.push(json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions}));
        }
        json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
    }
}
