//! The mounted file system, without the kernel. `crate::fuse` only
//! translates kernel requests into these calls and errors into errno values.
//!
//! This file holds the types the adapter sees, the root, and the entry
//! points, which send each request to its namespace: `versions.rs`
//! (read-only versions, with `inodes.rs` for their inode numbers and
//! `stored.rs` for reading files from the store), `overlay.rs` (the
//! writable `staging/`), `control.rs` (`.detafs/`); `listings.rs` keeps
//! directory listings; `gate.rs` applies the store's access policy.

mod control;
mod gate;
mod health;
mod ino;
mod listings;
mod orders;
mod overlay;
mod passthrough;
pub mod requests;
mod unopened;
mod versions;

pub use gate::{Caller, Judge, KernelCache};
use orders::Due;
use versions::inodes::VersionInodes;
use versions::prefetch_trees;
use versions::stored::{Origin, StoredFile};

use crate::cache::budget::Part;
use crate::commit::CommitMeta;
use crate::error::{Error, FsError, Result};
use crate::read::chunks::ChunkCache;
use crate::repo::Repo;
use crate::repo::tag::version_name;
use crate::snapshot::{Mtime, Node, Record};
use crate::staging::{self, Kind, Staging};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ino::{CONTROL, FIRST_VERSION_INO, Ino, LATEST, is_staging};
pub use ino::{ROOT, VERSIONS};

/// Versions never change: let the kernel keep what it learns.
const IMMUTABLE_TTL: Duration = Duration::from_secs(24 * 3600);
const MUTABLE_TTL: Duration = Duration::from_secs(1);

/// Trees of a version loaded in the background when it is first opened, so
/// that walking it (`find`, `ls -R`) finds them in memory.
const PREFETCH_TREES: usize = 1024;

/// How a version file is read sequentially: runs of chunks of about
/// `bytes` per store request, `runs` of them fetched ahead of the reader (in
/// parallel with its reads).
#[derive(Clone, Copy)]
struct ReadAhead {
    bytes: u64,
    runs: usize,
}

impl ReadAhead {
    /// From a local folder two runs of 4 MiB keep the disk busy; a remote
    /// store answers each request after a round trip, so larger ones, and
    /// more of them, are kept in flight.
    fn for_store(remote: bool) -> ReadAhead {
        match remote {
            false => ReadAhead {
                bytes: 4 << 20,
                runs: 2,
            },
            true => ReadAhead {
                bytes: 8 << 20,
                runs: 4,
            },
        }
    }

    /// Verified chunks kept in memory for readers of the mount: what a
    /// reader has in hand and what is fetched ahead of it (the kernel's
    /// page cache holds what is read again).
    fn cache_bytes(self) -> usize {
        (self.runs + 2) * crate::limits::to_usize(self.bytes)
    }
}

#[derive(Clone, Debug)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: Mtime,
    pub atime: Mtime,
    pub ctime: Mtime,
    /// A device's number (0 for everything else).
    pub rdev: u64,
    pub ttl: Duration,
}

impl Attr {
    /// An entry the mount makes up (the root, `.detafs/` and its files,
    /// `versions/`'s links), owned by `owner` (uid, gid): one time for
    /// all three, no device.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::fs) fn made_up(
        ino: u64,
        kind: Kind,
        size: u64,
        perm: u16,
        nlink: u32,
        owner: (u32, u32),
        mtime: Mtime,
        ttl: Duration,
    ) -> Attr {
        Attr {
            ino,
            kind,
            size,
            perm,
            nlink,
            uid: owner.0,
            gid: owner.1,
            mtime,
            atime: mtime,
            ctime: mtime,
            rdev: 0,
            ttl,
        }
    }
}

#[derive(Clone)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: Kind,
    pub name: Vec<u8>,
}

/// How a file was opened.
pub struct Opened {
    pub fh: u64,
    /// Contents never change: keep the page cache across opens.
    pub keep_cache: bool,
    /// Generated on open (control files): bypass the page cache.
    pub direct_io: bool,
    /// Acts on what was written at close (`flush`): the kernel must send
    /// FLUSH for it.
    pub flush: bool,
    /// A staged copy the kernel reads and writes itself (passthrough).
    pub backing: Option<Arc<File>>,
}

/// A directory listing with attributes, `.` and `..` first.
pub type Listing = Arc<Vec<(DirEntry, Attr)>>;

enum Handle {
    /// An open directory: its listing, taken once at open (readdir calls
    /// then page through it).
    Dir(Listing),
    Stored(Arc<StoredFile>),
    Text(Arc<Vec<u8>>),
    /// `.detafs/commit` open for writing: what the last write committed
    /// (its log entry), readable on the same handle; None until written.
    Commit(Arc<Mutex<Option<Vec<u8>>>>),
    /// `.detafs/restore`, `checkout`, `cancel` or `refresh` open for
    /// writing (its inode), the request written through it, and under a
    /// policy who opened it (`orders.rs`).
    Order(u64, Arc<orders::Order>, Option<Caller>),
}

pub struct MountOptions {
    pub uid: u32,
    pub gid: u32,
    /// Where the daemon logs (named by `.detafs/health`); None in the
    /// foreground, which logs to its terminal.
    pub log: Option<std::path::PathBuf>,
}

/// The mounted file system: a router over its namespaces, each owning its
/// state (`versions::Versions`, `overlay::StagingArea`, `control::Control`),
/// and what they share: open handles, the policy, the kernel's notifier.
pub struct MountFs {
    repo: Arc<Repo>,
    dataset: String,
    versions: versions::Versions,
    staging: overlay::StagingArea,
    control: control::Control,
    requests: requests::Requests,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    /// Whether the kernel opens files without asking on the mount's main
    /// connection (`unopened.rs`).
    opens_skipped: AtomicBool,
    /// When the mount started: the time of its root and control folder.
    started: Mtime,
    opts: MountOptions,
    /// The store's access policy, if one is set, and who asks (`gate.rs`).
    gate: gate::Gate,
    /// Tells the kernel to drop a name it keeps (set by the adapter).
    kernel: std::sync::OnceLock<Arc<dyn gate::KernelCache>>,
    /// Through a gateway: the lease naming the versions open files read
    /// (its name, and the versions last leased), `lease_open_versions`.
    open_lease: Mutex<(String, std::collections::BTreeSet<u64>)>,
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

impl MountFs {
    pub fn new(
        repo: Repo,
        dataset: &str,
        staging: Option<Staging>,
        opts: MountOptions,
    ) -> Result<MountFs> {
        // A damaged record costs its version and those after it, not the
        // mount: the versions before it are served (`repo::history`).
        let versions = repo.sync(dataset)?;
        if let Some(d) = repo.damage(dataset) {
            tracing::warn!("{}", d.error(dataset));
        }
        let repo = Arc::new(repo);
        if let (Some(_), Some(latest)) = (&staging, versions.last()) {
            // Staging stands on the latest version's trees: have them at hand
            // (and in the disk cache) before the store is ever unreachable.
            prefetch_trees(repo.clone(), latest.tree);
        }
        let read_ahead = ReadAhead::for_store(repo.is_remote());
        let chunks = ChunkCache::new(repo.clone(), read_ahead.cache_bytes());
        let staging = overlay::StagingArea::new(repo.clone(), staging)?;
        let fs = MountFs {
            repo: repo.clone(),
            dataset: dataset.to_string(),
            versions: versions::Versions {
                repo: repo.clone(),
                dataset: dataset.to_string(),
                owner: (opts.uid, opts.gid),
                listings: Mutex::new(versions::Listings::new(
                    versions::LISTING_BYTES,
                    repo.budget().clone(),
                    Part::Listings,
                )),
                records: RwLock::new(versions),
                tags: RwLock::default(),
                inodes: Mutex::new(VersionInodes::default()),
                unopened: Mutex::new(lru::LruCache::new(
                    unopened::UNOPENED.try_into().expect("not zero"),
                )),
                chunks,
                read_ahead,
                apart: AtomicBool::new(false),
                refused: AtomicBool::new(false),
            },
            staging,
            control: control::Control::new(repo.store().clone())?,
            requests: requests::Requests::default(),
            handles: Mutex::new(HashMap::new()),
            open_lease: Mutex::new((hex::encode(rand::random::<[u8; 16]>()), Default::default())),
            next_fh: AtomicU64::new(1),
            opens_skipped: AtomicBool::new(false),
            started: Mtime::now(),
            gate: gate::Gate::new(dataset, opts.gid),
            opts,
            kernel: std::sync::OnceLock::new(),
        };
        fs.versions.refresh_tags()?;
        fs.refresh_policy()?;
        // Staging shows the latest base before the mount's first answer,
        // not one poll later (a commit made elsewhere while it was down).
        if let Err(e) = fs.staging.follow(&fs.versions.records()) {
            // Not fatal: the polls try again.
            tracing::warn!("staging stays on its version until the next poll: {e}");
        }
        Ok(fs)
    }

    /// Writes access decisions to `trail` (a mount daemon's audit trail).
    pub fn with_trail(mut self, trail: crate::access::trail::Trail) -> MountFs {
        self.gate.write_to(trail);
        self
    }

    /// Access decisions not yet written to the audit trail.
    pub fn trail_unwritten(&self) -> usize {
        self.gate.unwritten()
    }

    /// Writes out the audit trail's last lines (the daemon is ending).
    pub fn flush_trail(&self) {
        self.gate.flush();
    }

    pub fn repo(&self) -> &Repo {
        &self.repo
    }

    /// What a change the mount does not carry out (hard links, special
    /// files, extended attributes) gets at inode `ino`: EROFS outside
    /// staging, where nothing may change, `in_staging` inside it.
    pub fn refuse(&self, ino: u64, in_staging: FsError, op: &str) -> Error {
        if is_staging(ino) && self.staging.present() {
            Error::fs(in_staging, format!("{op} in staging/"))
        } else {
            read_only()
        }
    }

    /// Reads records committed elsewhere; moves a clean staging area along.
    pub fn poll(&self) -> Result<()> {
        // A store deleted or moved away is told by health (and refused by
        // every write), never made again by one.
        self.repo.store().ensure_present()?;
        let changed = match self
            .repo
            .changed_records(&self.dataset, &self.versions.records)
        {
            // Refused (a revoked key, through a gateway): nothing read
            // before is served any more, from memory or the kernel's.
            Err(e @ Error::Forbidden(_)) => {
                if !self.versions.refused.swap(true, Ordering::Relaxed) {
                    self.versions.chunks.clear();
                    if let Some(kernel) = self.kernel.get() {
                        for ino in self.versions.inodes.lock().held_files() {
                            kernel.forget_listing(ino);
                        }
                    }
                    self.forget_names(None);
                }
                return Err(e);
            }
            other => other?,
        };
        self.versions.refused.store(false, Ordering::Relaxed);
        let new_records = changed.is_some();
        // A version shown anew is another folder: what the kernel holds of
        // it goes (below).
        let reshown = changed.as_ref().is_some_and(|c| c.reshown);
        // Versions gone (expired, or hidden through a gateway): the kernel
        // must forget their names, and their tags'.
        let mut gone = Vec::new();
        if let Some(c) = changed {
            let now: std::collections::HashSet<u64> = c.records.iter().map(|r| r.version).collect();
            let mut records = self.versions.records.write();
            gone.extend(
                records
                    .iter()
                    .map(|r| r.version)
                    .filter(|v| !now.contains(v)),
            );
            *records = c.records;
        }
        if !gone.is_empty() {
            self.forget_names(Some(&gone));
        }
        let tagged = self.versions.refresh_tags()?;
        if new_records || !tagged.is_empty() {
            self.versions_changed();
        }
        let changed = self.refresh_policy()? | self.gate.refresh_reach() | reshown;
        // What the kernel keeps of versions/ may now answer wrongly for
        // some user: a new policy, or a new tag a pattern can name.
        if changed {
            self.forget_names(None);
        } else if !tagged.is_empty() && self.gated() {
            self.forget_names(Some(&tagged));
        }
        self.lease_open_versions();
        self.staging.follow(&self.versions.records())?;
        self.staging.prune_trash()
    }

    /// Through a gateway, the versions open files read are leased (that
    /// gateway then serves them to this caller if they expire): an open
    /// file of a version expired meanwhile reads on until it is closed,
    /// as beside the store, where gc's grace keeps its data. Changed at
    /// each poll, off the kernel's request thread.
    fn lease_open_versions(&self) {
        if self.repo.upstream().is_none() {
            return;
        }
        let inos: Vec<u64> = self
            .handles
            .lock()
            .values()
            .filter_map(|h| match h {
                Handle::Stored(f) => match f.origin {
                    Origin::Version(ino) => Some(ino),
                    Origin::Said(_) => None,
                },
                _ => None,
            })
            .collect();
        let open: std::collections::BTreeSet<u64> = inos
            .into_iter()
            .filter_map(|ino| self.versions.version_entry_version(ino).ok())
            .collect();
        self.lease_versions(open);
    }

    /// The mount ended: no file is open any more, and no version leased
    /// for one.
    pub fn ended(&self) {
        if self.repo.upstream().is_some() {
            self.lease_versions(Default::default());
        }
    }

    fn lease_versions(&self, open: std::collections::BTreeSet<u64>) {
        let mut leased = self.open_lease.lock();
        if leased.1 == open {
            return;
        }
        let versions: Vec<u64> = open.iter().copied().collect();
        match self.repo.lease_base(&self.dataset, &leased.0, &versions) {
            Ok(()) => leased.1 = open,
            Err(e) => {
                tracing::warn!("the versions of open files ({versions:?}) were not leased: {e}")
            }
        }
    }

    /// When the newest version was committed (the mount's start if none):
    /// the time of `versions/`, `latest` and the log.
    fn latest_time(&self) -> Mtime {
        // Under a policy, a hidden version's time must not show either.
        if self.gated() {
            return self.started;
        }
        let versions = self.versions.records.read();
        versions.last().map_or(self.started, Record::mtime)
    }

    fn dir_attr(&self, ino: u64, mtime: Mtime, ttl: Duration) -> Attr {
        let owner = (self.opts.uid, self.opts.gid);
        Attr::made_up(ino, Kind::Dir, 0, 0o755, 2, owner, mtime, ttl)
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        if name.len() > crate::limits::MAX_NAME {
            return Err(Error::fs(FsError::NameTooLong, name_str(name)));
        }
        match Ino::of(parent) {
            Ino::Staged(id) => self.staging.lookup(id, name),
            Ino::Root => match name {
                b"versions" => self.getattr(VERSIONS),
                b"staging" if self.staging.present() => self.getattr(Ino::staged(staging::ROOT)),
                b".detafs" => self.getattr(CONTROL),
                _ => Err(not_found(name)),
            },
            Ino::Versions => self.versions.lookup_version(name, self.latest_time()),
            Ino::Control => self.with_seen(|s| self.control.lookup(s, name)),
            Ino::Version(_) => self.versions.lookup_in_version(parent, name),
            Ino::Latest | Ino::Tag(_) | Ino::ControlFile(_) | Ino::Unknown => {
                Err(Error::fs(FsError::NotDir, name_str(name)))
            }
        }
    }

    /// `lookup` as `c` may see it: under a policy, what `c` may not see is
    /// a name that does not exist.
    pub fn lookup_for(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<Attr> {
        let judge = self.judge(c)?;
        let attr = self.lookup(parent, name)?;
        if let Some(j) = judge {
            // The lookup counted it; the kernel will never hear of it (nor
            // of this attempt, if judging it must wait: it comes again).
            let seen = j.sees_entry(parent, name, attr.kind);
            if !matches!(seen, Ok(true)) {
                self.versions.forget(attr.ino, 1);
                seen?;
                return Err(not_found(name));
            }
        }
        Ok(attr)
    }

    /// Like `getattr`, but a staged file unlinked while open still answers
    /// through an open handle (POSIX: the file lives until closed; `fstat`
    /// comes with no handle).
    pub fn getattr_open(&self, ino: u64, fh: Option<u64>) -> Result<Attr> {
        match Ino::of(ino) {
            Ino::Staged(id) => self.staging.getattr_open(id, fh),
            _ => self.getattr(ino),
        }
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        match Ino::of(ino) {
            Ino::Staged(id) => self.staging.getattr(id),
            Ino::Root | Ino::Control => Ok(self.dir_attr(ino, self.started, MUTABLE_TTL)),
            Ino::Versions => {
                let mut a = self.dir_attr(ino, self.latest_time(), MUTABLE_TTL);
                if let Some((uid, gid, perm)) = self.gate.versions_owner() {
                    (a.uid, a.gid, a.perm) = (uid, gid, perm);
                }
                Ok(a)
            }
            Ino::Latest => self.versions.latest_attr(self.latest_time()),
            Ino::ControlFile(i) => self.with_seen(|s| self.control.attr(s, i)),
            Ino::Tag(_) => self.versions.tag_attr(ino),
            Ino::Version(_) => self.versions.version_attr(ino),
            Ino::Unknown => Err(Error::fs(FsError::NotFound, format!("inode {ino}"))),
        }
    }

    pub fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let mut out = vec![];
        match Ino::of(ino) {
            Ino::Staged(id) => {
                return Ok(self
                    .staging
                    .readdir_plus(id)?
                    .into_iter()
                    .map(|(e, _)| e)
                    .collect());
            }
            Ino::Root => {
                out.push(DirEntry {
                    ino: VERSIONS,
                    kind: Kind::Dir,
                    name: b"versions".to_vec(),
                });
                if self.staging.present() {
                    out.push(DirEntry {
                        ino: Ino::staged(staging::ROOT),
                        kind: Kind::Dir,
                        name: b"staging".to_vec(),
                    });
                }
                out.push(DirEntry {
                    ino: CONTROL,
                    kind: Kind::Dir,
                    name: b".detafs".to_vec(),
                });
            }
            Ino::Versions => out = self.versions.list_versions()?,
            Ino::Control => out.extend(control::Control::entries()),
            Ino::Version(_) => out = self.versions.list_version_dir(ino)?,
            Ino::Latest | Ino::Tag(_) | Ino::ControlFile(_) | Ino::Unknown => {
                return Err(Error::fs(FsError::NotDir, format!("inode {ino}")));
            }
        }
        Ok(out)
    }

    /// A directory's entries with their attributes (READDIRPLUS), so `ls -l`
    /// needs no lookup per file.
    pub fn readdir_plus(&self, ino: u64) -> Result<Vec<(DirEntry, Attr)>> {
        if let Ino::Staged(id) = Ino::of(ino) {
            return self.staging.readdir_plus(id);
        }
        self.readdir(ino)?
            .into_iter()
            .map(|e| {
                let a = self.getattr(e.ino)?;
                Ok((e, a))
            })
            .collect()
    }

    pub fn readlink(&self, c: &Caller, ino: u64) -> Result<Vec<u8>> {
        let not_a_link = || Error::fs(FsError::Invalid, "not a symlink");
        match Ino::of(ino) {
            Ino::Latest => {
                let latest = match self.judge(c)? {
                    Some(j) => j.latest(),
                    None => self.versions.latest(),
                };
                Ok(format!("v{}", latest.ok_or_else(|| not_found(b"latest"))?).into_bytes())
            }
            Ino::Tag(_) => self.versions.tag_target(ino),
            Ino::Staged(id) => self.staging.readlink(id),
            Ino::Version(_) => match self.versions.version_entry(ino)?.node {
                Node::Symlink { target, .. } => Ok(target),
                _ => Err(not_a_link()),
            },
            Ino::Root | Ino::Versions | Ino::Control | Ino::ControlFile(_) | Ino::Unknown => {
                Err(not_a_link())
            }
        }
    }

    fn add_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(fh, h);
        fh
    }

    pub fn open(&self, ino: u64, flags: i32, c: &Caller) -> Result<Opened> {
        let access = flags & libc::O_ACCMODE;
        let writing = access != libc::O_RDONLY;
        let judge = self.judge(c)?;
        match Ino::of(ino) {
            Ino::ControlFile(_) => {
                let handle =
                    self.with_seen(|s| self.control.open(s, ino, writing, c, judge.as_ref()))?;
                // A request's writer's closes are checked (`orders.rs`).
                let flush = matches!(handle, Handle::Order(..));
                return Ok(Opened {
                    fh: self.add_handle(handle),
                    keep_cache: false,
                    direct_io: true,
                    flush,
                    backing: None,
                });
            }
            Ino::Staged(id) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                let bytes = self.versions.read_ahead.bytes;
                return match self.staging.open(id, flags, writing, fh, bytes)? {
                    overlay::StagedOpen::Copy(opened) => Ok(opened),
                    overlay::StagedOpen::Stored(file) => {
                        self.handles
                            .lock()
                            .insert(fh, Handle::Stored(Arc::new(file)));
                        Ok(Opened {
                            fh,
                            keep_cache: false,
                            direct_io: false,
                            flush: false,
                            backing: None,
                        })
                    }
                };
            }
            _ => {}
        }
        if writing {
            return Err(read_only());
        }
        if let Some(j) = judge
            && !j.may_read(ino)?
        {
            return Err(Error::fs(
                FsError::Denied,
                "the policy does not let you read this file",
            ));
        }
        let file = self.versions.version_file(ino)?;
        Ok(Opened {
            fh: self.add_handle(Handle::Stored(Arc::new(file))),
            keep_cache: true,
            direct_io: false,
            flush: false,
            backing: None,
        })
    }

    /// The kernel was handed `ino` in a READDIRPLUS entry.
    pub fn remember(&self, ino: u64) {
        self.versions.remember(ino)
    }

    /// The kernel dropped `n` of its references to `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        self.versions.forget(ino, n)
    }

    /// Whether an inode is still allocated (a kept listing may name a
    /// version inode the kernel has since forgotten: the caller looks its
    /// name up again).
    pub fn is_live(&self, ino: u64) -> bool {
        self.versions.is_live(ino)
    }

    /// The last close of a handle (the kernel's request thread: nothing
    /// here waits). A commit handle never written to (`printf '' >
    /// .detafs/commit`) committed nothing: `last-error` says so. (No close
    /// can fail for it: a shell closes the file it opened once before it
    /// writes, through the copy it made.) A request to a control file is
    /// carried out now, in order, later requests held until it is
    /// (`orders.rs`).
    pub fn release(self: &Arc<Self>, fh: u64) {
        let handle = self.handles.lock().remove(&fh);
        self.staging.release(fh);
        match handle {
            Some(Handle::Commit(c)) if c.lock().is_none() => {
                let _: Result<()> = self.control.failed(Error::InvalidInput(
                    "empty commit message: nothing was committed (echo MESSAGE > .detafs/commit)"
                        .into(),
                ));
            }
            Some(Handle::Order(ino, order, caller)) => {
                let fs = self.clone();
                let carry_out = move || {
                    let sequence = &fs.control.sequence;
                    sequence.raise(fh);
                    let fs = fs.clone();
                    sequence.queue(move || {
                        let _ = fs.carry_out(ino, order.take(), caller.as_ref());
                        fs.control.sequence.lower();
                    });
                };
                // Tests hold it here: a loaded kernel's late RELEASE.
                crate::hold::later("order-release", carry_out);
            }
            _ => {}
        }
    }

    /// A close of one copy of handle `fh` by process `pid`: a request's
    /// writer is checked in order with the requests (`orders.rs`); `done`
    /// gets the answer.
    pub fn flush(
        self: &Arc<Self>,
        fh: u64,
        pid: u32,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        match self.handles.lock().get(&fh) {
            Some(Handle::Order(_, order, _)) => {
                let order = order.clone();
                if order.may_end_at_close_by(pid) {
                    // Maybe its last close: what comes next waits for
                    // the RELEASE, a while at most (`orders.rs`).
                    self.control.sequence.await_release(fh);
                }
                self.control.sequence.queue(move || {
                    order.closed_by(pid);
                    done(Ok(()));
                });
            }
            _ => done(Ok(())),
        }
    }

    /// Handle `fh` is used again (a write or read): if it is a request's,
    /// a close of one of its copies was not the request's end.
    pub fn handle_goes_on(&self, fh: u64) {
        self.control.sequence.goes_on(fh);
    }

    /// `job` back to run now, or None: held until the control-file
    /// requests the kernel released before it are carried out.
    pub fn after_orders(&self, job: orders::Job) -> Option<orders::Job> {
        self.control.sequence.after_pending(job)
    }

    /// Returns once what the kernel was told to drop reached it.
    fn settle_kernel(&self) {
        if let Some(k) = self.kernel.get() {
            k.settle();
        }
    }

    /// Reads the policy in force (at start and at every poll); returns
    /// whether it changed. One that cannot be trusted (a broken history, a
    /// newest policy that does not parse) shuts the gate on everything; a
    /// store that cannot be reached keeps the policy last read. One coming
    /// in detaches `versions/`'s own connection, where the kernel opens
    /// files without asking.
    fn refresh_policy(&self) -> Result<bool> {
        let coming = || {
            if self.versions.apart.swap(false, Ordering::Relaxed)
                && let Some(k) = self.kernel.get()
            {
                k.versions_judged();
            }
        };
        self.gate
            .refresh(&self.repo, &|| self.opens_skipped(), &coming)
    }

    /// The policy in force, for `.detafs/health`.
    pub(super) fn policy_in_force(&self) -> serde_json::Value {
        self.gate.policy_in_force()
    }

    /// How the kernel is told to drop what it keeps (`forget_names`).
    pub fn on_kernel_cache(&self, k: Arc<dyn gate::KernelCache>) {
        let _ = self.kernel.set(k);
    }

    /// `versions/`'s owner, group and mode under the policy in force.
    pub fn versions_owner(&self) -> Option<(u32, u32, u16)> {
        self.gate.versions_owner()
    }

    /// Whether a policy is in force (then entries are not cached by the
    /// kernel: its caches are shared by every user of the mount).
    pub fn gated(&self) -> bool {
        self.gate.gated()
    }

    /// How long the kernel may keep the name `name` in folder `parent`
    /// (`Gate::name_ttl`).
    pub fn name_ttl(&self, parent: u64, name: &[u8], a: &Attr) -> Duration {
        self.gate.name_ttl(&self.versions, parent, name, a)
    }

    /// The caller's view, if a policy is in force.
    pub fn judge(&self, c: &Caller) -> Result<Option<Judge<'_>>> {
        self.gate.judge(&self.versions, &self.repo, c)
    }

    /// Has the kernel drop what it keeps of `versions/` (of `only` these
    /// versions, or all and `staging`): each user's next lookup is asked
    /// again. Dropping a version's entry drops everything below it.
    pub(super) fn forget_names(&self, only: Option<&[u64]>) {
        self.gate.forget_judged();
        // Its owner and mode first: who may search it may have changed, and
        // `latest`'s time shows differently.
        self.versions_changed();
        let Some(kernel) = self.kernel.get() else {
            return;
        };
        let mut names: Vec<Vec<u8>> = match only {
            Some(vs) => vs
                .iter()
                .map(|v| format!("v{v}").into_bytes())
                .chain(self.versions.tag_names_of(vs))
                .collect(),
            None => {
                let versions = self.versions.records.read();
                versions
                    .iter()
                    .map(|r| format!("v{}", r.version).into_bytes())
                    .collect()
            }
        };
        if only.is_none() {
            names.push(b"latest".to_vec());
            names.extend(self.versions.list_tags().into_iter().map(|e| e.name));
            kernel.forget_name(ROOT, b"staging");
        }
        for name in names {
            kernel.forget_name(VERSIONS, &name);
        }
    }

    /// Runs `f` with what the control files read of the mount.
    fn with_seen<T>(&self, f: impl FnOnce(&control::Seen) -> T) -> T {
        let health = |judge: Option<&Judge>| health::report(self, judge);
        f(&control::Seen {
            repo: &self.repo,
            versions: &self.versions,
            staging: &self.staging,
            dataset: &self.dataset,
            owner: (self.opts.uid, self.opts.gid),
            gated: self.gated(),
            opens_skipped: self.opens_skipped(),
            latest_time: self.latest_time(),
            health: &health,
        })
    }

    /// A request at the end of its open (`orders.rs`), carried out:
    /// `.detafs/last-error` then says why it failed, or nothing.
    fn carry_out(&self, ino: u64, due: Due, caller: Option<&Caller>) -> Result<()> {
        use control::Request;
        let res = match due {
            Due::Nothing => return Ok(()),
            Due::Void(why) => Err(Error::InvalidInput(why)),
            Due::Act(text, writer) => match self.control.request(ino, &text, writer) {
                Ok(None) => Ok(()),
                Ok(Some(Request::Refresh)) => self.poll(),
                Ok(Some(Request::Undo(entry))) => self.undo(entry),
                Ok(Some(Request::Checkout { version, paths })) => {
                    self.checkout(version, &paths, caller)
                }
                Err(e) => Err(e),
            },
        };
        self.control.outcome(res)
    }

    /// A read of a request's handle: the request written since the last
    /// read is carried out now, in order with the others (`orders.rs`), and
    /// the read answers `done` or fails as it did, once the kernel was told
    /// what changed; with nothing written since, the read finds the end.
    fn read_order(
        self: &Arc<Self>,
        ino: u64,
        order: Arc<orders::Order>,
        caller: Option<Caller>,
    ) -> Result<Vec<u8>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let fs = self.clone();
        self.control.sequence.queue(move || {
            let res = match order.take() {
                Due::Nothing => Ok(false),
                due => fs.carry_out(ino, due, caller.as_ref()).map(|()| true),
            };
            let _ = tx.send(res);
        });
        let acted = rx
            .recv()
            .map_err(|_| Error::InvalidInput("the request was not carried out".into()))??;
        if !acted {
            return Ok(Vec::new());
        }
        self.settle_kernel();
        Ok(b"done\n".to_vec())
    }

    /// Whether a control-file request the kernel released is not carried
    /// out yet (later requests wait for it).
    pub fn orders_pending(&self) -> bool {
        self.control.sequence.pending()
    }

    /// Appends up to `size` bytes of handle `fh` from `offset` on to `out`.
    pub fn read(
        self: &Arc<Self>,
        fh: u64,
        offset: u64,
        size: u32,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        if let Some(c) = self.staging.copy(fh) {
            // A staged copy is read from disk.
            crate::nowait::check()?;
            return self.staging.read(&c, offset, size, out);
        }
        let h = match self.handles.lock().get(&fh) {
            Some(Handle::Stored(f)) => Handle::Stored(f.clone()),
            Some(Handle::Dir(_)) => return Err(Error::fs(FsError::IsDir, "directory")),
            Some(Handle::Text(t)) => Handle::Text(t.clone()),
            Some(Handle::Commit(c)) => Handle::Text(Arc::new(c.lock().clone().unwrap_or_default())),
            Some(Handle::Order(ino, order, caller)) => Handle::Order(*ino, order.clone(), *caller),
            None => return Err(Error::fs(FsError::Invalid, "bad file handle")),
        };
        match h {
            // The read is the end its writer states: carried out now, and
            // answered with how it went.
            Handle::Order(ino, order, caller) => {
                // Carried out first, in turn with other requests.
                crate::nowait::check()?;
                out.extend_from_slice(&self.read_order(ino, order, caller)?);
            }
            Handle::Stored(f) => self.versions.read_stored(&f, offset, size as u64, out)?,
            Handle::Text(t) => {
                let start = crate::limits::to_usize(offset).min(t.len());
                let end = (start + size as usize).min(t.len());
                out.extend_from_slice(&t[start..end]);
            }
            Handle::Commit(_) | Handle::Dir(_) => {}
        }
        Ok(())
    }

    /// The kernel agreed to pass staged files' I/O through to their copies.
    pub fn enable_passthrough(&self) {
        self.staging.enable_passthrough();
    }

    /// It would not take handle `fh`'s copy: `fh` and later opens go
    /// through the daemon.
    pub fn passthrough_refused(&self, fh: u64) {
        self.staging.passthrough.refused(fh);
    }

    /// The requests the kernel sent, by kind.
    pub fn requests(&self) -> &requests::Requests {
        &self.requests
    }

    /// How staged files' reads and writes are done (health).
    pub fn staged_io(&self) -> &'static str {
        self.staging.io()
    }

    /// What an open handle reads, for error messages (version and path).
    pub fn describe(&self, fh: u64) -> String {
        if let Some(said) = self.staging.describe(fh) {
            return said;
        }
        // The version inode is taken out first: its path is not worked out
        // under the handles' lock.
        let version = match self.handles.lock().get(&fh) {
            Some(Handle::Stored(f)) => match &f.origin {
                Origin::Version(ino) => *ino,
                Origin::Said(s) => return s.clone(),
            },
            _ => return format!("handle {fh}"),
        };
        format!("versions/{}", self.versions.version_path(version))
    }

    /// Staging's row id for folder `parent`: changes happen only there.
    fn staging_parent(parent: u64) -> Result<u64> {
        match Ino::of(parent) {
            Ino::Staged(id) => Ok(id),
            _ => Err(read_only()),
        }
    }

    /// Creates a staged entry: `target` is a symlink's, `rdev` a device's.
    #[allow(clippy::too_many_arguments)]
    pub fn make(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        mode: u32,
        uid: u32,
        gid: u32,
        target: &[u8],
        rdev: u64,
    ) -> Result<Attr> {
        let parent = Self::staging_parent(parent)?;
        self.staging
            .make(parent, name, kind, mode, (uid, gid), target, rdev)
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
        let attr = self.make(parent, name, Kind::File, mode, uid, gid, b"", 0)?;
        let opened = self.open(
            attr.ino,
            flags & !libc::O_TRUNC,
            &Caller { uid, gid, pid: 0 },
        )?;
        Ok((attr, opened))
    }

    /// A further name for staged file `ino`.
    pub fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Attr> {
        let parent = Self::staging_parent(parent)?;
        let Ino::Staged(id) = Ino::of(ino) else {
            return Err(Error::fs(
                FsError::NotPermitted,
                "a link across file systems",
            ));
        };
        self.staging.link(id, parent, name)
    }

    pub fn remove(&self, parent: u64, name: &[u8], dir: bool) -> Result<()> {
        self.staging
            .remove(Self::staging_parent(parent)?, name, dir)
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        no_replace: bool,
    ) -> Result<()> {
        self.staging.rename(
            (Self::staging_parent(parent)?, name),
            (Self::staging_parent(new_parent)?, new_name),
            no_replace,
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub fn setattr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        times: (Option<Mtime>, Option<Mtime>),
        fh: Option<u64>,
    ) -> Result<Attr> {
        match Ino::of(ino) {
            // `echo > commit` truncates first
            Ino::ControlFile(_) => self.with_seen(|s| self.control.attr(s, ino)),
            Ino::Staged(id) => self.staging.setattr(id, mode, uid, gid, size, times, fh),
            _ => Err(read_only()),
        }
    }

    /// A write by thread `pid` (0: unknown) of user `uid`.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8], uid: u32, pid: u32) -> Result<usize> {
        if let Some(c) = self.staging.copy(fh) {
            return self.staging.write(&c, offset, data);
        }
        // The handles' lock is let go before the commit runs.
        let target = match self.handles.lock().get(&fh) {
            Some(Handle::Commit(c)) => Handle::Commit(c.clone()),
            Some(Handle::Order(ino, order, caller)) => Handle::Order(*ino, order.clone(), *caller),
            Some(Handle::Stored(_)) => return Err(read_only()),
            Some(_) => return Err(Error::fs(FsError::Invalid, "file not open for writing")),
            // A file the kernel opened without asking: this mount is read-only.
            None if self.opens_skipped() => return Err(read_only()),
            None => return Err(Error::fs(FsError::Invalid, "bad file handle")),
        };
        match target {
            Handle::Commit(c) => self.commit_write(c, data, uid, pid),
            Handle::Order(_, order, _) => order.write(data, pid),
            _ => unreachable!("only control files are taken above"),
        }
    }

    pub fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        match (self.staging.copy(fh), self.handles.lock().get(&fh)) {
            (Some(c), _) => self.staging.fallocate(&c, offset, length, mode),
            (None, Some(Handle::Stored(_))) => Err(read_only()),
            _ => Err(Error::fs(FsError::Invalid, "file not open for writing")),
        }
    }

    pub fn fsync(&self, fh: u64) -> Result<()> {
        match self.staging.copy(fh) {
            Some(c) => self.staging.fsync(&c),
            None => Ok(()),
        }
    }

    /// A write to `.detafs/commit`: its message committed; the handle then
    /// reads the new version's log entry (empty if the commit failed).
    fn commit_write(
        &self,
        outcome: Arc<Mutex<Option<Vec<u8>>>>,
        data: &[u8],
        uid: u32,
        pid: u32,
    ) -> Result<usize> {
        let message = String::from_utf8_lossy(data);
        let res = match self.commit_staging(&message, uid, pid) {
            Ok(record) => {
                self.control.committed(&record);
                Ok(record)
            }
            Err(e) => self.control.failed(e),
        };
        *outcome.lock() = Some(match &res {
            Ok(record) => record.log_line(false),
            Err(_) => Vec::new(),
        });
        res.map(|_| data.len())
    }

    /// Commits staging (`.detafs/commit`), then reads the new version.
    fn commit_staging(&self, message: &str, uid: u32, pid: u32) -> Result<Record> {
        let author = crate::access::caller::author(uid);
        let meta = CommitMeta {
            content_only: false,
            dataset: &self.dataset,
            message: message.trim(),
            author: &author,
        };
        let progress = Arc::new(crate::progress::Counters::default());
        let told = self.control.asked(&meta, pid, progress.clone());
        let record = self.staging.commit(&meta, &progress, || told.running())?;
        drop(told);
        self.poll()?;
        // The writer's next command sees the new version in `versions/`.
        self.settle_kernel();
        Ok(record)
    }

    /// Puts staged `paths` back as the base version (`version` None) or
    /// version `version` has them (`detafs restore`, `detafs checkout`).
    /// Under a policy, `caller` reaches only versions and paths it may
    /// see: another is as one that does not exist.
    fn checkout(
        &self,
        version: Option<&str>,
        paths: &[&str],
        caller: Option<&Caller>,
    ) -> Result<()> {
        let parsed = paths
            .iter()
            .map(|p| staging::asked_path(p))
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<Vec<Vec<u8>>> = parsed
            .iter()
            .map(|p| p.names().map(<[u8]>::to_vec).collect())
            .collect();
        let record = match version {
            Some(spec) => self.repo.version(&self.dataset, spec)?,
            None => {
                let base = self.staging.lock()?.base_version()?;
                self.versions.record(base).ok_or_else(|| {
                    Error::InvalidInput("staging has no version to restore from".into())
                })?
            }
        };
        let judge = match caller {
            Some(c) => self.judge(c)?,
            None => None,
        };
        if let Some(j) = judge {
            if !j.sees_version(record.version) {
                return Err(Error::NoVersion {
                    dataset: self.dataset.clone(),
                    version: version.unwrap_or("base").to_string(),
                });
            }
            if let Some(hidden) = parsed
                .iter()
                .find(|p| !p.is_root() && !j.sees_version_path(record.version, p))
            {
                return Err(Error::fs(
                    FsError::NotFound,
                    format!("{hidden} is neither staged nor in that version"),
                ));
            }
        }
        let what = match version {
            Some(_) => format!("checkout v{}", record.version),
            None => "restore".into(),
        };
        let stale = self.staging.checkout(&record.tree, &names, &what)?;
        self.forget_stale(stale);
        Ok(())
    }

    /// Brings back what the last restore or checkout (or entry `entry` of
    /// the trash) replaced (`detafs restore NAME --undo`).
    fn undo(&self, entry: Option<u64>) -> Result<()> {
        let base = self.staging.lock()?.base_version()?;
        let tree = self.versions.record(base).map(|r| r.tree);
        let stale = self.staging.undo(tree.as_ref(), entry)?;
        self.forget_stale(stale);
        Ok(())
    }

    /// What the kernel keeps of staging agrees with it before the
    /// request's reader (the CLI) hears it is done (`settle`).
    fn forget_stale(&self, stale: Vec<staging::Stale>) {
        if let Some(k) = self.kernel.get() {
            for s in stale {
                match s {
                    staging::Stale::Name(parent, name) => {
                        k.forget_name(ino::Ino::staged(parent), &name)
                    }
                    staging::Stale::Inode(id) => k.forget_listing(ino::Ino::staged(id)),
                }
            }
        }
    }

    /// Free space where staged data lives.
    pub fn statfs(&self) -> Result<nix::sys::statvfs::Statvfs> {
        let path = self.repo.state_dir();
        nix::sys::statvfs::statvfs(path).map_err(|e| Error::io(path.display(), e.into()))
    }
}
