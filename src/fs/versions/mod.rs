//! `versions/`: one read-only directory per version, served from trees.

pub mod inodes;
pub mod stored;
pub mod tags;

use self::inodes::VersionInodes;
use self::stored::{Origin, StoredFile};
use crate::error::{Error, FsError, Result};
use crate::fs::{
    Attr, DirEntry, LATEST, PREFETCH_TREES, ReadAhead, VERSIONS, name_str, not_found, version_name,
};
use crate::read::chunks::ChunkCache;
use crate::repo::Repo;
use crate::snapshot::Kind;
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Mtime, Node, Record, Tree};
use crate::store::pack::BlobRef;
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Bytes of version directory listings kept in memory at most (about
/// 50,000 entries).
pub(in crate::fs) const LISTING_BYTES: usize = 8 << 20;

/// Listings of version directories (`listings.rs`), least recently used
/// dropped first, bounded by their bytes and the memory budget.
pub(in crate::fs) type Listings = crate::cache::weighed::WeighedLru<u64, crate::fs::Listing>;

/// `versions/`'s state: the versions and tags known, their inodes, the
/// files the kernel reads without opening, and the chunks read.
pub(super) struct Versions {
    pub(super) repo: Arc<Repo>,
    pub(super) dataset: String,
    /// Who owns what versions/ holds (the mount's user and group).
    pub(super) owner: (u32, u32),
    pub(super) records: RwLock<Vec<Record>>,
    pub(super) tags: RwLock<tags::TagTable>,
    pub(super) inodes: Mutex<VersionInodes>,
    /// Handles of version files read without an open (`unopened.rs`).
    pub(super) unopened: Mutex<lru::LruCache<u64, Arc<StoredFile>>>,
    pub(super) chunks: Arc<ChunkCache>,
    pub(super) read_ahead: ReadAhead,
    /// Whether `versions/` has a connection of its own where the kernel
    /// opens files without asking (`skip_version_opens`).
    pub(super) apart: AtomicBool,
    /// Listings kept of version folders and of `versions/` (`listings.rs`).
    pub(super) listings: Mutex<Listings>,
    /// Whether the last poll was refused (a revoked key, through a
    /// gateway): what was read before has been dropped once.
    pub(super) refused: AtomicBool,
}

impl Versions {
    /// The versions known.
    pub(super) fn records(&self) -> Vec<Record> {
        self.records.read().clone()
    }

    /// The newest version known.
    pub(super) fn latest(&self) -> Option<u64> {
        self.records.read().last().map(|r| r.version)
    }

    pub(super) fn record(&self, version: u64) -> Option<Record> {
        self.records
            .read()
            .iter()
            .find(|r| r.version == version)
            .cloned()
    }

    /// When version `version` was committed: the time of `versions/vN`.
    pub(super) fn commit_time(&self, version: u64) -> Mtime {
        self.record(version).map_or(Mtime(0, 0), |r| r.mtime())
    }

    /// `versions/latest`, a symlink to the newest version, from `mtime`.
    pub(super) fn latest_attr(&self, mtime: Mtime) -> Result<Attr> {
        let version = self.latest().ok_or_else(|| not_found(b"latest"))?;
        Ok(self.version_link(LATEST, version, mtime, std::time::Duration::ZERO))
    }

    /// A symlink of `versions/` (`latest`, a tag) to `v{version}`.
    pub(in crate::fs) fn version_link(
        &self,
        ino: u64,
        version: u64,
        mtime: Mtime,
        ttl: std::time::Duration,
    ) -> Attr {
        let size = format!("v{version}").len() as u64;
        Attr::made_up(ino, Kind::Symlink, size, 0o777, 1, self.owner, mtime, ttl)
    }

    /// A tree of version `version` (the folder `ino`, or the one holding
    /// it): a tree that cannot be read is logged with the version and path
    /// it breaks.
    pub(super) fn version_tree(&self, version: u64, ino: u64, tree: &BlobRef) -> Result<Arc<Tree>> {
        self.repo.tree(tree).inspect_err(|e| {
            if !matches!(e, Error::WouldBlock) {
                tracing::error!("versions/{} (v{version}): {e}", self.version_path(ino));
            }
        })
    }

    /// `versions/vN`'s attributes and root tree (listing `versions/` does not
    /// load any version's trees).
    pub(super) fn version_root(&self, name: &[u8], looked_up: bool) -> Result<(Attr, BlobRef)> {
        let record = version_name(name)
            .and_then(|v| self.record(v))
            .ok_or_else(|| not_found(name))?;
        Ok((self.record_root(&record, looked_up)?, record.tree))
    }

    /// The attributes of the folder of `record`'s version.
    fn record_root(&self, record: &Record, looked_up: bool) -> Result<Attr> {
        let node = Node::Dir {
            mode: 0o555,
            mtime: record.mtime(),
            tree: record.tree,
            atime: None,
            links: false,
        };
        let place = (VERSIONS, record.version);
        let ino = self.version_child(place, record.version, &node, looked_up);
        self.version_attr(ino)
    }

    /// `versions/NAME`: `latest` (its time `latest_time`), `vN` or a tag.
    pub(super) fn lookup_version(&self, name: &[u8], latest_time: Mtime) -> Result<Attr> {
        if name == b"latest" && self.latest().is_some() {
            return self.latest_attr(latest_time);
        }
        if let Some(attr) = self.lookup_tag(name) {
            return Ok(attr);
        }
        let (attr, tree) = self.version_root(name, true)?;
        // Someone is going into this version: load its trees ahead.
        if !self.repo.tree_in_memory(&tree) {
            prefetch_trees(self.repo.clone(), tree);
        }
        Ok(attr)
    }

    pub(super) fn lookup_in_version(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        let tree = self.version_dir_tree(parent).map_err(|e| match e {
            Error::Fs {
                kind: FsError::NotDir,
                ..
            } => Error::fs(FsError::NotDir, name_str(name)),
            other => other,
        })?;
        let version = self.version_entry_version(parent)?;
        let entries = self.version_tree(version, parent, &tree)?;
        let index = entries
            .entries
            .binary_search_by(|e| e.name.as_slice().cmp(name))
            .map_err(|_| not_found(name))?;
        let node = &entries.entries[index].node;
        let ino = self.version_child((parent, index as u64), version, node, true);
        self.version_attr(ino)
    }

    /// `versions/`: `latest`, the tags in the order seen, then `vN` for
    /// each version: the order of `versions_offset`, which entries added
    /// later do not disturb.
    pub(super) fn list_versions(&self) -> Result<Vec<DirEntry>> {
        let records = self.records.read().clone();
        let mut out = vec![];
        if !records.is_empty() {
            out.push(DirEntry {
                ino: LATEST,
                kind: Kind::Symlink,
                name: b"latest".to_vec(),
            });
        }
        out.extend(self.list_tags());
        for r in &records {
            out.push(DirEntry {
                ino: self.record_root(r, false)?.ino,
                kind: Kind::Dir,
                name: format!("v{}", r.version).into_bytes(),
            });
        }
        Ok(out)
    }

    pub(super) fn list_version_dir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        self.list_version_dir_part(ino, 0..usize::MAX)
    }

    /// Entries `part` of a version folder (as many as it has).
    pub(super) fn list_version_dir_part(
        &self,
        ino: u64,
        part: std::ops::Range<usize>,
    ) -> Result<Vec<DirEntry>> {
        let entries = self.version_dir_entries(ino)?;
        let (version, end) = (
            self.version_entry_version(ino)?,
            part.end.min(entries.entries.len()),
        );
        Ok(entries
            .entries
            .get(part.start..end)
            .unwrap_or_default()
            .iter()
            .zip(part.start..)
            .map(|(child, index)| DirEntry {
                ino: self.version_child((ino, index as u64), version, &child.node, false),
                kind: child.node.kind(),
                name: child.name.clone(),
            })
            .collect())
    }

    /// A version folder's tree.
    pub(super) fn version_dir_entries(&self, ino: u64) -> Result<Arc<Tree>> {
        let tree = self.version_dir_tree(ino)?;
        let version = self.version_entry_version(ino)?;
        self.version_tree(version, ino, &tree)
    }

    /// A version's file, ready to read.
    pub(super) fn version_file(&self, ino: u64) -> Result<StoredFile> {
        let entry = self.version_entry(ino)?;
        let version = entry.version;
        let node = entry
            .node
            .clone()
            .readable(|| (format!("v{version}"), format!("inode {ino}")))?;
        match &node {
            Node::File { chunks, .. } => {
                let chunks = chunks.clone();
                let siblings = match (&entry.parent_tree, chunks.len()) {
                    (Some(t), 1) => Some(self.version_tree(entry.version, ino, t)?),
                    _ => None,
                };
                Ok(StoredFile::new(
                    chunks,
                    siblings.as_deref(),
                    Origin::Version(ino),
                    self.read_ahead.bytes,
                ))
            }
            _ => Err(Error::fs(FsError::IsDir, format!("inode {ino}"))),
        }
    }
}

/// Loads `root` and the trees under it into memory in the background, a
/// level at a time with one batched read per slice of a level, up to
/// `PREFETCH_TREES` trees and half the bytes of trees the repository may
/// keep in memory (more would only push out what was loaded first, and leave the
/// allocator holding what they took). Best effort: readers report real
/// errors; skipped when busy.
pub(super) fn prefetch_trees(repo: Arc<Repo>, root: BlobRef) {
    let store = repo.store().clone();
    let _ = store.runtime().try_spawn_work(move || {
        let room = repo.tree_room() / 2;
        let (mut trees, mut bytes) = (0, 0);
        let mut level = vec![root];
        while !level.is_empty() {
            let mut next = Vec::new();
            for slice in level.chunks(PREFETCH_SLICE) {
                if trees >= PREFETCH_TREES || bytes >= room || repo.load_trees(slice).is_err() {
                    return;
                }
                for r in slice {
                    let Ok(tree) = repo.tree(r) else { return };
                    trees += 1;
                    bytes += tree.bytes();
                    next.extend(tree.entries.iter().filter_map(|e| match &e.node {
                        Node::Dir { tree, .. } => Some(*tree),
                        _ => None,
                    }));
                }
            }
            level = next;
        }
    });
}

/// Trees read with one batched read while prefetching.
const PREFETCH_SLICE: usize = 64;
