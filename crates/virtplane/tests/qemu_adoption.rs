//! Tier B: a server (and so its node agent) killed with SIGKILL and started again finds
//! the QEMU processes it left running, adopts them — same process, same VMI, never a
//! second QEMU — and keeps managing them: console, port forward, pause, a later crash.
//! Skipped loudly without QEMU or the test guests.

mod qemu;
mod support;

use std::time::{Duration, Instant};

use qemu::{alive, guests, host_port, kernel_vm, kill9, phase, Cluster, SHORT};
use support::{condition, uid};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_adopts_running_qemu() {
    let Some(g) = guests() else { return };
    let mut cluster = Cluster::start(g, &["--heartbeat-interval", "2s"]).await;
    let env = cluster.env();
    let names = ["adopt-a", "adopt-b"];
    for name in names {
        env.create_vm(&kernel_vm(
            g,
            name,
            "Always",
            Some("#virtplane: serve 8080\n"),
        ))
        .await;
    }
    let mut before = Vec::new();
    for name in names {
        let vmi = env.wait_running(name).await;
        env.wait_ready(name).await;
        let pid = env.qemu_pid(name).expect("qemu pid");
        assert_eq!(env.qemus(name), vec![pid]);
        before.push((vmi, pid));
    }

    // SIGKILL: no chance to stop anything. The guests keep running.
    cluster.server.kill9();
    for (_, pid) in &before {
        assert!(alive(*pid), "QEMU {pid} died with the server");
    }
    let restarted = Instant::now();
    cluster.server.restart().await;
    let env = cluster.env();
    env.wait_node_ready().await;
    eprintln!("server back after {:?}", restarted.elapsed());

    // Give the agent time to look at every VMI (several heartbeats) and check that
    // nothing changed: same VMI, same phase, same single QEMU.
    let settle = Instant::now() + Duration::from_secs(6);
    while Instant::now() < settle {
        for (name, (vmi, pid)) in names.iter().zip(&before) {
            let now = env.vmi(name).await.expect("VMI survives the restart");
            assert_eq!(uid(&now), uid(vmi), "{name} got a new VMI");
            assert_eq!(phase(&now), "Running", "{name}: {}", now["status"]);
            assert_eq!(
                now["status"]["phaseTransitionTimestamps"],
                vmi["status"]["phaseTransitionTimestamps"],
                "{name} went through phases again"
            );
            assert_eq!(
                env.qemus(name),
                vec![*pid],
                "{name}: one QEMU, the same one"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Still reachable: its forwarded port and its console.
    let (vmi_a, pid_a) = &before[0];
    let hello = env.hello(host_port(vmi_a, 8080), SHORT).await;
    assert_eq!(hello.trim(), "hello from adopt-a");
    let mut console = env.console("adopt-a").await.expect("console after restart");
    console.send("\r").await;
    assert!(
        console
            .run(
                "echo $((7*11))-adopted",
                "77-adopted",
                Duration::from_secs(30)
            )
            .await
            .is_some(),
        "console: {:?}",
        console.seen
    );

    // Still managed over QMP: pause and unpause reach the adopted QEMU.
    env.vmi_verb("adopt-a", "pause").await;
    env.wait_vmi("adopt-a", SHORT, "condition Paused=True", |v| {
        v.and_then(|v| condition(v, "Paused"))
            .is_some_and(|c| c["status"] == "True")
    })
    .await;
    let from = console.seen.len();
    console.send("echo $((8*11))-frozen\r").await;
    assert!(
        !console
            .read_until(from, "frozen", Duration::from_secs(3))
            .await,
        "the adopted guest did not pause: {:?}",
        &console.seen[from..]
    );
    env.vmi_verb("adopt-a", "unpause").await;
    assert!(
        console
            .read_until(from, "\n88-frozen", Duration::from_secs(30))
            .await,
        "the adopted guest did not resume: {:?}",
        &console.seen[from..]
    );
    console.close().await;
    assert_eq!(env.qemus("adopt-a"), vec![*pid_a]);

    // The agent watches the adopted process: a crash fails the VMI and Always restarts it.
    let (vmi_b, pid_b) = &before[1];
    kill9(*pid_b);
    let next = env.wait_running_not("adopt-b", &uid(vmi_b)).await;
    assert_ne!(uid(&next), uid(vmi_b));
    let new_pid = env.qemu_pid("adopt-b").expect("qemu pid");
    assert_ne!(new_pid, *pid_b);
    assert_eq!(env.qemus("adopt-b"), vec![new_pid]);

    // And a graceful stop of an adopted guest ends its QEMU.
    env.vm_verb("adopt-a", "stop").await;
    env.wait_vmi_gone("adopt-a", SHORT).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(*pid_a) {
        assert!(
            Instant::now() < deadline,
            "adopted QEMU {pid_a} outlived its VMI"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
