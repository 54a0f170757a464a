//! Which accelerator runs the guests' vCPUs: KVM only where a probe guest really runs
//! under it, software emulation (TCG) otherwise, or what the user forces.
//!
//! An open `/dev/kvm` proves little: nested and emulated hosts run real-mode code and
//! the kernel's decompressor under KVM, then stop with "KVM internal error" (or QEMU
//! aborts setting an MSR). So the probe boots the host's own kernel under KVM, without a
//! root disk, and counts KVM as usable only when that kernel reaches the end of its
//! initialisation (the root-mount panic) — seconds of real guest execution.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How the vCPUs of a guest run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    /// QEMU's name for it (`-machine accel=…`), also shown on Nodes and VMIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the user asked for with `--accel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccelChoice {
    /// KVM when the probe guest runs under it, TCG otherwise.
    Auto,
    Kvm,
    Tcg,
}

impl std::str::FromStr for AccelChoice {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            other => Err(format!(
                "{other:?} is not an accelerator: use auto, kvm or tcg"
            )),
        }
    }
}

/// The accelerator chosen, and why (for the log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub accel: Accel,
    pub why: String,
}

#[derive(Debug, thiserror::Error)]
pub enum AccelError {
    #[error("--accel kvm: cannot open /dev/kvm: {0}; use --accel tcg (software emulation) or --accel auto")]
    NoKvmDevice(std::io::Error),
}

/// Lines a Linux kernel prints only after it has initialised (drivers, filesystems) and
/// looks for its root or init: proof that the guest ran for real.
const LATE_KERNEL_LINES: &[&str] = &[
    "VFS: Unable to mount root fs",
    "Kernel panic - not syncing",
    "Run /init as init process",
    "Freeing unused kernel image",
];

/// What QEMU prints when KVM cannot run the guest.
const KVM_FAILURES: &[&str] = &[
    "KVM internal error",
    "emulation failure",
    "failed to set MSR",
    "kvm_buf_set_msrs",
];

/// Bump when the probe changes, so that an answer cached by an older probe is not reused.
const PROBE_VERSION: u32 = 2;

/// Picks the accelerator for `choice`. `Auto` probes (once per host boot, the answer is
/// cached in the temp dir); `Kvm` only checks that `/dev/kvm` opens.
pub fn choose(choice: AccelChoice, binary: &Path) -> Result<Chosen, AccelError> {
    match choice {
        AccelChoice::Tcg => Ok(Chosen {
            accel: Accel::Tcg,
            why: "forced with --accel tcg".into(),
        }),
        AccelChoice::Kvm => {
            open_kvm().map_err(AccelError::NoKvmDevice)?;
            Ok(Chosen {
                accel: Accel::Kvm,
                why: "forced with --accel kvm".into(),
            })
        }
        AccelChoice::Auto => Ok(probe_cached(binary)),
    }
}

fn open_kvm() -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
}

fn cache_file() -> PathBuf {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    std::env::temp_dir().join(format!(
        "virtplane-accel-probe-v{PROBE_VERSION}-{}",
        boot_id.trim()
    ))
}

fn probe_cached(binary: &Path) -> Chosen {
    let cache = cache_file();
    if let Ok(text) = std::fs::read_to_string(&cache) {
        if let Some((accel, why)) = text.split_once('\n') {
            let accel = match accel {
                "kvm" => Some(Accel::Kvm),
                "tcg" => Some(Accel::Tcg),
                _ => None,
            };
            if let Some(accel) = accel {
                return Chosen {
                    accel,
                    why: format!("{why} (probed earlier in this host boot)"),
                };
            }
        }
    }
    let chosen = probe(binary);
    if let Err(e) = std::fs::write(&cache, format!("{}\n{}", chosen.accel, chosen.why)) {
        tracing::warn!(
            "cannot cache the accelerator probe in {}: {e}",
            cache.display()
        );
    }
    chosen
}

fn tcg(why: impl Into<String>) -> Chosen {
    Chosen {
        accel: Accel::Tcg,
        why: why.into(),
    }
}

/// The newest kernel in /boot, to boot as the probe guest.
fn host_kernel() -> Option<PathBuf> {
    let mut kernels: Vec<PathBuf> = std::fs::read_dir("/boot")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz"))
        })
        .collect();
    kernels.sort();
    kernels.pop()
}

/// How long a kernel under working KVM may take to reach its root mount (about a second
/// on real hardware; generous for a loaded host).
const PROBE_DEADLINE: Duration = Duration::from_secs(20);

fn probe(binary: &Path) -> Chosen {
    if let Err(e) = open_kvm() {
        return tcg(format!("/dev/kvm cannot be opened ({e})"));
    }
    let Some(kernel) = host_kernel() else {
        return tcg("no kernel in /boot to prove that KVM runs a guest");
    };
    let dir = std::env::temp_dir().join(format!("virtplane-accel-probe-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return tcg(format!("cannot create {}: {e}", dir.display()));
    }
    let verdict = run_probe(binary, &kernel, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    verdict
}

fn run_probe(binary: &Path, kernel: &Path, dir: &Path) -> Chosen {
    let serial = dir.join("serial.log");
    let stderr = dir.join("qemu.log");
    let Ok(stderr_file) = std::fs::File::create(&stderr) else {
        return tcg("cannot create the probe's log");
    };
    // The same CPU model and machine a VM gets under KVM.
    let child = std::process::Command::new(binary)
        .args([
            "-accel", "kvm", "-cpu", "host", "-machine", "q35", "-m", "256",
        ])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .arg("-serial")
        .arg(format!("file:{}", serial.display()))
        .arg("-kernel")
        .arg(kernel)
        .args(["-append", "console=ttyS0 panic=-1 quiet loglevel=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr_file))
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return tcg(format!("cannot start {}: {e}", binary.display())),
    };
    let deadline = Instant::now() + PROBE_DEADLINE;
    let verdict = loop {
        // Whether it ended is asked before its output is read, so nothing it printed
        // just before ending is missed.
        let ended = child.try_wait();
        let console = std::fs::read_to_string(&serial).unwrap_or_default();
        let qemu_said = std::fs::read_to_string(&stderr).unwrap_or_default();
        if let Some(line) = LATE_KERNEL_LINES.iter().find(|l| console.contains(**l)) {
            break Chosen {
                accel: Accel::Kvm,
                why: format!("a probe kernel ran under KVM until {line:?}"),
            };
        }
        if let Some(failure) = KVM_FAILURES.iter().find(|f| qemu_said.contains(**f)) {
            break tcg(format!(
                "/dev/kvm opens but a probe guest died under KVM ({failure}: {})",
                first_line_with(&qemu_said, failure)
            ));
        }
        if let Ok(Some(status)) = ended {
            break tcg(format!(
                "/dev/kvm opens but QEMU ended the probe guest under KVM ({status}): {}",
                qemu_said.lines().last().unwrap_or("no message")
            ));
        }
        if Instant::now() >= deadline {
            break tcg(format!(
                "/dev/kvm opens but a probe kernel did not finish booting under KVM within {}s",
                PROBE_DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    verdict
}

fn first_line_with<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or("")
        .trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse() {
        assert_eq!("auto".parse::<AccelChoice>(), Ok(AccelChoice::Auto));
        assert_eq!("kvm".parse::<AccelChoice>(), Ok(AccelChoice::Kvm));
        assert_eq!("tcg".parse::<AccelChoice>(), Ok(AccelChoice::Tcg));
        assert!("hvf".parse::<AccelChoice>().is_err());
    }

    #[test]
    fn forced_tcg_never_probes() {
        let chosen = choose(AccelChoice::Tcg, Path::new("/nonexistent/qemu")).unwrap();
        assert_eq!(chosen.accel, Accel::Tcg);
    }

    #[test]
    fn a_kvm_failure_in_qemus_words_is_quoted() {
        let log = "warning: x\nKVM internal error. Suberror: 1\nemulation failure\n";
        assert_eq!(
            first_line_with(log, "KVM internal error"),
            "KVM internal error. Suberror: 1"
        );
    }
}
