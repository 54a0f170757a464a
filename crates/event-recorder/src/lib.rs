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

/// Events dropped by every recorder of the process (see [`dropped_total`]).
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// How many events this process's recorders dropped so far (queue full, over an
/// object's rate, or not written after every attempt).
pub fn dropped_total() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Events taken from the queue and written at once, at most.
const BATCH: usize = 64;

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
}

impl Recorder {
    /// Starts the writer task (on the current Tokio runtime).
    pub fn start(client: Client, component: &str, host: Option<&str>) -> Recorder {
        let (queue, pending) = mpsc::channel(QUEUE);
        let writer = Writer {
            client,
            component: component.to_string(),
            host: host.map(str::to_string),
            written: HashMap::new(),
            budgets: HashMap::new(),
        };
        tokio::spawn(writer.run(pending));
        Recorder { queue }
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
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
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

impl Key {
    fn of(record: &Record) -> Key {
        Key {
            object: object_key(&record.regarding),
            kind: record.kind,
            reason: record.reason.clone(),
            message: record.message.clone(),
        }
    }
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
    /// Writes what is queued, a batch at a time: repeats of one event within a batch are
    /// counted into one write, and the batch's distinct events are written at once.
    async fn run(mut self, mut pending: mpsc::Receiver<Record>) {
        let mut batch = Vec::with_capacity(BATCH);
        while pending.recv_many(&mut batch, BATCH).await > 0 {
            let mut distinct: Vec<(Key, Record, i32)> = Vec::new();
            let mut index: HashMap<Key, usize> = HashMap::new();
            for record in batch.drain(..) {
                if !self.allowed(&record.regarding) {
                    self.drop_events(1);
                    continue;
                }
                let key = Key::of(&record);
                match index.get(&key) {
                    Some(&i) => {
                        distinct[i].2 += 1;
                        distinct[i].1.at = record.at;
                    }
                    None => {
                        index.insert(key.clone(), distinct.len());
                        distinct.push((key, record, 1));
                    }
                }
            }
            let writes = distinct.into_iter().map(|(key, record, times)| {
                let earlier = self.written.remove(&key);
                let sink = Sink {
                    client: self.client.clone(),
                    component: self.component.clone(),
                    host: self.host.clone(),
                };
                async move {
                    let outcome = sink.write_with_retries(earlier, &record, times).await;
                    (key, times, outcome)
                }
            });
            for (key, times, outcome) in futures::future::join_all(writes).await {
                match outcome {
                    Some(written) => self.remember(key, written),
                    None => self.drop_events(times as u64),
                }
            }
        }
    }

    fn drop_events(&self, count: u64) {
        DROPPED.fetch_add(count, Ordering::Relaxed);
    }

    /// Keeps `written` for its repeats, forgetting the least recently written beyond
    /// `REMEMBERED`.
    fn remember(&mut self, key: Key, written: Written) {
        if self.written.len() >= REMEMBERED {
            if let Some(oldest) = self
                .written
                .iter()
                .min_by_key(|(_, w)| w.last)
                .map(|(k, _)| k.clone())
            {
                self.written.remove(&oldest);
            }
        }
        self.written.insert(key, written);
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
}

/// Where a batch's writes go: the API, as this recorder's component.
struct Sink {
    client: Client,
    component: String,
    host: Option<String>,
}

impl Sink {
    /// Writes the event (`times` occurrences of it), as a bump of the `earlier` Event
    /// when there is one; `None` when every attempt failed (logged).
    async fn write_with_retries(
        &self,
        mut earlier: Option<Written>,
        record: &Record,
        times: i32,
    ) -> Option<Written> {
        let mut backoff = Duration::from_millis(500);
        for attempt in 1..=ATTEMPTS {
            match self.write(&mut earlier, record, times).await {
                Ok(written) => return Some(written),
                Err(e) if attempt < ATTEMPTS => {
                    tracing::debug!("writing event {}: {e}; again in {backoff:?}", record.reason);
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                Err(e) => tracing::warn!(
                    "event {} for {}/{} dropped: {e}",
                    record.reason,
                    record.regarding.namespace.as_deref().unwrap_or(""),
                    record.regarding.name.as_deref().unwrap_or("")
                ),
            }
        }
        None
    }

    async fn write(
        &self,
        earlier: &mut Option<Written>,
        record: &Record,
        times: i32,
    ) -> Result<Written, kube::Error> {
        let at = record.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        if let Some(written) = earlier.as_ref() {
            let events: Api<Event> = Api::namespaced(self.client.clone(), &written.namespace);
            let count = written.count + times;
            let patch = json!({"count": count, "lastTimestamp": at});
            match events
                .patch(
                    &written.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    return Ok(Written {
                        namespace: written.namespace.clone(),
                        name: written.name.clone(),
                        count,
                        last: Instant::now(),
                    })
                }
                // Expired (or deleted): a new Event.
                Err(kube::Error::Api(status)) if status.code == 404 => *earlier = None,
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
            "count": times,
            "reportingComponent": self.component,
            "reportingInstance": self.host.as_deref().unwrap_or(&self.component),
        }))
        .map_err(kube::Error::SerdeError)?;
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        events.create(&PostParams::default(), &event).await?;
        Ok(Written {
            namespace,
            name,
            count: times,
            last: Instant::now(),
        })
    }
}
