//! The store on a disk that fills up, as a user would see it: on a 40 MiB tmpfs, writes
//! fail with a 500 that says why, `/readyz` reports the store (`[-]store failed: ...`) so
//! a load balancer stops sending writes, and once there is room again the same process
//! takes writes and reports ready, without a restart. No acknowledged write is lost,
//! across the fault and a `kill -9` after it.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use support::*;

const SECRETS: &str = "/api/v1/namespaces/default/secrets";

/// A tmpfs mounted for the test; unmounted (lazily, whatever still uses it) when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Result<Tmpfs, String> {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({status}): this test needs root"
            ));
        }
        Ok(Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn required() -> bool {
    std::env::var_os("CI").is_some()
        || std::env::var_os("VIRTPLANE_REQUIRE_QEMU").is_some_and(|v| v != "0")
}

/// 256 KiB of data that does not compress, as a Secret.
fn secret(name: &str, seed: u64) -> serde_json::Value {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let bytes: Vec<u8> = (0..256 * 1024)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect();
    let data = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes);
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
           "data": {"blob": data}})
}

async fn readyz(api: &Api) -> (StatusCode, String) {
    let r = api
        .anonymous
        .get(format!("{}/readyz", api.url))
        .send()
        .await
        .expect("readyz");
    (r.status(), r.text().await.unwrap_or_default())
}

#[tokio::test]
async fn a_full_disk_fails_writes_and_readiness_until_there_is_room_again() {
    let (mut server, mount) =
        TestServer::start_prepared(&["--no-node"], &[], |dir| Tmpfs::mount(dir, "40m")).await;
    let _mount = match mount {
        Ok(mount) => mount,
        Err(why) if !required() => {
            eprintln!("SKIPPED: store fault test: {why}");
            return;
        }
        Err(why) => panic!("store fault test cannot run (CI): {why}"),
    };
    let api = server.api();
    // Most of the room goes to a file the test removes later, to give room back.
    let filler = server.data_dir().join("filler");
    let status = Command::new("fallocate")
        .args(["-l", "28M"])
        .arg(&filler)
        .status()
        .expect("fallocate");
    assert!(status.success(), "fallocate failed");

    let mut acknowledged = Vec::new();
    let mut failure = None;
    for i in 0..200 {
        let name = format!("s-{i}");
        let r = api.post(SECRETS, &secret(&name, i)).await;
        match r.status {
            StatusCode::CREATED => acknowledged.push(name),
            _ => {
                failure = Some(r);
                break;
            }
        }
    }
    let failure = failure.expect("the disk never filled up");
    assert_eq!(
        failure.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        failure.text
    );
    assert!(
        failure.text.contains("database or disk is full"),
        "{}",
        failure.text
    );
    assert!(
        !acknowledged.is_empty(),
        "nothing was written before the disk filled"
    );
    let (code, body) = readyz(&api).await;
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(body.contains("[+]ping ok"), "{body}");
    assert!(body.contains("[-]store failed: "), "{body}");
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    // Reads go on meanwhile.
    let listed = api.get(SECRETS).await;
    assert_eq!(listed.status, StatusCode::OK);

    // Room again: the same process takes writes and says it is ready.
    std::fs::remove_file(&filler).expect("remove filler");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = readyz(&api).await;
        if code == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "still not ready: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = api.post(SECRETS, &secret("after", 999)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    acknowledged.push("after".into());
    let present = |list: &serde_json::Value| names(list);
    let listed = present(&api.get(SECRETS).await.body);
    for name in &acknowledged {
        assert!(listed.contains(name), "{name} was acknowledged but is gone");
    }

    // And across a kill -9.
    server.restart().await;
    let api = server.api();
    let listed = present(&api.get(SECRETS).await.body);
    for name in &acknowledged {
        assert!(listed.contains(name), "{name} was lost across the restart");
    }
    let (code, body) = readyz(&api).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    // Verbose readiness lists the checks.
    let r = api
        .anonymous
        .get(format!("{}/readyz?verbose", api.url))
        .send()
        .await
        .expect("readyz");
    let text = r.text().await.unwrap_or_default();
    assert_eq!(text, "[+]ping ok\n[+]store ok\nreadyz check passed\n");
}
