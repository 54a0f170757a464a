//! Kubernetes API machinery shared by the API server and the resource definitions.

pub mod field;
pub mod status;
pub mod resource;
