//! Whether etcd takes writes, for `/readyz`: a write that failed marks the store unhealthy
//! at once, and a probe every two seconds (a linearizable read, which needs a quorum, and
//! the members' alarms, where a full database shows as NOSPACE) keeps the answer current
//! whether or not anyone writes. The probe ends with the store.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::{AlarmAction, AlarmType, GetOptions};

use crate::members::{Members, Retry};

const PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// A probe that takes longer than this counts as a failed one.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why etcd does not take writes now, if it does not.
#[derive(Clone, Default)]
pub struct Health(Arc<Mutex<Option<String>>>);

impl Health {
    pub fn get(&self) -> Result<(), String> {
        match &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    pub fn set(&self, why: Option<String>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }

    /// Probes until the store (the last holder of the state) is gone.
    pub fn spawn_probe(&self, members: Arc<Members>, probe_key: Vec<u8>) {
        let state: Weak<Mutex<Option<String>>> = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROBE_INTERVAL).await;
                let Some(state) = state.upgrade() else {
                    return;
                };
                let verdict =
                    match tokio::time::timeout(PROBE_TIMEOUT, probe(&members, &probe_key)).await {
                        Ok(verdict) => verdict,
                        Err(_) => Some(format!(
                        "etcd did not answer within {PROBE_TIMEOUT:?} (is a quorum of members up?)"
                    )),
                    };
                Health(state).set(verdict);
            }
        });
    }
}

/// `None` when a quorum answers and no member raised an alarm.
async fn probe(members: &Members, probe_key: &[u8]) -> Option<String> {
    let read = members
        .call(Retry::Any, |mut client| async move {
            let count = GetOptions::new().with_count_only();
            client.get(probe_key, Some(count)).await
        })
        .await;
    if let Err(e) = read {
        return Some(format!("etcd: {e}"));
    }
    let alarms = members
        .call(Retry::Any, |mut client| async move {
            client.alarm(AlarmAction::Get, AlarmType::None, None).await
        })
        .await;
    match alarms {
        Err(e) => Some(format!("etcd: {e}")),
        Ok(alarms) => alarms.alarms().first().map(|alarm| match alarm.alarm() {
            AlarmType::Nospace => "etcdserver: mvcc: database space exceeded".to_string(),
            AlarmType::Corrupt => "etcdserver: corrupt cluster".to_string(),
            AlarmType::None => "etcd raised an alarm".to_string(),
        }),
    }
}
