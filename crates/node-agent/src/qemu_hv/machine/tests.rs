use super::*;
use serde_json::json;

fn vmi(spec: serde_json::Value) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": "ns", "uid": "7c1e0b54-0000-4000-8000-000000000001"},
        "spec": spec,
    }))
    .unwrap()
}

fn host(accel: Accel) -> Host<'static> {
    Host {
        accel,
        address: "10.1.2.3",
        dir: Path::new("/run/vmi/ns/vm1"),
        pod_network: false,
    }
}

fn readied(volumes: &[(&str, &str, DiskFormat)]) -> Readied {
    Readied {
        volumes: volumes
            .iter()
            .map(|(name, path, format)| (name.to_string(), (PathBuf::from(path), *format)))
            .collect(),
        ..Default::default()
    }
}

fn no_ports() -> Option<u16> {
    panic!("no port forward was asked for")
}

fn failure(result: Result<(MachineSpec, Vec<Forward>), Started>) -> String {
    match result {
        Err(Started::Failed { message, .. }) => message,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn an_empty_domain_gets_the_defaults() {
    let (m, forwards) = machine_spec(
        &vmi(json!({"domain": {}})),
        &host(Accel::Tcg),
        &readied(&[]),
        &mut no_ports,
    )
    .unwrap();
    assert_eq!(m.name, "ns_vm1");
    assert_eq!(m.uuid, "7c1e0b54-0000-4000-8000-000000000001");
    assert_eq!(m.machine_type, "q35");
    assert_eq!(m.cpu_model, "max", "TCG has no host CPU to copy");
    assert_eq!((m.sockets, m.cores, m.threads), (1, 1, 1));
    assert_eq!(m.memory_mib, 128);
    assert_eq!(m.firmware, Firmware::Bios);
    assert!(m.acpi && !m.smm);
    // QEMU's own files are in run/, the one dir it may write.
    assert_eq!(
        m.vnc_socket,
        Some(PathBuf::from("/run/vmi/ns/vm1/run/vnc.sock"))
    );
    for file in [&m.qmp_socket, &m.console_socket, &m.console_log, &m.pidfile] {
        assert_eq!(file.parent(), Some(Path::new("/run/vmi/ns/vm1/run")));
    }
    // How QEMU runs is set by the node, not by the spec's translation.
    assert!(!m.sandbox && m.run_as.is_none());
    assert_eq!(m.qmp_socket, PathBuf::from("/run/vmi/ns/vm1/run/qmp.sock"));
    assert!(forwards.is_empty());
}

#[test]
fn domain_settings_are_translated() {
    let spec = json!({"domain": {
        "cpu": {"sockets": 2, "cores": 3, "threads": 1, "model": "host-model"},
        "memory": {"guest": "1Gi"},
        "machine": {"type": "pc-i440fx-rhel7.6.0"},
        "firmware": {"uuid": "5e1c2c3a-0000-4000-8000-00000000000a", "serial": "s-1"},
        "features": {"acpi": {"enabled": false}},
        "devices": {"autoattachGraphicsDevice": false, "rng": {},
                    "watchdog": {"name": "w", "i6300esb": {"action": "poweroff"}}},
    }});
    let (m, _) = machine_spec(&vmi(spec), &host(Accel::Kvm), &readied(&[]), &mut no_ports).unwrap();
    assert_eq!(m.cpu_model, "host");
    assert_eq!(m.accel, Accel::Kvm);
    assert_eq!((m.sockets, m.cores, m.threads), (2, 3, 1));
    assert_eq!(m.memory_mib, 1024);
    assert_eq!(m.machine_type, "pc");
    assert_eq!(m.uuid, "5e1c2c3a-0000-4000-8000-00000000000a");
    assert_eq!(m.serial.as_deref(), Some("s-1"));
    assert!(!m.acpi);
    assert!(m.rng);
    assert_eq!(m.watchdog, Some(WatchdogAction::Poweroff));
    assert_eq!(m.vnc_socket, None);
}

#[test]
fn secure_boot_turns_smm_on_unless_told_otherwise() {
    let efi = Readied {
        firmware: Some(Firmware::Efi {
            code: "/fw/code".into(),
            vars: "/run/vars".into(),
            secure_boot: true,
        }),
        ..Default::default()
    };
    let (m, _) = machine_spec(
        &vmi(json!({"domain": {}})),
        &host(Accel::Tcg),
        &efi,
        &mut no_ports,
    )
    .unwrap();
    assert!(m.smm);
    let off = json!({"domain": {"features": {"smm": {"enabled": false}}}});
    let (m, _) = machine_spec(&vmi(off), &host(Accel::Tcg), &efi, &mut no_ports).unwrap();
    assert!(!m.smm);
}

#[test]
fn disks_take_their_volumes_files() {
    let spec = json!({"domain": {"devices": {"disks": [
        {"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 1, "cache": "writethrough"},
        {"name": "seed", "cdrom": {"bus": "sata"}},
        {"name": "data", "lun": {"bus": "scsi", "readonly": true}, "serial": "D1"},
    ]}}});
    let volumes = readied(&[
        ("root", "/run/root.qcow2", DiskFormat::Qcow2),
        ("seed", "/run/seed.iso", DiskFormat::Raw),
        ("data", "/volumes/ns/data", DiskFormat::Raw),
    ]);
    let (m, _) = machine_spec(&vmi(spec), &host(Accel::Tcg), &volumes, &mut no_ports).unwrap();
    let summary: Vec<_> = m
        .disks
        .iter()
        .map(|d| {
            (
                d.id.as_str(),
                d.bus,
                d.media,
                d.readonly,
                d.boot_index,
                d.cache,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "root",
                Bus::Virtio,
                DiskMedia::Disk,
                false,
                Some(1),
                Some(CacheMode::Writethrough)
            ),
            ("seed", Bus::Sata, DiskMedia::Cdrom, false, None, None),
            ("data", Bus::Scsi, DiskMedia::Disk, true, None, None),
        ]
    );
    assert_eq!(m.disks[0].path, PathBuf::from("/run/root.qcow2"));
    assert_eq!(m.disks[0].format, DiskFormat::Qcow2);
    assert_eq!(m.disks[2].serial.as_deref(), Some("D1"));
}

#[test]
fn a_disk_without_a_volume_fails() {
    let spec = json!({"domain": {"devices": {"disks": [{"name": "lost", "disk": {}}]}}});
    let message = failure(machine_spec(
        &vmi(spec),
        &host(Accel::Tcg),
        &readied(&[]),
        &mut no_ports,
    ));
    assert_eq!(message, "disk lost has no volume");
}

#[test]
fn masquerade_ports_are_forwarded_from_the_node() {
    let spec = json!({
        "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}, "model": "e1000",
            "ports": [{"name": "web", "port": 80}, {"port": 53, "protocol": "UDP"}]}]}},
        "networks": [{"name": "default", "pod": {}}],
    });
    let mut next = 40000;
    let mut ports = || {
        next += 1;
        Some(next)
    };
    let (m, forwards) =
        machine_spec(&vmi(spec), &host(Accel::Tcg), &readied(&[]), &mut ports).unwrap();
    let nic = &m.nics[0];
    assert_eq!(nic.model, NicModel::E1000);
    assert_eq!(nic.mac, mac_for("7c1e0b54-0000-4000-8000-000000000001", 0));
    assert_eq!(
        nic.backend,
        NicBackend::User {
            forwards: vec![
                PortForward {
                    protocol: Protocol::Tcp,
                    host_address: "10.1.2.3".into(),
                    host_port: 40001,
                    guest_port: 80
                },
                PortForward {
                    protocol: Protocol::Udp,
                    host_address: "10.1.2.3".into(),
                    host_port: 40002,
                    guest_port: 53
                },
            ]
        }
    );
    assert_eq!(
        forwards,
        vec![
            ("default".to_string(), "web".to_string(), 40001, 80),
            ("default".to_string(), String::new(), 40002, 53),
        ]
    );
}

#[test]
fn what_the_node_cannot_do_fails_with_a_message() {
    let bridge = json!({
        "domain": {"devices": {"interfaces": [{"name": "default", "bridge": {}}]}},
        "networks": [{"name": "default", "pod": {}}],
    });
    let message = failure(machine_spec(
        &vmi(bridge),
        &host(Accel::Tcg),
        &readied(&[]),
        &mut no_ports,
    ));
    assert!(message.contains("only the masquerade binding"), "{message}");
    let model = json!({
        "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}, "model": "ne2k_pci"}]}},
        "networks": [{"name": "default", "pod": {}}],
    });
    let message = failure(machine_spec(
        &vmi(model),
        &host(Accel::Tcg),
        &readied(&[]),
        &mut no_ports,
    ));
    assert_eq!(
        message,
        "interface default: model ne2k_pci is not available"
    );
    let ports = json!({
        "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}, "ports": [{"port": 22}]}]}},
        "networks": [{"name": "default", "pod": {}}],
    });
    let message = failure(machine_spec(
        &vmi(ports),
        &host(Accel::Tcg),
        &readied(&[]),
        &mut || None,
    ));
    assert_eq!(message, "no free port on the node for a port forward");
    let watchdog =
        json!({"domain": {"devices": {"watchdog": {"i6300esb": {"action": "explode"}}}}});
    let message = failure(machine_spec(
        &vmi(watchdog),
        &host(Accel::Tcg),
        &readied(&[]),
        &mut no_ports,
    ));
    assert_eq!(message, "watchdog action explode is not available");
}
