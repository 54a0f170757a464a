//! The VMI spec rules shared by the VM and VMI webhooks (KubeVirt's
//! `ValidateVirtualMachineInstanceSpec`), in KubeVirt's order, plus the VMI-only memory and
//! architecture checks.

use apimachinery::field::{ErrorType, FieldError};
use serde_json::Value;

use super::{network, storage, Causes};
use crate::access::{at, bool_at, get, has, int_at, list_at, str_at};
use crate::defaults::DEFAULT_ARCHITECTURE;
use crate::quantity::{Quantity, FORMAT_ERROR};
use crate::typecheck;
use apimachinery::meta_validation::{is_dns1123_label, is_dns1123_subdomain};

use crate::validation::glob_match;

/// Machine types we accept, per architecture. KubeVirt allows `q35*` and `pc-q35*` on amd64;
/// we also accept the i440fx types `pc` and `pc-i440fx*` because our QEMU runs them.
fn emulated_machines(architecture: &str) -> &'static [&'static str] {
    match architecture {
        "arm64" => &["virt*"],
        "s390x" => &["s390-ccw-virtio*"],
        _ => &["q35*", "pc-q35*", "pc", "pc-i440fx*"],
    }
}

const CPU_FEATURE_POLICIES: [&str; 6] = ["", "force", "require", "optional", "disable", "forbid"];
const IO_THREADS_POLICIES: [&str; 3] = ["shared", "auto", "supplementalPool"];
const EVICTION_STRATEGIES: [&str; 4] = ["LiveMigrate", "LiveMigrateIfPossible", "None", "External"];

/// Validates a VMI spec found at `path_prefix` (`spec` for a VMI, `spec.template.spec` for a
/// VM's template) with the rules VMs and VMIs share. Wrong JSON types are reported first, and
/// alone, as the schema validator would.
pub fn validate_vmi_spec(spec: &Value, path_prefix: &str) -> Vec<FieldError> {
    let type_errors = typecheck::check(
        spec,
        "io.kubevirt.v1.VirtualMachineInstanceSpec",
        path_prefix,
    );
    if !type_errors.is_empty() {
        return type_errors;
    }
    let mut causes = Causes::default();
    rules(spec, path_prefix, &mut causes);
    causes.0
}

pub(super) fn rules(spec: &Value, p: &str, out: &mut Causes) {
    dns_names(spec, p, out);
    memory(spec, p, out);
    machine_type(spec, p, out);
    cpu(spec, p, out);
    start_strategy(spec, p, out);
    network::rules(spec, p, out);
    storage::boot_order(spec, p, out);
    inputs(spec, p, out);
    io_threads(spec, p, out);
    probes(spec, p, out);
    storage::disks(spec, p, out);
    firmware(spec, p, out);
    storage::volumes(spec, p, out);
    storage::container_disk_paths(spec, p, out);
    access_credentials(spec, p, out);
    eviction_strategy(spec, p, out);
    video(spec, p, out);
}

/// A quantity field, zero when unset (Go's `Requests.Memory()` and friends).
pub(super) fn quantity(spec: &Value, keys: &[&str]) -> Quantity {
    at(spec, keys)
        .and_then(Quantity::from_json)
        .unwrap_or_default()
}

/// A quantity as the user wrote it, `0` when unset, for messages.
pub(super) fn quantity_text(spec: &Value, keys: &[&str]) -> String {
    match at(spec, keys) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".to_string(),
    }
}

fn dns_names(spec: &Value, p: &str, out: &mut Causes) {
    let hostname = str_at(spec, &["hostname"]);
    if !hostname.is_empty() {
        let errs = is_dns1123_label(hostname);
        if !errs.is_empty() {
            out.add(
                ErrorType::Invalid,
                format!("{p}.hostname"),
                format!(
                    "{p}.hostname does not conform to the kubernetes DNS_LABEL rules : {}",
                    errs.join(", ")
                ),
            );
        }
    }
    let subdomain = str_at(spec, &["subdomain"]);
    if !subdomain.is_empty() {
        let errs = is_dns1123_subdomain(subdomain);
        if !errs.is_empty() {
            out.add(
                ErrorType::Invalid,
                format!("{p}.subdomain"),
                format!(
                    "{p}.subdomain does not conform to the kubernetes DNS_SUBDOMAIN rules : {}",
                    errs.join(", ")
                ),
            );
        }
    }
}

const REQ_MEMORY: [&str; 4] = ["domain", "resources", "requests", "memory"];
const LIM_MEMORY: [&str; 4] = ["domain", "resources", "limits", "memory"];
const REQ_CPU: [&str; 4] = ["domain", "resources", "requests", "cpu"];
const LIM_CPU: [&str; 4] = ["domain", "resources", "limits", "cpu"];

fn memory(spec: &Value, p: &str, out: &mut Causes) {
    let req_path = format!("{p}.domain.resources.requests.memory");
    let lim_path = format!("{p}.domain.resources.limits.memory");
    let (req, lim) = (quantity(spec, &REQ_MEMORY), quantity(spec, &LIM_MEMORY));
    let (req_text, lim_text) = (
        quantity_text(spec, &REQ_MEMORY),
        quantity_text(spec, &LIM_MEMORY),
    );
    let one_megabyte = Quantity::parse("1M").unwrap_or_default();
    if req.value() < 0 {
        out.add(
            ErrorType::Invalid,
            &req_path,
            format!("{req_path} '{req_text}': must be greater than or equal to 0."),
        );
    } else if req.value() > 0 && req < one_megabyte {
        out.add(
            ErrorType::Invalid,
            &req_path,
            format!("{req_path} '{req_text}': must be greater than or equal to 1M."),
        );
    }
    if lim.value() < 0 {
        out.add(
            ErrorType::Invalid,
            &lim_path,
            format!("{lim_path} '{lim_text}': must be greater than or equal to 0."),
        );
    }
    if lim.value() > 0 && req.value() > lim.value() {
        out.add(
            ErrorType::Invalid,
            &req_path,
            format!("{req_path} '{req_text}' is greater than {lim_path} '{lim_text}'"),
        );
    }

    if has(spec, &["domain", "memory", "hugepages"]) {
        let page_path = format!("{p}.domain.memory.hugepages.pageSize");
        let page_text = str_at(spec, &["domain", "memory", "hugepages", "pageSize"]);
        let Some(page) = Quantity::parse(page_text) else {
            out.add(
                ErrorType::Invalid,
                &page_path,
                format!("{page_path} '{page_text}': {FORMAT_ERROR}"),
            );
            return;
        };
        let mut vm_memory = req.value();
        if vm_memory == 0 {
            vm_memory = quantity(spec, &["domain", "memory", "guest"]).value();
        }
        if vm_memory == 0 {
            vm_memory = lim.value();
        }
        let page_size = page.value();
        if vm_memory != 0 && vm_memory < page_size {
            out.add(
                ErrorType::Invalid,
                &req_path,
                format!("{req_path} '{req_text}' must be equal to or larger than page size {page_path} '{page_text}'"),
            );
        } else if vm_memory.checked_rem(page_size).is_some_and(|r| r != 0) {
            out.add(
                ErrorType::Invalid,
                &req_path,
                format!("{req_path} '{req_text}' is not a multiple of the page size {page_path} '{page_text}'"),
            );
        }
    }
}

fn machine_type(spec: &Value, p: &str, out: &mut Causes) {
    let machine = str_at(spec, &["domain", "machine", "type"]);
    if machine.is_empty() {
        return;
    }
    let allowed = emulated_machines(str_at(spec, &["architecture"]));
    // KubeVirt's globs (`q35*`) match `q35,smm=on` too, which libvirt then refuses; a
    // virtplane node would hand it to QEMU's `-machine`, so only plain names pass here.
    let plain = machine
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !plain || !allowed.iter().any(|glob| glob_match(glob, machine)) {
        let path = format!("{p}.domain.machine.type");
        out.add(
            ErrorType::Invalid,
            &path,
            format!(
                "{path} is not supported: {machine} (allowed values: [{}])",
                allowed.join(" ")
            ),
        );
    }
}

/// Go's `GetNumberOfVCPUs`: the product of the topology fields that are set.
fn number_of_vcpus(spec: &Value) -> i64 {
    let n = |k: &str| int_at(spec, &["domain", "cpu", k]).unwrap_or(0);
    let mut vcpus = n("cores");
    for factor in [n("sockets"), n("threads")] {
        if factor != 0 {
            vcpus = if vcpus == 0 {
                factor
            } else {
                vcpus.saturating_mul(factor)
            };
        }
    }
    vcpus
}

fn cpu(spec: &Value, p: &str, out: &mut Causes) {
    let req_path = format!("{p}.domain.resources.requests.cpu");
    let lim_path = format!("{p}.domain.resources.limits.cpu");
    let (req, lim) = (quantity(spec, &REQ_CPU), quantity(spec, &LIM_CPU));
    let (req_text, lim_text) = (quantity_text(spec, &REQ_CPU), quantity_text(spec, &LIM_CPU));
    if req.milli_value() < 0 {
        out.add(
            ErrorType::Invalid,
            &req_path,
            format!("{req_path} '{req_text}': must be greater than or equal to 0."),
        );
    }
    if lim.milli_value() < 0 {
        out.add(
            ErrorType::Invalid,
            &lim_path,
            format!("{lim_path} '{lim_text}': must be greater than or equal to 0."),
        );
    }
    if lim.milli_value() > 0 && req.milli_value() > lim.milli_value() {
        out.add(
            ErrorType::Invalid,
            &req_path,
            format!("{req_path} '{req_text}' is greater than {lim_path} '{lim_text}'"),
        );
    }

    let dedicated = bool_at(spec, &["domain", "cpu", "dedicatedCpuPlacement"]) == Some(true);
    if dedicated {
        dedicated_cpus(spec, p, out);
    }
    if bool_at(spec, &["domain", "cpu", "isolateEmulatorThread"]) == Some(true) && !dedicated {
        out.add(
            ErrorType::Invalid,
            format!("{p}.domain.cpu.isolateEmulatorThread"),
            "IsolateEmulatorThread should be only set in combination with DedicatedCPUPlacement",
        );
    }
    for (i, feature) in list_at(spec, &["domain", "cpu", "features"])
        .iter()
        .enumerate()
    {
        let policy = str_at(feature, &["policy"]);
        if !CPU_FEATURE_POLICIES.contains(&policy) {
            out.add(
                ErrorType::NotSupported,
                format!("{p}.domain.cpu.features[{i}].policy"),
                format!(
                    "CPU feature {} uses policy {policy} that is not supported.",
                    str_at(feature, &["name"])
                ),
            );
        }
    }
    let max_sockets = int_at(spec, &["domain", "cpu", "maxSockets"]).unwrap_or(0);
    if max_sockets != 0 && int_at(spec, &["domain", "cpu", "sockets"]).unwrap_or(0) > max_sockets {
        out.add(
            ErrorType::Invalid,
            format!("{p}.domain.cpu.sockets"),
            "Number of sockets in CPU topology is greater than the maximum sockets allowed",
        );
    }
}

/// What `dedicatedCpuPlacement` needs: some memory, whole CPUs, and requests equal to limits.
fn dedicated_cpus(spec: &Value, p: &str, out: &mut Causes) {
    let req_mem_path = format!("{p}.domain.resources.requests.memory");
    let lim_mem_path = format!("{p}.domain.resources.limits.memory");
    let req_cpu_path = format!("{p}.domain.resources.requests.cpu");
    let lim_cpu_path = format!("{p}.domain.resources.limits.cpu");
    let cores_path = format!("{p}.domain.cpu.cores");
    let placement_path = format!("{p}.domain.cpu.dedicatedCpuPlacement");
    let (req_mem, lim_mem) = (quantity(spec, &REQ_MEMORY), quantity(spec, &LIM_MEMORY));
    let (req_cpu, lim_cpu) = (quantity(spec, &REQ_CPU), quantity(spec, &LIM_CPU));

    let guest_set = !quantity(spec, &["domain", "memory", "guest"]).is_zero();
    let memory_given = !lim_mem.is_zero()
        || !req_mem.is_zero()
        || (has(spec, &["domain", "memory"])
            && (has(spec, &["domain", "memory", "hugepages"]) || guest_set));
    if !memory_given {
        out.add(
            ErrorType::Invalid,
            &lim_mem_path,
            format!(
                "{req_mem_path}, {lim_mem_path}, {p}.domain.memory.hugepages or {p}.domain.memory.guest should be provided"
            ),
        );
    }
    let whole = |q: Quantity| q.value() <= 0 || q.value().saturating_mul(1000) == q.milli_value();
    if !whole(req_cpu) {
        out.add(
            ErrorType::Invalid,
            &req_cpu_path,
            "provided resources CPU requests must be an interger",
        );
    }
    if !whole(lim_cpu) {
        out.add(
            ErrorType::Invalid,
            &lim_cpu_path,
            "provided resources CPU limits must be an interger",
        );
    }
    if req_mem.value() > 0 && lim_mem.value() > 0 && req_mem.value() != lim_mem.value() {
        out.add(
            ErrorType::Invalid,
            &req_mem_path,
            format!("{req_mem_path} must be equal to {lim_mem_path}"),
        );
    }
    let vcpus = number_of_vcpus(spec);
    let (req, lim) = (req_cpu.value(), lim_cpu.value());
    if req == 0 && lim == 0 && vcpus == 0 {
        out.add(
            ErrorType::Invalid,
            &placement_path,
            format!(
                "either {req_cpu_path} or {lim_cpu_path} or {cores_path} must be provided when DedicatedCPUPlacement is true "
            ),
        );
    }
    if req > 0 && lim > 0 && req != lim {
        out.add(
            ErrorType::Invalid,
            &placement_path,
            format!("{req_cpu_path} or {lim_cpu_path} must be equal when DedicatedCPUPlacement is true "),
        );
    }
    if (req > 0 || lim > 0) && vcpus > 0 && req != vcpus && lim != vcpus {
        out.add(
            ErrorType::Invalid,
            &placement_path,
            format!(
                "{req_cpu_path} or {lim_cpu_path} must not be provided at the same time with {cores_path} when DedicatedCPUPlacement is true "
            ),
        );
    }
    let threads = int_at(spec, &["domain", "cpu", "threads"]).unwrap_or(0);
    if threads > 1 && str_at(spec, &["architecture"]) == "arm64" {
        out.add(
            ErrorType::Invalid,
            format!("{p}.architecture"),
            format!(
                "threads must not be greater than 1 at {p}.domain.cpu.threads (got {threads}) when {p}.architecture is arm64"
            ),
        );
    }
    if threads > 2 {
        out.add(
            ErrorType::Invalid,
            &placement_path,
            format!(
                "Not more than two threads must be provided at {p}.domain.cpu.threads (got {threads}) when DedicatedCPUPlacement is true"
            ),
        );
    }
}

fn start_strategy(spec: &Value, p: &str, out: &mut Causes) {
    let Some(strategy) = get(spec, "startStrategy") else {
        return;
    };
    let path = format!("{p}.startStrategy");
    let strategy = strategy.as_str().unwrap_or("");
    if strategy != "Paused" {
        out.add(
            ErrorType::Invalid,
            &path,
            format!("{path} is set with an unrecognized option: {strategy}"),
        );
    } else if has(spec, &["livenessProbe"]) {
        out.add(
            ErrorType::Invalid,
            &path,
            format!(
                "either {path} or {p}.livenessProbe should be provided.Pausing VMI with LivenessProbe is not supported"
            ),
        );
    }
}

fn inputs(spec: &Value, p: &str, out: &mut Causes) {
    for (i, input) in list_at(spec, &["domain", "devices", "inputs"])
        .iter()
        .enumerate()
    {
        if !matches!(str_at(input, &["bus"]), "virtio" | "usb" | "") {
            out.add(
                ErrorType::Invalid,
                format!("{p}.domain.devices.inputs[{i}].bus"),
                "Input device can have only virtio or usb bus.",
            );
        }
        if str_at(input, &["type"]) != "tablet" {
            out.add(
                ErrorType::Invalid,
                format!("{p}.domain.devices.inputs[{i}].type"),
                "Input device can have only tablet type.",
            );
        }
    }
}

fn io_threads(spec: &Value, p: &str, out: &mut Causes) {
    let Some(policy) = get(spec, "domain").and_then(|d| get(d, "ioThreadsPolicy")) else {
        return;
    };
    let policy = policy.as_str().unwrap_or("");
    if !IO_THREADS_POLICIES.contains(&policy) {
        out.add(
            ErrorType::Invalid,
            format!("{p}.domain.ioThreadsPolicy"),
            format!("Invalid IOThreadsPolicy ({policy})"),
        );
    }
    let pool = int_at(
        spec,
        &["domain", "ioThreads", "supplementalPoolThreadCount"],
    );
    if policy == "supplementalPool" && pool.is_none_or(|n| n < 1) {
        out.add(
            ErrorType::Invalid,
            format!("{p}.domain.ioThreads.count"),
            "the number of iothreads needs to be set and positive for the dedicated policy",
        );
    }
}

fn probes(spec: &Value, p: &str, out: &mut Causes) {
    const HANDLERS: [&str; 4] = ["httpGet", "tcpSocket", "exec", "guestAgentPing"];
    for name in ["readinessProbe", "livenessProbe"] {
        let Some(probe) = get(spec, name) else {
            continue;
        };
        let path = format!("{p}.{name}");
        let handlers = HANDLERS.iter().filter(|&&h| has(probe, &[h])).count();
        if handlers > 1 {
            out.add(
                ErrorType::Invalid,
                &path,
                format!("{path} must have exactly one probe type set"),
            );
        }
        if handlers < 1 {
            out.add(
                ErrorType::Required,
                &path,
                format!("either {path}.tcpSocket, {path}.exec or {path}.httpGet must be set if a {path} is specified"),
            );
        }
    }
    let pod_network = list_at(spec, &["networks"])
        .iter()
        .any(|n| has(n, &["pod"]));
    if !pod_network {
        for name in ["readinessProbe", "livenessProbe"] {
            for handler in ["httpGet", "tcpSocket"] {
                if has(spec, &[name, handler]) {
                    let path = format!("{p}.{name}.{handler}");
                    out.add(
                        ErrorType::Invalid,
                        &path,
                        format!("{path} is only allowed if the Pod Network is attached"),
                    );
                }
            }
        }
    }
}

fn firmware(spec: &Value, p: &str, out: &mut Causes) {
    let fw = format!("{p}.domain.firmware");
    if has(spec, &["domain", "firmware", "bootloader", "efi"])
        && has(spec, &["domain", "firmware", "bootloader", "bios"])
    {
        out.add(
            ErrorType::Invalid,
            format!("{fw}.bootloader"),
            format!("{fw}.bootloader has both EFI and BIOS configured, but they are mutually exclusive."),
        );
    }
    if let Some(kernel_boot) = at(spec, &["domain", "firmware", "kernelBoot"]) {
        let kb = format!("{fw}.kernelBoot");
        match get(kernel_boot, "container") {
            None => {
                if !str_at(kernel_boot, &["kernelArgs"]).is_empty() {
                    out.add(
                        ErrorType::Invalid,
                        format!("{kb}.kernelArgs"),
                        "kernel arguments cannot be provided without an external kernel",
                    );
                }
            }
            Some(container) => {
                let c = format!("{kb}.container");
                if str_at(container, &["image"]).is_empty() {
                    out.add(
                        ErrorType::Required,
                        format!("{c}.image"),
                        format!("{c} must be defined with an image"),
                    );
                }
                let kernel = str_at(container, &["kernelPath"]);
                let initrd = str_at(container, &["initrdPath"]);
                if kernel.is_empty() && initrd.is_empty() {
                    out.add(
                        ErrorType::Required,
                        &c,
                        format!("{c} must be defined with at least one of the following: kernelPath, initrdPath"),
                    );
                }
                if !kernel.is_empty() {
                    storage::absolute_path(&format!("{c}.kernelPath"), kernel, out);
                }
                if !initrd.is_empty() {
                    storage::absolute_path(&format!("{c}.initrdPath"), initrd, out);
                }
            }
        }
    }
    let secure_boot = has(spec, &["domain", "firmware", "bootloader", "efi"])
        && bool_at(
            spec,
            &["domain", "firmware", "bootloader", "efi", "secureBoot"],
        ) != Some(false);
    let smm = has(spec, &["domain", "features", "smm"])
        && bool_at(spec, &["domain", "features", "smm", "enabled"]) != Some(false);
    let tdx = has(spec, &["domain", "launchSecurity", "tdx"]);
    if secure_boot && !smm && !tdx {
        out.add(
            ErrorType::Invalid,
            format!("{p}.domain"),
            format!("{p}.domain has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled."),
        );
    }
}

fn access_credentials(spec: &Value, p: &str, out: &mut Causes) {
    let volumes = list_at(spec, &["volumes"]);
    let no_cloud = volumes.iter().any(|v| has(v, &["cloudInitNoCloud"]));
    let config_drive = volumes.iter().any(|v| has(v, &["cloudInitConfigDrive"]));
    for (i, credential) in list_at(spec, &["accessCredentials"]).iter().enumerate() {
        let path = format!("{p}.accessCredentials[{i}]");
        let mut kinds = 0;
        if let Some(ssh) = get(credential, "sshPublicKey") {
            kinds += 1;
            let method = format!("{path}.sshPublicKey.propagationMethod");
            let mut methods = 0;
            if has(ssh, &["propagationMethod", "noCloud"]) {
                methods += 1;
                if !no_cloud {
                    out.add(
                        ErrorType::Invalid,
                        &method,
                        format!(
                            "{path} requires a noCloud volume to exist when the noCloud propagationMethod is in use."
                        ),
                    );
                }
            }
            if has(ssh, &["propagationMethod", "configDrive"]) {
                methods += 1;
                if !config_drive {
                    out.add(
                        ErrorType::Invalid,
                        &method,
                        format!(
                            "{path} requires a configDrive volume to exist when the configDrive propagationMethod is in use."
                        ),
                    );
                }
            }
            if has(ssh, &["propagationMethod", "qemuGuestAgent"]) {
                if list_at(ssh, &["propagationMethod", "qemuGuestAgent", "users"]).is_empty() {
                    out.add(
                        ErrorType::Invalid,
                        format!("{method}.qemuGuestAgent.users"),
                        format!(
                            "{path} requires at least one user to be present in the users list"
                        ),
                    );
                }
                methods += 1;
            }
            credential_counts(
                &path,
                "sshPublicKey",
                has(ssh, &["source", "secret"]),
                methods,
                out,
            );
        }
        if let Some(password) = get(credential, "userPassword") {
            kinds += 1;
            let methods = usize::from(has(password, &["propagationMethod", "qemuGuestAgent"]));
            credential_counts(
                &path,
                "userPassword",
                has(password, &["source", "secret"]),
                methods,
                out,
            );
        }
        if kinds != 1 {
            out.add(
                ErrorType::Invalid,
                &path,
                format!("{path} must have exactly one access credential type set"),
            );
        }
    }
}

fn credential_counts(path: &str, kind: &str, has_source: bool, methods: usize, out: &mut Causes) {
    if !has_source {
        out.add(
            ErrorType::Invalid,
            format!("{path}.{kind}.source"),
            format!("{path} must have exactly one source set"),
        );
    }
    if methods != 1 {
        out.add(
            ErrorType::Invalid,
            format!("{path}.{kind}.propagationMethod"),
            format!("{path} must have exactly one propagationMethod set"),
        );
    }
}

fn eviction_strategy(spec: &Value, p: &str, out: &mut Causes) {
    if let Some(strategy) = get(spec, "evictionStrategy") {
        let strategy = strategy.as_str().unwrap_or("");
        if !EVICTION_STRATEGIES.contains(&strategy) {
            let path = format!("{p}.evictionStrategy");
            out.add(
                ErrorType::Invalid,
                &path,
                format!("{path} is set with an unrecognized option: {strategy}"),
            );
        }
    }
}

fn video(spec: &Value, p: &str, out: &mut Causes) {
    if has(spec, &["domain", "devices", "video"])
        && bool_at(spec, &["domain", "devices", "autoattachGraphicsDevice"]) == Some(false)
    {
        out.add(
            ErrorType::Invalid,
            format!("{p}.video"),
            "Video configuration is not allowed when autoattachGraphicsDevice is set to false",
        );
    }
}

/// VMI only: some memory must be requested (after defaulting, `memory.guest` usually is).
pub(super) fn memory_requested(spec: &Value, p: &str, out: &mut Causes) {
    if quantity(spec, &REQ_MEMORY).value() != 0 {
        return;
    }
    let memory = at(spec, &["domain", "memory"]);
    if memory.is_none_or(|m| !has(m, &["guest"]) && !has(m, &["hugepages"])) {
        out.add(
            ErrorType::Required,
            "",
            format!(
                "no memory requested, at least one of '{p}.domain.memory.guest', '{p}.domain.memory.hugepages.pageSize' or '{p}.domain.resources.requests.memory' must be set"
            ),
        );
    }
}

/// VMI only: devices the architecture supports, and the architecture itself. Only amd64 has
/// device checks here; arm64 and s390x are accepted as names (our nodes do not run them).
pub(super) fn per_architecture(spec: &Value, p: &str, out: &mut Causes) {
    let architecture = str_at(spec, &["architecture"]);
    match architecture {
        DEFAULT_ARCHITECTURE => {
            let watchdog = at(spec, &["domain", "devices", "watchdog"]);
            if watchdog.is_some_and(|w| !has(w, &["i6300esb"]) || has(w, &["diag288"])) {
                out.add(
                    ErrorType::NotSupported,
                    format!("{p}.domain.devices.watchdog"),
                    "amd64 only supports I6300ESB watchdog device",
                );
            }
            if has(spec, &["domain", "devices", "video"]) {
                let model = str_at(spec, &["domain", "devices", "video", "type"]);
                if !["vga", "cirrus", "virtio", "ramfb", "bochs"].contains(&model) {
                    out.add(
                        ErrorType::NotSupported,
                        format!("{p}.domain.devices.video.type"),
                        format!("video model '{model}' is not supported on amd64 architecture"),
                    );
                }
            }
        }
        "arm64" | "s390x" => {}
        other => out.add(
            ErrorType::Invalid,
            format!("{p}.architecture"),
            format!("unsupported architecture: {other}"),
        ),
    }
}

/// KubeVirt's `ValidateLiveUpdateMemory`: why `maxGuest` cannot be honoured, if it cannot.
pub(super) fn memory_hotplug_error(spec: &Value, max_guest: &Value) -> Option<String> {
    if has(spec, &["domain", "cpu", "realtime"]) {
        return Some("Memory hotplug is not compatible with realtime VMs".to_string());
    }
    if has(spec, &["domain", "cpu", "numa", "guestMappingPassthrough"]) {
        return Some("Memory hotplug is not compatible with guest mapping passthrough".to_string());
    }
    if has(spec, &["domain", "launchSecurity"]) {
        return Some("Memory hotplug is not compatible with encrypted VMs".to_string());
    }
    let one_gib: i64 = 1 << 30;
    let (alignment, alignment_text) =
        if str_at(spec, &["domain", "memory", "hugepages", "pageSize"]) == "1Gi" {
            (one_gib, "1Gi")
        } else {
            (2 << 20, "2Mi")
        };
    let Some(guest) = at(spec, &["domain", "memory", "guest"]) else {
        return Some("Guest memory must be configured when memory hotplug is enabled".to_string());
    };
    let guest = Quantity::from_json(guest).unwrap_or_default();
    let max_guest = Quantity::from_json(max_guest).unwrap_or_default();
    if guest > max_guest {
        return Some("Guest memory is greater than the configured maxGuest memory".to_string());
    }
    if guest.value() % alignment != 0 {
        return Some(format!("Guest memory must be {alignment_text} aligned"));
    }
    if max_guest.value() % alignment != 0 {
        return Some(format!("MaxGuest must be {alignment_text} aligned"));
    }
    if str_at(spec, &["architecture"]) != DEFAULT_ARCHITECTURE {
        return Some("Memory hotplug is only available for x86_64 VMs".to_string());
    }
    if guest.value() < one_gib {
        return Some(
            "Memory hotplug is only available for VMs with at least 1Gi of guest memory"
                .to_string(),
        );
    }
    None
}
