//! DataVolume helpers shared by the DataVolume test binaries: the manifest, its create,
//! waiting for a phase, and the Running condition's words.

// Each test binary uses its own part.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::{condition, Api};

const WAIT: Duration = Duration::from_secs(60);

pub fn collection(namespace: &str) -> String {
    format!("/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes")
}

/// A DataVolume of `size` (`spec.storage`) filled from `source`.
pub fn data_volume(name: &str, source: Value, size: &str) -> Value {
    json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
           "metadata": {"name": name},
           "spec": {"source": source, "storage": {"resources": {"requests": {"storage": size}}}}})
}

pub async fn create(api: &Api, namespace: &str, dv: &Value) {
    let r = api.post(&collection(namespace), dv).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

/// Waits until the DataVolume is in `phase`; a final phase other than it fails the test.
pub async fn wait_phase(api: &Api, namespace: &str, name: &str, phase: &str) -> Value {
    let path = format!("{}/{name}", collection(namespace));
    let deadline = Instant::now() + WAIT;
    loop {
        let dv = api.get(&path).await.body;
        let now = dv["status"]["phase"].as_str().unwrap_or("").to_string();
        if now == phase {
            return dv;
        }
        assert!(
            !["Succeeded", "Failed"].contains(&now.as_str()),
            "DataVolume {name} is {now}, not {phase}: {}",
            dv["status"]
        );
        assert!(
            Instant::now() < deadline,
            "DataVolume {name} never reached {phase}: {}",
            dv["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The message of the DataVolume's Running condition (where CDI puts a failure's words).
pub fn running_message(dv: &Value) -> String {
    condition(dv, "Running")
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_string()
}
