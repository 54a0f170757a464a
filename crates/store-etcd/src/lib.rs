//! A store backend over etcd v3.
//!
//! Revisions are etcd's: a value's `mod_revision`/`create_revision` are etcd's, and
//! `resourceVersion` is the etcd revision. Each write is one etcd transaction that compares
//! revisions (create: `create_revision == 0`; update and conditional delete: `mod_revision`),
//! so several servers may write to one etcd. Compaction is etcd's; reading or watching a
//! compacted revision fails with [`StoreError::Compacted`] (410 Gone to clients).
//!
//! `current_revision` and `compacted_revision` are synchronous in the store contract, so
//! this store keeps the highest revisions it has seen in etcd's responses. Another server's
//! writes advance them only when this one next talks to etcd; the API server's watches
//! tolerate that (they skip events up to the requested revision).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Certificate, Compare, CompareOp, ConnectOptions, GetOptions, Identity, PutOptions, TlsOptions,
    Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use store::{KeyValue, ListOptions, ListResult, Result, Revision, Store, StoreError, WatchStream};

mod error;
mod health;
mod layout;
mod members;
mod recent;
#[cfg(feature = "testing")]
pub mod testing;
mod watch;

use error::{backend, classify, future, Failure};
pub use layout::Layout;
use members::{Members, Retry};

/// How long connecting to an endpoint may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 keep-alive pings find a dead connection (and fail its watches over to
/// reconnecting) instead of waiting for TCP to notice.
const KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(5));
/// How long learning etcd's compacted revision waits for its answer.
const COMPACTION_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Client certificates for etcd, as kube-apiserver's `--etcd-cafile/--etcd-certfile/--etcd-keyfile`.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    /// The CA that signed the etcd servers' certificates (default: the system roots).
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key, for etcd's `--client-cert-auth`.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members (`http://` or `https://`); requests are balanced
    /// over them and fail over between them.
    pub endpoints: Vec<String>,
    pub tls: TlsFiles,
    pub layout: Layout,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("no etcd endpoints given")]
    NoEndpoints,
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--etcd-certfile and --etcd-keyfile go together")]
    HalfIdentity,
    #[error("cannot reach etcd at {endpoints}: {message}")]
    Unreachable { endpoints: String, message: String },
}

pub struct EtcdStore {
    members: Arc<Members>,
    layout: Layout,
    /// Highest revision seen in any etcd response.
    current: Arc<AtomicI64>,
    /// Highest compacted revision known (ours, or learnt from etcd).
    compacted: Arc<AtomicI64>,
    /// Whether etcd takes writes (see `health`).
    health: health::Health,
    /// What updates may start from without reading etcd first.
    recent: recent::Recent,
    /// The lease each TTL (in seconds) shares now, and when it was granted.
    leases: Mutex<HashMap<i64, (i64, Instant)>>,
}

impl EtcdStore {
    /// Connects, and learns etcd's current and compacted revisions, so that a store that
    /// opens successfully has talked to a member that could answer.
    pub async fn connect(config: EtcdConfig) -> Result<EtcdStore, ConnectError> {
        if config.endpoints.is_empty() {
            return Err(ConnectError::NoEndpoints);
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            // A member cut off from its cluster says so instead of waiting for a leader.
            .with_require_leader(true)
            .with_keep_alive(KEEP_ALIVE.0, KEEP_ALIVE.1)
            .with_keep_alive_while_idle(true);
        let tls = &config.tls;
        let wants_tls = tls.ca_file.is_some()
            || tls.cert_file.is_some()
            || config.endpoints.iter().any(|e| e.starts_with("https://"));
        if wants_tls {
            options = options.with_tls(tls_options(tls)?);
        }
        let unreachable = |message: String| ConnectError::Unreachable {
            endpoints: config.endpoints.join(","),
            message,
        };
        let members = Members::connect(&config.endpoints, options)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let store = EtcdStore {
            members: Arc::new(members),
            layout: config.layout,
            current: Arc::new(AtomicI64::new(0)),
            compacted: Arc::new(AtomicI64::new(0)),
            health: health::Health::default(),
            recent: recent::Recent::default(),
            leases: Mutex::default(),
        };
        store
            .fetch_current()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        // Revision 1 is etcd's first; reading it fails only once something was compacted.
        let probe_key = store.layout.probe_key();
        let probe = store
            .members
            .call(Retry::Any, |mut client| {
                let key = probe_key.clone();
                async move {
                    let first = GetOptions::new().with_revision(1).with_count_only();
                    client.get(key, Some(first)).await
                }
            })
            .await;
        if let Err(e) = probe {
            match classify(&e) {
                Failure::Compacted => {
                    store.learn_compacted(1).await;
                }
                _ => return Err(unreachable(e.to_string())),
            }
        }
        store
            .health
            .spawn_probe(store.members.clone(), store.layout.probe_key());
        Ok(store)
    }

    fn saw(&self, header: Option<&etcd_client::ResponseHeader>) -> Revision {
        let revision = header.map(|h| h.revision()).unwrap_or(0);
        self.current.fetch_max(revision, Ordering::Relaxed);
        revision
    }

    /// etcd's current revision, asked of etcd (a count-only read of a key that never exists).
    async fn fetch_current(&self) -> Result<Revision> {
        let response = self
            .read(self.layout.probe_key(), GetOptions::new().with_count_only())
            .await
            .map_err(|e| backend(&e))?;
        Ok(self.saw(response.header()))
    }

    /// etcd's compacted revision, given one revision known to be compacted. etcd has no
    /// call that reports it, but a watch from a compacted revision is canceled with it.
    async fn learn_compacted(&self, compacted_one: Revision) -> Revision {
        let lower_bound = compacted_one + 1;
        let answer = async {
            let options = WatchOptions::new().with_start_revision(compacted_one);
            let (_, mut client) = self.members.current();
            let mut stream = client
                .watch(self.layout.probe_key(), Some(options))
                .await
                .ok()?;
            while let Ok(Some(response)) = stream.message().await {
                if response.canceled() {
                    return Some(response.compact_revision());
                }
            }
            None
        };
        let learnt = tokio::time::timeout(COMPACTION_PROBE_TIMEOUT, answer)
            .await
            .ok()
            .flatten()
            .unwrap_or(lower_bound)
            .max(lower_bound);
        self.compacted.fetch_max(learnt, Ordering::Relaxed);
        self.compacted.load(Ordering::Relaxed)
    }

    /// `Compacted` or `FutureRevision` for a read at `requested` that etcd refused.
    async fn revision_error(&self, requested: Revision, err: &etcd_client::Error) -> StoreError {
        match classify(err) {
            Failure::Compacted => StoreError::Compacted {
                requested,
                compacted: self.learn_compacted(requested).await,
            },
            Failure::FutureRevision => match self.fetch_current().await {
                Ok(current) => future(requested, current),
                Err(e) => e,
            },
            Failure::Other(message) => StoreError::Backend(message),
        }
    }

    /// A range read, on whichever member answers.
    async fn read(
        &self,
        key: Vec<u8>,
        options: GetOptions,
    ) -> std::result::Result<etcd_client::GetResponse, etcd_client::Error> {
        self.members
            .call(Retry::Any, |client| {
                let (key, options) = (key.clone(), options.clone());
                async move { members::kv(&client).get(key, Some(options)).await }
            })
            .await
    }

    async fn txn(&self, txn: Txn) -> Result<(bool, Revision, Vec<TxnOpResponse>)> {
        let sent = self
            .members
            .call(Retry::NotSent, |client| {
                let txn = txn.clone();
                async move { members::kv(&client).txn(txn).await }
            })
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => {
                let err = backend(&e);
                self.health.set(Some(err.to_string()));
                return Err(err);
            }
        };
        self.health.set(None);
        let revision = self.saw(response.header());
        Ok((response.succeeded(), revision, response.op_responses()))
    }

    /// Creates `key`, attached to `lease` if given.
    async fn create_leased(&self, key: &str, value: Bytes, lease: Option<i64>) -> Result<KeyValue> {
        let etcd_key = self.layout.to_etcd(key)?;
        let txn = Txn::new()
            .when([Compare::create_revision(
                etcd_key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(
                etcd_key,
                value.to_vec(),
                lease.map(|id| PutOptions::new().with_lease(id)),
            )]);
        let (succeeded, revision, _) = self.txn(txn).await?;
        if !succeeded {
            return Err(StoreError::AlreadyExists);
        }
        let created = KeyValue {
            key: key.to_owned(),
            value,
            create_revision: revision,
            mod_revision: revision,
        };
        self.recent.keep(&created);
        Ok(created)
    }

    /// Updates `key` at `expected`, attached to `lease` if given (else detached from any).
    async fn update_leased(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
        lease: Option<i64>,
    ) -> Result<KeyValue> {
        let etcd_key = self.layout.to_etcd(key)?;
        // A missing key has mod_revision 0, so existence is compared too.
        let txn = Txn::new()
            .when([
                Compare::create_revision(etcd_key.clone(), CompareOp::Greater, 0),
                Compare::mod_revision(etcd_key.clone(), CompareOp::Equal, expected),
            ])
            .and_then([TxnOp::put(
                etcd_key.clone(),
                value.to_vec(),
                Some(match lease {
                    Some(id) => PutOptions::new().with_prev_key().with_lease(id),
                    None => PutOptions::new().with_prev_key(),
                }),
            )])
            .or_else([TxnOp::get(etcd_key, None)]);
        let (succeeded, revision, responses) = self.txn(txn).await?;
        if !succeeded {
            return Err(self.missing_or_conflict(&responses));
        }
        let create_revision = match responses.first() {
            Some(TxnOpResponse::Put(put)) => put.prev_key().map(|prev| prev.create_revision()),
            _ => None,
        }
        .ok_or_else(|| StoreError::Backend("etcd answered an update without prev_kv".into()))?;
        let updated = KeyValue {
            key: key.to_owned(),
            value,
            create_revision,
            mod_revision: revision,
        };
        self.recent.keep(&updated);
        Ok(updated)
    }

    /// A lease for a write that expires after `ttl`: shared by the writes of a window of
    /// `ttl` / 20 (at most a minute), as kube-apiserver's lease manager shares them, and
    /// granted for `ttl` plus that window, so no key lives less than its `ttl`.
    async fn lease(&self, ttl: Duration) -> Result<i64> {
        let window = (ttl / 20).min(Duration::from_secs(60));
        let seconds = (ttl + window).as_secs_f64().ceil() as i64;
        if let Some((id, granted)) = self
            .leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&seconds)
        {
            if granted.elapsed() < window {
                return Ok(*id);
            }
        }
        let granted = Instant::now();
        let response = self
            .members
            .call(Retry::Any, |client| async move {
                client.lease_client().grant(seconds, None).await
            })
            .await
            .map_err(|e| backend(&e))?;
        self.leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seconds, (response.id(), granted));
        Ok(response.id())
    }

    /// After a failed compare: `NotFound` when the key is absent, else `Conflict`.
    fn missing_or_conflict(&self, responses: &[TxnOpResponse]) -> StoreError {
        let current = match responses.first() {
            Some(TxnOpResponse::Get(get)) => get.kvs().first(),
            _ => None,
        };
        match current.map(|kv| key_value(&self.layout, kv)) {
            None => StoreError::NotFound,
            Some(Ok(kv)) => {
                self.recent.keep(&kv);
                StoreError::Conflict { current: Some(kv) }
            }
            Some(Err(e)) => e,
        }
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|source| ConnectError::Read {
        path: path.clone(),
        source,
    })
}

fn tls_options(files: &TlsFiles) -> Result<TlsOptions, ConnectError> {
    let mut tls = TlsOptions::new();
    match &files.ca_file {
        Some(ca) => tls = tls.ca_certificate(Certificate::from_pem(read(ca)?)),
        None => tls = tls.with_enabled_roots(),
    }
    match (&files.cert_file, &files.key_file) {
        (Some(cert), Some(key)) => tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?)),
        (None, None) => {}
        _ => return Err(ConnectError::HalfIdentity),
    }
    Ok(tls)
}

pub(crate) fn key_value(layout: &Layout, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
    Ok(KeyValue {
        key: layout.from_etcd(kv.key())?,
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    })
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let etcd_key = self.layout.to_etcd(key)?;
        let response = self
            .read(etcd_key, GetOptions::new())
            .await
            .map_err(|e| backend(&e))?;
        self.saw(response.header());
        let found = response
            .kvs()
            .first()
            .map(|kv| key_value(&self.layout, kv))
            .transpose()?;
        match &found {
            Some(kv) => self.recent.keep(kv),
            None => self.recent.forget(key),
        }
        Ok(found)
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListResult> {
        let start = self.layout.to_etcd(prefix)?;
        let end = layout::range_end(&start);
        let from = match &options.start_after {
            // Strictly after: the smallest key greater than `after` is `after` + NUL.
            Some(after) if after.as_str() >= prefix => {
                let mut key = self.layout.to_etcd(after)?;
                key.push(0);
                key
            }
            _ => start,
        };
        let mut get = GetOptions::new();
        if end != [0] {
            get = get.with_range(end.clone());
        } else {
            get = get.with_from_key();
        }
        if let Some(limit) = options.limit.filter(|&l| l > 0) {
            get = get.with_limit(limit as i64);
        }
        if let Some(revision) = options.revision {
            get = get.with_revision(revision);
        }
        if end != [0] && from >= end {
            // Past the prefix (a continue token at its last key): etcd would reject the range.
            let revision = match options.revision {
                Some(revision) => revision,
                None => self.fetch_current().await?,
            };
            return Ok(ListResult {
                items: Vec::new(),
                revision,
                remaining: 0,
            });
        }
        let response = match self.read(from, get).await {
            Ok(response) => response,
            Err(e) => {
                return Err(match options.revision {
                    Some(requested) => self.revision_error(requested, &e).await,
                    None => backend(&e),
                })
            }
        };
        let header_revision = self.saw(response.header());
        let items = response
            .kvs()
            .iter()
            .map(|kv| key_value(&self.layout, kv))
            .collect::<Result<Vec<_>>>()?;
        // etcd's count covers the whole range from `from`, whatever the limit.
        let remaining = (response.count().max(0) as usize).saturating_sub(items.len());
        Ok(ListResult {
            items,
            revision: options.revision.unwrap_or(header_revision),
            remaining,
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.create_leased(key, value, None).await
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        self.update_leased(key, value, expected, None).await
    }

    async fn create_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<KeyValue> {
        let lease = self.lease(ttl).await?;
        self.create_leased(key, value, Some(lease)).await
    }

    async fn update_expiring(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
        ttl: Duration,
    ) -> Result<KeyValue> {
        let lease = self.lease(ttl).await?;
        self.update_leased(key, value, expected, Some(lease)).await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        let etcd_key = self.layout.to_etcd(key)?;
        let mut compares = vec![Compare::create_revision(
            etcd_key.clone(),
            CompareOp::Greater,
            0,
        )];
        if let Some(expected) = expected {
            compares.push(Compare::mod_revision(
                etcd_key.clone(),
                CompareOp::Equal,
                expected,
            ));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then([TxnOp::delete(
                etcd_key.clone(),
                Some(etcd_client::DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(etcd_key, None)]);
        let (succeeded, revision, responses) = self.txn(txn).await?;
        if !succeeded {
            return Err(self.missing_or_conflict(&responses));
        }
        let prev = match responses.first() {
            Some(TxnOpResponse::Delete(delete)) => delete.prev_kvs().first().cloned(),
            _ => None,
        }
        .ok_or_else(|| StoreError::Backend("etcd answered a delete without prev_kv".into()))?;
        let prev = key_value(&self.layout, &prev)?;
        self.recent.forget(key);
        Ok(KeyValue {
            mod_revision: revision,
            ..prev
        })
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let key = self.layout.to_etcd(prefix)?;
        let compacted = self.compacted.load(Ordering::Relaxed);
        if after < compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted,
            });
        }
        if after > self.current_revision() {
            let current = self.fetch_current().await?;
            if after > current {
                return Err(future(after, current));
            }
        }
        let range_end = layout::range_end(&key);
        Ok(watch::Watch {
            members: self.members.clone(),
            layout: self.layout.clone(),
            key,
            range_end,
            next: after + 1,
            current: self.current.clone(),
            compacted: self.compacted.clone(),
        }
        .into_stream())
    }

    fn current_revision(&self) -> Revision {
        self.current.load(Ordering::Relaxed)
    }

    fn compacted_revision(&self) -> Revision {
        self.compacted.load(Ordering::Relaxed)
    }

    fn health(&self) -> std::result::Result<(), String> {
        self.health.get()
    }

    fn recent(&self, key: &str) -> Option<KeyValue> {
        self.recent.get(key)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        if revision <= self.compacted_revision() {
            return Ok(());
        }
        if revision > self.current_revision() {
            let current = self.fetch_current().await?;
            if revision > current {
                return Err(future(revision, current));
            }
        }
        let compacted = self
            .members
            .call(Retry::Any, |mut client| async move {
                client.compact(revision, None).await
            })
            .await;
        match compacted {
            Ok(response) => {
                self.saw(response.header());
            }
            Err(e) => match classify(&e) {
                // Another server (or an earlier call) compacted at least this far.
                Failure::Compacted => {}
                Failure::FutureRevision => return Err(self.revision_error(revision, &e).await),
                Failure::Other(message) => return Err(StoreError::Backend(message)),
            },
        }
        self.compacted.fetch_max(revision, Ordering::Relaxed);
        Ok(())
    }
}
