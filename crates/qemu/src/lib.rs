//! Everything virtplane needs from QEMU, with no Kubernetes types: a machine description
//! turned into a command line, a QMP client that tolerates schema differences between
//! QEMU versions, and a supervisor that starts, adopts and stops QEMU processes.

pub mod machine;
pub mod process;
pub mod qmp;

pub use machine::{Bus, Disk, DiskMedia, Firmware, KernelBoot, MachineSpec, Nic, PortForward};
pub use process::{Instance, ProcessError};
pub use qmp::{Qmp, QmpError};
