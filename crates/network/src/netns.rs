//! Named network namespaces, as `ip netns` keeps them: a namespace made on a thread of its
//! own (`unshare`), held by a bind mount of that thread's namespace on
//! `/run/netns/NAME`, so that it outlives every process in it and `ip netns exec` finds
//! it. Netlink sockets belong to the namespace they were opened in, so a handle opened
//! on a thread that entered a namespace configures that namespace from anywhere.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::mount::UnmountFlags;
use rustix::thread::{LinkNameSpaceType, UnshareFlags};

pub const NETNS_DIR: &str = "/run/netns";

/// A named network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetNs {
    name: String,
}

fn context(what: String) -> impl FnOnce(rustix::io::Errno) -> io::Error {
    move |e| io::Error::new(io::Error::from(e).kind(), format!("{what}: {e}"))
}

impl NetNs {
    /// The namespace of this name (it may not exist).
    pub fn named(name: &str) -> NetNs {
        NetNs { name: name.into() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.name)
    }

    /// Whether the namespace is held (its file is a namespace, not a leftover file).
    pub fn exists(&self) -> bool {
        self.open().is_ok()
    }

    /// Makes the namespace, or finds it made (a setup repeated after a restart).
    pub fn create(name: &str) -> io::Result<NetNs> {
        let ns = NetNs::named(name);
        if ns.exists() {
            return Ok(ns);
        }
        std::fs::create_dir_all(NETNS_DIR)?;
        let path = ns.path();
        // A file left by a setup that died before the mount.
        let _ = std::fs::remove_file(&path);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let target = path.clone();
        let made = std::thread::spawn(move || -> io::Result<()> {
            // SAFETY: only the network namespace is unshared, on a thread that ends
            // here; no file descriptor table is split.
            unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }
                .map_err(context("unshare(CLONE_NEWNET)".into()))?;
            rustix::mount::mount_bind("/proc/thread-self/ns/net", &target)
                .map_err(context(format!("bind mount on {}", target.display())))
        })
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?;
        if let Err(e) = made {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(ns)
    }

    /// The namespace's file, to enter it or to move links into it.
    pub fn open(&self) -> io::Result<File> {
        let file = File::open(self.path())?;
        let nsfs = rustix::fs::fstatfs(&file)
            .map_err(context(format!("statfs {}", self.path().display())))?;
        // NSFS_MAGIC: a plain file left at the path is not a namespace.
        if nsfs.f_type as u64 != 0x6e73_6673 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not a network namespace", self.path().display()),
            ));
        }
        Ok(file)
    }

    /// Lets the namespace go (it ends once no process is left in it); gone already is
    /// no error.
    pub fn delete(&self) -> io::Result<()> {
        let path = self.path();
        match rustix::mount::unmount(&path, UnmountFlags::DETACH) {
            Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(context(format!("unmount {}", path.display()))(e)),
        }
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Runs `f` on a thread that entered this namespace (the caller's thread stays
    /// where it is), and returns what it returned.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        let file = self.open()?;
        std::thread::spawn(move || -> io::Result<T> {
            rustix::thread::move_into_link_name_space(
                file.as_fd(),
                Some(LinkNameSpaceType::Network),
            )
            .map_err(context("setns".into()))?;
            Ok(f())
        })
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
    }
}

/// A netlink handle on `ns` (`None`: this process's own namespace). Its connection runs
/// on the current tokio runtime until the handle and its clones are dropped.
pub fn netlink(ns: Option<&NetNs>) -> io::Result<rtnetlink::Handle> {
    let runtime = tokio::runtime::Handle::current();
    let open = move || {
        let _entered = runtime.enter();
        rtnetlink::new_connection()
    };
    let (connection, handle, _) = match ns {
        Some(ns) => ns.run(open)??,
        None => open()?,
    };
    tokio::spawn(connection);
    Ok(handle)
}
