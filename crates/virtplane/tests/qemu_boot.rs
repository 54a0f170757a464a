//! Tier B: real guests under QEMU (software emulation is fine) on the server's local
//! node. Boot paths (kernelBoot from a containerDisk-hosted kernel; containerDisk disk
//! images through the BIOS on virtio, sata and scsi, `pc` and `q35`; EFI with OVMF),
//! what the guest sees (cloud-init NoCloud and ConfigDrive, user data from a Secret, a
//! sysprep CD from a ConfigMap, emptyDisk, hostDisk, cdrom, the domain settings), port forwards, VMI status, and errors a person can act on.
//! One server for the whole file; skipped loudly without QEMU or the test guests.

mod images;
mod qemu;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use qemu::{
    add_volume, disk_vm, guests, has_nic, host_port, kernel_vm, phase, proc_status, shared, Env,
    BOOT, NODE, SHORT,
};
use serde_json::{json, Value};
use support::{condition, printable, uid};

fn has(lines: &[String], line: &str) -> bool {
    lines.iter().any(|l| l == line)
}

fn assert_lines(name: &str, lines: &[String], expected: &[&str]) {
    for line in expected {
        assert!(
            has(lines, line),
            "guest {name} did not print {line:?}; it printed {lines:#?}"
        );
    }
}

/// The backing file a qcow2 overlay names in its header.
fn qcow2_backing(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..4], b"QFI\xfb", "{} is not qcow2", path.display());
    let offset = u64::from_be_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let size = u32::from_be_bytes(bytes[16..20].try_into().unwrap()) as usize;
    String::from_utf8_lossy(&bytes[offset..offset + size]).to_string()
}

/// Common checks for a VM that booted: VMI status and VM status.
async fn check_running_status(env: &Env, name: &str, vmi: &Value, machine: &str) {
    let status = &vmi["status"];
    assert_eq!(status["nodeName"], NODE, "{status}");
    assert_eq!(status["machine"]["type"], machine, "{status}");
    let iface = &status["interfaces"][0];
    assert_eq!(iface["name"], "default", "{status}");
    assert!(
        iface["mac"].as_str().is_some_and(|m| m.len() == 17),
        "{status}"
    );
    assert!(iface["ipAddress"].is_string(), "{status}");
    assert_eq!(
        condition(vmi, "Ready").map(|c| c["status"].clone()),
        Some(json!("True")),
        "{status}"
    );
    env.wait_vm(name, SHORT, "printableStatus Running, ready", |vm| {
        printable(vm) == "Running" && vm["status"]["ready"] == json!(true)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_boot_nocloud_empty_disk_and_port_forward() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "kboot";
    let started = Instant::now();
    let mut vm = kernel_vm(
        g,
        name,
        "Always",
        Some("#cloud-config\n#virtplane: serve 8080\n"),
    );
    add_volume(
        &mut vm,
        json!({"name": "scratch", "disk": {"bus": "virtio"}}),
        json!({"name": "scratch", "emptyDisk": {"capacity": "64Mi"}}),
    );
    // Interface models: rtl8139 here, e1000 and e1000e below, virtio elsewhere.
    vm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][0]["model"] =
        json!("rtl8139");
    let created = env.create_vm(&vm).await;
    let firmware_uuid = created["spec"]["template"]["spec"]["domain"]["firmware"]["uuid"]
        .as_str()
        .expect("the VM mutator sets firmware.uuid")
        .to_string();
    let vmi = env.wait_running(name).await;
    check_running_status(&env, name, &vmi, "q35").await;
    assert_eq!(
        vmi["status"]["volumeStatus"],
        json!([{"name": "cloudinit", "target": "vda"}, {"name": "scratch", "target": "vdb"}]),
        "{}",
        vmi["status"]
    );

    let lines = env.wait_ready(name).await;
    eprintln!("{name}: ready after {:?}", started.elapsed());
    assert_lines(
        name,
        &lines,
        &[
            "virtplane-guest: seed cidata vda",
            "virtplane-guest: user-data: #cloud-config",
            "virtplane-guest: user-data: #virtplane: serve 8080",
            "virtplane-guest: ip eth0 10.0.2.2",
            "virtplane-guest: serve 8080",
            &format!("virtplane-guest: hostname {name}"),
            // The emptyDisk: 64Mi, blank, the second virtio disk.
            "virtplane-guest: disk vdb 67108864",
        ],
    );
    // NoCloud meta-data carries the firmware UUID as instance-id (KubeVirt).
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("virtplane-guest: meta-data:")
                && l.contains("instance-id")
                && l.contains(&firmware_uuid)),
        "meta-data has no instance-id {firmware_uuid}: {lines:#?}"
    );

    // The forwarded port reaches the guest's responder.
    let port = host_port(&vmi, 8080);
    let forward = &vmi["status"]["portForwards"][0];
    assert_eq!(forward["name"], "web", "{forward}");
    assert_eq!(forward["hostIP"], "127.0.0.1", "{forward}");
    let hello = env.hello(port, SHORT).await;
    assert_eq!(hello.trim(), format!("hello from {name}"));

    // The kernel came from the kernelBoot image, unpacked in the image cache.
    let argv = env.qemu_argv(name).join(" ");
    let images = env.data_dir.join("images").display().to_string();
    assert!(
        argv.contains(&format!("-kernel {images}")) && argv.contains("/boot/vmlinux"),
        "{argv}"
    );
    let argv = env.qemu_argv(name);
    assert!(has_nic(&argv, "rtl8139"), "{argv:?}");
    // Every QEMU runs under its seccomp sandbox.
    let sandbox = argv.windows(2).find(|w| w[0] == "-sandbox");
    assert_eq!(
        sandbox.map(|w| w[1].as_str()),
        Some(::qemu::sandbox::SANDBOX),
        "{argv:?}"
    );
    let pid = env.qemus(name)[0];
    assert_eq!(proc_status(pid, "Seccomp").as_deref(), Some("2"));
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_settings_reach_qemu_and_the_guest() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "domain";
    let serial = "vp-serial-0042";
    let fw_uuid = "6a1e6f32-3c1b-4c57-9d3a-0d8c1f2e4b5a";
    let mac = "02:00:00:aa:bb:cc";
    let mut vm = kernel_vm(g, name, "Always", None);
    let spec = &mut vm["spec"]["template"]["spec"];
    spec["domain"]["machine"] = json!({"type": "pc"});
    spec["domain"]["cpu"] = json!({"sockets": 1, "cores": 2, "threads": 1, "model": "host-model"});
    spec["domain"]["memory"] = json!({"guest": "192Mi"});
    spec["domain"]["firmware"]["serial"] = json!(serial);
    spec["domain"]["firmware"]["uuid"] = json!(fw_uuid);
    spec["domain"]["devices"]["rng"] = json!({});
    spec["domain"]["devices"]["watchdog"] =
        json!({"name": "wd", "i6300esb": {"action": "poweroff"}});
    spec["domain"]["devices"]["interfaces"][0]["model"] = json!("e1000");
    spec["domain"]["devices"]["interfaces"][0]["macAddress"] = json!(mac);
    env.create_vm(&vm).await;
    let vmi = env.wait_running(name).await;
    check_running_status(&env, name, &vmi, "pc").await;
    assert_eq!(vmi["status"]["interfaces"][0]["mac"], mac);
    assert_eq!(
        vmi["status"]["currentCPUTopology"],
        json!({"sockets": 1, "cores": 2, "threads": 1})
    );

    let argv = env.qemu_argv(name);
    let joined = argv.join(" ");
    let arg = |flag: &str| -> String {
        argv.windows(2)
            .find(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .unwrap_or_else(|| panic!("no {flag} in {joined}"))
    };
    assert!(arg("-machine").starts_with("pc,"), "{joined}");
    // host-model has no host to copy under TCG: `max`; with KVM: `host`.
    let cpu = arg("-cpu");
    assert!(cpu == "max" || cpu == "host", "-cpu {cpu}");
    assert_eq!(arg("-smp"), "2,sockets=1,cores=2,threads=1");
    assert_eq!(arg("-m"), "192M");
    assert_eq!(arg("-uuid"), fw_uuid);
    assert!(
        arg("-smbios").contains(&format!("serial={serial}")),
        "{joined}"
    );
    assert!(joined.contains("virtio-rng-pci"), "{joined}");
    assert!(
        joined.contains("i6300esb") && joined.contains("watchdog=poweroff"),
        "{joined}"
    );
    assert!(
        qemu::json_args(&argv, "-device")
            .iter()
            .any(|d| d["driver"] == "e1000" && d["netdev"] == "net-default" && d["mac"] == mac),
        "{joined}"
    );

    // And the guest sees them.
    let lines = env.wait_ready(name).await;
    assert_lines(name, &lines, &["virtplane-guest: ip eth0 10.0.2.2"]);
    let mut console = env.console(name).await.expect("console");
    let checks = [
        ("nproc", "2"),
        ("cat /sys/class/dmi/id/product_serial", serial),
        ("cat /sys/class/dmi/id/product_uuid", fw_uuid),
        ("cat /sys/class/net/eth0/address", mac),
        ("ls /dev/watchdog", "/dev/watchdog"),
        ("cat /sys/class/misc/hw_random/rng_current", "virtio_rng"),
    ];
    // The first prompt may still be coming: wake the shell up.
    console.send("\r").await;
    for (command, expected) in checks {
        let line = console
            .run(command, expected, Duration::from_secs(30))
            .await
            .unwrap_or_else(|| {
                panic!(
                    "guest {name}: `{command}` did not print {expected:?}; console: {:?}",
                    console.seen
                )
            });
        assert!(
            line.eq_ignore_ascii_case(expected) || line.starts_with(expected),
            "`{command}` printed {line:?}"
        );
    }
    console.close().await;
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_disk_bios_pc_virtio_with_config_drive() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "bios-pc-virtio";
    let started = Instant::now();
    let mut vm = disk_vm(g, name, "pc", "virtio");
    add_volume(
        &mut vm,
        json!({"name": "configdrive", "disk": {"bus": "virtio"}}),
        json!({"name": "configdrive",
               "cloudInitConfigDrive": {"userData": "#virtplane: serve 8080\n"}}),
    );
    env.create_vm(&vm).await;
    let vmi = env.wait_running(name).await;
    check_running_status(&env, name, &vmi, "pc").await;
    let lines = env.wait_ready(name).await;
    eprintln!("{name}: ready after {:?}", started.elapsed());
    assert_lines(
        name,
        &lines,
        &[
            "virtplane-guest: seed config-2 vdb",
            "virtplane-guest: user-data: #virtplane: serve 8080",
            &format!("virtplane-guest: hostname {name}"),
        ],
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("virtplane-guest: disk vda ")),
        "{lines:#?}"
    );
    let meta = lines
        .iter()
        .find(|l| l.starts_with("virtplane-guest: meta-data: "))
        .unwrap_or_else(|| panic!("no meta_data.json: {lines:#?}"));
    let meta: Value = serde_json::from_str(&meta["virtplane-guest: meta-data: ".len()..])
        .unwrap_or_else(|e| panic!("meta_data.json {meta:?}: {e}"));
    assert_eq!(meta["hostname"], name, "{meta}");
    assert_eq!(
        meta["uuid"], vmi["spec"]["domain"]["firmware"]["uuid"],
        "ConfigDrive uuid is the firmware UUID: {meta}"
    );
    let hello = env.hello(host_port(&vmi, 8080), SHORT).await;
    assert_eq!(hello.trim(), format!("hello from {name}"));

    // The VMI writes to its own overlay on the cached image.
    let overlay = env.vmi_dir(name).join("root.qcow2");
    let backing = qcow2_backing(&overlay);
    assert!(
        backing.starts_with(&env.data_dir.join("images").display().to_string()),
        "overlay {} is backed by {backing}",
        overlay.display()
    );
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_disk_bios_q35_sata_boot_order_and_nocloud() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "bios-q35-sata";
    let started = Instant::now();
    let mut vm = disk_vm(g, name, "q35", "sata");
    // A blank disk first on the bus: only bootOrder makes the BIOS pick the root disk.
    let spec = &mut vm["spec"]["template"]["spec"];
    spec["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"name": "scratch", "disk": {"bus": "sata"}}));
    spec["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "scratch", "emptyDisk": {"capacity": "32Mi"}}));
    vm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][0]["model"] = json!("e1000e");
    add_volume(
        &mut vm,
        json!({"name": "cloudinit", "disk": {"bus": "sata"}}),
        json!({"name": "cloudinit", "cloudInitNoCloud": {"userData": "#virtplane: serve 8080\n"}}),
    );
    env.create_vm(&vm).await;
    let vmi = env.wait_running(name).await;
    check_running_status(&env, name, &vmi, "q35").await;
    let targets: Vec<(&str, &str)> = vmi["status"]["volumeStatus"]
        .as_array()
        .unwrap_or_else(|| panic!("no volumeStatus: {}", vmi["status"]))
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap_or(""),
                v["target"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        targets,
        [("scratch", "sda"), ("root", "sdb"), ("cloudinit", "sdc")]
    );
    let lines = env.wait_ready(name).await;
    eprintln!("{name}: ready after {:?}", started.elapsed());
    assert_lines(
        name,
        &lines,
        &[
            "virtplane-guest: ip eth0 10.0.2.2",
            "virtplane-guest: serve 8080",
        ],
    );
    // The guest kernel probes AHCI ports in parallel, so its sdX letters follow probe
    // order, not the bus order volumeStatus reports: find each disk by what is on it.
    assert!(
        ["sda", "sdb", "sdc"]
            .iter()
            .any(|d| has(&lines, &format!("virtplane-guest: seed cidata {d}"))),
        "{name}: the NoCloud seed is not on a SATA disk: {lines:#?}"
    );
    assert!(
        ["sda", "sdb", "sdc"]
            .iter()
            .any(|d| has(&lines, &format!("virtplane-guest: disk {d} 33554432"))),
        "{name}: no 32 MiB scratch disk: {lines:#?}"
    );
    let hello = env.hello(host_port(&vmi, 8080), SHORT).await;
    assert_eq!(hello.trim(), format!("hello from {name}"));
    let argv = env.qemu_argv(name);
    assert!(has_nic(&argv, "e1000e"), "{argv:?}");
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_disk_bios_q35_scsi_with_cdrom_seed() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "bios-q35-scsi";
    let started = Instant::now();
    let mut vm = disk_vm(g, name, "q35", "scsi");
    add_volume(
        &mut vm,
        json!({"name": "cloudinit", "cdrom": {"bus": "sata"}}),
        json!({"name": "cloudinit", "cloudInitNoCloud": {"userData": "#virtplane: serve 8080\n"}}),
    );
    env.create_vm(&vm).await;
    let vmi = env.wait_running(name).await;
    check_running_status(&env, name, &vmi, "q35").await;
    let lines = env.wait_ready(name).await;
    eprintln!("{name}: ready after {:?}", started.elapsed());
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("virtplane-guest: disk sda ")),
        "{lines:#?}"
    );
    // The seed on a read-only cdrom.
    assert_lines(
        name,
        &lines,
        &[
            "virtplane-guest: seed cidata sr0",
            "virtplane-guest: serve 8080",
        ],
    );
    let argv = env.qemu_argv(name).join(" ");
    assert!(argv.contains("virtio-scsi-pci"), "{argv}");
    assert!(argv.contains("ide-cd"), "{argv}");
    env.delete_vm(name).await;
}

/// Pushes an image holding the bzImage (OVMF boots kernels through their EFI stub, not
/// the PVH entry of vmlinux) to the test registry, once.
fn efi_kernel_image(g: &qemu::Guests) -> Result<String, String> {
    let root = qemu::repo_root();
    let out_dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let layout = out_dir.path().join("oci-efi");
    let run = |cmd: &mut std::process::Command| -> Result<String, String> {
        let out = cmd.output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).to_string());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    run(std::process::Command::new("python3")
        .arg(root.join("scripts/guest/oci-layout.py"))
        .arg("--out")
        .arg(&layout)
        .args(["--uid", "107", "--gid", "107", "--mode", "0444"])
        .arg(format!("boot/bzImage={}", g.dir.join("bzImage").display()))
        .arg(format!(
            "boot/initramfs.cpio.gz={}",
            g.dir.join("initramfs.cpio.gz").display()
        )))?;
    run(std::process::Command::new("python3")
        .arg(root.join("scripts/guest/registry-push.py"))
        .arg(&g.registry)
        .arg("guest-efi:latest")
        .arg(&layout))?;
    Ok(format!("{}/guest-efi:latest", g.registry))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn efi_boot_with_ovmf() {
    let Some(g) = guests() else { return };
    if !Path::new("/usr/share/OVMF/OVMF_CODE_4M.fd").exists() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: EFI boot: OVMF is not installed (Debian package ovmf)"
        );
        return;
    }
    let image = efi_kernel_image(g).unwrap_or_else(|e| panic!("pushing the EFI kernel image: {e}"));
    let env = shared(g).await;
    let name = "efi";
    let started = Instant::now();
    let mut vm = kernel_vm(g, name, "Always", Some("#virtplane: serve 8080\n"));
    let domain = &mut vm["spec"]["template"]["spec"]["domain"];
    domain["firmware"]["bootloader"] = json!({"efi": {"secureBoot": false}});
    // OVMF with less than about 200 MiB faults before it reaches the kernel.
    domain["memory"] = json!({"guest": "256Mi"});
    domain["firmware"]["kernelBoot"]["container"]["image"] = json!(image);
    domain["firmware"]["kernelBoot"]["container"]["kernelPath"] = json!("/boot/bzImage");
    env.create_vm(&vm).await;
    let vmi = env.wait_running(name).await;
    let argv = env.qemu_argv(name).join(" ");
    assert!(
        argv.contains("pflash0=pflash0,pflash1=pflash1") && argv.contains("OVMF_CODE"),
        "{argv}"
    );
    // OVMF itself takes 15-30 s under software emulation.
    env.wait_guest_line(
        name,
        "virtplane-guest: ready",
        BOOT + Duration::from_secs(60),
    )
    .await;
    eprintln!("{name}: EFI guest ready after {:?}", started.elapsed());
    let lines = env.guest_lines(name);
    assert_lines(name, &lines, &["virtplane-guest: seed cidata vda"]);
    // The guest booted through EFI.
    let mut console = env.console(name).await.expect("console");
    console.send("\r").await;
    let line = console
        .run(
            "test -d /sys/firmware/efi && echo efi-yes",
            "efi-yes",
            Duration::from_secs(30),
        )
        .await;
    assert!(line.is_some(), "no /sys/firmware/efi: {:?}", console.seen);
    console.close().await;
    assert_eq!(vmi["status"]["machine"]["type"], "q35");
    env.delete_vm(name).await;

    // secureBoot (KubeVirt's default with efi): the secure-boot OVMF build with its
    // enrolled-keys variable store, SMM on, the flash protected.
    let name = "efi-secure";
    let mut vm = kernel_vm(g, name, "Always", None);
    let domain = &mut vm["spec"]["template"]["spec"]["domain"];
    domain["firmware"]["bootloader"] = json!({"efi": {}});
    // Admission (as KubeVirt's): SecureBoot requires SMM.
    domain["features"] = json!({"smm": {}});
    domain["memory"] = json!({"guest": "256Mi"});
    env.create_vm(&vm).await;
    env.wait_running(name).await;
    let argv = env.qemu_argv(name).join(" ");
    assert!(argv.contains("OVMF_CODE_4M.secboot.fd"), "{argv}");
    assert!(argv.contains("smm=on"), "{argv}");
    assert!(
        argv.contains("driver=cfi.pflash01,property=secure,value=on"),
        "{argv}"
    );
    let vars = env.vmi_dir(name).join("efivars.fd");
    assert_eq!(
        std::fs::metadata(&vars).map(|m| m.len()).ok(),
        std::fs::metadata("/usr/share/OVMF/OVMF_VARS_4M.ms.fd")
            .map(|m| m.len())
            .ok(),
        "the VM's own copy of the enrolled-keys variable store"
    );
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_disk_inside_the_allowed_dir_and_rejected_outside() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "hostdisk";
    let path = env.host_disk_dir.join("created.img");
    let mut vm = kernel_vm(g, name, "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "data", "disk": {"bus": "virtio"}}),
        json!({"name": "data", "hostDisk": {"path": path, "type": "DiskOrCreate", "capacity": "48Mi"}}),
    );
    env.create_vm(&vm).await;
    env.wait_running(name).await;
    let lines = env.wait_ready(name).await;
    assert_lines(name, &lines, &["virtplane-guest: disk vda 50331648"]);
    let meta = std::fs::metadata(&path).expect("DiskOrCreate created the file");
    assert_eq!(meta.len(), 48 << 20);
    env.delete_vm(name).await;

    // Outside --host-disk-dir: refused at admission, saying where disks may live.
    let outside = tempfile::tempdir().expect("temp dir");
    let outside_path = outside.path().join("escape.img");
    let mut vm = kernel_vm(g, "hostdisk-outside", "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "data", "disk": {"bus": "virtio"}}),
        json!({"name": "data", "hostDisk": {"path": outside_path, "type": "DiskOrCreate", "capacity": "1Mi"}}),
    );
    let r = env.post_vm(&vm).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    let causes = support::causes(&r);
    let field = "spec.template.spec.volumes[0].hostDisk.path";
    let cause = causes
        .iter()
        .find(|(_, f, _)| f == field)
        .unwrap_or_else(|| panic!("no cause on {field}: {}", r.text));
    let allowed = env.host_disk_dir.display().to_string();
    assert!(
        cause.2.contains(&outside_path.display().to_string()) && cause.2.contains(&allowed),
        "the message should name the path and where host disks may live: {:?}",
        cause.2
    );
    assert!(!outside_path.exists());
    // `..` cannot climb out either.
    let sneaky = env.host_disk_dir.join("../escape.img");
    vm["spec"]["template"]["spec"]["volumes"][0]["hostDisk"]["path"] = json!(sneaky);
    let r = env.post_vm(&vm).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    let causes = support::causes(&r);
    assert!(
        causes
            .iter()
            .any(|(_, f, m)| f == field && m.contains("must not contain '..'")),
        "{}",
        r.text
    );

    // A symlink in the allowed dir that leads out of it passes admission (the path is
    // fine as a string) but the node refuses it: the VMI fails saying where it leads,
    // and the file it points at is untouched.
    let secret = outside.path().join("secret.img");
    std::fs::write(&secret, b"not a disk for guests").unwrap();
    let link = env.host_disk_dir.join("link-out.img");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let name = "hostdisk-link";
    let mut vm = kernel_vm(g, name, "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "data", "disk": {"bus": "virtio"}}),
        json!({"name": "data", "hostDisk": {"path": link, "type": "Disk"}}),
    );
    env.create_vm(&vm).await;
    let vmi = env
        .wait_vmi(name, SHORT, "Synchronized=False about the link", |v| {
            v.and_then(|v| condition(v, "Synchronized"))
                .is_some_and(|c| {
                    c["status"] == "False"
                        && c["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("outside the directories this node allows"))
                })
        })
        .await
        .expect("VMI");
    let message = condition(&vmi, "Synchronized").unwrap()["message"].clone();
    let message = message.as_str().unwrap_or_default();
    let resolved = secret.canonicalize().unwrap().display().to_string();
    assert!(message.contains(&resolved), "{message}");
    assert!(env.qemus(name).is_empty(), "a QEMU was started for {name}");
    assert_eq!(std::fs::read(&secret).unwrap(), b"not a disk for guests");
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_failure_surfaces_on_the_vm() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    // A containerDisk that is not in the registry.
    let name = "pull-missing";
    let mut vm = disk_vm(g, name, "q35", "virtio");
    let image = format!("{}/no-such-image:latest", g.registry);
    vm["spec"]["template"]["spec"]["volumes"][0]["containerDisk"]["image"] = json!(image);
    env.create_vm(&vm).await;
    let vm = env
        .wait_vm(name, SHORT, "printableStatus ErrImagePull", |vm| {
            printable(vm) == "ErrImagePull"
        })
        .await;
    let vmi = env.vmi(name).await.expect("VMI");
    let sync = condition(&vmi, "Synchronized").unwrap_or_else(|| panic!("{}", vmi["status"]));
    assert_eq!(sync["status"], "False", "{sync}");
    assert_eq!(sync["reason"], "ErrImagePull", "{sync}");
    let message = sync["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&image),
        "message should name the image: {message:?}"
    );
    eprintln!("{name}: {message}");
    // Mirrored onto the VM, as KubeVirt does.
    let on_vm = condition(&vm, "Synchronized").unwrap_or_else(|| panic!("{}", vm["status"]));
    assert_eq!(on_vm["message"], sync["message"], "{on_vm}");
    env.delete_vm(name).await;

    // A kernelBoot image from a registry that does not answer.
    let name = "pull-unreachable";
    let mut vm = kernel_vm(g, name, "Always", None);
    let image = "127.0.0.1:1/guest-kernel:latest";
    vm["spec"]["template"]["spec"]["domain"]["firmware"]["kernelBoot"]["container"]["image"] =
        json!(image);
    env.create_vm(&vm).await;
    env.wait_vm(name, SHORT, "printableStatus ErrImagePull", |vm| {
        printable(vm) == "ErrImagePull"
    })
    .await;
    let vmi = env.vmi(name).await.expect("VMI");
    let message = condition(&vmi, "Synchronized")
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_string();
    assert!(
        message.contains(image) && message.contains("refused"),
        "message should name the image and why: {message:?}"
    );
    eprintln!("{name}: {message}");
    assert_ne!(phase(&vmi), "Running");
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_disks_fail_with_a_message() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    // A hostDisk (type Disk) that does not exist: nothing to boot from.
    let name = "missing-disk";
    let missing = env.host_disk_dir.join("missing.img");
    let mut vm = kernel_vm(g, name, "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "data", "disk": {"bus": "virtio"}}),
        json!({"name": "data", "hostDisk": {"path": missing, "type": "Disk"}}),
    );
    env.create_vm(&vm).await;
    let vmi = env
        .wait_vmi(name, SHORT, "a Synchronized=False condition", |v| {
            v.and_then(|v| condition(v, "Synchronized"))
                .is_some_and(|c| c["status"] == "False")
        })
        .await
        .expect("VMI");
    let sync = condition(&vmi, "Synchronized").unwrap();
    let message = sync["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&missing.display().to_string()),
        "message should name the missing disk: {sync}"
    );
    assert_ne!(phase(&vmi), "Running");
    env.delete_vm(name).await;

    // A corrupt image: QEMU refuses it; the VMI fails and says why.
    let name = "corrupt-disk";
    let corrupt = env.host_disk_dir.join("corrupt.qcow2");
    let mut bytes = b"QFI\xfb".to_vec();
    bytes.extend_from_slice(&[0xff; 508]);
    std::fs::write(&corrupt, &bytes).unwrap();
    let mut vm = kernel_vm(g, name, "Manual", None);
    add_volume(
        &mut vm,
        json!({"name": "data", "disk": {"bus": "virtio"}}),
        json!({"name": "data", "hostDisk": {"path": corrupt, "type": "Disk"}}),
    );
    env.create_vm(&vm).await;
    env.vm_verb(name, "start").await;
    let vmi = env
        .wait_vmi(name, SHORT, "phase Failed", |v| {
            v.is_some_and(|v| phase(v) == "Failed")
        })
        .await
        .expect("VMI");
    let ready = condition(&vmi, "Ready").unwrap_or_else(|| panic!("{}", vmi["status"]));
    let message = ready["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&corrupt.display().to_string()),
        "the failure should name the bad disk: {}",
        vmi["status"]
    );
    eprintln!("{name}: {message}");
    let vm = env
        .wait_vm(name, SHORT, "printableStatus Stopped", |vm| {
            printable(vm) == "Stopped"
        })
        .await;
    let on_vm = condition(&vm, "Ready").unwrap_or_else(|| panic!("{}", vm["status"]));
    assert_eq!(on_vm["message"], ready["message"], "{}", vm["status"]);
    let _ = uid(&vmi);
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_volume_claim_disk_keeps_what_the_guest_wrote() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let claims = format!("/api/v1/namespaces/{}/persistentvolumeclaims", qemu::NS);
    let claim = "data-claim";
    let file = env.data_dir.join("volumes").join(qemu::NS).join(claim);
    env.api
        .create(
            &claims,
            &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "40Mi"}}}}),
        )
        .await;
    let deadline = Instant::now() + SHORT;
    loop {
        let r = env.api.get(&format!("{claims}/{claim}")).await;
        if r.body["status"]["phase"] == "Bound" {
            // Node agents learn where the disk is from the API, not from the server's layout.
            assert_eq!(
                r.body["metadata"]["annotations"]["virtplane.io/volume-path"],
                json!(file.display().to_string()),
                "{}",
                r.text
            );
            break;
        }
        assert!(Instant::now() < deadline, "claim never Bound: {}", r.text);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        std::fs::metadata(&file).expect("claim file").len(),
        40 << 20
    );

    let name = "pvc";
    let mut vm = kernel_vm(g, name, "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "data", "disk": {"bus": "virtio"}}),
        json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}),
    );
    env.create_vm(&vm).await;
    env.wait_running(name).await;
    let lines = env.wait_ready(name).await;
    assert_lines(name, &lines, &["virtplane-guest: disk vda 41943040"]);
    let mut console = env.console(name).await.expect("console");
    console.send("\r").await;
    let wrote = console
        .run(
            "echo kept-by-the-claim | dd of=/dev/vda conv=fsync 2>/dev/null && echo $((3*3))-written",
            "9-written",
            Duration::from_secs(30),
        )
        .await;
    assert!(wrote.is_some(), "console: {:?}", console.seen);
    console.close().await;
    env.vm_verb(name, "stop").await;
    env.wait_vmi_gone(name, SHORT).await;
    let bytes = std::fs::read(&file).expect("claim file");
    assert!(
        bytes.starts_with(b"kept-by-the-claim\n"),
        "the claim's file does not hold what the guest wrote"
    );
    env.delete_vm(name).await;

    // Deleting the claim frees its file.
    let r = env.api.delete(&format!("{claims}/{claim}"), None).await;
    assert!(r.status.is_success(), "{}", r.text);
    let deadline = Instant::now() + SHORT;
    while file.exists() {
        assert!(
            Instant::now() < deadline,
            "{} was not freed",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A claim that does not exist: the VM says so.
    let name = "pvc-missing";
    let mut vm = kernel_vm(g, name, "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "data", "disk": {"bus": "virtio"}}),
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "no-such-claim"}}),
    );
    env.create_vm(&vm).await;
    let vm = env
        .wait_vm(name, SHORT, "printableStatus ErrorPvcNotFound", |vm| {
            printable(vm) == "ErrorPvcNotFound"
        })
        .await;
    let sync = condition(&vm, "Synchronized").unwrap_or_else(|| panic!("{}", vm["status"]));
    assert!(
        sync["message"]
            .as_str()
            .unwrap_or("")
            .contains("no-such-claim"),
        "{sync}"
    );
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_this_node_cannot_honour_fail_with_a_message() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let mut cases = vec![(
        "bridge",
        {
            let mut vm = kernel_vm(g, "bridge", "Manual", None);
            vm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"] =
                json!([{"name": "default", "bridge": {}}]);
            vm
        },
        "bridge",
    )];
    let free_hugepages = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("HugePages_Free:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    if free_hugepages == 0 {
        let mut vm = kernel_vm(g, "hugepages", "Manual", None);
        vm["spec"]["template"]["spec"]["domain"]["memory"]["hugepages"] =
            json!({"pageSize": "2Mi"});
        cases.push(("hugepages", vm, "hugepages"));
    }
    for (name, vm, _) in &cases {
        env.create_vm(vm).await;
        env.vm_verb(name, "start").await;
    }
    for (name, _, words) in &cases {
        let vmi = env
            .wait_vmi(name, SHORT, "phase Failed", |v| {
                v.is_some_and(|v| phase(v) == "Failed")
            })
            .await
            .expect("VMI");
        let message = condition(&vmi, "Ready")
            .and_then(|c| c["message"].as_str())
            .unwrap_or("")
            .to_string();
        assert!(
            message.contains(words),
            "{name}: the failure should say what is not available: {}",
            vmi["status"]
        );
        eprintln!("{name}: {message}");
        assert!(env.qemus(name).is_empty());
        env.delete_vm(name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sysprep_config_map_becomes_a_cd_with_its_keys() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let unattend = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<unattend xmlns=\"urn:schemas-microsoft-com:unattend\">\n  <settings pass=\"oobeSystem\"/>\n</unattend>\n";
    env.api
        .create(
            &format!("/api/v1/namespaces/{}/configmaps", qemu::NS),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "answers"},
                    "data": {"unattend.xml": unattend, "setup.cmd": "echo virtplane"}}),
        )
        .await;
    let name = "sysprep";
    let mut vm = kernel_vm(g, name, "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "sysprep", "cdrom": {"bus": "sata"}}),
        json!({"name": "sysprep", "sysprep": {"configMap": {"name": "answers"}}}),
    );
    env.create_vm(&vm).await;
    env.wait_running(name).await;
    let lines = env.wait_ready(name).await;
    assert_lines(
        name,
        &lines,
        &[
            "virtplane-guest: sysprep sr0",
            "virtplane-guest: sysprep-file setup.cmd: echo virtplane",
            "virtplane-guest: sysprep-file unattend.xml: <?xml version=\"1.0\" encoding=\"utf-8\"?>",
            "virtplane-guest: sysprep-file unattend.xml: <unattend xmlns=\"urn:schemas-microsoft-com:unattend\">",
            "virtplane-guest: sysprep-file unattend.xml:   <settings pass=\"oobeSystem\"/>",
            "virtplane-guest: sysprep-file unattend.xml: </unattend>",
        ],
    );
    // A read-only CD built from the keys: the ISO KubeVirt would attach.
    let argv = env.qemu_argv(name).join(" ");
    let iso = env.vmi_dir(name).join("sysprep-sysprep.iso");
    assert!(argv.contains(&iso.display().to_string()), "{argv}");
    assert!(argv.contains("ide-cd"), "{argv}");
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_init_user_and_network_data_from_a_secret() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    env.api
        .create(
            &format!("/api/v1/namespaces/{}/secrets", qemu::NS),
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "guest-data"},
                    "stringData": {"userdata": "#cloud-config\n#virtplane: serve 8080\n",
                                   "networkData": "version: 2\n"}}),
        )
        .await;
    let name = "secret-userdata";
    let mut vm = kernel_vm(g, name, "Always", None);
    add_volume(
        &mut vm,
        json!({"name": "cloudinit", "disk": {"bus": "virtio"}}),
        json!({"name": "cloudinit", "cloudInitNoCloud": {
            "secretRef": {"name": "guest-data"},
            "networkDataSecretRef": {"name": "guest-data"}}}),
    );
    env.create_vm(&vm).await;
    let vmi = env.wait_running(name).await;
    let lines = env.wait_ready(name).await;
    assert_lines(
        name,
        &lines,
        &[
            "virtplane-guest: seed cidata vda",
            "virtplane-guest: user-data: #virtplane: serve 8080",
            "virtplane-guest: network-config: version: 2",
            "virtplane-guest: serve 8080",
        ],
    );
    let hello = env.hello(host_port(&vmi, 8080), SHORT).await;
    assert_eq!(hello.trim(), format!("hello from {name}"));
    env.delete_vm(name).await;
}

/// The most common KubeVirt manifest: a VM whose root disk is a DataVolume template
/// importing a qcow2 image from a URL. The VM provisions, the import fills the claim,
/// and the guest boots from it; the DataVolume belongs to the VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_volume_template_imports_the_disk_the_guest_boots_from() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let server = images::listen(&g.dir).await;
    let name = "imported";
    let mut vm = disk_vm(g, name, "q35", "virtio");
    vm["spec"]["dataVolumeTemplates"] = json!([{
        "metadata": {"name": "imported-root"},
        "spec": {"source": {"http": {"url": format!("{}/images/disk.qcow2", server.url)}},
                 "storage": {"resources": {"requests": {"storage": "128Mi"}}}}}]);
    vm["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "root", "dataVolume": {"name": "imported-root"}}]);
    env.create_vm(&vm).await;
    let vmi = env.wait_running(name).await;
    let lines = env.wait_ready(name).await;
    assert!(
        lines
            .iter()
            .any(|l| l == "virtplane-guest: disk vda 134217728"),
        "the guest boots from the 128Mi claim: {lines:#?}"
    );
    let dv = env
        .api
        .get(&format!(
            "/apis/cdi.kubevirt.io/v1beta1/namespaces/{}/datavolumes/imported-root",
            qemu::NS
        ))
        .await
        .body;
    assert_eq!(dv["status"]["phase"], "Succeeded", "{}", dv["status"]);
    assert_eq!(dv["metadata"]["ownerReferences"][0]["name"], name);
    assert_eq!(
        vmi["spec"]["volumes"][0]["dataVolume"]["name"],
        "imported-root"
    );
    env.delete_vm(name).await;
}

/// A `registry` DataVolume source: the disk under `/disk/` of the containerDisk image
/// becomes the claim's raw disk; a tag the registry does not have fails with its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_volume_from_a_registry_image() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let dvs = format!(
        "/apis/cdi.kubevirt.io/v1beta1/namespaces/{}/datavolumes",
        qemu::NS
    );
    let dv = |name: &str, image: String| {
        json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": name},
               "spec": {"source": {"registry": {"url": format!("docker://{image}")}},
                        "storage": {"resources": {"requests": {"storage": "128Mi"}}}}})
    };
    env.api
        .create(&dvs, &dv("from-registry", g.disk_image()))
        .await;
    env.api
        .create(
            &dvs,
            &dv("no-such-tag", format!("{}/guest:nope", g.registry)),
        )
        .await;
    let final_phase = |r: &support::Reply| {
        matches!(
            r.body["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        )
    };
    let done = env
        .api
        .eventually(&format!("{dvs}/from-registry"), SHORT, final_phase)
        .await
        .body;
    assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
    let claim = env
        .api
        .get(&format!(
            "/api/v1/namespaces/{}/persistentvolumeclaims/from-registry",
            qemu::NS
        ))
        .await
        .body;
    let file = claim["metadata"]["annotations"]["virtplane.io/volume-path"]
        .as_str()
        .expect("volume path")
        .to_string();
    let disk = std::fs::read(g.dir.join("disk.img")).expect("the guest's raw disk");
    let imported = std::fs::read(&file).expect("claim file");
    assert_eq!(imported.len(), 128 << 20);
    assert!(
        imported[..disk.len()] == disk[..],
        "the claim holds the image's disk"
    );
    let failed = env
        .api
        .eventually(&format!("{dvs}/no-such-tag"), SHORT, final_phase)
        .await
        .body;
    assert_eq!(failed["status"]["phase"], "Failed", "{}", failed["status"]);
    let message = support::condition(&failed, "Running")
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_string();
    assert!(message.contains("manifest unknown"), "{message}");
}
