//! What staging changed against its base version (`.detafs/status`,
//! `detafs status`): linear in the rows staging holds, never expanding a
//! folder it has not touched.

use super::{Kind, ROOT, Staging, by_name, too_deep};
use crate::error::{Error, Result};
use crate::limits;
use crate::repo::Repo;
use crate::snapshot::diff::{self, ChangeKind, TreeSource};
use crate::snapshot::{Node, Tree};
use crate::store::pack::BlobRef;

impl Staging {
    /// Staged changes against the base version, like `git status --porcelain`.
    /// Works offline: the base version is known locally (staging was built on it).
    pub fn status(&self, repo: &Repo) -> Result<Vec<(char, String)>> {
        let base = repo
            .index
            .records(&self.dataset)?
            .into_iter()
            .find(|r| r.version == self.base_version().unwrap_or(0))
            .map(|r| r.tree);
        let mut out = Vec::new();
        self.status_dir(repo, ROOT, base.as_ref(), "", 0, &mut out)?;
        Ok(out)
    }

    fn status_dir(
        &self,
        repo: &Repo,
        id: u64,
        base: Option<&BlobRef>,
        prefix: &str,
        depth: usize,
        out: &mut Vec<(char, String)>,
    ) -> Result<()> {
        if depth > limits::MAX_DEPTH {
            return Err(Error::InvalidInput(too_deep()));
        }
        let node = self.node(id)?;
        if let Some(tree) = &node.tree {
            for c in diff::diff(repo, base, Some(tree))? {
                let tag = match c.kind {
                    ChangeKind::Added => 'A',
                    ChangeKind::Modified => 'M',
                    ChangeKind::Removed => 'D',
                };
                out.push((tag, format!("{prefix}{}", crate::escape::line(&c.path))));
            }
            return Ok(());
        }
        let base_tree = match base {
            Some(b) => repo.tree(b)?,
            None => std::sync::Arc::new(Tree::default()),
        };
        let rows = self.rows_under(id)?;
        let rows_by_name = by_name(&rows);
        let mut names: Vec<&[u8]> = rows
            .iter()
            .map(|r| r.name.as_slice())
            .chain(base_tree.entries.iter().map(|e| e.name.as_slice()))
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let path = format!("{prefix}{}", crate::escape::line(name));
            let row = rows_by_name.get(name).copied();
            let old = base_tree.get(name);
            let old_dir = match old {
                Some(Node::Dir { tree, .. }) => Some(tree),
                _ => None,
            };
            match row {
                Some(r) if r.kind == Kind::Dir => {
                    if old.is_some_and(|o| !o.is_dir()) {
                        out.push(('D', path.clone()));
                    }
                    self.status_dir(repo, r.id, old_dir, &format!("{path}/"), depth + 1, out)?;
                }
                Some(r) => {
                    if let Some(t) = old_dir {
                        for c in diff::diff(repo, Some(t), None)? {
                            out.push(('D', format!("{path}/{}", crate::escape::line(&c.path))));
                        }
                    }
                    let same = match (old, r.as_version_node()) {
                        (Some(o), Some(n)) => o.same(&n),
                        _ => false,
                    };
                    if !same {
                        let tag = if old.is_some_and(|o| !o.is_dir()) {
                            'M'
                        } else {
                            'A'
                        };
                        out.push((tag, path));
                    }
                }
                None => {
                    if let Some(t) = old_dir {
                        for c in diff::diff(repo, Some(t), None)? {
                            out.push(('D', format!("{path}/{}", crate::escape::line(&c.path))));
                        }
                    } else {
                        out.push(('D', path));
                    }
                }
            }
        }
        Ok(())
    }
}
