//! The unprivileged users QEMU runs as when the agent is root: one uid per VMI.
//!
//! KubeVirt runs each QEMU as uid 107 inside its own virt-launcher pod, so VMs are kept
//! apart by the pod's mount namespace, not by the uid. Here every QEMU shares the host's
//! filesystem, so a single QEMU user would let a guest that takes over its QEMU open every
//! other VM's disks. Each VMI therefore gets its own uid (and primary gid, equal to it):
//! `base + 1 + slot`, the slot chosen from a hash of the VMI's uid and moved past slots
//! in use. The record of which uid a VMI has is the owner of its `run/` dir (below), so an
//! agent that restarts (and adopts its QEMUs) finds the same uid, and a VMI that migrates
//! between two nodes of one data dir keeps it (shared claim files stay usable).
//!
//! Layout, per VMI (`DIR/node/<node>/vmi/<ns>/<name>/`):
//! - the VMI dir: `root:<uid>` 0710. QEMU may pass through it but not list it, and can
//!   neither add nor replace an entry, so every file the agent writes there as root
//!   (its log, seeds, overlays, migration state and TLS files) stays the agent's;
//! - the files QEMU opens (overlays, empty disks, seeds, EFI variables, TLS credentials):
//!   `root:<uid>` 0660 (0640 read-only);
//! - `run/`: `<uid>:<uid>` 0700, where QEMU makes its sockets, pidfile and serial log.
//!
//! All QEMUs share the group `base` as a supplementary group, which may only pass
//! through `DIR`, `DIR/node/...`, `DIR/images` (the shared read-only image bases and
//! kernels) and `DIR/volumes/<ns>` (claim files, given to the VMI's group when it
//! starts); everything else directly in `DIR` (the store, keys, kubeconfigs) loses its
//! access for others. Another VMI's dir is `root:<its uid>` 0710: closed to this one.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use qemu::RunAs;

/// Slots per base: uids `base + 1 ..= base + SLOTS`.
pub const SLOTS: u32 = 65_536;
/// The default `--qemu-uid-base` (a range no distribution hands out).
pub const DEFAULT_BASE: u32 = 2_000_000_000;
/// QEMU's dir inside a VMI's dir.
pub const RUN_DIR: &str = "run";
/// Entries of the data dir QEMU must pass through; every other one is closed to it.
const SHARED: [&str; 3] = ["node", "images", "volumes"];

/// One assignment at a time in this process: two VMIs starting together must not both
/// find the same slot free.
static ASSIGNING: Mutex<()> = Mutex::new(());

#[derive(Clone, Debug)]
pub struct QemuUsers {
    base: u32,
    /// The group of /dev/kvm, which QEMU needs to open it.
    kvm_group: Option<u32>,
}

fn io(what: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", what.display())
}

fn chown(path: &Path, uid: Option<u32>, gid: Option<u32>) -> Result<(), String> {
    std::os::unix::fs::lchown(path, uid, gid).map_err(io(path))
}

fn chmod(path: &Path, mode: u32) -> Result<(), String> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(path))
}

/// FNV-1a: a stable hash (std's is randomised per process), so a VMI's preferred slot
/// is the same in every agent.
fn stable_hash(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

impl QemuUsers {
    /// Per-VMI users from `base`; `None` (QEMU runs as the agent's user) when the agent
    /// is not root, which alone may switch users, or when `base` is 0.
    pub fn new(base: u32) -> Option<QemuUsers> {
        if base == 0 || !rustix::process::geteuid().is_root() {
            return None;
        }
        let kvm_group = std::fs::metadata("/dev/kvm").ok().map(|m| m.gid());
        Some(QemuUsers { base, kvm_group })
    }

    /// The group every QEMU is in, for passing through the data dir.
    pub fn group(&self) -> u32 {
        self.base
    }

    fn in_range(&self, uid: u32) -> bool {
        uid > self.base && uid <= self.base + SLOTS
    }

    /// The user a VMI's QEMU runs as.
    pub fn run_as(&self, uid: u32) -> RunAs {
        let mut groups = vec![self.base];
        groups.extend(self.kvm_group.filter(|g| *g != 0));
        RunAs {
            uid,
            gid: uid,
            groups,
        }
    }

    /// The uid of the VMI whose dir is `vmi_dir` (under `DIR/node/<node>/vmi/`), chosen
    /// now if it has none, with the dir laid out for it (see the module comment).
    pub fn assign(&self, vmi_dir: &Path, vmi_uid: &str) -> Result<u32, String> {
        let _one = ASSIGNING.lock().unwrap_or_else(|p| p.into_inner());
        let run = vmi_dir.join(RUN_DIR);
        let owner = |dir: &Path| {
            std::fs::symlink_metadata(dir.join(RUN_DIR))
                .ok()
                .filter(|m| m.is_dir())
                .map(|m| m.uid())
        };
        let uid = match owner(vmi_dir).filter(|u| self.in_range(*u)) {
            Some(uid) => uid,
            None => {
                let (same_vmi, taken) = self.slots_in_use(vmi_dir, &owner);
                match same_vmi {
                    Some(uid) => uid,
                    None => self.free_uid(vmi_uid, &taken)?,
                }
            }
        };
        std::fs::create_dir_all(&run).map_err(io(&run))?;
        chown(vmi_dir, Some(0), Some(uid))?;
        chmod(vmi_dir, 0o710)?;
        chown(&run, Some(uid), Some(uid))?;
        chmod(&run, 0o700)?;
        self.open_path_to(vmi_dir)?;
        Ok(uid)
    }

    /// The uids of the VMI dirs of every node of this data dir, and the one of a dir of
    /// the same VMI (same namespace and name) on another node, if any.
    fn slots_in_use(
        &self,
        vmi_dir: &Path,
        owner: &dyn Fn(&Path) -> Option<u32>,
    ) -> (Option<u32>, HashMap<u32, PathBuf>) {
        let mut taken = HashMap::new();
        let mut same = None;
        let (Some(name), Some(ns_dir)) = (vmi_dir.file_name(), vmi_dir.parent()) else {
            return (None, taken);
        };
        let Some(namespace) = ns_dir.file_name() else {
            return (None, taken);
        };
        // DIR/node/<node>/vmi/<ns>/<name>: four levels up is DIR/node.
        let Some(nodes) = vmi_dir.ancestors().nth(4) else {
            return (None, taken);
        };
        let entries = |d: &Path| {
            std::fs::read_dir(d)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect::<Vec<_>>()
        };
        for node in entries(nodes) {
            for ns in entries(&node.join("vmi")) {
                for dir in entries(&ns) {
                    let Some(uid) = owner(&dir).filter(|u| self.in_range(*u)) else {
                        continue;
                    };
                    if dir != vmi_dir
                        && dir.file_name() == Some(name)
                        && ns.file_name() == Some(namespace)
                    {
                        same = Some(uid);
                    }
                    taken.insert(uid, dir);
                }
            }
        }
        (same, taken)
    }

    fn free_uid(&self, vmi_uid: &str, taken: &HashMap<u32, PathBuf>) -> Result<u32, String> {
        let start = stable_hash(vmi_uid) % SLOTS;
        (0..SLOTS)
            .map(|i| self.base + 1 + (start + i) % SLOTS)
            .find(|uid| !taken.contains_key(uid))
            .ok_or_else(|| format!("all {SLOTS} QEMU uids above {} are in use", self.base))
    }

    /// Lets the QEMU group pass through every dir from the data dir down to `dir`'s
    /// parent (never list them), and closes the data dir's other entries to it.
    fn open_path_to(&self, vmi_dir: &Path) -> Result<(), String> {
        // DIR/node/<node>/vmi/<ns>/<name>: DIR is five levels up.
        let Some(data_dir) = vmi_dir.ancestors().nth(5) else {
            return Ok(());
        };
        let mut dirs: Vec<&Path> = vmi_dir.ancestors().skip(1).take(5).collect();
        dirs.reverse();
        for dir in dirs {
            self.pass_through(dir)?;
        }
        self.close_others(data_dir)
    }

    /// `dir`, owned by root, in the QEMU group with `--x` for it and nothing for others.
    pub fn pass_through(&self, dir: &Path) -> Result<(), String> {
        let meta = std::fs::metadata(dir).map_err(io(dir))?;
        if meta.gid() != self.base {
            chown(dir, None, Some(self.base))?;
        }
        let mode = (meta.mode() & 0o700) | 0o010;
        if meta.mode() & 0o7777 != mode {
            chmod(dir, mode)?;
        }
        Ok(())
    }

    /// Takes every permission for others off the entries of the data dir that QEMU has
    /// no business in (the store, keys, kubeconfigs, uploads), and lets the QEMU group
    /// pass through the shared ones.
    fn close_others(&self, data_dir: &Path) -> Result<(), String> {
        for entry in std::fs::read_dir(data_dir).map_err(io(data_dir))?.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let shared = SHARED.iter().any(|s| name == *s);
            if shared {
                if path.is_dir() {
                    self.pass_through(&path)?;
                }
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.file_type().is_symlink() || meta.mode() & 0o007 == 0 {
                continue;
            }
            chmod(&path, meta.mode() & 0o7770)?;
        }
        Ok(())
    }

    /// Gives the VMI's QEMU (`uid`) a file the agent made or was given: it stays the
    /// agent's (QEMU cannot replace it), in the VMI's group, writable by it unless
    /// `read_only`.
    pub fn grant(&self, path: &Path, uid: u32, read_only: bool) -> Result<(), String> {
        let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
        if meta.file_type().is_symlink() {
            return Err(format!(
                "{}: a symlink is not given to QEMU",
                path.display()
            ));
        }
        chown(path, None, Some(uid))?;
        let group = if meta.is_dir() {
            0o050
        } else if read_only {
            0o040
        } else {
            0o060
        };
        chmod(path, (meta.mode() & 0o700) | group)
    }

    /// Lets the QEMU group pass through `dir` and its ancestors up to (not including)
    /// `/`, for files outside the data dir (a `--host-disk-dir`): only dirs that others
    /// cannot pass through already are changed.
    pub fn pass_through_tree(&self, dir: &Path) -> Result<(), String> {
        for d in dir.ancestors().filter(|d| d.parent().is_some()) {
            let meta = std::fs::metadata(d).map_err(io(d))?;
            if meta.mode() & 0o001 == 0 && meta.mode() & 0o010 == 0 {
                self.pass_through(d)?;
            } else if meta.mode() & 0o001 == 0 && meta.gid() != self.base {
                // Group-traversable, but for another group: others get `--x` instead.
                chmod(d, (meta.mode() & 0o7777) | 0o001)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preferred_slot_is_stable_and_spread() {
        assert_eq!(stable_hash("a"), stable_hash("a"));
        assert_ne!(stable_hash("uid-1") % SLOTS, stable_hash("uid-2") % SLOTS);
    }

    #[test]
    fn a_taken_slot_is_skipped_and_the_range_is_kept() {
        let users = QemuUsers {
            base: 1000,
            kvm_group: Some(36),
        };
        let first = users.free_uid("x", &HashMap::new()).unwrap();
        assert!(users.in_range(first));
        let taken = HashMap::from([(first, PathBuf::from("/other"))]);
        let second = users.free_uid("x", &taken).unwrap();
        assert_ne!(first, second);
        assert!(users.in_range(second));
        assert!(!users.in_range(1000) && !users.in_range(1000 + SLOTS + 1));
        assert_eq!(
            users.run_as(second),
            RunAs {
                uid: second,
                gid: second,
                groups: vec![1000, 36]
            }
        );
    }

    /// As root (the tests here run as root): two VMIs get different uids, the same VMI
    /// keeps its uid (also on another node of the data dir), and the dirs are laid out.
    #[test]
    fn assignment_and_layout() {
        let Some(users) = QemuUsers::new(DEFAULT_BASE) else {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: needs root");
            return;
        };
        let data = tempfile::tempdir().unwrap();
        std::fs::write(data.path().join("state.db"), "secrets").unwrap();
        chmod(&data.path().join("state.db"), 0o644).unwrap();
        let dir = |node: &str, name: &str| {
            let d = data
                .path()
                .join("node")
                .join(node)
                .join("vmi/ns")
                .join(name);
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let a = users.assign(&dir("n1", "a"), "uid-a").unwrap();
        let b = users.assign(&dir("n1", "b"), "uid-b").unwrap();
        assert_ne!(a, b);
        assert_eq!(users.assign(&dir("n1", "a"), "uid-a").unwrap(), a);
        assert_eq!(users.assign(&dir("n2", "a"), "uid-a").unwrap(), a);
        let meta = std::fs::metadata(dir("n1", "a")).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777),
            (0, a, 0o710)
        );
        let run = std::fs::metadata(dir("n1", "a").join(RUN_DIR)).unwrap();
        assert_eq!((run.uid(), run.gid(), run.mode() & 0o7777), (a, a, 0o700));
        let top = std::fs::metadata(data.path()).unwrap();
        assert_eq!((top.gid(), top.mode() & 0o077), (DEFAULT_BASE, 0o010));
        let db = std::fs::metadata(data.path().join("state.db")).unwrap();
        assert_eq!(db.mode() & 0o007, 0);
    }
}
