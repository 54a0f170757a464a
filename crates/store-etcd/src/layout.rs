//! Where the store's keys live in etcd.
//!
//! The server's keys are already laid out as kube-apiserver lays them
//! (`/registry/kubevirt.io/virtualmachines/NS/NAME`). A [`Layout`] replaces a leading `root`
//! of every key with `prefix`, as kube-apiserver's `--etcd-prefix` replaces `/registry`: the
//! default (`/registry` → `/registry`) keeps keys unchanged, `--etcd-prefix /tenant-a` puts
//! them under `/tenant-a/kubevirt.io/...`. Tests use an empty root and a unique prefix, so
//! every store they open is an isolated namespace of one etcd.

use store::StoreError;

#[derive(Clone, Debug)]
pub struct Layout {
    root: String,
    prefix: String,
}

impl Layout {
    /// Keys starting with `root` are stored with `prefix` in its place.
    pub fn new(root: impl Into<String>, prefix: impl Into<String>) -> Layout {
        Layout {
            root: root.into(),
            prefix: prefix.into(),
        }
    }

    /// The etcd key of a store key. A key outside the root cannot be mapped back
    /// unambiguously, so it is refused rather than stored somewhere surprising.
    pub fn to_etcd(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        let rest = key.strip_prefix(self.root.as_str()).ok_or_else(|| {
            StoreError::Backend(format!(
                "key {key:?} is outside this store's root {:?}",
                self.root
            ))
        })?;
        let mut out = Vec::with_capacity(self.prefix.len() + rest.len());
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(rest.as_bytes());
        Ok(out)
    }

    /// The store key of an etcd key this layout produced.
    pub fn from_etcd(&self, key: &[u8]) -> Result<String, StoreError> {
        let rest = key.strip_prefix(self.prefix.as_bytes()).ok_or_else(|| {
            StoreError::Backend(format!(
                "etcd returned key {:?} outside the prefix {:?}",
                String::from_utf8_lossy(key),
                self.prefix
            ))
        })?;
        let rest = std::str::from_utf8(rest).map_err(|_| {
            StoreError::Backend(format!(
                "etcd key {:?} is not UTF-8",
                String::from_utf8_lossy(key)
            ))
        })?;
        Ok(format!("{}{rest}", self.root))
    }

    /// A key under the prefix that no store key maps to (it starts with NUL after the
    /// prefix, which the server's keys never do), for requests that only want a header.
    pub fn probe_key(&self) -> Vec<u8> {
        let mut key = self.prefix.as_bytes().to_vec();
        key.extend_from_slice(b"\0virtplane-probe");
        key
    }
}

/// The end of etcd's range of keys starting with `prefix`: the prefix with its last byte
/// below 0xff incremented. An empty prefix (or all 0xff) means "every key", `\0` in etcd.
pub fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_keeps_kube_keys() {
        let layout = Layout::new("/registry", "/registry");
        let key = "/registry/kubevirt.io/virtualmachines/default/vm1";
        let etcd = layout.to_etcd(key).unwrap();
        assert_eq!(etcd, key.as_bytes());
        assert_eq!(layout.from_etcd(&etcd).unwrap(), key);
    }

    #[test]
    fn prefix_replaces_the_root() {
        let layout = Layout::new("/registry", "/tenant-a");
        let etcd = layout.to_etcd("/registry/core/namespaces/x").unwrap();
        assert_eq!(etcd, b"/tenant-a/core/namespaces/x");
        assert_eq!(
            layout.from_etcd(&etcd).unwrap(),
            "/registry/core/namespaces/x"
        );
        assert!(layout.to_etcd("/other/x").is_err());
        assert!(layout.from_etcd(b"/tenant-b/x").is_err());
    }

    #[test]
    fn range_end_increments_the_last_byte() {
        assert_eq!(range_end(b"/a/"), b"/a0");
        assert_eq!(range_end(b"a\xff"), b"b");
        assert_eq!(range_end(b""), b"\0");
        assert_eq!(range_end(b"\xff\xff"), b"\0");
    }
}
