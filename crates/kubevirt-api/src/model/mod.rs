//! The typed kubevirt.io objects every component reads and writes: one definition each of
//! a VirtualMachine ([`vm`]), a VirtualMachineInstance ([`vmi`]), a migration and a
//! MigrationPolicy ([`migration`]) and the KubeVirt configuration ([`config`]); CDI's
//! DataVolume and DataSource are in [`crate::cdi::model`]. Core kinds come from
//! `k8s-openapi`.
//!
//! Each part models the fields the code reads and keeps every other field as it was
//! ([`open`]), so an object read and written back by a controller loses nothing a user
//! wrote. Admission and validation walk the JSON instead, to report exact field paths.

pub mod config;
pub mod core;
pub mod migration;
pub mod object;
pub mod open;
pub mod vm;
pub mod vmi;

pub use migration::{MigrationPhase, MigrationPolicy, VirtualMachineInstanceMigration};
pub use object::Condition;
pub use vm::{RunStrategy, SpecStrategy, VirtualMachine};
pub use vmi::{MigrationState, VirtualMachineInstance, VmiPhase};
