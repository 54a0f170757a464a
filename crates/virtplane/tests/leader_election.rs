//! Leader election through the real server: two candidates for one
//! `coordination.k8s.io/v1` Lease, of which exactly one runs its work; when it dies the
//! other takes the lease once it has seen it unrenewed for its duration, and the Lease
//! says who holds it. The server's own controllers hold theirs in `kube-system`.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use controllers::leader::{run_elected, Election};
use support::*;

fn election(identity: &str) -> Election {
    Election {
        namespace: "default".into(),
        name: "test-lease".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_interval: Duration::from_millis(300),
        renew_deadline: Duration::from_secs(1),
        retry: Duration::from_millis(200),
    }
}

async fn client(server: &TestServer) -> kube::Client {
    let path = server.data_dir().join("admin.kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// A candidate whose work raises its flag while it runs and lowers it when stopped.
fn candidate(
    client: kube::Client,
    identity: &str,
) -> (tokio::task::JoinHandle<()>, Arc<AtomicBool>) {
    let running = Arc::new(AtomicBool::new(false));
    let flag = running.clone();
    let task = tokio::spawn(run_elected(client, election(identity), move || {
        let flag = flag.clone();
        async move {
            struct Lower(Arc<AtomicBool>);
            impl Drop for Lower {
                fn drop(&mut self) {
                    self.0.store(false, Ordering::SeqCst);
                }
            }
            flag.store(true, Ordering::SeqCst);
            let _lower = Lower(flag);
            std::future::pending::<()>().await;
        }
    }));
    (task, running)
}

async fn holder(api: &Api, name: &str, namespace: &str) -> serde_json::Value {
    api.get(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    ))
    .await
    .body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_candidate_runs_and_another_takes_over_when_it_dies() {
    let server = TestServer::start_with(&["--no-node"]).await;
    let api = server.api();
    let (a_task, a) = candidate(client(&server).await, "candidate-a");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !a.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "candidate-a never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_b_task, b) = candidate(client(&server).await, "candidate-b");
    // Longer than the lease lasts: b never runs while a renews.
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!b.load(Ordering::SeqCst), "both candidates ran at once");
        assert!(a.load(Ordering::SeqCst), "the holder stopped");
    }
    let lease = holder(&api, "test-lease", "default").await;
    assert_eq!(lease["spec"]["holderIdentity"], "candidate-a", "{lease}");
    assert_eq!(lease["spec"]["leaseTransitions"], 0, "{lease}");

    // a dies: its work stops, and b takes the lease after seeing it unrenewed.
    a_task.abort();
    let died = Instant::now();
    let deadline = died + Duration::from_secs(20);
    while !b.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "candidate-b never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !a.load(Ordering::SeqCst),
        "the dead candidate's work still runs"
    );
    let lease = holder(&api, "test-lease", "default").await;
    assert_eq!(lease["spec"]["holderIdentity"], "candidate-b", "{lease}");
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");
    // a renewed at most one renew interval before it died; b waits a whole lease after
    // it last saw a change (a lower bound: a slow machine only makes it later).
    let earliest = Duration::from_secs(2) - Duration::from_millis(300);
    assert!(
        died.elapsed() >= earliest,
        "b took the lease {:?} after a died, before it could have expired",
        died.elapsed()
    );

    // The server's controllers hold their own lease, in kube's place for it.
    let own = std::fs::read_to_string(server.data_dir().join("server-id")).expect("server-id");
    let lease = holder(&api, "virtplane-controller-manager", "kube-system").await;
    assert_eq!(lease["spec"]["holderIdentity"], own.trim(), "{lease}");
}
