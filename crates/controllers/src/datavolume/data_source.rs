//! The DataSource controller: a DataSource's `Ready` condition says whether the claim it
//! names can be cloned now (the claim exists and, when a DataVolume fills it, that
//! DataVolume Succeeded), with CDI's reasons and messages; `status.source` repeats the
//! source while it is ready.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::Patch;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client};
use kubevirt_api::cdi::model::{DataSource, DataVolume};
use kubevirt_api::cdi::Phase;
use kubevirt_api::model::object::find;
use serde_json::json;

use super::params;
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
    let api = Api::<DataSource>::all(client.clone());
    Controller::new(api, watcher::Config::default())
        .with_config(crate::controller_config())
        .run(
            crate::workqueue::measured("datasource", reconcile),
            error_policy,
            Arc::new(client),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

fn error_policy(source: Arc<DataSource>, error: &Error, _: Arc<Client>) -> Action {
    tracing::warn!(
        "datasource controller: sync of {} failed: {error}",
        source.name()
    );
    Action::requeue(RECHECK)
}

async fn reconcile(source: Arc<DataSource>, client: Arc<Client>) -> Result<Action, Error> {
    let namespace = source.namespace();
    let pvc = source.spec.source.as_ref().and_then(|s| s.pvc.as_ref());
    let (status, reason, message) = match pvc.and_then(|p| p.name.as_deref()) {
        None => (
            "False",
            "NoSource".to_string(),
            "No source PVC set".to_string(),
        ),
        Some(name) => {
            let claim_namespace = pvc
                .and_then(|p| p.namespace.as_deref())
                .filter(|n| !n.is_empty())
                .unwrap_or(namespace);
            let claims =
                Api::<PersistentVolumeClaim>::namespaced((*client).clone(), claim_namespace);
            let dvs = Api::<DataVolume>::namespaced((*client).clone(), claim_namespace);
            let exists = claims.get_opt(name).await?.is_some();
            let filled_by = dvs.get_opt(name).await?.map(|dv| dv.phase());
            let (s, r, m) = readiness(exists, filled_by);
            (s, r, m)
        }
    };
    let old = find(&source.status.conditions, "Ready");
    let unchanged = old.is_some_and(|c| {
        c.status.as_deref() == Some(status) && c.reason() == reason && c.message() == message
    });
    if !unchanged {
        let now = kubevirt_api::meta::now();
        let transition = old
            .filter(|c| c.status.as_deref() == Some(status))
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone());
        let ready = json!({"type": "Ready", "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": transition, "lastHeartbeatTime": now});
        let shown = if status == "True" {
            json!(source.spec.source)
        } else {
            json!({})
        };
        let api = Api::<DataSource>::namespaced((*client).clone(), namespace);
        let patch = json!({"status": {"conditions": [ready], "source": shown}});
        api.patch_status(source.name(), &params(), &Patch::Merge(&patch))
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
