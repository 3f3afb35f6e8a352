//! Staging's side of a commit (orchestrated by `commit::staged`): a frozen
//! copy of its rows, taken under the lock, that the commit builds its tree
//! from while the mount goes on changing staging; then, under the lock
//! again, staging is brought to the new version without losing what
//! changed meanwhile.

use super::writes::Writes;
use super::{COLUMNS, ROOT, SNode, Staging, row};
use crate::error::{Error, Result};
use crate::repo::Repo;
use crate::snapshot::{Link, Mtime, Record};
use crate::store::pack::BlobRef;
use rusqlite::params;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

/// Staging as it was when a commit began.
pub struct Frozen {
    /// The version staging stood on.
    pub base: Option<Record>,
    root: SNode,
    children: HashMap<u64, Vec<SNode>>,
    /// Names of each file with more than one.
    names: HashMap<u64, u32>,
    /// Versions hold link groups (format 2).
    links: bool,
    data: PathBuf,
    sealing: crate::store::sealed_file::Sealing,
    writes: Arc<Writes>,
}

impl Frozen {
    pub fn root(&self) -> &SNode {
        &self.root
    }

    /// The link group of file `r` in the version being made, if it has
    /// several names.
    pub fn link_of(&self, r: &SNode) -> Option<Link> {
        let names = *self.names.get(&r.id)?;
        let group = r.group?;
        (self.links && names > 1).then_some(Link { group, names })
    }

    /// The rows of an expanded folder, by name.
    pub fn children(&self, id: u64) -> &[SNode] {
        self.children.get(&id).map_or(&[], |c| c.as_slice())
    }

    /// A staged copy's file. It stays until the commit ends, even if its
    /// row goes meanwhile.
    pub fn upper_path(&self, id: u64) -> PathBuf {
        self.data.join(id.to_string())
    }

    /// How its staged copies are kept.
    pub fn sealing(&self) -> &crate::store::sealed_file::Sealing {
        &self.sealing
    }

    pub fn writes(&self) -> &Writes {
        &self.writes
    }

    /// Bytes of the staged copies a commit reads (its progress's total).
    pub fn staged_bytes(&self) -> u64 {
        let files: std::collections::HashSet<u64> = self
            .children
            .values()
            .flatten()
            .filter(|r| r.upper)
            .map(|r| r.id)
            .collect();
        files
            .into_iter()
            .filter_map(|id| std::fs::metadata(self.upper_path(id)).ok())
            .map(|m| self.sealing.plain_len(m.len()))
            .sum()
    }
}

/// What a commit read from staged copies: chunks, size and mtime by row id.
pub type Read = HashMap<u64, (Vec<BlobRef>, u64, Mtime)>;

impl Staging {
    pub fn committing(&self) -> bool {
        self.deferred.borrow().is_some()
    }

    /// Freezes staging for a commit; `records` are the dataset's records,
    /// read just before. Refused while a conflict is unresolved. Staged copies are kept from here until
    /// `finish` or `end_commit`, and writes to them are remembered.
    pub fn freeze(&self, repo: &Repo, records: &[Record]) -> Result<Frozen> {
        if self.committing() {
            return Err(Error::InvalidInput(format!(
                "a commit of {} is already running",
                self.dataset
            )));
        }
        self.check_resolved(repo)?;
        self.adopt_landed(repo, records)?;
        let base_version = self.base_version()?;
        let base = records.iter().find(|r| r.version == base_version).cloned();
        let mut children: HashMap<u64, Vec<SNode>> = HashMap::new();
        let mut stmt = self.db.prepare(&format!(
            "SELECT {COLUMNS} FROM nodes WHERE id != {ROOT} ORDER BY parent, name"
        ))?;
        let mut links = Vec::new();
        let mut names: HashMap<u64, u32> = HashMap::new();
        for r in stmt.query_map([], row)? {
            let r = r.map_err(|e| super::bad_row("staging's rows", e))?;
            if let Some(file) = r.link {
                links.push(r.clone());
                *names.entry(file).or_insert(1) += 1;
            }
            children.entry(r.parent).or_default().push(r);
        }
        names.retain(|_, n| *n > 1);
        // A hard link is committed as its file, in the file's link group.
        for r in links {
            let file = self.resolve(r.clone())?;
            if let Some(slot) = children
                .get_mut(&r.parent)
                .and_then(|c| c.iter_mut().find(|c| c.row == r.row))
            {
                *slot = file;
            }
        }
        let root = self.node(ROOT)?;
        self.writes.start();
        *self.deferred.borrow_mut() = Some(Vec::new());
        Ok(Frozen {
            base,
            root,
            children,
            names,
            links: repo.codec().format() >= 2,
            data: self.dir.join("data"),
            sealing: self.sealing.clone(),
            writes: self.writes.clone(),
        })
    }

    /// Brings staging to `record`, the version made from `ours` (different
    /// if the commit was rebased onto versions that landed meanwhile, or the
    /// base itself when there was nothing to commit). A staged copy becomes
    /// a read-through file of the version unless it is open (`open`, listed
    /// under the lock: a writer's next bytes must land in staging, and a
    /// mount may pass an open copy's inode through to it) or was written
    /// since the freeze: those stay staged, so no write is lost. Ends the
    /// commit.
    pub fn finish(
        &self,
        repo: &Repo,
        ours: &BlobRef,
        read: Read,
        record: &Record,
        open: &HashSet<u64>,
    ) -> Result<()> {
        let written = self.writes.written();
        let tx = self.db.unchecked_transaction()?;
        let mut demoted = Vec::new();
        for (id, (chunks, size, mtime)) in read {
            if open.contains(&id) || written.contains(&id) {
                continue;
            }
            demoted.push(id);
            tx.prepare_cached(
                "UPDATE nodes SET upper = 0, chunks = ?2, size = ?3, mtime_s = ?4, mtime_ns = ?5 WHERE id = ?1 AND upper = 1",
            )?
            .execute(params![id, serde_json::to_vec(&chunks).expect("serializable"), size, mtime.0, mtime.1])?;
        }
        // Versions that landed meanwhile were merged in: show their changes too.
        if record.tree.id != ours.id {
            self.apply(repo, ROOT, Some(ours), &record.tree, 0)?;
        }
        self.set_base(repo, record.version)?;
        self.set_pending(None)?;
        tx.commit()?;
        crate::hold::hold("staging-finished");
        // Staged copies go only once the rows that replace them are durable.
        self.sync()?;
        self.sweeper.sweep(demoted);
        self.end_commit();
        Ok(())
    }

    /// Ends a commit (after `finish`, or after a failure that left staging
    /// as it was): copies whose rows went meanwhile are removed now.
    pub fn end_commit(&self) {
        self.writes.stop();
        let Some(doomed) = self.deferred.borrow_mut().take() else {
            return;
        };
        // Their rows' removal is durable before their data goes.
        if !doomed.is_empty() && self.sync().is_ok() {
            self.sweeper.sweep(doomed);
        }
    }
}
