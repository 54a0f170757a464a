//! What a guest has used so far, as KubeVirt's domain stats report it: QEMU's CPU time
//! and each vCPU thread's (from `/proc`, as libvirt reads them), guest and resident
//! memory, each drive's I/O (QMP `query-blockstats`) and each interface's traffic (its
//! tap in QEMU's network namespace, from `/proc/<pid>/net/dev`).

use std::path::Path;

/// One guest's readings.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Readings {
    /// QEMU's user + system CPU time.
    pub cpu_seconds: f64,
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    /// Each vCPU's (index, seconds on a CPU).
    pub vcpu_seconds: Vec<(u64, f64)>,
    /// Each vCPU's (index, seconds it waited for a host CPU while runnable).
    pub vcpu_delay_seconds: Vec<(u64, f64)>,
    /// The guest's memory (`query-memory-size-summary`).
    pub memory_domain_bytes: Option<u64>,
    /// QEMU's resident set.
    pub memory_resident_bytes: Option<u64>,
    /// The guest's own account of its memory (the balloon's stats), once it gave one.
    pub guest_memory: Option<GuestMemory>,
    /// The guest's memory with the balloon taken out (`query-balloon`).
    pub actual_balloon_bytes: Option<u64>,
    /// QEMU's resident memory outside the guest's RAM: what running the guest costs
    /// beyond the memory it was given (`kubevirt_vmi_launcher_memory_overhead_bytes`).
    pub overhead_bytes: Option<u64>,
    pub drives: Vec<Drive>,
    pub interfaces: Vec<Interface>,
    /// The VMI's labels, which KubeVirt copies onto every series as `kubernetes_vmi_label_*`.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The outgoing migration, while the guest is being sent from here.
    pub migration: Option<Migration>,
    /// How long reading all this took (QMP round trips and `/proc`).
    pub read_seconds: f64,
}

/// The virtio balloon's guest stats, named as libvirt and KubeVirt name them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct GuestMemory {
    /// All the memory the guest's kernel sees (`stat-total-memory`).
    pub available_bytes: Option<u64>,
    /// Memory the guest leaves unused (`stat-free-memory`).
    pub unused_bytes: Option<u64>,
    /// Memory the guest could use without swapping (`stat-available-memory`).
    pub usable_bytes: Option<u64>,
    pub cached_bytes: Option<u64>,
    pub swap_in_bytes: Option<u64>,
    pub swap_out_bytes: Option<u64>,
    pub major_faults: Option<u64>,
    pub minor_faults: Option<u64>,
}

/// The stats of a `qom-get guest-stats` answer; `None` until the guest reported any (QEMU
/// says -1 for a stat the guest does not report, and 0 as the time of no report yet).
pub fn guest_memory(answer: &serde_json::Value) -> Option<GuestMemory> {
    if answer["last-update"].as_u64().unwrap_or(0) == 0 {
        return None;
    }
    let stat = |name: &str| answer["stats"][name].as_u64();
    Some(GuestMemory {
        available_bytes: stat("stat-total-memory"),
        unused_bytes: stat("stat-free-memory"),
        usable_bytes: stat("stat-available-memory"),
        cached_bytes: stat("stat-disk-caches"),
        swap_in_bytes: stat("stat-swap-in"),
        swap_out_bytes: stat("stat-swap-out"),
        major_faults: stat("stat-major-faults"),
        minor_faults: stat("stat-minor-faults"),
    })
}

/// An outgoing migration's progress, as QEMU's `query-migrate` reports it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Migration {
    pub processed_bytes: u64,
    pub remaining_bytes: u64,
    pub total_bytes: u64,
    pub dirty_rate_bytes: u64,
    pub transfer_rate_bytes: u64,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Drive {
    /// The disk's name in the VMI.
    pub name: String,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub flush_ops: u64,
    pub read_seconds: f64,
    pub write_seconds: f64,
    pub flush_seconds: f64,
}

/// Traffic as the guest sees it (its receive is what its tap sent).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Interface {
    /// The interface's name in the VMI.
    pub name: String,
    pub receive_bytes: u64,
    pub transmit_bytes: u64,
    pub receive_packets: u64,
    pub transmit_packets: u64,
    pub receive_errors: u64,
    pub transmit_errors: u64,
    pub receive_dropped: u64,
    pub transmit_dropped: u64,
}

/// User and system CPU seconds of a `/proc/.../stat` line.
pub fn cpu_times(stat: &str, ticks_per_second: f64) -> Option<(f64, f64)> {
    // The command name may hold spaces and parentheses: fields count from the last ')'.
    let after = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((user / ticks_per_second, system / ticks_per_second))
}

/// Seconds a task waited on a run queue, from its `/proc/.../schedstat` (nanoseconds on a
/// CPU, nanoseconds waiting, timeslices).
pub fn run_delay(schedstat: &str) -> Option<f64> {
    let waited: u64 = schedstat.split_whitespace().nth(1)?.parse().ok()?;
    Some(waited as f64 / 1e9)
}

/// `VmRSS` of a `/proc/<pid>/status`, in bytes.
pub fn resident_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Resident bytes of the guest's RAM in a `/proc/<pid>/smaps`: the mappings exactly as
/// large as the RAM QEMU was given (`guest_bytes`), which is how QEMU allocates it.
pub fn guest_ram_resident(smaps: &str, guest_bytes: u64) -> Option<u64> {
    let guest_kib = guest_bytes / 1024;
    let mut found = None;
    let mut size_kib = 0;
    for line in smaps.lines() {
        let kib = |field: &str| -> Option<u64> {
            line.strip_prefix(field)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        if let Some(size) = kib("Size:") {
            size_kib = size;
        } else if let Some(rss) = kib("Rss:") {
            if size_kib == guest_kib {
                *found.get_or_insert(0) += rss * 1024;
            }
        }
    }
    found
}

/// The counters of `/proc/<pid>/net/dev` for each device: (name, the 16 numbers).
pub fn net_dev(text: &str) -> Vec<(String, Vec<u64>)> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, numbers) = line.split_once(':')?;
            let numbers: Vec<u64> = numbers
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            (numbers.len() >= 16).then(|| (name.trim().to_string(), numbers))
        })
        .collect()
}

/// The guest's side of a tap's counters (`net_dev` order: receive bytes, packets,
/// errors, drops..., then transmit bytes at 8).
pub fn interface(name: &str, tap: &[u64]) -> Interface {
    Interface {
        name: name.to_string(),
        // What the tap received, the guest sent.
        transmit_bytes: tap[0],
        transmit_packets: tap[1],
        transmit_errors: tap[2],
        transmit_dropped: tap[3],
        receive_bytes: tap[8],
        receive_packets: tap[9],
        receive_errors: tap[10],
        receive_dropped: tap[11],
    }
}

/// The drives of a `query-blockstats` answer, named by their disks (`drive-<disk>`).
pub fn drives(blockstats: &serde_json::Value) -> Vec<Drive> {
    let number = |v: &serde_json::Value, key: &str| v[key].as_u64().unwrap_or(0);
    let seconds = |v: &serde_json::Value, key: &str| v[key].as_u64().unwrap_or(0) as f64 / 1e9;
    blockstats
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let node = entry["node-name"].as_str().unwrap_or("");
            let name = node.strip_prefix("drive-")?;
            let stats = &entry["stats"];
            Some(Drive {
                name: name.to_string(),
                read_bytes: number(stats, "rd_bytes"),
                write_bytes: number(stats, "wr_bytes"),
                read_ops: number(stats, "rd_operations"),
                write_ops: number(stats, "wr_operations"),
                flush_ops: number(stats, "flush_operations"),
                read_seconds: seconds(stats, "rd_total_time_ns"),
                write_seconds: seconds(stats, "wr_total_time_ns"),
                flush_seconds: seconds(stats, "flush_total_time_ns"),
            })
        })
        .collect()
}

/// The `/proc` readings of QEMU `pid` and its vCPU threads `(index, thread id)`.
pub fn from_proc(pid: u32, vcpus: &[(u64, u64)], readings: &mut Readings) {
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let proc = Path::new("/proc").join(pid.to_string());
    if let Some((user, system)) = std::fs::read_to_string(proc.join("stat"))
        .ok()
        .and_then(|s| cpu_times(&s, ticks))
    {
        readings.cpu_user_seconds = user;
        readings.cpu_system_seconds = system;
        readings.cpu_seconds = user + system;
    }
    readings.memory_resident_bytes = std::fs::read_to_string(proc.join("status"))
        .ok()
        .and_then(|s| resident_bytes(&s));
    readings.vcpu_seconds = vcpus
        .iter()
        .filter_map(|(index, thread)| {
            let stat = std::fs::read_to_string(proc.join(format!("task/{thread}/stat"))).ok()?;
            let (user, system) = cpu_times(&stat, ticks)?;
            Some((*index, user + system))
        })
        .collect();
    readings.vcpu_delay_seconds = vcpus
        .iter()
        .filter_map(|(index, thread)| {
            let schedstat =
                std::fs::read_to_string(proc.join(format!("task/{thread}/schedstat"))).ok()?;
            Some((*index, run_delay(&schedstat)?))
        })
        .collect();
}

/// QEMU's resident memory beyond the guest's RAM of `guest_bytes`: its resident set less
/// the guest RAM's share, both from one read of `/proc/PID/smaps` (which walks the guest's
/// page tables: milliseconds per GiB).
pub fn overhead(pid: u32, guest_bytes: u64) -> Option<u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let resident = total_resident(&smaps);
    let guest = guest_ram_resident(&smaps, guest_bytes)?;
    Some(resident.saturating_sub(guest))
}

/// The sum of every mapping's `Rss:` in an smaps text.
fn total_resident(smaps: &str) -> u64 {
    smaps
        .lines()
        .filter_map(|line| {
            line.strip_prefix("Rss:")?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum::<u64>()
        * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balloon_stats_read_once_the_guest_reported() {
        let none = serde_json::json!({"stats": {"stat-total-memory": -1}, "last-update": 0});
        assert_eq!(guest_memory(&none), None);
        let some = serde_json::json!({"last-update": 1700000000u64, "stats": {
            "stat-total-memory": 120_000_000u64, "stat-available-memory": 100_000_000u64,
            "stat-free-memory": 90_000_000u64, "stat-swap-in": -1}});
        let memory = guest_memory(&some).expect("stats");
        assert_eq!(memory.available_bytes, Some(120_000_000));
        assert_eq!(memory.usable_bytes, Some(100_000_000));
        assert_eq!(memory.swap_in_bytes, None);
    }

    #[test]
    fn the_guests_ram_is_the_mapping_of_its_size() {
        let smaps = "7f55c7e00000-7f55cfe00000 rw-p 00000000 00:00 0\nSize:             131072 kB\nRss:               40960 kB\n\
                     7f55d0000000-7f560ffff000 rwxp 00000000 00:00 0\nSize:            1048572 kB\nRss:                2048 kB\n";
        assert_eq!(guest_ram_resident(smaps, 128 << 20), Some(40 << 20));
        assert_eq!(total_resident(smaps), 42 << 20);
        assert_eq!(guest_ram_resident(smaps, 256 << 20), None);
    }

    #[test]
    fn proc_files_read_as_the_kernel_writes_them() {
        let stat = "4242 (qemu-system-x86 (x)) S 1 4242 4242 0 -1 4194560 3000 0 0 0 250 50 0 0 20 0 5 0 100 1000000 2000 18446744073709551615";
        assert_eq!(cpu_times(stat, 100.0), Some((2.5, 0.5)));
        // Cut or damaged lines read as nothing, never a panic.
        assert_eq!(cpu_times("4242 (qemu)", 100.0), None);
        assert_eq!(cpu_times("4242 (qemu) S 1 2", 100.0), None);
        assert_eq!(cpu_times("no parenthesis", 100.0), None);
        assert_eq!(run_delay("216043 1500000000 1\n"), Some(1.5));
        assert_eq!(run_delay("216043"), None);
        assert_eq!(
            resident_bytes("Name:\tqemu\nVmRSS:\t  204800 kB\n"),
            Some(200 * 1024 * 1024)
        );
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n  tap0: 1000 10 0 1 0 0 0 0 5000 50 0 0 0 0 0 0\n    lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        let devices = net_dev(dev);
        assert_eq!(devices[0].0, "tap0");
        let guest = interface("default", &devices[0].1);
        assert_eq!((guest.transmit_bytes, guest.receive_bytes), (1000, 5000));
        assert_eq!((guest.transmit_dropped, guest.receive_packets), (1, 50));
    }

    #[test]
    fn blockstats_name_drives_by_their_disks() {
        let answer = serde_json::json!([
            {"device": "", "node-name": "drive-root", "qdev": "/machine/peripheral/root/virtio-backend",
             "stats": {"rd_bytes": 4096, "wr_bytes": 512, "rd_operations": 8, "wr_operations": 1,
                       "flush_operations": 2, "rd_total_time_ns": 1_500_000_000u64}},
            {"device": "pflash0", "stats": {"rd_bytes": 1}}
        ]);
        let drives = drives(&answer);
        assert_eq!(drives.len(), 1);
        assert_eq!(drives[0].name, "root");
        assert_eq!((drives[0].read_bytes, drives[0].write_ops), (4096, 1));
        assert_eq!(drives[0].read_seconds, 1.5);
    }
}
