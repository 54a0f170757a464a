//! Values as the in-memory store keeps them: LZ4 blocks with their size in front. A
//! KubeVirt object shrinks about 3x, so 100,000 VMs take a third of the memory, and
//! the SQLite store writes and reads these very bytes, so nothing is compressed twice and
//! a restart loads the rows without decompressing them. Readers unpack what they read.

use bytes::Bytes;

use crate::{Event, EventKind, KeyValue, Revision, StoreError};

/// LZ4 turns one byte into at most 255; a size prefix beyond that is damage, and trusting
/// it would allocate up to 4 GiB for one value.
const MAX_EXPANSION: usize = 255;

/// One value, packed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed(Bytes);

impl Packed {
    pub fn pack(value: &[u8]) -> Packed {
        Packed(lz4_flex::compress_prepend_size(value).into())
    }

    /// Bytes that `as_bytes` gave out earlier (read back from disk), checked by
    /// unpacking them into a scratch buffer, so that damage shows when a store opens
    /// rather than on some later read.
    pub fn from_packed(bytes: Bytes) -> Result<Packed, String> {
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let (size, block) = lz4_flex::block::uncompressed_size(&bytes)
            .map_err(|e| format!("not a packed value: {e}"))?;
        if size > block.len().saturating_mul(MAX_EXPANSION) {
            return Err(format!(
                "packed value claims {size} bytes from {} bytes",
                block.len()
            ));
        }
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.resize(size, 0);
            match lz4_flex::block::decompress_into(block, scratch) {
                Ok(n) if n == size => Ok(()),
                Ok(n) => Err(format!("packed value holds {n} bytes, not {size}")),
                Err(e) => Err(format!("packed value is damaged: {e}")),
            }
        })?;
        Ok(Packed(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn unpack(&self) -> Result<Bytes, String> {
        lz4_flex::decompress_size_prepended(&self.0)
            .map(Bytes::from)
            .map_err(|e| format!("packed value is damaged: {e}"))
    }
}

/// A key with its packed value at some revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedKv {
    pub key: String,
    pub value: Packed,
    pub create_revision: Revision,
    pub mod_revision: Revision,
}

impl PackedKv {
    pub fn pack(kv: &KeyValue) -> PackedKv {
        PackedKv {
            key: kv.key.clone(),
            value: Packed::pack(&kv.value),
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
        }
    }

    pub fn unpack(&self) -> Result<KeyValue, StoreError> {
        let value = self.value.unpack().map_err(|e| {
            StoreError::Backend(format!("the stored value of {} is corrupt: {e}", self.key))
        })?;
        Ok(KeyValue {
            key: self.key.clone(),
            value,
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
        })
    }
}

/// A committed write as the store keeps it for watchers (see [`Event`]).
#[derive(Clone, Debug)]
pub struct Change {
    pub kind: EventKind,
    pub kv: PackedKv,
    pub prev: Option<PackedKv>,
}

impl Change {
    pub fn unpack(&self) -> Result<Event, StoreError> {
        Ok(Event {
            kind: self.kind,
            kv: self.kv.unpack()?,
            prev: self.prev.as_ref().map(PackedKv::unpack).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_unpacks() {
        let value = br#"{"metadata":{"name":"a"},"spec":{"running":false,"running2":false}}"#;
        let packed = Packed::pack(value);
        assert_eq!(packed.unpack().unwrap(), Bytes::from_static(value));
        let again = Packed::from_packed(Bytes::copy_from_slice(packed.as_bytes())).unwrap();
        assert_eq!(again, packed);
    }

    #[test]
    fn damage_is_an_error_not_a_huge_allocation() {
        // A size prefix of 4 GiB in front of three bytes.
        let claims_too_much = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]);
        assert!(Packed::from_packed(claims_too_much).is_err());
        let whole = Packed::pack(&[7u8; 1000]);
        let truncated = whole.as_bytes()[..whole.as_bytes().len() - 2].to_vec();
        assert!(Packed::from_packed(truncated.into()).is_err());
    }
}
