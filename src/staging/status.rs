//! What staging changed against its base version (`.detafs/status`,
//! `detafs status`): linear in the rows staging holds, never expanding a
//! folder it has not touched.

use super::compare::StagedFile;
use super::{Kind, ROOT, SNode, Staging, by_name, too_deep};
use crate::error::{Error, Result};
use crate::limits;
use crate::repo::Repo;
use crate::snapshot::diff;
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Likeness, Node, Tree};
use crate::store::pack::BlobRef;

impl Staging {
    /// Staged changes against the base version, like `git status --porcelain`
    /// (`A`, `M`, `D`, and `C` for a conflict to resolve).
    /// Works offline: the base version is known locally (staging was built on it).
    /// Walks without recursion (a folder's items, in order, on an explicit
    /// stack), so staging as deep as a version may be needs no deep stack.
    pub fn status(&self, repo: &Repo) -> Result<Vec<(char, Vec<u8>)>> {
        // A reader reads one state throughout (its owner may write meanwhile).
        let _one_state = match self.owns() {
            true => None,
            false => Some(self.db.unchecked_transaction()?),
        };
        let base = self.base_tree(repo)?;
        let mut out = Vec::new();
        let mut stack = vec![
            self.status_items(repo, ROOT, base.as_ref(), b"")?
                .into_iter(),
        ];
        while let Some(items) = stack.last_mut() {
            match items.next() {
                Some(Item::Line(tag, path)) => out.push((tag, path)),
                Some(Item::Dir(id, base, prefix)) => {
                    if stack.len() > limits::MAX_DEPTH {
                        return Err(Error::InvalidInput(too_deep()));
                    }
                    let items = self.status_items(repo, id, base.as_ref(), &prefix)?;
                    stack.push(items.into_iter());
                }
                None => {
                    stack.pop();
                }
            }
        }
        // An unresolved conflict shows as `C` (what staging holds there is ours).
        for (path, _) in self.unresolved(repo)? {
            match out.iter_mut().find(|(_, p)| *p == path) {
                Some(line) => line.0 = 'C',
                None => out.push(('C', path)),
            }
        }
        Ok(out)
    }

    /// What one folder contributes to status: lines, and its changed
    /// subfolders (walked in their place).
    fn status_items(
        &self,
        repo: &Repo,
        id: u64,
        base: Option<&BlobRef>,
        prefix: &[u8],
    ) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        let node = self.node(id)?;
        if let Some(tree) = &node.tree.or(node.was) {
            for c in diff::diff(repo, base, Some(tree))? {
                out.push(Item::Line(c.kind.letter(), [prefix, &c.path].concat()));
            }
            return Ok(out);
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
            let path = [prefix, name].concat();
            let row = rows_by_name.get(name).copied();
            let old = base_tree.get(name);
            let old_dir = match old {
                Some(Node::Dir { tree, .. }) => Some(tree),
                _ => None,
            };
            match row {
                Some(r) if r.kind == Kind::Dir => {
                    if old.is_some_and(|o| !o.is_dir()) {
                        out.push(Item::Line('D', path.clone()));
                    }
                    out.push(Item::Dir(
                        r.id,
                        old_dir.copied(),
                        [&path[..], b"/"].concat(),
                    ));
                }
                Some(r) => {
                    if let Some(t) = old_dir {
                        for c in diff::diff(repo, Some(t), None)? {
                            out.push(Item::Line('D', [&path[..], b"/", &c.path].concat()));
                        }
                    }
                    let likeness = match (old, r.as_version_node()) {
                        (Some(o), Some(n)) => o.likeness(&n),
                        (Some(o), None) => self.likeness(r, o, repo),
                        _ => Likeness::Different,
                    };
                    match likeness {
                        Likeness::Same => {}
                        Likeness::TimeOnly => out.push(Item::Line('T', path)),
                        Likeness::Different if old.is_some_and(|o| !o.is_dir()) => {
                            out.push(Item::Line('M', path))
                        }
                        Likeness::Different => out.push(Item::Line('A', path)),
                    }
                }
                None => {
                    if let Some(t) = old_dir {
                        for c in diff::diff(repo, Some(t), None)? {
                            out.push(Item::Line('D', [&path[..], b"/", &c.path].concat()));
                        }
                    } else {
                        out.push(Item::Line('D', path));
                    }
                }
            }
        }
        Ok(out)
    }
}

impl Staging {
    /// How staged copy `r` compares with `old`.
    fn likeness(&self, r: &SNode, old: &Node, repo: &Repo) -> Likeness {
        let super::Seen {
            size, mtime, atime, ..
        } = self.seen(r);
        let file = StagedFile {
            path: self.upper_path(r.id),
            sealing: self.sealing.clone(),
            mode: r.mode,
            size,
            mtime,
            atime,
        };
        super::compare::likeness(&file, old, repo)
    }
}

enum Item {
    Line(char, Vec<u8>),
    /// A changed folder: its row, its base subtree, its path prefix.
    Dir(u64, Option<BlobRef>, Vec<u8>),
}
