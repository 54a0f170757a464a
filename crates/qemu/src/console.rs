//! QEMU serves one client at a time on a console or VNC socket: a second client connects
//! and then sees nothing until the first leaves. As virt-handler does, the newest
//! connection gets the console and the older one is closed, so a stale connection (a
//! closed laptop, a dead browser tab) never holds a VM's console.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// Who holds each socket, by path.
#[derive(Default)]
pub struct Takeovers {
    holders: Mutex<HashMap<PathBuf, (u64, watch::Sender<bool>)>>,
    next: AtomicU64,
}

/// One relay's hold on a socket; ends when a newer client claims it.
pub struct Claim {
    owner: Arc<Takeovers>,
    path: PathBuf,
    id: u64,
    taken: watch::Receiver<bool>,
}

impl Takeovers {
    /// Takes `socket` for a new client, telling its current holder to let go.
    pub fn claim(self: &Arc<Self>, socket: &Path) -> Claim {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, taken) = watch::channel(false);
        let previous = self
            .holders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(socket.to_path_buf(), (id, tx));
        if let Some((_, older)) = previous {
            let _ = older.send(true);
        }
        Claim {
            owner: self.clone(),
            path: socket.to_path_buf(),
            id,
            taken,
        }
    }
}

impl Claim {
    /// Resolves when a newer client has claimed the socket.
    pub async fn superseded(&mut self) {
        let _ = self.taken.wait_for(|taken| *taken).await;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut holders = self.owner.holders.lock().unwrap_or_else(|p| p.into_inner());
        if holders
            .get(&self.path)
            .is_some_and(|(id, _)| *id == self.id)
        {
            holders.remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_newest_claim_supersedes_the_older_one() {
        let takeovers = Arc::new(Takeovers::default());
        let socket = Path::new("/r/console.sock");
        let mut first = takeovers.claim(socket);
        let mut second = takeovers.claim(socket);
        tokio::time::timeout(Duration::from_secs(1), first.superseded())
            .await
            .expect("the first holder is told to let go");
        // The newest is not superseded by the older one letting go.
        drop(first);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), second.superseded())
                .await
                .is_err()
        );
        // Other sockets are independent.
        let mut vnc = takeovers.claim(Path::new("/r/vnc.sock"));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), vnc.superseded())
                .await
                .is_err()
        );
        drop(second);
        assert!(takeovers.holders.lock().unwrap().len() == 1);
    }
}
