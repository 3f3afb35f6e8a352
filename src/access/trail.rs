//! The audit trail of a daemon: one JSON line per access decision, written
//! by a thread of its own (a request never waits on the disk for it), the
//! file renamed to `NAME.1` once it reaches its size bound.

use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

/// Lines waiting for the writer; more are counted as dropped (and the
/// count written), never waited for.
const QUEUE: usize = 16 << 10;

pub struct Trail {
    tx: SyncSender<String>,
    dropped: Arc<AtomicU64>,
}

impl Trail {
    /// Appends to `path` (made private), rotating at `max_bytes`.
    pub fn open(path: &Path, max_bytes: u64) -> Result<Trail> {
        let file = crate::private::append_file(path).map_err(|e| Error::io(path.display(), e))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            path: path.to_path_buf(),
            size: file.metadata().map_or(0, |m| m.len()),
            file: std::io::BufWriter::new(file),
            max_bytes,
            dropped: dropped.clone(),
        };
        std::thread::Builder::new()
            .name("audit-trail".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::io("audit trail thread", e))?;
        Ok(Trail { tx, dropped })
    }

    /// Records one decision (a JSON object), with the time it was made.
    pub fn record(&self, mut entry: serde_json::Value) {
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        entry["time"] = now.into();
        match self.tx.try_send(entry.to_string()) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

struct Writer {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    size: u64,
    max_bytes: u64,
    dropped: Arc<AtomicU64>,
}

impl Writer {
    fn run(mut self, rx: Receiver<String>) {
        while let Ok(line) = rx.recv() {
            let mut batch = vec![line];
            batch.extend(rx.try_iter());
            let dropped = self.dropped.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                batch.push(serde_json::json!({ "dropped": dropped }).to_string());
            }
            if let Err(e) = self.write(&batch) {
                tracing::error!("audit trail {}: {e}", self.path.display());
            }
        }
    }

    fn write(&mut self, lines: &[String]) -> std::io::Result<()> {
        for line in lines {
            if self.size > 0 && self.size + line.len() as u64 + 1 > self.max_bytes {
                self.rotate()?;
            }
            self.file.write_all(line.as_bytes())?;
            self.file.write_all(b"\n")?;
            self.size += line.len() as u64 + 1;
        }
        self.file.flush()
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        std::fs::rename(&self.path, old)?;
        self.file = std::io::BufWriter::new(crate::private::append_file(&self.path)?);
        self.size = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_and_the_file_rotates_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let trail = Trail::open(&path, 300).unwrap();
        for i in 0..20 {
            trail.record(serde_json::json!({ "n": i }));
        }
        let old = dir.path().join("audit.jsonl.1");
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let t = std::time::Instant::now();
        while !read(&path).contains("\"n\":19") {
            assert!(t.elapsed().as_secs() < 10, "the writer never caught up");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for p in [&path, &old] {
            let text = read(p);
            assert!(!text.is_empty() && text.len() <= 300, "{}", text.len());
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert!(v["time"].is_string());
            }
        }
        // Rotated once: the older lines before the last rotation are gone.
        assert!(!read(&old).contains("\"n\":19"));
    }
}
