//! The DataSource controller: a DataSource's `Ready` condition says whether the claim it
//! names can be cloned now (the claim exists and, when a DataVolume fills it, that
//! DataVolume Succeeded), with CDI's reasons and messages; `status.source` repeats the
//! source while it is ready.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Patch;
use kube::core::DynamicObject;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::cdi::Phase;
use serde_json::{json, Value};

use super::{data_source_resource, data_volume_resource, params};
use crate::volumes::claim_resource;
use crate::Error;

/// How often a DataSource looks at its claim again (claims are not watched here).
const RECHECK: Duration = Duration::from_secs(5);

/// Ready's status, reason and message for a DataSource whose pvc source is in this state.
pub fn readiness(claim_exists: bool, filled_by: Option<Phase>) -> (&'static str, String, String) {
    match (claim_exists, filled_by) {
        (_, Some(Phase::Succeeded)) | (true, None) => (
            "True",
            "Ready".into(),
            "DataSource is ready to be consumed".into(),
        ),
        (false, None) => ("False", "NotFound".into(), "PVC not found".into()),
        (_, Some(phase)) => (
            "False",
            phase.as_str().to_string(),
            format!("Import DataVolume phase {}", phase.as_str()),
        ),
    }
}

pub async fn run(client: Client) {
    let api = Api::<DynamicObject>::all_with(client.clone(), &data_source_resource());
    Controller::new_with(api, watcher::Config::default(), data_source_resource())
        .with_config(crate::controller_config())
        .run(reconcile, error_policy, Arc::new(client))
        .for_each(|_| futures::future::ready(()))
        .await;
}

fn error_policy(source: Arc<DynamicObject>, error: &Error, _: Arc<Client>) -> Action {
    tracing::warn!(
        "datasource controller: sync of {} failed: {error}",
        source.name_any()
    );
    Action::requeue(RECHECK)
}

async fn reconcile(source: Arc<DynamicObject>, client: Arc<Client>) -> Result<Action, Error> {
    let namespace = source.namespace().unwrap_or_default();
    let pvc = source.data.pointer("/spec/source/pvc");
    let (status, reason, message) = match pvc.and_then(|p| p.get("name")).and_then(Value::as_str) {
        None => (
            "False",
            "NoSource".to_string(),
            "No source PVC set".to_string(),
        ),
        Some(name) => {
            let claim_namespace = pvc
                .and_then(|p| p.get("namespace"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(&namespace);
            let claims = Api::<DynamicObject>::namespaced_with(
                (*client).clone(),
                claim_namespace,
                &claim_resource(),
            );
            let dvs = Api::<DynamicObject>::namespaced_with(
                (*client).clone(),
                claim_namespace,
                &data_volume_resource(),
            );
            let exists = claims.get_opt(name).await?.is_some();
            let filled_by = dvs.get_opt(name).await?.map(|dv| Phase::of(&dv.data));
            let (s, r, m) = readiness(exists, filled_by);
            (s, r, m)
        }
    };
    let old = source
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned();
    let unchanged = old.as_ref().is_some_and(|c| {
        c["status"] == status && c["reason"] == reason.as_str() && c["message"] == message.as_str()
    });
    if !unchanged {
        let now = kubevirt_api::meta::now();
        let transition = old
            .as_ref()
            .filter(|c| c["status"] == status)
            .map_or_else(|| json!(now), |c| c["lastTransitionTime"].clone());
        let ready = json!({"type": "Ready", "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": transition, "lastHeartbeatTime": now});
        let shown = if status == "True" {
            source
                .data
                .pointer("/spec/source")
                .cloned()
                .unwrap_or(Value::Null)
        } else {
            json!({})
        };
        let api = Api::<DynamicObject>::namespaced_with(
            (*client).clone(),
            &namespace,
            &data_source_resource(),
        );
        let patch = json!({"status": {"conditions": [ready], "source": shown}});
        api.patch_status(&source.name_any(), &params(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(Action::requeue(RECHECK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_as_cdi_says_it() {
        assert_eq!(readiness(true, None).0, "True");
        assert_eq!(readiness(true, Some(Phase::Succeeded)).1, "Ready");
        assert_eq!(
            readiness(false, None),
            ("False", "NotFound".into(), "PVC not found".into())
        );
        assert_eq!(
            readiness(true, Some(Phase::ImportInProgress)),
            (
                "False",
                "ImportInProgress".into(),
                "Import DataVolume phase ImportInProgress".into()
            )
        );
    }
}
