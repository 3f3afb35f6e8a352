//! Putting staged paths back as a version has them: `detafs restore`
//! (discard changes: as the base version) and `detafs checkout` (as any
//! version, to commit a revert). Staging's base stays; status then shows
//! what differs from it.

use super::{Kind, ROOT, Staging};
use crate::error::{Error, FsError, Result};
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::Mtime;
use crate::snapshot::Node;
use crate::snapshot::tree::TreeSource;
use crate::store::pack::BlobRef;
use rusqlite::params;

/// What the kernel may keep of staging that a restore or checkout changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stale {
    /// The entry `name` of folder row `parent`.
    Name(u64, Vec<u8>),
    /// Row `id`'s attributes, content and (a folder's) listing.
    Inode(u64),
}

/// A path to restore or check out as the user gave it (`data/x.csv`,
/// `/data/`), parsed as every path is (`RelPath`); `.` alone, the
/// documented word for everything, is the root.
pub fn asked_path(path: &str) -> Result<RelPath> {
    match path {
        "." => Ok(RelPath::root()),
        _ => RelPath::parse(path),
    }
}

/// `asked_path`'s names; empty for the whole dataset.
pub fn path_names(path: &str) -> Result<Vec<Vec<u8>>> {
    Ok(asked_path(path)?.names().map(<[u8]>::to_vec).collect())
}

impl Staging {
    /// Makes each of `paths` (each a list of names; an empty one is the
    /// whole dataset) hold what `source` (a version's root tree) holds
    /// there: its content, or nothing if it has none. All or nothing.
    /// Returns what the kernel may keep that this made stale.
    /// What staging held there is kept in the trash (`trash.rs`) as
    /// replaced by `what` (`restore`, `checkout v3`).
    pub fn checkout(
        &self,
        repo: &Repo,
        source: &BlobRef,
        paths: &[Vec<Vec<u8>>],
        what: &str,
    ) -> Result<Vec<Stale>> {
        // Like any change during a commit (it is a batch of removes and
        // creates): the commit keeps what it froze, staging keeps this.
        // Every path is looked up first: a bad one changes nothing.
        let mut wanted = Vec::new();
        for names in paths {
            let path = RelPath::from_names(names)?;
            let node = repo.lookup(source, &path)?;
            if node.is_none() && !names.is_empty() && self.find(repo, names)?.is_none() {
                return Err(Error::fs(
                    FsError::NotFound,
                    format!(
                        "{} is neither staged nor in that version",
                        crate::escape::line(path.as_bytes())
                    ),
                ));
            }
            wanted.push((names, node));
        }
        *self.stale.borrow_mut() = Some(Vec::new());
        let done = self.atomically(|| {
            let mut replaced = Vec::new();
            for (names, node) in &wanted {
                let (at, staged) = self.at_or_in_the_way(repo, names)?;
                if at != **names || !same(staged.as_ref(), node.as_ref()) {
                    replaced.push((at, staged));
                }
            }
            self.keep(what, &replaced)?;
            for (names, node) in &wanted {
                match names.split_last() {
                    None => self.checkout_root(repo, source)?,
                    Some((name, dirs)) => {
                        let parent = self.make_dirs(repo, Some(source), dirs)?;
                        let old = self.lookup(repo, parent, name)?;
                        self.put_entry(repo, &self.node(parent)?, name, old, node.as_ref())?;
                        self.changed(parent)?;
                    }
                }
            }
            crate::hold::hold("checkout-applied");
            Ok(())
        });
        let stale = self.stale.borrow_mut().take().unwrap_or_default();
        done?;
        self.tidy_trash();
        Ok(stale)
    }

    /// Notes what a restore or checkout under way made stale.
    pub(super) fn made_stale(&self, what: Stale) {
        if let Some(stale) = &mut *self.stale.borrow_mut() {
            stale.push(what);
        }
    }

    /// Staging's whole tree becomes `source`'s (unexpanded, like a fresh one).
    fn checkout_root(&self, repo: &Repo, source: &BlobRef) -> Result<()> {
        let root = self.node(ROOT)?;
        self.replace_dir(repo, &root, source, root.mode, root.mtime)
    }

    /// Row `old` takes version node `node`'s content, of the same kind.
    fn replace(&self, repo: &Repo, old: &super::SNode, node: &Node) -> Result<()> {
        self.made_stale(Stale::Inode(old.id));
        // The version's times: its atime (or none apart), ctime now.
        let a = Node::atime_apart(Some(node.atime()), node.mtime());
        let c = Mtime::now();
        self.db.execute(
            "UPDATE nodes SET atime_s = ?2, atime_ns = ?3, ctime_s = ?4, ctime_ns = ?5 WHERE id = ?1",
            params![old.id, a.map(|a| a.0), a.map(|a| a.1), c.0, c.1],
        )?;
        match node {
            Node::Dir {
                mode, mtime, tree, ..
            } => self.replace_dir(repo, old, tree, *mode, *mtime),
            Node::File {
                mode,
                mtime,
                size,
                chunks,
                ..
            } => {
                self.db.execute(
                    "UPDATE nodes SET upper = 0, chunks = ?2, size = ?3, mode = ?4, mtime_s = ?5, mtime_ns = ?6 WHERE id = ?1",
                    params![old.id, serde_json::to_vec(chunks).expect("serializable"), size, mode, mtime.0, mtime.1],
                )?;
                if old.upper {
                    self.drop_copy(old.id);
                }
                Ok(())
            }
            Node::Symlink { mtime, target, .. } => {
                self.db.execute(
                    "UPDATE nodes SET target = sealed(?2), size = ?3, mtime_s = ?4, mtime_ns = ?5 WHERE id = ?1",
                    params![old.id, target, target.len() as u64, mtime.0, mtime.1],
                )?;
                Ok(())
            }
            Node::Special {
                mode, mtime, rdev, ..
            } => {
                self.db.execute(
                    "UPDATE nodes SET mode = ?2, rdev = ?3, mtime_s = ?4, mtime_ns = ?5 WHERE id = ?1",
                    params![old.id, mode, *rdev as i64, mtime.0, mtime.1],
                )?;
                Ok(())
            }
        }
    }

    /// Folder `dir` stands for version subtree `tree` again (unexpanded).
    fn replace_dir(
        &self,
        repo: &Repo,
        dir: &super::SNode,
        tree: &BlobRef,
        mode: u32,
        mtime: crate::snapshot::Mtime,
    ) -> Result<()> {
        self.made_stale(Stale::Inode(dir.id));
        let new = repo.tree(tree)?;
        let links = new.has_links();
        if dir.tree.is_none() && !links {
            return self.reconcile_dir(repo, dir, &new, tree, mode, mtime);
        }
        for child in self.rows_under(dir.id)? {
            self.delete_subtree(&child)?;
        }
        self.db.execute(
            "UPDATE nodes SET tree = ?2, was = NULL, mode = ?3, mtime_s = ?4, mtime_ns = ?5, links_below = ?6 WHERE id = ?1",
            params![dir.id, serde_json::to_vec(tree).expect("serializable"), mode, mtime.0, mtime.1, links],
        )?;
        // Every name of a file is a row before any is changed.
        if links {
            self.expand(repo, &self.node(dir.id)?)?;
        }
        Ok(())
    }

    /// An expanded folder made as `new` (the tree `tree`) holds it, in
    /// place: an entry that stays of the same kind keeps its row, so its
    /// inode, as a version's folder would (a shell or a notebook inside it
    /// goes on working); the rest go or come. The folder stays expanded.
    fn reconcile_dir(
        &self,
        repo: &Repo,
        dir: &super::SNode,
        new: &crate::snapshot::Tree,
        tree: &BlobRef,
        mode: u32,
        mtime: crate::snapshot::Mtime,
    ) -> Result<()> {
        let mut rows: std::collections::HashMap<Vec<u8>, super::SNode> = self
            .rows_under(dir.id)?
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
        for e in &new.entries {
            let old = rows.remove(&e.name);
            self.put_entry(repo, dir, &e.name, old, Some(&e.node))?;
        }
        for old in rows.into_values() {
            self.delete_subtree(&old)?;
        }
        // Equal to `tree` now, as a folder expanded and not changed since.
        self.db.execute(
            "UPDATE nodes SET was = ?2, mode = ?3, mtime_s = ?4, mtime_ns = ?5, links_below = 0 WHERE id = ?1",
            params![dir.id, serde_json::to_vec(tree).expect("serializable"), mode, mtime.0, mtime.1],
        )?;
        Ok(())
    }

    /// Entry `name` of folder `dir`, staged as `old`, becomes version node
    /// `node` (none: goes). Of the same kind, the row (the inode the kernel
    /// knows) stays, unless the file has other names, which keep it.
    fn put_entry(
        &self,
        repo: &Repo,
        dir: &super::SNode,
        name: &[u8],
        old: Option<super::SNode>,
        node: Option<&Node>,
    ) -> Result<()> {
        match (old, node) {
            (Some(old), Some(node))
                if old.kind == Kind::of(node)
                    && self.names(&old)? == 1
                    && node.link().is_none() =>
            {
                self.replace(repo, &old, node)
            }
            (old, node) => {
                if let Some(old) = old {
                    self.delete_subtree(&old)?;
                }
                if let Some(node) = node {
                    self.made_stale(Stale::Name(dir.id, name.to_vec()));
                    self.insert_version_node(repo, dir.id, name, node, (dir.uid, dir.gid))?;
                }
                Ok(())
            }
        }
    }

    /// The staged node at `names`, if there is one.
    pub(super) fn find(&self, repo: &Repo, names: &[Vec<u8>]) -> Result<Option<super::SNode>> {
        let mut node = self.node(ROOT)?;
        for name in names {
            if node.kind != Kind::Dir {
                return Ok(None);
            }
            match self.lookup(repo, node.id, name)? {
                Some(n) => node = n,
                None => return Ok(None),
            }
        }
        Ok(Some(node))
    }

    /// The staged folder at `dirs`, made (empty, with the version's mode
    /// and time) where staging has none; a file in the way is replaced.
    pub(super) fn make_dirs(
        &self,
        repo: &Repo,
        source: Option<&BlobRef>,
        dirs: &[Vec<u8>],
    ) -> Result<u64> {
        let mut id = ROOT;
        for (i, name) in dirs.iter().enumerate() {
            match self.lookup(repo, id, name)? {
                Some(n) if n.kind == Kind::Dir => id = n.id,
                existing => {
                    if let Some(n) = existing {
                        self.delete_subtree(&n)?;
                    }
                    let at = RelPath::from_names(&dirs[..=i])?;
                    let found = match source {
                        Some(s) => repo.lookup(s, &at)?,
                        None => None,
                    };
                    let (mode, mtime) = match found {
                        Some(Node::Dir { mode, mtime, .. }) => (mode, mtime),
                        _ => (0o755, Mtime::now()),
                    };
                    let p = self.node(id)?;
                    self.db.execute(
                        "INSERT INTO nodes(parent, name, kind, mode, uid, gid, mtime_s, mtime_ns, size, chunks, tree, upper, target)
                         VALUES (?1, sealed(?2), ?3, ?4, ?5, ?6, ?7, ?8, 0, NULL, NULL, 0, NULL)",
                        params![id, name, super::row::kind_code(Kind::Dir), mode, p.uid, p.gid, mtime.0, mtime.1],
                    )?;
                    self.changed(id)?;
                    id = self.db.last_insert_rowid() as u64;
                }
            }
        }
        Ok(id)
    }
}

/// Whether staged node `staged` holds what version node `node` does, so
/// that replacing it loses nothing (a folder: the same subtree).
fn same(staged: Option<&super::SNode>, node: Option<&Node>) -> bool {
    match (staged.map(super::SNode::as_version_node), node) {
        (None, None) => true,
        (Some(Some(Node::Dir { tree: a, .. })), Some(Node::Dir { tree: b, .. })) => a.id == b.id,
        (Some(Some(s)), Some(n)) => s.same(n),
        _ => false,
    }
}
