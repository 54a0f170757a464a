//! The node's metrics: each guest's readings under KubeVirt's domain-stats names, with
//! the `node`, `namespace` and `name` labels virt-handler puts on every series.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::readings::Readings;

type Seconds = Counter<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Vmi {
    node: String,
    namespace: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Vcpu {
    node: String,
    namespace: String,
    name: String,
    id: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Drive {
    node: String,
    namespace: String,
    name: String,
    drive: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Nic {
    node: String,
    namespace: String,
    name: String,
    interface: String,
}

/// A family of counters of one label set, registered under `name`.
fn counters<L, C>(registry: &mut Registry, name: &str, help: &str) -> Family<L, C>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
    C: prometheus_client::metrics::TypedMetric
        + prometheus_client::encoding::EncodeMetric
        + Default
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let family = Family::<L, C>::default();
    registry.register(name, help, family.clone());
    family
}

/// OpenMetrics text of the guests' readings on `node`.
pub fn render(node: &str, guests: &[((String, String), Readings)]) -> String {
    let mut registry = Registry::default();
    let cpu: Family<Vmi, Seconds> = counters(
        &mut registry,
        "kubevirt_vmi_cpu_usage_seconds",
        "Total CPU time spent in all modes (sum of both vcpu and hypervisor usage)",
    );
    let cpu_user: Family<Vmi, Seconds> = counters(
        &mut registry,
        "kubevirt_vmi_cpu_user_usage_seconds",
        "Total CPU time spent in user mode",
    );
    let cpu_system: Family<Vmi, Seconds> = counters(
        &mut registry,
        "kubevirt_vmi_cpu_system_usage_seconds",
        "Total CPU time spent in system mode",
    );
    let vcpu: Family<Vcpu, Seconds> = counters(
        &mut registry,
        "kubevirt_vmi_vcpu_seconds",
        "Total amount of time spent in each state by each vcpu (cpu_time excluding hypervisor time)",
    );
    let domain: Family<Vmi, Gauge> = counters(
        &mut registry,
        "kubevirt_vmi_memory_domain_bytes",
        "The amount of memory in bytes allocated to the domain",
    );
    let resident: Family<Vmi, Gauge> = counters(
        &mut registry,
        "kubevirt_vmi_memory_resident_bytes",
        "Resident set size of the process running the domain",
    );
    let read_bytes: Family<Drive, Counter> = counters(
        &mut registry,
        "kubevirt_vmi_storage_read_traffic_bytes",
        "Total number of bytes read from storage",
    );
    let write_bytes: Family<Drive, Counter> = counters(
        &mut registry,
        "kubevirt_vmi_storage_write_traffic_bytes",
        "Total number of written bytes",
    );
    let read_ops: Family<Drive, Counter> = counters(
        &mut registry,
        "kubevirt_vmi_storage_iops_read",
        "Total number of I/O read operations",
    );
    let write_ops: Family<Drive, Counter> = counters(
        &mut registry,
        "kubevirt_vmi_storage_iops_write",
        "Total number of I/O write operations",
    );
    let flushes: Family<Drive, Counter> = counters(
        &mut registry,
        "kubevirt_vmi_storage_flush_requests",
        "Total storage flush requests",
    );
    let read_time: Family<Drive, Seconds> = counters(
        &mut registry,
        "kubevirt_vmi_storage_read_times_seconds",
        "Total time spent on read operations",
    );
    let write_time: Family<Drive, Seconds> = counters(
        &mut registry,
        "kubevirt_vmi_storage_write_times_seconds",
        "Total time spent on write operations",
    );
    let flush_time: Family<Drive, Seconds> = counters(
        &mut registry,
        "kubevirt_vmi_storage_flush_times_seconds",
        "Total time spent on cache flushing",
    );
    let nic = |registry: &mut Registry, name: &str, help: &str| -> Family<Nic, Counter> {
        counters(registry, name, help)
    };
    let rx_bytes = nic(
        &mut registry,
        "kubevirt_vmi_network_receive_bytes",
        "Total network traffic received in bytes",
    );
    let tx_bytes = nic(
        &mut registry,
        "kubevirt_vmi_network_transmit_bytes",
        "Total network traffic transmitted in bytes",
    );
    let rx_packets = nic(
        &mut registry,
        "kubevirt_vmi_network_receive_packets",
        "Total network traffic received packets",
    );
    let tx_packets = nic(
        &mut registry,
        "kubevirt_vmi_network_transmit_packets",
        "Total network traffic transmitted packets",
    );
    let rx_errors = nic(
        &mut registry,
        "kubevirt_vmi_network_receive_errors",
        "Total network received error packets",
    );
    let tx_errors = nic(
        &mut registry,
        "kubevirt_vmi_network_transmit_errors",
        "Total network transmit error packets",
    );
    let rx_dropped = nic(
        &mut registry,
        "kubevirt_vmi_network_receive_packets_dropped",
        "The total number of rx packets dropped on vNIC interfaces",
    );
    let tx_dropped = nic(
        &mut registry,
        "kubevirt_vmi_network_transmit_packets_dropped",
        "The total number of tx packets dropped on vNIC interfaces",
    );

    for ((namespace, name), r) in guests {
        let vmi = Vmi {
            node: node.into(),
            namespace: namespace.clone(),
            name: name.clone(),
        };
        cpu.get_or_create(&vmi).inc_by(r.cpu_seconds);
        cpu_user.get_or_create(&vmi).inc_by(r.cpu_user_seconds);
        cpu_system.get_or_create(&vmi).inc_by(r.cpu_system_seconds);
        for (id, seconds) in &r.vcpu_seconds {
            vcpu.get_or_create(&Vcpu {
                node: node.into(),
                namespace: namespace.clone(),
                name: name.clone(),
                id: id.to_string(),
                state: "running".into(),
            })
            .inc_by(*seconds);
        }
        if let Some(bytes) = r.memory_domain_bytes {
            domain.get_or_create(&vmi).set(bytes as i64);
        }
        if let Some(bytes) = r.memory_resident_bytes {
            resident.get_or_create(&vmi).set(bytes as i64);
        }
        for d in &r.drives {
            let drive = Drive {
                node: node.into(),
                namespace: namespace.clone(),
                name: name.clone(),
                drive: d.name.clone(),
            };
            read_bytes.get_or_create(&drive).inc_by(d.read_bytes);
            write_bytes.get_or_create(&drive).inc_by(d.write_bytes);
            read_ops.get_or_create(&drive).inc_by(d.read_ops);
            write_ops.get_or_create(&drive).inc_by(d.write_ops);
            flushes.get_or_create(&drive).inc_by(d.flush_ops);
            read_time.get_or_create(&drive).inc_by(d.read_seconds);
            write_time.get_or_create(&drive).inc_by(d.write_seconds);
            flush_time.get_or_create(&drive).inc_by(d.flush_seconds);
        }
        for i in &r.interfaces {
            let label = Nic {
                node: node.into(),
                namespace: namespace.clone(),
                name: name.clone(),
                interface: i.name.clone(),
            };
            rx_bytes.get_or_create(&label).inc_by(i.receive_bytes);
            tx_bytes.get_or_create(&label).inc_by(i.transmit_bytes);
            rx_packets.get_or_create(&label).inc_by(i.receive_packets);
            tx_packets.get_or_create(&label).inc_by(i.transmit_packets);
            rx_errors.get_or_create(&label).inc_by(i.receive_errors);
            tx_errors.get_or_create(&label).inc_by(i.transmit_errors);
            rx_dropped.get_or_create(&label).inc_by(i.receive_dropped);
            tx_dropped.get_or_create(&label).inc_by(i.transmit_dropped);
        }
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
            memory_domain_bytes: Some(128 << 20),
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
        let text = render("n1", &[(("default".into(), "vm1".into()), readings)]);
        for line in [
            r#"kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="default",name="vm1"} 1.5"#,
            r#"kubevirt_vmi_vcpu_seconds_total{node="n1",namespace="default",name="vm1",id="0",state="running"} 1.25"#,
            r#"kubevirt_vmi_memory_domain_bytes{node="n1",namespace="default",name="vm1"} 134217728"#,
            r#"kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="default",name="vm1",drive="root"} 4096"#,
            r#"kubevirt_vmi_network_receive_bytes_total{node="n1",namespace="default",name="vm1",interface="default"} 10"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
