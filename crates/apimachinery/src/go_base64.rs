//! Base64 as Go's `encoding/base64.StdEncoding` reads it: Kubernetes decodes `[]byte`
//! fields (Secret `data`, ConfigMap `binaryData`) and KubeVirt its `*Base64` fields with it,
//! so what they accept and how they complain is what clients expect.

use base64::alphabet::STANDARD;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::{DecodeError, Engine};

/// Padding required, stray trailing bits tolerated.
const GO_STD: GeneralPurpose = GeneralPurpose::new(
    &STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes `text`, skipping `\r` and `\n` as Go does. The error is Go's
/// `CorruptInputError` text: `illegal base64 data at input byte N`.
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    let compact: String = text.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    GO_STD.decode(&compact).map_err(|e| {
        let offset = match e {
            DecodeError::InvalidByte(at, _) | DecodeError::InvalidLastSymbol(at, _) => at,
            DecodeError::InvalidLength(_) | DecodeError::InvalidPadding => compact.len(),
        };
        format!("illegal base64 data at input byte {offset}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_go() {
        assert_eq!(decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode("aGVs\r\nbG8=").unwrap(), b"hello");
        assert_eq!(decode("").unwrap(), b"");
        assert_eq!(
            decode("aGV$bG8=").unwrap_err(),
            "illegal base64 data at input byte 3"
        );
        // Padding is required.
        assert!(decode("aGVsbG8").is_err());
    }
}
