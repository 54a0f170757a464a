//! CDI's DataVolume and DataSource as typed objects. Their spec's parts are read through
//! [`super::Spec`] (the one definition of a DataVolume's source), which keeps the claim
//! as written.

use serde_json::Value;

use super::Phase;
use crate::model::Condition;

crate::kube_object! {
    /// `cdi.kubevirt.io/v1beta1` DataVolume: a claim and where its bytes come from.
    pub struct DataVolume {
        group: "cdi.kubevirt.io",
        version: "v1beta1",
        kind: "DataVolume",
        plural: "datavolumes",
        scope: NamespaceResourceScope,
        spec: DataVolumeSpec,
        status: DataVolumeStatus,
    }
}

crate::open_struct! {
    pub struct DataVolumeSpec {
        /// One of `http`, `registry`, `pvc`, `blank`, `upload`, ...
        source: Value = "source",
        /// A DataSource to take the source from.
        source_ref: Value = "sourceRef",
        /// The claim, as a PersistentVolumeClaim spec...
        pvc: Value = "pvc",
        /// ...or as CDI's storage API, whose gaps the StorageProfile fills.
        storage: Value = "storage",
    }
}

crate::open_struct! {
    pub struct DataVolumeStatus {
        phase: Phase = "phase",
        /// `45.20%`, or `N/A`.
        progress: String = "progress",
        restart_count: i64 = "restartCount",
        claim_name: String = "claimName",
        conditions: Vec<Condition> = "conditions",
    }
}

impl DataVolume {
    pub fn phase(&self) -> Phase {
        self.status.phase.unwrap_or_default()
    }

    /// What its spec says: the source (or the DataSource naming it) and the claim.
    pub fn parsed_spec(&self) -> super::Spec {
        super::Spec::of_parts(self.namespace(), &self.spec)
    }

    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        crate::model::object::find(&self.status.conditions, kind)
    }

    /// Why it failed: its Running condition's message, as CDI reports it.
    pub fn failure_message(&self) -> &str {
        self.condition(super::conditions::RUNNING)
            .map(Condition::message)
            .filter(|m| !m.is_empty())
            .unwrap_or("no reason given")
    }

    /// Whether its bytes come from an upload.
    pub fn is_upload(&self) -> bool {
        self.parsed_spec().origin == super::Origin::Source(super::Source::Upload)
    }
}

crate::kube_object! {
    /// `cdi.kubevirt.io/v1beta1` DataSource: a name for a claim that DataVolumes clone.
    pub struct DataSource {
        group: "cdi.kubevirt.io",
        version: "v1beta1",
        kind: "DataSource",
        plural: "datasources",
        scope: NamespaceResourceScope,
        spec: DataSourceSpec,
        status: DataSourceStatus,
    }
}

crate::open_struct! {
    pub struct DataSourceSpec {
        source: DataSourceSource = "source",
    }
}

crate::open_struct! {
    pub struct DataSourceSource {
        pvc: ClaimName = "pvc",
    }
}

crate::open_struct! {
    /// A claim by name, in a namespace (default: the referrer's).
    pub struct ClaimName {
        namespace: String = "namespace",
        name: String = "name",
    }
}

crate::open_struct! {
    pub struct DataSourceStatus {
        conditions: Vec<Condition> = "conditions",
    }
}
