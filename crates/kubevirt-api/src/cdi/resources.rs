//! The cdi.kubevirt.io/v1beta1 kinds as the API server registers them: names, scope and
//! `kubectl get` columns as CDI's CRDs declare them.

use apimachinery::resource::{PrinterColumn, ResourceInfo};

pub const GROUP: &str = "cdi.kubevirt.io";
pub const VERSION: &str = "v1beta1";

const AGE: PrinterColumn = PrinterColumn {
    name: "Age",
    column_type: "date",
    json_path: ".metadata.creationTimestamp",
    description: "",
    priority: 0,
};

pub static DATA_VOLUME: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "DataVolume",
    list_kind: "DataVolumeList",
    plural: "datavolumes",
    singular: "datavolume",
    short_names: &["dv", "dvs"],
    categories: &["all"],
    namespaced: true,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn {
            name: "Phase",
            column_type: "string",
            json_path: ".status.phase",
            description: "The phase the data volume is in",
            priority: 0,
        },
        PrinterColumn {
            name: "Progress",
            column_type: "string",
            json_path: ".status.progress",
            description: "Transfer progress in percentage if known, N/A otherwise",
            priority: 0,
        },
        PrinterColumn {
            name: "Restarts",
            column_type: "integer",
            json_path: ".status.restartCount",
            description: "The number of times the transfer has been restarted.",
            priority: 0,
        },
        AGE,
    ],
    schema_name: "io.kubevirt.cdi.v1beta1.DataVolume",
};

pub static DATA_SOURCE: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "DataSource",
    list_kind: "DataSourceList",
    plural: "datasources",
    singular: "datasource",
    short_names: &["das"],
    categories: &["all"],
    namespaced: true,
    status_subresource: true,
    printer_columns: &[AGE],
    schema_name: "io.kubevirt.cdi.v1beta1.DataSource",
};

pub static STORAGE_PROFILE: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "StorageProfile",
    list_kind: "StorageProfileList",
    plural: "storageprofiles",
    singular: "storageprofile",
    short_names: &[],
    categories: &[],
    namespaced: false,
    status_subresource: true,
    printer_columns: &[AGE],
    schema_name: "io.kubevirt.cdi.v1beta1.StorageProfile",
};

/// CDI's cluster configuration, `config`: virtplane publishes the upload proxy's URL in
/// its status (virtctl's image-upload reads it).
pub static CDI_CONFIG: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "CDIConfig",
    list_kind: "CDIConfigList",
    plural: "cdiconfigs",
    singular: "cdiconfig",
    short_names: &[],
    categories: &[],
    namespaced: false,
    status_subresource: true,
    printer_columns: &[AGE],
    schema_name: "io.kubevirt.cdi.v1beta1.CDIConfig",
};

/// upload.cdi.kubevirt.io/v1beta1 UploadTokenRequest: served by the upload API (create
/// only), not stored.
pub static UPLOAD_TOKEN_REQUEST: ResourceInfo = ResourceInfo {
    group: "upload.cdi.kubevirt.io",
    version: "v1beta1",
    kind: "UploadTokenRequest",
    list_kind: "UploadTokenRequestList",
    plural: "uploadtokenrequests",
    singular: "uploadtokenrequest",
    short_names: &["utr", "utrs"],
    categories: &[],
    namespaced: true,
    status_subresource: false,
    printer_columns: &[],
    schema_name: "io.kubevirt.cdi.upload.v1beta1.UploadTokenRequest",
};
