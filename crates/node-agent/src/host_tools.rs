//! The host programs and files a node uses for its guests besides QEMU itself, and how the
//! node says that one is missing: an error line at start, the Node condition
//! `virtplane.io/HostToolsReady`, and VMIs that fail at once naming it, since retrying
//! cannot help until somebody installs it.

use std::path::Path;

use kubevirt_api::names::conditions::HOST_TOOLS_READY;
use serde_json::{json, Value};

/// One thing the node needs on the host, and the Debian package that brings it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostTool {
    /// How users call it: the command, or the firmware's name.
    pub name: &'static str,
    pub package: &'static str,
    /// What cannot be done without it.
    pub without: &'static str,
    /// The Node condition's reason while it is missing.
    pub reason: &'static str,
    probe: Probe,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// An executable of this name on `PATH`.
    Command(&'static str),
    /// A readable file.
    File(&'static str),
}

pub const QEMU_IMG: HostTool = HostTool {
    name: "qemu-img",
    package: "qemu-utils",
    without: "VMIs with containerDisk, emptyDisk or DataVolume disks cannot start",
    reason: "QemuImgNotInstalled",
    probe: Probe::Command("qemu-img"),
};

pub const XORRISOFS: HostTool = HostTool {
    name: "xorrisofs",
    package: "xorriso",
    without: "VMIs with sysprep volumes cannot start",
    reason: "XorrisofsNotInstalled",
    probe: Probe::Command("xorrisofs"),
};

pub const OVMF: HostTool = HostTool {
    name: "OVMF",
    package: "ovmf",
    without: "VMIs with EFI firmware cannot start",
    reason: "OvmfNotInstalled",
    probe: Probe::File("/usr/share/OVMF/OVMF_CODE_4M.fd"),
};

/// What a node that runs guests with QEMU needs beside `qemu-system-x86_64`.
pub const QEMU_NODE: &[HostTool] = &[QEMU_IMG, XORRISOFS, OVMF];

impl HostTool {
    pub fn installed(&self) -> bool {
        match self.probe {
            Probe::Command(command) => on_path(command),
            Probe::File(path) => std::fs::File::open(path).is_ok(),
        }
    }

    /// The sentence a VMI, the Node and the log give when it is missing.
    pub fn missing_message(&self) -> String {
        format!(
            "{} is not installed on this node (Debian package {}; scripts/install-deps installs it)",
            self.name, self.package
        )
    }
}

fn on_path(command: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        let file = Path::new(&dir).join(command);
        std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Those of `tools` that are missing now.
pub fn missing(tools: &[HostTool]) -> Vec<HostTool> {
    tools.iter().filter(|t| !t.installed()).copied().collect()
}

/// The Node condition for `tools`, of which `missing` are missing (without its
/// transition time, which the caller keeps while the status stays).
pub fn condition(tools: &[HostTool], missing: &[HostTool]) -> Value {
    match missing {
        [] => json!({
            "type": HOST_TOOLS_READY, "status": "True", "reason": "HostToolsInstalled",
            "message": format!("found {}", names(tools)),
        }),
        [first, ..] => json!({
            "type": HOST_TOOLS_READY, "status": "False", "reason": first.reason,
            "message": missing.iter().map(|t| format!("{}: {}", t.missing_message(), t.without))
                .collect::<Vec<_>>().join("; "),
        }),
    }
}

/// A host's HostToolsReady condition, probed again at each heartbeat so that a tool
/// installed (or removed) while the agent runs shows without a restart.
pub struct Report {
    tools: &'static [HostTool],
    /// For the log lines: the node (or nodes) this host runs.
    host: String,
    condition: Value,
}

impl Report {
    /// Probes `tools` now and logs one error line for each that is missing; `None` for a
    /// backend that needs none.
    pub fn new(tools: &'static [HostTool], host: String) -> Option<Report> {
        if tools.is_empty() {
            return None;
        }
        let mut report = Report {
            tools,
            host,
            condition: Value::Null,
        };
        report.refresh();
        Some(report)
    }

    /// Probes again; the transition time stays while the status does. A tool that went
    /// missing since the last probe is logged.
    pub fn refresh(&mut self) -> &Value {
        let missing = missing(self.tools);
        let mut condition = condition(self.tools, &missing);
        let now = kubevirt_api::meta::now();
        let since = match self.condition.get("status") {
            Some(status) if *status == condition["status"] => {
                self.condition["lastTransitionTime"].clone()
            }
            _ => {
                for tool in &missing {
                    tracing::error!(
                        "node {}: {}: {}",
                        self.host,
                        tool.missing_message(),
                        tool.without
                    );
                }
                json!(now)
            }
        };
        condition["lastTransitionTime"] = since;
        condition["lastHeartbeatTime"] = json!(now);
        self.condition = condition;
        &self.condition
    }

    pub fn condition(&self) -> &Value {
        &self.condition
    }
}

fn names(tools: &[HostTool]) -> String {
    tools.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MISSING: HostTool = HostTool {
        name: "no-such-tool",
        package: "no-such-package",
        without: "nothing works",
        reason: "NoSuchToolNotInstalled",
        probe: Probe::Command("virtplane-no-such-tool"),
    };
    const PRESENT: HostTool = HostTool {
        name: "sh",
        package: "dash",
        without: "no shell",
        reason: "ShNotInstalled",
        probe: Probe::Command("sh"),
    };

    #[test]
    fn a_missing_tool_is_named_with_its_package_on_the_condition() {
        let tools = [PRESENT, MISSING];
        let missing = missing(&tools);
        assert_eq!(missing, vec![MISSING]);
        let c = condition(&tools, &missing);
        assert_eq!(c["type"], "virtplane.io/HostToolsReady");
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], "NoSuchToolNotInstalled");
        assert_eq!(
            c["message"],
            "no-such-tool is not installed on this node (Debian package no-such-package; \
             scripts/install-deps installs it): nothing works"
        );
    }

    #[test]
    fn all_tools_present_make_the_condition_true() {
        let c = condition(&[PRESENT], &missing(&[PRESENT]));
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "HostToolsInstalled");
        assert_eq!(c["message"], "found sh");
    }

    #[test]
    fn a_file_probe_needs_the_file() {
        let file = HostTool {
            probe: Probe::File("/nonexistent/virtplane/firmware.fd"),
            ..PRESENT
        };
        assert!(!file.installed());
        let file = HostTool {
            probe: Probe::File("/proc/self/status"),
            ..PRESENT
        };
        assert!(file.installed());
    }
}
