//! kubevirt.io/v1 resources: what they are called, their schemas, defaults and admission rules.
//!
//! Everything here works on `serde_json::Value` objects as clients sent them, so a wrong JSON
//! type anywhere becomes a field error instead of a deserialization failure or a panic.
//!
//! It is also where the controllers and the node agent share what both need
//! ([`backoff`], [`meta`], [`lean`]).

pub mod admission;
pub mod backoff;
pub mod cdi;
pub mod defaults;
pub mod devices;
#[cfg(feature = "lean")]
pub mod lean;
pub mod meta;
pub mod migratable;
pub mod model;
pub mod names;
pub mod resources;
pub mod schema;
pub mod vm_status;
pub mod volumes;

mod access;
pub mod quantity;
pub mod references;
mod typecheck;
mod validation;
