//! The machine a report's figures were measured on, and what ran them: figures from
//! different machines do not compare, so the report says which one it was.

use std::process::Command;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    /// Whether `/dev/kvm` can run a guest is each bench's own finding (they print the
    /// accelerator); this says only whether the device is there.
    pub kvm_device: bool,
    pub qemu: String,
    pub etcd: String,
    pub rustc: String,
    /// `git describe --always --dirty` of the checkout the benches were built from.
    pub revision: String,
}

impl Machine {
    /// This machine, now.
    pub fn describe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            cpu: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory_gib: field(&meminfo, "MemTotal")
                .and_then(|kb| kb.trim_end_matches("kB").trim().parse::<f64>().ok())
                .map_or(0.0, |kb| (kb / 1024.0 / 1024.0 * 10.0).round() / 10.0),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            kvm_device: std::path::Path::new("/dev/kvm").exists(),
            qemu: first_line("qemu-system-x86_64", &["--version"]),
            etcd: first_line("etcd", &["--version"]),
            rustc: first_line("rustc", &["--version"]),
            revision: first_line("git", &["describe", "--always", "--dirty"]),
        }
    }
}

/// The value of `key : value` in a /proc file.
fn field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
        .filter(|v| !v.is_empty())
}

/// The first line `program args` prints, or why there is none.
fn first_line(program: &str, args: &[&str]) -> String {
    match Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
        Ok(out) => format!("`{program}` failed ({})", out.status),
        Err(_) => format!("no `{program}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fields_are_read_by_key() {
        let text = "processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\nflags\t\t: fpu\n";
        assert_eq!(
            field(text, "model name").as_deref(),
            Some("Some CPU @ 2.0GHz")
        );
        assert_eq!(field(text, "missing"), None);
    }

    #[test]
    fn a_missing_program_is_said() {
        assert_eq!(
            first_line("no-such-program-here", &[]),
            "no `no-such-program-here`"
        );
    }
}
