use super::*;

/// The JSON values of every `flag` argument.
fn json_args(spec: &MachineSpec, flag: &str) -> Vec<Value> {
    spec.argv()
        .unwrap()
        .windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| serde_json::from_str(&w[1]).unwrap_or_else(|e| panic!("{flag} {}: {e}", w[1])))
        .collect()
}

fn spec() -> MachineSpec {
    MachineSpec {
        name: "default_vm1".into(),
        uuid: "5e1c2c3a-0000-4000-8000-000000000001".into(),
        serial: Some("abc".into()),
        machine_type: "q35".into(),
        accel: Accel::Tcg,
        cpu_model: "max".into(),
        sockets: 1,
        cores: 2,
        threads: 1,
        memory_mib: 128,
        hugepages: None,
        firmware: Firmware::Bios,
        kernel_boot: None,
        acpi: true,
        smm: false,
        disks: vec![Disk {
            id: "root".into(),
            path: "/d/root.qcow2".into(),
            format: DiskFormat::Qcow2,
            bus: Bus::Virtio,
            media: DiskMedia::Disk,
            readonly: false,
            boot_index: Some(1),
            serial: None,
            cache: None,
        }],
        nics: vec![Nic {
            id: "default".into(),
            model: NicModel::VirtioNet,
            mac: "02:00:00:00:00:01".into(),
            backend: NicBackend::User {
                forwards: vec![PortForward {
                    protocol: Protocol::Tcp,
                    host_address: "127.0.0.1".into(),
                    host_port: 40000,
                    guest_port: 80,
                }],
            },
            boot_index: None,
        }],
        rng: true,
        balloon: true,
        watchdog: None,
        console_socket: "/r/console.sock".into(),
        console_log: "/r/serial.log".into(),
        qmp_socket: "/r/qmp.sock".into(),
        vnc_socket: None,
        pidfile: "/r/qemu.pid".into(),
        sandbox: true,
        run_as: None,
        netns: None,
    }
}

#[test]
fn command_line() {
    let argv = spec().argv().unwrap().join(" ");
    assert!(argv.contains("-machine q35,accel=tcg,smm=off"), "{argv}");
    assert!(argv.contains("-smp 2,sockets=1,cores=2,threads=1"));
    assert!(argv.contains(
        r#"-device {"bootindex":1,"drive":"drive-root","driver":"virtio-blk-pci","id":"root"}"#
    ));
    assert!(
        argv.contains(r#""hostfwd":[{"str":"tcp:127.0.0.1:40000-:80"}]"#),
        "{argv}"
    );
    assert!(argv.contains(&format!("-sandbox {}", crate::sandbox::SANDBOX)));
    assert!(argv.contains("-smbios type=1,uuid=5e1c2c3a-0000-4000-8000-000000000001,serial=abc"));
    assert!(argv.starts_with("-name guest=default_vm1"));
}

#[test]
fn disks_are_named_blockdev_nodes() {
    let argv = spec().argv().unwrap().join(" ");
    assert!(
        argv.contains(concat!(
            r#"-blockdev {"cache":{"direct":true},"driver":"file","filename":"/d/root.qcow2","node-name":"file-root","read-only":false} "#,
            r#"-blockdev {"driver":"qcow2","file":"file-root","node-name":"drive-root","read-only":false}"#
        )),
        "{argv}"
    );
    assert!(!argv.contains("-drive"), "{argv}");
}

#[test]
fn errors_about_a_disk_node_name_its_file() {
    let said = r#"qemu-system-x86_64: -blockdev {"driver":"qcow2","file":"file-root","node-name":"drive-root","read-only":false}: Unsupported qcow2 version 3"#;
    assert_eq!(
        spec().explain(said),
        format!("{said} (disk root: /d/root.qcow2)")
    );
    assert_eq!(spec().explain("no disk here"), "no disk here");
}

#[test]
fn cache_modes_and_read_only_media() {
    let mut s = spec();
    s.disks[0].cache = Some(CacheMode::Writethrough);
    s.disks.push(Disk {
        id: "cd".into(),
        path: "/d/seed.iso".into(),
        format: DiskFormat::Raw,
        bus: Bus::Sata,
        media: DiskMedia::Cdrom,
        readonly: false,
        boot_index: None,
        serial: None,
        cache: None,
    });
    let argv = s.argv().unwrap().join(" ");
    let objects = json_args(&s, "-blockdev");
    let file = |name: &str| {
        objects
            .iter()
            .find(|o| o["node-name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no node {name} in {argv}"))
    };
    assert_eq!(file("file-root")["cache"]["direct"], false);
    assert_eq!(file("file-cd")["cache"]["direct"], false);
    assert_eq!(file("file-cd")["read-only"], true);
    assert_eq!(file("drive-cd")["read-only"], true);
    let devices = json_args(&s, "-device");
    let root = devices.iter().find(|d| d["id"] == "root").unwrap();
    assert_eq!(root["write-cache"], "off", "{argv}");
    assert_eq!(root["bootindex"], 1, "{argv}");
    let cd = devices.iter().find(|d| d["id"] == "cd").unwrap();
    assert_eq!(
        cd,
        &json!({"driver": "ide-cd", "bus": "ide.0", "unit": 0, "drive": "drive-cd", "id": "cd"})
    );
}

#[test]
fn efi_firmware_is_two_pflash_nodes() {
    let mut s = spec();
    s.firmware = Firmware::Efi {
        code: "/fw/code.fd".into(),
        vars: "/r/vars.fd".into(),
        secure_boot: false,
    };
    let argv = s.argv().unwrap().join(" ");
    let nodes = json_args(&s, "-blockdev");
    assert!(
        nodes.contains(&json!({"driver": "file", "node-name": "pflash0-file",
                               "filename": "/fw/code.fd", "read-only": true})),
        "{argv}"
    );
    assert!(
        nodes.contains(&json!({"driver": "raw", "node-name": "pflash1",
                               "file": "pflash1-file", "read-only": false})),
        "{argv}"
    );
    assert!(
        argv.contains("-machine pflash0=pflash0,pflash1=pflash1"),
        "{argv}"
    );
}

/// Values a hostile spec could carry, for the tests below.
const HOSTILE: [&str; 6] = [
    "x,file=/etc/passwd",
    "x,,file=/etc/passwd",
    "a=b,c",
    "../../etc/shadow",
    "line\nnext -device foo",
    "\"},{\"driver\":\"x",
];

/// Every `key=value,…` option string of the command line, split as QEMU splits it
/// (a doubled comma is a comma of the value).
fn qemu_opts(text: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                parts.last_mut().unwrap().push(',');
            } else {
                parts.push(String::new());
            }
        } else {
            parts.last_mut().unwrap().push(c);
        }
    }
    parts
}

#[test]
fn hostile_disk_values_stay_inside_their_json_strings() {
    for bad in HOSTILE {
        let mut s = spec();
        s.disks[0].serial = Some(bad.to_string());
        s.disks[0].id = bad.to_string();
        s.disks[0].path = PathBuf::from(format!("/d/{bad}"));
        s.nics[0].mac = bad.to_string();
        s.nics[0].id = bad.to_string();
        let argv = s.argv().unwrap();
        let devices = json_args(&s, "-device");
        let disk = devices.iter().find(|d| d["drive"].is_string()).unwrap();
        assert_eq!(disk["serial"], bad);
        assert_eq!(disk["id"], bad);
        assert!(disk.get("file").is_none(), "{disk}");
        let nic = devices.iter().find(|d| d["netdev"].is_string()).unwrap();
        assert_eq!(nic["mac"], bad);
        let files = json_args(&s, "-blockdev");
        assert_eq!(files[0]["filename"], format!("/d/{bad}"));
        // No argument was split or added: the count is that of a tame spec.
        assert_eq!(argv.len(), spec().argv().unwrap().len(), "{argv:?}");
    }
}

#[test]
fn hostile_smbios_serial_and_name_are_one_option_value_each() {
    for bad in HOSTILE {
        let mut s = spec();
        s.serial = Some(bad.to_string());
        s.name = bad.to_string();
        s.uuid = bad.to_string();
        let argv = s.argv().unwrap();
        let arg = |flag: &str| argv.windows(2).find(|w| w[0] == flag).unwrap()[1].clone();
        let smbios = qemu_opts(&arg("-smbios"));
        assert_eq!(
            smbios,
            vec![
                "type=1".to_string(),
                format!("uuid={bad}"),
                format!("serial={bad}")
            ]
        );
        let name = qemu_opts(&arg("-name"));
        assert_eq!(
            name,
            vec![format!("guest={bad}"), "debug-threads=on".into()]
        );
    }
}

#[test]
fn runtime_paths_with_commas_are_escaped_where_qemu_parses_options_only() {
    let mut s = spec();
    s.qmp_socket = "/r,x/qmp.sock".into();
    s.console_socket = "/r,x/console.sock".into();
    s.console_log = "/r,x/serial.log".into();
    s.pidfile = "/r,x/qemu.pid".into();
    s.kernel_boot = Some(KernelBoot {
        kernel: "/k,x/vmlinux".into(),
        initrd: Some("/k,x/initrd".into()),
        cmdline: "console=ttyS0,115200 x=1".into(),
    });
    let argv = s.argv().unwrap();
    let arg = |flag: &str| argv.windows(2).find(|w| w[0] == flag).unwrap()[1].clone();
    assert_eq!(
        qemu_opts(&arg("-qmp")),
        vec!["unix:/r,x/qmp.sock", "server=on", "wait=off"]
    );
    let chardev = qemu_opts(&arg("-chardev"));
    assert!(
        chardev.contains(&"path=/r,x/console.sock".to_string()),
        "{chardev:?}"
    );
    assert!(
        chardev.contains(&"logfile=/r,x/serial.log".to_string()),
        "{chardev:?}"
    );
    // QEMU opens these names as given.
    assert_eq!(arg("-pidfile"), "/r,x/qemu.pid");
    assert_eq!(arg("-kernel"), "/k,x/vmlinux");
    assert_eq!(arg("-initrd"), "/k,x/initrd");
    assert_eq!(arg("-append"), "console=ttyS0,115200 x=1");
}

#[test]
fn machine_types_and_cpu_models_must_be_plain_names() {
    for bad in ["q35,memory-backend=x", "q35 -device x", "", &"q".repeat(65)] {
        let mut s = spec();
        s.machine_type = bad.to_string();
        let refused = s.argv().unwrap_err();
        assert!(refused.0.contains("machine type"), "{refused}");
        let mut s = spec();
        s.cpu_model = bad.to_string();
        let refused = s.argv().unwrap_err();
        assert!(refused.0.contains("CPU model"), "{refused}");
    }
    let mut s = spec();
    s.machine_type = "pc-q35-7.2".into();
    s.cpu_model = "Skylake-Client-IBRS".into();
    assert!(s.argv().is_ok());
}

#[test]
fn the_sandbox_can_be_left_out() {
    let mut s = spec();
    s.sandbox = false;
    assert!(!s.argv().unwrap().iter().any(|a| a == "-sandbox"));
}

#[test]
fn a_tap_nic_opens_the_nodes_tap_and_runs_no_scripts() {
    let mut s = spec();
    s.nics[0].backend = NicBackend::Tap {
        ifname: "tap0".into(),
    };
    let netdevs = json_args(&s, "-netdev");
    assert_eq!(
        netdevs,
        [json!({"type": "tap", "id": "net-default", "ifname": "tap0",
                "script": "no", "downscript": "no"})]
    );
    let devices = json_args(&s, "-device");
    let nic = devices.iter().find(|d| d["netdev"].is_string()).unwrap();
    assert_eq!(nic["netdev"], "net-default");
}
