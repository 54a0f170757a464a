//! Where a recorder's events are stored: through the API with a client, or, in the
//! server's process, by whatever it installs with `write_in_process`.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};

/// Why an event was not written.
#[derive(Debug)]
pub enum WriteError {
    /// The Event to bump is gone (expired or deleted).
    NotFound,
    /// Anything else; worth another attempt.
    Failed(String),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::NotFound => f.write_str("the event is gone"),
            WriteError::Failed(reason) => f.write_str(reason),
        }
    }
}

/// Stores Events.
#[async_trait]
pub trait EventWriter: Send + Sync {
    /// Creates `event` (a core `v1` Event as JSON) in `namespace`; `component` is the
    /// writer (the field manager of the write).
    async fn create(
        &self,
        namespace: &str,
        component: &str,
        event: Value,
    ) -> Result<(), WriteError>;

    /// Sets the `count` and `lastTimestamp` of the Event `namespace/name`, as `component`.
    async fn bump(
        &self,
        namespace: &str,
        name: &str,
        component: &str,
        count: i32,
        last_timestamp: &str,
    ) -> Result<(), WriteError>;
}

/// Writes through the API, as any client would.
pub(crate) struct ApiWriter {
    client: Client,
}

impl ApiWriter {
    pub(crate) fn new(client: Client) -> ApiWriter {
        ApiWriter { client }
    }
}

fn api_error(e: kube::Error) -> WriteError {
    match e {
        kube::Error::Api(status) if status.code == 404 => WriteError::NotFound,
        e => WriteError::Failed(e.to_string()),
    }
}

#[async_trait]
impl EventWriter for ApiWriter {
    async fn create(
        &self,
        namespace: &str,
        component: &str,
        event: Value,
    ) -> Result<(), WriteError> {
        let event: Event =
            serde_json::from_value(event).map_err(|e| WriteError::Failed(e.to_string()))?;
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        events
            .create(
                &PostParams {
                    field_manager: Some(component.to_string()),
                    ..PostParams::default()
                },
                &event,
            )
            .await
            .map(drop)
            .map_err(api_error)
    }

    async fn bump(
        &self,
        namespace: &str,
        name: &str,
        component: &str,
        count: i32,
        last_timestamp: &str,
    ) -> Result<(), WriteError> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"count": count, "lastTimestamp": last_timestamp});
        let params = PatchParams {
            field_manager: Some(component.to_string()),
            ..PatchParams::default()
        };
        events
            .patch(name, &params, &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(api_error)
    }
}
