//! Rules go to the kernel through `nft -f -`, one transaction per call: the table is
//! replaced whole or left as it was, never half-written.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::Stdio;

use crate::netns::NetNs;
use crate::sandbox::SandboxError;

fn io_failed(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
    let what = what.into();
    move |source| SandboxError::Io { what, source }
}

/// Runs `nft -f -` with `rules`, inside `ns` (`None`: this process's namespace).
pub fn apply(ns: Option<&NetNs>, rules: &str) -> Result<(), SandboxError> {
    let file = ns
        .map(|ns| {
            ns.open()
                .map_err(io_failed(format!("opening {}", ns.name())))
        })
        .transpose()?;
    let mut command = std::process::Command::new("nft");
    command
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(fd) = file.as_ref().map(AsRawFd::as_raw_fd) {
        // SAFETY: between fork and exec the child only makes the setns system call on a
        // descriptor opened before the fork.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                rustix::thread::move_into_link_name_space(
                    fd,
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(std::io::Error::from)
            });
        }
    }
    let mut child = command
        .spawn()
        .map_err(io_failed("running nft (Debian's nftables package)"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(rules.as_bytes())
            .map_err(io_failed("writing the rules to nft"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(io_failed("waiting for nft"))?;
    drop(file);
    if out.status.success() {
        Ok(())
    } else {
        Err(SandboxError::Io {
            what: "nft -f -".into(),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        })
    }
}

/// [`apply`] on a blocking thread (nft is a process to wait for), from async code.
pub async fn apply_blocking(ns: Option<NetNs>, rules: String) -> Result<(), SandboxError> {
    tokio::task::spawn_blocking(move || apply(ns.as_ref(), &rules))
        .await
        .map_err(|e| SandboxError::Io {
            what: "nft".into(),
            source: std::io::Error::other(e.to_string()),
        })?
}
