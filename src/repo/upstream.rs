//! A repo whose datasets come from upstream (a gateway, `detafs::remote`)
//! rather than from its store. The store is then this host's own, sealed
//! with a key of the host's (made on first use, as the embedded store's
//! is), and holds what was fetched: each chunk sealed under its id and
//! opened only with that id, so the disk holds nothing readable without
//! the host's key, and a cached chunk is served only while upstream still
//! says its file is readable. Upstream decides what the caller sees; no
//! copy of its rule is kept here.

use super::Repo;
use super::changes::{Change, Sending};
use super::tag::Tag;
use crate::error::Result;
use crate::relpath::RelPath;
use crate::snapshot::{Record, Tree};
use crate::store::health::HealthReport;
use crate::store::pack::BlobRef;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Where datasets come from.
pub trait Upstream: Send + Sync {
    /// Where it is (for health and messages).
    fn url(&self) -> String;
    /// A dataset's versions the caller may see, oldest first, and their
    /// tags, in one answer. Each record's tree names its root folder for
    /// `tree`.
    fn history(&self, dataset: &str) -> Result<History>;
    /// A folder's tree, named by a reference an earlier answer gave.
    fn tree(&self, r: &BlobRef) -> Result<Tree>;
    /// A run of chunks of one file (`pack::runs`), one `Bytes` each.
    fn chunks(&self, run: &[BlobRef]) -> Result<Vec<Bytes>>;
    /// Whether the file `chunk` belongs to may still be read (asked of
    /// upstream once per file; false answers again each time).
    fn readable(&self, chunk: &BlobRef) -> Result<()>;
    /// Whether every chunk is to be read as the store holds it now
    /// (`verify`): then nothing is taken from, or kept in, the disk cache.
    fn fresh(&self) -> bool;
    /// What its latest answers were (reachable, latency, failures).
    fn health(&self) -> HealthReport;
    /// Whether it gave reference `r` (a folder's, or a chunk's): what it
    /// did not give is this host's own (a commit's trees before they are
    /// sent), in its store.
    fn gave(&self, r: &BlobRef) -> bool;
    /// Stores what `s` says as an upload: its id, and the bytes sent.
    fn upload(&self, s: &Sending) -> Result<(String, u64)>;
    /// Stores `files` as one upload of `dataset` (a bundle: a commit names
    /// each by its place): its id.
    fn bundle(&self, dataset: &str, files: &[Bytes]) -> Result<String>;
    /// Where the chunks of a version's file were read from (its version
    /// and path), if this host was told (a file of several chunks).
    fn source_of(&self, chunks: &[BlobRef]) -> Option<(u64, RelPath)>;
    /// Notes that this host's staging area `staging` stands on `versions`
    /// of `dataset` (`Repo::lease_base`).
    fn lease(&self, dataset: &str, staging: &str, versions: &[u64]) -> Result<()>;
    /// Version `version` of `dataset`, expired meanwhile, if upstream
    /// keeps it for this host's staging (its lease names it).
    fn kept_record(&self, dataset: &str, version: u64) -> Result<Option<Record>>;
    /// Commits `changes` onto version `parent` of `dataset` (none: its
    /// first): the new version's number.
    fn commit(
        &self,
        dataset: &str,
        parent: Option<u64>,
        message: &str,
        changes: &[Change],
    ) -> Result<u64>;
}

/// What upstream shows of a dataset's history.
pub struct History {
    pub records: Vec<Record>,
    pub tags: Vec<Tag>,
    /// The versions' figures (files added, changed, removed; bytes) are
    /// withheld, as from a caller a policy may hide paths from: the
    /// records' zeros stand for unknown.
    pub figures_withheld: bool,
}

/// The upstream of a repo and the last history it gave of each dataset
/// (a poll asks once for all).
pub(super) struct Upstreamed {
    source: Arc<dyn Upstream>,
    said: Mutex<Said>,
    /// Questions asked so far (their turns).
    asked: std::sync::atomic::AtomicU64,
}

/// By dataset, the last history upstream gave, and the turn it was asked
/// in: an answer to a question asked before the kept one's (a poll under
/// way while a commit landed and asked again) never replaces it.
#[derive(Default)]
struct Said(HashMap<String, (u64, History)>);

impl Said {
    fn get(&self, name: &str) -> Option<&History> {
        self.0.get(name).map(|(_, h)| h)
    }

    /// Keeps `h`, the answer to a question asked in `turn`, unless an
    /// answer to a later one is kept; the records of the history kept.
    fn answer(&mut self, name: &str, turn: u64, h: History) -> Vec<Record> {
        match self.0.get(name) {
            Some((kept, newer)) if *kept > turn => newer.records.clone(),
            _ => {
                let records = h.records.clone();
                self.0.insert(name.to_string(), (turn, h));
                records
            }
        }
    }
}

impl Repo {
    /// This repo with its datasets from `source` (its store is the host's
    /// own cache).
    pub fn with_upstream(mut self, source: Arc<dyn Upstream>) -> Repo {
        self.upstream = Some(Upstreamed {
            source,
            said: Mutex::default(),
            asked: Default::default(),
        });
        self
    }

    /// Where datasets come from, if not from the store.
    pub fn upstream(&self) -> Option<&dyn Upstream> {
        self.upstream.as_ref().map(|up| up.source.as_ref())
    }

    /// Where the datasets come from: upstream's URL, or the store's.
    pub fn location(&self) -> String {
        match &self.upstream {
            Some(up) => up.source.url(),
            None => self.store.url().to_string(),
        }
    }

    /// What the latest answers of where datasets come from were: upstream,
    /// or the store.
    pub fn health(&self) -> HealthReport {
        match &self.upstream {
            Some(up) => up.source.health(),
            None => self.store.health(),
        }
    }

    /// How this host keeps the local copies of what it stages: sealed
    /// under its own store's key when its datasets come from upstream (it
    /// holds no key of theirs, and its disk must hold nothing readable
    /// without one of its own); as they are beside the store itself.
    pub fn local_sealing(&self) -> crate::store::sealed_file::Sealing {
        use crate::store::sealed_file::Sealing;
        match &self.upstream {
            Some(_) => Sealing::of(self.codec()),
            None => Sealing::Plain,
        }
    }

    /// Whether what is read comes over a network (upstream, or a remote
    /// store): reads go further ahead.
    pub fn is_remote(&self) -> bool {
        self.upstream.is_some() || self.store.is_remote()
    }

    /// Asks upstream for a dataset's history (None: no upstream); the
    /// tags that came with it are kept for `said_tags`.
    pub(super) fn ask_upstream(&self, name: &str) -> Option<Result<Vec<Record>>> {
        let up = self.upstream.as_ref()?;
        let turn = up.asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Some(
            up.source
                .history(name)
                .map(|h| up.said.lock().answer(name, turn, h)),
        )
    }

    /// The versions upstream gave last (asked if never; None: no upstream).
    pub(super) fn said_records(&self, name: &str) -> Option<Result<Vec<Record>>> {
        let up = self.upstream.as_ref()?;
        if let Some(said) = up.said.lock().get(name) {
            return Some(Ok(said.records.clone()));
        }
        self.ask_upstream(name)
    }

    /// The tags upstream gave with the dataset's history (asked if never).
    pub(super) fn said_tags(&self, name: &str) -> Option<Result<Vec<Tag>>> {
        let up = self.upstream.as_ref()?;
        if let Some(said) = up.said.lock().get(name) {
            return Some(Ok(said.tags.clone()));
        }
        Some(
            self.ask_upstream(name)?
                .and_then(|_| self.said_tags(name).expect("asked")),
        )
    }

    /// Whether upstream withholds the figures of dataset `name`'s
    /// versions (as of its last answer; never without upstream).
    pub fn figures_withheld(&self, name: &str) -> bool {
        self.upstream
            .as_ref()
            .is_some_and(|up| up.said.lock().get(name).is_some_and(|h| h.figures_withheld))
    }

    /// A tree from upstream (None: no upstream, or not one it gave). Kept in memory only: it
    /// is what the policy shows now, and a later policy may show less.
    pub(super) fn upstream_tree(&self, r: &BlobRef) -> Option<Result<Tree>> {
        let up = self.upstream.as_ref().filter(|up| up.source.gave(r))?;
        Some(up.source.tree(r))
    }

    /// A run of chunks from upstream, through the disk cache (None: no
    /// upstream, or not chunks it gave).
    pub(super) fn upstream_chunks(&self, run: &[BlobRef]) -> Option<Result<Vec<Bytes>>> {
        let up = self
            .upstream
            .as_ref()
            .filter(|up| up.source.gave(&run[0]))?;
        let key = |r: &BlobRef| format!("upstream chunk {}", r.id.to_hex());
        if up.source.fresh() {
            return Some(up.source.chunks(run));
        }
        let cached: Option<Vec<Bytes>> = run
            .iter()
            .map(|r| self.disk.opened(&r.id, &key(r), &self.codec))
            .collect();
        Some(match cached {
            Some(chunks) => up.source.readable(&run[0]).map(|()| chunks),
            None => up.source.chunks(run).inspect(|chunks| {
                for (r, c) in run.iter().zip(chunks) {
                    self.disk
                        .put(&r.id, &self.codec.seal_object(&key(r), c.clone()));
                }
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Histories told apart by whether figures are withheld.
    fn history(withheld: bool) -> History {
        History {
            records: Vec::new(),
            tags: Vec::new(),
            figures_withheld: withheld,
        }
    }

    #[test]
    fn an_answer_to_an_earlier_question_never_replaces_a_later_one() {
        let mut said = Said::default();
        // A commit asks (turn 2) after a poll (turn 1) whose answer comes last.
        said.answer("ds", 2, history(true));
        said.answer("ds", 1, history(false));
        assert!(said.get("ds").unwrap().figures_withheld);
        // A later question's answer replaces it, whatever it shows (a
        // policy may hide what the kept one showed).
        said.answer("ds", 3, history(false));
        assert!(!said.get("ds").unwrap().figures_withheld);
        assert!(said.get("other").is_none());
    }
}
