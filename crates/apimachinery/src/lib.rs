//! Kubernetes API machinery shared by the API server and the resource definitions.

pub mod continue_token;
pub mod field;
pub mod go_base64;
pub mod gojson;
pub mod gonum;
pub mod identity;
pub mod jsonpath;
pub mod meta_validation;
pub mod names;
pub mod patch;
pub mod pointer;
pub mod resource;
pub mod schema;
pub mod selector;
pub mod ssa;
pub mod status;
pub mod table;
pub mod wsstream;
pub mod yaml;
