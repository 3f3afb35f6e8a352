//! Commits through a gateway (`remote::Gateway`), for a host that holds no
//! store key: a folder's differences from the version it builds on, as
//! the gateway shows that version to the caller, sent as changes (every
//! mode, time, symlink and folder); the gateway applies them to the
//! version as the store holds it, so what is hidden from the caller stays.
//! A file is unchanged if its size, time and mode are (as rsync's quick
//! check has it); a changed one is compared with the version's file at
//! its path, and only the ranges that differ are sent (a patch), unless
//! most of it differs.

use crate::error::{Error, Result};
use crate::relpath::RelPath;
use crate::remote::{Gateway, Patch};
use crate::repo::Repo;
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Mtime, Node};
use crate::store::pack::BlobRef;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs::{File, Metadata};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

/// Bytes compared at a time: a patch's ranges are whole blocks.
const BLOCK: usize = 64 << 10;

/// What a commit through a gateway made and sent.
pub struct Sent {
    pub version: u64,
    /// Bytes of file content sent (whole files and patches).
    pub bytes: u64,
}

/// Commits folder `from` as the next version of `dataset` through
/// `gateway`, `repo` being the host's view of it (`Repo::with_upstream`).
pub fn commit_dir(
    repo: &Repo,
    gateway: &Gateway,
    dataset: &str,
    message: &str,
    from: &Path,
    content_only: bool,
) -> Result<Sent> {
    if message.trim().is_empty() {
        return Err(Error::InvalidInput("empty commit message".into()));
    }
    let stat = std::fs::metadata(from).map_err(|e| Error::io(from.display(), e))?;
    if !stat.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{} is not a directory",
            from.display()
        )));
    }
    repo.check_dataset(dataset)?;
    let base = repo.sync_whole(dataset)?.pop();
    let mut walk = Walk {
        repo,
        gateway,
        dataset,
        base: base.as_ref().map(|b| b.version),
        content_only,
        changes: Vec::new(),
        sent: 0,
    };
    walk.dir(from, &RelPath::root(), base.as_ref().map(|b| &b.tree), 0)?;
    if walk.changes.is_empty() {
        return Err(Error::NothingToCommit(walk.base.unwrap_or(0)));
    }
    let Walk { changes, sent, .. } = walk;
    let version = gateway.commit_changes(dataset, base.map(|b| b.version), message, changes)?;
    Ok(Sent {
        version,
        bytes: sent,
    })
}

struct Walk<'a> {
    repo: &'a Repo,
    gateway: &'a Gateway,
    dataset: &'a str,
    base: Option<u64>,
    /// A file with the same bytes and mode keeps its time (`--content-only`).
    content_only: bool,
    changes: Vec<Value>,
    sent: u64,
}

fn time(meta: &Metadata) -> Mtime {
    Mtime::of_stat(meta.mtime(), meta.mtime_nsec())
}

fn wire_path(at: &RelPath) -> Result<&str> {
    std::str::from_utf8(at.as_bytes()).map_err(|_| {
        Error::InvalidInput(format!(
            "{}: through a gateway, names are UTF-8",
            at
        ))
    })
}

impl Walk<'_> {
    /// Compares local folder `local` (at `at`) with the base's `tree`;
    /// says whether anything in it changed.
    fn dir(&mut self, local: &Path, at: &RelPath, tree: Option<&BlobRef>, depth: usize) -> Result<bool> {
        if depth > crate::limits::MAX_DEPTH {
            return Err(Error::InvalidInput(format!(
                "{} nests deeper than {} folders",
                local.display(),
                crate::limits::MAX_DEPTH
            )));
        }
        let mut old: BTreeMap<Vec<u8>, Node> = match tree {
            Some(t) => self
                .repo
                .tree(t)?
                .entries
                .iter()
                .map(|e| (e.name.clone(), e.node.clone()))
                .collect(),
            None => BTreeMap::new(),
        };
        let io = |e| Error::io(local.display(), e);
        let mut names: Vec<Vec<u8>> = std::fs::read_dir(local)
            .map_err(io)?
            .map(|e| e.map(|e| e.file_name().as_bytes().to_vec()))
            .collect::<std::io::Result<_>>()
            .map_err(io)?;
        names.sort();
        let mut changed = false;
        for name in names {
            let path = local.join(std::ffi::OsStr::from_bytes(&name));
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(path.display(), e))?;
            let here = at.join(&name)?;
            let was = old.remove(&name);
            let kind = meta.file_type();
            // What a name held of another kind goes first.
            let other_kind = match &was {
                Some(Node::Dir { .. }) => !kind.is_dir(),
                Some(Node::File { .. }) => !kind.is_file() && !kind.is_symlink(),
                Some(_) => kind.is_dir(),
                None => false,
            };
            if other_kind {
                self.changes.push(json!({"kind": "delete", "path": wire_path(&here)?}));
                changed = true;
            }
            let was = was.filter(|_| !other_kind);
            let (mode, mtime) = (meta.mode() & 0o7777, time(&meta));
            if kind.is_dir() {
                let (tree, attrs) = match was {
                    Some(Node::Dir { tree, mode, mtime, .. }) => (Some(tree), Some((mode, mtime))),
                    _ => (None, None),
                };
                let below = self.dir(&path, &here, tree.as_ref(), depth + 1)?;
                if below || attrs != Some((mode, mtime)) {
                    self.changes.push(json!({"kind": "dir", "path": wire_path(&here)?,
                        "mode": mode, "mtime": [mtime.0, mtime.1]}));
                    changed = true;
                }
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| Error::io(path.display(), e))?;
                let target = target.as_os_str().as_bytes();
                if !matches!(&was, Some(Node::Symlink { target: t, mtime: m, .. }) if t == target && m == &mtime)
                {
                    let target = std::str::from_utf8(target).map_err(|_| {
                        Error::InvalidInput(format!("{here}: through a gateway, symlink targets are UTF-8"))
                    })?;
                    self.changes.push(json!({"kind": "symlink", "path": wire_path(&here)?,
                        "target": target, "mtime": [mtime.0, mtime.1]}));
                    changed = true;
                }
            } else if kind.is_file() {
                changed |= self.file(&path, &here, &meta, was)?;
            } else {
                return Err(Error::InvalidInput(format!(
                    "{}: through a gateway, a version holds files, folders and symlinks",
                    path.display()
                )));
            }
        }
        for name in old.into_keys() {
            self.changes.push(json!({"kind": "delete", "path": wire_path(&at.join(&name)?)?}));
            changed = true;
        }
        Ok(changed)
    }

    /// Compares local file `local` with what `was` at its path; says
    /// whether it changed (and sends what did).
    fn file(&mut self, local: &Path, at: &RelPath, meta: &Metadata, was: Option<Node>) -> Result<bool> {
        let (mode, mtime, size) = (meta.mode() & 0o7777, time(meta), meta.len());
        let mut change = json!({"kind": "file", "path": wire_path(at)?,
            "mode": mode, "mtime": [mtime.0, mtime.1]});
        let old = match was {
            Some(Node::File { chunks, size: s, mode: m, mtime: t, .. }) => {
                if (s, m, t) == (size, mode, mtime) {
                    return Ok(false);
                }
                Some((chunks, m))
            }
            _ => None,
        };
        let was_mode = old.as_ref().map_or(0, |o| o.1);
        let patch = match (old, self.base) {
            (Some((chunks, _)), Some(version)) => {
                let ranges = differing(self.repo, &chunks, local, size)?;
                if ranges.is_empty() {
                    // The same bytes: a new mode or time only.
                    if self.content_only && was_mode == mode {
                        return Ok(false);
                    }
                    self.changes.push(change);
                    return Ok(true);
                }
                let differ: u64 = ranges.iter().map(|r| r.1).sum();
                (differ < size / 2).then(|| Patch {
                    version,
                    from: at.clone(),
                    size,
                    ranges,
                })
            }
            _ => None,
        };
        let (id, sent) = self.gateway.upload(self.dataset, at, local, patch.as_ref())?;
        self.sent += sent;
        change["upload"] = id.into();
        self.changes.push(change);
        Ok(true)
    }
}

/// The ranges (whole blocks) where local file `local`, `size` bytes long,
/// differs from the file of `chunks`, in order, neighbours joined.
fn differing(repo: &Repo, chunks: &[BlobRef], local: &Path, size: u64) -> Result<Vec<(u64, u64)>> {
    let file = File::open(local).map_err(|e| Error::io(local.display(), e))?;
    let mut cmp = Compare {
        file,
        shown: local.display().to_string(),
        size,
        at: 0,
        held: Vec::with_capacity(BLOCK),
        mine: vec![0; BLOCK],
        ranges: Vec::new(),
    };
    crate::read::read_file(repo, chunks, &mut cmp)?;
    cmp.flush().map_err(|e| Error::io(local.display(), e))?;
    let Compare { mut ranges, at, .. } = cmp;
    if at < size {
        push(&mut ranges, at, size - at);
    }
    Ok(ranges)
}

fn push(ranges: &mut Vec<(u64, u64)>, at: u64, len: u64) {
    match ranges.last_mut() {
        Some((a, l)) if *a + *l == at => *l += len,
        _ => ranges.push((at, len)),
    }
}

/// A writer that takes a version's bytes and compares them with a local
/// file's, a block at a time.
struct Compare {
    file: File,
    shown: String,
    size: u64,
    /// Where the next block starts.
    at: u64,
    held: Vec<u8>,
    mine: Vec<u8>,
    ranges: Vec<(u64, u64)>,
}

impl Compare {
    fn block(&mut self) -> std::io::Result<()> {
        let theirs = std::mem::take(&mut self.held);
        let n = (theirs.len() as u64).min(self.size.saturating_sub(self.at)) as usize;
        if n > 0 {
            self.file.read_exact_at(&mut self.mine[..n], self.at).map_err(|e| {
                std::io::Error::new(e.kind(), format!("{}: {e}", self.shown))
            })?;
            if self.mine[..n] != theirs[..n] {
                push(&mut self.ranges, self.at, n as u64);
            }
        }
        self.at += n as u64;
        self.held = theirs;
        self.held.clear();
        Ok(())
    }
}

impl Write for Compare {
    fn write(&mut self, mut buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len();
        while !buf.is_empty() {
            let take = (BLOCK - self.held.len()).min(buf.len());
            self.held.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            if self.held.len() == BLOCK {
                self.block()?;
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.held.is_empty() {
            true => Ok(()),
            false => self.block(),
        }
    }
}
