//! The node's metrics: each guest's readings under KubeVirt's domain-stats names, with
//! the `node`, `namespace` and `name` labels virt-handler puts on every series and the
//! VMI's own labels as `kubernetes_vmi_label_*`; the progress of migrations sent from
//! here; the console, VNC and port-forward connections open now.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::connections::Kind;
use crate::readings::Readings;

type Seconds = Counter<f64, AtomicU64>;
type Labels = Vec<(String, String)>;

/// A family of `M`, registered under `name`.
fn family<M>(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, M>
where
    M: TypedMetric
        + prometheus_client::encoding::EncodeMetric
        + Default
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let family = Family::<Labels, M>::default();
    registry.register(name, help, family.clone());
    family
}

/// `base` and then `extra`.
fn with(base: &Labels, extra: &[(&str, &str)]) -> Labels {
    let mut labels = base.clone();
    labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    labels
}

/// What one scrape of a node found.
pub struct Scrape<'a> {
    pub node: &'a str,
    pub guests: &'a [((String, String), Readings)],
    pub connections: &'a [((Kind, String, String), i64)],
    /// How long reading the guests took, all of them at once.
    pub read_seconds: f64,
}

/// OpenMetrics text of a scrape: the node's guests and the connections open to them.
pub fn render(scrape: &Scrape<'_>) -> String {
    let Scrape {
        node,
        guests,
        connections,
        read_seconds,
    } = *scrape;
    let mut registry = Registry::default();
    let r = &mut registry;
    let node_read: Gauge<f64, AtomicU64> = Gauge::default();
    node_read.set(read_seconds);
    r.register(
        "virtplane_node_metrics_read_seconds",
        "How long this scrape took to read the node's guests (QMP and /proc), all at once",
        node_read,
    );
    let guest_read: Family<_, Gauge<f64, AtomicU64>> = family(
        r,
        "virtplane_vmi_metrics_read_seconds",
        "How long this scrape took to read the guest (QMP round trips and /proc)",
    );
    let cpu: Family<_, Seconds> = family(
        r,
        "kubevirt_vmi_cpu_usage_seconds",
        "Total CPU time spent in all modes (sum of both vcpu and hypervisor usage)",
    );
    let cpu_user: Family<_, Seconds> = family(
        r,
        "kubevirt_vmi_cpu_user_usage_seconds",
        "Total CPU time spent in user mode",
    );
    let cpu_system: Family<_, Seconds> = family(
        r,
        "kubevirt_vmi_cpu_system_usage_seconds",
        "Total CPU time spent in system mode",
    );
    let vcpu: Family<_, Seconds> = family(
        r,
        "kubevirt_vmi_vcpu_seconds",
        "Total amount of time spent in each state by each vcpu (cpu_time excluding hypervisor time)",
    );
    let vcpu_delay: Family<_, Seconds> = family(
        r,
        "kubevirt_vmi_vcpu_delay_seconds",
        "Amount of time spent by each vcpu waiting in the queue instead of running",
    );
    let domain: Family<_, Gauge> = family(
        r,
        "kubevirt_vmi_memory_domain_bytes",
        "The amount of memory in bytes allocated to the domain",
    );
    let resident: Family<_, Gauge> = family(
        r,
        "kubevirt_vmi_memory_resident_bytes",
        "Resident set size of the process running the domain",
    );
    let overhead: Family<_, Gauge> = family(
        r,
        "kubevirt_vmi_launcher_memory_overhead_bytes",
        "Memory the process running the domain holds beyond the guest's RAM",
    );
    let guest_gauge = |r: &mut Registry, name: &str, help: &str| -> Family<Labels, Gauge> {
        family(r, name, help)
    };
    let available = guest_gauge(
        r,
        "kubevirt_vmi_memory_available_bytes",
        "Amount of usable memory as seen by the domain. This value may not be accurate if a balloon driver is in use or if the guest OS does not initialize all assigned pages",
    );
    let unused = guest_gauge(
        r,
        "kubevirt_vmi_memory_unused_bytes",
        "The amount of memory left completely unused by the system. Memory that is available but used for reclaimable caches should NOT be reported as free",
    );
    let usable = guest_gauge(
        r,
        "kubevirt_vmi_memory_usable_bytes",
        "The amount of memory which can be reclaimed by balloon without pushing the guest system to swap, corresponds to 'Available' in /proc/meminfo",
    );
    let used = guest_gauge(
        r,
        "kubevirt_vmi_memory_used_bytes",
        "Amount of `used` memory as seen by the domain",
    );
    let cached = guest_gauge(
        r,
        "kubevirt_vmi_memory_cached_bytes",
        "The amount of memory that is being used to cache I/O and is available to be reclaimed, corresponds to the sum of `Buffers` + `Cached` + `SwapCached` in `/proc/meminfo`",
    );
    let swap_in = guest_gauge(
        r,
        "kubevirt_vmi_memory_swap_in_traffic_bytes",
        "The total amount of data read from swap space of the guest in bytes",
    );
    let swap_out = guest_gauge(
        r,
        "kubevirt_vmi_memory_swap_out_traffic_bytes",
        "The total amount of memory written out to swap space of the guest in bytes",
    );
    let balloon = guest_gauge(
        r,
        "kubevirt_vmi_memory_actual_balloon_bytes",
        "Current balloon size in bytes",
    );
    let major_faults: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_memory_pgmajfault",
        "The number of page faults when disk IO was required. Page faults occur when a process makes a valid access to virtual memory that is not available",
    );
    let minor_faults: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_memory_pgminfault",
        "The number of other page faults, when disk IO was not required. Page faults occur when a process makes a valid access to virtual memory that is not available",
    );
    let read_bytes: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_storage_read_traffic_bytes",
        "Total number of bytes read from storage",
    );
    let write_bytes: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_storage_write_traffic_bytes",
        "Total number of written bytes",
    );
    let read_ops: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_storage_iops_read",
        "Total number of I/O read operations",
    );
    let write_ops: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_storage_iops_write",
        "Total number of I/O write operations",
    );
    let flushes: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_storage_flush_requests",
        "Total storage flush requests",
    );
    let read_time: Family<_, Seconds> = family(
        r,
        "kubevirt_vmi_storage_read_times_seconds",
        "Total time spent on read operations",
    );
    let write_time: Family<_, Seconds> = family(
        r,
        "kubevirt_vmi_storage_write_times_seconds",
        "Total time spent on write operations",
    );
    let flush_time: Family<_, Seconds> = family(
        r,
        "kubevirt_vmi_storage_flush_times_seconds",
        "Total time spent on cache flushing",
    );
    let rx_bytes: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_network_receive_bytes",
        "Total network traffic received in bytes",
    );
    let tx_bytes: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_network_transmit_bytes",
        "Total network traffic transmitted in bytes",
    );
    let rx_packets: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_network_receive_packets",
        "Total network traffic received packets",
    );
    let tx_packets: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_network_transmit_packets",
        "Total network traffic transmitted packets",
    );
    let rx_errors: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_network_receive_errors",
        "Total network received error packets",
    );
    let tx_errors: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_network_transmit_errors",
        "Total network transmit error packets",
    );
    let rx_dropped: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_network_receive_packets_dropped",
        "The total number of rx packets dropped on vNIC interfaces",
    );
    let tx_dropped: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_network_transmit_packets_dropped",
        "The total number of tx packets dropped on vNIC interfaces",
    );
    let migration_total: Family<_, Counter> = family(
        r,
        "kubevirt_vmi_migration_data_bytes",
        "The total Guest OS data to be migrated to the new VM",
    );
    let migration_processed: Family<_, Gauge> = family(
        r,
        "kubevirt_vmi_migration_data_processed_bytes",
        "The total Guest OS data processed and migrated to the new VM",
    );
    let migration_remaining: Family<_, Gauge> = family(
        r,
        "kubevirt_vmi_migration_data_remaining_bytes",
        "The remaining guest OS data to be migrated to the new VM",
    );
    let migration_dirty: Family<_, Gauge> = family(
        r,
        "kubevirt_vmi_migration_dirty_memory_rate_bytes",
        "The rate of memory being dirty in the Guest OS",
    );
    let migration_rate: Family<_, Gauge> = family(
        r,
        "kubevirt_vmi_migration_memory_transfer_rate_bytes",
        "The rate at which the memory is being transferred",
    );

    for ((namespace, name), reading) in guests {
        let mut vmi: Labels = vec![
            ("node".into(), node.into()),
            ("namespace".into(), namespace.clone()),
            ("name".into(), name.clone()),
        ];
        vmi.extend(
            reading
                .labels
                .iter()
                .map(|(key, value)| (metrics::vmi_label_name(key), value.clone())),
        );
        // A guest whose driver was busy reports its migration alone, not zeroes.
        if reading.memory_resident_bytes.is_some() {
            guest_read.get_or_create(&vmi).set(reading.read_seconds);
            cpu.get_or_create(&vmi).inc_by(reading.cpu_seconds);
            cpu_user
                .get_or_create(&vmi)
                .inc_by(reading.cpu_user_seconds);
            cpu_system
                .get_or_create(&vmi)
                .inc_by(reading.cpu_system_seconds);
        }
        for (id, seconds) in &reading.vcpu_delay_seconds {
            let id = id.to_string();
            vcpu_delay
                .get_or_create(&with(&vmi, &[("id", &id)]))
                .inc_by(*seconds);
        }
        for (id, seconds) in &reading.vcpu_seconds {
            let id = id.to_string();
            vcpu.get_or_create(&with(&vmi, &[("id", &id), ("state", "running")]))
                .inc_by(*seconds);
        }
        let gauges = [
            (&domain, reading.memory_domain_bytes),
            (&resident, reading.memory_resident_bytes),
            (&overhead, reading.overhead_bytes),
        ];
        for (gauge, bytes) in gauges {
            if let Some(bytes) = bytes {
                gauge.get_or_create(&vmi).set(bytes as i64);
            }
        }
        if let Some(bytes) = reading.actual_balloon_bytes {
            balloon.get_or_create(&vmi).set(bytes as i64);
        }
        if let Some(memory) = &reading.guest_memory {
            // KubeVirt's recording rule: available less usable.
            let in_use = memory
                .available_bytes
                .zip(memory.usable_bytes)
                .map(|(available, usable)| available.saturating_sub(usable));
            let gauges = [
                (&available, memory.available_bytes),
                (&unused, memory.unused_bytes),
                (&usable, memory.usable_bytes),
                (&used, in_use),
                (&cached, memory.cached_bytes),
                (&swap_in, memory.swap_in_bytes),
                (&swap_out, memory.swap_out_bytes),
            ];
            for (gauge, bytes) in gauges {
                if let Some(bytes) = bytes {
                    gauge.get_or_create(&vmi).set(bytes as i64);
                }
            }
            for (counter, faults) in [
                (&major_faults, memory.major_faults),
                (&minor_faults, memory.minor_faults),
            ] {
                if let Some(faults) = faults {
                    counter.get_or_create(&vmi).inc_by(faults);
                }
            }
        }
        for d in &reading.drives {
            let drive = with(&vmi, &[("drive", &d.name)]);
            read_bytes.get_or_create(&drive).inc_by(d.read_bytes);
            write_bytes.get_or_create(&drive).inc_by(d.write_bytes);
            read_ops.get_or_create(&drive).inc_by(d.read_ops);
            write_ops.get_or_create(&drive).inc_by(d.write_ops);
            flushes.get_or_create(&drive).inc_by(d.flush_ops);
            read_time.get_or_create(&drive).inc_by(d.read_seconds);
            write_time.get_or_create(&drive).inc_by(d.write_seconds);
            flush_time.get_or_create(&drive).inc_by(d.flush_seconds);
        }
        for i in &reading.interfaces {
            let nic = with(&vmi, &[("interface", &i.name)]);
            rx_bytes.get_or_create(&nic).inc_by(i.receive_bytes);
            tx_bytes.get_or_create(&nic).inc_by(i.transmit_bytes);
            rx_packets.get_or_create(&nic).inc_by(i.receive_packets);
            tx_packets.get_or_create(&nic).inc_by(i.transmit_packets);
            rx_errors.get_or_create(&nic).inc_by(i.receive_errors);
            tx_errors.get_or_create(&nic).inc_by(i.transmit_errors);
            rx_dropped.get_or_create(&nic).inc_by(i.receive_dropped);
            tx_dropped.get_or_create(&nic).inc_by(i.transmit_dropped);
        }
        if let Some(m) = &reading.migration {
            migration_total.get_or_create(&vmi).inc_by(m.total_bytes);
            let gauges = [
                (&migration_processed, m.processed_bytes),
                (&migration_remaining, m.remaining_bytes),
                (&migration_dirty, m.dirty_rate_bytes),
                (&migration_rate, m.transfer_rate_bytes),
            ];
            for (gauge, bytes) in gauges {
                gauge.get_or_create(&vmi).set(bytes as i64);
            }
        }
    }

    let console: Family<_, Gauge> = family(
        r,
        "kubevirt_console_active_connections",
        "Amount of active Console connections, broken down by namespace and vmi name",
    );
    let vnc: Family<_, Gauge> = family(
        r,
        "kubevirt_vnc_active_connections",
        "Amount of active VNC connections, broken down by namespace and vmi name",
    );
    let tunnels: Family<_, Gauge> = family(
        r,
        "kubevirt_portforward_active_tunnels",
        "Amount of active portforward tunnels, broken down by namespace and vmi name",
    );
    for ((kind, namespace, name), open) in connections {
        let labels: Labels = vec![
            ("namespace".into(), namespace.clone()),
            ("vmi".into(), name.clone()),
        ];
        let gauge = match kind {
            Kind::Console => &console,
            Kind::Vnc => &vnc,
            Kind::PortForward => &tunnels,
        };
        gauge.get_or_create(&labels).set(*open);
    }
    metrics::render(&registry, Some("application/openmetrics-text")).1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readings::{Drive as DriveReading, Interface};

    #[test]
    fn readings_take_kubevirts_names_and_labels() {
        let readings = Readings {
            cpu_seconds: 1.5,
            vcpu_seconds: vec![(0, 1.25)],
            vcpu_delay_seconds: vec![(0, 0.5)],
            memory_domain_bytes: Some(128 << 20),
            memory_resident_bytes: Some(40 << 20),
            overhead_bytes: Some(30 << 20),
            labels: [("kubevirt.io/vm".to_string(), "vm1".to_string())].into(),
            migration: Some(crate::readings::Migration {
                remaining_bytes: 4096,
                ..Default::default()
            }),
            drives: vec![DriveReading {
                name: "root".into(),
                read_bytes: 4096,
                ..Default::default()
            }],
            interfaces: vec![Interface {
                name: "default".into(),
                receive_bytes: 10,
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = render(&Scrape {
            node: "n1",
            guests: &[(("default".into(), "vm1".into()), readings)],
            connections: &[((Kind::Vnc, "default".into(), "vm1".into()), 2)],
            read_seconds: 0.002,
        });
        let vmi =
            r#"node="n1",namespace="default",name="vm1",kubernetes_vmi_label_kubevirt_io_vm="vm1""#;
        for line in [
            format!("kubevirt_vmi_cpu_usage_seconds_total{{{vmi}}} 1.5"),
            format!(r#"kubevirt_vmi_vcpu_seconds_total{{{vmi},id="0",state="running"}} 1.25"#),
            format!(r#"kubevirt_vmi_vcpu_delay_seconds_total{{{vmi},id="0"}} 0.5"#),
            format!("kubevirt_vmi_memory_domain_bytes{{{vmi}}} 134217728"),
            format!("kubevirt_vmi_launcher_memory_overhead_bytes{{{vmi}}} 31457280"),
            format!(r#"kubevirt_vmi_storage_read_traffic_bytes_total{{{vmi},drive="root"}} 4096"#),
            format!(r#"kubevirt_vmi_network_receive_bytes_total{{{vmi},interface="default"}} 10"#),
            format!("kubevirt_vmi_migration_data_remaining_bytes{{{vmi}}} 4096"),
            r#"kubevirt_vnc_active_connections{namespace="default",vmi="vm1"} 2"#.to_string(),
            "virtplane_node_metrics_read_seconds 0.002".to_string(),
        ] {
            assert!(text.contains(&line), "{line} in\n{text}");
        }
    }
}
