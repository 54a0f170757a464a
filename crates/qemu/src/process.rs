//! QEMU processes: started in their own process group so they outlive the agent, found
//! again after an agent restart through the pidfile and QMP socket, and stopped
//! gracefully (ACPI power button) or not.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::machine::MachineSpec;
use crate::qmp::{Qmp, QmpError};
use crate::run_state::{self, RunState, RunStatus};

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot start {binary}: {source}")]
    Spawn {
        binary: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the QEMU log {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the network namespace {path}: {source}")]
    Netns {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// QEMU exited before its monitor answered; the log tail says why.
    #[error("QEMU exited during start-up: {0}")]
    EarlyExit(String),
    #[error(transparent)]
    Qmp(#[from] QmpError),
    /// The machine description cannot become a safe command line.
    #[error("{0}")]
    Refused(#[from] crate::machine::Refused),
}

/// The unprivileged identity a QEMU runs as. The agent switches to it between fork and
/// exec, so QEMU never runs as root for an instant and needs no privilege of its own to
/// drop (which `-sandbox …,elevateprivileges=deny` would forbid anyway).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (e.g. `kvm`, for /dev/kvm); every other group is dropped.
    pub groups: Vec<u32>,
}

impl RunAs {
    /// Makes `command` exec as this user.
    fn apply(&self, command: &mut tokio::process::Command) {
        use rustix::process::{Gid, Uid};
        let groups: Vec<Gid> = self.groups.iter().map(|g| Gid::from_raw(*g)).collect();
        let gid = Gid::from_raw(self.gid);
        let uid = Uid::from_raw(self.uid);
        // SAFETY: the closure runs in the forked child before exec and makes only raw
        // system calls (setgroups, setgid, setuid) on values prepared before the fork:
        // no allocation, no lock. Groups and gid go first: after setuid they cannot.
        unsafe {
            command.pre_exec(move || {
                rustix::thread::set_thread_groups(&groups)?;
                rustix::thread::set_thread_gid(gid)?;
                rustix::thread::set_thread_uid(uid)?;
                Ok(())
            });
        }
    }
}

/// Makes `command` exec inside the network namespace `netns` (a Pod's, where its taps
/// are). Registered before [`RunAs::apply`]: entering needs the agent's privileges.
fn enter_netns(command: &mut tokio::process::Command, netns: &std::fs::File) {
    use std::os::fd::AsRawFd;
    let fd = netns.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and makes one raw system
    // call (setns) on a descriptor the parent keeps open until the spawn returns.
    unsafe {
        command.pre_exec(move || {
            let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
            rustix::thread::move_into_link_name_space(
                fd,
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            Ok(())
        });
    }
}

/// A running QEMU and its monitor.
pub struct Instance {
    pub pid: u32,
    pub qmp: Arc<Qmp>,
    status: watch::Receiver<RunStatus>,
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Whether process `pid` is the QEMU started with `-pidfile pidfile`. QEMU may write its
/// own pidfile (it runs as the owner of the dir that holds it): a pid that names another
/// process, which the agent as root would then signal, is not believed.
fn is_qemu_of(pid: u32, pidfile: &Path) -> bool {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let wanted = pidfile.as_os_str().as_encoded_bytes();
    let argv: Vec<&[u8]> = raw.split(|b| *b == 0).collect();
    argv.windows(2)
        .any(|w| w[0] == b"-pidfile" && w[1] == wanted)
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

impl Instance {
    /// Starts QEMU paused (`-S`) with its output in `log`, and connects to its monitor.
    pub async fn spawn(
        binary: &Path,
        spec: &MachineSpec,
        log: &Path,
    ) -> Result<Instance, ProcessError> {
        Self::launch(binary, spec, log, false).await
    }

    /// Starts QEMU as the target of a live migration (`-incoming defer`): it waits for
    /// `migrate-incoming` and, having received the guest, stays paused until continued.
    pub async fn spawn_incoming(
        binary: &Path,
        spec: &MachineSpec,
        log: &Path,
    ) -> Result<Instance, ProcessError> {
        Self::launch(binary, spec, log, true).await
    }

    async fn launch(
        binary: &Path,
        spec: &MachineSpec,
        log: &Path,
        incoming: bool,
    ) -> Result<Instance, ProcessError> {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|source| ProcessError::Log {
                path: log.to_path_buf(),
                source,
            })?;
        let log_err = log_file.try_clone().map_err(|source| ProcessError::Log {
            path: log.to_path_buf(),
            source,
        })?;
        let _ = std::fs::remove_file(&spec.qmp_socket);
        let mut argv = spec.argv()?;
        if incoming {
            argv.extend(["-incoming".to_string(), "defer".to_string()]);
        }
        let mut command = tokio::process::Command::new(binary);
        // Kept open until the spawn: the child enters it before it drops privileges.
        let netns = match &spec.netns {
            Some(path) => {
                Some(
                    std::fs::File::open(path).map_err(|source| ProcessError::Netns {
                        path: path.clone(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        if let Some(netns) = &netns {
            enter_netns(&mut command, netns);
        }
        if let Some(user) = &spec.run_as {
            user.apply(&mut command);
        }
        let mut child = command
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(log_err))
            // Its own process group: a signal to the agent's group must not reach the VM.
            .process_group(0)
            .kill_on_drop(false)
            .spawn()
            .map_err(|source| ProcessError::Spawn {
                binary: binary.display().to_string(),
                source,
            })?;
        let pid = child.id().unwrap_or_default();
        let qmp = tokio::select! {
            qmp = Qmp::connect(&spec.qmp_socket, Duration::from_secs(20)) => qmp,
            _ = child.wait() => return Err(ProcessError::EarlyExit(spec.explain(&tail(log)))),
        };
        let qmp = match qmp {
            Ok(qmp) => qmp,
            Err(e) => {
                // QEMU may have opened its monitor and then given up (a bad disk, a
                // missing file): its log says why, the broken monitor does not.
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), child.wait()).await
                {
                    return Err(ProcessError::EarlyExit(spec.explain(&tail(log))));
                }
                let _ = child.start_kill();
                return Err(e.into());
            }
        };
        // Reap the child when it exits, so it does not linger as a zombie.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        let qmp = Arc::new(qmp);
        let initial = if incoming {
            RunState::InMigrate
        } else {
            RunState::Prelaunch
        };
        let status = run_state::follow(Arc::downgrade(&qmp), initial);
        Ok(Instance { pid, qmp, status })
    }

    /// Finds a QEMU started earlier (by this agent before a restart) from its pidfile and
    /// monitor socket. `None` when it is not running.
    pub async fn adopt(pidfile: &Path, qmp_socket: &Path) -> Option<Instance> {
        let pid: u32 = std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()?;
        if !alive(pid) {
            return None;
        }
        if !is_qemu_of(pid, pidfile) {
            tracing::warn!(
                "{} names process {pid}, which is not the QEMU started with it: not adopted",
                pidfile.display()
            );
            return None;
        }
        let qmp = Qmp::connect(qmp_socket, Duration::from_secs(2))
            .await
            .ok()?;
        let qmp = Arc::new(qmp);
        // Events before this connection are gone: the state is read once, then followed.
        let state = match qmp.status().await {
            Ok(state) => RunState::parse(&state),
            Err(e) => {
                tracing::warn!("query-status of adopted QEMU {pid}: {e}");
                RunState::Other("unknown".into())
            }
        };
        let status = run_state::follow(Arc::downgrade(&qmp), state);
        Some(Instance { pid, qmp, status })
    }

    /// Lets go of the process without stopping it (what an agent restart does).
    pub async fn release(&self) {
        self.qmp.close().await;
    }

    pub async fn resume(&self) -> Result<(), QmpError> {
        self.qmp.execute("cont", None).await.map(|_| ())
    }

    pub async fn pause(&self) -> Result<(), QmpError> {
        self.qmp.execute("stop", None).await.map(|_| ())
    }

    /// Presses the ACPI power button.
    pub async fn power_down(&self) -> Result<(), QmpError> {
        self.qmp.execute("system_powerdown", None).await.map(|_| ())
    }

    pub async fn reset(&self) -> Result<(), QmpError> {
        self.qmp.execute("system_reset", None).await.map(|_| ())
    }

    /// Ends QEMU at once.
    pub fn kill(&self) {
        if alive(self.pid) {
            if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }

    pub fn exited(&self) -> bool {
        self.qmp.is_closed() || !alive(self.pid)
    }

    /// Why the guest stopped, from QEMU's SHUTDOWN event (`guest-shutdown` when the
    /// guest powered itself off); `None` when QEMU ended without one (a crash or a kill).
    pub fn shutdown_reason(&self) -> Option<String> {
        self.status.borrow().shutdown_reason.clone()
    }

    /// The guest's run state as QEMU last reported it.
    pub fn run_status(&self) -> RunStatus {
        self.status.borrow().clone()
    }

    /// A receiver that wakes on every change of the run status (and when QEMU ends).
    pub fn run_status_changes(&self) -> watch::Receiver<RunStatus> {
        self.status.clone()
    }
}
