//! The cluster's KubeVirt configuration: the `kubevirt.io/v1` KubeVirt object `kubevirt`
//! in namespace `kubevirt`.

use serde_json::Value;

use super::migration::NoStatus;

crate::kube_object! {
    /// `kubevirt.io/v1` KubeVirt.
    pub struct KubeVirt {
        group: "kubevirt.io",
        version: "v1",
        kind: "KubeVirt",
        plural: "kubevirts",
        scope: NamespaceResourceScope,
        spec: KubeVirtSpec,
        status: NoStatus,
    }
}

/// Where the configuration object lives.
pub const NAMESPACE: &str = "kubevirt";
pub const NAME: &str = "kubevirt";

crate::open_struct! {
    pub struct KubeVirtSpec {
        configuration: KubeVirtConfiguration = "configuration",
    }
}

crate::open_struct! {
    pub struct KubeVirtConfiguration {
        /// Settings of live migrations, as KubeVirt names them (merged with its defaults
        /// by the migration controller).
        migrations: Value = "migrations",
        /// What VMIs that set none get.
        eviction_strategy: String = "evictionStrategy",
    }
}
