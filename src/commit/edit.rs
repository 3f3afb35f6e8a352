//! Commits of edits: a version made from another by putting and deleting
//! paths (what a client of the gateway sends), published like any commit:
//! a parent that is no longer the newest is rebased onto it, and paths
//! both changed are a conflict.

use super::{CommitMeta, publish, scan::Scanner};
use crate::error::{Error, Result};
use crate::progress::Quiet;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::Mtime;
use crate::snapshot::tree::{TreeSink, TreeSource};
use crate::snapshot::{Entry, Node, Record, Tree};
use crate::store::pack::BlobRef;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One change: the file at `path` takes new content, or is deleted (None).
pub struct Edit {
    pub path: RelPath,
    pub content: Option<Content>,
}

pub enum Content {
    /// The bytes of a local file, chunked by the commit.
    File(PathBuf),
    /// Chunks already in the store (an upload), and their size.
    Stored(Vec<BlobRef>, u64),
}

/// A path a commit may write: any parsed path but the root.
pub fn edit_path(path: &str) -> Result<RelPath> {
    let p = RelPath::parse(path)?;
    match p.is_root() {
        true => Err(Error::InvalidInput(format!(
            "bad path {path:?}: a file's path is needed"
        ))),
        false => Ok(p),
    }
}

/// Edits grouped by the folder they change.
#[derive(Default)]
struct Folder {
    /// Name -> new content (None: delete).
    files: BTreeMap<Vec<u8>, Option<Content>>,
    dirs: BTreeMap<Vec<u8>, Folder>,
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
        let (dirs, name) = e
            .path
            .split_last()
            .ok_or_else(|| Error::InvalidInput("bad path \"\": a file's path is needed".into()))?;
        let mut at = &mut root;
        for d in dirs.names() {
            at = at.dirs.entry(d.to_vec()).or_default();
        }
        if at.dirs.contains_key(name) {
            return Err(Error::InvalidInput(format!(
                "{}: both a file and a folder in one commit",
                e.path
            )));
        }
        at.files.insert(name.to_vec(), e.content);
    }
    let mut scanner = Scanner::new(repo, &Quiet)?;
    let tree = base.as_ref().map(|b| b.tree);
    let (ours, _) = apply(repo, &mut scanner, tree.as_ref(), &root, "")?;
    publish(repo, meta, scanner, base, ours)
}

/// The tree of folder `tree` (none: a new folder) with `edits` applied,
/// and whether a name in it or below is one of several of a file.
fn apply(
    repo: &Repo,
    scanner: &mut Scanner,
    tree: Option<&BlobRef>,
    edits: &Folder,
    at: &str,
) -> Result<(BlobRef, bool)> {
    let mut entries: BTreeMap<Vec<u8>, Node> = match tree {
        Some(t) => repo
            .tree(t)?
            .entries
            .iter()
            .map(|e| (e.name.clone(), e.node.clone()))
            .collect(),
        None => BTreeMap::new(),
    };
    let now = Mtime::now();
    for (name, content) in &edits.files {
        let path = format!("{at}{}", String::from_utf8_lossy(name));
        match content {
            None => {
                if entries.remove(name).is_none() {
                    return Err(Error::NoPath {
                        version: "the parent version".into(),
                        path,
                    });
                }
            }
            Some(content) => {
                let (chunks, size) = match content {
                    Content::File(file) => scanner.chunk_prefix(file, u64::MAX)?,
                    Content::Stored(chunks, size) => (chunks.clone(), *size),
                };
                // A file that was there keeps its mode; a new one is 0644.
                // Rewritten with the same bytes, it keeps its time too: no
                // change (an unchanged dataset records no version).
                let mode = match entries.get(name) {
                    Some(Node::File {
                        chunks: old,
                        size: was,
                        ..
                    }) if *old == chunks && *was == size => continue,
                    Some(Node::File { mode, .. }) => *mode,
                    _ => 0o644,
                };
                let node = Node::File {
                    mode,
                    mtime: now,
                    size,
                    chunks,
                    atime: None,
                    link: None,
                };
                entries.insert(name.clone(), node);
            }
        }
    }
    for (name, sub) in &edits.dirs {
        let path = format!("{at}{}/", String::from_utf8_lossy(name));
        let (inner, mode) = match entries.get(name) {
            Some(Node::Dir { tree, mode, .. }) => (Some(*tree), *mode),
            Some(_) => {
                return Err(Error::InvalidInput(format!(
                    "{}: is a file, not a folder",
                    path.trim_end_matches('/')
                )));
            }
            None => (None, 0o755),
        };
        let (tree, links) = apply(repo, scanner, inner.as_ref(), sub, &path)?;
        entries.insert(
            name.clone(),
            Node::Dir {
                mode,
                mtime: now,
                tree,
                atime: None,
                links,
            },
        );
    }
    let tree = Tree::new(
        entries
            .into_iter()
            .map(|(name, node)| Entry { name, node })
            .collect(),
    );
    Ok((scanner.put_tree(&tree)?, tree.has_links()))
}
