//! Writing large buffers to a file on a blocking thread, so that the download and the
//! disk overlap; optionally leaving all-zero blocks as holes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::mpsc as std_mpsc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The size of one buffer handed to the writer thread.
pub(crate) const BUFFER: usize = 1 << 20;
/// The granularity at which zeros become holes (the usual filesystem block).
const BLOCK: usize = 4096;
/// Buffers queued for the writer thread at most (the download waits beyond that).
const QUEUED: usize = 3;

struct Chunk {
    offset: u64,
    data: Vec<u8>,
}

/// A file being written in order, in [`BUFFER`]-sized pieces, by a blocking thread.
pub(crate) struct Writer {
    tx: Option<mpsc::Sender<Chunk>>,
    spare: std_mpsc::Receiver<Vec<u8>>,
    thread: Option<tokio::task::JoinHandle<io::Result<File>>>,
    offset: u64,
}

impl Writer {
    /// Writes from offset 0 of `file`. With `sparse`, blocks of zeros are skipped, so the
    /// file must read as zeros where nothing is written (freshly truncated).
    pub(crate) fn new(file: File, sparse: bool, cancel: CancellationToken) -> Writer {
        let (tx, mut rx) = mpsc::channel::<Chunk>(QUEUED);
        let (spare_tx, spare) = std_mpsc::channel();
        let thread = tokio::task::spawn_blocking(move || {
            while let Some(chunk) = rx.blocking_recv() {
                if cancel.is_cancelled() {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "cancelled"));
                }
                if sparse {
                    write_sparse(&file, chunk.offset, &chunk.data)?;
                } else {
                    file.write_all_at(&chunk.data, chunk.offset)?;
                }
                let _ = spare_tx.send(chunk.data);
            }
            Ok(file)
        });
        Writer {
            tx: Some(tx),
            spare,
            thread: Some(thread),
            offset: 0,
        }
    }

    /// An empty buffer of [`BUFFER`] bytes to fill (a returned one when there is one).
    pub(crate) fn buffer(&self) -> Vec<u8> {
        match self.spare.try_recv() {
            Ok(mut b) => {
                b.resize(BUFFER, 0);
                b
            }
            Err(_) => vec![0; BUFFER],
        }
    }

    /// Queues `data` to be written after what was queued before.
    pub(crate) async fn write(&mut self, data: Vec<u8>) -> io::Result<()> {
        let len = data.len() as u64;
        let chunk = Chunk {
            offset: self.offset,
            data,
        };
        self.offset += len;
        let sent = match &self.tx {
            Some(tx) => tx.send(chunk).await.is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // The thread stopped, which it does only on an error: fetch it.
        match self.join().await {
            Ok(_) => Err(io::Error::other("the writer stopped")),
            Err(e) => Err(e),
        }
    }

    async fn join(&mut self) -> io::Result<File> {
        self.tx = None;
        match self.thread.take() {
            Some(thread) => match thread.await {
                Ok(result) => result,
                Err(e) => Err(io::Error::other(e)),
            },
            None => Err(io::Error::other("the writer stopped")),
        }
    }

    /// Waits for every queued write, then returns the file.
    pub(crate) async fn finish(mut self) -> io::Result<File> {
        self.join().await
    }

    /// Stops the thread after its current write and waits for it (cancel first so that
    /// queued buffers are dropped, not written).
    pub(crate) async fn abandon(mut self) {
        let _ = self.join().await;
    }
}

fn is_zero(block: &[u8]) -> bool {
    // A cheap look at the start first: most data blocks differ from zero early.
    let head = block.len().min(16);
    block[..head].iter().all(|&b| b == 0) && block[head..].iter().fold(0u8, |a, &b| a | b) == 0
}

/// Writes the non-zero runs of `data` (at [`BLOCK`] granularity) at `offset`.
pub(crate) fn write_sparse(file: &File, offset: u64, data: &[u8]) -> io::Result<()> {
    let mut run_start: Option<usize> = None;
    let mut at = 0;
    while at < data.len() {
        let end = (at + BLOCK).min(data.len());
        if is_zero(&data[at..end]) {
            if let Some(start) = run_start.take() {
                file.write_all_at(&data[start..at], offset + start as u64)?;
            }
        } else if run_start.is_none() {
            run_start = Some(at);
        }
        at = end;
    }
    if let Some(start) = run_start {
        file.write_all_at(&data[start..], offset + start as u64)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn zero_test() {
        assert!(is_zero(&[0; 4096]));
        assert!(is_zero(&[]));
        let mut b = [0u8; 4096];
        b[4095] = 1;
        assert!(!is_zero(&b));
        b[4095] = 0;
        b[3] = 1;
        assert!(!is_zero(&b));
    }

    #[tokio::test]
    async fn sparse_writes_leave_holes_and_keep_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create(&path).unwrap();
        file.set_len(8 * BUFFER as u64).unwrap();
        let mut w = Writer::new(file, true, CancellationToken::new());
        let mut expected = Vec::new();
        for i in 0..4u8 {
            let mut b = w.buffer();
            // One buffer of zeros, the others half data half zeros, and a ragged end.
            if i != 1 {
                for (j, x) in b[..BUFFER / 2].iter_mut().enumerate() {
                    *x = (j % 251) as u8 + i + 1;
                }
            }
            if i == 3 {
                b.truncate(BUFFER / 2 + 100);
                b[BUFFER / 2 + 99] = 7;
            }
            expected.extend_from_slice(&b);
            w.write(b).await.unwrap();
        }
        let file = w.finish().await.unwrap();
        drop(file);
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), 8 * BUFFER);
        assert_eq!(&got[..expected.len()], &expected[..]);
        assert!(got[expected.len()..].iter().all(|&b| b == 0));
        let allocated = std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(
            allocated <= (2 * BUFFER + 8 * BLOCK) as u64,
            "{allocated} bytes allocated"
        );
    }

    #[tokio::test]
    async fn a_write_error_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let read_only = File::open(&path).unwrap();
        let mut w = Writer::new(read_only, false, CancellationToken::new());
        let mut failed = false;
        for _ in 0..10 {
            let mut b = w.buffer();
            b[0] = 1;
            if w.write(b).await.is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed || w.finish().await.is_err());
    }
}
