//! Conflicts a commit of staging met: paths that a version committed
//! meanwhile changed too. Staging then stands on that version with our
//! version of those paths, and a commit is refused until each of them was
//! changed since (kept by a touch, replaced by theirs, edited or removed),
//! so a conflict is never resolved by simply committing again.

use super::{ROOT, Staging};
use crate::error::{Error, FsError, Result};
use crate::repo::Repo;
use crate::snapshot::Record;
use crate::store::pack::BlobRef;
use rusqlite::params;

impl Staging {
    /// Moves staging from `base` onto `winner`, keeping our changes (those
    /// of `paths` included), and notes `paths` as conflicts.
    pub fn note_conflicts(
        &self,
        repo: &Repo,
        base: Option<&BlobRef>,
        winner: &Record,
        paths: &[Vec<u8>],
    ) -> Result<()> {
        let tx = self.db.unchecked_transaction()?;
        self.apply(repo, ROOT, base, &winner.tree, 0)?;
        self.set_base(repo, winner.version)?;
        for path in paths {
            tx.execute(
                "INSERT OR REPLACE INTO conflicts(path, theirs, mark) VALUES (sealed(?1), ?2, ?3)",
                params![path, winner.version, self.mark(repo, path)?],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Conflicts not resolved yet, with the version each is with; those
    /// resolved since are forgotten.
    pub fn unresolved(&self, repo: &Repo) -> Result<Vec<(Vec<u8>, u64)>> {
        let mut noted: Vec<(Vec<u8>, u64, Option<String>)> = self
            .db
            .prepare("SELECT opened(path), theirs, mark FROM conflicts")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        noted.sort();
        let mut open = Vec::new();
        for (path, theirs, mark) in noted {
            if self.mark(repo, &path)? == mark {
                open.push((path, theirs));
            } else if self.owns() {
                self.db
                    .execute("DELETE FROM conflicts WHERE path = sealed(?1)", [&path])?;
            }
        }
        Ok(open)
    }

    /// Refuses a commit while conflicts are unresolved.
    pub(super) fn check_resolved(&self, repo: &Repo) -> Result<()> {
        let open = self.unresolved(repo)?;
        match open.first() {
            None => Ok(()),
            Some(&(_, winner)) => Err(Error::Unresolved {
                winner,
                paths: open.into_iter().map(|(p, _)| p).collect(),
            }),
        }
    }

    /// What is at `path` now (`None`: nothing): any edit, touch, chmod,
    /// replacement or removal changes it.
    fn mark(&self, repo: &Repo, path: &[u8]) -> Result<Option<String>> {
        let mut node = self.node(ROOT)?;
        for name in path.split(|&b| b == b'/') {
            match self.lookup(repo, node.id, name) {
                Ok(Some(n)) => node = n,
                Ok(None)
                | Err(Error::Fs {
                    kind: FsError::NotDir,
                    ..
                }) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        let super::Seen { size, mtime, .. } = self.seen(&node);
        Ok(Some(format!(
            "{} {:?} {:o} {size} {}.{}",
            node.id, node.kind, node.mode, mtime.0, mtime.1
        )))
    }
}
