//! The transfers (imports, clones, uploads) that run in this server, one task each, keyed
//! by the DataVolume's uid. The controller starts them and reads their progress and
//! outcome; a DataVolume that goes away cancels its transfer.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use importer::{HttpSource, ImportError, Progress, Target};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// What a transfer does.
pub enum Job {
    Http(HttpSource),
    /// A clone of the claim file at this path.
    Clone(PathBuf),
    /// An image a client uploaded, spooled to this file (removed afterwards).
    Upload(PathBuf),
    /// The disk under `/disk/` of an OCI image (as containerDisks are built).
    Registry {
        image: String,
        options: oci::PullOptions,
    },
}

/// How a finished transfer ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// Worth another attempt (connection refused, a 5xx, a cut-off body).
    Transient(String),
    /// It cannot work as specified (404, a bad image, a claim too small).
    Permanent(String),
    Cancelled,
}

/// What the controller sees of a DataVolume's transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Look {
    Idle,
    /// Running, with CDI's progress text.
    Running(String),
    Finished(Outcome),
}

struct Task {
    /// `namespace/name` of the DataVolume.
    key: String,
    cancel: CancellationToken,
    progress: Arc<Mutex<Progress>>,
    outcome: Arc<Mutex<Option<Outcome>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub struct Transfers {
    tasks: Mutex<HashMap<String, Task>>,
    /// Pulls the images of `registry` sources.
    puller: Arc<oci::Puller>,
    /// At most this many transfers move bytes at once; the others wait their turn.
    slots: Arc<Semaphore>,
    /// Where qcow2 and compressed images are staged (one subdirectory per transfer).
    scratch: PathBuf,
}

impl Transfers {
    /// `registry` is where pulled images are kept and which registries are insecure.
    pub fn new(scratch: PathBuf, parallel: usize, registry: oci::Config) -> Transfers {
        // Nothing runs yet: whatever is in scratch was left by an earlier process.
        if let Err(e) = std::fs::remove_dir_all(&scratch) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(
                    "cannot clear the import scratch dir {}: {e}",
                    scratch.display()
                );
            }
        }
        Transfers {
            tasks: Mutex::new(HashMap::new()),
            puller: Arc::new(oci::Puller::new(registry)),
            slots: Arc::new(Semaphore::new(parallel.max(1))),
            scratch,
        }
    }

    pub fn look(&self, uid: &str) -> Look {
        let tasks = lock(&self.tasks);
        let Some(task) = tasks.get(uid) else {
            return Look::Idle;
        };
        let outcome = lock(&task.outcome).clone();
        match outcome {
            Some(outcome) => Look::Finished(outcome),
            None => Look::Running(lock(&task.progress).cdi_progress()),
        }
    }

    /// Forgets a finished transfer once its outcome is recorded.
    pub fn forget(&self, uid: &str) {
        lock(&self.tasks).remove(uid);
    }

    /// Stops a transfer (if any runs) and forgets it.
    pub fn cancel(&self, uid: &str) {
        if let Some(task) = lock(&self.tasks).remove(uid) {
            task.cancel.cancel();
        }
    }

    /// The DataVolumes (uid, `namespace/name`) with a transfer.
    pub fn running(&self) -> Vec<(String, String)> {
        lock(&self.tasks)
            .iter()
            .map(|(uid, task)| (uid.clone(), task.key.clone()))
            .collect()
    }

    /// Starts `job` into `target` for DataVolume `uid` (`key` is its `namespace/name`).
    pub fn start(&self, uid: &str, key: &str, job: Job, target: Target) {
        let task = Task {
            key: key.to_string(),
            cancel: CancellationToken::new(),
            progress: Arc::new(Mutex::new(Progress {
                read_bytes: 0,
                total_bytes: None,
            })),
            outcome: Arc::new(Mutex::new(None)),
        };
        let (cancel, progress, outcome) = (
            task.cancel.clone(),
            task.progress.clone(),
            task.outcome.clone(),
        );
        let scratch = self.scratch.join(uid);
        let slots = self.slots.clone();
        let puller = self.puller.clone();
        let key = key.to_string();
        lock(&self.tasks).insert(uid.to_string(), task);
        tokio::spawn(async move {
            let ended = tokio::select! {
                permit = slots.acquire_owned() => match permit {
                    Ok(_permit) => run(job, &target, &scratch, &puller, &progress, &cancel).await,
                    Err(_) => Outcome::Cancelled,
                },
                () = cancel.cancelled() => Outcome::Cancelled,
            };
            if let Err(e) = std::fs::remove_dir_all(&scratch) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(
                        "transfer of {key}: cannot remove {}: {e}",
                        scratch.display()
                    );
                }
            }
            match &ended {
                Outcome::Done => {
                    tracing::info!("transfer of {key} into {} done", target.path.display())
                }
                other => tracing::warn!("transfer of {key} ended: {other:?}"),
            }
            *lock(&outcome) = Some(ended);
        });
    }
}

async fn run(
    job: Job,
    target: &Target,
    scratch: &std::path::Path,
    puller: &oci::Puller,
    progress: &Arc<Mutex<Progress>>,
    cancel: &CancellationToken,
) -> Outcome {
    if let Err(e) = std::fs::create_dir_all(scratch) {
        return Outcome::Transient(format!(
            "cannot create the scratch dir {}: {e}",
            scratch.display()
        ));
    }
    let report = |p: Progress| *lock(progress) = p;
    let result = match job {
        Job::Http(source) => importer::import_http(&source, target, scratch, &report, cancel).await,
        Job::Clone(from) => importer::clone_file(&from, target, &report, cancel).await,
        Job::Registry { image, mut options } => {
            let shared = progress.clone();
            options.progress = Some(oci::Progress(Arc::new(move |read, total| {
                *lock(&shared) = Progress {
                    read_bytes: read,
                    total_bytes: Some(total),
                };
            })));
            // Dropping the pull stops it and removes what it wrote.
            let pulled = tokio::select! {
                pulled = puller.pull_disk(&image, &options, None) => pulled,
                () = cancel.cancelled() => return Outcome::Cancelled,
            };
            match pulled {
                Ok(disk) => {
                    importer::import_file(&disk.path, target, scratch, &report, cancel).await
                }
                // The puller has retried what may pass: what is left is the registry's answer.
                Err(e) => return Outcome::Permanent(format!("Unable to pull {image}: {e}")),
            }
        }
        Job::Upload(file) => {
            let result = importer::import_file(&file, target, scratch, &report, cancel).await;
            // Kept for another attempt only when one may follow.
            let retried = matches!(&result, Err(e) if e.is_transient() || matches!(e, ImportError::Cancelled));
            if !retried {
                if let Err(e) = std::fs::remove_file(&file) {
                    tracing::warn!("cannot remove the uploaded image {}: {e}", file.display());
                }
            }
            result
        }
    };
    match result {
        Ok(_) => Outcome::Done,
        Err(ImportError::Cancelled) => Outcome::Cancelled,
        Err(e) if e.is_transient() => Outcome::Transient(e.message()),
        Err(e) => Outcome::Permanent(e.message()),
    }
}
