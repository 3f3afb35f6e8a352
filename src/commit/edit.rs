//! Commits of edits: a version made from another by putting and deleting
//! paths (what a client of the gateway sends), published like any commit:
//! a parent that is no longer the newest is rebased onto it, and paths
//! both changed are a conflict.

use super::{CommitMeta, publish, sink::Sink};
use crate::error::{Error, Result};
use crate::progress::Quiet;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::Mtime;
use crate::snapshot::tree::{TreeSink, TreeSource};
use crate::snapshot::{Entry, Node, Record, Tree};
use crate::store::pack::BlobRef;
use crate::store::sealed_file::Sealing;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One change at `path`.
pub struct Edit {
    pub path: RelPath,
    pub change: Change,
}

pub enum Change {
    /// A file of this content. Without a mode it keeps the one it had
    /// (0644 if new); without a time it takes the commit's, unless its
    /// bytes and mode did not change (then it is no change at all).
    File {
        content: Content,
        mode: Option<u32>,
        mtime: Option<Mtime>,
    },
    Symlink {
        target: Vec<u8>,
        mtime: Mtime,
    },
    /// A folder, made if missing, with this mode and time.
    Dir {
        mode: u32,
        mtime: Mtime,
    },
    /// A file or symlink removed, or a folder with all it holds.
    Delete,
    /// A folder removed once the commit's other edits left nothing in it:
    /// what they did not remove (hidden from the committer) stays, and
    /// the folder with it.
    RemoveDir,
}

pub enum Content {
    /// The bytes of a local file, chunked by the commit.
    File(PathBuf),
    /// Chunks already in the store (an upload), and their size.
    Stored(Vec<BlobRef>, u64),
}

impl Edit {
    /// New content for the file at `path`, its mode and time as `Change::File` says.
    pub fn file(path: RelPath, content: Content) -> Edit {
        let change = Change::File {
            content,
            mode: None,
            mtime: None,
        };
        Edit { path, change }
    }

    pub fn delete(path: RelPath) -> Edit {
        let change = Change::Delete;
        Edit { path, change }
    }
}

/// A path a commit may write: any parsed path but the root.
pub fn edit_path(path: impl AsRef<[u8]>) -> Result<RelPath> {
    let p = RelPath::parse(path.as_ref())?;
    match p.is_root() {
        true => Err(Error::InvalidInput(format!(
            "bad path {:?}: a file's path is needed",
            String::from_utf8_lossy(path.as_ref())
        ))),
        false => Ok(p),
    }
}

/// Edits grouped by the folder they change.
#[derive(Default)]
struct Folder {
    /// Name -> a file's, a symlink's or a deletion.
    files: BTreeMap<Vec<u8>, Change>,
    dirs: BTreeMap<Vec<u8>, Folder>,
    /// Its mode and time, if given (`Change::Dir`).
    attrs: Option<(u32, Mtime)>,
    /// Removed if the edits leave it empty (`Change::RemoveDir`).
    remove: bool,
}

impl Folder {
    /// Files and folders of one name may meet only as a deletion of one
    /// and the other (a file becoming a folder, or the reverse).
    fn add(&mut self, e: Edit) -> Result<()> {
        let both = || {
            Error::InvalidInput(format!(
                "{}: both a file and a folder in one commit",
                e.path
            ))
        };
        let mut at = self;
        let mut names: Vec<&[u8]> = e.path.names().collect();
        let Some(name) = names.pop() else {
            return Err(Error::InvalidInput(
                "bad path \"\": a file's path is needed".into(),
            ));
        };
        for d in names {
            if at
                .files
                .get(d)
                .is_some_and(|c| !matches!(c, Change::Delete))
            {
                return Err(both());
            }
            at = at.dirs.entry(d.to_vec()).or_default();
        }
        let put_file = at
            .files
            .get(name)
            .is_some_and(|c| !matches!(c, Change::Delete));
        match e.change {
            Change::Dir { .. } | Change::RemoveDir if put_file => return Err(both()),
            Change::Dir { mode, mtime } => {
                at.dirs.entry(name.to_vec()).or_default().attrs = Some((mode, mtime));
            }
            Change::RemoveDir => at.dirs.entry(name.to_vec()).or_default().remove = true,
            Change::Delete => {
                at.files.insert(name.to_vec(), Change::Delete);
            }
            put => {
                if at.dirs.get(name).is_some_and(|d| !d.remove) {
                    return Err(both());
                }
                at.files.insert(name.to_vec(), put);
            }
        }
        Ok(())
    }
}

/// Records `edits` applied to version `parent` (or the newest; none for a
/// new dataset's first version) as the next version.
pub fn commit_edits(
    repo: &Repo,
    meta: &CommitMeta,
    parent: Option<&str>,
    edits: Vec<Edit>,
) -> Result<Record> {
    meta.check()?;
    repo.check_dataset(meta.dataset)?;
    let base = match parent {
        Some(spec) => Some(repo.version(meta.dataset, spec)?),
        None => repo.sync_whole(meta.dataset)?.pop(),
    };
    let mut root = Folder::default();
    for e in edits {
        root.add(e)?;
    }
    let mut scanner = Sink::new(repo, &Quiet)?;
    let tree = base.as_ref().map(|b| b.tree);
    let (ours, _, _) = apply(repo, &mut scanner, tree.as_ref(), &root, "")?;
    publish(repo, meta, scanner, None, base, ours)
}

/// The tree of folder `tree` (none: a new folder) with `edits` applied,
/// whether a name in it or below is one of several of a file, and whether
/// it is empty. Deletions go first, then folders, then new files and symlinks, so a
/// name may change from one kind to the other.
fn apply(
    repo: &Repo,
    scanner: &mut Sink,
    tree: Option<&BlobRef>,
    edits: &Folder,
    at: &str,
) -> Result<(BlobRef, bool, bool)> {
    let mut entries = match tree {
        Some(t) => repo.tree(t)?.by_name(),
        None => BTreeMap::new(),
    };
    let now = Mtime::now();
    let path_of = |name: &[u8]| format!("{at}{}", String::from_utf8_lossy(name));
    for (name, change) in &edits.files {
        if !matches!(change, Change::Delete) {
            continue;
        }
        match entries.get(name) {
            None => {
                return Err(Error::NoPath {
                    version: "the parent version".into(),
                    path: path_of(name),
                });
            }
            Some(_) => entries.remove(name),
        };
    }
    for (name, sub) in &edits.dirs {
        let path = format!("{}/", path_of(name));
        let (inner, mode, mtime) = match entries.get(name) {
            Some(Node::Dir {
                tree, mode, mtime, ..
            }) => (Some(*tree), *mode, *mtime),
            Some(_) => {
                return Err(Error::InvalidInput(format!(
                    "{}: is a file, not a folder",
                    path_of(name)
                )));
            }
            None if sub.remove && sub.attrs.is_none() => continue,
            None => (None, 0o755, now),
        };
        let (tree, links, empty) = apply(repo, scanner, inner.as_ref(), sub, &path)?;
        if sub.remove && empty {
            entries.remove(name);
            continue;
        }
        // A folder keeps its time unless given one, or its names changed.
        let (mode, mtime) = match sub.attrs {
            Some(attrs) => attrs,
            None if inner.is_some_and(|t| t.id == tree.id) => (mode, mtime),
            None => (mode, now),
        };
        let node = Node::Dir {
            mode,
            mtime,
            tree,
            atime: None,
            links,
        };
        entries.insert(name.clone(), node);
    }
    for (name, change) in &edits.files {
        let node = match change {
            Change::Delete | Change::Dir { .. } | Change::RemoveDir => continue,
            Change::Symlink { target, mtime } => Node::Symlink {
                mtime: *mtime,
                target: target.clone(),
                atime: None,
                link: None,
            },
            Change::File {
                content,
                mode,
                mtime,
            } => {
                let (chunks, size) = match content {
                    Content::File(file) => scanner.chunk_prefix(file, &Sealing::Plain, u64::MAX)?,
                    Content::Stored(chunks, size) => (chunks.clone(), *size),
                };
                let old = entries.get(name);
                if let Some(Node::Dir { .. }) = old {
                    return Err(Error::InvalidInput(format!(
                        "{}: is a folder, not a file",
                        path_of(name)
                    )));
                }
                // Rewritten with the same bytes and no new mode or time,
                // a file is no change (an unchanged dataset records no
                // version).
                if let Some(Node::File {
                    chunks: was,
                    size: was_size,
                    mode: was_mode,
                    mtime: was_time,
                    ..
                }) = old
                    && *was == chunks
                    && *was_size == size
                    && mode.is_none_or(|m| m == *was_mode)
                    && mtime.is_none_or(|t| t == *was_time)
                {
                    continue;
                }
                let kept = match old {
                    Some(Node::File { mode, .. }) => *mode,
                    _ => 0o644,
                };
                Node::File {
                    mode: mode.unwrap_or(kept),
                    mtime: mtime.unwrap_or(now),
                    size,
                    chunks,
                    atime: None,
                    link: None,
                    erased: false,
                }
            }
        };
        entries.insert(name.clone(), node);
    }
    let tree = Tree::new(
        entries
            .into_iter()
            .map(|(name, node)| Entry { name, node })
            .collect(),
    );
    Ok((
        scanner.put_tree(&tree)?,
        tree.has_links(),
        tree.entries.is_empty(),
    ))
}
