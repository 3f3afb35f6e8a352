//! The fuser adapter: converts kernel requests into `MountFs` calls, run on
//! the tokio runtime's blocking pool (so a slow store read never stalls other
//! requests), and errors into errno values. Nothing else imports fuser.

use crate::error::{Error, FsError};
use crate::fs::requests::Op;
use crate::fs::{Attr, Caller, DirEntry, Listing, MountFs, ROOT, VERSIONS};
use crate::snapshot::Kind;
use crate::snapshot::{Mtime, Special};
use fuser::BackingId;
use fuser::{Config, MountOption, Notifier, Session, SessionACL, SessionUnmounter};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One kernel connection: the whole mount, or `versions/` on a connection
/// of its own (`serve`).
pub struct Fuse {
    fs: Arc<MountFs>,
    ids: Ids,
    /// Whether the kernel opens files itself on this connection (decided
    /// at INIT: `MountFs::skip_opens`).
    skips_opens: bool,
    backings: Arc<Backings>,
}

/// Backing files registered with the kernel for passthrough, by inode:
/// every passthrough open of an inode must name the same one while any is
/// open, so each is kept until the last handle using it is released.
#[derive(Default)]
struct Backings {
    by_ino: Mutex<HashMap<u64, (Arc<BackingId>, u32)>>,
    by_fh: Mutex<HashMap<u64, u64>>,
}

impl Backings {
    /// The backing id of `ino` for its new handle `fh`, registered from
    /// `file` by `register` if it has none yet.
    fn take(
        &self,
        ino: u64,
        fh: u64,
        register: impl FnOnce() -> std::io::Result<BackingId>,
    ) -> std::io::Result<Arc<BackingId>> {
        let mut by_ino = self.by_ino.lock();
        let id = match by_ino.get_mut(&ino) {
            Some((id, n)) => {
                *n += 1;
                id.clone()
            }
            None => {
                let id = Arc::new(register()?);
                by_ino.insert(ino, (id.clone(), 1));
                id
            }
        };
        drop(by_ino);
        self.by_fh.lock().insert(fh, ino);
        Ok(id)
    }

    fn release(&self, fh: u64) {
        let Some(ino) = self.by_fh.lock().remove(&fh) else {
            return;
        };
        let mut by_ino = self.by_ino.lock();
        if let Some((_, n)) = by_ino.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                by_ino.remove(&ino);
            }
        }
    }
}

/// Inode numbers as one connection's kernel sees them: its root is the
/// kernel's inode 1, which on the versions connection is `versions/`.
#[derive(Clone, Copy)]
struct Ids {
    root: u64,
}

impl Ids {
    fn inward(self, ino: INodeNo) -> u64 {
        match ino.0 {
            1 => self.root,
            i => i,
        }
    }

    fn outward(self, ino: u64) -> INodeNo {
        INodeNo(if ino == self.root { 1 } else { ino })
    }
}

impl Fuse {
    fn new(fs: Arc<MountFs>, root: u64) -> Fuse {
        Fuse {
            fs,
            ids: Ids { root },
            skips_opens: false,
            backings: Arc::default(),
        }
    }

    fn versions_apart(&self) -> bool {
        self.ids.root == VERSIONS
    }

    /// Extended attributes are not kept (`cp -a` and `rsync -X` try to
    /// set an ACL on every file). Where versions/ has a connection of its
    /// own (whose kernel says EROFS itself), the main one answers ENOSYS,
    /// and the kernel answers EOPNOTSUPP without asking from then on: one
    /// round trip per copied file fewer. Elsewhere EROFS outside staging.
    fn refuse_xattr(&self, ino: u64, op: &'static str, reply: ReplyEmpty) {
        unsupported(op);
        if !self.versions_apart() && self.fs.versions_apart() {
            return reply.error(Errno::ENOSYS);
        }
        reply.error(errno(&self.fs.refuse(ino, FsError::Unsupported, op)));
    }

    /// Runs `op` off the kernel-reading thread.
    /// Held, taking no worker, while a control-file request the kernel
    /// released before it is carried out (`fs/orders.rs`).
    fn spawn(&self, op: impl FnOnce(&Arc<MountFs>) + Send + 'static) {
        let fs = self.fs.clone();
        if let Some(job) = self.fs.after_orders(Box::new(move || op(&fs))) {
            self.fs.repo().store().runtime().spawn_work(job);
        }
    }

    /// Creates a staged directory, empty file, symlink (`target`) or special
    /// entry (`rdev`) owned by the caller.
    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        kind: Kind,
        mode: u32,
        target: &[u8],
        rdev: u64,
        reply: ReplyEntry,
    ) {
        let ids = self.ids;
        let (name, target, uid, gid) = (
            name.as_bytes().to_vec(),
            target.to_vec(),
            req.uid(),
            req.gid(),
        );
        self.spawn(move |fs| {
            let res = fs.make(parent, &name, kind, mode, uid, gid, &target, rdev);
            entry(ids, reply, res, "create")
        });
    }

    /// Answers with `op`'s result right here if it needs nothing that
    /// waits (a thread hop costs more than such an answer), else runs it
    /// again on a worker: see `crate::nowait`.
    fn answer<T: Send + 'static>(
        &self,
        op: impl Fn(&MountFs) -> Result<T, Error> + Send + 'static,
        reply: impl FnOnce(&MountFs, Result<T, Error>) + Send + 'static,
    ) {
        // After a control-file request, nothing is answered before it is
        // carried out (`fs/orders.rs`).
        if self.fs.orders_pending() {
            return self.spawn(move |fs| reply(fs, op(fs)));
        }
        match crate::nowait::attempt(|| op(&self.fs)) {
            Err(Error::WouldBlock) => self.spawn(move |fs| reply(fs, op(fs))),
            res => reply(&self.fs, res),
        }
    }
}

/// The one place errors become errno values. Store and data damage are EIO,
/// never ENOENT: a network failure must not look like a missing file.
pub fn errno(e: &Error) -> Errno {
    if e.is_disk_full() {
        return Errno::from_i32(libc::ENOSPC);
    }
    match e {
        Error::Fs { kind, .. } => Errno::from_i32(match kind {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::Invalid => libc::EINVAL,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::ReadOnly => libc::EROFS,
            FsError::NotPermitted => libc::EPERM,
            FsError::Unsupported => libc::EOPNOTSUPP,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::Busy => libc::EBUSY,
            FsError::Denied => libc::EACCES,
            FsError::Stale => libc::ESTALE,
        }),
        Error::Io { source, .. } => Errno::from_i32(source.raw_os_error().unwrap_or(libc::EIO)),
        Error::Conflict { .. } | Error::Unresolved { .. } | Error::StagingBusy(_) => {
            Errno::from_i32(libc::EBUSY)
        }
        Error::NothingToCommit(_) | Error::Erased { .. } => Errno::from_i32(libc::ENODATA),
        Error::Cancelled => Errno::from_i32(libc::ECANCELED),
        Error::CommitTooLong(_) => Errno::from_i32(libc::ETIMEDOUT),
        Error::CollectedMeanwhile | Error::WouldBlock => Errno::from_i32(libc::EAGAIN),
        Error::InvalidInput(_) | Error::Policy { .. } | Error::NoKeySlot(_) => {
            Errno::from_i32(libc::EINVAL)
        }
        Error::NotOwned { .. } => Errno::from_i32(libc::EACCES),
        Error::Forbidden(_) => Errno::from_i32(libc::EACCES),
        Error::NoDataset(_)
        | Error::DatasetDeleted { .. }
        | Error::NoVersion { .. }
        | Error::NoPath { .. } => Errno::from_i32(libc::ENOENT),
        Error::Store { .. }
        | Error::Index(_)
        | Error::NotAStore(_)
        | Error::StoreGone(_)
        | Error::SchemaTooNew { .. }
        | Error::Locked(_)
        | Error::WrongKey(_)
        | Error::Downgraded { .. }
        | Error::FormatTooNew { .. }
        | Error::DatasetExists(_)
        | Error::UnsafeStore { .. }
        | Error::Missing { .. }
        | Error::Corrupt { .. }
        | Error::Malformed { .. }
        | Error::DamagedHistory { .. }
        | Error::TooManyRetries(_) => Errno::from_i32(libc::EIO),
    }
}

fn fail(op: &str, e: &Error) -> Errno {
    match e {
        // The caller's own doing, told by the errno (and a failed commit
        // by `.detafs/last-error`, logged once there): not the log's news.
        Error::Fs { .. }
        | Error::InvalidInput(_)
        | Error::NothingToCommit(_)
        | Error::Conflict { .. }
        | Error::Unresolved { .. }
        | Error::StagingBusy(_)
        | Error::NoDataset(_)
        | Error::DatasetDeleted { .. }
        | Error::NoVersion { .. }
        | Error::NoPath { .. } => tracing::debug!("{op}: {e}"),
        _ => tracing::error!("{op}: {e}"),
    }
    errno(e)
}

/// Trees are validated on decode, so `m` is in range; saturating anyway:
/// this runs on the kernel's request thread.
fn time(m: Mtime) -> SystemTime {
    let t = if m.0 >= 0 {
        UNIX_EPOCH.checked_add(Duration::new(m.0 as u64, m.1))
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(m.0.unsigned_abs()))
            .and_then(|t| t.checked_add(Duration::from_nanos(m.1 as u64)))
    };
    t.unwrap_or(UNIX_EPOCH)
}

fn mtime_of(t: TimeOrNow) -> Mtime {
    let t = match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Mtime(d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (s, n) = (d.as_secs() as i64, d.subsec_nanos());
            if n == 0 {
                Mtime(-s, 0)
            } else {
                Mtime(-s - 1, 1_000_000_000 - n)
            }
        }
    }
}

fn kind(k: Kind) -> FileType {
    match k {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
        Kind::Special(Special::Fifo) => FileType::NamedPipe,
        Kind::Special(Special::Socket) => FileType::Socket,
        Kind::Special(Special::Char) => FileType::CharDevice,
        Kind::Special(Special::Block) => FileType::BlockDevice,
    }
}

fn attr(ids: Ids, a: &Attr) -> FileAttr {
    let t = time(a.mtime);
    FileAttr {
        ino: ids.outward(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: time(a.atime),
        mtime: t,
        ctime: time(a.ctime),
        crtime: t,
        kind: kind(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        // The kernel's encoding of a device number is 32 bits wide; dev_t
        // values of real devices fit in it.
        rdev: u32::try_from(a.rdev).unwrap_or(0),
        blksize: 4096,
        flags: 0,
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

/// Replies with a name's entry: how long the kernel may keep the name is
/// the core's to say (`MountFs::name_ttl`: under a policy, not at all
/// where users see different things).
fn named(
    ids: Ids,
    fs: &MountFs,
    reply: ReplyEntry,
    parent: u64,
    name: &[u8],
    res: Result<Attr, Error>,
    op: &str,
) {
    match res {
        Ok(a) => {
            let ttl = fs.name_ttl(parent, name, &a);
            reply.entry_with_ttls(&a.ttl, &ttl, &attr(ids, &a), Generation(0))
        }
        Err(e) => reply.error(fail(op, &e)),
    }
}

fn entry(ids: Ids, reply: ReplyEntry, res: Result<Attr, Error>, op: &str) {
    match res {
        Ok(a) => reply.entry(&a.ttl, &attr(ids, &a), Generation(0)),
        Err(e) => reply.error(fail(op, &e)),
    }
}

/// An operation the mount does not support, said once per kind at debug
/// level: a program looping on one must not fill the log.
fn unsupported(op: &'static str) {
    static SEEN: Mutex<Vec<&str>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock();
    if !seen.contains(&op) {
        seen.push(op);
        tracing::debug!("{op} is not supported (answered once here; never logged again)");
    }
}

fn empty(reply: ReplyEmpty, res: Result<(), Error>, op: &str) {
    match res {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(fail(op, &e)),
    }
}

/// Feeds `dir`'s listing (or the part of it from position `first` on) to
/// a reply from `offset` on until the reply is full (`add` returns true);
/// each entry carries the offset to resume after it
/// (`MountFs::resume_after`).
fn page(
    fs: &MountFs,
    dir: u64,
    (listing, first): (&Listing, u64),
    offset: u64,
    mut add: impl FnMut(u64, &(DirEntry, Attr)) -> bool,
) {
    for (k, item) in listing.iter().enumerate() {
        let next = fs.resume_after(dir, crate::limits::to_usize(first) + k, &item.0);
        if next > offset && add(next, item) {
            break;
        }
    }
}

fn fill_dir(
    ids: Ids,
    fs: &MountFs,
    dir: u64,
    listing: (&Listing, u64),
    offset: u64,
    mut reply: ReplyDirectory,
) {
    page(fs, dir, listing, offset, |next, (e, _)| {
        reply.add(
            ids.outward(e.ino),
            next,
            kind(e.kind),
            OsStr::from_bytes(&e.name),
        )
    });
    reply.ok();
}

/// Entries a READDIRPLUS reply can hold at most (each takes more than
/// 150 bytes; the kernel's buffer is at most `max_pages` pages).
const PLUS_ENTRIES: usize = 8192;

/// A READDIRPLUS page as it will be told: for each entry from `offset`
/// on, its position after it, its index in the listing, and the
/// attributes and lifetime of a fresh lookup if it needed one (a listing
/// taken before the kernel forgot one of its inodes: `forget` drops kept
/// listings, but a handle keeps its own). Made where `answer` runs it:
/// a lookup that must wait sends the whole page to a worker, the lookups
/// made so far given back.
type PlusPage = Vec<(u64, usize, Option<(Attr, Duration)>)>;

fn plus_page(
    fs: &MountFs,
    dir: u64,
    (listing, first): (&Listing, u64),
    offset: u64,
) -> Result<PlusPage, Error> {
    let mut out = PlusPage::new();
    let mut looked_up = Vec::new();
    for (k, (e, a)) in listing.iter().enumerate() {
        let next = fs.resume_after(dir, crate::limits::to_usize(first) + k, e);
        if next <= offset {
            continue;
        }
        if out.len() == PLUS_ENTRIES {
            break;
        }
        let dots = e.name == b"." || e.name == b"..";
        let fresh = match dots || fs.is_live(a.ino) {
            true => None,
            false => match fs.lookup(dir, &e.name) {
                Ok(f) => {
                    looked_up.push(f.ino);
                    // Under a policy, the listing's lifetimes are the
                    // names' (`Judge::filter`); a fresh lookup's are asked for.
                    let ttl = fs.name_ttl(dir, &e.name, &f);
                    Some((f, ttl))
                }
                Err(Error::WouldBlock) => {
                    for ino in looked_up {
                        fs.forget(ino, 1);
                    }
                    return Err(Error::WouldBlock);
                }
                // Gone meanwhile: told as listed, as before.
                Err(_) => None,
            },
        };
        out.push((next, k, fresh));
    }
    Ok(out)
}

fn fill_dir_plus(
    ids: Ids,
    fs: &MountFs,
    listing: &Listing,
    page: PlusPage,
    mut reply: fuser::ReplyDirectoryPlus,
) {
    let mut full = false;
    for (next, k, fresh) in page {
        let (e, a) = &listing[k];
        let dots = e.name == b"." || e.name == b"..";
        // Every entry but . and .. counts as a lookup for the kernel; a
        // fresh lookup of one that did not fit was never told to it.
        if full {
            if let Some((f, _)) = fresh {
                fs.forget(f.ino, 1);
            }
            continue;
        }
        let (a, ttl) = match &fresh {
            Some((f, ttl)) => (f, *ttl),
            None => (a, a.ttl),
        };
        full = reply.add(
            ids.outward(a.ino),
            next,
            OsStr::from_bytes(&e.name),
            &ttl,
            &attr(ids, a),
            Generation(0),
        );
        match (full, &fresh) {
            (false, None) if !dots => fs.remember(a.ino),
            (true, Some(f)) => fs.forget(f.0.ino, 1),
            _ => {}
        }
    }
    reply.ok();
}

/// The backing id to answer an open with, if the core passes the file
/// through and the kernel takes it; else the open goes through the daemon.
fn passed_through(
    fs: &MountFs,
    backings: &Backings,
    ino: u64,
    o: &crate::fs::Opened,
    register: impl FnOnce(&File) -> std::io::Result<BackingId>,
) -> Option<Arc<BackingId>> {
    let file = o.backing.as_ref()?;
    match backings.take(ino, o.fh, || register(file)) {
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!("passthrough refused ({e}): staged files go through the daemon");
            fs.passthrough_refused(o.fh);
            None
        }
    }
}

thread_local! {
    /// Each worker's buffer for read replies: a reply of up to a MiB is
    /// built in memory the thread already has, not in pages the kernel
    /// must map and zero at every read.
    static REPLY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most a worker's reply buffer keeps between reads (the kernel asks
/// for at most `max_pages` pages at once: 1 MiB by default).
const REPLY_KEPT: usize = 1 << 20;

fn open_flags(o: &crate::fs::Opened) -> FopenFlags {
    let (keep_cache, direct_io) = (o.keep_cache, o.direct_io);
    // A close costs no FLUSH round trip, but where a handle acts at close
    // (a restore or checkout request).
    let mut f = match o.flush {
        true => FopenFlags::empty(),
        false => FopenFlags::FOPEN_NOFLUSH,
    };
    if keep_cache {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if direct_io {
        f |= FopenFlags::FOPEN_DIRECT_IO;
    }
    f
}

impl Filesystem for Fuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(1 << 20);
        // Where opens decide nothing, the kernel opens files itself (see
        // `open`) and keeps their pages, control files' too: it drops them
        // when an mtime moves.
        self.skips_opens = match self.versions_apart() {
            true => self.fs.skip_version_opens(),
            false => self.fs.skip_opens(),
        };
        if self.skips_opens && !self.versions_apart() {
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        }
        // Attributes come with every directory listing, so `ls -l` costs no
        // lookup per file. (With READDIRPLUS_AUTO the kernel asks for them only
        // in a listing's first batch: `ls -l` of 100,000 entries took 5.5 s,
        // not 0.5 s; `find` measured the same either way.)
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        // Staged files' copies are read and written by the kernel itself
        // (FUSE passthrough): it needs a daemon with CAP_SYS_ADMIN, which
        // registers each copy (`passed_through`); refused, they go through
        // the daemon.
        if !self.versions_apart()
            && !self.fs.read_only()
            && config
                .capabilities()
                .contains(fuser::InitFlags::FUSE_PASSTHROUGH)
            && config.set_max_stack_depth(1).is_ok()
            && config
                .add_capabilities(fuser::InitFlags::FUSE_PASSTHROUGH)
                .is_ok()
        {
            self.fs.enable_passthrough();
        }
        if self.versions_apart() {
            // Nothing below versions/ changes: lookups and listings of
            // one folder need not wait on each other.
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.fs.requests().seen(Op::Lookup);
        let ids = self.ids;
        let parent = self.ids.inward(parent);
        let (name, c) = (name.as_bytes().to_vec(), caller(req));
        let looked = name.clone();
        self.answer(
            move |fs| fs.lookup_for(&c, parent, &looked),
            move |fs, res| named(ids, fs, reply, parent, &name, res, "lookup"),
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.requests().seen(Op::Forget);
        let ino = self.ids.inward(ino);
        self.fs.forget(ino, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.fs.requests().seen(Op::Getattr);
        let ids = self.ids;
        let ino = self.ids.inward(ino);
        self.answer(
            move |fs| fs.getattr_open(ino, fh.map(|f| f.0)),
            move |_, res| match res {
                Ok(a) => reply.attr(&a.ttl, &attr(ids, &a)),
                Err(e) => reply.error(fail("getattr", &e)),
            },
        );
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.fs.requests().seen(Op::Setattr);
        let ids = self.ids;
        let ino = self.ids.inward(ino);
        self.spawn(move |fs| {
            let res = fs.setattr(
                ino,
                mode,
                uid,
                gid,
                size,
                (atime.map(mtime_of), mtime.map(mtime_of)),
                fh.map(|f| f.0),
            );
            match res {
                Ok(a) => reply.attr(&a.ttl, &attr(ids, &a)),
                Err(e) => reply.error(fail("setattr", &e)),
            }
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.fs.requests().seen(Op::Readlink);
        let ino = self.ids.inward(ino);
        let c = caller(req);
        self.answer(
            move |fs| fs.readlink(&c, ino),
            move |_, res| match res {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(fail("readlink", &e)),
            },
        );
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.fs.requests().seen(Op::Mknod);
        let parent = self.ids.inward(parent);
        // The kernel passes only these types, and devices only from a caller
        // allowed to make them (CAP_MKNOD); `nodev` keeps them unopenable.
        let kind = match Special::of_mode(mode) {
            Some(s) => Kind::Special(s),
            None if mode & libc::S_IFMT == libc::S_IFREG => Kind::File,
            None => {
                let e = self.fs.refuse(parent, FsError::Invalid, "mknod");
                reply.error(errno(&e));
                return;
            }
        };
        let rdev = match kind {
            Kind::Special(s) if s.has_rdev() => u64::from(rdev),
            _ => 0,
        };
        self.make(
            req,
            parent,
            name,
            kind,
            mode & !umask & 0o7777,
            b"",
            rdev,
            reply,
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.fs.requests().seen(Op::Mkdir);
        self.make(
            req,
            self.ids.inward(parent),
            name,
            Kind::Dir,
            mode & !umask,
            b"",
            0,
            reply,
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.fs.requests().seen(Op::Unlink);
        let parent = self.ids.inward(parent);
        let name = name.as_bytes().to_vec();
        self.spawn(move |fs| empty(reply, fs.remove(parent, &name, false), "unlink"));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.fs.requests().seen(Op::Rmdir);
        let parent = self.ids.inward(parent);
        let name = name.as_bytes().to_vec();
        self.spawn(move |fs| empty(reply, fs.remove(parent, &name, true), "rmdir"));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.fs.requests().seen(Op::Symlink);
        let target = target.as_os_str().as_bytes();
        self.make(
            req,
            self.ids.inward(parent),
            link_name,
            Kind::Symlink,
            0o777,
            target,
            0,
            reply,
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.requests().seen(Op::Rename);
        let (parent, newparent) = (self.ids.inward(parent), self.ids.inward(newparent));
        // RENAME_NOREPLACE is the only flag staging implements; any other
        // (EXCHANGE, WHITEOUT, one not known yet) is refused, never done as
        // a plain rename.
        if flags.bits() & !RenameFlags::RENAME_NOREPLACE.bits() != 0 {
            reply.error(Errno::from_i32(libc::EINVAL));
            return;
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let (name, newname) = (name.as_bytes().to_vec(), newname.as_bytes().to_vec());
        self.spawn(move |fs| {
            empty(
                reply,
                fs.rename(parent, &name, newparent, &newname, no_replace),
                "rename",
            )
        });
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.fs.requests().seen(Op::Link);
        let ids = self.ids;
        let ino = self.ids.inward(ino);
        let newparent = self.ids.inward(newparent);
        let name = newname.as_bytes().to_vec();
        self.spawn(move |fs| entry(ids, reply, fs.link(ino, newparent, &name), "link"));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.fs.requests().seen(Op::Open);
        let ino = self.ids.inward(ino);
        // "Not implemented": the kernel opens this file and every later one
        // itself, with no OPEN or RELEASE (`crate::fs::unopened`).
        if self.skips_opens {
            return reply.error(Errno::ENOSYS);
        }
        let (c, backings) = (caller(req), self.backings.clone());
        // A warm open costs one wake-up, not two: on a busy host each is
        // a wait for a CPU (docs/benchmarks.md, issue 9).
        self.answer(
            move |fs| fs.open(ino, flags.0, &c),
            move |fs, res| match res {
                Ok(o) => {
                    let fh = FileHandle(o.fh);
                    match passed_through(fs, &backings, ino, &o, |f| reply.open_backing(f)) {
                        Some(id) => reply.opened_passthrough(fh, open_flags(&o), &id),
                        None => reply.opened(fh, open_flags(&o)),
                    }
                }
                Err(e) => reply.error(fail("open", &e)),
            },
        );
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.fs.requests().seen(Op::Read);
        let ino = self.ids.inward(ino);
        if fh.0 != 0 {
            self.fs.handle_goes_on(fh.0);
        }
        // Handle 0: a file the kernel opened without asking.
        let read = move |fs: &Arc<MountFs>, out: &mut Vec<u8>| match fh.0 {
            0 => fs.read_unopened(ino, offset, size, out),
            fh => fs.read(fh, offset, size, out),
        };
        // Bytes already verified in memory are answered right here (see
        // `answer`); the rest on a worker, and so are errors (naming the
        // file may read trees). What a read tried here could change (a
        // request read back) it is refused before.
        let reply = match self.fs.orders_pending() {
            true => Some(reply),
            false => REPLY.with_borrow_mut(|out| {
                out.clear();
                match crate::nowait::attempt(|| read(&self.fs, out)) {
                    Ok(()) => {
                        reply.data(out);
                        out.shrink_to(REPLY_KEPT);
                        None
                    }
                    Err(_) => Some(reply),
                }
            }),
        };
        let Some(reply) = reply else {
            return;
        };
        self.spawn(move |fs| {
            REPLY.with_borrow_mut(|out| {
                out.clear();
                match read(fs, out) {
                    Ok(()) => reply.data(out),
                    Err(e) => {
                        let what = match fh.0 {
                            0 => fs.describe_unopened(ino),
                            fh => fs.describe(fh),
                        };
                        reply.error(fail(&format!("read of {what}"), &e));
                    }
                }
                out.shrink_to(REPLY_KEPT);
            })
        });
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.fs.requests().seen(Op::Write);
        let (data, uid, pid) = (data.to_vec(), req.uid(), req.pid());
        self.fs.handle_goes_on(fh.0);
        self.spawn(move |fs| match fs.write(fh.0, offset, &data, uid, pid) {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(fail("write", &e)),
        });
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.fs.requests().seen(Op::Flush);
        // Only handles of control-file requests are opened without
        // FOPEN_NOFLUSH; where the kernel opens files itself (no handle, no
        // flag), ENOSYS stops it sending FLUSH at all.
        if self.skips_opens {
            return reply.error(Errno::ENOSYS);
        }
        self.fs
            .flush(fh.0, req.pid(), move |res| empty(reply, res, "flush"));
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.fs.requests().seen(Op::Release);
        self.fs.release(fh.0);
        self.backings.release(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fs.requests().seen(Op::Fsync);
        self.spawn(move |fs| empty(reply, fs.fsync(fh.0), "fsync"));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.fs.requests().seen(Op::Opendir);
        let ino = self.ids.inward(ino);
        // Like `open`: the kernel then opens every directory itself and
        // keeps its listing (`crate::fs::unopened`).
        if self.skips_opens {
            return reply.error(Errno::ENOSYS);
        }
        let c = caller(req);
        self.answer(
            move |fs| fs.open_dir(&c, ino),
            move |_, res| match res {
                // A version's directories never change: the kernel may keep
                // their listings.
                Ok(o) if o.keep_cache => reply.opened(
                    FileHandle(o.fh),
                    FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
                ),
                Ok(o) => reply.opened(FileHandle(o.fh), FopenFlags::empty()),
                Err(e) => reply.error(fail("opendir", &e)),
            },
        );
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.fs.requests().seen(Op::Readdir);
        let ids = self.ids;
        let ino = self.ids.inward(ino);
        // Handle 0: a directory the kernel opened without asking.
        if fh.0 == 0 {
            return self.answer(
                move |fs| fs.listing_unopened(ino, offset),
                move |fs, res| match res {
                    Ok((listing, first)) => {
                        fill_dir(ids, fs, ino, (&listing, first), offset, reply)
                    }
                    Err(e) => reply.error(fail("readdir", &e)),
                },
            );
        }
        match self.fs.listing(fh.0) {
            Ok(listing) => fill_dir(ids, &self.fs, ino, (&listing, 0), offset, reply),
            Err(e) => reply.error(fail("readdir", &e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: fuser::ReplyDirectoryPlus,
    ) {
        self.fs.requests().seen(Op::Readdirplus);
        let ids = self.ids;
        let ino = self.ids.inward(ino);
        let fh = fh.0;
        self.answer(
            move |fs| {
                let (listing, first) = match fh {
                    0 => fs.listing_unopened(ino, offset)?,
                    fh => (fs.listing(fh)?, 0),
                };
                let page = plus_page(fs, ino, (&listing, first), offset)?;
                Ok((listing, page))
            },
            move |fs, res| match res {
                Ok((listing, page)) => fill_dir_plus(ids, fs, &listing, page, reply),
                Err(e) => reply.error(fail("readdirplus", &e)),
            },
        );
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.requests().seen(Op::Releasedir);
        self.fs.release(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.fs.requests().seen(Op::Statfs);
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.files(),
                s.files_free(),
                u32::try_from(s.block_size()).unwrap_or(u32::MAX),
                255,
                u32::try_from(s.fragment_size()).unwrap_or(u32::MAX),
            ),
            Err(e) => reply.error(fail("statfs", &e)),
        }
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        self.fs.requests().seen(Op::Xattr);
        // ENOSYS once and the kernel stops asking (`ls -l` asks for every file).
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        self.fs.requests().seen(Op::Xattr);
        reply.error(Errno::ENOSYS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.fs.requests().seen(Op::Xattr);
        self.refuse_xattr(self.ids.inward(ino), "setxattr", reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        self.fs.requests().seen(Op::Xattr);
        self.refuse_xattr(self.ids.inward(ino), "removexattr", reply);
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.fs.requests().seen(Op::Ioctl);
        // Programs probe files with ioctls (terminal or FICLONE checks)
        // and go on without them: "not a terminal" is the usual answer.
        unsupported("ioctl");
        reply.error(Errno::from_i32(libc::ENOTTY));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.fs.requests().seen(Op::Create);
        let ids = self.ids;
        let parent = self.ids.inward(parent);
        let (name, uid, gid) = (name.as_bytes().to_vec(), req.uid(), req.gid());
        let backings = self.backings.clone();
        self.spawn(
            move |fs| match fs.create(parent, &name, mode & !umask, flags, uid, gid) {
                Ok((a, o)) => {
                    let (fa, fh) = (attr(ids, &a), FileHandle(o.fh));
                    match passed_through(fs, &backings, a.ino, &o, |f| reply.open_backing(f)) {
                        Some(id) => reply.created_passthrough(
                            &a.ttl,
                            &fa,
                            Generation(0),
                            fh,
                            open_flags(&o),
                            &id,
                        ),
                        None => reply.created(&a.ttl, &fa, Generation(0), fh, open_flags(&o)),
                    }
                }
                Err(e) => reply.error(fail("create", &e)),
            },
        );
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.fs.requests().seen(Op::Fallocate);
        self.spawn(move |fs| empty(reply, fs.fallocate(fh.0, offset, length, mode), "fallocate"));
    }
}

/// What the daemon tells the kernel to drop, through each connection's
/// notifier (ENOENT answers mean the kernel held nothing to drop).
struct Kernel {
    main: Notifier,
    /// `versions/`'s own connection while it serves, and how to end it.
    versions: Mutex<Option<(Notifier, SessionUnmounter)>>,
    versions_at: std::path::PathBuf,
}

impl Kernel {
    /// Unmounts `versions/`'s own connection (before the main one, which is
    /// busy while it is there). Kept if that fails (a process inside).
    fn end_versions(&self) -> std::io::Result<()> {
        let mut apart = self.versions.lock();
        if let Some((_, unmounter)) = apart.as_mut() {
            unmounter.unmount()?;
            *apart = None;
        }
        Ok(())
    }

    fn each(&self, tell: impl Fn(&Notifier, Ids)) {
        tell(&self.main, Ids { root: ROOT });
        if let Some((n, _)) = &*self.versions.lock() {
            tell(n, Ids { root: VERSIONS });
        }
    }
}

/// What the kernel is told to drop.
enum Notice {
    Name(u64, Vec<u8>),
    /// An inode's attributes and pages (a directory's listing).
    Inode(u64),
    /// Answered once every notice before it was sent.
    Settle(std::sync::mpsc::Sender<()>),
}

/// Notices are sent to the kernel from a thread of their own: the kernel
/// takes a folder's lock to drop a name in it, and a process holding that
/// lock may be waiting for an answer that waits for the sender (a
/// control-file request, `fs/orders.rs`). So no thread of the daemon
/// waits on the kernel's locks, but `settle`, for at most a second.
struct Notices {
    kernel: Arc<Kernel>,
    queue: Mutex<std::sync::mpsc::Sender<Notice>>,
}

impl Notices {
    fn start(kernel: Arc<Kernel>) -> Notices {
        let (tx, rx) = std::sync::mpsc::channel();
        let sender = kernel.clone();
        std::thread::spawn(move || {
            for notice in rx {
                // Tests hold it here: a kernel slow to take what it is told.
                crate::hold::hold("kernel-notice");
                sender.send(notice);
            }
        });
        Notices {
            kernel,
            queue: Mutex::new(tx),
        }
    }

    fn tell(&self, notice: Notice) {
        let _ = self.queue.lock().send(notice);
    }
}

impl Kernel {
    fn send(&self, notice: Notice) {
        match notice {
            Notice::Name(parent, name) => self.each(|n, ids| {
                let _ = n.inval_entry(ids.outward(parent), OsStr::from_bytes(&name));
            }),
            // A directory's listing is kept in its pages: drop them all.
            Notice::Inode(ino) => self.each(|n, ids| {
                let _ = n.inval_inode(ids.outward(ino), 0, 0);
            }),
            Notice::Settle(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl crate::fs::KernelCache for Notices {
    fn forget_name(&self, parent: u64, name: &[u8]) {
        self.tell(Notice::Name(parent, name.to_vec()));
    }

    fn forget_listing(&self, ino: u64) {
        self.tell(Notice::Inode(ino));
    }

    fn settle(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tell(Notice::Settle(tx));
        let _ = rx.recv_timeout(Duration::from_secs(1));
    }

    fn versions_judged(&self) {
        self.kernel.versions_judged();
    }
}

impl Kernel {
    fn versions_judged(&self) {
        if self.versions.lock().take().is_none() {
            return;
        }
        // Detached, not unmounted: a process inside keeps it until it
        // leaves (its reads are refused: `MountFs::read_unopened`); the main
        // connection judges every open from now on. On a thread of its
        // own: the kernel looks `versions` up through the main connection.
        let at = self.versions_at.clone();
        std::thread::spawn(move || {
            let out = std::process::Command::new("fusermount3")
                .args(["-u", "-z", "-q", "--"])
                .arg(&at)
                .output();
            match out {
                Ok(o) if o.status.success() => {}
                Ok(o) => tracing::error!(
                    "detaching versions/'s own connection: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                Err(e) => tracing::error!("detaching versions/'s own connection: {e}"),
            }
        });
    }
}

pub struct SessionOptions {
    pub allow_other: bool,
    pub fs_name: String,
    pub poll_interval: Duration,
}

fn config(opts: &SessionOptions, read_only: bool) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(opts.fs_name.clone()),
        MountOption::Subtype("detafs".into()),
        MountOption::DefaultPermissions,
        // A setuid binary another user committed must not run as the
        // mount's owner (root, say) from versions/ or staging/.
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    if opts.allow_other {
        config.acl = SessionACL::All;
    }
    // Nothing of a read-only mount is written: the kernel refuses a write
    // open itself (as it must where it opens files without asking).
    if read_only {
        config.mount_options.push(MountOption::RO);
    }
    config
}

/// Runs a session's request loop on a thread of its own; its unmounter.
/// `fusermount3 -u -z`: takes the mount (and what is mounted inside it)
/// out of the tree now; the kernel ends it once nothing uses it.
fn detach_lazily(at: &Path) -> std::io::Result<()> {
    let out = std::process::Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(at)
        .output()?;
    match out.status.success() {
        true => Ok(()),
        false => Err(std::io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )),
    }
}

/// Serves `session` on a thread named `name`; `ended` runs when the
/// kernel ends the connection (an unmount).
fn run(
    mut session: Session<Fuse>,
    name: &str,
    ended: impl FnOnce() + Send + 'static,
) -> std::io::Result<(
    SessionUnmounter,
    std::thread::JoinHandle<std::io::Result<()>>,
)> {
    let unmounter = session.unmount_callable();
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let res = session.run();
            ended();
            res
        })?;
    Ok((unmounter, thread))
}

/// Mounts `fs` at `mountpoint` and serves it until it is unmounted
/// (`detafs umount`, `fusermount3 -u -z`) or the process gets SIGINT/SIGTERM.
/// `ready` runs once the mount is live.
///
/// A read-write mount without a policy serves `versions/` on a second
/// connection mounted over it, configured for content that never changes:
/// the kernel opens its files and folders itself and keeps their pages and
/// names, so reading a version costs what a local file system costs. The
/// main connection answers the root, `staging/` and `.detafs/` (and
/// `versions/` wherever the second is not mounted).
pub fn serve(
    fs: Arc<MountFs>,
    mountpoint: &Path,
    opts: &SessionOptions,
    ready: impl FnOnce(),
) -> std::io::Result<()> {
    // Taken over before the mount is live: a signal that comes as soon as
    // it can be seen unmounts it, rather than killing the process.
    let handlers = fs.repo().store().block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        Ok::<_, std::io::Error>((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    });
    let (mut int, mut term) = handlers?;
    let main = Session::new(
        Fuse::new(fs.clone(), ROOT),
        mountpoint,
        &config(opts, fs.read_only()),
    )?;
    let notifier = main.notifier();
    let (mut unmounter, main) = run(main, "fuse", || {})?;
    // Mounted once the main connection answers: the kernel looks
    // `versions` up through it.
    let versions = match fs.read_only() || !fs.version_opens_decide_nothing() {
        true => None,
        false => match Session::new(
            Fuse::new(fs.clone(), VERSIONS),
            mountpoint.join("versions"),
            &config(opts, true),
        ) {
            Ok(s) => {
                // Unmounted alone (`fusermount3 -u MNT/versions`): the
                // main connection serves versions/ from then on.
                let here = fs.clone();
                let ended = move || here.versions_served_here();
                Some((s.notifier(), run(s, "fuse-versions", ended)?))
            }
            Err(e) => {
                tracing::warn!("versions/ is served on the main connection: {e}");
                None
            }
        },
    };
    let (apart, versions_thread) = match versions {
        Some((n, (u, t))) => (Some((n, u)), Some(t)),
        None => (None, None),
    };
    let kernel = Arc::new(Kernel {
        main: notifier,
        versions: Mutex::new(apart),
        versions_at: mountpoint.join("versions"),
    });
    fs.on_kernel_cache(Arc::new(Notices::start(kernel.clone())));
    let store = fs.clone();
    let at = mountpoint.to_path_buf();
    std::thread::spawn(move || {
        let mut signalled = || {
            store.repo().store().block_on(async {
                tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
            })
        };
        signalled();
        tracing::info!("signal received: unmounting");
        // Both connections or neither: what uses either is looked for
        // first. Then the inner mount: the outer one is busy while it is there.
        let devs: Vec<u64> = [at.clone(), at.join("versions")]
            .iter()
            .filter_map(|p| crate::procs::mount_dev(p))
            .collect();
        let users = crate::procs::users_of(&devs, None);
        let res = match users.is_empty() {
            true => kernel.end_versions().and_then(|()| unmounter.unmount()),
            false => Err(std::io::Error::other(format!(
                "in use by {}",
                users.join(", ")
            ))),
        };
        let Err(e) = res else {
            return;
        };
        tracing::error!(
            "cannot unmount {}: {e}; something inside still uses it (a shell's working folder, an open file): leave it, or interrupt again (Ctrl-C) to detach the mount now",
            at.display()
        );
        signalled();
        // Detached from the file-system tree at once (with versions/
        // inside it); the daemon ends when the last user lets go.
        match detach_lazily(&at) {
            Ok(()) => tracing::warn!(
                "second signal: detached {} lazily; this process ends once nothing inside uses it",
                at.display()
            ),
            Err(e) => tracing::error!("cannot detach {}: {e}", at.display()),
        }
    });
    let poller = fs.clone();
    let interval = opts.poll_interval;
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(interval);
            if let Err(e) = poller.poll() {
                tracing::warn!("polling for new versions: {e}");
            }
        }
    });
    ready();
    let res = main.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
    if let Some(t) = versions_thread {
        let _ = t.join();
    }
    fs.ended();
    res
}
