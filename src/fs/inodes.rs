//! Version inodes: allocated when the kernel first sees an entry, counted
//! as the kernel counts its references, dropped when it forgets them, so
//! memory follows what the kernel caches.

use super::{FIRST_VERSION_INO, MountFs, is_staging, lock};
use crate::error::{Error, FsError, Result};
use crate::snapshot::Node;
use crate::store::pack::BlobRef;
use std::collections::HashMap;
use std::sync::Arc;

/// What a version inode stands for.
#[derive(Clone)]
pub(super) struct VEntry {
    pub(super) version: u64,
    pub(super) node: Node,
    /// `versions/`-relative path, for messages.
    pub(super) path: Arc<str>,
    /// The directory holding it (its small files are read together).
    pub(super) parent_tree: Option<BlobRef>,
}

/// A version inode: what it is, the kernel's lookup count, and its key in
/// `VersionInodes::by_name` (to drop it when the count reaches zero).
pub(super) struct Held {
    pub(super) entry: VEntry,
    pub(super) lookups: u64,
    pub(super) key: (u64, Vec<u8>),
}

/// Version inodes the kernel holds: allocated on lookup, dropped when the
/// kernel forgets them, so memory follows what the kernel caches.
#[derive(Default)]
pub(super) struct VersionInodes {
    pub(super) entries: HashMap<u64, Held>,
    pub(super) by_name: HashMap<(u64, Vec<u8>), u64>,
    pub(super) next: u64,
}

impl MountFs {
    /// The inode for `name` under a version directory, allocated on first sight.
    /// The inode of a version entry, allocated if new. `looked_up`: it is
    /// for a lookup reply, counted here under the same lock as a `forget`,
    /// so the two never race.
    pub(super) fn version_child(
        &self,
        parent: u64,
        name: &[u8],
        entry: VEntry,
        looked_up: bool,
    ) -> u64 {
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

    pub(super) fn version_entry(&self, ino: u64) -> Result<VEntry> {
        lock(&self.inodes)
            .entries
            .get(&ino)
            .map(|h| h.entry.clone())
            .ok_or_else(|| Error::fs(FsError::NotFound, format!("inode {ino}")))
    }
}
