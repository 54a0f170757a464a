//! What a stream holds, told by its first bytes (never by the URL or file name).

/// The disk image format, after decompression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Raw,
    Qcow2,
}

/// A compression wrapped around the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    Xz,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Raw => "raw",
            Format::Qcow2 => "qcow2",
        }
    }
}

impl Compression {
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
        }
    }
}

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0x00];
const QCOW2_MAGIC: &[u8] = b"QFI\xfb";

/// How many leading bytes the detection wants to see (fewer only at the end of the
/// stream): the longest magic, and the qcow2 header fields read by [`Qcow2Header`].
pub(crate) const PREFIX_LEN: usize = 512;

pub(crate) fn compression(prefix: &[u8]) -> Option<Compression> {
    if prefix.starts_with(XZ_MAGIC) {
        Some(Compression::Xz)
    } else if prefix.starts_with(GZIP_MAGIC) {
        Some(Compression::Gzip)
    } else {
        None
    }
}

pub(crate) fn format(prefix: &[u8]) -> Format {
    if prefix.starts_with(QCOW2_MAGIC) {
        Format::Qcow2
    } else {
        Format::Raw
    }
}

/// The fields of a qcow2 header that let an import fail before the download: the
/// authoritative checks are qemu-img's, once the file is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Qcow2Header {
    pub virtual_size: u64,
    pub has_backing_file: bool,
}

impl Qcow2Header {
    /// `None` when the prefix is too short to hold the header's first 32 bytes.
    pub(crate) fn parse(prefix: &[u8]) -> Option<Qcow2Header> {
        if !prefix.starts_with(QCOW2_MAGIC) || prefix.len() < 32 {
            return None;
        }
        let be64 = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&prefix[at..at + 8]);
            u64::from_be_bytes(b)
        };
        Some(Qcow2Header {
            has_backing_file: be64(8) != 0,
            virtual_size: be64(24),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes_decide() {
        assert_eq!(compression(&[0x1f, 0x8b, 8, 0]), Some(Compression::Gzip));
        assert_eq!(
            compression(&[0xfd, b'7', b'z', b'X', b'Z', 0, 0]),
            Some(Compression::Xz)
        );
        assert_eq!(compression(&[0xfd, b'7', b'z']), None);
        assert_eq!(compression(b"QFI\xfb"), None);
        assert_eq!(compression(b""), None);
        assert_eq!(format(b"QFI\xfb\0\0\0\x03"), Format::Qcow2);
        assert_eq!(format(b"QFI"), Format::Raw);
        assert_eq!(format(&[0u8; 512]), Format::Raw);
    }

    #[test]
    fn qcow2_header_fields() {
        let mut h = vec![0u8; 72];
        h[..4].copy_from_slice(b"QFI\xfb");
        h[4..8].copy_from_slice(&3u32.to_be_bytes());
        h[24..32].copy_from_slice(&(1u64 << 30).to_be_bytes());
        assert_eq!(
            Qcow2Header::parse(&h),
            Some(Qcow2Header {
                virtual_size: 1 << 30,
                has_backing_file: false
            })
        );
        h[8..16].copy_from_slice(&0x200u64.to_be_bytes());
        assert!(Qcow2Header::parse(&h).unwrap().has_backing_file);
        assert_eq!(Qcow2Header::parse(&h[..31]), None);
        assert_eq!(Qcow2Header::parse(&[0u8; 72]), None);
    }
}
