//! The mounted file system, without the kernel: inode numbering, attributes,
//! the read-only `versions/` tree, the writable `staging/` overlay and the
//! `.detafs/` control files. `crate::fuse` only translates kernel requests
//! into these calls and errors into errno values.

mod control;

use crate::cache::chunks::ChunkCache;
use crate::commit::{CommitMeta, user_name};
use crate::error::{Error, FsError, Result};
use crate::repo::Repo;
use crate::snapshot::diff::TreeSource;
use crate::snapshot::{Mtime, Node, Record, Tree};
use crate::staging::{self, Kind, SNode, Staging};
use crate::store::pack::{self, BlobRef};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

pub const ROOT: u64 = 1;
const VERSIONS: u64 = 2;
const CONTROL: u64 = 3;
const LATEST: u64 = 4;
/// Staging inodes are staging node ids with this bit set.
const STAGING_BIT: u64 = 1 << 62;
/// Version inodes are allocated from here on.
const FIRST_VERSION_INO: u64 = 1 << 20;

/// Versions never change: let the kernel keep what it learns.
const IMMUTABLE_TTL: Duration = Duration::from_secs(24 * 3600);
const MUTABLE_TTL: Duration = Duration::from_secs(1);

/// Bytes fetched per store request when a version file is read sequentially.
const READ_AHEAD: u64 = 4 << 20;
/// Trees of a version loaded in the background when it is first opened, so
/// that walking it (`find`, `ls -R`) finds them in memory.
const PREFETCH_TREES: usize = 1024;
/// Entries of version directory listings kept in memory (about 100 bytes each).
const LISTING_ENTRIES: usize = 200_000;

/// Listings of version directories, least recently used dropped first,
/// bounded by their total number of entries.
struct Listings {
    lru: lru::LruCache<u64, Listing>,
    entries: usize,
}

impl Listings {
    fn put(&mut self, ino: u64, listing: Listing) {
        self.entries += listing.len();
        if let Some(old) = self.lru.put(ino, listing) {
            self.entries -= old.len();
        }
        while self.entries > LISTING_ENTRIES {
            match self.lru.pop_lru() {
                Some((_, l)) => self.entries -= l.len(),
                None => break,
            }
        }
    }

    fn drop_listing(&mut self, ino: u64) {
        if let Some(old) = self.lru.pop(&ino) {
            self.entries -= old.len();
        }
    }
}

/// Runs fetched ahead of a sequential reader (in parallel with its reads).
const PREFETCH_RUNS: usize = 2;
/// Verified chunks kept in memory for readers of the mount.
const CHUNK_CACHE_BYTES: usize = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Dir,
    File,
    Symlink,
}

#[derive(Clone, Debug)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    pub size: u64,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: Mtime,
    pub ttl: Duration,
}

pub struct DirEntry {
    pub ino: u64,
    pub kind: FileKind,
    pub name: Vec<u8>,
}

/// How a file was opened.
pub struct Opened {
    pub fh: u64,
    /// Contents never change: keep the page cache across opens.
    pub keep_cache: bool,
    /// Generated on open (control files): bypass the page cache.
    pub direct_io: bool,
}

/// An open file whose bytes come from the store (a version file, or an
/// unchanged file in staging).
struct StoredFile {
    chunks: Vec<BlobRef>,
    /// Offset of each chunk, plus the file size at the end.
    starts: Vec<u64>,
    /// Index of the first chunk of each run fetched with one range read.
    run_starts: Vec<usize>,
    /// For a one-chunk file: the run of its directory's small files that
    /// holds it, so reading a folder of small files costs one read per run.
    sibling_run: Option<Vec<BlobRef>>,
    /// What it is, for messages (`versions/v3/a/b.csv`).
    path: String,
}

impl StoredFile {
    fn new(chunks: Vec<BlobRef>, siblings: Option<&Tree>, path: String) -> StoredFile {
        let mut starts = Vec::with_capacity(chunks.len() + 1);
        let mut at = 0;
        starts.push(0);
        for c in &chunks {
            at += c.data_size();
            starts.push(at);
        }
        let mut run_starts = Vec::new();
        let mut i = 0;
        for run in pack::runs(&chunks, READ_AHEAD) {
            run_starts.push(i);
            i += run.len();
        }
        let sibling_run = match (&chunks[..], siblings) {
            ([only], Some(tree)) => {
                let mut all: Vec<BlobRef> = tree
                    .entries
                    .iter()
                    .filter_map(|e| match &e.node {
                        Node::File { chunks, .. } if chunks.len() == 1 => Some(chunks[0]),
                        _ => None,
                    })
                    .collect();
                all.sort_by_key(|r| (r.pack, r.offset));
                all.dedup_by_key(|r| (r.pack, r.offset));
                pack::runs(&all, READ_AHEAD)
                    .into_iter()
                    .find(|run| run.iter().any(|r| r == only))
                    .map(<[BlobRef]>::to_vec)
            }
            _ => None,
        };
        StoredFile {
            chunks,
            starts,
            run_starts,
            sibling_run,
            path,
        }
    }

    fn run(&self, r: usize) -> &[BlobRef] {
        let end = self
            .run_starts
            .get(r + 1)
            .copied()
            .unwrap_or(self.chunks.len());
        &self.chunks[self.run_starts[r]..end]
    }
}

/// A directory listing with attributes, `.` and `..` first.
pub type Listing = Arc<Vec<(DirEntry, Attr)>>;

enum Handle {
    /// An open directory: its listing, taken once at open (readdir calls
    /// then page through it).
    Dir(Listing),
    Stored(Arc<StoredFile>),
    Upper {
        file: Arc<File>,
        node: u64,
        writable: bool,
    },
    Text(Arc<Vec<u8>>),
    Commit,
}

/// What a version inode stands for.
#[derive(Clone)]
struct VEntry {
    version: u64,
    node: Node,
    /// `versions/`-relative path, for messages.
    path: Arc<str>,
    /// The directory holding it (its small files are read together).
    parent_tree: Option<BlobRef>,
}

/// A version inode: what it is, the kernel's lookup count, and its key in
/// `VersionInodes::by_name` (to drop it when the count reaches zero).
struct Held {
    entry: VEntry,
    lookups: u64,
    key: (u64, Vec<u8>),
}

/// Version inodes the kernel holds: allocated on lookup, dropped when the
/// kernel forgets them, so memory follows what the kernel caches.
#[derive(Default)]
struct VersionInodes {
    entries: HashMap<u64, Held>,
    by_name: HashMap<(u64, Vec<u8>), u64>,
    next: u64,
}

pub struct MountOptions {
    pub uid: u32,
    pub gid: u32,
}

pub struct MountFs {
    repo: Arc<Repo>,
    dataset: String,
    versions: RwLock<Vec<Record>>,
    inodes: Mutex<VersionInodes>,
    staging: Option<Mutex<Staging>>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    chunks: Arc<ChunkCache>,
    listings: Mutex<Listings>,
    last_error: Mutex<String>,
    opts: MountOptions,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn name_str(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

fn not_found(name: &[u8]) -> Error {
    Error::fs(FsError::NotFound, name_str(name))
}

fn read_only() -> Error {
    Error::fs(FsError::ReadOnly, "versions/")
}

fn is_staging(ino: u64) -> bool {
    ino & STAGING_BIT != 0
}

fn node_kind(node: &Node) -> FileKind {
    match node {
        Node::File { .. } => FileKind::File,
        Node::Dir { .. } => FileKind::Dir,
        Node::Symlink { .. } => FileKind::Symlink,
    }
}

fn staging_kind(k: Kind) -> FileKind {
    match k {
        Kind::File => FileKind::File,
        Kind::Dir => FileKind::Dir,
        Kind::Symlink => FileKind::Symlink,
    }
}

/// Parses `vN`.
fn version_name(name: &[u8]) -> Option<u64> {
    std::str::from_utf8(name.strip_prefix(b"v")?)
        .ok()?
        .parse()
        .ok()
}

impl MountFs {
    pub fn new(
        repo: Repo,
        dataset: &str,
        staging: Option<Staging>,
        opts: MountOptions,
    ) -> Result<MountFs> {
        let versions = repo.sync(dataset)?;
        let repo = Arc::new(repo);
        if let (Some(_), Some(latest)) = (&staging, versions.last()) {
            // Staging stands on the latest version's trees: have them at hand
            // (and in the disk cache) before the store is ever unreachable.
            prefetch_trees(repo.clone(), latest.tree);
        }
        let chunks = ChunkCache::new(repo.clone(), CHUNK_CACHE_BYTES);
        Ok(MountFs {
            repo,
            dataset: dataset.to_string(),
            versions: RwLock::new(versions),
            inodes: Mutex::new(VersionInodes {
                next: FIRST_VERSION_INO,
                ..Default::default()
            }),
            staging: staging.map(Mutex::new),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            chunks,
            listings: Mutex::new(Listings {
                lru: lru::LruCache::unbounded(),
                entries: 0,
            }),
            last_error: Mutex::new(String::new()),
            opts,
        })
    }

    pub fn repo(&self) -> &Repo {
        &self.repo
    }

    /// Reads records committed elsewhere; moves a clean staging area along.
    pub fn poll(&self) -> Result<()> {
        // Most polls find nothing new: only then re-read the index's records.
        if self.repo.fetch_new_records(&self.dataset)? > self.latest().unwrap_or(0) {
            let records = self.repo.index.records(&self.dataset)?;
            *self.versions.write().unwrap_or_else(|p| p.into_inner()) = records;
        }
        let latest = self
            .versions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .last()
            .cloned();
        if let (Some(st), Some(latest)) = (&self.staging, latest)
            && let Ok(st) = st.try_lock()
        {
            st.fast_forward(&self.repo, &latest)?;
        }
        Ok(())
    }

    fn latest(&self) -> Option<u64> {
        self.versions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .last()
            .map(|r| r.version)
    }

    fn record(&self, version: u64) -> Option<Record> {
        self.versions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|r| r.version == version)
            .cloned()
    }

    fn staging(&self) -> Result<MutexGuard<'_, Staging>> {
        match &self.staging {
            Some(s) => Ok(lock(s)),
            None => Err(Error::fs(
                FsError::ReadOnly,
                "staging/ (mounted --read-only)",
            )),
        }
    }

    fn dir_attr(&self, ino: u64, mtime: Mtime, ttl: Duration) -> Attr {
        Attr {
            ino,
            kind: FileKind::Dir,
            size: 0,
            perm: 0o755,
            nlink: 2,
            uid: self.opts.uid,
            gid: self.opts.gid,
            mtime,
            ttl,
        }
    }

    fn version_attr(&self, ino: u64, node: &Node) -> Attr {
        let (perm, nlink) = match node {
            Node::File { mode, .. } => (*mode, 1),
            Node::Dir { mode, .. } => (*mode, 2),
            Node::Symlink { .. } => (0o777, 1),
        };
        Attr {
            ino,
            kind: node_kind(node),
            size: node.size(),
            perm: perm as u16,
            nlink,
            uid: self.opts.uid,
            gid: self.opts.gid,
            mtime: node.mtime(),
            ttl: IMMUTABLE_TTL,
        }
    }

    fn staging_attr(&self, st: &Staging, n: &SNode) -> Attr {
        let (size, mtime) = st.size_and_mtime(n);
        Attr {
            ino: n.id | STAGING_BIT,
            kind: staging_kind(n.kind),
            size,
            perm: if n.kind == Kind::Symlink {
                0o777
            } else {
                n.mode as u16
            },
            nlink: if n.kind == Kind::Dir { 2 } else { 1 },
            uid: n.uid,
            gid: n.gid,
            mtime,
            ttl: MUTABLE_TTL,
        }
    }

    /// The inode for `name` under a version directory, allocated on first sight.
    /// The inode of a version entry, allocated if new. `looked_up`: it is
    /// for a lookup reply, counted here under the same lock as a `forget`,
    /// so the two never race.
    fn version_child(&self, parent: u64, name: &[u8], entry: VEntry, looked_up: bool) -> u64 {
        let mut t = lock(&self.inodes);
        let ino = match t.by_name.get(&(parent, name.to_vec())) {
            Some(&ino) => ino,
            None => {
                let ino = t.next;
                t.next += 1;
                let key = (parent, name.to_vec());
                t.by_name.insert(key.clone(), ino);
                t.entries.insert(
                    ino,
                    Held {
                        entry,
                        lookups: 0,
                        key,
                    },
                );
                ino
            }
        };
        if looked_up && let Some(h) = t.entries.get_mut(&ino) {
            h.lookups += 1;
        }
        ino
    }

    /// The kernel was handed `ino` in a READDIRPLUS entry.
    pub fn remember(&self, ino: u64) {
        if let Some(h) = lock(&self.inodes).entries.get_mut(&ino) {
            h.lookups += 1;
        }
    }

    /// The kernel dropped `n` of its references to `ino`: at none, the
    /// inode and what it holds (a chunk list, a path) are let go.
    pub fn forget(&self, ino: u64, n: u64) {
        let parent = {
            let mut t = lock(&self.inodes);
            let Some(h) = t.entries.get_mut(&ino) else {
                return;
            };
            h.lookups = h.lookups.saturating_sub(n);
            if h.lookups > 0 {
                return;
            }
            let Some(h) = t.entries.remove(&ino) else {
                return;
            };
            t.by_name.remove(&h.key);
            h.key.0
        };
        // Its folder's kept listing names it: the next one is built anew.
        lock(&self.listings).drop_listing(parent);
    }

    /// Whether a version inode is still allocated (a kept listing may name
    /// one the kernel has since forgotten: the caller looks its name up again).
    pub fn is_live(&self, ino: u64) -> bool {
        ino < FIRST_VERSION_INO || is_staging(ino) || lock(&self.inodes).entries.contains_key(&ino)
    }

    /// Version inodes in memory (for `.detafs/health`).
    pub fn version_inodes(&self) -> usize {
        lock(&self.inodes).entries.len()
    }

    fn version_entry(&self, ino: u64) -> Result<VEntry> {
        lock(&self.inodes)
            .entries
            .get(&ino)
            .map(|h| h.entry.clone())
            .ok_or_else(|| Error::fs(FsError::NotFound, format!("inode {ino}")))
    }

    /// A tree of a version (the folder `at`, or the one holding it): a tree
    /// that cannot be read is logged with the version and path it breaks.
    fn version_tree(&self, at: &VEntry, tree: &BlobRef) -> Result<Arc<Tree>> {
        self.repo.tree(tree).inspect_err(|e| {
            tracing::error!("versions/{} (v{}): {e}", at.path, at.version);
        })
    }

    /// `versions/vN`'s attributes and root tree (listing `versions/` does not
    /// load any version's trees).
    fn version_root(&self, name: &[u8], looked_up: bool) -> Result<(Attr, BlobRef)> {
        let record = version_name(name)
            .and_then(|v| self.record(v))
            .ok_or_else(|| not_found(name))?;
        let node = Node::Dir {
            mode: 0o555,
            mtime: Mtime(0, 0),
            tree: record.tree,
        };
        let ino = self.version_child(
            VERSIONS,
            name,
            VEntry {
                version: record.version,
                node: node.clone(),
                path: name_str(name).into(),
                parent_tree: None,
            },
            looked_up,
        );
        Ok((self.version_attr(ino, &node), record.tree))
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        if name.len() > crate::limits::MAX_NAME {
            return Err(Error::fs(FsError::NameTooLong, name_str(name)));
        }
        if is_staging(parent) {
            let st = self.staging()?;
            let n = st
                .lookup(&self.repo, parent & !STAGING_BIT, name)?
                .ok_or_else(|| not_found(name))?;
            return Ok(self.staging_attr(&st, &n));
        }
        match parent {
            ROOT => match name {
                b"versions" => self.getattr(VERSIONS),
                b"staging" if self.staging.is_some() => self.getattr(staging::ROOT | STAGING_BIT),
                b".detafs" => self.getattr(CONTROL),
                _ => Err(not_found(name)),
            },
            VERSIONS => {
                if name == b"latest" && self.latest().is_some() {
                    return self.getattr(LATEST);
                }
                let (attr, tree) = self.version_root(name, true)?;
                // Someone is going into this version: load its trees ahead.
                if !self.repo.tree_in_memory(&tree) {
                    prefetch_trees(self.repo.clone(), tree);
                }
                Ok(attr)
            }
            CONTROL => control::lookup(self, name),
            _ => {
                let parent_entry = self.version_entry(parent)?;
                let Node::Dir { tree, .. } = &parent_entry.node else {
                    return Err(Error::fs(FsError::NotDir, name_str(name)));
                };
                let node = self
                    .version_tree(&parent_entry, tree)?
                    .get(name)
                    .cloned()
                    .ok_or_else(|| not_found(name))?;
                let ino = self.version_child(
                    parent,
                    name,
                    VEntry {
                        version: parent_entry.version,
                        node: node.clone(),
                        path: format!("{}/{}", parent_entry.path, name_str(name)).into(),
                        parent_tree: Some(*tree),
                    },
                    true,
                );
                Ok(self.version_attr(ino, &node))
            }
        }
    }

    /// Like `getattr`, but a staged file unlinked while open still answers
    /// through its open handle (POSIX: the file lives until closed).
    pub fn getattr_open(&self, ino: u64, fh: Option<u64>) -> Result<Attr> {
        match self.getattr(ino) {
            Err(Error::Fs {
                kind: FsError::NotFound,
                ..
            }) if fh.is_some() => self.orphan_attr(ino, fh.expect("checked")),
            other => other,
        }
    }

    fn orphan_attr(&self, ino: u64, fh: u64) -> Result<Attr> {
        let file = match lock(&self.handles).get(&fh) {
            Some(Handle::Upper { file, .. }) => file.clone(),
            _ => return Err(Error::fs(FsError::NotFound, format!("inode {ino}"))),
        };
        let m = file.metadata().map_err(|e| Error::io("staged file", e))?;
        use std::os::unix::fs::MetadataExt;
        Ok(Attr {
            ino,
            kind: FileKind::File,
            size: m.size(),
            perm: (m.mode() & 0o7777) as u16,
            nlink: 0,
            uid: m.uid(),
            gid: m.gid(),
            mtime: Mtime(m.mtime(), m.mtime_nsec() as u32),
            ttl: Duration::ZERO,
        })
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        if is_staging(ino) {
            let st = self.staging()?;
            let n = st.node(ino & !STAGING_BIT)?;
            return Ok(self.staging_attr(&st, &n));
        }
        match ino {
            ROOT | CONTROL => Ok(self.dir_attr(ino, Mtime(0, 0), MUTABLE_TTL)),
            VERSIONS => Ok(self.dir_attr(ino, Mtime(0, 0), MUTABLE_TTL)),
            LATEST => {
                let target = format!("v{}", self.latest().ok_or_else(|| not_found(b"latest"))?);
                Ok(Attr {
                    ino,
                    kind: FileKind::Symlink,
                    size: target.len() as u64,
                    perm: 0o777,
                    nlink: 1,
                    uid: self.opts.uid,
                    gid: self.opts.gid,
                    mtime: Mtime(0, 0),
                    ttl: Duration::ZERO,
                })
            }
            i if control::is_control(i) => Ok(control::attr(self, i)),
            _ => {
                let e = self.version_entry(ino)?;
                Ok(self.version_attr(ino, &e.node))
            }
        }
    }

    pub fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let mut out = vec![];
        if is_staging(ino) {
            let st = self.staging()?;
            for n in st.children(&self.repo, ino & !STAGING_BIT)? {
                out.push(DirEntry {
                    ino: n.id | STAGING_BIT,
                    kind: staging_kind(n.kind),
                    name: n.name,
                });
            }
            return Ok(out);
        }
        match ino {
            ROOT => {
                out.push(DirEntry {
                    ino: VERSIONS,
                    kind: FileKind::Dir,
                    name: b"versions".to_vec(),
                });
                if self.staging.is_some() {
                    out.push(DirEntry {
                        ino: staging::ROOT | STAGING_BIT,
                        kind: FileKind::Dir,
                        name: b"staging".to_vec(),
                    });
                }
                out.push(DirEntry {
                    ino: CONTROL,
                    kind: FileKind::Dir,
                    name: b".detafs".to_vec(),
                });
            }
            VERSIONS => {
                let versions: Vec<u64> = self
                    .versions
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .map(|r| r.version)
                    .collect();
                for v in &versions {
                    let name = format!("v{v}").into_bytes();
                    let (attr, _) = self.version_root(&name, false)?;
                    out.push(DirEntry {
                        ino: attr.ino,
                        kind: FileKind::Dir,
                        name,
                    });
                }
                if !versions.is_empty() {
                    out.push(DirEntry {
                        ino: LATEST,
                        kind: FileKind::Symlink,
                        name: b"latest".to_vec(),
                    });
                }
            }
            CONTROL => out.extend(control::entries()),
            _ => {
                let e = self.version_entry(ino)?;
                let Node::Dir { tree, .. } = &e.node else {
                    return Err(Error::fs(FsError::NotDir, format!("inode {ino}")));
                };
                for child in &self.version_tree(&e, tree)?.entries {
                    let cino = self.version_child(
                        ino,
                        &child.name,
                        VEntry {
                            version: e.version,
                            node: child.node.clone(),
                            path: format!("{}/{}", e.path, name_str(&child.name)).into(),
                            parent_tree: Some(*tree),
                        },
                        false,
                    );
                    out.push(DirEntry {
                        ino: cino,
                        kind: node_kind(&child.node),
                        name: child.name.clone(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Whether requests about `ino` can be answered from memory alone (no
    /// store, disk or staging lock): then the adapter answers them on the
    /// kernel's request thread, without a thread hop.
    pub fn answers_from_memory(&self, ino: u64) -> bool {
        // Staging waits on its lock, which a commit holds: never on the
        // kernel's request thread. The root too: its listing and its
        // `staging` entry carry staging's attributes.
        if is_staging(ino) || (ino == ROOT && self.staging.is_some()) {
            return false;
        }
        if ino < FIRST_VERSION_INO {
            return true; // root, versions/, latest, .detafs/
        }
        match lock(&self.inodes).entries.get(&ino).map(|h| &h.entry.node) {
            Some(Node::Dir { tree, .. }) => self.repo.tree_in_memory(tree),
            _ => true,
        }
    }

    /// A directory's listing with attributes, `.` and `..` first. Listings of
    /// version directories never change and are kept.
    fn dir_listing(&self, ino: u64) -> Result<Listing> {
        let immutable = self.dir_is_immutable(ino);
        if immutable && let Some(l) = lock(&self.listings).lru.get(&ino) {
            return Ok(l.clone());
        }
        let me = self.getattr(ino)?;
        let dot = |name: &[u8]| DirEntry {
            ino,
            kind: FileKind::Dir,
            name: name.to_vec(),
        };
        let mut listing = vec![(dot(b"."), me.clone()), (dot(b".."), me)];
        listing.extend(self.readdir_plus(ino)?);
        let listing = Arc::new(listing);
        if immutable {
            lock(&self.listings).put(ino, listing.clone());
        }
        Ok(listing)
    }

    /// Opens a directory: lists it once (readdir calls page through it).
    pub fn open_dir(&self, ino: u64) -> Result<u64> {
        let listing = self.dir_listing(ino)?;
        Ok(self.add_handle(Handle::Dir(listing)))
    }

    /// The listing of an open directory.
    pub fn listing(&self, fh: u64) -> Result<Listing> {
        match lock(&self.handles).get(&fh) {
            Some(Handle::Dir(l)) => Ok(l.clone()),
            _ => Err(Error::fs(FsError::NotDir, "not an open directory")),
        }
    }

    /// Whether a directory's listing never changes (a directory of a version),
    /// so the kernel may cache it.
    pub fn dir_is_immutable(&self, ino: u64) -> bool {
        !is_staging(ino) && ino >= FIRST_VERSION_INO
    }

    /// A directory's entries with their attributes (READDIRPLUS), so `ls -l`
    /// needs no lookup per file.
    pub fn readdir_plus(&self, ino: u64) -> Result<Vec<(DirEntry, Attr)>> {
        let entries = self.readdir(ino)?;
        if is_staging(ino) {
            let st = self.staging()?;
            return entries
                .into_iter()
                .map(|e| {
                    let n = st.node(e.ino & !STAGING_BIT)?;
                    let a = self.staging_attr(&st, &n);
                    Ok((e, a))
                })
                .collect();
        }
        entries
            .into_iter()
            .map(|e| {
                let a = self.getattr(e.ino)?;
                Ok((e, a))
            })
            .collect()
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        if ino == LATEST {
            return Ok(
                format!("v{}", self.latest().ok_or_else(|| not_found(b"latest"))?).into_bytes(),
            );
        }
        if is_staging(ino) {
            let n = self.staging()?.node(ino & !STAGING_BIT)?;
            return Ok(n.target);
        }
        match self.version_entry(ino)?.node {
            Node::Symlink { target, .. } => Ok(target),
            _ => Err(Error::fs(FsError::Invalid, "not a symlink")),
        }
    }

    fn add_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, h);
        fh
    }

    pub fn open(&self, ino: u64, flags: i32, uid: u32) -> Result<Opened> {
        let access = flags & libc::O_ACCMODE;
        let writing = access != libc::O_RDONLY;
        if control::is_control(ino) {
            return control::open(self, ino, writing, uid);
        }
        if is_staging(ino) {
            let id = ino & !STAGING_BIT;
            let st = self.staging()?;
            let n = st.node(id)?;
            if n.kind == Kind::Dir {
                return Err(Error::fs(FsError::IsDir, name_str(&n.name)));
            }
            let truncate = flags & libc::O_TRUNC != 0;
            if !writing && !n.upper {
                let path = format!(
                    "staging/{} (unchanged since v{})",
                    name_str(&n.name),
                    st.base_version()?
                );
                let file = StoredFile::new(n.chunks.unwrap_or_default(), None, path);
                let fh = self.add_handle(Handle::Stored(Arc::new(file)));
                return Ok(Opened {
                    fh,
                    keep_cache: false,
                    direct_io: false,
                });
            }
            let path = st.copy_up(&self.repo, id, !truncate)?;
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(writing)
                .truncate(truncate && writing)
                .open(&path)
                .map_err(|e| Error::io(path.display(), e))?;
            let fh = self.add_handle(Handle::Upper {
                file: Arc::new(file),
                node: id,
                writable: writing,
            });
            return Ok(Opened {
                fh,
                keep_cache: false,
                direct_io: false,
            });
        }
        if writing {
            return Err(read_only());
        }
        let entry = self.version_entry(ino)?;
        match &entry.node {
            Node::File { chunks, .. } => {
                let chunks = chunks.clone();
                let siblings = match (&entry.parent_tree, chunks.len()) {
                    (Some(t), 1) => Some(self.version_tree(&entry, t)?),
                    _ => None,
                };
                let path = format!("versions/{}", entry.path);
                let file = StoredFile::new(chunks, siblings.as_deref(), path);
                let fh = self.add_handle(Handle::Stored(Arc::new(file)));
                Ok(Opened {
                    fh,
                    keep_cache: true,
                    direct_io: false,
                })
            }
            _ => Err(Error::fs(FsError::IsDir, format!("inode {ino}"))),
        }
    }

    pub fn release(&self, fh: u64) {
        lock(&self.handles).remove(&fh);
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = match lock(&self.handles).get(&fh) {
            Some(Handle::Stored(f)) => Handle::Stored(f.clone()),
            Some(Handle::Dir(_)) => return Err(Error::fs(FsError::IsDir, "directory")),
            Some(Handle::Upper {
                file,
                node,
                writable,
            }) => Handle::Upper {
                file: file.clone(),
                node: *node,
                writable: *writable,
            },
            Some(Handle::Text(t)) => Handle::Text(t.clone()),
            Some(Handle::Commit) => return Ok(vec![]),
            None => return Err(Error::fs(FsError::Invalid, "bad file handle")),
        };
        match h {
            Handle::Stored(f) => self.read_stored(&f, offset, size as u64),
            Handle::Upper { file, .. } => {
                let mut buf = vec![0; size as usize];
                let mut got = 0;
                while got < buf.len() {
                    match file.read_at(&mut buf[got..], offset + got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(Error::io("staged file", e)),
                    }
                }
                buf.truncate(got);
                Ok(buf)
            }
            Handle::Text(t) => {
                let start = (offset as usize).min(t.len());
                let end = (start + size as usize).min(t.len());
                Ok(t[start..end].to_vec())
            }
            Handle::Commit | Handle::Dir(_) => Ok(vec![]),
        }
    }

    /// Bytes `[offset, offset+size)` of a stored file, every chunk verified.
    /// While one run of chunks is read, the next one is fetched ahead.
    fn read_stored(&self, f: &StoredFile, offset: u64, size: u64) -> Result<Vec<u8>> {
        let total = f.starts.last().copied().unwrap_or(0);
        let end = (offset + size).min(total);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        if offset >= end {
            return Ok(out);
        }
        let mut i = f.starts.partition_point(|&s| s <= offset) - 1;
        while i < f.chunks.len() && f.starts[i] < end {
            let data = match &f.sibling_run {
                Some(run) => {
                    let at = run
                        .iter()
                        .position(|r| r.id == f.chunks[i].id)
                        .expect("run holds the chunk");
                    self.chunks.get(run, at)?
                }
                None => {
                    let r = f.run_starts.partition_point(|&s| s <= i) - 1;
                    for ahead in r + 1..(r + 1 + PREFETCH_RUNS).min(f.run_starts.len()) {
                        self.chunks.prefetch(f.run(ahead).to_vec());
                    }
                    self.chunks.get(f.run(r), i - f.run_starts[r])?
                }
            };
            let from = offset.max(f.starts[i]) - f.starts[i];
            let to = end.min(f.starts[i + 1]) - f.starts[i];
            out.extend_from_slice(&data[from as usize..to as usize]);
            i += 1;
        }
        Ok(out)
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8], uid: u32) -> Result<usize> {
        let file = match lock(&self.handles).get(&fh) {
            Some(Handle::Upper {
                file,
                writable: true,
                ..
            }) => Some(file.clone()),
            Some(Handle::Commit) => None,
            Some(_) => return Err(Error::fs(FsError::Invalid, "file not open for writing")),
            None => return Err(Error::fs(FsError::Invalid, "bad file handle")),
        };
        let Some(file) = file else {
            return control::commit(self, data, uid).map(|_| data.len());
        };
        file.write_all_at(data, offset)
            .map_err(|e| Error::io("staged file", e))?;
        Ok(data.len())
    }

    /// What an open handle reads, for error messages (version and path).
    pub fn describe(&self, fh: u64) -> String {
        match lock(&self.handles).get(&fh) {
            Some(Handle::Stored(f)) => f.path.clone(),
            Some(Handle::Upper { node, .. }) => format!("staged file (node {node})"),
            _ => format!("handle {fh}"),
        }
    }

    pub fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let file = match lock(&self.handles).get(&fh) {
            Some(Handle::Upper {
                file,
                writable: true,
                ..
            }) => file.clone(),
            Some(Handle::Stored(_)) => return Err(read_only()),
            _ => return Err(Error::fs(FsError::Invalid, "file not open for writing")),
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&*file);
        // SAFETY: fd is open for the duration of the call.
        if unsafe { libc::fallocate(fd, mode, offset as i64, length as i64) } != 0 {
            return Err(Error::io("staged file", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// An acknowledged fsync of a staged file survives a crash: its data,
    /// its name in staging's folder and its row.
    pub fn fsync(&self, fh: u64) -> Result<()> {
        let file = match lock(&self.handles).get(&fh) {
            Some(Handle::Upper { file, .. }) => file.clone(),
            _ => return Ok(()),
        };
        file.sync_all().map_err(|e| Error::io("staged file", e))?;
        self.staging()?.sync()
    }

    /// Staging inodes open for writing: a commit keeps them staged.
    fn open_writers(&self) -> HashSet<u64> {
        lock(&self.handles)
            .values()
            .filter_map(|h| match h {
                Handle::Upper {
                    node,
                    writable: true,
                    ..
                } => Some(*node),
                _ => None,
            })
            .collect()
    }

    fn staging_parent(&self, parent: u64) -> Result<u64> {
        if is_staging(parent) {
            Ok(parent & !STAGING_BIT)
        } else {
            Err(read_only())
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn make(
        &self,
        parent: u64,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        target: &[u8],
    ) -> Result<Attr> {
        let parent = self.staging_parent(parent)?;
        let st = self.staging()?;
        let kind = match kind {
            FileKind::File => Kind::File,
            FileKind::Dir => Kind::Dir,
            FileKind::Symlink => Kind::Symlink,
        };
        let n = st.create(&self.repo, parent, name, kind, mode, uid, gid, target)?;
        Ok(self.staging_attr(&st, &n))
    }

    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> Result<(Attr, Opened)> {
        let attr = self.make(parent, name, FileKind::File, mode, uid, gid, b"")?;
        let opened = self.open(attr.ino, flags & !libc::O_TRUNC, uid)?;
        Ok((attr, opened))
    }

    pub fn remove(&self, parent: u64, name: &[u8], dir: bool) -> Result<()> {
        let parent = self.staging_parent(parent)?;
        self.staging()?.remove(&self.repo, parent, name, dir)
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        no_replace: bool,
    ) -> Result<()> {
        let (p, np) = (
            self.staging_parent(parent)?,
            self.staging_parent(new_parent)?,
        );
        self.staging()?
            .rename(&self.repo, p, name, np, new_name, no_replace)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn setattr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        mtime: Option<Mtime>,
        fh: Option<u64>,
    ) -> Result<Attr> {
        if control::is_control(ino) {
            return Ok(control::attr(self, ino)); // `echo > commit` truncates first
        }
        if !is_staging(ino) {
            return Err(read_only());
        }
        let id = ino & !STAGING_BIT;
        let st = self.staging()?;
        if st.get(id)?.is_none()
            && let Some(fh) = fh
        {
            // Unlinked while open: only the open file is left to change.
            drop(st);
            if let (Some(size), Some(Handle::Upper { file, .. })) =
                (size, lock(&self.handles).get(&fh))
            {
                file.set_len(size)
                    .map_err(|e| Error::io("staged file", e))?;
            }
            return self.orphan_attr(ino, fh);
        }
        if let Some(size) = size {
            let open = fh.and_then(|fh| match lock(&self.handles).get(&fh) {
                Some(Handle::Upper { file, .. }) => Some(file.clone()),
                _ => None,
            });
            let file = match open {
                Some(f) => f,
                None => {
                    let path = st.copy_up(&self.repo, id, size > 0)?;
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(|e| Error::io(path.display(), e))?;
                    Arc::new(f)
                }
            };
            file.set_len(size)
                .map_err(|e| Error::io("staged file", e))?;
        }
        st.set_attr(id, mode, uid, gid, mtime)?;
        let n = st.node(id)?;
        Ok(self.staging_attr(&st, &n))
    }

    /// Free space where staged data lives.
    pub fn statfs(&self) -> Result<libc::statvfs> {
        let path = std::ffi::CString::new(self.repo.state_dir.as_os_str().as_encoded_bytes())
            .expect("no NUL in path");
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid C string and out-pointer.
        if unsafe { libc::statvfs(path.as_ptr(), &mut s) } != 0 {
            return Err(Error::io("statfs", std::io::Error::last_os_error()));
        }
        Ok(s)
    }

    fn commit_staging(&self, message: &str, uid: u32) -> Result<Record> {
        let author = user_name(uid);
        let meta = CommitMeta {
            dataset: &self.dataset,
            message: message.trim(),
            author: &author,
        };
        // Files open for writing are listed under the staging lock: an open
        // adds its handle before it lets the lock go, so none is missed (its
        // staged copy would be deleted under the writer).
        let st = self.staging()?;
        let open = self.open_writers();
        let record = st.commit(&self.repo, &meta, &open, indicatif::ProgressBar::hidden())?;
        drop(st);
        self.poll()?;
        Ok(record)
    }
}

/// Loads `root` and the trees under it into memory in the background, a
/// level at a time with one batched read per level, up to `PREFETCH_TREES`
/// trees. Best effort: readers report real errors; skipped when busy.
fn prefetch_trees(repo: Arc<Repo>, root: BlobRef) {
    let store = repo.store.clone();
    let _ = store.try_spawn_work(move || {
        let mut level = vec![root];
        let mut loaded = 0;
        while !level.is_empty() && loaded < PREFETCH_TREES {
            if repo.load_trees(&level).is_err() {
                return;
            }
            loaded += level.len();
            let mut next = Vec::new();
            for r in &level {
                let Ok(tree) = repo.tree(r) else { return };
                next.extend(tree.entries.iter().filter_map(|e| match &e.node {
                    Node::Dir { tree, .. } => Some(*tree),
                    _ => None,
                }));
            }
            next.truncate(PREFETCH_TREES.saturating_sub(loaded));
            level = next;
        }
    });
}
