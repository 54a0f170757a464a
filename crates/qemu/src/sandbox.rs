//! QEMU's seccomp sandbox (`-sandbox`): which system calls a guest's QEMU may make.
//!
//! Every QEMU virtplane starts runs with [`SANDBOX`]: obsolete system calls, set*uid/gid,
//! fork/exec, and scheduler/priority changes are refused by the kernel, so a guest that
//! takes over its QEMU still cannot start programs or regain privileges. Nothing virtplane
//! asks of QEMU needs them: networking is user-mode (no tap helper to fork), migration and
//! NBD are plain sockets (no `exec:` URIs), and QEMU never changes its own uid (the agent
//! drops privileges before exec, see `crate::process`).
//!
//! A QEMU built without seccomp refuses `-sandbox on` outright. The node probes this once
//! at start with [`probe`]; libvirt (and so KubeVirt) applies the sandbox only where QEMU
//! supports it, and so do we, but loudly (see the node agent).

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The `-sandbox` argument: seccomp on, with every optional class of system calls denied.
pub const SANDBOX: &str = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/// Whether `binary` accepts [`SANDBOX`]: `Ok` when an empty machine started under it
/// and quit cleanly over QMP, else QEMU's own words for why not.
pub fn probe(binary: &Path) -> Result<(), String> {
    let mut child = std::process::Command::new(binary)
        .args(["-sandbox", SANDBOX])
        .args(["-machine", "none", "-nodefaults", "-display", "none"])
        .args(["-qmp", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A QEMU that already exited (no seccomp) closed its end: its stderr says why.
        let _ = stdin.write_all(b"{\"execute\":\"qmp_capabilities\"}\n{\"execute\":\"quit\"}\n");
    }
    let began = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if began.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("QEMU did not quit within 20 s under -sandbox".into());
            }
            Err(e) => return Err(format!("waiting for QEMU: {e}")),
        }
    };
    let mut said = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        use std::io::Read;
        let _ = stderr.read_to_string(&mut said);
    }
    if status.success() {
        Ok(())
    } else {
        let said = said.trim();
        Err(if said.is_empty() {
            format!("QEMU exited with {status} under -sandbox {SANDBOX}")
        } else {
            said.to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_an_error_not_a_panic() {
        let said = probe(Path::new("/nonexistent/qemu-system-x86_64")).unwrap_err();
        assert!(said.contains("cannot run"), "{said}");
    }

    #[test]
    fn a_binary_that_refuses_the_sandbox_is_reported_with_its_words() {
        // `false` stands in for a QEMU built without seccomp: it exits non-zero.
        let said = probe(Path::new("/bin/false")).unwrap_err();
        assert!(said.contains("exited with"), "{said}");
    }
}
