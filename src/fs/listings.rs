//! Directory listings handed to the kernel: taken once per open directory
//! (or per request where the kernel lists directories it did not open:
//! `unopened.rs`), and kept for version directories (they never change) and
//! `versions/` (until a version or tag comes), least recently used dropped
//! first, bounded by their bytes and the memory budget (`Versions` keeps
//! them). The router's own methods (`MountFs`): a listing may be of any
//! folder, judged by the gate for its caller.

use super::{DirEntry, FIRST_VERSION_INO, Handle, Listing, MountFs, Opened, VERSIONS, is_staging};
use crate::error::{Error, FsError, Result};
use crate::snapshot::Kind;
use std::sync::Arc;

impl MountFs {
    /// A directory's listing with attributes, `.` and `..` first. Listings of
    /// version directories never change and are kept; so is `versions/`'s
    /// until it changes (`versions_changed`).
    pub(super) fn dir_listing(&self, ino: u64) -> Result<Listing> {
        let kept = self.dir_is_immutable(ino) || ino == VERSIONS;
        if kept && let Some(l) = self.versions.listings.lock().get(&ino) {
            return Ok(l.clone());
        }
        let me = self.getattr(ino)?;
        let dot = |name: &[u8]| DirEntry {
            ino,
            kind: Kind::Dir,
            name: name.to_vec(),
        };
        let mut listing = vec![(dot(b"."), me.clone()), (dot(b".."), me)];
        listing.extend(self.readdir_plus(ino)?);
        let listing = Arc::new(listing);
        if kept {
            let weight = listing
                .iter()
                .map(|(e, _)| std::mem::size_of::<(DirEntry, super::Attr)>() + e.name.len())
                .sum();
            self.versions
                .listings
                .lock()
                .put(ino, listing.clone(), weight);
        }
        Ok(listing)
    }

    /// Opens a directory: lists it once (readdir calls page through it).
    /// The kernel may keep the listing of a version's directory, unless a
    /// policy shows it differently to some user who may reach it.
    pub fn open_dir(&self, c: &super::Caller, ino: u64) -> Result<Opened> {
        let mut listing = self.dir_listing(ino)?;
        let mut keep_cache = self.dir_is_immutable(ino);
        if let Some(j) = self.judge(c)? {
            let shared;
            (listing, shared) = j.filter(ino, listing)?;
            keep_cache &= shared;
        }
        Ok(Opened {
            fh: self.add_handle(Handle::Dir(listing)),
            keep_cache,
            direct_io: false,
            flush: false,
            backing: None,
        })
    }

    /// The listing of an open directory.
    pub fn listing(&self, fh: u64) -> Result<Listing> {
        match self.handles.lock().get(&fh) {
            Some(Handle::Dir(l)) => Ok(l.clone()),
            _ => Err(Error::fs(FsError::NotDir, "not an open directory")),
        }
    }

    /// Whether `ino`'s whole listing is kept.
    pub(super) fn listing_kept(&self, ino: u64) -> bool {
        self.versions.listings.lock().contains(&ino)
    }

    /// Drops what is kept of `versions/`' listing, here and in the kernel:
    /// a version or tag came, or what its entries show changed.
    pub(super) fn versions_changed(&self) {
        self.versions.listings.lock().remove(&VERSIONS);
        if let Some(kernel) = self.kernel.get() {
            kernel.forget_listing(VERSIONS);
        }
    }

    /// Where a listing of `dir` resumes after its `index`th entry `e`: the
    /// offset the kernel hands back with its next request. Increases along
    /// a listing.
    pub fn resume_after(&self, dir: u64, index: usize, e: &DirEntry) -> u64 {
        match dir {
            VERSIONS => super::versions::tags::versions_offset(e),
            _ => index as u64 + 1,
        }
    }

    /// Whether a directory's listing never changes (a directory of a
    /// version), so it is kept.
    fn dir_is_immutable(&self, ino: u64) -> bool {
        !is_staging(ino) && ino >= FIRST_VERSION_INO
    }
}
