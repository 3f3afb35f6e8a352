//! Turns a local directory into trees and chunks: walks it, chunks and hashes
//! every file, packs what the store does not hold yet.

use super::encoder::{Encoded, Encoder};
use super::listed::{open_listed, stat_key};
use super::ordered::Ordered;
use super::small::{self, SmallFiles, reads_ahead};
use crate::cache::index::{FolderRow, Index, StatKey};
use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::limits;
use crate::progress::Progress;
use crate::repo::Repo;
use crate::snapshot::chunker;
use crate::snapshot::rechunk::{Checks, Chunk, Rechunker};
use crate::snapshot::tree::TreeSink;
use crate::snapshot::tree::{check_name, check_node};
use crate::snapshot::{Entry, Link, Mtime, Node, Tree};
use crate::store::codec::Codec;
use crate::store::pack::{BlobKind, BlobRef, PackWriter};
use crate::store::sealed_file::Sealing;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// Blobs a commit remembers having written (about 150 bytes each).
const WRITTEN: usize = 1 << 17;

/// Target pack size: large enough that a commit of many small files costs few
/// PUTs, small enough to bound memory (a few packs are in flight at once).
pub const PACK_SIZE: usize = 16 << 20;

/// How long the chunks an interrupted commit uploaded are offered to the
/// next commit on this host: well within `crate::store::grace::MAX_COMMIT_AGE`, which the
/// resumed commit must still land in, counted from those uploads.
const RESUME_WINDOW: std::time::Duration =
    std::time::Duration::from_secs(crate::store::grace::MAX_COMMIT_AGE.as_secs() / 2);

/// Files changed this shortly before a scan are not stat-cached: a later
/// write within the same timestamp tick would leave the stat as it was.
const RACY_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

/// `RACY_WINDOW`, or in test builds `DETAFS_TEST_RACY_WINDOW` (tests need
/// not wait two seconds before each commit they want cached).
fn racy_window() -> std::time::Duration {
    crate::hold::test_duration("DETAFS_TEST_RACY_WINDOW", RACY_WINDOW)
}

/// Now, in unix seconds.
pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub struct Scanner<'r> {
    repo: &'r Repo,
    data: PackWriter<'r>,
    trees: PackWriter<'r>,
    /// Blobs this commit wrote last, so content repeated nearby is
    /// stored once (bounded: what fell out may be stored again, which
    /// costs space, never correctness).
    written: lru::LruCache<BlobId, BlobRef>,
    /// Where the chunks encoded since the last `settle` were placed.
    placed: HashMap<BlobId, BlobRef>,
    /// Stat-cache rows to save once the commit has landed.
    pub stat_rows: PendingStats<'r>,
    /// Files changed within this window before the scan are not stat-cached:
    /// a later write in the same timestamp tick would go unnoticed.
    racy_after_ns: i64,
    progress: &'r dyn Progress,
    codec: Codec,
    /// When this commit began uploading (see `crate::store::grace::MAX_COMMIT_AGE`).
    pub started: std::time::Instant,
    /// When the oldest chunk it reuses from an interrupted commit was
    /// uploaded (unix seconds): the commit's age counts from there.
    pub resumed_since: Option<i64>,
    /// Started at the first new chunk, on the commit's own thread.
    encoder: Option<Encoder>,
    /// Started at the first chunk that can share the hashing; idle
    /// between files.
    hasher: Option<Hasher>,
    /// Names of each file with several in the scanned tree, by (device,
    /// inode): their entries form a link group.
    names: Names,
    /// The newest gc note when this commit began (`Repo::gc_mark`): the
    /// blobs it reuses were in the store then.
    pub gc_mark: Option<String>,
    /// Folders listed ahead of `scan_dir`.
    lister: Option<Lister>,
    /// Small files read ahead of `scan_dir`; started at the first.
    small: Option<SmallFiles>,
}

/// Stat-cache rows of a commit: set aside in the index as the scan goes
/// (a commit of millions of files holds a few thousand in memory), made
/// the stat cache's once the commit lands, forgotten if it does not.
pub struct PendingStats<'r> {
    index: &'r Index,
    token: u64,
    rows: Vec<(Vec<u8>, StatKey, Vec<BlobRef>)>,
    folders: Vec<FolderRow>,
    staged: bool,
}

/// Rows held before they are set aside.
const STAT_BATCH: usize = 4096;

impl<'r> PendingStats<'r> {
    pub fn new(index: &'r Index) -> Self {
        PendingStats {
            index,
            token: rand::random(),
            rows: Vec::new(),
            folders: Vec::new(),
            staged: false,
        }
    }

    fn push(&mut self, row: (Vec<u8>, StatKey, Vec<BlobRef>)) -> Result<()> {
        self.rows.push(row);
        if self.rows.len() >= STAT_BATCH {
            self.set_aside()?;
        }
        Ok(())
    }

    fn push_folder(&mut self, row: FolderRow) -> Result<()> {
        self.folders.push(row);
        if self.folders.len() >= STAT_BATCH {
            self.set_aside()?;
        }
        Ok(())
    }

    fn set_aside(&mut self) -> Result<()> {
        if !self.rows.is_empty() || !self.folders.is_empty() {
            self.staged = true;
            self.index
                .stat_stage(self.token, &self.rows, &self.folders)?;
            self.rows.clear();
            self.folders.clear();
        }
        Ok(())
    }

    /// Saves the rows: the commit they describe has landed.
    pub fn land(mut self) -> Result<()> {
        self.set_aside()?;
        if self.staged {
            self.staged = false;
            self.index.stat_land(self.token)?;
        }
        Ok(())
    }
}

impl Drop for PendingStats<'_> {
    fn drop(&mut self) {
        if self.staged
            && let Err(e) = self.index.stat_discard(self.token)
        {
            tracing::warn!("stat-cache rows of a failed commit not forgotten: {e}");
        }
    }
}

/// A chunk of a file being read: where it lives, or its id while it is
/// being encoded.
enum Slot {
    Ready(BlobRef),
    Encoding(BlobId),
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
    /// Whether whoever watches asked the commit to stop (`Progress`).
    pub fn cancelled(&self) -> bool {
        self.progress.cancelled()
    }

    /// Counts `bytes` a commit read without cutting them here (a staged
    /// copy sent through a gateway, which cuts it).
    pub fn count_read(&self, bytes: u64) {
        self.progress.advance(bytes);
    }

    /// A scanner for one commit; first makes the index forget what a gc
    /// it has not seen may have deleted.
    pub fn new(repo: &'r Repo, progress: &'r dyn Progress) -> Result<Self> {
        let gc_mark = repo.gc_mark()?;
        repo.index()
            .forget_uploaded(unix_now() - RESUME_WINDOW.as_secs() as i64)?;
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(i64::MAX);
        Ok(Scanner {
            repo,
            // Each durable pack's chunks are noted in the index, for a
            // commit that resumes this one if it is interrupted.
            data: PackWriter::new(repo.store(), PACK_SIZE).on_durable(Box::new(|blobs| {
                repo.index().insert_uploaded(blobs, unix_now())?;
                crate::hold::hold("commit-uploads-noted");
                Ok(())
            })),
            trees: PackWriter::new(repo.store(), PACK_SIZE),
            written: lru::LruCache::new(WRITTEN.try_into().expect("not zero")),
            placed: HashMap::new(),
            stat_rows: PendingStats::new(repo.index()),
            racy_after_ns: now_ns
                .saturating_sub(i64::try_from(racy_window().as_nanos()).unwrap_or(i64::MAX)),
            progress,
            codec: repo.codec().clone(),
            started: std::time::Instant::now(),
            resumed_since: None,
            encoder: None,
            hasher: None,
            names: Names::None,
            lister: None,
            small: None,
            gc_mark,
        })
    }

    /// Waits until every pack written so far is durable; returns bytes written.
    pub fn finish(self) -> Result<u64> {
        let data = self.data.finish()?;
        let trees = self.trees.finish()?;
        Ok(data.iter().chain(&trees).map(|(_, size)| size).sum())
    }

    /// Where a blob with this id already lives, in this commit or the store.
    fn known(&mut self, id: &BlobId) -> Result<Option<BlobRef>> {
        if let Some(r) = self.written.get(id) {
            return Ok(Some(*r));
        }
        if let Some(r) = self.repo.index().blob(id)? {
            return Ok(Some(r));
        }
        // Uploaded by a commit of this host that was interrupted.
        let since = unix_now() - RESUME_WINDOW.as_secs() as i64;
        Ok(match self.repo.index().uploaded_blob(id, since)? {
            Some((r, at)) => {
                self.resumed_since = Some(self.resumed_since.map_or(at, |s| s.min(at)));
                Some(r)
            }
            None => None,
        })
    }

    /// Adds a chunk to the data packs.
    fn place(&mut self, id: BlobId, bytes: bytes::Bytes, size: usize) -> Result<BlobRef> {
        let r = self.data.add(id, bytes, size)?;
        self.written.put(id, r);
        Ok(r)
    }

    /// Places a chunk, or queues it to be encoded. A small one may be
    /// encoded `inline` when the encoders are idle: a file of one small
    /// chunk read by this thread has nothing to overlap with.
    fn put_chunk(&mut self, id: BlobId, data: Vec<u8>, inline: bool) -> Result<Slot> {
        if let Some(r) = self.known(&id)? {
            return Ok(Slot::Ready(r));
        }
        let idle = self.encoder.as_ref().is_none_or(|e| !e.busy());
        if inline && idle && data.len() < chunker::MIN_SIZE {
            let bytes = self.codec.encode_blob(BlobKind::Chunk, &id, &data);
            let r = self.place(id, bytes.into(), data.len())?;
            return Ok(Slot::Ready(r));
        }
        if self.encoder.is_none() {
            let started = Encoder::start(self.codec.clone())
                .map_err(|e| Error::io("a thread to encode chunks", e))?;
            self.encoder = Some(started);
        }
        let encoder = self.encoder.as_mut().expect("started above");
        if !encoder.is_pending(&id) {
            let done = encoder.submit(id, data);
            self.pack(done)?;
        }
        Ok(Slot::Encoding(id))
    }

    /// Puts encoded chunks into the data packs, in the order they came.
    fn pack(&mut self, done: Vec<Encoded>) -> Result<()> {
        for e in done {
            let r = self.place(e.id, e.bytes.into(), e.size)?;
            self.placed.insert(e.id, r);
        }
        Ok(())
    }

    /// Packs every chunk being encoded.
    fn flush(&mut self) -> Result<()> {
        if let Some(encoder) = self.encoder.as_mut() {
            let done = encoder.drain();
            self.pack(done)?;
        }
        Ok(())
    }

    /// Where each chunk lives (after `flush`).
    fn refs(&self, slots: Vec<Slot>) -> Vec<BlobRef> {
        slots
            .into_iter()
            .map(|s| match s {
                Slot::Ready(r) => r,
                Slot::Encoding(id) => self.placed[&id],
            })
            .collect()
    }

    /// Places every chunk being encoded and turns the slots of `files`
    /// into locations, so `placed` starts empty again: it never holds more
    /// than a folder's worth.
    fn settle(&mut self, files: &mut [(Vec<u8>, Scanned)]) -> Result<()> {
        self.flush()?;
        for (_, s) in files {
            if let Scanned::File { slots, .. } = s {
                for slot in slots.iter_mut() {
                    if let Slot::Encoding(id) = slot {
                        *slot = Slot::Ready(self.placed[id]);
                    }
                }
            }
        }
        self.placed.clear();
        Ok(())
    }

    /// Snapshots directory `dir` and everything under it; returns its tree.
    pub fn scan_dir(&mut self, dir: &Path) -> Result<BlobRef> {
        if self.codec.format() >= 2 {
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
                && self.codec.format() >= 2
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
        self.settle(&mut scanned)?;
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
                    let chunks = self.refs(slots);
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
        let (r, links) = (self.put_tree(&tree)?, tree.has_links());
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
        Ok(self.codec.local_name(absolute.as_os_str().as_bytes()))
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
            let started = SmallFiles::start(&self.codec)
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
                (vec![self.put_chunk(id, data, false)?], key.size)
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
}

/// A file's name in the index, its stat, and its chunks if the stat cache
/// knows them.
type LookedUp = (Vec<u8>, StatKey, Option<Vec<BlobRef>>);

/// A folder's entries with their stats, in name order.
type Entries = Vec<(std::path::PathBuf, Metadata)>;

/// Lists folders on a thread of its own, in the order the scan visits
/// them (a folder, then each of its subfolders in name order), a few
/// folders ahead, and stats their entries on a few threads more: with a
/// cold page cache each stat waits on the disk, and a million of them one
/// after the other take twice as long as a few at a time.
struct Lister {
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
    fn start(root: &Path) -> Result<Lister> {
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
    fn next(&mut self, dir: &Path) -> Result<Entries> {
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

impl Scanner<'_> {
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
                Some(previous) => self.chunk_along(file, path, previous)?,
                None => self.chunk_slots(file, path, u64::MAX)?,
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

    /// Chunks a file's first `len` bytes (fewer if it is shorter) into
    /// the data packs.
    /// A local file's bytes are read as `sealing` keeps them.
    pub fn chunk_prefix(
        &mut self,
        path: &Path,
        sealing: &Sealing,
        len: u64,
    ) -> Result<(Vec<BlobRef>, u64)> {
        let file = sealing
            .open(path)
            .map_err(|e| Error::io(path.display(), e))?;
        let (slots, size) = self.chunk_slots(file.reader(), path, len)?;
        self.flush()?;
        let refs = self.refs(slots);
        self.placed.clear();
        Ok((refs, size))
    }

    /// Cuts `source`, read from a chunk's start in a file (`len` bytes of
    /// it at most), into the data packs until `stop` says a cut (its
    /// offset in `source`) meets what is known from there on, or `source`
    /// ends: the chunks, and the bytes they hold. For a few chunks around
    /// an edit: each is hashed here.
    pub fn chunk_until(
        &mut self,
        source: impl std::io::Read,
        len: u64,
        mut stop: impl FnMut(u64) -> bool,
    ) -> Result<(Vec<BlobRef>, u64)> {
        let (mut slots, mut at) = (Vec::new(), 0);
        for chunk in chunker::chunks(source, len, self.codec.chunker_seed()) {
            let chunk = chunk.map_err(|e| Error::io("a patched file", e))?;
            at += chunk.len() as u64;
            self.progress.advance(chunk.len() as u64);
            let id = self.codec.blob_id(&chunk);
            slots.push(self.put_chunk(id, chunk, true)?);
            if stop(at) {
                break;
            }
        }
        self.flush()?;
        let refs = self.refs(slots);
        self.placed.clear();
        Ok((refs, at))
    }

    /// Like `chunk_prefix`, leaving chunks being encoded as they are.
    fn chunk_slots(
        &mut self,
        file: impl std::io::Read,
        path: &Path,
        len: u64,
    ) -> Result<(Vec<Slot>, u64)> {
        let (mut slots, mut size) = (Vec::new(), 0);
        // Taken out while this file is read; put back only once drained, so
        // no result of this file can reach another.
        let mut hasher = self.hasher.take();
        for chunk in chunker::chunks(file, len, self.codec.chunker_seed()) {
            let chunk = chunk.map_err(|e| Error::io(path.display(), e))?;
            size += chunk.len() as u64;
            self.progress.advance(chunk.len() as u64);
            let idle = hasher.as_ref().is_none_or(|h| h.in_flight() == 0);
            if idle && chunk.len() < chunker::MIN_SIZE {
                // A small file (most files of a dataset) is hashed here: a
                // hand-off would cost more than its hash.
                let id = self.codec.blob_id(&chunk);
                slots.push(self.put_chunk(id, chunk, true)?);
                continue;
            }
            if hasher.is_none() {
                hasher = Some(start_hasher(&self.codec)?);
            }
            let h = hasher.as_mut().expect("started above");
            for (id, data) in h.submit(chunk) {
                slots.push(self.put_chunk(id, data, true)?);
            }
        }
        if let Some(mut h) = hasher {
            for (id, data) in h.drain() {
                slots.push(self.put_chunk(id, data, true)?);
            }
            self.hasher = Some(h);
        }
        Ok((slots, size))
    }
}

impl Scanner<'_> {
    /// Like `chunk_slots` for a whole file, cut again along its `previous`
    /// chunks: the guesses are hashed on the hashing threads and checked in
    /// order (`rechunk::Checks`); after a wrong one, guesses already given
    /// out are dropped and the chunker cuts from where the checks say
    /// (`snapshot::rechunk`). The chunks are those `chunk_slots` finds,
    /// without its boundary search where the bytes did not change.
    fn chunk_along(
        &mut self,
        file: File,
        path: &Path,
        previous: &[BlobRef],
    ) -> Result<(Vec<Slot>, u64)> {
        let io = |e| Error::io(path.display(), e);
        let len = file.metadata().map_err(io)?.len();
        let old = previous.iter().map(|r| (r.data_size(), r.id));
        let mut pieces = Rechunker::new(&file, len, old, self.codec.chunker_seed());
        let mut hasher = match self.hasher.take() {
            Some(h) => h,
            None => start_hasher(&self.codec)?,
        };
        let mut checks = Checks::default();
        let (mut slots, mut size, mut guessed) = (Vec::new(), 0, 0);
        let mut keep = |this: &mut Self, (id, data, guess): Chunk| -> Result<()> {
            guessed += usize::from(guess);
            size += data.len() as u64;
            this.progress.advance(data.len() as u64);
            slots.push(this.put_chunk(id, data, true)?);
            Ok(())
        };
        loop {
            let done = match pieces.next() {
                Some(piece) => {
                    let (start, data, want) = piece.map_err(io)?.into_parts();
                    checks.given(start, want);
                    hasher.submit(data)
                }
                None if checks.all_hashed() => break,
                None => hasher.drain(),
            };
            for (id, data) in done {
                match checks.hashed(id, data, len) {
                    Ok(right) => right.into_iter().try_for_each(|c| keep(self, c))?,
                    Err(at) => {
                        hasher.drain();
                        pieces.wrong_guess(at);
                        break;
                    }
                }
            }
        }
        self.hasher = Some(hasher);
        if let Some(c) = checks.finish() {
            keep(self, c)?;
        }
        tracing::debug!(
            "{}: cut again along {} previous chunks; {guessed} of {} chunks found in place",
            path.display(),
            previous.len(),
            slots.len()
        );
        Ok((slots, size))
    }
}

/// Files from this size on are cut again along their previous chunks when
/// they change: below it a file is a few chunks, found as fast.
const RECHUNK_FROM: u64 = 1 << 20;

/// Hashes chunks on all the cores while the commit's thread reads and
/// chunks (SHA-256 or the keyed hash costs more than finding boundaries).
type Hasher = Ordered<Vec<u8>, (BlobId, Vec<u8>)>;

/// Chunks hashed at once: a few MiB at most (`chunker::MAX_SIZE` each).
const HASH_DEPTH: usize = 8;

fn start_hasher(codec: &Codec) -> Result<Hasher> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let codec = codec.clone();
    Ordered::start("detafs-hash", threads, HASH_DEPTH, move |data: Vec<u8>| {
        (codec.blob_id(&data), data)
    })
    .map_err(|e| Error::io("a thread to hash chunks", e))
}

impl TreeSink for Scanner<'_> {
    fn put_tree(&mut self, tree: &Tree) -> Result<BlobRef> {
        // Only what every reader accepts is written (e.g. a file dated after
        // year 9999 is refused here, not stored for readers to trip on).
        let format = self.codec.format();
        for e in &tree.entries {
            check_name(&e.name)
                .and_then(|_| check_node(&e.node))
                .and_then(|_| match e.node {
                    Node::Special { .. } if format < 2 => {
                        Err("a format 1 store cannot hold FIFOs, sockets or devices".into())
                    }
                    _ if format < 2 && e.node.atime() != e.node.mtime() => {
                        Err("a format 1 store cannot hold an atime apart from the mtime".into())
                    }
                    _ if format < 2 && e.node.link().is_some() => {
                        Err("a format 1 store cannot hold hard links".into())
                    }
                    _ => Ok(()),
                })
                .map_err(|why| {
                    Error::InvalidInput(format!(
                        "cannot commit {:?}: {why}",
                        String::from_utf8_lossy(&e.name)
                    ))
                })?;
        }
        let json = tree.encode();
        if json.len() as u64 > limits::MAX_TREE_BYTES {
            return Err(Error::InvalidInput(format!(
                "a directory of {} entries is larger than the {} MiB a tree may hold",
                tree.entries.len(),
                limits::MAX_TREE_BYTES >> 20
            )));
        }
        let id = self.codec.blob_id(&json);
        if let Some(r) = self.known(&id)? {
            return Ok(r);
        }
        let encoded = self.codec.encode_blob(BlobKind::Tree, &id, &json);
        let encoded = bytes::Bytes::from(encoded);
        let r = self.trees.add(id, encoded.clone(), json.len())?;
        self.written.put(id, r);
        self.repo.remember_tree(&r, tree.clone(), &encoded);
        Ok(r)
    }
}

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
