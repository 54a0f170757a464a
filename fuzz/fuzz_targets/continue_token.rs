//! `?continue=` tokens: any string is a key to continue after or a 400 message, and the
//! tokens we issue for any key decode back to that key.
#![no_main]

use apimachinery::continue_token::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((rv, key)) = decode(text) {
        assert_ne!(rv, 0);
        assert!(!key.is_empty());
        assert_eq!(decode(&encode(rv, &key)), Ok((rv, key)));
    }
    // Issued tokens: `<8 bytes of rv>` then the key.
    if data.len() >= 8 {
        let rv = i64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
        if let Ok(key) = std::str::from_utf8(&data[8..]) {
            if let Ok((back_rv, back_key)) = decode(&encode(rv, key)) {
                // The token carries the key plus one NUL, and decoding drops exactly that
                // one; keys are relative, so a leading `/` reads as the same key (as upstream).
                let relative = key.strip_prefix('/').unwrap_or(key);
                assert_eq!((back_rv, back_key.as_str()), (rv, relative));
            }
        }
    }
});
