//! Folders listed and their entries stat'ed ahead of a commit's walk
//! (`scan.rs`), on threads of their own.

use crate::error::{Error, Result};
use crate::limits;
use parking_lot::Mutex;
use std::fs::Metadata;
use std::path::Path;
use std::sync::Arc;

/// A folder's entries with their stats, in name order.
pub(super) type Entries = Vec<(std::path::PathBuf, Metadata)>;

/// Lists folders on a thread of its own, in the order the scan visits
/// them (a folder, then each of its subfolders in name order), a few
/// folders ahead, and stats their entries on a few threads more: with a
/// cold page cache each stat waits on the disk, and a million of them one
/// after the other take twice as long as a few at a time.
pub(super) struct Lister {
    listings: std::sync::mpsc::Receiver<(std::path::PathBuf, Stats)>,
}

/// A folder's entries, stat'ed by the pool: received when ready.
type Stats = std::sync::mpsc::Receiver<Result<Entries>>;

/// Folders listed ahead of the scan.
const LIST_AHEAD: usize = 16;

/// Threads that stat folders' entries.
const STAT_THREADS: usize = 4;

/// A folder to stat: its path, its entries' names in order, and where
/// its stats go.
type StatJob = (
    std::path::PathBuf,
    std::io::Result<Vec<std::ffi::OsString>>,
    std::sync::mpsc::SyncSender<Result<Entries>>,
);

impl Lister {
    pub(super) fn start(root: &Path) -> Result<Lister> {
        let (tx, listings) = std::sync::mpsc::sync_channel(LIST_AHEAD);
        let (jobs, queue) = std::sync::mpsc::channel::<StatJob>();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..STAT_THREADS {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name("detafs-stat".into())
                .spawn(move || {
                    loop {
                        // The queue's lock is let go before the stats.
                        let job = queue.lock().recv();
                        let Ok((dir, names, done)) = job else { return };
                        let _ = done.send(stat_entries(&dir, names));
                    }
                })
                .map_err(|e| Error::io("a thread to stat files", e))?;
        }
        let root = root.to_path_buf();
        std::thread::Builder::new()
            .name("detafs-list".into())
            .spawn(move || list_tree(&root, 0, &tx, &jobs))
            .map_err(|e| Error::io("a thread to list folders", e))?;
        Ok(Lister { listings })
    }

    /// The entries of `dir`, the next folder the scan visits.
    pub(super) fn next(&mut self, dir: &Path) -> Result<Entries> {
        let out_of_step = || {
            Error::io(
                dir.display(),
                std::io::Error::other("folder listing out of step"),
            )
        };
        match self.listings.recv() {
            Ok((listed, stats)) if listed == dir => stats.recv().map_err(|_| out_of_step())?,
            _ => Err(out_of_step()),
        }
    }
}

/// Lists `dir` and the folders below it in the scan's order, each handed
/// to the stat pool; false once the scan no longer wants them. Subfolders
/// are known by the entry types the listing gives (no stat); the scan
/// follows the stats, so a folder that changed type meanwhile is out of
/// step, and the commit stops.
fn list_tree(
    dir: &Path,
    depth: usize,
    tx: &std::sync::mpsc::SyncSender<(std::path::PathBuf, Stats)>,
    jobs: &std::sync::mpsc::Sender<StatJob>,
) -> bool {
    if depth > limits::MAX_DEPTH {
        return true; // the scan refuses it without asking
    }
    let listed = std::fs::read_dir(dir).and_then(|read| {
        let mut items = read
            .map(|item| {
                let item = item?;
                Ok((item.file_name(), item.file_type()?.is_dir()))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        items.sort();
        Ok(items)
    });
    let subdirs: Vec<_> = match &listed {
        Ok(items) => items
            .iter()
            .filter(|(_, is_dir)| *is_dir)
            .map(|(name, _)| dir.join(name))
            .collect(),
        Err(_) => Vec::new(),
    };
    let names = listed.map(|items| items.into_iter().map(|(name, _)| name).collect());
    let (done, stats) = std::sync::mpsc::sync_channel(1);
    if jobs.send((dir.to_path_buf(), names, done)).is_err()
        || tx.send((dir.to_path_buf(), stats)).is_err()
    {
        return false;
    }
    subdirs
        .iter()
        .all(|sub| list_tree(sub, depth + 1, tx, jobs))
}

/// The entries of `dir` in name order (as trees list them: files read
/// together then lie together in the packs, and are fetched together),
/// each stat'ed without following a symlink.
fn stat_entries(dir: &Path, names: std::io::Result<Vec<std::ffi::OsString>>) -> Result<Entries> {
    let names = names.map_err(|e| Error::io(dir.display(), e))?;
    names
        .into_iter()
        .map(|name| {
            let path = dir.join(name);
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| Error::io(path.display(), e))?;
            Ok((path, meta))
        })
        .collect()
}
