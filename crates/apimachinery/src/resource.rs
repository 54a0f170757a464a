//! What the API server needs to know to serve one kind: names, scope, subresources,
//! printer columns and the schema that prunes and validates it.

/// A column of `kubectl get` output (a CRD `additionalPrinterColumns` entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: &'static str,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub column_type: &'static str,
    pub json_path: &'static str,
    pub description: &'static str,
    /// Columns with priority > 0 show only with `-o wide`.
    pub priority: i32,
}

impl PrinterColumn {
    /// The Age column of a built-in kind, described as Kubernetes describes it.
    pub const AGE: PrinterColumn = PrinterColumn {
        name: "Age",
        column_type: "date",
        json_path: ".metadata.creationTimestamp",
        description: crate::table::AGE_COLUMN_DESCRIPTION,
        priority: 0,
    };

    /// The Age column a CRD declares (KubeVirt's), described as apiextensions describes it.
    pub const CRD_AGE: PrinterColumn = PrinterColumn {
        name: "Age",
        column_type: "date",
        json_path: ".metadata.creationTimestamp",
        description:
            "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp",
        priority: 0,
    };
}

/// A served resource type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub list_kind: &'static str,
    /// The plural lower-case name used in URLs.
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub namespaced: bool,
    /// Whether `/status` is a separate subresource (then the main endpoint ignores status).
    pub status_subresource: bool,
    pub printer_columns: &'static [PrinterColumn],
    /// Name of the root schema in the OpenAPI components, e.g. `io.kubevirt.v1.VirtualMachine`.
    pub schema_name: &'static str,
}

impl ResourceInfo {
    /// `kubevirt.io/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn group_resource(&self) -> crate::status::GroupResource {
        crate::status::GroupResource::new(self.group, self.plural)
    }

    pub fn group_kind(&self) -> crate::status::GroupKind {
        crate::status::GroupKind::new(self.group, self.kind)
    }
}
