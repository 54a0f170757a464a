//! Host paths built from spec values, kept where they belong.
//!
//! The API server validates names (DNS-1123) and hostDisk paths (lexically) before a
//! spec is stored; the agent checks again where a value becomes a path, because it is the
//! one that opens files as root, and because a lexical check cannot see symlinks: a
//! hostDisk `/allowed/disk.img` that is a link to `/etc/shadow` passes any check of the
//! string. So a host file is resolved ([`resolve_within`]) and QEMU is given the file it
//! resolves to, never the name from the spec.

use std::path::{Component, Path, PathBuf};

/// Checks that `value` can only name one entry of a directory: not empty, not `.` or
/// `..`, no `/` and no NUL, at most 255 bytes (a file name's limit). `what` names the
/// value in the message (`volume name`, `namespace`).
pub fn component(what: &str, value: &str) -> Result<(), String> {
    let fine = !value.is_empty()
        && value != "."
        && value != ".."
        && value.len() <= 255
        && !value.contains(['/', '\0']);
    if fine {
        Ok(())
    } else {
        Err(format!(
            "{what} {value:?} cannot be used as a file name on this node"
        ))
    }
}

/// The file `path` names once every symlink is followed, which must lie strictly inside
/// one of `dirs` (themselves resolved). `path` must be absolute, without `.` or `..`
/// parts, and its directory must exist; the file itself need not (a hostDisk of type
/// `DiskOrCreate`). `what` names the path in messages (`hostDisk /a/b.img`).
pub fn resolve_within(what: &str, path: &Path, dirs: &[PathBuf]) -> Result<PathBuf, String> {
    let outside = |resolved: &Path| {
        let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        let via = if resolved == path {
            String::new()
        } else {
            format!(" (it resolves to {})", resolved.display())
        };
        format!(
            "{what} is outside the directories this node allows ({}){via}",
            if dirs.is_empty() {
                "none".to_string()
            } else {
                dirs.join(", ")
            }
        )
    };
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(format!(
            "{what} must be an absolute path without '.' or '..' parts"
        ));
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(outside(path));
    };
    let parent = parent
        .canonicalize()
        .map_err(|e| format!("{what}: its directory {}: {e}", parent.display()))?;
    let named = parent.join(name);
    let resolved = match named.symlink_metadata() {
        // A link (even to a link) is followed to its end; one that leads nowhere is refused
        // rather than created through.
        Ok(_) => named
            .canonicalize()
            .map_err(|e| format!("{what}: following {}: {e}", named.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => named,
        Err(e) => return Err(format!("{what}: {}: {e}", named.display())),
    };
    let inside = dirs
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .any(|d| resolved.starts_with(&d) && resolved != d);
    if inside {
        Ok(resolved)
    } else {
        Err(outside(&resolved))
    }
}

/// Creates the file `path` (already resolved by [`resolve_within`]) with `len` bytes,
/// refusing to follow a symlink or to reuse a file that appeared since it was resolved.
pub fn create_new_file(path: &Path, len: u64) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    file.set_len(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_name_one_entry() {
        for fine in ["vm1", "a.b", "x_y-z", "..a", &"n".repeat(255)] {
            assert!(component("name", fine).is_ok(), "{fine}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "/etc",
            "../x",
            "a\0b",
            &"n".repeat(256),
        ] {
            let said = component("volume name", bad).unwrap_err();
            assert!(said.starts_with("volume name "), "{said}");
        }
    }

    struct Tree {
        _root: tempfile::TempDir,
        allowed: PathBuf,
        secret: PathBuf,
    }

    /// `allowed/` (with `disk.img`, a link out, a link in, a dangling link, a subdir
    /// link out) beside `secret`.
    fn tree() -> Tree {
        let root = tempfile::tempdir().unwrap();
        let allowed = root.path().join("allowed");
        std::fs::create_dir(&allowed).unwrap();
        let secret = root.path().join("secret");
        std::fs::write(&secret, "do not read").unwrap();
        std::fs::write(allowed.join("disk.img"), "").unwrap();
        let link = |to: &Path, at: PathBuf| std::os::unix::fs::symlink(to, at);
        link(&secret, allowed.join("out.img")).unwrap();
        link(&allowed.join("disk.img"), allowed.join("in.img")).unwrap();
        link(&root.path().join("nowhere"), allowed.join("dangling.img")).unwrap();
        link(root.path(), allowed.join("up")).unwrap();
        Tree {
            _root: root,
            allowed,
            secret,
        }
    }

    #[test]
    fn a_file_inside_resolves_to_itself_and_a_link_inside_to_its_target() {
        let t = tree();
        let dirs = [t.allowed.clone()];
        let disk = t.allowed.canonicalize().unwrap().join("disk.img");
        assert_eq!(
            resolve_within("d", &t.allowed.join("disk.img"), &dirs).unwrap(),
            disk
        );
        assert_eq!(
            resolve_within("d", &t.allowed.join("in.img"), &dirs).unwrap(),
            disk
        );
        // Not there yet (DiskOrCreate): its own name, in the resolved dir.
        assert_eq!(
            resolve_within("d", &t.allowed.join("new.img"), &dirs).unwrap(),
            t.allowed.canonicalize().unwrap().join("new.img")
        );
    }

    #[test]
    fn escapes_are_refused_with_where_they_lead() {
        let t = tree();
        let dirs = [t.allowed.clone()];
        let said = resolve_within("hostDisk x", &t.allowed.join("out.img"), &dirs).unwrap_err();
        assert!(
            said.contains("outside the directories this node allows"),
            "{said}"
        );
        assert!(
            said.contains(&t.secret.canonicalize().unwrap().display().to_string()),
            "{said}"
        );
        let said = resolve_within("d", &t.allowed.join("up/secret"), &dirs).unwrap_err();
        assert!(said.contains("outside"), "{said}");
        let said = resolve_within("d", &t.allowed.join("dangling.img"), &dirs).unwrap_err();
        assert!(said.contains("following"), "{said}");
        let dotted = PathBuf::from(format!("{}/../secret", t.allowed.display()));
        let said = resolve_within("d", &dotted, &dirs).unwrap_err();
        assert!(said.contains("'..'"), "{said}");
        let said = resolve_within("d", Path::new("relative/disk.img"), &dirs).unwrap_err();
        assert!(said.contains("absolute"), "{said}");
        // The allowed dir itself is not a disk.
        let said = resolve_within("d", &t.allowed, &dirs).unwrap_err();
        assert!(said.contains("outside"), "{said}");
        // No allowed dirs: nothing is inside.
        let said = resolve_within("d", &t.allowed.join("disk.img"), &[]).unwrap_err();
        assert!(said.contains("(none)"), "{said}");
        let said = resolve_within("d", &t.allowed.join("no/such/dir.img"), &dirs).unwrap_err();
        assert!(said.contains("its directory"), "{said}");
    }

    #[test]
    fn creating_never_follows_a_link_or_reuses_a_file() {
        let t = tree();
        let made = t.allowed.join("made.img");
        create_new_file(&made, 4096).unwrap();
        assert_eq!(std::fs::metadata(&made).unwrap().len(), 4096);
        assert!(create_new_file(&made, 1).is_err());
        assert!(create_new_file(&t.allowed.join("out.img"), 1).is_err());
        assert_eq!(std::fs::read_to_string(&t.secret).unwrap(), "do not read");
    }
}
