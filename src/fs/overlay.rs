//! `staging/`: the writable overlay, as the kernel sees it (inode numbers
//! are staging row ids: `ino.rs`); `crate::staging` does the work. The
//! staged copies open are this namespace's handles.

use super::versions::stored::{Origin, StoredFile};
use super::{Attr, DirEntry, Ino, MUTABLE_TTL, Opened, name_str, not_found};
use crate::commit::CommitMeta;
use crate::error::{Error, FsError, Result};
use crate::repo::Repo;
use crate::snapshot::{Mtime, Record};
use crate::staging::{Kind, SNode, Staging, Writes};
use crate::store::pack::BlobRef;
use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, HashSet};

/// How often a commit waiting for its turn looks whether it was withdrawn.
const TURN_CHECK: std::time::Duration = std::time::Duration::from_millis(50);
use crate::store::sealed_file::{LocalFile, Sealing};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// `staging/`'s state.
pub(super) struct StagingArea {
    repo: Arc<Repo>,
    /// None on a read-only mount.
    area: Option<Mutex<Staging>>,
    /// The version staging was last seen built on, for what must answer
    /// without waiting on staging's lock (`base_now`).
    base: AtomicU64,
    /// Writes to staged copies, told to a commit without staging's lock.
    writes: Arc<Writes>,
    /// Which staged files the kernel reads and writes itself.
    pub(super) passthrough: super::passthrough::Passthrough,
    /// How staged copies are kept (`Repo::local_sealing`).
    sealing: Sealing,
    /// One commit at a time; others wait their turn.
    commit_turn: Mutex<()>,
    /// Staged copies open, by handle.
    copies: Mutex<HashMap<u64, Copy>>,
    /// Staging read on a connection of its own (status), so that reading
    /// it at length never holds staging's lock.
    reader: Option<Mutex<Staging>>,
    /// The status last read, with staging's state then.
    made: Mutex<Option<((u64, u64), Status)>>,
    /// What the trash holds, as last changed through this mount (health
    /// reads it without waiting on staging's lock).
    trash: Mutex<serde_json::Value>,
    /// The trash's bounds file, and when the trash was last pruned with
    /// that file's mtime then (`prune_trash`).
    trash_limits: Option<std::path::PathBuf>,
    pruned: Mutex<Option<(std::time::Instant, Option<std::time::SystemTime>)>>,
}

/// How often the trash's age bound is applied when its bounds did not
/// change (entries are kept for days).
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Staged changes against the base version (`Staging::status`).
pub(super) type Status = Arc<Vec<(char, Vec<u8>)>>;

/// A staged file's own copy, open.
#[derive(Clone)]
pub(super) struct Copy {
    file: Arc<LocalFile>,
    /// Where it is, for errors.
    path: Arc<std::path::Path>,
    node: u64,
    writable: bool,
    /// Opened with `O_APPEND`: each write goes to the copy's end, wherever
    /// the kernel, which may still hold the size the file had before a
    /// restore or checkout replaced it, says it is.
    append: bool,
}

/// What opening a staged file gave: its own copy, or (read-only and
/// unchanged) the stored file it still is.
pub(super) enum StagedOpen {
    Copy(Opened),
    Stored(StoredFile),
}

impl StagingArea {
    pub(super) fn new(repo: Arc<Repo>, staging: Option<Staging>) -> Result<StagingArea> {
        let reader = staging.as_ref().map(Staging::reader).transpose()?;
        let trash = staging
            .as_ref()
            .map_or(serde_json::Value::Null, trash_summary);
        let trash_limits = staging.as_ref().map(Staging::trash_limits_file);
        let sealing = staging
            .as_ref()
            .map(|s| s.sealing().clone())
            .unwrap_or_default();
        Ok(StagingArea {
            sealing,
            repo,
            writes: staging.as_ref().map(|s| s.writes()).unwrap_or_default(),
            base: AtomicU64::new(
                staging
                    .as_ref()
                    .map_or(0, |s| s.base_version().unwrap_or(0)),
            ),
            area: staging.map(Mutex::new),
            passthrough: super::passthrough::Passthrough::default(),
            commit_turn: Mutex::new(()),
            copies: Mutex::default(),
            reader: reader.map(Mutex::new),
            made: Mutex::default(),
            trash: Mutex::new(trash),
            trash_limits,
            pruned: Mutex::default(),
        })
    }

    /// The kernel agreed to pass staged files' I/O through to their
    /// copies: taken where the copies hold their bytes as they are (the
    /// kernel cannot read sealed ones).
    pub(super) fn enable_passthrough(&self) {
        // Tests take it away (`FAILPOINTS=passthrough=return(fail)`): the
        // daemon's own I/O, as on a kernel without it.
        if !self.sealing.is_sealed() && !crate::hold::failing("passthrough") {
            self.passthrough.enable();
        }
    }

    /// Whether the mount has a `staging/` (not `--read-only`).
    pub(super) fn present(&self) -> bool {
        self.area.is_some()
    }

    /// Staging itself, locked.
    pub(super) fn lock(&self) -> Result<MutexGuard<'_, Staging>> {
        // Staging's database is on disk, and its lock is held across I/O.
        crate::nowait::check()?;
        match &self.area {
            Some(s) => Ok(s.lock()),
            None => Err(Error::fs(FsError::ReadOnly, "staging/ (a read-only mount)")),
        }
    }

    /// The version staging is built on, without waiting: read from staging
    /// when its lock is free, else as last read (a commit may hold the lock
    /// for a moment; what answers from memory must not wait).
    pub(super) fn base_now(&self) -> Option<u64> {
        let st = self.area.as_ref()?;
        // Read from staging's database: not where nothing may wait.
        let free = (!crate::nowait::refused()).then(|| st.try_lock()).flatten();
        if let Some(v) = free.and_then(|s| s.base_version().ok()) {
            self.base.store(v, Ordering::Relaxed);
        }
        Some(self.base.load(Ordering::Relaxed))
    }

    /// Staged changes against the base version, read without staging's
    /// lock (on the reader), and made again only when staging changed
    /// since: a `cat .detafs/status` asks for its size and its content.
    /// Also the state they were read in, if nothing changed meanwhile.
    pub(super) fn status(&self) -> Result<(Option<(u64, u64)>, Status)> {
        crate::nowait::check()?;
        let Some(reader) = &self.reader else {
            return Ok((None, Status::default()));
        };
        let reader = reader.lock();
        let before = reader.generation()?;
        if let Some((made, status)) = &*self.made.lock()
            && Some(*made) == before
        {
            return Ok((before, status.clone()));
        }
        let status = Status::new(reader.status(&self.repo)?);
        let seen = before.filter(|_| matches!(reader.generation(), Ok(now) if now == before));
        if let Some(seen) = seen {
            *self.made.lock() = Some((seen, status.clone()));
        }
        Ok((seen, status))
    }

    /// Moves a clean staging area along to the newest of `records` (a
    /// version committed elsewhere): found clean without staging's lock,
    /// moved under it if nothing changed since. Skipped while staging is
    /// busy or changing: the next poll tries again.
    pub(super) fn follow(&self, records: &[Record]) -> Result<()> {
        let (Some(area), Some(latest)) = (&self.area, records.last()) else {
            return Ok(());
        };
        // Staging's base only moves forward.
        if self.base.load(Ordering::Relaxed) >= latest.version {
            return Ok(());
        }
        let (Some(seen), status) = self.status()? else {
            return Ok(());
        };
        if !status.is_empty() {
            return Ok(());
        }
        let Some(st) = area.try_lock() else {
            return Ok(());
        };
        // Rows change only under the lock held now: unchanged since read?
        let reader = self.reader.as_ref().map(|r| r.lock());
        if reader.map(|r| r.generation()).transpose()?.flatten() != Some(seen) {
            return Ok(());
        }
        st.fast_forward(&self.repo, records, latest)?;
        self.base
            .store(st.base_version().unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }

    /// Row `id`'s staged copy, made if it has none, with staging's lock
    /// `st` let go while the copy is written (a copy-up of a large file
    /// reads it whole: every other request to staging, `.detafs/status`
    /// and the commit would wait on it), then published under the lock,
    /// which is returned held again.
    fn copied_up<'a>(
        &'a self,
        mut st: MutexGuard<'a, Staging>,
        id: u64,
        keep_content: bool,
    ) -> Result<(MutexGuard<'a, Staging>, std::path::PathBuf)> {
        loop {
            let plan = match st.plan_copy_up(id, keep_content)? {
                Ok(path) => return Ok((st, path)),
                Err(plan) => plan,
            };
            drop(st);
            let written = plan.write(&self.repo);
            st = self.lock()?;
            if let Err(e) = written {
                plan.discard();
                return Err(e);
            }
            // Changed meanwhile (a checkout gave it other content): again.
            if let Some(path) = st.publish_copy(plan)? {
                return Ok((st, path));
            }
        }
    }

    fn attr(&self, st: &Staging, n: &SNode) -> Result<Attr> {
        let seen = st.seen(n);
        // A folder's `..` and each subfolder's link to it count, as POSIX
        // file systems count them.
        let nlink = match n.kind {
            Kind::Dir => 2 + st.subdirs(&self.repo, n)?,
            _ => st.names(n)?,
        };
        Ok(Attr {
            ino: Ino::staged(n.id),
            kind: n.kind,
            size: seen.size,
            perm: if n.kind == Kind::Symlink {
                0o777
            } else {
                (n.mode & 0o7777) as u16
            },
            nlink,
            uid: n.uid,
            gid: n.gid,
            mtime: seen.mtime,
            atime: seen.atime,
            ctime: seen.ctime,
            rdev: n.rdev,
            ttl: MUTABLE_TTL,
        })
    }

    /// Handle `fh`'s staged copy, if it is one.
    pub(super) fn copy(&self, fh: u64) -> Option<Copy> {
        self.copies.lock().get(&fh).cloned()
    }

    /// An open copy of staged file `node`: what is left of a file unlinked
    /// while open (POSIX: it lives until its last close).
    fn open_copy_of(&self, node: u64) -> Option<Copy> {
        self.copies
            .lock()
            .values()
            .find(|c| c.node == node)
            .cloned()
    }

    /// Staged files open with their copy: a commit keeps them staged (a
    /// writer's next bytes must land in staging; a reader's copy may be
    /// the one the kernel passes its inode through to).
    fn open_copies(&self) -> HashSet<u64> {
        self.copies.lock().values().map(|c| c.node).collect()
    }

    /// A staged file unlinked while open, through its open copy.
    fn orphan_attr(ino: u64, copy: &Copy) -> Result<Attr> {
        let io = |e| Error::io(copy.path.display(), e);
        let m = copy.file.file().metadata().map_err(io)?;
        use std::os::unix::fs::MetadataExt;
        Ok(Attr {
            ino,
            kind: Kind::File,
            size: copy.file.size().map_err(io)?,
            perm: (m.mode() & 0o7777) as u16,
            nlink: 0,
            uid: m.uid(),
            gid: m.gid(),
            mtime: Mtime::of_stat(m.mtime(), m.mtime_nsec()),
            atime: Mtime::of_stat(m.atime(), m.atime_nsec()),
            ctime: Mtime::of_stat(m.ctime(), m.ctime_nsec()),
            rdev: 0,
            ttl: Duration::ZERO,
        })
    }

    pub(super) fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        let st = self.lock()?;
        let n = st
            .lookup(&self.repo, parent, name)?
            .ok_or_else(|| not_found(name))?;
        self.attr(&st, &n)
    }

    pub(super) fn getattr(&self, id: u64) -> Result<Attr> {
        let st = self.lock()?;
        let n = st.node(id)?;
        self.attr(&st, &n)
    }

    /// Like `getattr`, but a staged file unlinked while open still answers
    /// through an open handle, `fh` or another.
    pub(super) fn getattr_open(&self, id: u64, fh: Option<u64>) -> Result<Attr> {
        match self.getattr(id) {
            Err(
                e @ Error::Fs {
                    kind: FsError::Stale,
                    ..
                },
            ) => match fh
                .and_then(|fh| self.copy(fh))
                .or_else(|| self.open_copy_of(id))
            {
                Some(c) => Self::orphan_attr(Ino::staged(id), &c),
                None => Err(e),
            },
            other => other,
        }
    }

    pub(super) fn readlink(&self, id: u64) -> Result<Vec<u8>> {
        Ok(self.lock()?.node(id)?.target)
    }

    /// A staging folder's entries and attributes, under one hold of the lock.
    pub(super) fn readdir_plus(&self, id: u64) -> Result<Vec<(DirEntry, Attr)>> {
        let st = self.lock()?;
        let children = st.children(&self.repo, id)?;
        // Subfolders not listed yet are counted in their trees: read
        // together, not one by one (best effort: a failure shows below).
        let trees: Vec<BlobRef> = children.iter().filter_map(|n| n.tree).collect();
        let _ = self.repo.load_trees(&trees);
        children
            .into_iter()
            .map(|n| {
                let attr = self.attr(&st, &n)?;
                let entry = DirEntry {
                    ino: Ino::staged(n.id),
                    kind: n.kind,
                    name: n.name,
                };
                Ok((entry, attr))
            })
            .collect()
    }

    /// Creates a staged entry in folder `parent` (a row id): `target` is a
    /// symlink's, `rdev` a device's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn make(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        mode: u32,
        (uid, gid): (u32, u32),
        target: &[u8],
        rdev: u64,
    ) -> Result<Attr> {
        let st = self.lock()?;
        let n = st.create(&self.repo, parent, name, kind, mode, uid, gid, target, rdev)?;
        self.attr(&st, &n)
    }

    /// A further name in folder `parent` for staged file `id`.
    pub(super) fn link(&self, id: u64, parent: u64, name: &[u8]) -> Result<Attr> {
        let st = self.lock()?;
        let n = st.link(&self.repo, id, parent, name)?;
        self.attr(&st, &n)
    }

    pub(super) fn remove(&self, parent: u64, name: &[u8], dir: bool) -> Result<()> {
        self.lock()?.remove(&self.repo, parent, name, dir)
    }

    pub(super) fn rename(
        &self,
        (parent, name): (u64, &[u8]),
        (new_parent, new_name): (u64, &[u8]),
        no_replace: bool,
    ) -> Result<()> {
        self.lock()?
            .rename(&self.repo, parent, name, new_parent, new_name, no_replace)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn setattr(
        &self,
        id: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        (atime, mtime): (Option<Mtime>, Option<Mtime>),
        fh: Option<u64>,
    ) -> Result<Attr> {
        let mut st = self.lock()?;
        let open = fh.and_then(|fh| self.copy(fh));
        if st.get(id)?.is_none()
            && let Some(copy) = open.clone().or_else(|| self.open_copy_of(id))
        {
            // Unlinked while open: only the open file is left to change
            // (`fchmod` and `ftruncate` come with no handle, or another's).
            drop(st);
            if let Some(size) = size {
                let _writing = self.writes.begin(id, 0);
                copy.file
                    .set_len(size)
                    .map_err(|e| Error::io(copy.path.display(), e))?;
            }
            if let Some(mode) = mode {
                use std::os::unix::fs::PermissionsExt;
                copy.file
                    .file()
                    .set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(|e| Error::io(copy.path.display(), e))?;
            }
            return Self::orphan_attr(Ino::staged(id), &copy);
        }
        if let Some(size) = size {
            let (file, path) = match open {
                Some(c) => (c.file, c.path),
                None => {
                    let (held, path) = self.copied_up(st, id, size > 0)?;
                    st = held;
                    // Read too: a sealed copy's last block is read as it is cut.
                    let f = self
                        .sealing
                        .open_with(&path, std::fs::OpenOptions::new().read(true).write(true))
                        .map_err(|e| Error::io(path.display(), e))?;
                    (Arc::new(f), path.as_path().into())
                }
            };
            let _writing = self.writes.begin(id, 0);
            file.set_len(size)
                .map_err(|e| Error::io(path.display(), e))?;
        }
        st.set_attr(id, mode, (uid, gid), atime, mtime)?;
        let n = st.node(id)?;
        self.attr(&st, &n)
    }

    /// Opens staged file `id` as handle `fh`.
    pub(super) fn open(
        &self,
        id: u64,
        flags: i32,
        writing: bool,
        fh: u64,
        read_ahead: u64,
    ) -> Result<StagedOpen> {
        let st = self.lock()?;
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
            let file = StoredFile::new(
                n.stored_chunks().to_vec(),
                None,
                Origin::Said(path),
                read_ahead,
            );
            let through = self.passthrough.choose(id, None)?;
            self.passthrough.bind(fh, id, through, None);
            return Ok(StagedOpen::Stored(file));
        }
        // Held until the handle is added: a commit lists open writers
        // under the lock, so none is missed.
        let (_held, path) = self.copied_up(st, id, !truncate)?;
        // Chosen before the open: an open refused changes nothing (truncates nothing).
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&path).map_err(|e| Error::io(path.display(), e))?;
        let through = self.passthrough.choose(id, Some((m.dev(), m.ino())))?;
        let _writing = (truncate && writing).then(|| self.writes.begin(id, 0));
        let file = self
            .sealing
            .open_with(
                &path,
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(writing)
                    .truncate(truncate && writing),
            )
            .map_err(|e| Error::io(path.display(), e))
            .inspect_err(|_| self.passthrough.unchoose(id, through))?;
        let file = Arc::new(file);
        let copy = Copy {
            file: file.clone(),
            path: path.as_path().into(),
            node: id,
            writable: writing,
            append: flags & libc::O_APPEND != 0,
        };
        self.copies.lock().insert(fh, copy);
        // Told before the kernel can write: a commit must know the copy
        // may change under it.
        let direct = (through && writing).then(|| self.writes.direct(id));
        self.passthrough.bind(fh, id, through, direct);
        Ok(StagedOpen::Copy(Opened {
            fh,
            keep_cache: false,
            direct_io: false,
            flush: false,
            backing: through.then(|| file.file().clone()),
        }))
    }

    /// Handle `fh` closed (whatever it was: a staged file read unchanged is
    /// counted by passthrough too).
    pub(super) fn release(&self, fh: u64) {
        self.copies.lock().remove(&fh);
        self.passthrough.release(fh);
    }

    /// Appends up to `size` bytes of the copy from `offset` on to `out`.
    pub(super) fn read(&self, c: &Copy, offset: u64, size: u32, out: &mut Vec<u8>) -> Result<()> {
        let at = out.len();
        out.resize(at + size as usize, 0);
        let got = c.file.read_at(&mut out[at..], offset);
        out.truncate(at + *got.as_ref().unwrap_or(&0));
        got.map(drop).map_err(|e| Error::io(c.path.display(), e))
    }

    pub(super) fn write(&self, c: &Copy, offset: u64, data: &[u8]) -> Result<usize> {
        if !c.writable {
            return Err(Error::fs(FsError::Invalid, "file not open for writing"));
        }
        let offset = match c.append {
            // The kernel sends one inode's writes one at a time.
            true => c.file.size().map_err(|e| Error::io(c.path.display(), e))?,
            false => offset,
        };
        let _writing = self.writes.begin(c.node, offset);
        c.file
            .write_all_at(data, offset)
            .map_err(|e| Error::io(c.path.display(), e))?;
        Ok(data.len())
    }

    pub(super) fn fallocate(&self, c: &Copy, offset: u64, length: u64, mode: i32) -> Result<()> {
        if !c.writable {
            return Err(Error::fs(FsError::Invalid, "file not open for writing"));
        }
        let _writing = self.writes.begin(c.node, offset);
        let (offset, length) = (i64::try_from(offset), i64::try_from(length));
        let (Ok(offset), Ok(length)) = (offset, length) else {
            return Err(Error::fs(
                FsError::Invalid,
                "fallocate beyond the largest file",
            ));
        };
        use nix::fcntl::FallocateFlags as F;
        let flags = F::from_bits_retain(mode);
        if !c.file.is_sealed() {
            return nix::fcntl::fallocate(&**c.file.file(), flags, offset, length)
                .map_err(|e| Error::io(c.path.display(), e.into()));
        }
        // A sealed copy has no holes to make or fill as the kernel does:
        // zeros are written where they are asked for, room is not kept.
        let (at, len) = (offset as u64, length as u64);
        let size = c.file.size().map_err(|e| Error::io(c.path.display(), e))?;
        let keep = flags.contains(F::FALLOC_FL_KEEP_SIZE);
        let end = match keep {
            true => (at + len).min(size),
            false => at + len,
        };
        let done = if flags.difference(F::FALLOC_FL_KEEP_SIZE).is_empty() {
            match keep || end <= size {
                true => Ok(()),
                false => c.file.set_len(end),
            }
        } else if flags == F::FALLOC_FL_PUNCH_HOLE | F::FALLOC_FL_KEEP_SIZE
            || flags.difference(F::FALLOC_FL_KEEP_SIZE) == F::FALLOC_FL_ZERO_RANGE
        {
            c.file.zero(at, end.saturating_sub(at))
        } else {
            return Err(Error::fs(
                FsError::Unsupported,
                "this fallocate mode on a sealed staged copy",
            ));
        };
        done.map_err(|e| Error::io(c.path.display(), e))
    }

    /// An acknowledged fsync of a staged file survives a crash: its data,
    /// its name in staging's folder and its row.
    pub(super) fn fsync(&self, c: &Copy) -> Result<()> {
        c.file
            .sync_all()
            .map_err(|e| Error::io(c.path.display(), e))?;
        let st = self.lock()?;
        crate::hold::hold("staging-sync");
        st.sync()
    }

    /// What handle `fh` reads, for error messages, if it is a staged copy.
    pub(super) fn describe(&self, fh: u64) -> Option<String> {
        self.copy(fh)
            .map(|c| format!("staged file (node {})", c.node))
    }

    /// Commits what staging holds, one commit at a time; `told` runs once
    /// it is this commit's turn and what it returns lives until the commit
    /// ends (`.detafs/progress`).
    /// Commits staging once no other commit through the mount runs;
    /// `progress` asked to stop while this one waits withdraws it.
    /// `started` is called when its turn comes.
    pub(super) fn commit(
        &self,
        meta: &CommitMeta,
        progress: &crate::progress::Counters,
        started: impl FnOnce(),
    ) -> Result<Record> {
        use crate::progress::Progress;
        let _turn = loop {
            if let Some(turn) = self.commit_turn.try_lock_for(TURN_CHECK) {
                break turn;
            }
            if progress.cancelled() {
                return Err(Error::Cancelled);
            }
        };
        if progress.cancelled() {
            return Err(Error::Cancelled);
        }
        started();
        // The commit hashes and compresses on a thread of its own at a lower
        // priority, so the threads answering readers get the cores first.
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("commit".into())
                // Building trees recurses once per directory level (up to
                // limits::MAX_DEPTH); a default 2 MiB stack is not enough.
                .stack_size(64 << 20)
                .spawn_scoped(s, || {
                    crate::sys::lower_thread_priority(10);
                    // Files open for writing are listed under the staging lock:
                    // an open adds its handle before it lets the lock go, so none
                    // is missed (its staged copy would be deleted under the writer).
                    crate::commit::staged::commit_staging(
                        &self.repo,
                        meta,
                        || self.lock(),
                        || self.open_copies(),
                        progress,
                    )
                })
                .map_err(|e| Error::io("starting the commit's thread", e))?
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Puts the staged paths `names` back as tree `source` has them.
    pub(super) fn checkout(
        &self,
        source: &BlobRef,
        names: &[Vec<Vec<u8>>],
        what: &str,
    ) -> Result<Vec<crate::staging::Stale>> {
        // The trees on the way to each path are read before the lock is
        // taken, so that under it they come from memory (errors are met
        // again, and reported, under the lock).
        for n in names {
            if let Ok(path) = crate::relpath::RelPath::from_names(n) {
                let _ = self.repo.lookup(source, &path);
            }
        }
        let st = self.lock()?;
        let stale = st.checkout(&self.repo, source, names, what);
        *self.trash.lock() = trash_summary(&st);
        stale
    }

    /// Brings back trash entry `entry` (None: the newest); `base` is the
    /// tree of staging's version.
    pub(super) fn undo(
        &self,
        base: Option<&BlobRef>,
        entry: Option<u64>,
    ) -> Result<Vec<crate::staging::Stale>> {
        let st = self.lock()?;
        let stale = st.undo(&self.repo, base, entry);
        *self.trash.lock() = trash_summary(&st);
        stale
    }

    /// The trash (health): its entries, the bytes they keep, its bounds;
    /// null on a read-only mount.
    pub(super) fn trash(&self) -> serde_json::Value {
        self.trash.lock().clone()
    }

    /// Drops what the trash keeps beyond its bounds (at each poll): at
    /// once when the bounds were set since, else once a minute.
    pub(super) fn prune_trash(&self) -> Result<()> {
        let Some(file) = &self.trash_limits else {
            return Ok(());
        };
        let set_at = std::fs::metadata(file).and_then(|m| m.modified()).ok();
        let due = match *self.pruned.lock() {
            Some((at, seen)) => seen != set_at || at.elapsed() >= PRUNE_EVERY,
            None => true,
        };
        if !due {
            return Ok(());
        }
        *self.pruned.lock() = Some((std::time::Instant::now(), set_at));
        let st = self.lock()?;
        let pruned = st.prune_trash();
        *self.trash.lock() = trash_summary(&st);
        pruned
    }

    /// How staged files' reads and writes are done (health).
    pub(super) fn io(&self) -> &'static str {
        match self.passthrough.enabled() {
            true => "passthrough",
            false => "daemon",
        }
    }
}

/// What the trash of `st` holds, for health: entries, bytes, bounds, the
/// newest; or why it cannot be read.
fn trash_summary(st: &Staging) -> serde_json::Value {
    let read = || -> Result<serde_json::Value> {
        let entries = st.trash()?;
        let limits = st.trash_limits()?;
        Ok(serde_json::json!({
            "entries": entries.len(),
            "bytes": entries.iter().map(|e| e.bytes).sum::<u64>(),
            "newest": entries.first().map(|e| format!("{} ({})", e.entry, e.what)),
            "keep_secs": limits.keep_secs,
            "max_bytes": limits.max_bytes,
        }))
    };
    read().unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }))
}
