//! The event recorder every controller and node agent uses, as client-go's: an event is
//! queued and written by a task of its own (a full queue drops it and counts the drop,
//! never blocking the caller); a repeat of the same event (same object, type, reason,
//! message and source) bumps `count` and `lastTimestamp` of the Event already written
//! instead of adding one; each object may have 25 events at once and one more every five
//! minutes (client-go's spam filter), so a crash loop cannot flood the store.
//!
//! Events are core `v1` Events with `firstTimestamp`, `lastTimestamp` and `count`, as
//! KubeVirt's components write them, which `kubectl describe` and `kubectl events` read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

/// Whether this process records events at all (see [`disable`]).
static DISABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Stops every recorder of the process from recording: what a benchmark compares
/// against to learn what events cost (`virtplane server --no-signals`).
pub fn disable() {
    DISABLED.store(true, Ordering::Relaxed);
}

/// Events queued before new ones are dropped.
const QUEUE: usize = 1000;
/// client-go's spam filter: burst and refill period per object.
const BURST: f64 = 25.0;
const REFILL: Duration = Duration::from_secs(300);
/// Correlated events remembered (client-go's aggregator cache holds 4096).
const REMEMBERED: usize = 4096;
/// Attempts at writing one event (client-go makes 12, 10 s apart).
const ATTEMPTS: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What is queued for the writer.
struct Record {
    regarding: ObjectReference,
    kind: EventType,
    reason: String,
    message: String,
    at: chrono::DateTime<chrono::Utc>,
}

/// Records events as one component (`source.component`), on one host if given.
#[derive(Clone)]
pub struct Recorder {
    queue: mpsc::Sender<Record>,
    dropped: Arc<AtomicU64>,
}

impl Recorder {
    /// Starts the writer task (on the current Tokio runtime).
    pub fn start(client: Client, component: &str, host: Option<&str>) -> Recorder {
        let (queue, pending) = mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            client,
            component: component.to_string(),
            host: host.map(str::to_string),
            dropped: dropped.clone(),
            written: HashMap::new(),
            budgets: HashMap::new(),
        };
        tokio::spawn(writer.run(pending));
        Recorder { queue, dropped }
    }

    /// A reference to `obj` for an event (kind, apiVersion, namespace, name, uid).
    pub fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
        ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            namespace: obj.namespace(),
            name: Some(obj.name_any()),
            uid: obj.uid(),
            ..ObjectReference::default()
        }
    }

    pub fn normal(&self, regarding: &ObjectReference, reason: &str, message: impl Into<String>) {
        self.record(regarding, EventType::Normal, reason, message.into());
    }

    pub fn warning(&self, regarding: &ObjectReference, reason: &str, message: impl Into<String>) {
        self.record(regarding, EventType::Warning, reason, message.into());
    }

    pub fn record(
        &self,
        regarding: &ObjectReference,
        kind: EventType,
        reason: &str,
        message: String,
    ) {
        if DISABLED.load(Ordering::Relaxed) {
            return;
        }
        let record = Record {
            regarding: regarding.clone(),
            kind,
            reason: reason.to_string(),
            message,
            at: chrono::Utc::now(),
        };
        if self.queue.try_send(record).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events dropped so far: queue full, the object over its rate, or not written.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// What makes two events the same (client-go's aggregation key, message included).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    object: (String, String, String, String),
    kind: EventType,
    reason: String,
    message: String,
}

/// An Event written, to be bumped by its repeats.
struct Written {
    namespace: String,
    name: String,
    count: i32,
    last: Instant,
}

/// An object's spam-filter bucket.
struct Budget {
    tokens: f64,
    at: Instant,
}

struct Writer {
    client: Client,
    component: String,
    host: Option<String>,
    dropped: Arc<AtomicU64>,
    written: HashMap<Key, Written>,
    budgets: HashMap<(String, String, String, String), Budget>,
}

fn object_key(r: &ObjectReference) -> (String, String, String, String) {
    let text = |s: &Option<String>| s.clone().unwrap_or_default();
    (
        text(&r.kind),
        text(&r.namespace),
        text(&r.name),
        text(&r.uid),
    )
}

impl Writer {
    async fn run(mut self, mut pending: mpsc::Receiver<Record>) {
        while let Some(record) = pending.recv().await {
            if !self.allowed(&record.regarding) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let mut backoff = Duration::from_millis(500);
            for attempt in 1..=ATTEMPTS {
                match self.write(&record).await {
                    Ok(()) => break,
                    Err(e) if attempt < ATTEMPTS => {
                        tracing::debug!(
                            "writing event {}: {e}; again in {backoff:?}",
                            record.reason
                        );
                        tokio::time::sleep(backoff).await;
                        backoff *= 2;
                    }
                    Err(e) => {
                        tracing::warn!(
                            "event {} for {}/{} dropped: {e}",
                            record.reason,
                            record.regarding.namespace.as_deref().unwrap_or(""),
                            record.regarding.name.as_deref().unwrap_or("")
                        );
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// Takes a token from the object's bucket (refilled one per `REFILL`, up to `BURST`).
    fn allowed(&mut self, regarding: &ObjectReference) -> bool {
        let now = Instant::now();
        if self.budgets.len() > REMEMBERED {
            self.budgets
                .retain(|_, b| now.duration_since(b.at) < REFILL.mul_f64(BURST));
        }
        let budget = self.budgets.entry(object_key(regarding)).or_insert(Budget {
            tokens: BURST,
            at: now,
        });
        let refilled = now.duration_since(budget.at).as_secs_f64() / REFILL.as_secs_f64();
        budget.tokens = (budget.tokens + refilled).min(BURST);
        budget.at = now;
        if budget.tokens >= 1.0 {
            budget.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    async fn write(&mut self, record: &Record) -> Result<(), kube::Error> {
        let key = Key {
            object: object_key(&record.regarding),
            kind: record.kind,
            reason: record.reason.clone(),
            message: record.message.clone(),
        };
        let at = record.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        if let Some(written) = self.written.get_mut(&key) {
            let events: Api<Event> = Api::namespaced(self.client.clone(), &written.namespace);
            let patch = json!({"count": written.count + 1, "lastTimestamp": at});
            match events
                .patch(
                    &written.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    written.count += 1;
                    written.last = Instant::now();
                    return Ok(());
                }
                // Expired (or deleted): a new Event.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.written.remove(&key);
                }
                Err(e) => return Err(e),
            }
        }
        // Cluster-scoped objects' events go to `default`, as client-go's.
        let namespace = record
            .regarding
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let object_name = record.regarding.name.clone().unwrap_or_default();
        let name = format!(
            "{object_name}.{:x}",
            record.at.timestamp_nanos_opt().unwrap_or_default()
        );
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": record.regarding,
            "reason": record.reason,
            "message": record.message,
            "type": record.kind.as_str(),
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.host.as_deref().unwrap_or(&self.component),
        }))
        .map_err(kube::Error::SerdeError)?;
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        events.create(&PostParams::default(), &event).await?;
        if self.written.len() >= REMEMBERED {
            // The least recently written goes.
            if let Some(oldest) = self
                .written
                .iter()
                .min_by_key(|(_, w)| w.last)
                .map(|(k, _)| k.clone())
            {
                self.written.remove(&oldest);
            }
        }
        self.written.insert(
            key,
            Written {
                namespace,
                name,
                count: 1,
                last: Instant::now(),
            },
        );
        Ok(())
    }
}
