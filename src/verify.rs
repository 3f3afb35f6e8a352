//! `verify`: the consistency audit. Reads every record and every object they
//! reach straight from the store (bypassing local caches), checks the hash
//! chain and every blob's hash, and names what is damaged and what it affects.

use crate::error::{Error, Result};
use crate::id::{BlobId, PackId};
use crate::progress::Progress;
use crate::repo::Repo;
use crate::snapshot::tree::TreeSource;
use crate::snapshot::walk;
use crate::snapshot::{Node, Tree};
use crate::store::pack::{self, BlobKind, BlobRef};
use crate::store::{Listed, keys};
use std::collections::{BTreeMap, HashMap, HashSet};

pub use crate::audit::{Problem, ProblemKind};

#[derive(Debug, Default)]
pub struct Report {
    pub problems: Vec<Problem>,
    /// Objects no record reaches (crash debris); only known when all datasets are checked.
    pub garbage: Vec<Listed>,
    pub versions: usize,
    /// Versions expired (`forget`): their records are checked in the
    /// chain, their data not (gc removes it after the grace).
    pub expired: usize,
    /// Erased files met (`vN:path`), a few samples and the count: erased
    /// on purpose, not damage.
    pub erased: Vec<String>,
    pub erased_count: usize,
    /// Packs and their bytes at the store's own location and in its
    /// colder tier (`store::tier`): where the data lives.
    pub hot: (usize, u64),
    pub cold: (usize, u64),
    pub blobs: usize,
}

const SAMPLES: usize = 5;

#[derive(Default)]
struct Affects {
    samples: Vec<String>,
    more: usize,
}

impl Affects {
    fn add(&mut self, what: String) {
        if self.samples.len() < SAMPLES {
            self.samples.push(what);
        } else {
            self.more += 1;
        }
    }
    fn merge(&mut self, other: &Affects) {
        for s in &other.samples {
            if !self.samples.contains(s) {
                self.add(s.clone());
            }
        }
        self.more += other.more;
    }
}

/// The chunks of one pack to check, by (id, offset), with who refers to them.
type PackChunks = HashMap<(BlobId, u64), (BlobRef, Affects)>;

struct Walker<'r> {
    repo: &'r Repo,
    /// Trees already checked.
    trees: HashSet<BlobId>,
    decoded: HashMap<BlobId, std::sync::Arc<Tree>>,
    /// Chunks to check, grouped by pack, with who refers to them.
    chunks: BTreeMap<PackId, PackChunks>,
    reachable: HashSet<PackId>,
    report: Report,
}

fn problem_of(err: &Error) -> ProblemKind {
    match err {
        Error::Missing { .. } => ProblemKind::Missing,
        _ => ProblemKind::Corrupt,
    }
}

impl Walker<'_> {
    /// Checks every tree of a version once (a tree shared by many paths or
    /// versions is read once), without recursion; chunks are collected for
    /// `check_chunks`. Problems name the first path that reached them.
    fn walk(&mut self, root: &BlobRef, version: u64, prefix: &str) {
        let mut stack = vec![(*root, prefix.to_string())];
        while let Some((r, prefix)) = stack.pop() {
            self.reachable.insert(r.pack);
            if self.trees.contains(&r.id) {
                continue;
            }
            self.trees.insert(r.id);
            self.report.blobs += 1;
            let loaded = pack::read_blob(self.repo.store(), &r, BlobKind::Tree)
                .and_then(|b| Tree::decode(&b));
            let tree = match loaded {
                Ok(t) => std::sync::Arc::new(t),
                Err(e) => {
                    self.report.problems.push(Problem {
                        kind: problem_of(&e),
                        object: format!("tree {} in {}", r.id, keys::pack(&r.pack)),
                        detail: e.to_string(),
                        affects: vec![format!("v{version}:{prefix}")],
                        more: 0,
                    });
                    continue;
                }
            };
            // Trees already decoded are remembered so the expansion check
            // after the walk reads nothing twice.
            self.decoded.insert(r.id, tree.clone());
            for e in &tree.entries {
                let path = format!("{prefix}{}", crate::escape::line(&e.name));
                match &e.node {
                    Node::Dir { tree, .. } => stack.push((*tree, format!("{path}/"))),
                    Node::File { erased: true, .. } => {
                        self.report.erased_count += 1;
                        if self.report.erased.len() < SAMPLES {
                            self.report.erased.push(format!("v{version}:{path}"));
                        }
                    }
                    Node::File { chunks, .. } => {
                        for c in chunks {
                            self.reachable.insert(c.pack);
                            self.chunks
                                .entry(c.pack)
                                .or_default()
                                .entry((c.id, c.offset))
                                .or_insert_with(|| (*c, Affects::default()))
                                .1
                                .add(format!("v{version}:{path}"));
                        }
                    }
                    Node::Symlink { .. } | Node::Special { .. } => {}
                }
            }
        }
    }

    /// A version whose shared subtrees expand beyond the limits is reported
    /// (readers refuse to export it).
    fn check_expansion(&mut self, root: &BlobRef, version: u64, dataset: &str) {
        if let Err(e) = walk::expansion(&Decoded(&self.decoded), root) {
            // Unreadable trees are reported by `walk` already.
            if !matches!(e, Error::Missing { .. } | Error::Corrupt { .. }) {
                self.report.problems.push(Problem {
                    kind: ProblemKind::Corrupt,
                    object: format!("{dataset} v{version}"),
                    detail: e.to_string(),
                    affects: vec![format!("{dataset} v{version}")],
                    more: 0,
                });
            }
        }
    }

    /// The dataset's history (`audit::history`), then every version's trees.
    fn check_records(&mut self, dataset: &str) -> Result<()> {
        let history = crate::audit::history(self.repo, dataset)?;
        self.report.problems.extend(history.problems);
        let lc = self.repo.lifecycle(dataset)?;
        for v in history.versions {
            if lc.is_expired(v.version) {
                self.report.expired += 1;
                continue;
            }
            if let Some(record) = v.record {
                self.report.versions += 1;
                // An erased version is served with the root its erasure gave it.
                let root = lc.roots.get(&v.version).copied().unwrap_or(record.tree);
                self.walk(&root, v.version, &format!("{dataset}/"));
                self.check_expansion(&root, v.version, dataset);
            }
        }
        Ok(())
    }

    /// Reads every chunk collected by `walk` with range reads of runs that
    /// lie back to back (never a whole pack: its size is the store's word).
    fn check_chunks(&mut self, progress: &dyn Progress) -> Result<()> {
        let codec = self.repo.codec().clone();
        for (pack_id, blobs) in std::mem::take(&mut self.chunks) {
            let key = keys::pack(&pack_id);
            self.report.blobs += blobs.len();
            let mut sorted: Vec<_> = blobs.into_values().collect();
            sorted.sort_by_key(|(r, _)| (r.offset, r.len));
            match self
                .repo
                .store()
                .get_range(&key, 0..pack::MAGIC.len() as u64)
            {
                Ok(Some(head)) => {
                    if let Err(e) = pack::check_header(&pack_id, &head) {
                        self.report.problems.push(Problem {
                            kind: ProblemKind::Corrupt,
                            object: key.clone(),
                            detail: e.to_string(),
                            affects: vec![],
                            more: 0,
                        });
                    }
                }
                // Missing, or shorter than a header: reported below.
                Ok(None) | Err(Error::Malformed { .. }) => {}
                Err(e) => return Err(e),
            }
            let refs: Vec<BlobRef> = sorted.iter().map(|(r, _)| *r).collect();
            let mut at = 0;
            for run in pack::runs(&refs, 8 << 20) {
                let (first, last) = (&run[0], &run[run.len() - 1]);
                let bytes = self.repo.store().get_range(&key, first.offset..last.end());
                let entries = &sorted[at..at + run.len()];
                at += run.len();
                let bytes = match bytes {
                    Ok(Some(b)) => b,
                    Ok(None) => {
                        // Named by the files that lose the most first.
                        let mut by_size: Vec<_> = sorted.iter().collect();
                        by_size.sort_by_key(|(r, _)| std::cmp::Reverse(r.len));
                        let mut affects = Affects::default();
                        for (_, a) in by_size {
                            affects.merge(a);
                        }
                        self.report.problems.push(Problem {
                            kind: ProblemKind::Missing,
                            object: key.clone(),
                            detail: format!("pack of {} chunks is missing", sorted.len()),
                            affects: affects.samples,
                            more: affects.more,
                        });
                        break; // reported once for the whole pack
                    }
                    // A pack shorter than its references.
                    Err(e @ Error::Malformed { .. }) => {
                        self.chunk_problems(&key, entries, &e.to_string());
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                for (r, affects) in entries {
                    progress.advance(r.len as u64);
                    let start = crate::limits::to_usize(r.offset - first.offset);
                    let blob = bytes.slice(start..start + r.len as usize);
                    if let Err(e) = codec.decode_blob(r, BlobKind::Chunk, blob) {
                        self.chunk_problem(&key, r, affects, e.to_string());
                    }
                }
            }
        }
        Ok(())
    }

    fn chunk_problems(&mut self, key: &str, entries: &[(BlobRef, Affects)], detail: &str) {
        for (r, affects) in entries {
            self.chunk_problem(key, r, affects, detail.to_string());
        }
    }

    fn chunk_problem(&mut self, key: &str, r: &BlobRef, affects: &Affects, detail: String) {
        self.report.problems.push(Problem {
            kind: ProblemKind::Corrupt,
            object: format!("chunk {} in {key}", r.id),
            detail,
            affects: affects.samples.clone(),
            more: affects.more,
        });
    }
}

/// The trees `walk` decoded, as a source for `walk::expansion`: one that
/// failed to decode is reported as corrupt, not read again.
struct Decoded<'a>(&'a HashMap<BlobId, std::sync::Arc<Tree>>);

impl TreeSource for Decoded<'_> {
    fn tree(&self, r: &BlobRef) -> Result<std::sync::Arc<Tree>> {
        self.0.get(&r.id).cloned().ok_or(Error::Corrupt {
            kind: "tree",
            id: r.id,
            pack: r.pack,
            detail: "unreadable".into(),
        })
    }
}

/// Checks one dataset, or all of them (and then also lists garbage).
pub fn verify(repo: &Repo, dataset: Option<&str>, progress: &dyn Progress) -> Result<Report> {
    let datasets = match dataset {
        Some(name) => {
            repo.check_dataset(name)?;
            vec![name.to_string()]
        }
        None => repo.datasets()?,
    };
    let mut w = Walker {
        repo,
        trees: HashSet::new(),
        decoded: HashMap::new(),
        chunks: BTreeMap::new(),
        reachable: HashSet::new(),
        report: Report::default(),
    };
    for ds in &datasets {
        w.check_records(ds)?;
    }
    let total: u64 = w
        .chunks
        .values()
        .flat_map(|m| m.values())
        .map(|(r, _)| r.len as u64)
        .sum();
    progress.set_total(total);
    w.check_chunks(progress)?;
    let hot = repo.store().list(keys::PACKS, None)?;
    let cold = repo.store().list_cold(keys::PACKS)?;
    let sum = |l: &[crate::store::Listed]| {
        let packs = l.iter().filter(|l| keys::pack_id(&l.key).is_some());
        (packs.clone().count(), packs.map(|l| l.size).sum())
    };
    (w.report.hot, w.report.cold) = (sum(&hot), sum(&cold));
    if dataset.is_none() {
        w.report.garbage = hot
            .into_iter()
            .chain(cold)
            .filter(|l| keys::pack_id(&l.key).is_none_or(|id| !w.reachable.contains(&id)))
            .collect();
    }
    Ok(w.report)
}

/// What `read_through` found.
#[derive(Default)]
pub struct ReadReport {
    pub versions: usize,
    pub files: u64,
    pub bytes: u64,
    /// Where (`DATASET vN/PATH`) and why, for each folder or file that
    /// could not be read whole.
    pub problems: Vec<(String, String)>,
}

/// Reads every file of every version of `datasets` that `repo` shows,
/// each chunk checked on its way: a host that reads through a gateway
/// checks what its caller may read (the gateway verifies each chunk
/// against the store, the host each answer against what the tree named).
/// A folder or file that fails is reported by version and path; the rest
/// is read on.
pub fn read_through(repo: &Repo, datasets: &[String]) -> Result<ReadReport> {
    let mut report = ReadReport::default();
    // Chunks read whole once are not read again for another version or
    // name that holds them (a file no version changed is read once).
    let mut checked: HashSet<BlobId> = HashSet::new();
    for ds in datasets {
        for record in repo.sync(ds)? {
            report.versions += 1;
            let at = |path: &str| format!("{ds} v{}/{path}", record.version);
            if let Err(e) = walk::expansion(repo, &record.tree) {
                report.problems.push((at(""), e.to_string()));
                continue;
            }
            let mut todo = vec![(record.tree, String::new())];
            while let Some((tree, path)) = todo.pop() {
                let tree = match repo.tree(&tree) {
                    Ok(t) => t,
                    Err(e) => {
                        report.problems.push((at(&path), e.to_string()));
                        continue;
                    }
                };
                for e in &tree.entries {
                    let name = format!("{path}{}", crate::escape::line(&e.name));
                    match &e.node {
                        Node::Dir { tree, .. } => todo.push((*tree, format!("{name}/"))),
                        Node::File { chunks, size, .. } => {
                            let read =
                                pack::runs(chunks, 8 << 20).into_iter().try_for_each(|run| {
                                    if !run.iter().all(|c| checked.contains(&c.id)) {
                                        repo.read_chunks(run)?;
                                        checked.extend(run.iter().map(|c| c.id));
                                    }
                                    Ok::<_, Error>(())
                                });
                            match read {
                                Ok(()) => {
                                    report.files += 1;
                                    report.bytes += size;
                                }
                                Err(e) => report.problems.push((at(&name), e.to_string())),
                            }
                        }
                        Node::Symlink { .. } | Node::Special { .. } => {}
                    }
                }
            }
        }
    }
    Ok(report)
}
