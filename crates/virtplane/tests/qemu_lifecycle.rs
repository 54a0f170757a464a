//! Tier B: the life of real guests under QEMU: graceful stop, restart, pause/unpause
//! (the guest really freezes), guest power-off and what each runStrategy does about it,
//! a QEMU crash, and the serial console over the websocket virtctl uses and through
//! `virtplane vm console`. One server for the whole file; skipped loudly without QEMU or
//! the test guests.

mod qemu;
mod support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use qemu::{alive, guests, kernel_vm, kill9, phase, shared, Env, BOOT, NS, SHORT};
use serde_json::Value;
use support::{condition, printable, uid, Next, Watch};

/// A watch on one VMI by name, from now.
async fn watch_vmi(env: &Env, name: &str) -> Watch {
    let watch = env
        .api
        .watch(&format!(
            "{}?watch=true&fieldSelector=metadata.name%3D{name}",
            support::coll(NS, "virtualmachineinstances")
        ))
        .await;
    assert!(watch.status.is_success(), "watch VMI {name}");
    watch
}

/// Reads watch events until `done` holds for one; returns it.
async fn until_event(
    watch: &mut Watch,
    within: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match watch.poll(left).await {
            Next::Event(e) => {
                seen.push(format!(
                    "{} {} {}",
                    e["type"].as_str().unwrap_or(""),
                    &uid(&e["object"])[..8.min(uid(&e["object"]).len())],
                    phase(&e["object"])
                ));
                if done(&e) {
                    return e;
                }
            }
            Next::End => panic!("watch ended before {what}; events: {seen:?}"),
            Next::Timeout => panic!("{what} did not happen within {within:?}; events: {seen:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_gives_a_new_vmi_and_stop_is_graceful() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "life";
    let grace = 4;
    let mut vm = kernel_vm(g, name, "Always", Some("#virtplane: serve 8080\n"));
    vm["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace.into();
    env.create_vm(&vm).await;
    let first = env.wait_running(name).await;
    env.wait_ready(name).await;
    let first_pid = env.qemu_pid(name).expect("qemu pid");
    assert_eq!(env.qemus(name), vec![first_pid]);

    // restart: the old VMI goes, a new one (new uid, new QEMU) boots.
    env.vm_verb(name, "restart").await;
    let second = env.wait_running_not(name, &uid(&first)).await;
    assert_ne!(uid(&second), uid(&first));
    env.wait_ready(name).await;
    let second_pid = env.qemu_pid(name).expect("qemu pid");
    assert_ne!(second_pid, first_pid);
    assert!(!alive(first_pid), "the first QEMU {first_pid} still runs");
    assert_eq!(env.qemus(name), vec![second_pid], "one QEMU per VMI");

    // stop: the ACPI power button; the test guest's acpid powers it off well within the
    // grace period, so the VMI ends Succeeded (a kill after the grace period would be Failed).
    let mut watch = watch_vmi(&env, name).await;
    let asked = Instant::now();
    env.vm_verb(name, "stop").await;
    let mut died = None;
    let mut final_phase = String::new();
    let deadline = Instant::now() + SHORT;
    loop {
        if died.is_none() && !alive(second_pid) {
            died = Some(asked.elapsed());
        }
        match watch.poll(Duration::from_millis(100)).await {
            Next::Event(e) => {
                if matches!(phase(&e["object"]), "Succeeded" | "Failed") {
                    final_phase = phase(&e["object"]).to_string();
                }
                if e["type"] == "DELETED" {
                    break;
                }
            }
            Next::Timeout => {}
            Next::End => panic!("VMI watch ended"),
        }
        assert!(
            Instant::now() < deadline,
            "VMI {name} not gone {SHORT:?} after stop\n{}",
            env.diagnostics(name)
        );
    }
    let gone = asked.elapsed();
    while died.is_none() && asked.elapsed() < gone + Duration::from_secs(5) {
        if !alive(second_pid) {
            died = Some(asked.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let died = died.unwrap_or_else(|| panic!("QEMU {second_pid} outlived its VMI"));
    eprintln!("{name}: stop: QEMU ended after {died:?}, VMI gone after {gone:?} ({final_phase})");
    assert_eq!(
        final_phase, "Succeeded",
        "a guest that honours the power button stops gracefully"
    );
    assert!(
        died < Duration::from_secs(grace),
        "QEMU ended after {died:?}, not within the {grace}s grace period"
    );
    let vm = env
        .wait_vm(name, SHORT, "printableStatus Stopped", |vm| {
            printable(vm) == "Stopped"
        })
        .await;
    assert_eq!(vm["spec"]["runStrategy"], "Halted");
    assert_ne!(vm["status"]["ready"], true);
    assert!(env.qemus(name).is_empty());
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_freezes_the_guest_and_unpause_resumes_it() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "pausable";
    env.create_vm(&kernel_vm(g, name, "Always", None)).await;
    env.wait_running(name).await;
    env.wait_ready(name).await;
    let pid = env.qemu_pid(name).expect("qemu pid");
    let mut console = env.console(name).await.expect("console");
    console.send("\r").await;
    assert!(
        console
            .run("echo $((6*7))-alive", "42-alive", Duration::from_secs(30))
            .await
            .is_some(),
        "guest shell does not answer: {:?}",
        console.seen
    );

    env.vmi_verb(name, "pause").await;
    let vmi = env
        .wait_vmi(name, SHORT, "condition Paused=True", |v| {
            v.and_then(|v| condition(v, "Paused"))
                .is_some_and(|c| c["status"] == "True")
        })
        .await
        .expect("VMI");
    assert_eq!(condition(&vmi, "Paused").unwrap()["reason"], "PausedByUser");
    assert_eq!(phase(&vmi), "Running");
    let vm = env
        .wait_vm(name, SHORT, "printableStatus Paused", |vm| {
            printable(vm) == "Paused"
        })
        .await;
    assert_ne!(vm["status"]["ready"], true, "a paused VM is not ready");

    // Frozen: typed input is not even echoed.
    let from = console.seen.len();
    console.send("echo $((6*8))-thawed\r").await;
    assert!(
        !console
            .read_until(from, "thawed", Duration::from_secs(4))
            .await,
        "a paused guest answered: {:?}",
        &console.seen[from..]
    );

    env.vmi_verb(name, "unpause").await;
    env.wait_vmi(name, SHORT, "Paused condition removed", |v| {
        v.is_some_and(|v| condition(v, "Paused").is_none_or(|c| c["status"] != "True"))
    })
    .await;
    assert!(
        console
            .read_until(from, "\n48-thawed", Duration::from_secs(30))
            .await,
        "the guest did not resume: {:?}",
        &console.seen[from..]
    );
    env.wait_vm(name, SHORT, "printableStatus Running, ready", |vm| {
        printable(vm) == "Running" && vm["status"]["ready"] == true
    })
    .await;
    assert_eq!(env.qemus(name), vec![pid], "pause must not replace QEMU");

    // softreboot: Ctrl+Alt+Del reaches the guest, which (told to reboot on it) boots
    // again inside the same QEMU and the same VMI.
    let before = env.vmi(name).await.expect("VMI");
    assert!(
        console
            .run(
                "echo 1 > /proc/sys/kernel/ctrl-alt-del && echo $((5*5))-armed",
                "25-armed",
                Duration::from_secs(30)
            )
            .await
            .is_some(),
        "console: {:?}",
        console.seen
    );
    let boots = |env: &Env| {
        env.guest_lines(name)
            .iter()
            .filter(|l| *l == "virtplane-guest: booted")
            .count()
    };
    assert_eq!(boots(&env), 1);
    env.vmi_verb(name, "softreboot").await;
    let deadline = Instant::now() + BOOT;
    while boots(&env) < 2 {
        assert!(
            Instant::now() < deadline,
            "the guest did not reboot: {:?}\n{}",
            env.guest_lines(name),
            env.diagnostics(name)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let after = env.vmi(name).await.expect("VMI");
    assert_eq!(uid(&after), uid(&before));
    assert_eq!(phase(&after), "Running");
    assert_eq!(env.qemus(name), vec![pid], "a soft reboot keeps the QEMU");
    console.close().await;
    env.delete_vm(name).await;
}

/// Reads a child's stdout in a thread, so a test can wait for text with a deadline.
fn reader(mut out: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

fn read_until(
    rx: &std::sync::mpsc::Receiver<Vec<u8>>,
    seen: &mut String,
    needle: &str,
    within: Duration,
) -> bool {
    let deadline = Instant::now() + within;
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            Err(_) => return false,
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_console_over_websocket_and_cli() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    let name = "console";
    env.create_vm(&kernel_vm(g, name, "Always", None)).await;
    env.wait_running(name).await;
    env.wait_ready(name).await;

    // The websocket, as virtctl opens it.
    let mut console = env.console(name).await.expect("console websocket");
    assert_eq!(console.protocol, "plain.kubevirt.io");
    console.send("\r").await;
    let line = console
        .run("echo $((40+2))marker", "42marker", Duration::from_secs(30))
        .await;
    assert_eq!(
        line.as_deref(),
        Some("42marker"),
        "console: {:?}",
        console.seen
    );
    console.close().await;

    // `virtplane vm console` with piped stdin: a shell, and Ctrl+] leaves.
    let mut child = Command::new(support::binary())
        .args(["vm", "console", name, "--kubeconfig"])
        .arg(env.kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("virtplane vm console");
    let mut stdin = child.stdin.take().unwrap();
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    let mut err_seen = String::new();
    assert!(
        read_until(
            &err,
            &mut err_seen,
            "Successfully connected",
            Duration::from_secs(20)
        ),
        "vm console did not connect: {err_seen:?}"
    );
    let mut seen = String::new();
    // The relay may take a moment to attach: type until the guest answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        stdin.write_all(b"echo $((50+5))cli\r").unwrap();
        stdin.flush().unwrap();
        if read_until(&out, &mut seen, "\n55cli", Duration::from_secs(3)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no answer through vm console: {seen:?} {err_seen:?}"
        );
    }
    stdin.write_all(&[0x1d]).unwrap();
    stdin.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("vm console did not exit on Ctrl+]");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "vm console exited with {status}");

    // The websocket is free again after the CLI left.
    let mut again = env.console(name).await.expect("console websocket again");
    again.send("\r").await;
    assert!(
        again
            .run("echo $((60+6))again", "66again", Duration::from_secs(30))
            .await
            .is_some(),
        "console: {:?}",
        again.seen
    );
    again.close().await;

    // VNC: the same relay to QEMU's VNC server, which greets with its RFB version.
    let mut vnc = qemu::Console::open(&env, name, "vnc")
        .await
        .expect("vnc websocket");
    assert_eq!(vnc.protocol, "plain.kubevirt.io");
    assert!(
        vnc.read_until(0, "RFB 003.", Duration::from_secs(10)).await,
        "no RFB greeting: {:?}",
        vnc.seen
    );
    vnc.close().await;

    // No console for a VMI that does not run: one clear line, non-zero exit.
    let out = Command::new(support::binary())
        .args(["vm", "console", "no-such-vm", "--kubeconfig"])
        .arg(env.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("virtplane vm console");
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("no-such-vm"), "{text}");
    env.delete_vm(name).await;
}

/// Creates a VM whose guest powers itself off once booted.
async fn poweroff_vm(env: &Env, g: &qemu::Guests, name: &str, strategy: &str) {
    env.create_vm(&kernel_vm(
        g,
        name,
        strategy,
        Some("#virtplane: poweroff\n"),
    ))
    .await;
}

async fn poweroff_always(env: &Env, g: &qemu::Guests) {
    let name = "off-always";
    let mut watch = watch_vmi(env, name).await;
    poweroff_vm(env, g, name, "Always").await;
    let ended = until_event(&mut watch, BOOT, "VMI Succeeded", |e| {
        phase(&e["object"]) == "Succeeded"
    })
    .await;
    let first = uid(&ended["object"]);
    // Always: the finished VMI is replaced by a new one.
    let next = until_event(&mut watch, SHORT, "a new VMI", |e| {
        e["type"] != "DELETED" && uid(&e["object"]) != first
    })
    .await;
    assert_ne!(uid(&next["object"]), first);
    env.vm_verb(name, "stop").await;
    env.delete_vm(name).await;
}

async fn poweroff_manual(env: &Env, g: &qemu::Guests) {
    let name = "off-manual";
    poweroff_vm(env, g, name, "Manual").await;
    assert!(
        env.vmi(name).await.is_none(),
        "Manual does not start by itself"
    );
    env.vm_verb(name, "start").await;
    let vmi = env
        .wait_vmi(name, BOOT, "phase Succeeded", |v| {
            v.is_some_and(|v| phase(v) == "Succeeded")
        })
        .await
        .expect("VMI");
    env.wait_vm(name, SHORT, "printableStatus Stopped", |vm| {
        printable(vm) == "Stopped"
    })
    .await;
    // Manual: the Succeeded VMI stays; nothing restarts it.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let now = env.vmi(name).await.expect("the Succeeded VMI stays");
        assert_eq!(uid(&now), uid(&vmi));
        assert_eq!(phase(&now), "Succeeded");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(env.qemus(name).is_empty());
    env.delete_vm(name).await;
}

async fn poweroff_rerun_on_failure(env: &Env, g: &qemu::Guests) {
    let name = "off-rerun";
    let mut watch = watch_vmi(env, name).await;
    poweroff_vm(env, g, name, "RerunOnFailure").await;
    let ended = until_event(&mut watch, BOOT, "VMI Succeeded", |e| {
        phase(&e["object"]) == "Succeeded"
    })
    .await;
    let first = uid(&ended["object"]);
    // RerunOnFailure: a guest that ended well is not run again.
    until_event(&mut watch, SHORT, "VMI deleted", |e| e["type"] == "DELETED").await;
    env.wait_vm(name, SHORT, "printableStatus Stopped", |vm| {
        printable(vm) == "Stopped"
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Some(v) = env.vmi(name).await {
            panic!(
                "RerunOnFailure restarted a Succeeded VMI ({first} -> {})",
                uid(&v)
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_power_off_succeeds_and_each_run_strategy_reacts() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    tokio::join!(
        poweroff_always(&env, g),
        poweroff_manual(&env, g),
        poweroff_rerun_on_failure(&env, g)
    );
}

async fn crash_always(env: &Env, g: &qemu::Guests) {
    let name = "crash-always";
    env.create_vm(&kernel_vm(g, name, "Always", None)).await;
    let first = env.wait_running(name).await;
    env.wait_guest_line(name, "virtplane-guest: booted", BOOT)
        .await;
    let pid = env.qemu_pid(name).expect("qemu pid");
    let mut watch = watch_vmi(env, name).await;
    kill9(pid);
    let failed = until_event(&mut watch, SHORT, "VMI Failed", |e| {
        phase(&e["object"]) == "Failed"
    })
    .await;
    assert_eq!(uid(&failed["object"]), uid(&first));
    let reason = failed["object"]["status"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("QEMU"), "reason {reason:?}");
    // Always: a new VMI with a new QEMU.
    let second = env.wait_running_not(name, &uid(&first)).await;
    env.wait_guest_line(name, "virtplane-guest: booted", BOOT)
        .await;
    let new_pid = env.qemu_pid(name).expect("qemu pid");
    assert_ne!(new_pid, pid);
    assert_eq!(env.qemus(name), vec![new_pid]);
    assert_ne!(uid(&second), uid(&first));
    env.vm_verb(name, "stop").await;
    env.delete_vm(name).await;
}

async fn crash_manual(env: &Env, g: &qemu::Guests) {
    let name = "crash-manual";
    env.create_vm(&kernel_vm(g, name, "Manual", None)).await;
    env.vm_verb(name, "start").await;
    let first = env.wait_running(name).await;
    let pid = env.qemu_pid(name).expect("qemu pid");
    kill9(pid);
    let failed = env
        .wait_vmi(name, SHORT, "phase Failed", |v| {
            v.is_some_and(|v| phase(v) == "Failed")
        })
        .await
        .expect("VMI");
    assert_eq!(uid(&failed), uid(&first));
    env.wait_vm(name, SHORT, "printableStatus Stopped", |vm| {
        printable(vm) == "Stopped"
    })
    .await;
    // Manual: the Failed VMI stays.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let now = env.vmi(name).await.expect("the Failed VMI stays");
        assert_eq!(uid(&now), uid(&first));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    env.delete_vm(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_crash_fails_the_vmi_and_always_restarts_it() {
    let Some(g) = guests() else { return };
    let env = shared(g).await;
    tokio::join!(crash_always(&env, g), crash_manual(&env, g));
}
