//! `metadata.generateName` expansion as kube-apiserver does it
//! (`k8s.io/apiserver/pkg/storage/names`): the prefix cut to 58 bytes plus five random
//! characters from an alphabet without vowels and confusable characters, so a generated
//! name is at most 63 bytes and never spells words.

use rand::Rng;

/// Characters of the random suffix (`k8s.io/apimachinery/pkg/util/rand`).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const RANDOM_LENGTH: usize = 5;
/// Longest prefix kept: 63 (the longest name a label can hold) minus the suffix.
pub const MAX_GENERATED_NAME_PREFIX_LENGTH: usize = 63 - RANDOM_LENGTH;

/// Returns `prefix` (truncated to 58 bytes, at a character boundary) plus a random suffix.
/// Callers retry on AlreadyExists, as upstream does.
pub fn generate_name(prefix: &str) -> String {
    let mut end = prefix.len().min(MAX_GENERATED_NAME_PREFIX_LENGTH);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    let mut name = String::with_capacity(end + RANDOM_LENGTH);
    name.push_str(&prefix[..end]);
    let mut rng = rand::rng();
    for _ in 0..RANDOM_LENGTH {
        name.push(char::from(ALPHANUMS[rng.random_range(0..ALPHANUMS.len())]));
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn suffix_ok(s: &str) -> bool {
        s.len() == RANDOM_LENGTH && s.bytes().all(|b| ALPHANUMS.contains(&b))
    }

    #[test]
    fn short_prefix_is_kept() {
        let name = generate_name("vm-");
        assert!(name.starts_with("vm-"));
        assert!(suffix_ok(&name[3..]), "{name}");
        assert!(suffix_ok(&generate_name("")));
    }

    #[test]
    fn long_prefix_is_truncated_to_58() {
        let prefix = "a".repeat(100);
        let name = generate_name(&prefix);
        assert_eq!(name.len(), 63);
        assert_eq!(&name[..58], &prefix[..58]);
        assert!(suffix_ok(&name[58..]));
        let exact = "b".repeat(58);
        assert!(generate_name(&exact).starts_with(&exact));
    }

    #[test]
    fn multibyte_prefix_does_not_panic() {
        let prefix = format!("{}é", "a".repeat(57));
        let name = generate_name(&prefix);
        assert!(name.starts_with(&"a".repeat(57)));
        assert!(suffix_ok(&name[57..]));
    }

    #[test]
    fn suffixes_vary_and_use_the_whole_alphabet() {
        let names: HashSet<String> = (0..200).map(|_| generate_name("x-")).collect();
        assert!(names.len() > 190);
        let used: HashSet<u8> = names.iter().flat_map(|n| n.bytes().skip(2)).collect();
        assert_eq!(used.len(), ALPHANUMS.len());
    }
}
