//! Everything virtplane needs from QEMU, with no Kubernetes types: a machine description
//! turned into a command line, a QMP client that tolerates schema differences between
//! QEMU versions, and a supervisor that starts, adopts and stops QEMU processes.

pub mod accel;
pub mod console;
pub mod machine;
pub mod migration;
pub mod process;
pub mod qmp;
pub mod run_state;
pub mod sandbox;
pub mod socket;

pub use accel::{Accel, AccelChoice};
pub use machine::Refused;
pub use machine::{
    Bus, CacheMode, Disk, DiskFormat, DiskMedia, Firmware, KernelBoot, MachineSpec, Nic,
    NicBackend, NicModel, PortForward, Protocol, WatchdogAction,
};
pub use process::{Instance, ProcessError, RunAs};
pub use qmp::{Qmp, QmpError};
pub use run_state::{RunState, RunStatus};
