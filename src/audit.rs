//! `audit`: a dataset's history as the store holds it, read straight from
//! the store: every version record with its author, time, message and
//! parent, whether the hash chain holds at it, every tag and whether it
//! names a record of the chain, and every change of the access policy.
//! `verify` builds on the same reading and goes on to every object.

use crate::error::{Error, Result};
use crate::id::RecordHash;
use crate::repo::Repo;
use crate::snapshot::Record;
use crate::store::keys;
use std::collections::HashMap;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    Missing,
    Corrupt,
    BrokenChain,
}

#[derive(Debug)]
pub struct Problem {
    pub kind: ProblemKind,
    pub object: String,
    pub detail: String,
    /// `v3:path/to/file`, a few samples.
    pub affects: Vec<String>,
    pub more: usize,
}

impl Problem {
    fn chain(object: String, detail: String) -> Problem {
        Problem {
            kind: ProblemKind::BrokenChain,
            object,
            detail,
            affects: vec![],
            more: 0,
        }
    }

    fn corrupt(object: String, detail: String, affects: String) -> Problem {
        Problem {
            kind: ProblemKind::Corrupt,
            object,
            detail,
            affects: vec![affects],
            more: 0,
        }
    }
}

impl ProblemKind {
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::Missing => "missing",
            ProblemKind::Corrupt => "corrupt",
            ProblemKind::BrokenChain => "broken chain",
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.kind.name(), self.object, self.detail)?;
        if !self.affects.is_empty() {
            write!(f, "; affects {}", self.affects.join(", "))?;
            if self.more > 0 {
                write!(f, " (+{} more)", self.more)?;
            }
        }
        Ok(())
    }
}

/// A version record as the store holds it.
pub struct Version {
    pub version: u64,
    /// SHA-256 of its stored bytes: what the next record must carry.
    pub hash: RecordHash,
    /// None if it does not decode (its problem says why).
    pub record: Option<Record>,
    /// Whether its parent hash is that of the record before it.
    pub chained: bool,
}

pub struct TagEntry {
    pub tag: String,
    pub version: u64,
    /// It names the record of that version in the store.
    pub holds: bool,
}

/// A dataset's history, and what breaks it.
#[derive(Default)]
pub struct History {
    pub versions: Vec<Version>,
    pub tags: Vec<TagEntry>,
    pub problems: Vec<Problem>,
}

/// Reads a dataset's records and tags from the store (not the local
/// index, which is only compared with it).
pub fn history(repo: &Repo, dataset: &str) -> Result<History> {
    let mut h = History::default();
    let mut prev: Option<(u64, RecordHash)> = None;
    for listed in repo.store().list(&keys::records(dataset), None)? {
        // Keys are the store's: escaped wherever they are shown.
        let key = crate::escape::line(listed.key.as_bytes()).into_owned();
        let Some(n) = keys::record_number(dataset, &listed.key) else {
            h.problems
                .push(Problem::chain(key, "not a version record name".into()));
            continue;
        };
        let bytes = match repo.store().get(&listed.key) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(e @ Error::Malformed { .. }) => {
                let affects = format!("{dataset} v{n}");
                h.problems
                    .push(Problem::corrupt(key, e.to_string(), affects));
                continue;
            }
            Err(e) => return Err(e),
        };
        let hash = RecordHash::of(&bytes);
        let expected = prev.map_or(1, |(v, _)| v + 1);
        if n != expected {
            h.problems.push(Problem::chain(
                format!("{dataset} v{expected}..v{}", n - 1),
                "version records missing from the store".into(),
            ));
        }
        if let Some(known) = repo.index().record_hash(dataset, n)?
            && known != hash
        {
            h.problems.push(Problem::chain(
                key.clone(),
                format!("record v{n} differs from the one this host saw"),
            ));
        }
        let record = match Record::decode(&bytes, &listed.key) {
            Ok(r) if r.version == n && r.dataset == dataset => Some(r),
            Ok(_) => {
                h.problems.push(Problem::chain(
                    key.clone(),
                    "record does not match its key".into(),
                ));
                None
            }
            Err(e) => {
                let affects = format!("{dataset} v{n}");
                h.problems
                    .push(Problem::corrupt(key.clone(), e.to_string(), affects));
                None
            }
        };
        let chained = match (&record, prev) {
            (None, _) => false,
            (Some(r), Some((pv, ph))) if pv + 1 == n => r.parent == Some(ph),
            (Some(r), None) if n == 1 => r.parent.is_none(),
            _ => true, // the gap is already reported
        };
        if record.is_some() && !chained {
            h.problems.push(Problem::chain(
                key.clone(),
                format!("parent hash does not match record v{}", n - 1),
            ));
        }
        h.versions.push(Version {
            version: n,
            hash,
            record,
            chained,
        });
        prev = Some((n, hash));
    }
    let known = repo.index().latest_version(dataset)?;
    let in_store = prev.map_or(0, |(v, _)| v);
    if known > in_store {
        h.problems.push(Problem::chain(
            format!("{dataset} v{}..v{known}", in_store + 1),
            "known to this host but missing from the store".into(),
        ));
    }
    let hashes: HashMap<u64, RecordHash> = h.versions.iter().map(|v| (v.version, v.hash)).collect();
    check_tags(repo, dataset, &hashes, &mut h)?;
    Ok(h)
}

/// Each tag decodes and names a record of the store by its hash.
fn check_tags(
    repo: &Repo,
    dataset: &str,
    records: &HashMap<u64, RecordHash>,
    h: &mut History,
) -> Result<()> {
    for listed in repo.store().list(&keys::tags(dataset), None)? {
        let key = crate::escape::line(listed.key.as_bytes()).into_owned();
        let Some(bytes) = repo.store().get(&listed.key)? else {
            continue;
        };
        match crate::repo::tag::Tag::decode(&bytes, &listed.key, dataset) {
            Ok(t) => {
                let holds = records.get(&t.version) == Some(&t.record);
                if !holds {
                    h.problems.push(Problem::chain(
                        key,
                        format!(
                            "names v{}, but not the record of that version in the store",
                            t.version
                        ),
                    ));
                }
                h.tags.push(TagEntry {
                    tag: t.tag,
                    version: t.version,
                    holds,
                });
            }
            Err(e) => h.problems.push(Problem::chain(key, e.to_string())),
        }
    }
    Ok(())
}
