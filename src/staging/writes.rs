//! Writes to staged copies. They go straight to the copy's file, without
//! staging's lock, so a commit that reads copies while writes go on learns
//! from here whether the bytes it read changed meanwhile (read again), and
//! which copies changed since the commit froze staging (they stay staged).
//! A copy open for writing through FUSE passthrough is written by the
//! kernel unseen: it is counted as open (`direct`), and a commit then
//! compares what the file system says of it (`Stamp`).

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Writes on one staged copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    begun: u64,
    running: u32,
    /// Lowest offset a write touched since the last `watch`.
    low: u64,
    /// Handles open for writing that pass through, and how many ever did.
    direct: u32,
    direct_begun: u64,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            begun: 0,
            running: 0,
            low: u64::MAX,
            direct: 0,
            direct_begun: 0,
        }
    }
}

impl Counts {
    /// Whether a handle whose writes pass through is open.
    pub fn direct_open(&self) -> bool {
        self.direct > 0
    }

    /// Whether the kernel may have written the copy, unseen here, between
    /// `self` (from `watch`) and `later`.
    pub fn written_unseen(&self, later: Counts) -> bool {
        self.direct > 0 || later.direct > 0 || later.direct_begun != self.direct_begun
    }

    /// Bytes `[0, len)` read between `self` (from `watch`) and `later` are
    /// as they were at `self`: no write was running then, and none that
    /// began since touched them (appends beyond `len` do not).
    pub fn unchanged_below(&self, len: u64, later: Counts) -> bool {
        self.running == 0 && (later.begun == self.begun || later.low >= len)
    }
}

#[derive(Default)]
struct Inner {
    /// While a commit runs, entries stay once their writes end: they are
    /// the copies written since the freeze.
    committing: bool,
    files: HashMap<u64, Counts>,
    /// Writes begun on any copy, ever (what `.detafs/status` was made from).
    begun: u64,
}

#[derive(Default)]
pub struct Writes(Mutex<Inner>);

/// A write in progress on staged copy `id`; ends when dropped.
pub struct Writing<'a> {
    writes: &'a Writes,
    id: u64,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.writes.end(self.id, false);
    }
}

/// A handle open for writing whose writes pass through to staged copy
/// `id`; closed when dropped.
pub struct Direct {
    writes: Arc<Writes>,
    id: u64,
}

impl Drop for Direct {
    fn drop(&mut self) {
        self.writes.end(self.id, true);
    }
}

impl Writes {
    /// Called before changing a staged copy's bytes from `offset` on (its
    /// size or mtime: offset 0).
    pub fn begin(&self, id: u64, offset: u64) -> Writing<'_> {
        let mut inner = self.0.lock();
        inner.begun += 1;
        let c = inner.files.entry(id).or_default();
        c.begun += 1;
        c.running += 1;
        c.low = c.low.min(offset);
        Writing { writes: self, id }
    }

    /// A handle of copy `id` whose writes the kernel does itself
    /// (passthrough) opens: until it closes, the copy may change unseen.
    pub fn direct(self: &Arc<Self>, id: u64) -> Direct {
        let mut inner = self.0.lock();
        inner.begun += 1;
        let c = inner.files.entry(id).or_default();
        c.direct += 1;
        c.direct_begun += 1;
        Direct {
            writes: self.clone(),
            id,
        }
    }

    /// A write on copy `id` ended, or (`direct`) a handle that writes it
    /// unseen closed: its close may follow its last write, so it counts
    /// as a write over the whole copy.
    fn end(&self, id: u64, direct: bool) {
        let mut inner = self.0.lock();
        inner.begun += u64::from(direct);
        let committing = inner.committing;
        if let Some(c) = inner.files.get_mut(&id) {
            match direct {
                false => c.running -= 1,
                true => {
                    c.direct -= 1;
                    c.begun += 1;
                    c.low = 0;
                }
            }
            if c.running == 0 && c.direct == 0 && !committing {
                inner.files.remove(&id);
            }
        }
    }

    /// Whether any copy is open for writing through passthrough.
    pub fn direct_open(&self) -> bool {
        self.0.lock().files.values().any(Counts::direct_open)
    }

    /// Writes begun so far on any staged copy.
    pub fn begun(&self) -> u64 {
        self.0.lock().begun
    }

    /// Starts watching a copy that is about to be read (one reader at a time).
    pub fn watch(&self, id: u64) -> Counts {
        let mut inner = self.0.lock();
        match inner.files.get_mut(&id) {
            Some(c) => {
                c.low = u64::MAX;
                *c
            }
            None => Counts::default(),
        }
    }

    pub fn counts(&self, id: u64) -> Counts {
        self.0.lock().files.get(&id).copied().unwrap_or_default()
    }

    /// A commit froze staging: from now on every written copy is remembered
    /// (a write running right now counts as one after the freeze).
    pub(super) fn start(&self) {
        let mut inner = self.0.lock();
        inner.committing = true;
        inner.files.retain(|_, c| c.running > 0 || c.direct > 0);
    }

    /// Copies written since `start`.
    pub(super) fn written(&self) -> HashSet<u64> {
        self.0.lock().files.keys().copied().collect()
    }

    pub(super) fn stop(&self) {
        let mut inner = self.0.lock();
        inner.committing = false;
        inner.files.retain(|_, c| c.running > 0 || c.direct > 0);
    }
}

/// Waits for writes to the file at `path` that are running now: a write
/// holds the file's inode lock while it copies (ext4, xfs, btrfs, tmpfs),
/// and an empty write takes that lock, changing nothing.
pub fn settle(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_at(&[], 0).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_counts_as_written_if_a_write_ran_or_began_after_the_freeze() {
        let w = Writes::default();
        drop(w.begin(1, 0)); // before the freeze: forgotten
        let running = w.begin(2, 0); // runs across the freeze
        w.start();
        drop(running);
        drop(w.begin(3, 0));
        let mut written: Vec<_> = w.written().into_iter().collect();
        written.sort();
        assert_eq!(written, [2, 3]);
        w.stop();
        assert!(w.written().is_empty());
    }

    #[test]
    fn a_copy_written_unseen_is_kept_staged_and_read_with_care() {
        let w = Arc::new(Writes::default());
        // Open across a freeze: the copy stays staged after the commit.
        let open = w.direct(5);
        w.start();
        assert!(w.written().contains(&5));
        // Opened and closed while the commit read a copy: unseen writes
        // may have come.
        let before = w.watch(4);
        assert!(!before.written_unseen(w.counts(4)));
        drop(w.direct(4));
        assert!(before.written_unseen(w.counts(4)));
        assert!(!before.unchanged_below(1, w.counts(4)));
        assert!(w.watch(5).direct_open());
        drop(open);
        w.stop();
        assert!(w.written().is_empty());
    }

    #[test]
    fn a_read_is_unchanged_unless_a_write_ran_or_touched_its_bytes() {
        let w = Writes::default();
        w.start();
        let before = w.watch(7);
        assert!(before.unchanged_below(100, w.counts(7)));
        // An append beyond what was read leaves it as it was.
        drop(w.begin(7, 100));
        assert!(before.unchanged_below(100, w.counts(7)));
        assert!(!before.unchanged_below(101, w.counts(7)));
        // A write inside it does not.
        let g = w.begin(7, 50);
        assert!(!before.unchanged_below(100, w.counts(7)));
        // Nor does a read that starts while a write runs.
        let during = w.watch(7);
        drop(g);
        assert!(!during.unchanged_below(100, w.counts(7)));
        let after = w.watch(7);
        assert!(after.unchanged_below(100, w.counts(7)));
    }
}
