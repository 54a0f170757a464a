//! What every typed object shares: its metadata (decoded without `managedFields`, which
//! no controller or agent reads and which are as large as a VMI's spec), its conditions,
//! and the macro that makes a kind of `metadata` + `spec` + `status`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

crate::open_struct! {
    /// One entry of `status.conditions`, as every kind writes them.
    pub struct Condition {
        type_: String = "type",
        /// `True`, `False` or `Unknown`.
        status: String = "status",
        reason: String = "reason",
        message: String = "message",
        last_transition_time: String = "lastTransitionTime",
        last_probe_time: serde_json::Value = "lastProbeTime",
        last_heartbeat_time: String = "lastHeartbeatTime",
    }
}

impl Condition {
    /// A condition of `kind` with this status, reason and message, without times.
    pub fn new(kind: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: Some(kind.into()),
            status: Some(status.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..Condition::default()
        }
    }

    pub fn kind(&self) -> &str {
        self.type_.as_deref().unwrap_or("")
    }

    pub fn is(&self, kind: &str, status: &str) -> bool {
        self.kind() == kind && self.status.as_deref() == Some(status)
    }

    pub fn reason(&self) -> &str {
        self.reason.as_deref().unwrap_or("")
    }

    pub fn message(&self) -> &str {
        self.message.as_deref().unwrap_or("")
    }
}

/// The condition of `kind` in `conditions`, if there is one.
pub fn find<'a>(conditions: &'a Option<Vec<Condition>>, kind: &str) -> Option<&'a Condition> {
    conditions.iter().flatten().find(|c| c.kind() == kind)
}

/// Puts `condition` in place of the one of its type, keeping that one's
/// `lastTransitionTime` while the status stays (else the condition's own, else `now`).
pub fn set(conditions: &mut Vec<Condition>, mut condition: Condition, now: &str) {
    let existing = conditions.iter().position(|c| c.kind() == condition.kind());
    let kept = existing
        .map(|i| &conditions[i])
        .filter(|old| old.status == condition.status)
        .and_then(|old| old.last_transition_time.clone());
    condition.last_transition_time = kept
        .or(condition.last_transition_time)
        .or_else(|| Some(now.to_string()));
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}

/// `ObjectMeta` decoded in one pass with `managedFields` skipped unread.
pub struct WithoutManagedFields(pub ObjectMeta);

impl<'de> Deserialize<'de> for WithoutManagedFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// `ObjectMeta` without `managedFields`, which is then an unknown field, skipped.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Metadata {
            annotations: Option<BTreeMap<String, String>>,
            creation_timestamp: Option<Time>,
            deletion_grace_period_seconds: Option<i64>,
            deletion_timestamp: Option<Time>,
            finalizers: Option<Vec<String>>,
            generate_name: Option<String>,
            generation: Option<i64>,
            labels: Option<BTreeMap<String, String>>,
            name: Option<String>,
            namespace: Option<String>,
            owner_references: Option<Vec<OwnerReference>>,
            resource_version: Option<String>,
            self_link: Option<String>,
            uid: Option<String>,
        }
        let m = Metadata::deserialize(deserializer)?;
        Ok(WithoutManagedFields(ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }))
    }
}

/// Declares a kind: `metadata`, `spec` and `status` (each left out when written empty),
/// decoded in one pass with its metadata lean, and a `kube::Resource` for clients.
#[macro_export]
macro_rules! kube_object {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            group: $group:literal,
            version: $version:literal,
            kind: $kind:literal,
            plural: $plural:literal,
            scope: $scope:ident,
            spec: $spec:ty,
            status: $status:ty $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct $name {
            pub metadata: ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            pub spec: $spec,
            pub status: $status,
        }

        impl $name {
            pub const GROUP: &'static str = $group;
            pub const VERSION: &'static str = $version;
            pub const API_VERSION: &'static str =
                if $group.is_empty() { $version } else { concat!($group, "/", $version) };
            pub const KIND: &'static str = $kind;
            pub const PLURAL: &'static str = $plural;

            pub fn name(&self) -> &str {
                self.metadata.name.as_deref().unwrap_or("")
            }

            pub fn namespace(&self) -> &str {
                self.metadata.namespace.as_deref().unwrap_or("")
            }

            pub fn uid(&self) -> &str {
                self.metadata.uid.as_deref().unwrap_or("")
            }

            /// The owner reference of an object this one controls (a VM's VMI and
            /// DataVolumes): deleting this one deletes it.
            pub fn controller_reference(
                &self,
            ) -> ::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                ::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: Self::API_VERSION.into(),
                    kind: Self::KIND.into(),
                    name: self.name().to_string(),
                    uid: self.uid().to_string(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use ::serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("apiVersion", Self::API_VERSION)?;
                map.serialize_entry("kind", Self::KIND)?;
                map.serialize_entry("metadata", &self.metadata)?;
                if self.spec != <$spec>::default() {
                    map.serialize_entry("spec", &self.spec)?;
                }
                if self.status != <$status>::default() {
                    map.serialize_entry("status", &self.status)?;
                }
                map.end()
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Fields;
                impl<'de> ::serde::de::Visitor<'de> for Fields {
                    type Value = $name;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter) -> ::std::fmt::Result {
                        f.write_str(concat!("a ", $kind))
                    }
                    fn visit_map<A: ::serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$name, A::Error> {
                        let mut out = $name::default();
                        while let Some(key) = map.next_key::<::std::borrow::Cow<'de, str>>()? {
                            match key.as_ref() {
                                "metadata" => {
                                    out.metadata = map
                                        .next_value::<$crate::model::object::WithoutManagedFields>()?
                                        .0
                                }
                                "spec" => out.spec = map.next_value()?,
                                "status" => out.status = map.next_value()?,
                                // apiVersion and kind are the type's own.
                                _ => {
                                    map.next_value::<::serde::de::IgnoredAny>()?;
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                deserializer.deserialize_map(Fields)
            }
        }

        #[cfg(feature = "lean")]
        impl ::kube::Resource for $name {
            type DynamicType = ();
            type Scope = ::kube::core::$scope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                $kind.into()
            }

            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                $group.into()
            }

            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                $version.into()
            }

            fn api_version(_: &()) -> ::std::borrow::Cow<'_, str> {
                Self::API_VERSION.into()
            }

            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transition_time_stays_while_the_status_does() {
        let mut list = vec![];
        set(&mut list, Condition::new("Ready", "False", "A", "a"), "t1");
        set(&mut list, Condition::new("Ready", "False", "B", "b"), "t2");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].last_transition_time.as_deref(), Some("t1"));
        assert_eq!(list[0].reason(), "B");
        set(&mut list, Condition::new("Ready", "True", "", ""), "t3");
        assert_eq!(list[0].last_transition_time.as_deref(), Some("t3"));
        set(&mut list, Condition::new("Paused", "True", "", ""), "t4");
        assert_eq!(list.len(), 2);
        assert!(find(&Some(list), "Paused").is_some_and(|c| c.is("Paused", "True")));
    }
}
