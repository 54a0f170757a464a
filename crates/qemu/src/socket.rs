//! Connecting to the unix sockets a QEMU made (monitor, console, VNC).
//!
//! QEMU creates them in a dir it owns, so it could put a symlink there instead, to
//! another VM's console for one: the agent, connecting as root, would follow it. A path
//! that is not a socket itself is refused. (Between this check and the connect QEMU could
//! still swap the entry; it must have been taken over already, and wins only a race.)

use std::path::Path;

/// Refuses `path` unless it is a socket (and so not a symlink to one).
pub fn check(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_socket() {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is not a socket", path.display()),
        ))
    }
}

/// [`check`], then connect.
pub async fn connect(path: &Path) -> std::io::Result<tokio::net::UnixStream> {
    check(path)?;
    tokio::net::UnixStream::connect(path).await
}

/// [`check`], then connect, blocking.
pub fn connect_blocking(path: &Path) -> std::io::Result<std::os::unix::net::UnixStream> {
    check(path)?;
    std::os::unix::net::UnixStream::connect(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_symlink_to_a_socket_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.sock");
        let _listener = tokio::net::UnixListener::bind(&real).unwrap();
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(connect(&real).await.is_ok());
        let refused = connect(&link).await.unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(connect_blocking(&link).is_err());
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(connect(&file).await.is_err());
    }
}
