//! The event recorder every controller and node agent uses, as client-go's: an event is
//! queued and written by a task of its own (a full queue drops it and counts the drop,
//! never blocking the caller); a repeat of the same event (same object, type, reason,
//! message and source) bumps `count` and `lastTimestamp` of the Event already written
//! instead of adding one; each object may have 25 events at once and one more every five
//! minutes (client-go's spam filter), so a crash loop cannot flood the store.
//!
//! Events are core `v1` Events with `firstTimestamp`, `lastTimestamp` and `count`, as
//! KubeVirt's components write them, which `kubectl describe` and `kubectl events` read.
//!
//! A recorder writes through the API with its client, or, in the server's own process
//! once [`write_in_process`] was called, straight to the server's registry: the same
//! defaulting, validation, managedFields and store, without encoding each event as an
//! HTTP request and its answer (a third of what three events per VM cost at 10,000 VMs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

mod writer;
use writer::ApiWriter;
pub use writer::{EventWriter, WriteError};

/// The server's registry, for the recorders of the components it runs itself.
static IN_PROCESS: OnceLock<Arc<dyn EventWriter>> = OnceLock::new();

/// Makes every recorder started after this in the process write with `writer` instead
/// of its client (the server, for its controllers and local node agents). Once only.
pub fn write_in_process(writer: Arc<dyn EventWriter>) {
    if IN_PROCESS.set(writer).is_err() {
        tracing::warn!("events are already written in process; the second writer is ignored");
    }
}

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
    /// Starts the writer task (on the current Tokio runtime); it writes with `client`
    /// unless this process writes events in process (see [`write_in_process`]).
    pub fn start(client: Client, component: &str, host: Option<&str>) -> Recorder {
        let target = IN_PROCESS
            .get()
            .cloned()
            .unwrap_or_else(|| Arc::new(ApiWriter::new(client)));
        Recorder::start_with(target, component, host)
    }

    /// Starts the writer task, writing with `target`.
    pub fn start_with(
        target: Arc<dyn EventWriter>,
        component: &str,
        host: Option<&str>,
    ) -> Recorder {
        let (queue, pending) = mpsc::channel(QUEUE);
        let writer = Writer {
            target,
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

impl Budget {
    /// Its tokens at `now` (not capped at `BURST`).
    fn refilled(&self, now: Instant) -> f64 {
        self.tokens + now.duration_since(self.at).as_secs_f64() / REFILL.as_secs_f64()
    }
}

/// Forgets the entries of `map` used less recently than its median, in one pass: the
/// caller does it once per half a map of inserts, not on every insert.
fn forget_older_half<K, V>(map: &mut HashMap<K, V>, used: impl Fn(&V) -> Instant) {
    let mut times: Vec<Instant> = map.values().map(&used).collect();
    if times.is_empty() {
        return;
    }
    let middle = times.len() / 2;
    let (_, cutoff, _) = times.select_nth_unstable(middle);
    let cutoff = *cutoff;
    map.retain(|_, v| used(v) > cutoff);
}

struct Writer {
    target: Arc<dyn EventWriter>,
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
                    target: self.target.clone(),
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

    /// Keeps `written` for its repeats; at `REMEMBERED`, the less recently written half
    /// is forgotten at once (client-go's cache is an LRU of 4,096).
    fn remember(&mut self, key: Key, written: Written) {
        if self.written.len() >= REMEMBERED {
            forget_older_half(&mut self.written, |w| w.last);
        }
        self.written.insert(key, written);
    }

    /// Takes a token from the object's bucket (refilled one per `REFILL`, up to `BURST`).
    fn allowed(&mut self, regarding: &ObjectReference) -> bool {
        let now = Instant::now();
        if self.budgets.len() >= REMEMBERED {
            // A bucket that has refilled is as good as none; past that, the least recently
            // used half goes, as from client-go's LRU (its objects start with a full bucket).
            self.budgets.retain(|_, b| b.refilled(now) < BURST);
            if self.budgets.len() >= REMEMBERED / 2 {
                forget_older_half(&mut self.budgets, |b| b.at);
            }
        }
        let budget = self.budgets.entry(object_key(regarding)).or_insert(Budget {
            tokens: BURST,
            at: now,
        });
        budget.tokens = budget.refilled(now).min(BURST);
        budget.at = now;
        if budget.tokens >= 1.0 {
            budget.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Where a batch's writes go, as this recorder's component.
struct Sink {
    target: Arc<dyn EventWriter>,
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
    ) -> Result<Written, WriteError> {
        let at = record.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        if let Some(written) = earlier.as_ref() {
            let count = written.count + times;
            match self
                .target
                .bump(
                    &written.namespace,
                    &written.name,
                    &self.component,
                    count,
                    &at,
                )
                .await
            {
                Ok(()) => {
                    return Ok(Written {
                        namespace: written.namespace.clone(),
                        name: written.name.clone(),
                        count,
                        last: Instant::now(),
                    })
                }
                // Expired (or deleted): a new Event.
                Err(WriteError::NotFound) => *earlier = None,
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
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
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
        });
        self.target
            .create(&namespace, &self.component, event)
            .await?;
        Ok(Written {
            namespace,
            name,
            count: times,
            last: Instant::now(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use serde_json::Value;
    use std::sync::Mutex;

    /// Keeps what it is asked to write.
    #[derive(Default)]
    struct Kept {
        created: Mutex<Vec<Value>>,
        bumped: Mutex<Vec<(String, i32)>>,
    }

    #[async_trait]
    impl EventWriter for Kept {
        async fn create(&self, _: &str, _: &str, event: Value) -> Result<(), WriteError> {
            self.created.lock().unwrap().push(event);
            Ok(())
        }
        async fn bump(
            &self,
            _: &str,
            name: &str,
            _: &str,
            count: i32,
            _: &str,
        ) -> Result<(), WriteError> {
            self.bumped.lock().unwrap().push((name.to_string(), count));
            Ok(())
        }
    }

    fn vm(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("kubevirt.io/v1".into()),
            kind: Some("VirtualMachine".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    /// Waits until the writer has taken everything queued so far.
    async fn settle(kept: &Kept, created: usize) {
        for _ in 0..500 {
            if kept.created.lock().unwrap().len() >= created {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    #[tokio::test]
    async fn a_repeat_bumps_the_event_already_written() {
        let kept = Arc::new(Kept::default());
        let recorder = Recorder::start_with(kept.clone(), "test-controller", None);
        recorder.warning(&vm("a"), "Stopped", "The VirtualMachineInstance crashed.");
        settle(&kept, 1).await;
        recorder.warning(&vm("a"), "Stopped", "The VirtualMachineInstance crashed.");
        recorder.warning(&vm("a"), "Stopped", "The VirtualMachineInstance crashed.");
        settle(&kept, 1).await;
        let created = kept.created.lock().unwrap().clone();
        assert_eq!(created.len(), 1);
        assert_eq!(created[0]["type"], "Warning");
        assert_eq!(created[0]["source"]["component"], "test-controller");
        let name = created[0]["metadata"]["name"].as_str().unwrap().to_string();
        let bumps = kept.bumped.lock().unwrap().clone();
        assert_eq!(bumps.last(), Some(&(name, 3)), "bumps: {bumps:?}");
    }

    #[tokio::test]
    async fn one_object_gets_its_burst_then_nothing() {
        let kept = Arc::new(Kept::default());
        let recorder = Recorder::start_with(kept.clone(), "test-controller", None);
        let before = dropped_total();
        for i in 0..30 {
            recorder.normal(&vm("loud"), "Tick", format!("tick {i}"));
        }
        settle(&kept, 25).await;
        assert_eq!(kept.created.lock().unwrap().len(), 25);
        assert!(dropped_total() - before >= 5);
    }

    #[tokio::test]
    async fn many_objects_are_all_written() {
        let kept = Arc::new(Kept::default());
        let recorder = Recorder::start_with(kept.clone(), "test-controller", None);
        let objects = 3 * REMEMBERED;
        for i in 0..objects {
            recorder.normal(&vm(&format!("vm-{i}")), "SuccessfulCreate", "made");
            if i % 500 == 499 {
                settle(&kept, i + 1).await;
            }
        }
        settle(&kept, objects).await;
        assert_eq!(kept.created.lock().unwrap().len(), objects);
    }

    #[tokio::test]
    async fn the_spam_filter_stays_bounded_and_keeps_the_recent_objects() {
        let mut writer = Writer {
            target: Arc::new(Kept::default()),
            component: "test-controller".into(),
            host: None,
            written: HashMap::new(),
            budgets: HashMap::new(),
        };
        // A loud object spends its burst, then many others each take one token.
        for _ in 0..BURST as usize {
            assert!(writer.allowed(&vm("loud")));
        }
        assert!(!writer.allowed(&vm("loud")));
        for i in 0..3 * REMEMBERED {
            assert!(writer.allowed(&vm(&format!("vm-{i}"))));
            assert!(
                writer.budgets.len() <= REMEMBERED,
                "{} buckets",
                writer.budgets.len()
            );
        }
        // The most recent objects keep their (spent) buckets.
        let recent = format!("vm-{}", 3 * REMEMBERED - 1);
        let tokens = writer.budgets[&object_key(&vm(&recent))].tokens;
        assert!(tokens < BURST, "{tokens}");
    }

    #[test]
    fn the_older_half_is_forgotten() {
        let start = Instant::now();
        let mut map: HashMap<u32, Instant> = (0..10)
            .map(|i| (i, start + Duration::from_millis(i as u64)))
            .collect();
        forget_older_half(&mut map, |at| *at);
        let mut kept: Vec<u32> = map.into_keys().collect();
        kept.sort();
        assert_eq!(kept, vec![6, 7, 8, 9]);
    }
}
