//! The audit trail of a daemon: one JSON line per access decision, written
//! by a thread of its own a few times a second (a request never waits on
//! the disk, nor wakes a thread, for it), the file renamed to `NAME.1` once
//! it reaches its size bound.

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Lines waiting for the writer; more are counted as dropped (and the
/// count written), never waited for.
const QUEUE: usize = 64 << 10;
/// How often the writer takes what is waiting.
const EVERY: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Waiting {
    lines: Vec<String>,
    dropped: u64,
}

pub struct Trail {
    waiting: Arc<Mutex<Waiting>>,
    writer: Arc<Mutex<Writer>>,
    /// Lines recorded and not yet written (`.detafs/health`).
    unwritten: Arc<AtomicUsize>,
}

impl Trail {
    /// Appends to `path` (made private), rotating at `max_bytes`.
    pub fn open(path: &Path, max_bytes: u64) -> Result<Trail> {
        let file = crate::private::append_file(path).map_err(|e| Error::io(path.display(), e))?;
        let waiting = Arc::new(Mutex::new(Waiting::default()));
        let writer = Writer {
            path: path.to_path_buf(),
            size: file.metadata().map_or(0, |m| m.len()),
            file: std::io::BufWriter::new(file),
            max_bytes,
        };
        let trail = Trail {
            waiting,
            writer: Arc::new(Mutex::new(writer)),
            unwritten: Arc::default(),
        };
        // The thread holds the queue weakly: it ends with the trail.
        let (queue, writer) = (Arc::downgrade(&trail.waiting), trail.writer.clone());
        let unwritten = trail.unwritten.clone();
        std::thread::Builder::new()
            .name("audit-trail".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(EVERY);
                    let Some(waiting) = queue.upgrade() else {
                        return;
                    };
                    write_out(&waiting, &writer, &unwritten);
                }
            })
            .map_err(|e| Error::io("audit trail thread", e))?;
        Ok(trail)
    }

    /// Writes what is waiting now (before the daemon exits).
    pub fn flush(&self) {
        write_out(&self.waiting, &self.writer, &self.unwritten);
    }

    /// Lines recorded and not yet written out.
    pub fn unwritten(&self) -> usize {
        self.unwritten.load(Ordering::Relaxed)
    }

    /// Records one decision (a JSON object), with the time it was made.
    pub fn record(&self, mut entry: serde_json::Value) {
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        entry["time"] = now.into();
        let line = entry.to_string();
        let mut w = self.waiting.lock();
        if w.lines.len() < QUEUE {
            w.lines.push(line);
            self.unwritten.fetch_add(1, Ordering::Relaxed);
        } else {
            w.dropped += 1;
        }
    }
}

struct Writer {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    size: u64,
    max_bytes: u64,
}

fn write_out(waiting: &Mutex<Waiting>, writer: &Mutex<Writer>, unwritten: &AtomicUsize) {
    let mut writer = writer.lock();
    let Waiting { mut lines, dropped } = std::mem::take(&mut *waiting.lock());
    let taken = lines.len();
    if dropped > 0 {
        lines.push(serde_json::json!({ "dropped": dropped }).to_string());
    }
    if !lines.is_empty()
        && let Err(e) = writer.write(&lines)
    {
        tracing::error!("audit trail {}: {e}", writer.path.display());
    }
    unwritten.fetch_sub(taken, Ordering::Relaxed);
}

impl Writer {
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
