//! The events of the components the server runs itself (controllers, local and simulated
//! node agents), written straight to the registry: the same defaulting, validation,
//! managedFields, time to live and watch as a POST of the Event, without making each
//! one an HTTP request and its answer. Not audited, as events are not under kube's
//! recommended audit policy either.

use std::sync::Arc;

use async_trait::async_trait;
use event_recorder::{EventWriter, WriteError};
use serde_json::{json, Value};

use crate::registry::{Change, Registration, Registry, WriteOptions};

pub struct RegistryEventWriter {
    registry: Arc<Registry>,
    events: Arc<Registration>,
}

impl RegistryEventWriter {
    pub fn new(registry: Arc<Registry>) -> Option<RegistryEventWriter> {
        let events = registry.find("", "v1", "events")?;
        Some(RegistryEventWriter { registry, events })
    }
}

/// A write by `component` (its field manager), a virtplane component.
fn written_by(component: &str) -> WriteOptions {
    WriteOptions {
        field_manager: component.to_string(),
        privileged: true,
        ..WriteOptions::default()
    }
}

fn failure(status: apimachinery::status::Status) -> WriteError {
    if status.code == 404 {
        WriteError::NotFound
    } else {
        WriteError::Failed(status.message)
    }
}

#[async_trait]
impl EventWriter for RegistryEventWriter {
    async fn create(
        &self,
        namespace: &str,
        component: &str,
        event: Value,
    ) -> Result<(), WriteError> {
        self.registry
            .create(&self.events, Some(namespace), event, &written_by(component))
            .await
            .map(drop)
            .map_err(failure)
    }

    async fn bump(
        &self,
        namespace: &str,
        name: &str,
        component: &str,
        count: i32,
        last_timestamp: &str,
    ) -> Result<(), WriteError> {
        let options = written_by(component);
        self.registry
            .update_with(
                &self.events,
                Some(namespace),
                name,
                None,
                &options,
                |current| {
                    let mut bumped = current.clone();
                    bumped["count"] = json!(count);
                    bumped["lastTimestamp"] = json!(last_timestamp);
                    Ok(Change::replace(bumped))
                },
            )
            .await
            .map(drop)
            .map_err(failure)
    }
}
