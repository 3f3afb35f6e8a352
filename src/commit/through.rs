//! Commits through a gateway (`Repo::upstream`), for a host that holds no
//! store key: what changed against the version a commit builds on, as the
//! gateway shows that version to the caller, sent as changes
//! (`repo::changes`: every mode, time, symlink and folder); the gateway
//! applies them to the version as the store holds it, so what is hidden
//! from the caller stays. A changed file is compared with the version's
//! file at its path and only the ranges that differ are sent (a patch),
//! unless most of it differs.
//!
//! Two sources: a local folder (`commit --from`), where a file whose
//! size, time and mode are the version's is unchanged (as rsync's quick
//! check has it); and staging (`commit::staged`), whose staged copies are
//! sent as they are read (`send_file`) and whose tree, built in this
//! host's own store, is compared with the version's (`publish`).

use super::CommitMeta;
use crate::error::{Error, Result};
use crate::id::{BlobId, PackId};
use crate::relpath::RelPath;
use crate::repo::changes::{Change, Patch, Sending, Source, WireName};
use crate::repo::{Repo, Upstream};
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Mtime, Node, Record};
use crate::store::pack::{self, BlobRef};
use crate::store::sealed_file::{LocalFile, Sealing};
use sha2::Digest;
use std::collections::{BTreeMap, HashMap};
use std::fs::Metadata;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Bytes compared at a time: a patch's ranges are whole blocks.
const BLOCK: usize = 64 << 10;

/// What a commit through a gateway made and sent.
pub struct Sent {
    pub version: u64,
    /// Bytes of file content sent (whole files and patches).
    pub bytes: u64,
}

fn upstream(repo: &Repo) -> Result<&dyn Upstream> {
    repo.upstream()
        .ok_or_else(|| Error::InvalidInput("not a store reached through a gateway".into()))
}

/// Files no larger than this, new at their path, wait to be sent with
/// others in one request (a bundle), not one request each.
const BUNDLED_FILE: u64 = 1 << 20;
/// Bytes, and files, a bundle gathers before it is sent.
const BUNDLE_BYTES: usize = 8 << 20;
const BUNDLE_FILES: usize = 10_000;

/// Where a file's bytes went: an upload of its own, or a place in a
/// bundle (which, of this commit's, and where in it).
#[derive(Clone)]
pub enum Went {
    Upload(String),
    Part(usize, u32),
}

/// New small files waiting to be sent together (`Upstream::bundle`), and
/// the bundles of one commit sent so far.
#[derive(Default)]
pub struct Bundler {
    waiting: Vec<bytes::Bytes>,
    bytes: usize,
    sent: Vec<String>,
    /// Bytes of files sent in bundles.
    sent_bytes: u64,
}

impl Bundler {
    /// Takes `data` into the bundle that waits (sent first if full): where
    /// it will be.
    fn add(&mut self, repo: &Repo, dataset: &str, data: bytes::Bytes) -> Result<Went> {
        let full = self.bytes + data.len() > BUNDLE_BYTES || self.waiting.len() >= BUNDLE_FILES;
        if full && !self.waiting.is_empty() {
            self.flush(repo, dataset)?;
        }
        self.bytes += data.len();
        self.waiting.push(data);
        let part = u32::try_from(self.waiting.len() - 1).expect("at most BUNDLE_FILES");
        Ok(Went::Part(self.sent.len(), part))
    }

    /// Sends the bundle that waits, if any.
    fn flush(&mut self, repo: &Repo, dataset: &str) -> Result<()> {
        if self.waiting.is_empty() {
            return Ok(());
        }
        let id = upstream(repo)?.bundle(dataset, &self.waiting)?;
        self.sent_bytes += self.bytes as u64;
        self.sent.push(id);
        self.waiting.clear();
        self.bytes = 0;
        Ok(())
    }

    /// The upload and part a change names for `went` (once flushed).
    fn named(&self, went: &Went) -> (String, Option<u32>) {
        match went {
            Went::Upload(id) => (id.clone(), None),
            Went::Part(bundle, part) => (self.sent[*bundle].clone(), Some(*part)),
        }
    }
}

/// A local file: where it is, and how its bytes are kept there (a staged
/// copy of this host's may be sealed).
type Local<'a> = (&'a Path, &'a Sealing);

/// The first `size` bytes of local file `file` (all of them there must be).
fn read_whole((file, sealing): Local, size: u64) -> Result<bytes::Bytes> {
    use std::io::Read;
    let io = |e| Error::io(file.display(), e);
    let mut data = Vec::with_capacity(crate::limits::to_usize(size));
    sealing
        .open(file)
        .map_err(io)?
        .reader()
        .take(size)
        .read_to_end(&mut data)
        .map_err(io)?;
    match data.len() as u64 == size {
        true => Ok(data.into()),
        false => Err(Error::InvalidInput(format!(
            "{} became shorter while it was read",
            file.display()
        ))),
    }
}

/// Commits folder `from` as the next version of `meta.dataset` through
/// the gateway `repo` reaches (the author is the gateway's caller).
pub fn commit_dir(repo: &Repo, meta: &CommitMeta, from: &Path) -> Result<Sent> {
    meta.check()?;
    let up = upstream(repo)?;
    let stat = std::fs::metadata(from).map_err(|e| Error::io(from.display(), e))?;
    if !stat.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{} is not a directory",
            from.display()
        )));
    }
    repo.check_dataset(meta.dataset)?;
    let base = repo.sync_whole(meta.dataset)?.pop();
    let mut walk = Walk {
        repo,
        dataset: meta.dataset,
        base: base.as_ref().map(|b| b.version),
        content_only: meta.content_only,
        changes: Vec::new(),
        sent: 0,
        bundler: Bundler::default(),
        bundled: Vec::new(),
    };
    walk.dir(from, &RelPath::root(), base.as_ref().map(|b| &b.tree), 0)?;
    walk.bundler.flush(repo, meta.dataset)?;
    let Walk {
        mut changes,
        sent,
        bundler,
        bundled,
        ..
    } = walk;
    for (i, went) in bundled {
        if let Change::File { upload, part, .. } = &mut changes[i] {
            let (id, at) = bundler.named(&went);
            (*upload, *part) = (Some(id), at);
        }
    }
    let sent = sent + bundler.sent_bytes;
    if changes.is_empty() {
        return Err(Error::NothingToCommit(base.map_or(0, |b| b.version)));
    }
    let version = up.commit(
        meta.dataset,
        base.map(|b| b.version),
        meta.message,
        &changes,
    )?;
    Ok(Sent {
        version,
        bytes: sent,
    })
}

/// Sends local file `file` (`size` bytes) for `at` of `dataset`, as a
/// patch of `old` (the chunks of the file at `at` of version `base`) where
/// most of it is the same: the upload's id and the bytes sent, or None if
/// its bytes are `old`'s.
fn send(
    repo: &Repo,
    dataset: &str,
    at: &RelPath,
    (file, sealing): Local,
    size: u64,
    old: Option<(u64, &[BlobRef])>,
) -> Result<Option<(String, u64)>> {
    // A name the changes cannot carry is refused before anything is sent.
    wire_path(at)?;
    let meta = std::fs::metadata(file).map_err(|e| Error::io(file.display(), e))?;
    let patch = match old {
        Some((version, chunks)) => {
            let ranges = differing(repo, chunks, (file, sealing), size)?;
            if ranges.is_empty() && chunks.iter().map(|c| u64::from(c.size)).sum::<u64>() == size {
                return Ok(None);
            }
            let differ: u64 = ranges.iter().map(|r| r.1).sum();
            (differ < size / 2).then(|| Patch {
                version,
                from: at.clone(),
                size,
                ranges,
            })
        }
        None => None,
    };
    // What is sent: this file as it is now (any write moves its ctime).
    let resume = sha2::Sha256::new()
        .chain_update(dataset.as_bytes())
        .chain_update([0])
        .chain_update(at.as_bytes())
        .chain_update([0])
        .chain_update(
            [
                meta.dev(),
                meta.ino(),
                meta.size(),
                meta.mtime() as u64,
                meta.mtime_nsec() as u64,
                meta.ctime() as u64,
                meta.ctime_nsec() as u64,
                size,
                patch.as_ref().map_or(0, |p| p.version),
            ]
            .map(u64::to_be_bytes)
            .concat(),
        )
        .finalize()
        .into();
    let sending = Sending {
        dataset,
        path: at,
        file,
        sealing,
        size,
        patch: patch.as_ref(),
        resume: Some(resume),
    };
    upstream(repo)?.upload(&sending).map(Some)
}

/// Sends staged copy `file` (its first `size` bytes), to be `at` of a
/// version of `dataset` made on `base`: its upload's id, and chunks that
/// stand for it in the tree a commit builds (never read: `publish` names
/// the upload instead, and staging takes the version's chunks once it
/// lands).
pub fn send_file(
    repo: &Repo,
    (dataset, base): (&str, Option<&Record>),
    at: &RelPath,
    (file, sealing, size): (&Path, &Sealing, u64),
    bundler: &mut Bundler,
) -> Result<(Went, Vec<BlobRef>)> {
    let old = match base {
        Some(b) => match repo.lookup(&b.tree, at)? {
            Some(Node::File { chunks, .. }) => Some((b.version, chunks)),
            _ => None,
        },
        None => None,
    };
    if old.is_none() && size <= BUNDLED_FILE {
        wire_path(at)?;
        // Read now, while the commit watches the copy for writes.
        let went = bundler.add(repo, dataset, read_whole((file, sealing), size)?)?;
        let Went::Part(b, p) = &went else {
            unreachable!("a bundle's part")
        };
        let token = format!(
            "bundle {b} part {p} {}",
            hex::encode(rand::random::<[u8; 8]>())
        );
        return Ok((went, standing_for(&token, size)));
    }
    let old = old.as_ref().map(|(v, c)| (*v, c.as_slice()));
    let (id, _) = match send(repo, dataset, at, (file, sealing), size, old)? {
        Some(sent) => sent,
        // The same bytes: sent anyway, as a file of its own (an upload is
        // what stands for a staged copy).
        None => whole(repo, dataset, at, (file, sealing), size)?,
    };
    let standing = standing_for(&id, size);
    Ok((Went::Upload(id), standing))
}

/// Sends local file `file` whole (`size` bytes) for `at` of `dataset`.
fn whole(
    repo: &Repo,
    dataset: &str,
    at: &RelPath,
    (file, sealing): Local,
    size: u64,
) -> Result<(String, u64)> {
    let sending = Sending {
        dataset,
        path: at,
        file,
        sealing,
        size,
        patch: None,
        resume: None,
    };
    upstream(repo)?.upload(&sending)
}

/// Chunks that stand for what `id` names (an upload, a bundle's part) of
/// `size` bytes: ids no store gives (a hash of `id`), in pieces no
/// larger than a chunk.
fn standing_for(id: &str, size: u64) -> Vec<BlobRef> {
    let max = crate::limits::MAX_CHUNK;
    (0..size.div_ceil(max).max(1))
        .map(|i| {
            let name: [u8; 32] = sha2::Sha256::new()
                .chain_update(b"upload")
                .chain_update(id.as_bytes())
                .chain_update(i.to_be_bytes())
                .finalize()
                .into();
            let len = u32::try_from((size - i * max).min(max)).expect("at most a chunk");
            BlobRef {
                id: BlobId::from_bytes(name),
                pack: PackId::from_bytes(name),
                offset: pack::MAGIC.len() as u64,
                len: len + 1,
                size: len,
            }
        })
        .collect()
}

/// Publishes `ours` (a tree built in this host's store from staging, its
/// staged copies standing for `uploads` by their first chunk's id) as the
/// version after `base`: the changes between them are sent, and the
/// version the gateway made is returned as this host sees it.
pub fn publish(
    repo: &Repo,
    meta: &CommitMeta,
    base: Option<&Record>,
    ours: &BlobRef,
    (uploads, bundler): (&HashMap<BlobId, Went>, &mut Bundler),
) -> Result<Record> {
    let up = upstream(repo)?;
    bundler.flush(repo, meta.dataset)?;
    let mut diff = TreeDiff {
        repo,
        dataset: meta.dataset,
        base: base.map(|b| b.version),
        uploads,
        bundler,
        changes: Vec::new(),
    };
    diff.dir(&RelPath::root(), base.map(|b| &b.tree), ours, 0)?;
    let base_version = base.map(|b| b.version);
    if diff.changes.is_empty() {
        return Err(Error::NothingToCommit(base_version.unwrap_or(0)));
    }
    crate::hold::hold("changes-sent");
    let version = match up.commit(meta.dataset, base_version, meta.message, &diff.changes) {
        // Our changes are in a version that landed since the base: most
        // likely this very commit, its answer lost with a gateway that
        // made it (the next one found nothing left to do).
        Err(Error::NothingToCommit(v)) if base_version.is_none_or(|b| v > b) => v,
        other => other?,
    };
    repo.sync(meta.dataset)?
        .into_iter()
        .find(|r| r.version == version)
        .ok_or_else(|| Error::NoVersion {
            dataset: meta.dataset.to_string(),
            version: format!("v{version}"),
        })
}

/// `mtime` as the wire carries it.
fn wire_time(t: Mtime) -> (i64, u32) {
    (t.0, t.1)
}

fn wire_path(at: &RelPath) -> Result<WireName> {
    Ok(WireName(at.as_bytes().to_vec()))
}

fn wire_target(target: &[u8]) -> WireName {
    WireName(target.to_vec())
}

fn not_carried(at: &dyn std::fmt::Display) -> Error {
    Error::InvalidInput(format!(
        "{at}: through a gateway, a version holds files, folders and symlinks"
    ))
}

fn too_deep(at: &dyn std::fmt::Display) -> Error {
    Error::InvalidInput(format!(
        "{at} nests deeper than {} folders",
        crate::limits::MAX_DEPTH
    ))
}

fn entries(repo: &Repo, tree: Option<&BlobRef>) -> Result<BTreeMap<Vec<u8>, Node>> {
    Ok(match tree {
        Some(t) => repo.tree(t)?.by_name(),
        None => BTreeMap::new(),
    })
}

/// Deletions of what is left of `old` (names of folder `at` that are gone);
/// says whether there were any.
fn deleted(changes: &mut Vec<Change>, at: &RelPath, old: BTreeMap<Vec<u8>, Node>) -> Result<bool> {
    let gone = !old.is_empty();
    for name in old.into_keys() {
        let path = wire_path(&at.join(&name)?)?;
        changes.push(Change::Delete { path });
    }
    Ok(gone)
}

/// Whether a folder replaces what is not one, or the reverse (then the
/// old is deleted first; a file or symlink put replaces any other).
fn other_kind(old: Option<&Node>, new_dir: bool) -> bool {
    old.is_some_and(|o| o.is_dir() != new_dir)
}

/// A node's mode (a symlink's is always 0777).
fn mode_of(node: &Node) -> u32 {
    match node {
        Node::File { mode, .. } | Node::Dir { mode, .. } | Node::Special { mode, .. } => *mode,
        Node::Symlink { .. } => 0o777,
    }
}

/// The changes between a version's tree and one built from staging.
struct TreeDiff<'a> {
    repo: &'a Repo,
    dataset: &'a str,
    base: Option<u64>,
    uploads: &'a HashMap<BlobId, Went>,
    bundler: &'a Bundler,
    changes: Vec<Change>,
}

impl TreeDiff<'_> {
    /// Compares folder `ours` at `at` with the base's `tree`; says whether
    /// anything in it changed.
    fn dir(
        &mut self,
        at: &RelPath,
        tree: Option<&BlobRef>,
        ours: &BlobRef,
        depth: usize,
    ) -> Result<bool> {
        if depth > crate::limits::MAX_DEPTH {
            return Err(too_deep(at));
        }
        let mut old = entries(self.repo, tree)?;
        let mut changed = false;
        for e in &self.repo.tree(ours)?.entries {
            let here = at.join(&e.name)?;
            let was = old.remove(&e.name);
            if was.as_ref().is_some_and(|w| {
                w.same_data(&e.node)
                    && mode_of(w) == mode_of(&e.node)
                    && w.mtime() == e.node.mtime()
            }) {
                continue;
            }
            if other_kind(was.as_ref(), e.node.is_dir()) {
                self.changes.push(Change::Delete {
                    path: wire_path(&here)?,
                });
            }
            changed = true;
            let path = wire_path(&here)?;
            match &e.node {
                Node::Dir {
                    tree: t,
                    mode,
                    mtime,
                    ..
                } => {
                    let inner = match &was {
                        Some(Node::Dir { tree, .. }) => Some(tree),
                        _ => None,
                    };
                    self.dir(&here, inner, t, depth + 1)?;
                    let (mode, mtime) = (*mode, wire_time(*mtime));
                    self.changes.push(Change::Dir { path, mode, mtime });
                }
                Node::Symlink { target, mtime, .. } => {
                    let target = wire_target(target);
                    let mtime = wire_time(*mtime);
                    self.changes.push(Change::Symlink {
                        path,
                        target,
                        mtime,
                    });
                }
                Node::File {
                    chunks,
                    size,
                    mode,
                    mtime,
                    ..
                } => {
                    let ((upload, part), from) =
                        match chunks.first().and_then(|c| self.uploads.get(&c.id)) {
                            Some(went) => {
                                let (id, part) = self.bundler.named(went);
                                ((Some(id), part), None)
                            }
                            // The base's own bytes at this path: a new mode or time.
                            None if was.as_ref().is_some_and(|w| w.same_data(&e.node)) => {
                                ((None, None), None)
                            }
                            // A file of a version, now here: named where it is,
                            // or (a small one, or one not named) its bytes sent.
                            None => match upstream(self.repo)?.source_of(chunks) {
                                Some((v, at)) => {
                                    let path = wire_path(&at)?;
                                    let from = Source {
                                        version: format!("v{v}"),
                                        path,
                                    };
                                    ((None, None), Some(from))
                                }
                                None => {
                                    let id = self.resend(&here, chunks, *size, was.as_ref())?;
                                    ((Some(id), None), None)
                                }
                            },
                        };
                    self.changes.push(Change::File {
                        path,
                        mode: Some(*mode),
                        mtime: Some(wire_time(*mtime)),
                        upload,
                        part,
                        from,
                    });
                }
                Node::Special { .. } => return Err(not_carried(&here)),
            }
        }
        changed |= deleted(&mut self.changes, at, old)?;
        Ok(changed)
    }

    /// Sends the bytes of `chunks` (a file of a version this host read)
    /// for `at`, where `was` stood: the upload's id.
    fn resend(
        &mut self,
        at: &RelPath,
        chunks: &[BlobRef],
        size: u64,
        was: Option<&Node>,
    ) -> Result<String> {
        // Kept on this host's disk as its staged copies are.
        let sealing = self.repo.local_sealing();
        let tmp = tempfile::NamedTempFile::new_in(self.repo.state_dir())
            .map_err(|e| Error::io(self.repo.state_dir().display(), e))?;
        let file = tmp
            .as_file()
            .try_clone()
            .map_err(|e| Error::io(tmp.path().display(), e))?;
        crate::read::read_file(self.repo, chunks, &mut sealing.keep(file).writer())?;
        let old = match (was, self.base) {
            (Some(Node::File { chunks, .. }), Some(v)) => Some((v, chunks.as_slice())),
            _ => None,
        };
        let local = (tmp.path(), &sealing);
        let (id, _) = match send(self.repo, self.dataset, at, local, size, old)? {
            Some(sent) => sent,
            None => whole(self.repo, self.dataset, at, local, size)?,
        };
        Ok(id)
    }
}

struct Walk<'a> {
    repo: &'a Repo,
    dataset: &'a str,
    base: Option<u64>,
    /// A file with the same bytes and mode keeps its time (`--content-only`).
    content_only: bool,
    changes: Vec<Change>,
    sent: u64,
    bundler: Bundler,
    /// Changes whose files went into bundles: by their place in `changes`.
    bundled: Vec<(usize, Went)>,
}

fn time(meta: &Metadata) -> Mtime {
    Mtime::of_stat(meta.mtime(), meta.mtime_nsec())
}

impl Walk<'_> {
    /// Compares local folder `local` (at `at`) with the base's `tree`;
    /// says whether anything in it changed.
    fn dir(
        &mut self,
        local: &Path,
        at: &RelPath,
        tree: Option<&BlobRef>,
        depth: usize,
    ) -> Result<bool> {
        if depth > crate::limits::MAX_DEPTH {
            return Err(too_deep(&local.display()));
        }
        let mut old = entries(self.repo, tree)?;
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
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| Error::io(path.display(), e))?;
            let here = at.join(&name)?;
            let was = old.remove(&name);
            let kind = meta.file_type();
            if !(kind.is_dir() || kind.is_file() || kind.is_symlink()) {
                return Err(not_carried(&path.display()));
            }
            // What a name held of another kind goes first.
            if other_kind(was.as_ref(), kind.is_dir()) {
                self.changes.push(Change::Delete {
                    path: wire_path(&here)?,
                });
                changed = true;
            }
            let (mode, mtime) = (meta.mode() & 0o7777, time(&meta));
            if kind.is_dir() {
                let (tree, attrs) = match was {
                    Some(Node::Dir {
                        tree, mode, mtime, ..
                    }) => (Some(tree), Some((mode, mtime))),
                    _ => (None, None),
                };
                let below = self.dir(&path, &here, tree.as_ref(), depth + 1)?;
                if below || attrs != Some((mode, mtime)) {
                    let (path, mtime) = (wire_path(&here)?, wire_time(mtime));
                    self.changes.push(Change::Dir { path, mode, mtime });
                    changed = true;
                }
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| Error::io(path.display(), e))?;
                let target = target.as_os_str().as_bytes();
                if !matches!(&was, Some(Node::Symlink { target: t, mtime: m, .. }) if t == target && m == &mtime)
                {
                    self.changes.push(Change::Symlink {
                        path: wire_path(&here)?,
                        target: wire_target(target),
                        mtime: wire_time(mtime),
                    });
                    changed = true;
                }
            } else {
                changed |= self.file(&path, &here, &meta, was)?;
            }
        }
        changed |= deleted(&mut self.changes, at, old)?;
        Ok(changed)
    }

    /// Compares local file `local` with what `was` at its path; says
    /// whether it changed (and sends what did).
    fn file(
        &mut self,
        local: &Path,
        at: &RelPath,
        meta: &Metadata,
        was: Option<Node>,
    ) -> Result<bool> {
        let (mode, mtime, size) = (meta.mode() & 0o7777, time(meta), meta.len());
        let old = match was {
            Some(Node::File {
                chunks,
                size: s,
                mode: m,
                mtime: t,
                ..
            }) => {
                if (s, m, t) == (size, mode, mtime) {
                    return Ok(false);
                }
                Some((chunks, m))
            }
            _ => None,
        };
        if old.is_none() && size <= BUNDLED_FILE {
            let path = wire_path(at)?;
            let data = read_whole((local, &Sealing::Plain), size)?;
            let went = self.bundler.add(self.repo, self.dataset, data)?;
            self.bundled.push((self.changes.len(), went));
            self.changes.push(Change::File {
                path,
                mode: Some(mode),
                mtime: Some(wire_time(mtime)),
                upload: None,
                part: None,
                from: None,
            });
            return Ok(true);
        }
        let base = old
            .as_ref()
            .zip(self.base)
            .map(|((c, _), v)| (v, c.as_slice()));
        let upload = match send(
            self.repo,
            self.dataset,
            at,
            (local, &Sealing::Plain),
            size,
            base,
        )? {
            Some((id, sent)) => {
                self.sent += sent;
                Some(id)
            }
            // The same bytes: a new mode or time only.
            None if self.content_only && old.as_ref().is_some_and(|o| o.1 == mode) => {
                return Ok(false);
            }
            None => None,
        };
        self.changes.push(Change::File {
            path: wire_path(at)?,
            mode: Some(mode),
            mtime: Some(wire_time(mtime)),
            upload,
            part: None,
            from: None,
        });
        Ok(true)
    }
}

/// The ranges (whole blocks) where local file `local`, `size` bytes long,
/// differs from the file of `chunks`, in order, neighbours joined.
/// (Also how staging tells a staged copy of a host reading through a
/// gateway from the version's file: `staging::compare::likeness`.)
pub fn differing(
    repo: &Repo,
    chunks: &[BlobRef],
    (local, sealing): Local,
    size: u64,
) -> Result<Vec<(u64, u64)>> {
    let file = sealing
        .open(local)
        .map_err(|e| Error::io(local.display(), e))?;
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
    file: LocalFile,
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
        let n =
            crate::limits::to_usize((theirs.len() as u64).min(self.size.saturating_sub(self.at)));
        if n > 0 {
            let got = self
                .file
                .read_at(&mut self.mine[..n], self.at)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", self.shown)))?;
            if got < n {
                return Err(std::io::Error::other(format!(
                    "{} became shorter while it was read",
                    self.shown
                )));
            }
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
