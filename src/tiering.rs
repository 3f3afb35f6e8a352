//! `tier`: a dataset's old versions moved to the store's colder tier
//! (`store::tier`). The versions older than a span and not among the last
//! N go cold: the packs only they reach (no other version of any dataset
//! does) move, one at a time, copied, checked and then deleted here, so a
//! reachable chunk is always whole somewhere. Readers find them there by
//! themselves; nothing in any record or tree changes.

use crate::access::caller::Actor;
use crate::access::{Action, dataset_resource};
use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::repo::Repo;
use crate::store::keys;
use std::collections::HashSet;
use std::time::{Duration, SystemTime};

/// Packs moved at once.
const MOVERS: usize = 2;

/// What `tier` is asked.
pub struct Request<'a> {
    pub dataset: &'a str,
    /// Versions at least this old go cold...
    pub older_than: Duration,
    /// ...unless among the newest this many (the newest always stays).
    pub keep_last: usize,
    pub dry_run: bool,
}

/// What moved (or would move).
#[derive(Debug, Default)]
pub struct Moved {
    /// The versions now served from the colder tier (their own data).
    pub versions: Vec<u64>,
    pub packs: usize,
    pub bytes: u64,
}

impl Moved {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"versions": self.versions, "packs": self.packs, "bytes": self.bytes})
    }
}

pub fn tier(repo: &Repo, req: &Request<'_>, by: &Actor, progress: &dyn Progress) -> Result<Moved> {
    repo.require(&by.who, Action::Retention, &dataset_resource(req.dataset))?;
    if repo.store().cold_url()?.is_none() {
        return Err(Error::InvalidInput(
            "this store names no colder tier: give --cold-store URL the first time".into(),
        ));
    }
    let records = repo.sync_whole(req.dataset)?;
    let now = SystemTime::now();
    let old_enough = |time: &str| {
        humantime::parse_rfc3339(time)
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age >= req.older_than)
    };
    let kept = req.keep_last.max(1).min(records.len());
    let cold: Vec<_> = records[..records.len() - kept]
        .iter()
        .filter(|r| old_enough(&r.time))
        .collect();
    let cold_versions: HashSet<u64> = cold.iter().map(|r| r.version).collect();
    // Every other version of every dataset (expired and deleted ones too,
    // while gc keeps them) stays hot, and so does all it reaches.
    let mut hot_roots = Vec::new();
    for (ds, _) in repo.all_datasets()? {
        for r in repo.chain_records(&ds)? {
            if !(ds == req.dataset && cold_versions.contains(&r.version)) {
                hot_roots.push(r.tree);
            }
        }
    }
    let hot = crate::gc::packs_under(repo, hot_roots)?;
    let here: std::collections::HashMap<String, u64> = repo
        .store()
        .list(keys::PACKS, None)?
        .into_iter()
        .map(|l| (l.key, l.size))
        .collect();
    let mut moving: Vec<(String, u64)> = crate::gc::packs_under(repo, cold.iter().map(|r| r.tree))?
        .difference(&hot)
        .map(keys::pack)
        .filter_map(|k| here.get(&k).map(|size| (k, *size)))
        .collect();
    moving.sort();
    let moved = Moved {
        versions: cold.iter().map(|r| r.version).collect(),
        packs: moving.len(),
        bytes: moving.iter().map(|(_, size)| size).sum(),
    };
    if req.dry_run {
        return Ok(moved);
    }
    progress.set_total(moved.bytes);
    // Two at a time: one pack's copy overlaps another's sync.
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let movers: Vec<_> = (0..MOVERS)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((key, _)) = moving.get(i) else {
                            return Ok(());
                        };
                        progress.advance(repo.store().move_to_cold(key)?);
                    }
                })
            })
            .collect();
        movers
            .into_iter()
            .try_for_each(|m| m.join().expect("a mover does not panic"))
    })?;
    Ok(moved)
}
