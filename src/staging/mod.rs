//! The staging area: a durable, writable overlay on a dataset's base version.
//!
//! Its namespace is a table of nodes in SQLite (one row per staged file or
//! directory, keyed by a never-reused id that the mount uses as an inode;
//! `row.rs`). A directory row either stands for a whole version subtree it
//! has not expanded yet (`lower` tree ref) or has its children as rows. A
//! file row either reads through to a version's chunks (`lower` chunk refs)
//! or has been copied up into a local file `data/<id>` ("upper"). Deletions
//! are just removed rows. Everything is on local disk and survives a crash.
//! Beside the overlay operations here: `status.rs` (changes against the
//! base), `follow.rs` (moving to other versions), `freeze.rs` and
//! `writes.rs` (a commit's view while staging goes on changing).
//!
//! One process at a time owns a staging area (an exclusive `flock`): the mount
//! daemon while it runs, or `detafs commit` when no mount is up.

pub mod compare;
mod conflicts;
mod follow;
mod freeze;
mod restore;
mod row;
pub mod sealed_names;
mod status;
mod sweep;
pub mod trash;
mod writes;

pub use freeze::{Frozen, Read};
pub use restore::{Stale, asked_path, path_names};
pub use row::{COLUMNS, Kind, SCHEMA, SCHEMA_VERSION, SNode, row};
pub use writes::{Direct, Writes, settle};

use crate::error::{Error, FsError, Result};
use crate::limits;
use crate::read;
use crate::repo::Repo;
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Mtime, Node, Record};
use crate::store::pack::BlobRef;
use crate::store::sealed_file::Sealing;
use row::{ADDED_COLUMNS, bad_row, kind_code};
use rusqlite::{Connection, OptionalExtension, params};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const ROOT: u64 = 1;

/// Where a dataset's staging lives: `<root>/<store's state key>/<dataset>`
/// (see `Repo::state_key`). The root is made private if it is not.
pub fn staging_dir(root: &Path, repo: &Repo, dataset: &str) -> Result<PathBuf> {
    crate::private::ensure_dir(root)?;
    Ok(root.join(repo.state_key()).join(dataset))
}

pub struct Staging {
    db: Connection,
    dir: PathBuf,
    dataset: String,
    writes: Arc<Writes>,
    /// While a commit runs: staged copies whose rows went meanwhile, kept
    /// for the commit to read and removed when it ends.
    deferred: RefCell<Option<Vec<u64>>>,
    /// Staged copies dropped by a change not committed yet (`atomically`).
    dropping: RefCell<Option<Vec<u64>>>,
    /// During a restore or checkout: what the kernel may keep that it made
    /// stale (`restore.rs`).
    stale: RefCell<Option<Vec<Stale>>>,
    /// Dropped before the lock: no sweep outlives staging's owner.
    sweeper: sweep::Sweeper,
    /// Its store's versions hold atimes (format 2): else the atime is the
    /// mtime here too, so that status shows what a commit would store.
    keeps_atime: bool,
    /// How staged copies are kept (`Repo::local_sealing`).
    sealing: Sealing,
    /// The owner's lock; None on a reader (`reader`), which never writes.
    lock: Option<File>,
}

impl Staging {
    /// Opens (creating on first use) and locks the staging area of `dataset`.
    pub fn open(repo: &Repo, dir: &Path, dataset: &str) -> Result<Staging> {
        let records = repo.sync(dataset)?;
        crate::private::create_dir(&dir.join("data"))?;
        crate::private::tighten(dir)?;
        let lock_path = dir.join("lock");
        let lock = crate::private::create_file(&lock_path)
            .map_err(|e| Error::io(lock_path.display(), e))?;
        // One owner at a time: a mount, or a command (flock, let go when
        // the file closes, also when the process dies).
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::StagingBusy(dataset.to_string()));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io(lock_path.display(), e));
            }
        }
        let path = dir.join("staging.sqlite");
        let db = Connection::open(&path)?;
        let sealing = repo.local_sealing();
        sealed_names::register(&db, &sealing)?;
        crate::schema::check(&db, "staging database", &path, SCHEMA_VERSION)?;
        // Only the holder of the flock above writes this database; its
        // readers (`reader`) read alongside, as WAL lets them.
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        db.execute_batch(SCHEMA)?;
        db.execute_batch(trash::SCHEMA)?;
        // Staging areas made before a column existed gain it (`was` NULL:
        // changed; `rdev` 0; no times apart, no hard links).
        for (column, definition) in ADDED_COLUMNS {
            if db
                .prepare(&format!("SELECT {column} FROM nodes LIMIT 0"))
                .is_err()
            {
                db.execute_batch(&format!(
                    "ALTER TABLE nodes ADD COLUMN {column} {definition}"
                ))?;
            }
        }
        // A file's hard links are found by it.
        db.execute_batch(
            "CREATE INDEX IF NOT EXISTS nodes_link ON nodes(link) WHERE link IS NOT NULL",
        )?;
        crate::schema::mark(&db, SCHEMA_VERSION)?;
        let st = Staging {
            db,
            dir: dir.to_path_buf(),
            dataset: dataset.to_string(),
            writes: Arc::default(),
            deferred: RefCell::new(None),
            dropping: RefCell::new(None),
            stale: RefCell::new(None),
            sweeper: sweep::Sweeper::new(dir.join("data")),
            keeps_atime: repo.codec().format() >= 2,
            sealing,
            lock: Some(lock),
        };
        let new = st.get(ROOT)?.is_none();
        sealed_names::check(&st.db, &st.sealing, new)?;
        if new {
            let base = records.last();
            let m = Mtime::now();
            st.db.execute(
                "INSERT INTO nodes(id, parent, name, kind, mode, uid, gid, mtime_s, mtime_ns, size, tree)
                 VALUES (?1, 0, sealed(x''), 1, 493, ?2, ?3, ?4, ?5, 0, ?6)",
                params![
                    ROOT,
                    nix::unistd::getuid().as_raw(),
                    nix::unistd::getgid().as_raw(),
                    m.0,
                    m.1,
                    base.map(|b| serde_json::to_vec(&b.tree).expect("serializable"))
                ],
            )?;
            st.set_base(repo, base.map_or(0, |b| b.version))?;
        }
        st.repair()?;
        st.ensure_reserve();
        st.adopt_landed(repo, &records)?;
        st.tidy_trash();
        Ok(st)
    }

    /// The version staging was last brought up to date with (0: none).
    pub fn base_version(&self) -> Result<u64> {
        Ok(self
            .db
            .query_row("SELECT value FROM meta WHERE key = 'base'", [], |r| {
                r.get(0)
            })
            .optional()?
            .unwrap_or(0))
    }

    /// The tree of the version staging stands on (None: none yet), as this
    /// host knows it without asking (`Repo::known_records`), or, expired
    /// meanwhile, as its lease keeps it (`Repo::kept_record`).
    pub fn base_tree(&self, repo: &Repo) -> Result<Option<BlobRef>> {
        let base = self.base_version()?;
        if base == 0 {
            return Ok(None);
        }
        let known = repo
            .known_records(&self.dataset)?
            .into_iter()
            .find(|r| r.version == base);
        Ok(match known {
            Some(r) => Some(r.tree),
            None => repo.kept_record(&self.dataset, base)?.map(|r| r.tree),
        })
    }

    /// The tree of a commit under way: if the process dies after the record
    /// landed but before staging moved to it, the next open finds the record
    /// by this tree and moves staging then (`adopt_landed`).
    pub(crate) fn set_pending(&self, tree: Option<&BlobRef>) -> Result<()> {
        match tree {
            Some(t) => self.db.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('pending', ?1)",
                [serde_json::to_vec(t).expect("serializable")],
            )?,
            None => self
                .db
                .execute("DELETE FROM meta WHERE key = 'pending'", [])?,
        };
        Ok(())
    }

    /// Moves staging to a version its own interrupted commit created.
    fn adopt_landed(&self, repo: &Repo, records: &[Record]) -> Result<()> {
        let pending: Option<Vec<u8>> = self
            .db
            .query_row("SELECT value FROM meta WHERE key = 'pending'", [], |r| {
                r.get(0)
            })
            .optional()?;
        let Some(pending) = pending else {
            return Ok(());
        };
        let tree: BlobRef = serde_json::from_slice(&pending)
            .map_err(|e| Error::malformed("staging's pending commit", e))?;
        let base = self.base_version()?;
        if let Some(r) = records
            .iter()
            .find(|r| r.version > base && r.tree.id == tree.id)
        {
            tracing::info!(
                "an interrupted commit of {} had landed as v{}; staging follows it",
                self.dataset,
                r.version
            );
            self.set_base(repo, r.version)?;
            self.set_pending(None)?;
        }
        Ok(())
    }

    /// Moves staging's base to `version`, and its lease with it: gc keeps
    /// the old base and the new while staging may stand on either.
    fn set_base(&self, repo: &Repo, version: u64) -> Result<()> {
        let was = self.base_version()?;
        self.db.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('base', ?1)",
            [version],
        )?;
        let versions: Vec<u64> = [was, version].into_iter().filter(|v| *v > 0).collect();
        if let Err(e) = repo.lease_base(&self.dataset, &self.lease_id()?, &versions) {
            tracing::warn!(
                "staging of {}: its lease on v{version} was not written: {e}",
                self.dataset
            );
        }
        Ok(())
    }

    /// This staging area's name in the store's leases (made once).
    fn lease_id(&self) -> Result<String> {
        let id: Option<String> = self
            .db
            .query_row("SELECT value FROM meta WHERE key = 'lease'", [], |r| {
                r.get(0)
            })
            .optional()?;
        if let Some(id) = id {
            return Ok(id);
        }
        let id = hex::encode(rand::random::<[u8; 16]>());
        self.db.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('lease', ?1)",
            [&id],
        )?;
        Ok(id)
    }

    /// Makes staging's state durable: rows (SQLite runs `synchronous=NORMAL`
    /// in WAL mode, safe against a crash of the process; a checkpoint syncs
    /// it for a power loss too) and the names of staged copies.
    pub fn sync(&self) -> Result<()> {
        self.db
            .query_row("PRAGMA wal_checkpoint(FULL)", [], |_| Ok(()))?;
        sync_dir(&self.dir.join("data"))
    }

    /// Rows of staged copies whose data file is missing (a crash between a
    /// new file's row and its file): each gets an empty file, as it was
    /// created, and is named in the log. Files no row refers to (a copy-up
    /// or a commit's removals cut short) are removed.
    fn repair(&self) -> Result<()> {
        let rows: HashMap<u64, Vec<u8>> = self
            .db
            .prepare("SELECT id, opened(name) FROM nodes WHERE upper = 1")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (&id, name) in &rows {
            let path = self.upper_path(id);
            if !path.exists() {
                tracing::warn!(
                    "staging of {}: {} had no staged data after a crash; it is empty now",
                    self.dataset,
                    crate::escape::line(name)
                );
                crate::private::create_file(&path).map_err(|e| Error::io(path.display(), e))?;
            }
        }
        let data = self.dir.join("data");
        for entry in std::fs::read_dir(&data).map_err(|e| Error::io(data.display(), e))? {
            let path = entry.map_err(|e| Error::io(data.display(), e))?.path();
            let id = path
                .file_name()
                .and_then(|n| n.to_str()?.parse::<u64>().ok());
            if id.is_none_or(|id| !rows.contains_key(&id)) {
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(())
    }

    /// A read-only view of this staging area on a connection of its own,
    /// for what reads staging at length (status) without holding up its
    /// owner: each call reads one consistent state (WAL).
    pub fn reader(&self) -> Result<Staging> {
        use rusqlite::OpenFlags;
        let db = Connection::open_with_flags(
            self.dir.join("staging.sqlite"),
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        sealed_names::register(&db, &self.sealing)?;
        Ok(Staging {
            db,
            dir: self.dir.clone(),
            dataset: self.dataset.clone(),
            writes: self.writes.clone(),
            deferred: RefCell::new(None),
            dropping: RefCell::new(None),
            stale: RefCell::new(None),
            sweeper: sweep::Sweeper::new(self.dir.join("data")),
            keeps_atime: self.keeps_atime,
            sealing: self.sealing.clone(),
            lock: None,
        })
    }

    /// Whether this is the owner, which may write (not a `reader`).
    fn owns(&self) -> bool {
        self.lock.is_some()
    }

    /// Staging's state as this connection sees it now: it changed if this
    /// did (rows changed through any connection, or a write to a staged
    /// copy began). None while a copy may change unseen (open for writing
    /// through passthrough): no state can be named then.
    pub fn generation(&self) -> Result<Option<(u64, u64)>> {
        if self.writes.direct_open() {
            return Ok(None);
        }
        let others: u64 = self
            .db
            .pragma_query_value(None, "data_version", |r| r.get(0))?;
        Ok(Some((
            others.wrapping_add(self.db.total_changes()),
            self.writes.begun(),
        )))
    }

    /// Where writes to staged copies are told (they do not take the lock).
    pub fn writes(&self) -> Arc<Writes> {
        self.writes.clone()
    }

    pub fn upper_path(&self, id: u64) -> PathBuf {
        self.dir.join("data").join(id.to_string())
    }

    /// How staged copies are kept: their bytes are read and written
    /// through it, never as the files hold them.
    pub fn sealing(&self) -> &Sealing {
        &self.sealing
    }

    pub fn get(&self, id: u64) -> Result<Option<SNode>> {
        self.db
            .prepare_cached(&format!("SELECT {COLUMNS} FROM nodes WHERE id = ?1"))?
            .query_row([id], row)
            .optional()
            .map_err(|e| bad_row(&format!("node {id}"), e))
    }

    /// Row `id`. One that is gone (a restore, a checkout or a commit
    /// removed it while the kernel kept its name) is stale, not missing:
    /// the kernel then looks its name up again, so a create right after
    /// such a request makes the name anew instead of failing.
    pub fn node(&self, id: u64) -> Result<SNode> {
        self.get(id)?
            .ok_or_else(|| Error::fs(FsError::Stale, format!("staging inode {id}")))
    }

    fn dir_node(&self, id: u64) -> Result<SNode> {
        let n = self.node(id)?;
        if n.kind != Kind::Dir {
            return Err(Error::fs(FsError::NotDir, String::from_utf8_lossy(&n.name)));
        }
        Ok(n)
    }

    /// Turns a directory that stands for a version subtree into rows, and
    /// the folders below it that hold names of a link group likewise
    /// (without recursion: a hostile tree may nest deep).
    pub(super) fn expand(&self, repo: &Repo, dir: &SNode) -> Result<()> {
        self.atomically(|| {
            let mut todo = vec![dir.clone()];
            while let Some(dir) = todo.pop() {
                let Some(tree_ref) = dir.tree else {
                    continue;
                };
                let tree = repo.tree(&tree_ref)?;
                for e in &tree.entries {
                    let id = self.insert_row(dir.id, &e.name, &e.node, (dir.uid, dir.gid))?;
                    if matches!(e.node, Node::Dir { links: true, .. }) {
                        todo.push(self.node(id)?);
                    }
                }
                self.db.execute(
                    "UPDATE nodes SET tree = NULL, was = ?2 WHERE id = ?1",
                    params![dir.id, serde_json::to_vec(&tree_ref).expect("serializable")],
                )?;
            }
            Ok(())
        })
    }

    /// Runs `op` as one transaction (one write to the log, all or nothing),
    /// or within the one already open. Staged copies it drops go only once
    /// it committed: a failed one keeps them, as it keeps their rows.
    fn atomically<T>(&self, op: impl FnOnce() -> Result<T>) -> Result<T> {
        if !self.db.is_autocommit() {
            return op();
        }
        *self.dropping.borrow_mut() = Some(Vec::new());
        let res = (|| {
            let tx = self.db.unchecked_transaction()?;
            let out = op()?;
            tx.commit()?;
            Ok(out)
        })();
        let dropped = self.dropping.borrow_mut().take().unwrap_or_default();
        if res.is_ok() {
            for id in dropped {
                self.drop_copy(id);
            }
        }
        res
    }

    /// Makes a row of a version's entry; a folder with names of a link
    /// group below it is expanded at once, so that every name of a file is
    /// a row before any is changed.
    fn insert_version_node(
        &self,
        repo: &Repo,
        parent: u64,
        name: &[u8],
        node: &Node,
        owner: (u32, u32),
    ) -> Result<u64> {
        let id = self.insert_row(parent, name, node, owner)?;
        if matches!(node, Node::Dir { links: true, .. }) {
            self.expand(repo, &self.node(id)?)?;
        }
        Ok(id)
    }

    /// The row of a version's entry. A name of a link group whose file
    /// staging holds already (as that version has it) becomes a further
    /// name of it; one that differs from it (a hostile or merged tree)
    /// stays a file of its own.
    fn insert_row(
        &self,
        parent: u64,
        name: &[u8],
        node: &Node,
        (uid, gid): (u32, u32),
    ) -> Result<u64> {
        let kind = Kind::of(node);
        let group = node.link().map(|l| l.group as i64);
        let joined = match group {
            Some(group) => self
                .db
                .prepare_cached(
                    "SELECT id FROM nodes WHERE grp = ?1 AND kind = ?2 AND link IS NULL LIMIT 1",
                )?
                .query_row(params![group, kind_code(kind)], |r| r.get::<_, u64>(0))
                .optional()?,
            None => None,
        };
        let joined = match joined {
            Some(file) => {
                let same = self
                    .node(file)?
                    .as_version_node()
                    .is_some_and(|n| n.same(node));
                same.then_some(file)
            }
            None => None,
        };
        if let Some(file) = joined {
            let m = node.mtime();
            self.db
                .prepare_cached(
                    "INSERT INTO nodes(parent, name, kind, mode, uid, gid, mtime_s, mtime_ns, size, upper, link)
                     VALUES (?1, sealed(?2), ?3, 0, 0, 0, ?4, ?5, 0, 0, ?6)",
                )?
                .execute(params![parent, name, kind_code(kind), m.0, m.1, file])?;
            return Ok(self.db.last_insert_rowid() as u64);
        }
        let (mode, size, chunks, tree, target, rdev) = match node {
            Node::File {
                mode, size, chunks, ..
            } => (
                *mode,
                *size,
                Some(serde_json::to_vec(chunks).expect("serializable")),
                None,
                None,
                0,
            ),
            Node::Dir { mode, tree, .. } => (
                *mode,
                0,
                None,
                Some(serde_json::to_vec(tree).expect("serializable")),
                None,
                0,
            ),
            Node::Symlink { target, .. } => (
                0o777,
                target.len() as u64,
                None,
                None,
                Some(target.clone()),
                0,
            ),
            Node::Special { mode, rdev, .. } => (*mode, 0, None, None, None, *rdev),
        };
        let m = node.mtime();
        let a = Node::atime_apart(Some(node.atime()), m);
        let links_below = matches!(node, Node::Dir { links: true, .. });
        self.db
            .prepare_cached(
                "INSERT INTO nodes(parent, name, kind, mode, uid, gid, mtime_s, mtime_ns, size, chunks, tree, upper, target, rdev, atime_s, atime_ns, grp, links_below)
                 VALUES (?1, sealed(?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, sealed(?12), ?13, ?14, ?15, ?16, ?17)",
            )?
            .execute(params![parent, name, kind_code(kind), mode, uid, gid, m.0, m.1, size, chunks, tree, target, rdev as i64, a.map(|a| a.0), a.map(|a| a.1), group, links_below])?;
        Ok(self.db.last_insert_rowid() as u64)
    }

    pub fn lookup(&self, repo: &Repo, parent: u64, name: &[u8]) -> Result<Option<SNode>> {
        if name.len() > limits::MAX_NAME {
            return Err(Error::fs(
                FsError::NameTooLong,
                String::from_utf8_lossy(name),
            ));
        }
        let dir = self.dir_node(parent)?;
        self.expand(repo, &dir)?;
        self.child(parent, name)
    }

    /// The entry named `name` in folder `parent`, which must be expanded.
    fn child(&self, parent: u64, name: &[u8]) -> Result<Option<SNode>> {
        self.db
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM nodes WHERE parent = ?1 AND name = sealed(?2)"
            ))?
            .query_row(params![parent, name], row)
            .optional()?
            .map(|r| self.resolve(r))
            .transpose()
    }

    /// A hard link's row as the inode it names: the inode's id and
    /// content under this row's name and place.
    pub(super) fn resolve(&self, r: SNode) -> Result<SNode> {
        let Some(inode) = r.link else {
            return Ok(r);
        };
        let mut n = match self.get(inode)? {
            Some(n) if n.link.is_none() && n.kind == r.kind => n,
            _ => {
                return Err(Error::malformed(
                    format!("staging row {}", r.row),
                    format!("a link to row {inode}, which is no file's first name"),
                ));
            }
        };
        (n.row, n.parent, n.name) = (r.row, r.parent, r.name);
        Ok(n)
    }

    /// How many names file `n` has (only one with a link group may have
    /// more: it is given one at its first link).
    pub fn names(&self, n: &SNode) -> Result<u32> {
        if n.group.is_none() {
            return Ok(1);
        }
        let links: u32 = self
            .db
            .prepare_cached("SELECT COUNT(*) FROM nodes WHERE link = ?1")?
            .query_row([n.id], |r| r.get(0))?;
        Ok(1 + links)
    }

    /// Subdirectories of a directory (its link count is 2 plus this).
    pub fn subdirs(&self, repo: &Repo, dir: &SNode) -> Result<u32> {
        if let Some(tree) = &dir.tree {
            return Ok(repo
                .tree(tree)?
                .entries
                .iter()
                .filter(|e| e.node.is_dir())
                .count()
                .try_into()
                .unwrap_or(u32::MAX));
        }
        Ok(self
            .db
            .prepare_cached("SELECT COUNT(*) FROM nodes WHERE parent = ?1 AND kind = 1")?
            .query_row([dir.id], |r| r.get(0))?)
    }

    pub fn children(&self, repo: &Repo, parent: u64) -> Result<Vec<SNode>> {
        let dir = self.dir_node(parent)?;
        self.expand(repo, &dir)?;
        self.rows_under(parent)
    }

    fn rows_under(&self, parent: u64) -> Result<Vec<SNode>> {
        let mut stmt = self.db.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM nodes WHERE parent = ?1 ORDER BY name"
        ))?;
        let rows = stmt
            .query_map([parent], row)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| bad_row(&format!("a child of node {parent}"), e))?;
        let mut rows: Vec<SNode> = rows
            .into_iter()
            .map(|r| self.resolve(r))
            .collect::<Result<_>>()?;
        // SQL orders sealed names by their sealed bytes (`sealed_names`).
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(rows)
    }

    /// An entry of folder `id` came, went or was renamed: its mtime and
    /// ctime are now.
    fn touch_dir(&self, id: u64) -> Result<()> {
        let m = Mtime::now();
        self.db
            .prepare_cached(
                "UPDATE nodes SET mtime_s = ?2, mtime_ns = ?3, ctime_s = NULL, ctime_ns = NULL WHERE id = ?1",
            )?
            .execute(params![id, m.0, m.1])?;
        self.changed(id)
    }

    /// Node `id` changed (its content, or an entry in it): it and the
    /// folders above it no longer equal the subtrees they were expanded
    /// from. A changed folder's ancestors are all changed, so the walk
    /// stops at the first one already marked.
    fn changed(&self, mut id: u64) -> Result<()> {
        while id != 0 {
            let n = self.node(id)?;
            if n.was.is_none() {
                break;
            }
            self.set_was(id, None)?;
            id = n.parent;
        }
        Ok(())
    }

    fn set_was(&self, id: u64, was: Option<&BlobRef>) -> Result<()> {
        self.db
            .prepare_cached("UPDATE nodes SET was = ?2 WHERE id = ?1")?
            .execute(params![
                id,
                was.map(|w| serde_json::to_vec(w).expect("serializable"))
            ])?;
        Ok(())
    }

    /// Creates a file (empty, upper), directory, symlink (`target`) or
    /// special entry (a device's number in `rdev`).
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &self,
        repo: &Repo,
        parent: u64,
        name: &[u8],
        kind: Kind,
        mode: u32,
        uid: u32,
        gid: u32,
        target: &[u8],
        rdev: u64,
    ) -> Result<SNode> {
        check_name(name)?;
        if matches!(kind, Kind::Special(_)) && repo.codec().format() < 2 {
            // Format 1 trees hold files, directories and symlinks only.
            return Err(Error::fs(
                FsError::NotPermitted,
                "FIFOs, sockets and devices need a format 2 store",
            ));
        }
        if self.lookup(repo, parent, name)?.is_some() {
            return Err(Error::fs(FsError::Exists, String::from_utf8_lossy(name)));
        }
        if kind == Kind::Dir && self.depth(parent)? >= limits::MAX_DEPTH {
            return Err(Error::fs(FsError::NameTooLong, too_deep()));
        }
        let m = Mtime::now();
        // The row, its (empty) staged copy and its folder's mtime, at once.
        let id = self.atomically(|| {
            let upper = kind == Kind::File;
            self.db
                .prepare_cached(
                    "INSERT INTO nodes(parent, name, kind, mode, uid, gid, mtime_s, mtime_ns, size, chunks, tree, upper, target, rdev)
                     VALUES (?1, sealed(?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL, NULL, ?10, sealed(?11), ?12)",
                )?
                .execute(params![
                    parent,
                    name,
                    kind_code(kind),
                    mode & 0o7777,
                    uid,
                    gid,
                    m.0,
                    m.1,
                    target.len() as u64,
                    upper,
                    (kind == Kind::Symlink).then_some(target),
                    rdev as i64
                ])?;
            let id = self.db.last_insert_rowid() as u64;
            if upper {
                let path = self.upper_path(id);
                crate::private::create_file(&path).map_err(|e| Error::io(path.display(), e))?;
            }
            self.touch_dir(parent)?;
            Ok(id)
        })?;
        self.node(id)
    }

    /// Removes a file or symlink (`dir == false`) or an empty directory.
    pub fn remove(&self, repo: &Repo, parent: u64, name: &[u8], dir: bool) -> Result<()> {
        let node = self
            .lookup(repo, parent, name)?
            .ok_or_else(|| Error::fs(FsError::NotFound, String::from_utf8_lossy(name)))?;
        match (dir, node.kind == Kind::Dir) {
            (true, false) => return Err(Error::fs(FsError::NotDir, String::from_utf8_lossy(name))),
            (false, true) => return Err(Error::fs(FsError::IsDir, String::from_utf8_lossy(name))),
            (true, true) if !self.children(repo, node.id)?.is_empty() => {
                return Err(Error::fs(FsError::NotEmpty, String::from_utf8_lossy(name)));
            }
            _ => {}
        }
        // On a full disk the database needs room to record the removal:
        // the reserve makes it, so space can always be freed.
        self.with_room(|| {
            self.atomically(|| {
                self.delete_subtree(&node)?;
                self.touch_dir(parent)
            })
        })
    }

    /// Runs `op`; if the disk was full, gives up the reserve and runs it again.
    fn with_room<T>(&self, op: impl Fn() -> Result<T>) -> Result<T> {
        match op() {
            Err(e) if e.is_disk_full() && std::fs::remove_file(self.dir.join(RESERVE)).is_ok() => {
                tracing::warn!(
                    "staging of {}: the disk is full; used the reserve to free space",
                    self.dataset
                );
                op()
            }
            other => other,
        }
    }

    /// Puts back the reserve (at open), if there is room for it.
    fn ensure_reserve(&self) {
        let path = self.dir.join(RESERVE);
        if path.exists() {
            return;
        }
        let tmp = self.dir.join("reserve.new");
        let written = crate::private::create_file(&tmp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &vec![0u8; RESERVE_BYTES]))
            .and_then(|_| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!("staging of {}: no room for its reserve: {e}", self.dataset);
        }
    }

    /// Removes a name and, for a folder, everything under it, with their
    /// upper files. A file with other names lives on under them; open
    /// descriptors of upper files keep working (POSIX unlink semantics).
    fn delete_subtree(&self, node: &SNode) -> Result<()> {
        self.made_stale(Stale::Name(node.parent, node.name.clone()));
        let mut todo = vec![node.clone()];
        while let Some(n) = todo.pop() {
            if n.row != n.id {
                // A further name of a file: only the name goes.
                self.db
                    .execute("DELETE FROM nodes WHERE id = ?1", [n.row])?;
                self.status_changed(n.id)?;
                self.changed_everywhere(n.id)?;
                continue;
            }
            let other: Option<(u64, u64, Vec<u8>)> = self
                .db
                .prepare_cached(
                    "SELECT id, parent, name FROM nodes WHERE link = ?1 ORDER BY id LIMIT 1",
                )?
                .query_row([n.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?;
            if let Some((row, parent, name)) = other {
                // Its first name goes: the inode (and its content) takes
                // the place of another name.
                self.db.execute("DELETE FROM nodes WHERE id = ?1", [row])?;
                self.db.execute(
                    "UPDATE nodes SET parent = ?2, name = ?3 WHERE id = ?1",
                    params![n.id, parent, name],
                )?;
                self.status_changed(n.id)?;
                self.changed_everywhere(n.id)?;
                continue;
            }
            todo.extend(self.rows_under(n.id)?);
            self.db.execute("DELETE FROM nodes WHERE id = ?1", [n.id])?;
            if n.upper {
                self.drop_copy(n.id);
            }
        }
        Ok(())
    }

    /// Inode `id`'s status changed (a name came or went): its ctime is now.
    fn status_changed(&self, id: u64) -> Result<()> {
        let t = Mtime::now();
        self.db
            .prepare_cached("UPDATE nodes SET ctime_s = ?2, ctime_ns = ?3 WHERE id = ?1")?
            .execute(params![id, t.0, t.1])?;
        Ok(())
    }

    /// Gives file `id` a further name, `name` in folder `parent`.
    pub fn link(&self, repo: &Repo, id: u64, parent: u64, name: &[u8]) -> Result<SNode> {
        check_name(name)?;
        // In the kernel's order: an existing name first.
        if self.lookup(repo, parent, name)?.is_some() {
            return Err(Error::fs(FsError::Exists, String::from_utf8_lossy(name)));
        }
        let n = self.node(id)?;
        if n.kind == Kind::Dir {
            return Err(Error::fs(FsError::NotPermitted, "a hard link to a folder"));
        }
        if self.names(&n)? >= crate::limits::LINK_MAX {
            return Err(Error::fs(
                FsError::TooManyLinks,
                String::from_utf8_lossy(name),
            ));
        }
        let m = Mtime::now();
        self.atomically(|| {
            self.db
                .prepare_cached(
                    "INSERT INTO nodes(parent, name, kind, mode, uid, gid, mtime_s, mtime_ns, size, upper, link)
                     VALUES (?1, sealed(?2), ?3, 0, 0, 0, ?4, ?5, 0, 0, ?6)",
                )?
                .execute(params![parent, name, kind_code(n.kind), m.0, m.1, id])?;
            // Its names share a group id in versions: random, so that no
            // other file's in any version has it.
            self.db.execute(
                "UPDATE nodes SET grp = ?2 WHERE id = ?1 AND grp IS NULL",
                params![id, rand::random::<i64>()],
            )?;
            self.status_changed(id)?;
            self.changed_everywhere(id)?;
            self.touch_dir(parent)
        })?;
        self.node(id)
    }

    /// Inode `id`'s content or metadata changed: so did every folder that
    /// holds one of its names.
    fn changed_everywhere(&self, id: u64) -> Result<()> {
        let mut parents: Vec<u64> = self
            .db
            .prepare_cached("SELECT parent FROM nodes WHERE id = ?1 OR link = ?1")?
            .query_map([id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        parents.sort_unstable();
        parents.dedup();
        for p in parents {
            self.changed(p)?;
        }
        Ok(())
    }

    /// Row `id` no longer has a staged copy: its file goes (once a running
    /// commit, which may be reading it, ends).
    fn drop_copy(&self, id: u64) {
        if let Some(later) = self.dropping.borrow_mut().as_mut() {
            later.push(id);
            return;
        }
        match self.deferred.borrow_mut().as_mut() {
            Some(kept) => kept.push(id),
            None => {
                let _ = std::fs::remove_file(self.upper_path(id));
            }
        }
    }

    pub fn rename(
        &self,
        repo: &Repo,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        no_replace: bool,
    ) -> Result<()> {
        check_name(new_name)?;
        let node = self
            .lookup(repo, parent, name)?
            .ok_or_else(|| Error::fs(FsError::NotFound, String::from_utf8_lossy(name)))?;
        if node.kind == Kind::Dir && self.is_ancestor(node.id, new_parent)? {
            return Err(Error::fs(
                FsError::Invalid,
                "cannot move a directory into itself",
            ));
        }
        let replaced = self.lookup(repo, new_parent, new_name)?;
        if let Some(old) = &replaced {
            if old.id == node.id {
                return Ok(());
            }
            if no_replace {
                return Err(Error::fs(
                    FsError::Exists,
                    String::from_utf8_lossy(new_name),
                ));
            }
            match (node.kind == Kind::Dir, old.kind == Kind::Dir) {
                (true, false) => {
                    return Err(Error::fs(
                        FsError::NotDir,
                        String::from_utf8_lossy(new_name),
                    ));
                }
                (false, true) => {
                    return Err(Error::fs(FsError::IsDir, String::from_utf8_lossy(new_name)));
                }
                (true, true) if !self.children(repo, old.id)?.is_empty() => {
                    return Err(Error::fs(
                        FsError::NotEmpty,
                        String::from_utf8_lossy(new_name),
                    ));
                }
                _ => {}
            }
        }
        // A renamed entry's status changed (Linux file systems say so too).
        self.atomically(|| {
            if let Some(old) = &replaced {
                self.delete_subtree(old)?;
            }
            self.db.execute(
                "UPDATE nodes SET parent = ?2, name = sealed(?3) WHERE id = ?1",
                params![node.row, new_parent, new_name],
            )?;
            self.status_changed(node.id)?;
            self.touch_dir(parent)?;
            self.touch_dir(new_parent)
        })
    }

    /// Directory levels above a node (the root is at 0).
    fn depth(&self, mut id: u64) -> Result<usize> {
        let mut depth = 0;
        while id != ROOT && id != 0 {
            depth += 1;
            id = self.node(id)?.parent;
        }
        Ok(depth)
    }

    fn is_ancestor(&self, ancestor: u64, mut id: u64) -> Result<bool> {
        while id != 0 {
            if id == ancestor {
                return Ok(true);
            }
            id = self.node(id)?.parent;
        }
        Ok(false)
    }

    /// Changes what is given; every change moves the ctime to now.
    pub fn set_attr(
        &self,
        id: u64,
        mode: Option<u32>,
        (uid, gid): (Option<u32>, Option<u32>),
        atime: Option<Mtime>,
        mtime: Option<Mtime>,
    ) -> Result<()> {
        let n = self.node(id)?;
        if [atime, mtime].iter().flatten().any(|t| !t.storable()) {
            // A time no version can hold (after year 9999, say).
            return Err(Error::fs(FsError::Invalid, "time out of range"));
        }
        let m = mtime.unwrap_or(n.mtime);
        // An atime never set apart follows the mtime.
        let a = match self.keeps_atime {
            true => atime.or(n.atime),
            false => None,
        };
        let c = Mtime::now();
        self.atomically(|| {
            self.db
                .prepare_cached(
                    "UPDATE nodes SET mode = ?2, uid = ?3, gid = ?4, mtime_s = ?5, mtime_ns = ?6,
                 atime_s = ?7, atime_ns = ?8, ctime_s = ?9, ctime_ns = ?10 WHERE id = ?1",
                )?
                .execute(params![
                    id,
                    mode.map_or(n.mode, |m| m & 0o7777),
                    uid.unwrap_or(n.uid),
                    gid.unwrap_or(n.gid),
                    m.0,
                    m.1,
                    a.map(|a| a.0),
                    a.map(|a| a.1),
                    c.0,
                    c.1
                ])?;
            if let (Some(m), true) = (mtime, n.upper) {
                let _writing = self.writes.begin(id, 0);
                let t = filetime::FileTime::from_unix_time(m.0, m.1);
                let path = self.upper_path(id);
                filetime::set_file_mtime(&path, t).map_err(|e| Error::io(path.display(), e))?;
            }
            self.changed_everywhere(n.id)
        })
    }

    /// Row `id`'s staged copy if it has one, else what making one takes: a
    /// plan whose copy can be written without staging's lock
    /// (`CopyPlan::write`), then published under it (`publish_copy`): how
    /// a file is made writable (`fs::overlay::StagingArea::copied_up`).
    pub fn plan_copy_up(&self, id: u64, keep_content: bool) -> Result<Result<PathBuf, CopyPlan>> {
        let n = self.node(id)?;
        if n.kind != Kind::File {
            return Err(Error::fs(FsError::IsDir, String::from_utf8_lossy(&n.name)));
        }
        if n.upper {
            return Ok(Ok(self.upper_path(id)));
        }
        // A name of its own: two copy-ups of one file may be written at
        // once; the first published wins. Opening staging removes leftovers.
        let tmp = self.dir.join("data").join(format!(
            "{id}.copying-{}",
            hex::encode(rand::random::<[u8; 8]>())
        ));
        Ok(Err(CopyPlan {
            id,
            chunks: n.stored_chunks().to_vec(),
            mtime: n.mtime,
            keep_content,
            tmp,
            sealing: self.sealing.clone(),
        }))
    }

    /// Publishes the copy `plan` wrote as its row's staged copy: `None` if
    /// the row changed meanwhile (a checkout gave it other content), and
    /// the copy is dropped. A copy published meanwhile by another wins.
    pub fn publish_copy(&self, plan: CopyPlan) -> Result<Option<PathBuf>> {
        let CopyPlan { id, tmp, .. } = &plan;
        let (id, path) = (*id, self.upper_path(plan.id));
        let n = match self.get(id)? {
            Some(n) if n.kind == Kind::File => n,
            _ => {
                plan.discard();
                return Err(Error::fs(FsError::NotFound, "the file went meanwhile"));
            }
        };
        if n.upper {
            plan.discard();
            return Ok(Some(path));
        }
        if n.stored_chunks() != plan.chunks || n.mtime != plan.mtime {
            plan.discard();
            return Ok(None);
        }
        self.sweeper.claim(id);
        std::fs::rename(tmp, &path).map_err(|e| Error::io(path.display(), e))?;
        // The copy's name is durable before the row says the data is local.
        sync_dir(&self.dir.join("data"))?;
        self.atomically(|| {
            self.db.execute(
                "UPDATE nodes SET upper = 1, chunks = NULL WHERE id = ?1",
                [id],
            )?;
            self.changed_everywhere(n.id)
        })?;
        Ok(Some(path))
    }

    /// Size and times as a reader sees them now: an upper file's size and
    /// mtime are its local file's, its ctime the later of the row's and
    /// the local file's; the atime is the mtime unless set apart.
    pub fn seen(&self, n: &SNode) -> Seen {
        let row_ctime = n.ctime.unwrap_or(n.mtime);
        let mut seen = Seen {
            size: n.size,
            mtime: n.mtime,
            atime: n.mtime,
            ctime: row_ctime,
        };
        if n.upper
            && let Ok(m) = std::fs::metadata(self.upper_path(n.id))
        {
            seen.size = self.sealing.plain_len(m.size());
            seen.mtime = Mtime::of_stat(m.mtime(), m.mtime_nsec());
            seen.ctime = row_ctime.max(Mtime::of_stat(m.ctime(), m.ctime_nsec()));
        }
        seen.atime = n.atime.unwrap_or(seen.mtime);
        seen
    }
}

/// A staged copy to make (`Staging::plan_copy_up`): written to `tmp`
/// from the version's chunks with no lock held, then published.
pub struct CopyPlan {
    id: u64,
    chunks: Vec<BlobRef>,
    mtime: Mtime,
    keep_content: bool,
    tmp: PathBuf,
    sealing: Sealing,
}

impl CopyPlan {
    /// Writes the copy, durably, with the version's mtime (the slow part:
    /// the version's chunks are read from the cache or the store).
    pub fn write(&self, repo: &Repo) -> Result<()> {
        let written = (|| {
            let tmp = &self.tmp;
            let f = self
                .sealing
                .keep(crate::private::create_file(tmp).map_err(|e| Error::io(tmp.display(), e))?);
            if self.keep_content {
                read::read_file(repo, &self.chunks, &mut f.writer())?;
            }
            f.sync_all().map_err(|e| Error::io(tmp.display(), e))?;
            let t = filetime::FileTime::from_unix_time(self.mtime.0, self.mtime.1);
            filetime::set_file_mtime(tmp, t).map_err(|e| Error::io(tmp.display(), e))?;
            crate::hold::hold("copy-up-written");
            Ok(())
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        written
    }

    /// Drops the copy, unpublished.
    pub fn discard(self) {
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// What `stat` tells of a staged entry (`Staging::seen`).
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub size: u64,
    pub mtime: Mtime,
    pub atime: Mtime,
    pub ctime: Mtime,
}

pub(super) fn too_deep() -> String {
    format!(
        "staging nests deeper than {} directory levels, more than a version may hold",
        limits::MAX_DEPTH
    )
}

/// A file of zeros kept in staging's folder and given up when the disk is
/// full, so that removing files (which needs room in the database) works.
const RESERVE: &str = "reserve";
const RESERVE_BYTES: usize = 4 << 20;

/// Rows by name, so walking a folder beside its tree is linear, not quadratic.
pub(super) fn by_name(rows: &[SNode]) -> HashMap<&[u8], &SNode> {
    rows.iter().map(|r| (r.name.as_slice(), r)).collect()
}

/// Makes a folder's entries (new, renamed or removed files) durable.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir.display(), e))
}

/// Names as a version may hold them (`snapshot::tree::check_name`).
fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > limits::MAX_NAME {
        return Err(Error::fs(
            FsError::NameTooLong,
            String::from_utf8_lossy(name),
        ));
    }
    crate::snapshot::tree::check_name(name)
        .map_err(|_| Error::fs(FsError::Invalid, String::from_utf8_lossy(name)))
}
