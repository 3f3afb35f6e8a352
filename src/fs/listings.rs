//! Directory listings handed to the kernel: taken once per open directory,
//! and kept for version directories (they never change), least recently
//! used dropped first, bounded by their total number of entries.

use super::{DirEntry, FIRST_VERSION_INO, FileKind, Handle, Listing, MountFs, is_staging, lock};
use crate::error::{Error, FsError, Result};
use std::sync::Arc;

/// Entries of version directory listings kept in memory (about 100 bytes each).
pub(super) const LISTING_ENTRIES: usize = 50_000;

/// Listings of version directories, least recently used dropped first,
/// bounded by their total number of entries.
pub(super) type Listings = crate::cache::weighed::WeighedLru<u64, Listing>;

impl MountFs {
    /// A directory's listing with attributes, `.` and `..` first. Listings of
    /// version directories never change and are kept.
    pub(super) fn dir_listing(&self, ino: u64) -> Result<Listing> {
        let immutable = self.dir_is_immutable(ino);
        if immutable && let Some(l) = lock(&self.listings).get(&ino) {
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
            let weight = listing.len();
            lock(&self.listings).put(ino, listing.clone(), weight);
        }
        Ok(listing)
    }

    /// Opens a directory: lists it once (readdir calls page through it).
    pub fn open_dir(&self, c: &super::Caller, ino: u64) -> Result<u64> {
        let mut listing = self.dir_listing(ino)?;
        if let Some(j) = self.judge(c) {
            listing = j.filter(ino, listing);
        }
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
    /// so the kernel may cache it. Not under a policy: the kernel's cache
    /// is the same for every user, listings are not.
    pub fn dir_is_immutable(&self, ino: u64) -> bool {
        !is_staging(ino) && ino >= FIRST_VERSION_INO && !self.gated()
    }
}
