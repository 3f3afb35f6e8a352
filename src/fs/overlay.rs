//! `staging/`: the writable overlay, as the kernel sees it (inode numbers
//! are staging row ids: `ino.rs`); `crate::staging` does the work.

use super::stored::{Origin, StoredFile};
use super::*;

/// `staging/`'s state.
pub(super) struct StagingArea {
    /// None on a read-only mount.
    pub(super) area: Option<Mutex<Staging>>,
    /// The version staging was last seen built on, for what must answer
    /// without waiting on staging's lock (`staging_version_now`).
    pub(super) base: AtomicU64,
    /// Writes to staged copies, told to a commit without staging's lock.
    pub(super) writes: Arc<Writes>,
    /// Which staged files the kernel reads and writes itself.
    pub(super) passthrough: super::passthrough::Passthrough,
    /// One commit at a time; others wait their turn.
    pub(super) commit_turn: Mutex<()>,
}

impl MountFs {
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
            st = self.staging()?;
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

    pub(super) fn staging(&self) -> Result<MutexGuard<'_, Staging>> {
        // Staging's database is on disk, and its lock is held across I/O.
        crate::nowait::check()?;
        match &self.staging.area {
            Some(s) => Ok(lock(s)),
            None => Err(Error::fs(
                FsError::ReadOnly,
                "staging/ (mounted --read-only)",
            )),
        }
    }

    pub(super) fn staging_attr(&self, st: &Staging, n: &SNode) -> Result<Attr> {
        let seen = st.seen(n);
        // A folder's `..` and each subfolder's link to it count, as POSIX
        // file systems count them.
        let nlink = match n.kind {
            Kind::Dir => 2 + st.subdirs(&self.repo, n)?,
            _ => st.names(n)?,
        };
        Ok(Attr {
            ino: Ino::staged(n.id),
            kind: staging_kind(n.kind),
            size: seen.size,
            perm: if n.kind == Kind::Symlink {
                0o777
            } else {
                n.mode as u16
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

    /// An open handle of staged file `node`: what is left of a file
    /// unlinked while open (POSIX: it lives until its last close).
    pub(super) fn handle_of(&self, node: u64) -> Option<u64> {
        lock(&self.handles).iter().find_map(|(fh, h)| match h {
            Handle::Upper { node: n, .. } if *n == node => Some(*fh),
            _ => None,
        })
    }

    pub(super) fn orphan_attr(&self, ino: u64, fh: u64) -> Result<Attr> {
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
            atime: Mtime(m.atime(), m.atime_nsec() as u32),
            ctime: Mtime(m.ctime(), m.ctime_nsec() as u32),
            rdev: 0,
            ttl: Duration::ZERO,
        })
    }

    pub fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let (file, node) = match lock(&self.handles).get(&fh) {
            Some(Handle::Upper {
                file,
                node,
                writable: true,
            }) => (file.clone(), *node),
            Some(Handle::Stored(_)) => return Err(read_only()),
            _ => return Err(Error::fs(FsError::Invalid, "file not open for writing")),
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&*file);
        let _writing = self.staging.writes.begin(node, offset);
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
    pub(super) fn open_writers(&self) -> HashSet<u64> {
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

    pub(super) fn staging_parent(&self, parent: u64) -> Result<u64> {
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
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        target: &[u8],
        rdev: u64,
    ) -> Result<Attr> {
        let parent = self.staging_parent(parent)?;
        let st = self.staging()?;
        let kind = match kind {
            FileKind::File => Kind::File,
            FileKind::Dir => Kind::Dir,
            FileKind::Symlink => Kind::Symlink,
            FileKind::Special(s) => Kind::Special(s),
        };
        let n = st.create(&self.repo, parent, name, kind, mode, uid, gid, target, rdev)?;
        self.staging_attr(&st, &n)
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
        let attr = self.make(parent, name, FileKind::File, mode, uid, gid, b"", 0)?;
        let opened = self.open(
            attr.ino,
            flags & !libc::O_TRUNC,
            &Caller { uid, gid, pid: 0 },
        )?;
        Ok((attr, opened))
    }

    /// A further name for staged file `ino`.
    pub fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Attr> {
        let parent = self.staging_parent(parent)?;
        let Ino::Staged(id) = Ino::of(ino) else {
            return Err(Error::fs(
                FsError::NotPermitted,
                "a link across file systems",
            ));
        };
        let st = self.staging()?;
        let n = st.link(&self.repo, id, parent, name)?;
        self.staging_attr(&st, &n)
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
        (atime, mtime): (Option<Mtime>, Option<Mtime>),
        fh: Option<u64>,
    ) -> Result<Attr> {
        let id = match Ino::of(ino) {
            // `echo > commit` truncates first
            Ino::ControlFile(_) => return control::attr(self, ino),
            Ino::Staged(id) => id,
            _ => return Err(read_only()),
        };
        let mut st = self.staging()?;
        if st.get(id)?.is_none()
            && let Some(fh) = fh.or_else(|| self.handle_of(id))
        {
            // Unlinked while open: only the open file is left to change
            // (`fchmod` and `ftruncate` come with no handle, or another's).
            drop(st);
            if let Some(Handle::Upper { file, .. }) = lock(&self.handles).get(&fh) {
                if let Some(size) = size {
                    let _writing = self.staging.writes.begin(id, 0);
                    file.set_len(size)
                        .map_err(|e| Error::io("staged file", e))?;
                }
                if let Some(mode) = mode {
                    use std::os::unix::fs::PermissionsExt;
                    file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
                        .map_err(|e| Error::io("staged file", e))?;
                }
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
                    let (held, path) = self.copied_up(st, id, size > 0)?;
                    st = held;
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(|e| Error::io(path.display(), e))?;
                    Arc::new(f)
                }
            };
            let _writing = self.staging.writes.begin(id, 0);
            file.set_len(size)
                .map_err(|e| Error::io("staged file", e))?;
        }
        st.set_attr(id, mode, (uid, gid), atime, mtime)?;
        let n = st.node(id)?;
        self.staging_attr(&st, &n)
    }

    pub(super) fn commit_staging(&self, message: &str, uid: u32) -> Result<Record> {
        let author = user_name(uid);
        let meta = CommitMeta {
            dataset: &self.dataset,
            message: message.trim(),
            author: &author,
        };
        let _turn = lock(&self.staging.commit_turn);
        let progress = Arc::new(crate::progress::Counters::default());
        let _told = control::UnderWay::begin(self, &meta, progress.clone());
        // The commit hashes and compresses on a thread of its own at a lower
        // priority, so the threads answering readers get the cores first.
        let record = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("commit".into())
                // Building trees recurses once per directory level (up to
                // limits::MAX_DEPTH); a default 2 MiB stack is not enough.
                .stack_size(64 << 20)
                .spawn_scoped(s, || {
                    lower_priority();
                    // Files open for writing are listed under the staging lock:
                    // an open adds its handle before it lets the lock go, so none
                    // is missed (its staged copy would be deleted under the writer).
                    crate::commit::staged::commit_staging(
                        &self.repo,
                        &meta,
                        || self.staging(),
                        || self.open_writers(),
                        &*progress,
                    )
                })
                .map_err(|e| Error::io("starting the commit's thread", e))?
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?;
        self.poll()?;
        Ok(record)
    }

    pub(super) fn staging_lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        let st = self.staging()?;
        let n = st
            .lookup(&self.repo, parent, name)?
            .ok_or_else(|| not_found(name))?;
        self.staging_attr(&st, &n)
    }

    pub(super) fn staging_getattr(&self, id: u64) -> Result<Attr> {
        let st = self.staging()?;
        let n = st.node(id)?;
        self.staging_attr(&st, &n)
    }

    pub(super) fn staging_readdir(&self, id: u64) -> Result<Vec<DirEntry>> {
        Ok(self
            .staging_readdir_plus(id)?
            .into_iter()
            .map(|(e, _)| e)
            .collect())
    }

    /// A staging folder's entries and attributes, under one hold of the lock.
    pub(super) fn staging_readdir_plus(&self, id: u64) -> Result<Vec<(DirEntry, Attr)>> {
        let st = self.staging()?;
        let children = st.children(&self.repo, id)?;
        // Subfolders not listed yet are counted in their trees: read
        // together, not one by one (best effort: a failure shows below).
        let trees: Vec<BlobRef> = children.iter().filter_map(|n| n.tree).collect();
        let _ = self.repo.load_trees(&trees);
        children
            .into_iter()
            .map(|n| {
                let attr = self.staging_attr(&st, &n)?;
                let entry = DirEntry {
                    ino: Ino::staged(n.id),
                    kind: staging_kind(n.kind),
                    name: n.name,
                };
                Ok((entry, attr))
            })
            .collect()
    }

    pub(super) fn open_staged(&self, id: u64, flags: i32, writing: bool) -> Result<Opened> {
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
            let file = StoredFile::new(
                n.chunks.unwrap_or_default(),
                None,
                Origin::Said(path),
                self.versions.read_ahead.bytes,
            );
            let through = self.staging.passthrough.choose(id, false);
            let fh = self.add_handle(Handle::Stored(Arc::new(file)));
            self.staging.passthrough.bind(fh, id, through, None);
            return Ok(Opened {
                fh,
                keep_cache: false,
                direct_io: false,
                flush: false,
                backing: None,
            });
        }
        // Held until the handle is added: a commit lists open writers
        // under the lock, so none is missed.
        let (_held, path) = self.copied_up(st, id, !truncate)?;
        let _writing = (truncate && writing).then(|| self.staging.writes.begin(id, 0));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writing)
            .truncate(truncate && writing)
            .open(&path)
            .map_err(|e| Error::io(path.display(), e))?;
        let file = Arc::new(file);
        let through = self.staging.passthrough.choose(id, true);
        let fh = self.add_handle(Handle::Upper {
            file: file.clone(),
            node: id,
            writable: writing,
        });
        // Told before the kernel can write: a commit must know the copy
        // may change under it.
        let direct = (through && writing).then(|| self.staging.writes.direct(id));
        self.staging.passthrough.bind(fh, id, through, direct);
        Ok(Opened {
            fh,
            keep_cache: false,
            direct_io: false,
            flush: false,
            backing: through.then_some(file),
        })
    }

    /// Puts staged `paths` back as the base version (`version` None) or
    /// version `version` has them (`detafs restore`, `detafs checkout`).
    /// Under a policy, `caller` reaches only versions and paths it may
    /// see: another is as one that does not exist.
    pub(super) fn checkout(
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
                let base = self.staging()?.base_version()?;
                self.record(base).ok_or_else(|| {
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
        self.staging()?.checkout(&self.repo, &record.tree, &names)
    }

    /// A write to `.detafs/commit`: its message committed; the handle then
    /// reads the new version's log entry (empty if the commit failed).
    fn commit_write(
        &self,
        outcome: Arc<Mutex<Option<Vec<u8>>>>,
        data: &[u8],
        uid: u32,
    ) -> Result<usize> {
        let res = control::commit(self, data, uid);
        *lock(&outcome) = Some(match &res {
            Ok(record) => control::log_line(record),
            Err(_) => Vec::new(),
        });
        res.map(|_| data.len())
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8], uid: u32) -> Result<usize> {
        enum Target {
            Upper(Arc<File>, u64),
            Commit(Arc<Mutex<Option<Vec<u8>>>>),
            Order(Arc<Mutex<Vec<u8>>>),
        }
        // The handles' lock is let go before the write (or the commit) runs:
        // those take staging's lock, under which the handles' is taken.
        let target = match lock(&self.handles).get(&fh) {
            Some(Handle::Upper {
                file,
                node,
                writable: true,
            }) => Target::Upper(file.clone(), *node),
            Some(Handle::Commit(c)) => Target::Commit(c.clone()),
            Some(Handle::Order(_, text, _)) => Target::Order(text.clone()),
            Some(_) => return Err(Error::fs(FsError::Invalid, "file not open for writing")),
            // A file the kernel opened without asking: this mount is read-only.
            None if self.opens_skipped() => return Err(read_only()),
            None => return Err(Error::fs(FsError::Invalid, "bad file handle")),
        };
        let (file, node) = match target {
            Target::Upper(file, node) => (file, node),
            Target::Commit(c) => return self.commit_write(c, data, uid),
            Target::Order(text) => return control::write_order(&text, data),
        };
        let _writing = self.staging.writes.begin(node, offset);
        file.write_all_at(data, offset)
            .map_err(|e| Error::io("staged file", e))?;
        Ok(data.len())
    }
}

/// Bytes `[offset, offset+size)` of a staged copy (fewer at its end).
pub(super) fn read_staged(file: &File, offset: u64, size: u32) -> Result<Vec<u8>> {
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

/// Nice 10 for the calling thread (on Linux the nice value is per thread;
/// threads it starts inherit it). Best effort.
fn lower_priority() {
    // SAFETY: gettid and setpriority take no pointers.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}
