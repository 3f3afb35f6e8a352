//! Files and directories the kernel opens without asking. On a read-only
//! mount without an access policy an open decides nothing, so the adapter
//! answers the kernel's first OPEN and OPENDIR with "not implemented" and
//! the kernel then opens every file and directory itself, keeping file
//! pages and listings, and sends no RELEASE: a warm read of a small file
//! costs no round trip to the daemon, where an OPEN and a RELEASE each cost
//! a wake-up on both sides (docs/benchmarks.md), and `find` costs one
//! round trip per directory fewer.
//!
//! Listings then come without a handle: each request lists the directory
//! anew (kept ones: `listings.rs`), resuming at offsets entries added
//! later do not move (`versions::tags::versions_offset`). The kernel keeps a
//! listing until the directory's mtime moves or the daemon drops it
//! (`versions_changed`, when a version or tag comes).
//!
//! Reads then come without a handle: a version file's is made at its first
//! read and kept while it is among the last `UNOPENED` read; a control file
//! serves its content of the moment (its mtime moves with it, and the kernel
//! drops the pages it kept when an mtime moves: `FUSE_AUTO_INVAL_DATA`).
//!
//! The kernel's choice lasts as long as the mount. A policy set later
//! could not be applied at open (nor the reads it lets through written to
//! the audit trail), so such a mount then refuses everything of the dataset
//! until it is mounted again (`MountFs::refresh_policy`).
//!
//! These are the router's own methods (`MountFs`), apart by topic: a read
//! or listing without a handle may be of a control file, a version file
//! or any folder, so it is routed across the namespaces, as an open is.

use super::control::{self, Control};
use super::versions::stored::StoredFile;
use super::{DirEntry, FIRST_VERSION_INO, Listing, MountFs, VERSIONS};
use crate::error::{Error, FsError, Result};
use crate::snapshot::Kind;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Entries of a version folder listed per request where it has more.
const PART: usize = 256;

/// Version files read without an open whose handles are kept: the read-ahead
/// of a file read in many requests lives in its handle.
pub(super) const UNOPENED: usize = 64;

impl MountFs {
    /// Whether opening a version file decides nothing: no policy applies
    /// at open, and the mount does not read through a gateway (where an
    /// open leases its version: `lease_open_versions`). Where it decides
    /// nothing, `versions/` gets a connection of its own (the adapter).
    pub fn version_opens_decide_nothing(&self) -> bool {
        self.gate.while_none(|none| self.opens_decide_nothing(none))
    }

    /// With no policy in force (`no_policy`).
    fn opens_decide_nothing(&self, no_policy: bool) -> bool {
        no_policy && self.repo.upstream().is_none()
    }

    /// Lets the kernel open files itself if no open here decides anything
    /// (a read-only mount, `version_opens_decide_nothing`); returns whether
    /// it may. Asked once, when the kernel connects: from then on a policy
    /// is not let in (see above).
    pub fn skip_opens(&self) -> bool {
        self.gate.while_none(|none| {
            let skip = self.read_only() && self.opens_decide_nothing(none);
            self.opens_skipped.store(skip, Ordering::Relaxed);
            skip
        })
    }

    /// The same choice for `versions/` on a connection of its own (a
    /// read-write mount's). A policy that comes later detaches that
    /// connection (`refresh_policy`).
    pub fn skip_version_opens(&self) -> bool {
        self.gate.while_none(|none| {
            let skip = self.opens_decide_nothing(none);
            self.versions.apart.store(skip, Ordering::Relaxed);
            skip
        })
    }

    /// `versions/`'s own connection ended: the main one serves it now.
    pub fn versions_served_here(&self) {
        self.versions.apart.store(false, Ordering::Relaxed);
    }

    /// Whether `versions/` is served on a connection of its own (health).
    pub fn versions_apart(&self) -> bool {
        self.versions.apart.load(Ordering::Relaxed)
    }

    /// A mount without staging: nothing of it is written.
    pub fn read_only(&self) -> bool {
        !self.staging.present()
    }

    /// Whether the kernel opens files without asking (`skip_opens`).
    pub fn opens_skipped(&self) -> bool {
        self.opens_skipped.load(Ordering::Relaxed)
    }

    /// Appends bytes of a file the kernel opened without asking to `out`.
    pub fn read_unopened(&self, ino: u64, offset: u64, size: u32, out: &mut Vec<u8>) -> Result<()> {
        if Control::is_control(ino) {
            if !self.opens_skipped() {
                return Err(Error::fs(FsError::Invalid, "bad file handle"));
            }
            let text = self.with_seen(|s| self.control.text_now(s, ino))?;
            let start = crate::limits::to_usize(offset).min(text.len());
            let end = (start + size as usize).min(text.len());
            out.extend_from_slice(&text[start..end]);
            return Ok(());
        }
        if self.gated() {
            return Err(control::shut_out());
        }
        let file = self.unopened_file(ino)?;
        self.versions
            .read_stored(&file, offset, u64::from(size), out)
    }

    /// The listing of a directory the kernel reads without opening it, for
    /// a request from position `offset` on, and the position of its first
    /// entry: the whole listing (kept, see `listings.rs`), or for a version
    /// folder of more than `PART` entries the `PART` from `offset` on, so
    /// that listing a huge folder costs a part per request, not its whole
    /// listing (nothing tells when the kernel is done with it).
    pub fn listing_unopened(&self, ino: u64, offset: u64) -> Result<(Listing, u64)> {
        if Control::is_control(ino) && !self.opens_skipped() {
            return Err(Error::fs(FsError::Invalid, "bad file handle"));
        }
        if self.gated() && (ino == VERSIONS || ino >= FIRST_VERSION_INO) {
            return Err(control::shut_out());
        }
        if ino >= FIRST_VERSION_INO
            && !self.listing_kept(ino)
            && self.versions.version_dir_entries(ino)?.entries.len() > PART
        {
            // Positions 0 and 1 are `.` and `..`, then the folder's entries.
            let from = crate::limits::to_usize(offset.saturating_sub(2));
            let mut part = Vec::with_capacity(PART + 2);
            if offset < 2 {
                let me = self.getattr(ino)?;
                for dots in [&b"."[..], b".."]
                    .into_iter()
                    .skip(crate::limits::to_usize(offset))
                {
                    let e = DirEntry {
                        ino,
                        kind: Kind::Dir,
                        name: dots.to_vec(),
                    };
                    part.push((e, me.clone()));
                }
            }
            // Any offset may come: `seekdir` to one never handed out.
            for e in self
                .versions
                .list_version_dir_part(ino, from..from.saturating_add(PART))?
            {
                let a = self.getattr(e.ino)?;
                part.push((e, a));
            }
            return Ok((Arc::new(part), offset));
        }
        Ok((self.dir_listing(ino)?, 0))
    }

    /// What an inode read without an open is, for error messages.
    pub fn describe_unopened(&self, ino: u64) -> String {
        match Control::is_control(ino) {
            true => format!(".detafs/ file (inode {ino})"),
            false => format!("versions/{}", self.versions.version_path(ino)),
        }
    }

    fn unopened_file(&self, ino: u64) -> Result<Arc<StoredFile>> {
        if let Some(f) = self.versions.unopened.lock().get(&ino) {
            return Ok(f.clone());
        }
        // Made outside the lock: finding the file may read trees.
        let file = Arc::new(self.versions.version_file(ino)?);
        self.versions.unopened.lock().put(ino, file.clone());
        Ok(file)
    }
}
