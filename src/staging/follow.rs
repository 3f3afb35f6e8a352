//! Following versions committed elsewhere (and a rebased commit of our own):
//! staging moves from one version to another, keeping local changes.

use super::{Kind, ROOT, Staging, by_name, too_deep};
use crate::error::{Error, Result};
use crate::limits;
use crate::repo::Repo;
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Node, Record, Tree};
use crate::store::pack::BlobRef;
use rusqlite::params;

impl Staging {
    /// Moves staging from version `from` to `to`, keeping local changes: a
    /// node that still equals `from` takes `to`'s content. Used to follow
    /// versions committed elsewhere and after a rebased commit.
    pub(super) fn apply(
        &self,
        repo: &Repo,
        id: u64,
        from: Option<&BlobRef>,
        to: &BlobRef,
        depth: usize,
    ) -> Result<()> {
        if depth > limits::MAX_DEPTH {
            return Err(Error::InvalidInput(too_deep()));
        }
        let node = self.node(id)?;
        let links = repo.tree(to)?.has_links();
        if let Some(was) = node.was {
            // Expanded but unchanged: it equals `to` once this is done.
            let now = from.filter(|f| f.id == was.id).map(|_| to);
            self.set_was(id, now)?;
            self.db.execute(
                "UPDATE nodes SET links_below = ?2 WHERE id = ?1",
                params![id, links],
            )?;
        }
        if let Some(tree) = node.tree {
            if from.is_some_and(|f| f.id == tree.id) {
                self.db.execute(
                    "UPDATE nodes SET tree = ?2, links_below = ?3 WHERE id = ?1",
                    params![id, serde_json::to_vec(to).expect("serializable"), links],
                )?;
                // Every name of a file is a row before any is changed.
                if links {
                    self.expand(repo, &self.node(id)?)?;
                }
            }
            return Ok(());
        }
        let old = match from {
            Some(f) => repo.tree(f)?,
            None => std::sync::Arc::new(Tree::default()),
        };
        let new = repo.tree(to)?;
        let rows = self.rows_under(id)?;
        let rows_by_name = by_name(&rows);
        let mut names: Vec<&[u8]> = old
            .entries
            .iter()
            .chain(&new.entries)
            .map(|e| e.name.as_slice())
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let (o, n) = (old.get(name), new.get(name));
            let row = rows_by_name.get(name).copied();
            let untouched = match (row, o) {
                (None, None) => true,
                (Some(r), Some(o)) => r.as_version_node().is_some_and(|v| v.same(o)),
                _ => false,
            };
            if let (Some(r), Some(Node::Dir { tree: ot, .. }), Some(Node::Dir { tree: nt, .. })) =
                (row, o, n)
                && r.kind == Kind::Dir
                && !untouched
            {
                self.apply(repo, r.id, Some(ot), nt, depth + 1)?;
                continue;
            }
            if let (Some(r), Some(Node::Dir { tree: ot, .. })) = (row, o)
                && r.kind == Kind::Dir
                && r.tree.is_none()
            {
                // A folder staging had expanded (listed), which the new
                // version removed or replaced: what the user did not change
                // goes with it, and it goes if nothing of theirs is left.
                if self.take_back(repo, r.id, ot, depth + 1)? {
                    self.delete_subtree(r)?;
                    if let Some(n) = n {
                        self.insert_version_node(repo, id, name, n, (node.uid, node.gid))?;
                    }
                }
                continue;
            }
            if !untouched {
                continue; // changed locally: staging's version wins
            }
            if let Some(r) = row {
                self.delete_subtree(r)?;
            }
            if let Some(n) = n {
                self.insert_version_node(repo, id, name, n, (node.uid, node.gid))?;
            }
        }
        Ok(())
    }

    /// Removes from expanded folder `id` what still equals tree `old`, the
    /// user's own changes staying; true if nothing is left in it.
    fn take_back(&self, repo: &Repo, id: u64, old: &BlobRef, depth: usize) -> Result<bool> {
        if depth > limits::MAX_DEPTH {
            return Err(Error::InvalidInput(too_deep()));
        }
        let old = repo.tree(old)?;
        for r in self.rows_under(id)? {
            match old.get(&r.name) {
                Some(o) if r.as_version_node().is_some_and(|v| v.same(o)) => {
                    self.delete_subtree(&r)?
                }
                Some(Node::Dir { tree, .. })
                    if r.kind == Kind::Dir
                        && r.tree.is_none()
                        && self.take_back(repo, r.id, tree, depth + 1)? =>
                {
                    self.delete_subtree(&r)?
                }
                _ => {}
            }
        }
        Ok(self.rows_under(id)?.is_empty())
    }

    /// Follows `latest`, a version committed elsewhere, for a staging area
    /// with no changes of its own (the caller found none, maybe through a
    /// `reader`); `records` are the dataset's versions (the base among them).
    /// Not while a commit of ours runs: it moves staging when it ends.
    pub fn fast_forward(&self, repo: &Repo, records: &[Record], latest: &Record) -> Result<bool> {
        let base_version = self.base_version()?;
        if self.committing() || latest.version <= base_version {
            return Ok(false);
        }
        let base = records.iter().find(|r| r.version == base_version);
        let tx = self.db.unchecked_transaction()?;
        self.apply(repo, ROOT, base.map(|b| &b.tree), &latest.tree, 0)?;
        self.set_base(repo, latest.version)?;
        tx.commit()?;
        Ok(true)
    }
}
