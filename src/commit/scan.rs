//! Turns a local directory into trees: walks it (folders listed ahead by
//! `lister.rs`), takes what the stat cache knows of each file, and puts
//! the rest through the commit's `Sink`, which chunks, hashes and packs.

use super::listed::{open_listed, stat_key};
use super::lister::Lister;
use super::sink::{Sink, Slot};
use super::small::{self, SmallFiles, reads_ahead};
use super::stat_rows::PendingStats;
use crate::cache::index::{FolderRow, StatKey};
use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::limits;
use crate::progress::Progress;
use crate::repo::Repo;
use crate::snapshot::tree::TreeSink;
use crate::snapshot::{Entry, Link, Mtime, Node, Tree};
use crate::store::pack::BlobRef;
use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Files changed this shortly before a scan are not stat-cached: a later
/// write within the same timestamp tick would leave the stat as it was.
const RACY_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

/// `RACY_WINDOW`, or in test builds `DETAFS_TEST_RACY_WINDOW` (tests need
/// not wait two seconds before each commit they want cached).
fn racy_window() -> std::time::Duration {
    crate::hold::test_duration("DETAFS_TEST_RACY_WINDOW", RACY_WINDOW)
}

pub struct Scanner<'r> {
    repo: &'r Repo,
    /// Where the content it finds goes.
    pub sink: Sink<'r>,
    /// Stat-cache rows to save once the commit has landed.
    pub stat_rows: PendingStats<'r>,
    /// Files changed within this window before the scan are not stat-cached:
    /// a later write in the same timestamp tick would go unnoticed.
    racy_after_ns: i64,
    progress: &'r dyn Progress,
    /// Names of each file with several in the scanned tree, by (device,
    /// inode): their entries form a link group.
    names: Names,
    /// Folders listed ahead of `scan_dir`.
    lister: Option<Lister>,
    /// Small files read ahead of `scan_dir`; started at the first.
    small: Option<SmallFiles>,
}

/// An entry of a folder being scanned; a file's chunks may still be
/// being encoded.
enum Scanned {
    Node(Node),
    File {
        mode: u32,
        mtime: Mtime,
        size: u64,
        slots: Vec<Slot>,
        /// Its stat-cache row, if it may have one.
        stat_row: Option<(Vec<u8>, StatKey)>,
        /// Whether the stat cache holds that row already (it answered).
        row_kept: bool,
        link: Option<Link>,
    },
}

fn mtime_of(m: &Metadata) -> Mtime {
    Mtime::of_stat(m.mtime(), m.mtime_nsec())
}

impl<'r> Scanner<'r> {
    /// A scanner for one commit (see `Sink::new`).
    pub fn new(repo: &'r Repo, progress: &'r dyn Progress) -> Result<Self> {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(i64::MAX);
        Ok(Scanner {
            repo,
            sink: Sink::new(repo, progress)?,
            stat_rows: PendingStats::new(repo.index()),
            racy_after_ns: now_ns
                .saturating_sub(i64::try_from(racy_window().as_nanos()).unwrap_or(i64::MAX)),
            progress,
            names: Names::None,
            lister: None,
            small: None,
        })
    }

    /// Snapshots directory `dir` and everything under it; returns its tree.
    pub fn scan_dir(&mut self, dir: &Path) -> Result<BlobRef> {
        if self.repo.codec().format() >= 2 {
            self.names = Names::Uncounted(dir.to_path_buf());
        }
        self.lister = Some(Lister::start(dir)?);
        let scanned = self.scan_level(dir, 0);
        self.lister = None;
        Ok(scanned?.0)
    }

    /// The link group of a file `meta` describes, if the tree holds it
    /// under several names. Its id is derived from the device and inode,
    /// so the same tree committed again gives the same trees.
    fn link_of(&mut self, meta: &Metadata) -> Result<Option<Link>> {
        if meta.nlink() < 2 {
            return Ok(None);
        }
        let Some(&names) = self.names.counted()?.get(&(meta.dev(), meta.ino())) else {
            return Ok(None);
        };
        let id = BlobId::of(format!("{} {}", meta.dev(), meta.ino()).as_bytes());
        let group = u64::from_le_bytes(id.as_bytes()[..8].try_into().expect("8 bytes"));
        Ok((names > 1).then_some(Link { group, names }))
    }

    /// Snapshots `dir`; returns its tree and whether a link group has a
    /// name in it. A folder whose entries' stats and subfolders' trees are
    /// as at a commit that landed gets that commit's tree, its files not
    /// looked at again.
    fn scan_level(&mut self, dir: &Path, depth: usize) -> Result<(BlobRef, bool)> {
        if depth > limits::MAX_DEPTH {
            return Err(Error::InvalidInput(format!(
                "{}: deeper than {} levels, more than a version may hold",
                dir.display(),
                limits::MAX_DEPTH
            )));
        }
        let items = self.lister.as_mut().expect("scan_dir lists").next(dir)?;
        // Subfolders first: this folder's digest needs their trees.
        let mut listed = Vec::with_capacity(items.len());
        for (path, meta) in items {
            let sub = match meta.is_dir() {
                true => Some(self.scan_level(&path, depth + 1)?),
                false => None,
            };
            listed.push(Listed { path, meta, sub });
        }
        self.folder(dir, listed)
    }

    /// The tree of folder `dir`, its subfolders scanned. Apart from
    /// `scan_level`, so the frame each level of a deep tree keeps on the
    /// stack is small.
    #[inline(never)]
    fn folder(&mut self, dir: &Path, listed: Vec<Listed>) -> Result<(BlobRef, bool)> {
        let key = self.local_path(dir)?;
        let digest = folder_digest(&listed);
        if let Some(found) = self.repo.index().folder_lookup(&key, &digest)? {
            let files = listed.iter().filter(|l| l.meta.is_file());
            self.progress.advance(files.map(|l| l.meta.size()).sum());
            return Ok(found);
        }
        // Kept for the next commit unless a file may change unseen (see
        // `racy_after_ns`) or a name belongs to a link group (whose count
        // depends on names elsewhere).
        let mut keep = true;
        // Stat-cache answers first: the small files among those to read
        // are then read ahead on all the cores.
        let mut looked = Vec::with_capacity(listed.len());
        for l in listed
            .iter()
            .filter(|l| l.sub.is_none() && l.meta.is_file())
        {
            looked.push(self.look_up(&l.path, &l.meta)?);
        }
        self.read_ahead(&listed, &looked)?;
        let mut looked = looked.into_iter();
        let mut scanned = Vec::with_capacity(listed.len());
        for Listed { path, meta, sub } in listed {
            let ft = meta.file_type();
            let node = if let Some((tree, links)) = sub {
                Scanned::Node(Node::Dir {
                    mode: meta.mode() & 0o7777,
                    mtime: mtime_of(&meta),
                    tree,
                    atime: None,
                    links,
                })
            } else if ft.is_file() {
                let looked = looked.next().expect("looked up above");
                let file = self.scan_file(&path, &meta, looked)?;
                if let Scanned::File { stat_row, link, .. } = &file {
                    keep &= stat_row.is_some() && link.is_none();
                }
                file
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| Error::io(path.display(), e))?;
                let link = self.link_of(&meta)?;
                keep &= link.is_none();
                Scanned::Node(Node::Symlink {
                    mtime: mtime_of(&meta),
                    target: target.as_os_str().as_bytes().to_vec(),
                    atime: None,
                    link,
                })
            } else if let Some(mut node) = Node::special_of(&meta, mtime_of(&meta), None)
                && self.repo.codec().format() >= 2
            {
                if let Node::Special { link, .. } = &mut node {
                    *link = self.link_of(&meta)?;
                    keep &= link.is_none();
                }
                Scanned::Node(node)
            } else {
                // Format 1 trees hold files, directories and symlinks only.
                tracing::warn!(
                    "skipping {} (a FIFO, socket or device: a format 1 store cannot hold it)",
                    path.display()
                );
                continue;
            };
            let name = path.file_name().expect("listed").as_bytes().to_vec();
            scanned.push((name, node));
        }
        // Files' chunks are placed once per folder, not once per file: the
        // next file is hashed while the last one's chunks are encoded.
        self.sink
            .settle(scanned.iter_mut().flat_map(|(_, s)| match s {
                Scanned::File { slots, .. } => slots.iter_mut(),
                Scanned::Node(_) => [].iter_mut(),
            }))?;
        let mut entries = Vec::with_capacity(scanned.len());
        for (name, s) in scanned {
            let node = match s {
                Scanned::Node(node) => node,
                Scanned::File {
                    mode,
                    mtime,
                    size,
                    slots,
                    stat_row,
                    row_kept,
                    link,
                } => {
                    let chunks = self.sink.refs(slots);
                    if let Some((path, key)) = stat_row
                        && !row_kept
                    {
                        self.stat_rows.push((path, key, chunks.clone()))?;
                    }
                    Node::File {
                        mode,
                        mtime,
                        size,
                        chunks,
                        atime: None,
                        link,
                        erased: false,
                    }
                }
            };
            entries.push(Entry { name, node });
        }
        let tree = Tree::new(entries);
        let (r, links) = (self.sink.put_tree(&tree)?, tree.has_links());
        if keep {
            self.stat_rows.push_folder(FolderRow {
                path: key,
                digest,
                tree: r,
                links,
            })?;
        }
        Ok((r, links))
    }

    /// The name under which the index keeps a local path (a sealed
    /// store's index holds no file name in the clear).
    fn local_path(&self, path: &Path) -> Result<Vec<u8>> {
        let absolute = std::path::absolute(path).map_err(|e| Error::io(path.display(), e))?;
        Ok(self
            .repo
            .codec()
            .local_name(absolute.as_os_str().as_bytes()))
    }

    /// A file's name in the index, its stat, and its chunks if the stat
    /// cache knows them.
    fn look_up(&self, path: &Path, meta: &Metadata) -> Result<LookedUp> {
        let key = stat_key(meta);
        let path_bytes = self.local_path(path)?;
        let cached = self.repo.index().stat_lookup(&path_bytes, key)?;
        Ok((path_bytes, key, cached))
    }

    /// Queues the files of a folder (`looked`: its files' `look_up`s in
    /// order) that the stat cache does not know and that are read whole
    /// in one chunk.
    fn read_ahead(&mut self, listed: &[Listed], looked: &[LookedUp]) -> Result<()> {
        let files = listed
            .iter()
            .filter(|l| l.sub.is_none() && l.meta.is_file());
        let mut jobs = files
            .zip(looked)
            .filter(|(_, (_, key, cached))| cached.is_none() && reads_ahead(key))
            .map(|(l, (_, key, _))| small::Job {
                path: l.path.clone(),
                before: *key,
            })
            .peekable();
        if jobs.peek().is_none() {
            return Ok(());
        }
        if self.small.is_none() {
            let started = SmallFiles::start(self.repo.codec())
                .map_err(|e| Error::io("a thread to read files", e))?;
            self.small = Some(started);
        }
        self.small.as_mut().expect("started above").queue(jobs);
        Ok(())
    }

    fn scan_file(&mut self, path: &Path, meta: &Metadata, looked: LookedUp) -> Result<Scanned> {
        let (path_bytes, key, cached) = looked;
        let row_kept = cached.is_some();
        let ahead = match (&cached, &mut self.small) {
            (None, Some(small)) if reads_ahead(&key) => small.next(),
            _ => None,
        };
        let (slots, size) = match (cached, ahead) {
            (Some(chunks), _) => {
                self.progress.advance(key.size);
                (chunks.into_iter().map(Slot::Ready).collect(), key.size)
            }
            (None, Some((id, data))) => {
                self.progress.advance(key.size);
                (vec![self.sink.put_chunk(id, data, false)?], key.size)
            }
            (None, None) => {
                // A large file committed from here before is cut again
                // along its previous chunks (`snapshot::rechunk`).
                let previous = match key.size >= RECHUNK_FROM {
                    true => self.repo.index().stat_previous(&path_bytes)?,
                    false => None,
                };
                self.chunk_stable(path, key, previous.as_deref())?
            }
        };
        let stable = key.mtime_ns < self.racy_after_ns
            && key.ctime_ns < self.racy_after_ns
            && size == key.size;
        Ok(Scanned::File {
            mode: meta.mode() & 0o7777,
            mtime: mtime_of(meta),
            size,
            slots,
            stat_row: stable.then_some((path_bytes, key)),
            row_kept,
            link: self.link_of(meta)?,
        })
    }

    /// Chunks a file that must not change while it is read: its size,
    /// times and inode are compared after the read, and a file written
    /// meanwhile is read again, then named in an error. What is stored is
    /// never a mix of bytes from before and after a write.
    fn chunk_stable(
        &mut self,
        path: &Path,
        mut before: StatKey,
        previous: Option<&[BlobRef]>,
    ) -> Result<(Vec<Slot>, u64)> {
        for _ in 0..STABLE_READS {
            let file = open_listed(path)?;
            let (chunks, size) = match previous {
                Some(previous) => self.sink.chunk_along(file, path, previous)?,
                None => self.sink.chunk_slots(file, path, u64::MAX)?,
            };
            crate::hold::hold("file-read");
            let after = std::fs::symlink_metadata(path)
                .map(|m| stat_key(&m))
                .map_err(|e| Error::io(path.display(), e))?;
            if after == before && size == after.size {
                return Ok((chunks, size));
            }
            before = after;
        }
        Err(Error::InvalidInput(format!(
            "{} changed while it was read, {STABLE_READS} times; nothing was committed (commit again once it is written)",
            path.display()
        )))
    }
}

/// A file's name in the index, its stat, and its chunks if the stat cache
/// knows them.
type LookedUp = (Vec<u8>, StatKey, Option<Vec<BlobRef>>);

/// An entry of a folder being scanned, before its files are read.
struct Listed {
    path: std::path::PathBuf,
    meta: Metadata,
    /// A subfolder's tree and links flag.
    sub: Option<(BlobRef, bool)>,
}

/// What a folder's tree is made of but its files' contents: every
/// entry's name and stat, every subfolder's tree. Equal digests (and
/// files not changed within the racy window) mean an equal tree.
fn folder_digest(listed: &[Listed]) -> [u8; 32] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"detafs folder digest 1\0");
    for l in listed {
        let name = l.path.file_name().expect("listed").as_bytes();
        h.update((name.len() as u64).to_le_bytes());
        h.update(name);
        let m = &l.meta;
        let key = stat_key(m);
        for n in [
            u64::from(m.mode()),
            key.size,
            key.mtime_ns as u64,
            key.ctime_ns as u64,
            key.ino,
            m.nlink(),
            m.rdev(),
        ] {
            h.update(n.to_le_bytes());
        }
        if let Some((tree, links)) = &l.sub {
            h.update(serde_json::to_vec(tree).expect("serializable"));
            h.update([u8::from(*links)]);
        }
    }
    h.finalize().into()
}

type NameCounts = HashMap<(u64, u64), u32>;

/// The names of files with several, counted over the whole tree when the
/// scan meets the first file whose link count is above one: a tree
/// without such files (most) is not walked twice.
enum Names {
    /// Not counted (format 1 stores hold no link groups).
    None,
    Uncounted(std::path::PathBuf),
    Counted(NameCounts),
}

impl Names {
    fn counted(&mut self) -> Result<&NameCounts> {
        if let Names::Uncounted(root) = self {
            *self = Names::Counted(count_names(root)?);
        }
        static EMPTY: std::sync::LazyLock<NameCounts> = std::sync::LazyLock::new(HashMap::new);
        Ok(match self {
            Names::Counted(c) => c,
            _ => &EMPTY,
        })
    }
}

/// How many names each file with more than one has under `dir` (links
/// from outside it do not count: they are not in the version).
fn count_names(dir: &Path) -> Result<NameCounts> {
    let mut names = HashMap::new();
    let mut todo = vec![(dir.to_path_buf(), 0)];
    while let Some((dir, depth)) = todo.pop() {
        if depth > limits::MAX_DEPTH {
            break; // the scan itself refuses it
        }
        let items = std::fs::read_dir(&dir).map_err(|e| Error::io(dir.display(), e))?;
        for item in items {
            let item = item.map_err(|e| Error::io(dir.display(), e))?;
            let meta = item
                .metadata()
                .map_err(|e| Error::io(item.path().display(), e))?;
            if meta.is_dir() {
                todo.push((item.path(), depth + 1));
            } else if meta.nlink() > 1 {
                *names.entry((meta.dev(), meta.ino())).or_insert(0) += 1;
            }
        }
    }
    Ok(names)
}

/// Reads of a file that keeps changing before `commit --from` gives up.
const STABLE_READS: usize = 3;

/// Files from this size on are cut again along their previous chunks when
/// they change: below it a file is a few chunks, found as fast.
const RECHUNK_FROM: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_file_swapped_for_a_fifo_or_a_symlink_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let (file, fifo, link) = (
            dir.path().join("file"),
            dir.path().join("fifo"),
            dir.path().join("link"),
        );
        std::fs::write(&file, b"data").unwrap();
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(open_listed(&file).is_ok());
        // No writer on the FIFO: a plain open would wait for one forever.
        let err = open_listed(&fifo).unwrap_err().to_string();
        assert!(err.contains("no longer a regular file"), "{err}");
        assert!(open_listed(&link).is_err());
    }
}
