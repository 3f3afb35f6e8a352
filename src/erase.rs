//! `erase`: a path's bytes removed from every version that holds it (or
//! from a version on), for a law that requires it. Version records are
//! never rewritten (the chain stays verifiable): each erased version gets
//! a new root, the same tree with the path's files marked erased, named
//! by an `Erase` entry of the dataset's lifecycle log, which every reader
//! takes through `Repo::sync`. Then every blob that only the old roots
//! reached (the files' chunks, the trees that named them) is zeroed where
//! it lies in its pack; a chunk another file or version still uses stays.
//!
//! The steps, each safe to interrupt: a gc note first (every host forgets
//! where blobs lie before it reuses one, and a commit in flight that reused
//! an erased chunk lands before the live set is read); the new trees
//! written and durable; the entry (the commit point); the packs rewritten
//! with the spans zeroed. An erasure cut short after its entry is finished
//! by the next `erase` or `gc` (`finish_sweeps`), which zero any span of
//! the log that is not zero yet.

use crate::access::caller::Actor;
use crate::access::{Action, dataset_resource};
use crate::commit::sink::Sink;
use crate::error::{Error, Result};
use crate::id::PackId;
use crate::progress::Quiet;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::repo::lifecycle::{Event, Span};
use crate::snapshot::tree::{TreeSink, TreeSource};
use crate::snapshot::{Node, Record, Tree};
use crate::store::keys;
use crate::store::pack::BlobRef;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::SystemTime;

/// Versions per lifecycle entry of an erasure (their new roots and spans
/// keep an entry well under the store's bound on small objects); tests
/// make it small (`DETAFS_TEST_ERASE_BATCH`) to erase in several entries.
fn batch_size() -> usize {
    #[cfg(feature = "failpoints")]
    if let Some(n) = std::env::var("DETAFS_TEST_ERASE_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    500
}

/// What an erasure did, or would do.
#[derive(Debug, Default)]
pub struct Erasure {
    /// The versions whose roots changed.
    pub versions: Vec<u64>,
    /// Files marked erased, over all those versions.
    pub files: u64,
    /// Blobs zeroed (none for a dry run), and their bytes.
    pub blobs: usize,
    pub bytes: u64,
}

impl Erasure {
    /// As the gateway answers it, Python returns it and the CLI reads it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "versions": self.versions, "files": self.files,
            "blobs": self.blobs, "bytes": self.bytes,
        })
    }
}

/// What `erase` is asked.
pub struct Request<'a> {
    pub dataset: &'a str,
    pub path: &'a RelPath,
    /// Only from this version on (a spec: v3, a tag).
    pub from: Option<&'a str>,
    pub reason: &'a str,
    pub dry_run: bool,
}

/// Erases `req.path` of `req.dataset` from every version (from version
/// `req.from` on) that holds a file at or under it. Refused, changing
/// nothing, if `by` may not (`dataset:erase`) or one of those versions is
/// held or younger than the minimum age.
pub fn erase(repo: &Repo, req: &Request<'_>, by: &Actor) -> Result<Erasure> {
    let Request {
        dataset,
        path,
        from,
        reason,
        dry_run,
    } = *req;
    repo.require(&by.who, Action::Erase, &dataset_resource(dataset))?;
    if path.is_root() {
        return Err(Error::InvalidInput(
            "erase needs a path in the dataset, not its root".into(),
        ));
    }
    if reason.trim().is_empty() {
        return Err(Error::InvalidInput(
            "an erasure needs a reason (--reason), kept on record".into(),
        ));
    }
    if !dry_run {
        finish_sweeps(repo, dataset)?;
    }
    let from = match from {
        Some(spec) => repo.version(dataset, spec)?.version,
        None => 0,
    };
    let plan = affected(repo, dataset, path, from)?;
    if plan.is_empty() {
        return Err(Error::NoPath {
            version: match from {
                0 => "any version".into(),
                v => format!("any version from v{v} on"),
            },
            path: format!("{path} (nothing left to erase)"),
        });
    }
    let mut done = Erasure {
        versions: plan.iter().map(|(r, _)| r.version).collect(),
        files: plan.iter().map(|(_, n)| *n).sum(),
        ..Erasure::default()
    };
    if dry_run {
        return Ok(done);
    }
    repo.leave_gc_note()?;
    // Read again after the note: a version committed meanwhile that holds
    // the path keeps it (it came after the erasure was asked for), and
    // what it reuses is live.
    let mut log = repo.lifecycle_log(dataset)?;
    let plan = affected(repo, dataset, path, from)?;
    // A batch of versions per entry, each entry its own commit point: an
    // entry stays small however many versions hold the path. Every new
    // tree first; what is live is read once (every other version, every
    // new root); a blob goes with the last batch whose old roots reach it.
    let batches: Vec<&[(Record, u64)]> = plan.chunks(batch_size()).collect();
    let mut sink = Sink::new(repo, &Quiet)?;
    let mut roots = Vec::with_capacity(batches.len());
    for batch in &batches {
        let mut new = Vec::with_capacity(batch.len());
        for (record, _) in *batch {
            new.push((record.version, marked(repo, &mut sink, &record.tree, path)?));
        }
        roots.push(new);
    }
    sink.finish()?;
    let live = live_blobs(repo, dataset, roots.iter().flatten())?;
    let mut reach = Vec::with_capacity(batches.len());
    for batch in &batches {
        let old: Vec<BlobRef> = batch.iter().map(|(r, _)| r.tree).collect();
        let mut under = HashMap::new();
        blobs_under(repo, &old, &HashSet::new(), &mut under)?;
        reach.push(under);
    }
    crate::hold::hold("erase-trees-written");
    let (mut blobs, mut bytes) = (0, 0);
    for (k, (batch, roots)) in batches.iter().zip(roots).enumerate() {
        let later: HashSet<&Span> = reach[k + 1..].iter().flat_map(|m| m.keys()).collect();
        let mut sweep: Vec<(Span, crate::id::BlobId)> = reach[k]
            .iter()
            .filter(|(s, _)| !live.contains_key(*s) && !later.contains(s))
            .map(|(s, id)| (*s, *id))
            .collect();
        sweep.sort_by_key(|(s, _)| (s.pack, s.offset));
        let event = Event::Erase {
            path: path.to_string(),
            versions: batch.iter().map(|(r, _)| r.version).collect(),
            reason: reason.to_string(),
            roots,
            sweep: sweep.iter().map(|(s, _)| *s).collect(),
        };
        // Onto the log it decided on (with its own entries since): an
        // entry from elsewhere meanwhile stops it (what it did stands).
        repo.append_lifecycle(dataset, &log, event, &by.name)?;
        let now = repo.lifecycle_log(dataset)?;
        if now.len() != log.len() + 1 {
            return Err(Error::InvalidInput(format!(
                "the retention, holds or expiries of {dataset} changed meanwhile: the erasure stopped after v{}; run it again",
                batch.last().map_or(0, |(r, _)| r.version)
            )));
        }
        log = now;
        crate::hold::hold("erase-recorded");
        let spans: Vec<Span> = sweep.iter().map(|(s, _)| *s).collect();
        let (b, n) = zero(repo, &spans)?;
        (blobs, bytes) = (blobs + b, bytes + n);
        for (_, id) in &sweep {
            repo.disk().discard(id);
        }
    }
    done.blobs = blobs;
    done.bytes = bytes;
    Ok(done)
}

/// The versions (from `from` on, expired ones whose trees are still there
/// too) holding a file at or under `path` that is not erased yet, each
/// with the count of such files; refused if a served one may not be
/// erased.
fn affected(repo: &Repo, dataset: &str, path: &RelPath, from: u64) -> Result<Vec<(Record, u64)>> {
    let lc = crate::retention::in_force(repo, repo.lifecycle(dataset)?);
    let now = SystemTime::now();
    let mut out = Vec::new();
    for r in repo.chain_records(dataset)? {
        if r.version < from {
            continue;
        }
        let node = match repo.lookup(&r.tree, path) {
            Ok(n) => n,
            // An expired version's data may be gone already (gc).
            Err(_) if lc.is_expired(r.version) => continue,
            Err(e) => return Err(e),
        };
        let Some(node) = node else { continue };
        let files = live_files(repo, &node)?;
        if files == 0 {
            continue;
        }
        if !lc.is_expired(r.version)
            && let Some(why) = crate::retention::protected(&r, None, &lc, now)
        {
            return Err(Error::InvalidInput(format!(
                "v{} of {dataset} holds {path} but cannot be erased: {why}; nothing was erased",
                r.version
            )));
        }
        out.push((r, files));
    }
    Ok(out)
}

/// Files at or under `node` that still have their bytes.
fn live_files(repo: &Repo, node: &Node) -> Result<u64> {
    match node {
        Node::File { erased: false, .. } => Ok(1),
        Node::Dir { tree, .. } => {
            let mut n = 0;
            for e in &repo.tree(tree)?.entries {
                n += live_files(repo, &e.node)?;
            }
            Ok(n)
        }
        _ => Ok(0),
    }
}

/// The file as erased: no bytes, its name, mode and time kept.
fn erased_file(node: &Node) -> Node {
    match node {
        Node::File { mode, mtime, .. } => Node::File {
            mode: *mode,
            mtime: *mtime,
            size: 0,
            chunks: vec![],
            atime: None,
            link: None,
            erased: true,
        },
        other => other.clone(),
    }
}

/// Tree `root` with every file at or under `path` marked erased, written
/// through `sink`; the trees off the path are shared, not rewritten.
fn marked(repo: &Repo, sink: &mut dyn TreeSink, root: &BlobRef, path: &RelPath) -> Result<BlobRef> {
    let names: Vec<&[u8]> = path.names().collect();
    rewrite(repo, sink, root, &names)
}

fn rewrite(
    repo: &Repo,
    sink: &mut dyn TreeSink,
    tree: &BlobRef,
    names: &[&[u8]],
) -> Result<BlobRef> {
    let mut entries = repo.tree(tree)?.entries.clone();
    for e in &mut entries {
        let (on_path, below) = match names.split_first() {
            Some((first, rest)) => (e.name.as_slice() == *first, Some(rest)),
            None => (true, None),
        };
        if !on_path {
            continue;
        }
        e.node = match (&e.node, below) {
            (Node::Dir { tree, .. }, Some(rest)) if !rest.is_empty() => {
                with_tree(&e.node, rewrite(repo, sink, tree, rest)?)
            }
            // The path itself, or a folder under it: everything below.
            (Node::Dir { tree, .. }, _) => with_tree(&e.node, rewrite(repo, sink, tree, &[])?),
            (Node::File { .. }, Some([]) | None) => erased_file(&e.node),
            (node, _) => node.clone(),
        };
    }
    sink.put_tree(&Tree::new(entries))
}

fn with_tree(node: &Node, new: BlobRef) -> Node {
    match node {
        Node::Dir {
            mode,
            mtime,
            atime,
            links,
            ..
        } => Node::Dir {
            mode: *mode,
            mtime: *mtime,
            tree: new,
            atime: *atime,
            links: *links,
        },
        other => other.clone(),
    }
}

/// Every blob (tree or chunk) under `roots`, by where it lies, with its
/// id, added to `out`. A tree that cannot be read is an error (what it
/// reaches would be taken for unused), but one gc removed from a root in
/// `may_be_gone` (an expired version's).
fn blobs_under(
    repo: &Repo,
    roots: &[BlobRef],
    may_be_gone: &HashSet<crate::id::BlobId>,
    out: &mut HashMap<Span, crate::id::BlobId>,
) -> Result<()> {
    let mut seen = HashSet::new();
    let mut todo: Vec<(BlobRef, bool)> = roots
        .iter()
        .map(|r| (*r, may_be_gone.contains(&r.id)))
        .collect();
    while let Some((r, gone_ok)) = todo.pop() {
        if !seen.insert(r.id) {
            continue;
        }
        let tree = match repo.tree(&r) {
            Ok(t) => t,
            Err(Error::Missing { .. }) if gone_ok => continue,
            Err(e) => return Err(e),
        };
        out.insert(span(&r), r.id);
        for e in &tree.entries {
            match &e.node {
                Node::Dir { tree, .. } => todo.push((*tree, gone_ok)),
                Node::File { chunks, .. } => {
                    out.extend(chunks.iter().map(|c| (span(c), c.id)));
                }
                Node::Symlink { .. } | Node::Special { .. } => {}
            }
        }
    }
    Ok(())
}

fn span(r: &BlobRef) -> Span {
    Span {
        pack: r.pack,
        offset: r.offset,
        len: r.len,
    }
}

/// The blobs every version keeps reaching: every version of every dataset
/// (deleted ones too: they can be undeleted until gc removes them; expired
/// ones whose data is still there: gc decides when it goes) with the
/// erased versions at their `new` roots.
fn live_blobs<'a>(
    repo: &Repo,
    dataset: &str,
    new: impl Iterator<Item = &'a (u64, BlobRef)>,
) -> Result<HashMap<Span, crate::id::BlobId>> {
    let new_roots: BTreeMap<u64, BlobRef> = new.copied().collect();
    let mut live_roots: Vec<BlobRef> = new_roots.values().copied().collect();
    let mut expired = HashSet::new();
    for (ds, _) in repo.all_datasets()? {
        let lc = repo.lifecycle(&ds)?;
        for r in repo.chain_records(&ds)? {
            if ds == dataset && new_roots.contains_key(&r.version) {
                continue;
            }
            if lc.is_expired(r.version) {
                expired.insert(r.tree.id);
            }
            live_roots.push(r.tree);
        }
    }
    let mut live = HashMap::new();
    blobs_under(repo, &live_roots, &expired, &mut live)?;
    Ok(live)
}

/// Zeroes `spans` in their packs, each pack rewritten once; spans already
/// zero are left. Returns the blobs and bytes zeroed now.
fn zero(repo: &Repo, spans: &[Span]) -> Result<(usize, u64)> {
    let mut by_pack: BTreeMap<PackId, Vec<Span>> = BTreeMap::new();
    for s in spans {
        by_pack.entry(s.pack).or_default().push(*s);
    }
    let (mut blobs, mut bytes) = (0, 0);
    for (pack, spans) in by_pack {
        let key = keys::pack(&pack);
        // A pack gc removed meanwhile holds nothing to zero.
        let Some((body, at)) = repo.store().find_pack(&key)? else {
            continue;
        };
        let mut body = body.to_vec();
        let mut changed = false;
        for s in spans {
            let start = usize::try_from(s.offset).unwrap_or(usize::MAX);
            let Some(range) = start
                .checked_add(s.len as usize)
                .filter(|end| *end <= body.len())
                .map(|end| start..end)
            else {
                return Err(Error::malformed(
                    &key,
                    "an erased span lies past the pack's end",
                ));
            };
            if body[range.clone()].iter().any(|b| *b != 0) {
                body[range].fill(0);
                changed = true;
                blobs += 1;
                bytes += u64::from(s.len);
            }
        }
        if changed {
            repo.store().replace_pack(at, &key, body.into())?;
        }
    }
    Ok((blobs, bytes))
}

/// Zeroes what the erasures of `dataset`'s log left unzeroed (an erasure
/// cut short after its entry). Returns the blobs zeroed.
pub fn finish_sweeps(repo: &Repo, dataset: &str) -> Result<usize> {
    let lc = repo.lifecycle(dataset)?;
    if lc.sweeps.is_empty() {
        return Ok(0);
    }
    Ok(zero(repo, &lc.sweeps)?.0)
}
