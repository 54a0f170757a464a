//! Values as the in-memory store keeps them: LZ4 blocks with their size in front. A
//! KubeVirt object shrinks about 3x on its own, so 100,000 VMs take a third of the memory,
//! and the SQLite store writes and reads these very bytes, so nothing is compressed twice
//! and a restart loads the rows without decompressing them. Readers unpack what they read.
//!
//! Objects of one kind are mostly alike (field names, defaults, managedFields, often the
//! same template), so a value is packed against a [`Dictionary`]: the first value stored
//! under its key's resource prefix. LZ4 then copies whatever the two share from the
//! dictionary: a stored VM of 2.9 KB packs to about 170 bytes instead of 1.8 KB.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::{Event, EventKind, KeyValue, Revision, StoreError};

/// LZ4 turns one byte into at most 255; a size prefix beyond that is damage, and trusting
/// it would allocate up to 4 GiB for one value.
const MAX_EXPANSION: usize = 255;
/// Set in the size prefix of a value packed against a dictionary, whose id follows. No
/// value comes near 2 GiB, and values packed before dictionaries existed read as before.
const WITH_DICTIONARY: u32 = 1 << 31;
/// Values smaller than this gain little from a dictionary and make a poor one.
const MIN_DICTIONARY: usize = 256;
/// LZ4 looks back at most 64 KiB, so a larger dictionary would be wasted.
const MAX_DICTIONARY: usize = 64 * 1024;

/// A value that later values of its class are packed against. Never changes once made,
/// since packed values name it by id.
#[derive(Debug, PartialEq, Eq)]
pub struct Dictionary {
    pub id: u32,
    /// The keys' resource prefix it serves (see [`Dictionaries::class`]).
    pub class: String,
    pub bytes: Box<[u8]>,
}

/// The dictionaries of one store, by class and by id.
#[derive(Debug, Default)]
pub struct Dictionaries {
    by_class: HashMap<String, Arc<Dictionary>>,
    by_id: HashMap<u32, Arc<Dictionary>>,
}

impl Dictionaries {
    pub fn new(all: impl IntoIterator<Item = Dictionary>) -> Dictionaries {
        let mut dictionaries = Dictionaries::default();
        for dictionary in all {
            dictionaries.add(Arc::new(dictionary));
        }
        dictionaries
    }

    pub fn add(&mut self, dictionary: Arc<Dictionary>) {
        self.by_class
            .insert(dictionary.class.clone(), dictionary.clone());
        self.by_id.insert(dictionary.id, dictionary);
    }

    pub fn by_id(&self, id: u32) -> Option<&Arc<Dictionary>> {
        self.by_id.get(&id)
    }

    pub fn for_key(&self, key: &str) -> Option<&Arc<Dictionary>> {
        self.by_class.get(Self::class(key))
    }

    /// The id a dictionary made next gets.
    pub fn next_id(&self) -> u32 {
        self.by_id.keys().max().map_or(1, |id| id + 1)
    }

    /// The resource prefix of a key, `/registry/kubevirt.io/virtualmachines/` for
    /// `/registry/kubevirt.io/virtualmachines/ns/name`: its first three segments, or all
    /// but the last for a shorter key.
    pub fn class(key: &str) -> &str {
        let mut ends = key.match_indices('/').map(|(i, _)| i + 1);
        let end = ends
            .clone()
            .nth(3)
            .or_else(|| ends.next_back())
            .unwrap_or(0);
        &key[..end]
    }

    /// A dictionary made of `value` for `key`'s class, when it has none and the value is
    /// worth it.
    pub fn propose(&self, key: &str, value: &[u8], id: u32) -> Option<Dictionary> {
        let wanted = (MIN_DICTIONARY..=MAX_DICTIONARY).contains(&value.len());
        (wanted && self.for_key(key).is_none()).then(|| Dictionary {
            id,
            class: Self::class(key).to_owned(),
            bytes: value.into(),
        })
    }
}

thread_local! {
    /// A buffer for packing (LZ4's worst case) and for checking values read back.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One value, packed, with the dictionary it was packed against.
#[derive(Clone, Debug)]
pub struct Packed {
    bytes: Bytes,
    dictionary: Option<Arc<Dictionary>>,
}

impl PartialEq for Packed {
    fn eq(&self, other: &Packed) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Packed {}

impl Packed {
    /// Plain LZ4, for values of no class (and the upgrade of old databases).
    pub fn pack(value: &[u8]) -> Packed {
        Packed {
            bytes: lz4_flex::compress_prepend_size(value).into(),
            dictionary: None,
        }
    }

    pub fn pack_with(value: &[u8], dictionary: Option<&Arc<Dictionary>>) -> Packed {
        let Some(dictionary) = dictionary else {
            return Packed::pack(value);
        };
        // The block goes to a scratch buffer of LZ4's worst-case size and is then copied to
        // one allocation of its own size: a value packed into a buffer of the worst case
        // would keep that whole buffer (more than the value unpacked) for as long as it is
        // stored.
        let packed = SCRATCH.with_borrow_mut(|scratch| {
            scratch.resize(lz4_flex::block::get_maximum_output_size(value.len()), 0);
            let written =
                lz4_flex::block::compress_into_with_dict(value, scratch, &dictionary.bytes).ok()?;
            let mut bytes = Vec::with_capacity(8 + written);
            bytes.extend_from_slice(&(value.len() as u32 | WITH_DICTIONARY).to_le_bytes());
            bytes.extend_from_slice(&dictionary.id.to_le_bytes());
            bytes.extend_from_slice(&scratch[..written]);
            Some(bytes)
        });
        match packed {
            Some(bytes) => Packed {
                bytes: bytes.into(),
                dictionary: Some(dictionary.clone()),
            },
            // LZ4 refuses only an output buffer smaller than its worst case.
            None => Packed::pack(value),
        }
    }

    /// Bytes that `as_bytes` gave out earlier (read back from disk), checked by
    /// unpacking them into a scratch buffer, so that damage shows when a store opens
    /// rather than on some later read.
    pub fn from_packed(bytes: Bytes, dictionaries: &Dictionaries) -> Result<Packed, String> {
        let header = Header::read(&bytes)?;
        let dictionary = match header.dictionary {
            None => None,
            Some(id) => Some(
                dictionaries
                    .by_id(id)
                    .ok_or_else(|| {
                        format!("packed value names dictionary {id}, which is not stored")
                    })?
                    .clone(),
            ),
        };
        let packed = Packed { bytes, dictionary };
        SCRATCH.with_borrow_mut(|scratch| packed.unpack_into(scratch))?;
        Ok(packed)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn unpack(&self) -> Result<Bytes, String> {
        let mut out = Vec::new();
        self.unpack_into(&mut out)?;
        Ok(out.into())
    }

    fn unpack_into(&self, out: &mut Vec<u8>) -> Result<(), String> {
        let header = Header::read(&self.bytes)?;
        let block = &self.bytes[header.len..];
        out.resize(header.size, 0);
        let unpacked = match &self.dictionary {
            Some(dictionary) => {
                lz4_flex::block::decompress_into_with_dict(block, out, &dictionary.bytes)
            }
            None => lz4_flex::block::decompress_into(block, out),
        };
        match unpacked {
            Ok(n) if n == header.size => Ok(()),
            Ok(n) => Err(format!("packed value holds {n} bytes, not {}", header.size)),
            Err(e) => Err(format!("packed value is damaged: {e}")),
        }
    }
}

/// The front of a packed value: its unpacked size and the dictionary it needs.
struct Header {
    size: usize,
    dictionary: Option<u32>,
    /// Bytes before the LZ4 block.
    len: usize,
}

impl Header {
    fn read(bytes: &[u8]) -> Result<Header, String> {
        let word = |at: usize| {
            bytes
                .get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| "not a packed value: too short".to_string())
        };
        let first = word(0)?;
        let header = if first & WITH_DICTIONARY != 0 {
            Header {
                size: (first & !WITH_DICTIONARY) as usize,
                dictionary: Some(word(4)?),
                len: 8,
            }
        } else {
            Header {
                size: first as usize,
                dictionary: None,
                len: 4,
            }
        };
        let block = bytes.len() - header.len;
        // A block can also copy from its dictionary: up to 255 times the dictionary's
        // reach more. Either way the allocation a damaged prefix can ask for is bounded.
        let limit = block.saturating_mul(MAX_EXPANSION)
            + if header.dictionary.is_some() {
                MAX_DICTIONARY * MAX_EXPANSION
            } else {
                0
            };
        if header.size > limit {
            return Err(format!(
                "packed value claims {} bytes from {block} bytes",
                header.size
            ));
        }
        Ok(header)
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
    pub fn pack(kv: &KeyValue, dictionary: Option<&Arc<Dictionary>>) -> PackedKv {
        PackedKv {
            key: kv.key.clone(),
            value: Packed::pack_with(&kv.value, dictionary),
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
        let again = Packed::from_packed(
            Bytes::copy_from_slice(packed.as_bytes()),
            &Dictionaries::default(),
        )
        .unwrap();
        assert_eq!(again, packed);
    }

    fn dictionary() -> Arc<Dictionary> {
        Arc::new(Dictionary {
            id: 7,
            class: "/registry/g/r/".into(),
            bytes: br#"{"metadata":{"name":"first"},"spec":{"running":false}}"#[..].into(),
        })
    }

    #[test]
    fn packs_against_a_dictionary_and_reads_back_with_it() {
        let value = br#"{"metadata":{"name":"other"},"spec":{"running":false}}"#;
        let packed = Packed::pack_with(value, Some(&dictionary()));
        assert_eq!(packed.unpack().unwrap(), Bytes::from_static(value));
        let stored = Bytes::copy_from_slice(packed.as_bytes());
        let known = Dictionaries::new([Dictionary {
            id: 7,
            class: "/registry/g/r/".into(),
            bytes: dictionary().bytes.clone(),
        }]);
        let again = Packed::from_packed(stored.clone(), &known).unwrap();
        assert_eq!(again.unpack().unwrap(), Bytes::from_static(value));
        let missing = Packed::from_packed(stored, &Dictionaries::default()).unwrap_err();
        assert!(missing.contains("dictionary 7"), "{missing}");
    }

    /// What a stored value holds on to is its packed size: the 1.5 KiB object of a
    /// VM packs to a few hundred bytes, and a buffer of LZ4's worst case would keep more
    /// than the object itself.
    #[test]
    fn a_packed_value_holds_only_its_own_bytes() {
        let value = format!(
            r#"{{"metadata":{{"name":"other","labels":{{"a":"b"}}}},"spec":{}}}"#,
            "[\"running\",false],".repeat(60).trim_end_matches(',')
        );
        for dictionary in [None, Some(dictionary())] {
            let packed = Packed::pack_with(value.as_bytes(), dictionary.as_ref());
            let len = packed.as_bytes().len();
            assert!(len < value.len() / 4, "{len} of {}", value.len());
            let held = packed.bytes.try_into_mut().unwrap().capacity();
            assert_eq!(held, len, "dictionary: {}", dictionary.is_some());
        }
    }

    #[test]
    fn classes_are_resource_prefixes() {
        assert_eq!(
            Dictionaries::class("/registry/kubevirt.io/virtualmachines/ns/vm"),
            "/registry/kubevirt.io/virtualmachines/"
        );
        assert_eq!(
            Dictionaries::class("/registry/core/namespaces/ns"),
            "/registry/core/namespaces/"
        );
        assert_eq!(Dictionaries::class("/a/b"), "/a/");
        assert_eq!(Dictionaries::class("plain"), "");
    }

    #[test]
    fn damage_is_an_error_not_a_huge_allocation() {
        let none = Dictionaries::default();
        // A size prefix of 2 GiB in front of three bytes.
        let claims_too_much = Bytes::from_static(&[0xff, 0xff, 0xff, 0x7f, 1, 2, 3]);
        assert!(Packed::from_packed(claims_too_much, &none).is_err());
        let whole = Packed::pack(&[7u8; 1000]);
        let truncated = whole.as_bytes()[..whole.as_bytes().len() - 2].to_vec();
        assert!(Packed::from_packed(truncated.into(), &none).is_err());
        assert!(Packed::from_packed(Bytes::from_static(&[1, 0]), &none).is_err());
    }
}
