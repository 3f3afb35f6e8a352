//! Committing staging in phases, so the mount keeps serving meanwhile:
//! freeze staging's rows under its lock; read staged copies, build trees
//! and upload without it; publish the record; bring staging to the new
//! version under the lock again. A write made during the commit is in the
//! version (it came before the freeze, or before its file was read) or
//! stays staged afterwards; docs/semantics.md says which.

use super::sink::Sink;
use super::{CommitMeta, publish};
use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::limits;
use crate::progress::Progress;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::tree::TreeSink;
use crate::snapshot::{Entry, Mtime, Node, Record, Tree};
use crate::staging::{Frozen, Kind, Read, Staging};
use crate::store::pack::BlobRef;
use std::collections::{HashMap, HashSet};
use std::ops::Deref;
use std::os::unix::fs::MetadataExt;

/// A staged copy written to while it is read is read again, this often.
const STABLE_READS: usize = 3;

/// Commits staging as the next version. `staging` takes its lock (held
/// only while freezing and finishing); `open_copies`, called under it,
/// lists staged copies open (`Staging::finish`), which stay staged. On failure
/// staging keeps every change.
pub fn commit_staging<G: Deref<Target = Staging>>(
    repo: &Repo,
    meta: &CommitMeta,
    staging: impl Fn() -> Result<G>,
    open_copies: impl Fn() -> HashSet<u64>,
    progress: &dyn Progress,
) -> Result<Record> {
    meta.check()?;
    let t = std::time::Instant::now();
    let records = repo.sync_whole(meta.dataset)?;
    let frozen = staging()?.freeze(repo, &records)?;
    tracing::debug!("commit: synced and frozen in {:?}", t.elapsed());
    crate::hold::hold("staging-frozen");
    let result = build_and_publish(repo, meta, &frozen, &staging, &open_copies, progress);
    let result = match result {
        Err(Error::Conflict { winner, paths, .. }) => Err(conflict(
            repo,
            meta.dataset,
            &frozen,
            &staging,
            winner,
            paths,
        )),
        other => other,
    };
    if result.is_err()
        && let Ok(st) = staging()
    {
        st.end_commit();
    }
    result
}

/// After a conflict with `winner`, staging stands on it with our version
/// of `paths`, noted as conflicts to resolve; the error says how.
fn conflict<G: Deref<Target = Staging>>(
    repo: &Repo,
    dataset: &str,
    frozen: &Frozen,
    staging: &impl Fn() -> Result<G>,
    winner: u64,
    paths: Vec<Vec<u8>>,
) -> Error {
    let moved = repo.sync(dataset).and_then(|records| {
        let w = records
            .iter()
            .find(|r| r.version == winner)
            .ok_or_else(|| Error::InvalidInput(format!("v{winner} vanished")))?;
        staging()?.note_conflicts(repo, frozen.base.as_ref().map(|b| &b.tree), w, &paths)
    });
    // Staging that could not be moved keeps its base: the conflict stands.
    let staged = moved
        .inspect_err(|e| tracing::warn!("staging stays on its version after a conflict: {e}"))
        .is_ok();
    Error::Conflict {
        winner,
        paths,
        staged,
    }
}

fn build_and_publish<G: Deref<Target = Staging>>(
    repo: &Repo,
    meta: &CommitMeta,
    frozen: &Frozen,
    staging: &impl Fn() -> Result<G>,
    open_copies: &impl Fn() -> HashSet<u64>,
    progress: &dyn Progress,
) -> Result<Record> {
    let base = frozen.base.clone();
    let scanner = Sink::new(repo, progress)?;
    // Through a gateway, staged copies are sent as they are read, and the
    // trees are built in this host's store to be compared with the base.
    let remote = repo.upstream().map(|_| Remote {
        repo,
        dataset: meta.dataset,
        uploads: HashMap::new(),
        bundler: Default::default(),
        paths: HashMap::new(),
    });
    if let Some(b) = base.as_ref().filter(|_| remote.is_none()) {
        repo.index_tree(&b.tree)?;
    }
    progress.set_total(frozen.staged_bytes());
    let mut build = Build {
        frozen,
        scanner,
        read: Read::new(),
        remote,
    };
    let t = std::time::Instant::now();
    let ours = build.dir(frozen.root().id, "", &RelPath::root(), 0)?.0;
    let Build {
        scanner,
        read,
        remote,
        ..
    } = build;
    // The last moment a commit can stop without a trace: after it, its
    // record may land (the caller is told which version it made).
    if progress.cancelled() {
        return Err(Error::Cancelled);
    }
    tracing::debug!(
        "commit: {} staged copies read and trees built in {:?}",
        read.len(),
        t.elapsed()
    );
    // Staging that holds exactly its base version (edits undone, or a
    // killed commit adopted at open) has nothing to commit; its staged
    // copies become read-through files of that version, so status is
    // clean again. Equal trees name the same, durable chunks.
    if let Some(b) = &base
        && b.tree.id == ours.id
    {
        let st = staging()?;
        st.finish(repo, &ours, read, b, &open_copies())?;
        return Err(Error::NothingToCommit(b.version));
    }
    staging()?.set_pending(Some(&ours))?;
    crate::hold::hold("staging-pending");
    let t = std::time::Instant::now();
    let mut paths = None;
    let published = match remote {
        None => publish(repo, meta, scanner, None, base, ours),
        Some(mut r) => scanner.finish().and_then(|_| {
            let sent = (&r.uploads, &mut r.bundler);
            let published = super::through::publish(repo, meta, base.as_ref(), &ours, sent);
            paths = Some(r.paths);
            published
        }),
    };
    // Through a gateway, the chunks that stood for staged copies are this
    // host's own: staging takes the version's.
    let landed = |read: Read, record: &Record| match &paths {
        Some(paths) => landed(repo, read, paths, record),
        None => read,
    };
    let record = match published {
        // Every staged change is in a version that landed meanwhile (say,
        // `commit --from` of the mount's staging): staging is brought to
        // it, clean, and nothing is recorded.
        Err(Error::NothingToCommit(v)) => {
            let found = repo
                .sync(meta.dataset)?
                .into_iter()
                .find(|r| r.version == v)
                .ok_or_else(|| Error::NoVersion {
                    dataset: meta.dataset.to_string(),
                    version: format!("v{v}"),
                })?;
            let read = landed(read, &found);
            staging()?.finish(repo, &ours, read, &found, &open_copies())?;
            return Err(Error::NothingToCommit(v));
        }
        other => other?,
    };
    tracing::debug!("commit: v{} published in {:?}", record.version, t.elapsed());
    // The version is durable; bring staging to it. Failures from here on
    // leave staged data in place (it is in the version too).
    let t = std::time::Instant::now();
    let read = landed(read, &record);
    let st = staging()?;
    st.finish(repo, &ours, read, &record, &open_copies())?;
    tracing::debug!("commit: staging finished in {:?}", t.elapsed());
    Ok(record)
}

/// Builds the trees of a frozen staging area.
struct Build<'f, 'r> {
    frozen: &'f Frozen,
    scanner: Sink<'r>,
    read: Read,
    remote: Option<Remote<'r>>,
}

/// A commit through a gateway: where its staged copies were sent, by the
/// id of the first chunk that stands for each (small new ones wait in
/// `bundler` to go together).
struct Remote<'r> {
    repo: &'r Repo,
    dataset: &'r str,
    uploads: HashMap<BlobId, super::through::Went>,
    bundler: super::through::Bundler,
    /// Where each staged copy read was at the freeze.
    paths: HashMap<u64, RelPath>,
}

/// What staging takes of a version made through a gateway: the chunks
/// each staged copy read has there (at its path at the freeze, its size
/// unchanged), in place of those that stood for it. A copy the version
/// does not hold so (renamed or changed by a version merged in) is left
/// out, and stays staged.
fn landed(repo: &Repo, read: Read, paths: &HashMap<u64, RelPath>, record: &Record) -> Read {
    read.into_iter()
        .filter_map(|(id, (_, size, mtime))| {
            match repo.lookup(&record.tree, paths.get(&id)?).ok()?? {
                Node::File {
                    chunks, size: s, ..
                } if s == size => Some((id, (chunks, size, mtime))),
                _ => None,
            }
        })
        .collect()
}

impl Build<'_, '_> {
    /// Builds folder `id`'s tree; also says whether a link group has a
    /// name in it.
    fn dir(&mut self, id: u64, path: &str, rel: &RelPath, depth: usize) -> Result<(BlobRef, bool)> {
        if depth > limits::MAX_DEPTH {
            return Err(Error::InvalidInput(format!(
                "staging nests deeper than {} directory levels",
                limits::MAX_DEPTH
            )));
        }
        let frozen = self.frozen;
        let mut entries = Vec::new();
        for r in frozen.children(id) {
            if self.scanner.cancelled() {
                return Err(Error::Cancelled);
            }
            let at = format!("{path}/{}", crate::escape::line(&r.name));
            let node = match (r.kind, r.tree.or(r.was)) {
                (Kind::Dir, Some(tree)) => Node::Dir {
                    mode: r.mode,
                    mtime: r.mtime,
                    tree,
                    atime: Node::atime_apart(r.atime, r.mtime),
                    links: r.links_below,
                },
                (Kind::Dir, None) => {
                    let (tree, links) = self.dir(r.id, &at, &rel.join(&r.name)?, depth + 1)?;
                    Node::Dir {
                        mode: r.mode,
                        mtime: r.mtime,
                        tree,
                        atime: Node::atime_apart(r.atime, r.mtime),
                        links,
                    }
                }
                (Kind::File, _) if r.upper => {
                    let (chunks, size, mtime) = match self.read.get(&r.id) {
                        // Another name of the same file, read already.
                        Some(read) => read.clone(),
                        None => self.staged_copy(r.id, &at, &rel.join(&r.name)?)?,
                    };
                    self.read.insert(r.id, (chunks.clone(), size, mtime));
                    Node::File {
                        mode: r.mode,
                        mtime,
                        size,
                        chunks,
                        atime: Node::atime_apart(r.atime, mtime),
                        link: None,
                        erased: false,
                    }
                }
                _ => r
                    .as_version_node()
                    .expect("lower file, symlink or special entry"),
            };
            let link = self.frozen.link_of(r);
            entries.push(Entry {
                name: r.name.clone(),
                node: if r.kind == Kind::Dir {
                    node
                } else {
                    node.with_link(link)
                },
            });
        }
        let tree = Tree::new(entries);
        Ok((self.scanner.put_tree(&tree)?, tree.has_links()))
    }

    /// A staged copy's chunks and mtime as they were when its read began:
    /// its size then is what is read, and the read is repeated if a write
    /// touched those bytes meanwhile (appends beyond them do not), so a
    /// version never holds a mix of bytes from before and after a write.
    fn staged_copy(
        &mut self,
        id: u64,
        path: &str,
        rel: &RelPath,
    ) -> Result<(Vec<BlobRef>, u64, Mtime)> {
        let file = self.frozen.upper_path(id);
        let sealing = self.frozen.sealing().clone();
        let writes = self.frozen.writes();
        let stat = |file: &std::path::Path| {
            std::fs::metadata(file).map_err(|e| Error::io(file.display(), e))
        };
        for _ in 0..STABLE_READS {
            let before = writes.watch(id);
            let meta = stat(&file)?;
            // Written by the kernel unseen (passthrough): no write running
            // when the read begins, and none begun (the file's change time
            // moves at each) by its end.
            if before.direct_open() {
                crate::staging::settle(&file).map_err(|e| Error::io(file.display(), e))?;
            }
            let plain = sealing.plain_len(meta.size());
            let (chunks, size) = match &mut self.remote {
                None => self.scanner.chunk_prefix(&file, &sealing, plain)?,
                Some(r) => {
                    let base = self.frozen.base.as_ref();
                    let (went, chunks) = super::through::send_file(
                        r.repo,
                        (r.dataset, base),
                        rel,
                        (&file, &sealing, plain),
                        &mut r.bundler,
                    )?;
                    r.uploads.insert(chunks[0].id, went);
                    r.paths.insert(id, rel.clone());
                    self.scanner.count_read(plain);
                    (chunks, plain)
                }
            };
            crate::hold::hold("staged-copy-read");
            let later = writes.counts(id);
            let unchanged = match before.written_unseen(later) {
                false => true,
                true => {
                    let after = stat(&file)?;
                    (after.ctime(), after.ctime_nsec(), after.size())
                        == (meta.ctime(), meta.ctime_nsec(), meta.size())
                }
            };
            if size == plain && unchanged && before.unchanged_below(size, later) {
                return Ok((
                    chunks,
                    size,
                    Mtime::of_stat(meta.mtime(), meta.mtime_nsec()),
                ));
            }
        }
        Err(Error::InvalidInput(format!(
            "staging{path} was written to while it was read, {STABLE_READS} times; nothing was committed (commit again once it is written)"
        )))
    }
}
