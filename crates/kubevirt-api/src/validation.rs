//! Small re-implementations of the Go and Kubernetes helpers KubeVirt's webhooks lean on, so
//! our messages and edge cases match theirs: port names, `net.ParseMAC`, PCI addresses,
//! `filepath.Match` and `filepath.Clean`. DNS names and `%q` quoting are apimachinery's
//! (`meta_validation`).

use apimachinery::meta_validation::max_len_error;

/// apimachinery's `IsValidPortName`.
pub(crate) fn port_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 15 {
        errs.push(max_len_error(15));
    }
    if s.is_empty()
        || !s
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !s.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if s.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if s.starts_with('-') || s.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// Go's `net.ParseMAC`: the number of address bytes (6, 8 or 20), or `None` when malformed.
/// Accepts `aa:bb:..`, `aa-bb-..` and `aabb.ccdd...` spellings.
pub(crate) fn parse_mac(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.len() < 14 {
        return None;
    }
    let hex_pair = |i: usize| {
        b.get(i..i + 2)
            .is_some_and(|p| p.iter().all(u8::is_ascii_hexdigit))
    };
    let n = if b[2] == b':' || b[2] == b'-' {
        if !(b.len() + 1).is_multiple_of(3) {
            return None;
        }
        let n = (b.len() + 1) / 3;
        for i in 0..n {
            let x = i * 3;
            if !hex_pair(x) || (i + 1 < n && b[x + 2] != b[2]) {
                return None;
            }
        }
        n
    } else if b[4] == b'.' {
        if !(b.len() + 1).is_multiple_of(5) {
            return None;
        }
        let n = 2 * (b.len() + 1) / 5;
        for i in 0..n / 2 {
            let x = i * 5;
            if !hex_pair(x) || !hex_pair(x + 2) || (i + 1 < n / 2 && b[x + 4] != b'.') {
                return None;
            }
        }
        n
    } else {
        return None;
    };
    matches!(n, 6 | 8 | 20).then_some(n)
}

/// KubeVirt's PCI address form `dddd:bb:ss.f` (hex domain, bus, slot; function 0-7).
pub(crate) fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
}

/// Go's `filepath.Match` for patterns made of literals, `*` and `?` (what machine-type globs
/// use); `*` and `?` never match `/`.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative wildcard matching with backtracking to the last `*`.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == n[ni] || (p[pi] == '?' && n[ni] != '/')) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star.filter(|&(_, sn)| n[sn] != '/') {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Go's `filepath.Clean` on Unix: the shortest lexically equivalent path.
pub(crate) fn clean_path(path: &str) -> String {
    if path.is_empty() {
        return ".".to_string();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|last| *last != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_names() {
        assert!(port_name("http").is_empty());
        assert!(port_name("h-2").is_empty());
        assert_eq!(port_name("80").len(), 1);
        assert_eq!(port_name("-a--").len(), 2);
        assert_eq!(port_name("HTTP").len(), 2);
    }

    #[test]
    fn mac_addresses_follow_go() {
        assert_eq!(parse_mac("de:ad:00:00:be:af"), Some(6));
        assert_eq!(parse_mac("DE-AD-00-00-BE-AF"), Some(6));
        assert_eq!(parse_mac("dead.0000.beaf"), Some(6));
        assert_eq!(parse_mac("02:00:5e:10:00:00:00:01"), Some(8));
        assert_eq!(parse_mac("de:ad:00:00:be"), None);
        assert_eq!(parse_mac("de:ad-00:00:be:af"), None);
        assert_eq!(parse_mac("zz:ad:00:00:be:af"), None);
        assert_eq!(parse_mac("de:ad:00:00:be:af:00"), None);
        assert_eq!(parse_mac("dé:ad:00:00:be:af"), None);
    }

    #[test]
    fn pci_glob_clean() {
        assert!(is_pci_address("0000:81:01.7"));
        assert!(!is_pci_address("0000:81:01.8"));
        assert!(!is_pci_address("81:01.0"));
        assert!(glob_match("q35*", "q35"));
        assert!(glob_match("pc-q35*", "pc-q35-rhel9.4.0"));
        assert!(glob_match("pc", "pc"));
        assert!(!glob_match("pc", "pc-q35"));
        assert!(!glob_match("q35*", "x/q35"));
        assert!(!glob_match("q35*", "q35/x"));
        assert!(glob_match("a?c*", "abcde"));
        assert_eq!(clean_path("/a/b/../c/"), "/a/c");
        assert_eq!(clean_path("/../x"), "/x");
        assert_eq!(clean_path("a/../../b"), "../b");
        assert_eq!(clean_path("//"), "/");
        assert_eq!(clean_path(""), ".");
    }
}
