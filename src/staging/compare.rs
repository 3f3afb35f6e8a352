//! A version against staging (`detafs diff NAME VERSION staging`): the
//! version's diff to staging's base, corrected by staging's own status, so
//! only the paths staging changed are looked at locally.

use super::{Kind, ROOT, Staging};
use crate::error::Result;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::chunker;
use crate::snapshot::diff::{self, ChangeKind};
use crate::snapshot::{Likeness, Mtime, Node};
use crate::store::pack::BlobRef;
use crate::store::sealed_file::Sealing;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What one side of a diff holds at a path.
#[derive(Clone, Debug)]
pub enum Side {
    /// As a version has it (a version's node, or staging reading through).
    Node(Node),
    /// A staged file with its own bytes on local disk.
    File(StagedFile),
}

#[derive(Clone, Debug)]
pub struct StagedFile {
    pub path: PathBuf,
    /// How its bytes are kept there.
    pub sealing: Sealing,
    pub mode: u32,
    pub size: u64,
    pub mtime: Mtime,
    pub atime: Mtime,
}

impl Side {
    pub fn size(&self) -> u64 {
        match self {
            Side::Node(n) => n.size(),
            Side::File(f) => f.size,
        }
    }

    pub fn mtime(&self) -> Mtime {
        match self {
            Side::Node(n) => n.mtime(),
            Side::File(f) => f.mtime,
        }
    }

    /// How the two compare, as a commit would record them.
    fn likeness(&self, other: &Side, repo: &Repo) -> Likeness {
        match (self, other) {
            (Side::Node(a), Side::Node(b)) => a.likeness(b),
            (Side::Node(n), Side::File(f)) | (Side::File(f), Side::Node(n)) => likeness(f, n, repo),
            (Side::File(_), Side::File(_)) => Likeness::Different,
        }
    }
}

/// One path that differs; directories are expanded into their contents.
#[derive(Clone, Debug)]
pub struct Delta {
    pub path: Vec<u8>,
    pub kind: ChangeKind,
    pub old: Option<Side>,
    pub new: Option<Side>,
}

/// Staging as a diff reads it: the version it is built on, what status
/// says changed, and what a path holds now. Served by `Staging` itself, or
/// by a mount that owns it (through its files).
pub trait StagedView {
    fn base(&self) -> Result<Option<BlobRef>>;
    /// Changed paths (`A`, `M`, `D`, `C`), not escaped.
    fn changed(&self) -> Result<Vec<(char, Vec<u8>)>>;
    /// What staging holds at `path` (never a directory's listing: `None`
    /// for a directory or nothing).
    fn at(&self, path: &[u8]) -> Result<Option<Side>>;
}

/// Changes from version tree `version` to staging, in path order.
pub fn against_staging(
    repo: &Repo,
    version: &BlobRef,
    staged: &dyn StagedView,
) -> Result<Vec<Delta>> {
    let changed = staged.changed()?;
    let touched: std::collections::HashSet<&[u8]> =
        changed.iter().map(|(_, p)| p.as_slice()).collect();
    let mut out = BTreeMap::new();
    // Paths staging did not touch hold what its base holds.
    for c in diff::diff(repo, Some(version), staged.base()?.as_ref())? {
        if !touched.contains(c.path.as_slice()) {
            out.insert(
                c.path.clone(),
                Delta {
                    path: c.path,
                    kind: c.kind,
                    old: c.old.map(Side::Node),
                    new: c.new.map(Side::Node),
                },
            );
        }
    }
    for (tag, path) in changed {
        let old = repo
            .lookup(version, &RelPath::parse(&path)?)?
            .filter(|n| !n.is_dir())
            .map(Side::Node);
        let new = match tag {
            'D' => None,
            _ => staged.at(&path)?,
        };
        let kind = match (&old, &new) {
            (None, None) => continue,
            (None, Some(_)) => ChangeKind::Added,
            (Some(_), None) => ChangeKind::Removed,
            (Some(a), Some(b)) => match a.likeness(b, repo) {
                Likeness::Same => continue,
                Likeness::TimeOnly => ChangeKind::TimeOnly,
                Likeness::Different => ChangeKind::Modified,
            },
        };
        out.insert(
            path.clone(),
            Delta {
                path,
                kind,
                old,
                new,
            },
        );
    }
    Ok(out.into_values().collect())
}

/// Whether staged file `f` holds exactly `old` (mode, times, bytes), as a
/// commit would find: a file put back as it was is not a change. Its bytes
/// are hashed only when the rest already agrees.
pub fn likeness(f: &StagedFile, old: &Node, repo: &Repo) -> Likeness {
    let Node::File {
        mode,
        mtime,
        size,
        chunks,
        atime,
        ..
    } = old
    else {
        return Likeness::Different;
    };
    // Bytes are read only where the size and mode agree.
    if f.mode != *mode || f.size != *size {
        return Likeness::Different;
    }
    let Ok(file) = f.sealing.open(&f.path) else {
        return Likeness::Different;
    };
    let same_bytes = match repo.upstream() {
        // The version's chunks are named by the gateway, with a key this
        // host does not hold: their bytes are compared.
        Some(_) => crate::commit::through::differing(repo, chunks, (&f.path, &f.sealing), *size)
            .is_ok_and(|ranges| ranges.is_empty()),
        None => {
            let codec = repo.codec();
            let mut ids = chunker::chunks(file.reader(), *size, codec.chunker_seed())
                .map(|c| c.map(|c| codec.blob_id(&c)));
            chunks
                .iter()
                .all(|c| ids.next().is_some_and(|id| id.is_ok_and(|id| id == c.id)))
                && ids.next().is_none()
        }
    };
    match same_bytes {
        false => Likeness::Different,
        true if f.mtime == *mtime && Node::atime_apart(Some(f.atime), f.mtime) == *atime => {
            Likeness::Same
        }
        true => Likeness::TimeOnly,
    }
}

impl StagedView for (&Staging, &Repo) {
    fn base(&self) -> Result<Option<BlobRef>> {
        let (st, repo) = *self;
        st.base_tree(repo)
    }

    fn changed(&self) -> Result<Vec<(char, Vec<u8>)>> {
        self.0.status(self.1)
    }

    /// Walks rows without expanding a folder: below one staging never
    /// listed, the path reads through to the version subtree it stands for.
    fn at(&self, path: &[u8]) -> Result<Option<Side>> {
        let (st, repo) = *self;
        let mut node = st.node(ROOT)?;
        let mut names = path.split(|b| *b == b'/');
        while let Some(name) = names.next() {
            if let Some(tree) = node.tree {
                let rest = RelPath::from_names(std::iter::once(name).chain(names))?;
                let found = repo.lookup(&tree, &rest)?;
                return Ok(found.filter(|n| !n.is_dir()).map(Side::Node));
            }
            match st.child(node.id, name)? {
                Some(child) => node = child,
                None => return Ok(None),
            }
        }
        Ok(match node.kind {
            Kind::Dir => None,
            _ => Some(match node.as_version_node() {
                Some(n) => Side::Node(n),
                None => {
                    let super::Seen {
                        size, mtime, atime, ..
                    } = st.seen(&node);
                    Side::File(StagedFile {
                        path: st.upper_path(node.id),
                        sealing: st.sealing().clone(),
                        mode: node.mode,
                        size,
                        mtime,
                        atime,
                    })
                }
            }),
        })
    }
}
