//! `gc`: the only code that deletes. Removes packs that no version record
//! reaches and that are older than a grace period, so packs of a commit still
//! in flight (on this host or another) are never touched.

use crate::error::{Error, Result};
use crate::id::PackId;
use crate::progress::Progress;
use crate::repo::Repo;
use crate::snapshot::Node;
use crate::snapshot::tree::TreeSource;
use crate::store::grace::{MAX_COMMIT_AGE, min_grace};
use crate::store::{Listed, keys};
use std::collections::HashSet;
use std::time::{Duration, SystemTime};

/// The versions of `dataset` whose data gc keeps: every version not
/// expired, those expired after `cutoff` (an expired version's data stays
/// for the grace, for readers that still have it open), and those a
/// staging area stands on (its lease).
fn roots(repo: &Repo, dataset: &str, cutoff: SystemTime) -> Result<Vec<crate::snapshot::Record>> {
    let lc = repo.lifecycle(dataset)?;
    let mut records = repo.chain_records(dataset)?;
    let leased = match lc.expired.is_empty() {
        true => Default::default(),
        false => repo.leased(dataset)?,
    };
    records.retain(|r| {
        leased.contains(&r.version)
            || lc
                .expired
                .get(&r.version)
                .is_none_or(|e| e.when().is_none_or(|t| t >= cutoff))
    });
    Ok(records)
}

/// Whether a version of `datasets` expired before `cutoff` (its data may
/// go now).
fn forgotten(repo: &Repo, datasets: &[String], cutoff: SystemTime) -> Result<bool> {
    for ds in datasets {
        let lc = repo.lifecycle(ds)?;
        if lc
            .expired
            .values()
            .any(|e| e.when().is_some_and(|t| t < cutoff))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Packs reached by the versions of `datasets` gc keeps. Fails if any
/// tree cannot be read: deleting on a partial view could delete live data.
fn reachable_packs(
    repo: &Repo,
    datasets: &[String],
    cutoff: SystemTime,
) -> Result<HashSet<PackId>> {
    let mut roots_of = Vec::new();
    for ds in datasets {
        roots_of.extend(roots(repo, ds, cutoff)?.into_iter().map(|r| r.tree));
    }
    packs_under(repo, roots_of)
}

/// The packs holding the trees and chunks under `roots` (each shared tree
/// read once). Fails if a tree cannot be read.
pub(crate) fn packs_under(
    repo: &Repo,
    roots: impl IntoIterator<Item = crate::store::pack::BlobRef>,
) -> Result<HashSet<PackId>> {
    let mut packs = HashSet::new();
    let mut seen = HashSet::new();
    let mut todo: Vec<_> = roots.into_iter().collect();
    while let Some(r) = todo.pop() {
        if !seen.insert(r.id) {
            continue;
        }
        packs.insert(r.pack);
        for e in &repo.tree(&r)?.entries {
            match &e.node {
                Node::Dir { tree, .. } => todo.push(*tree),
                Node::File { chunks, .. } => packs.extend(chunks.iter().map(|c| c.pack)),
                Node::Symlink { .. } | Node::Special { .. } => {}
            }
        }
    }
    Ok(packs)
}

/// What gc deleted (or would delete), and the unreachable packs it spared
/// because they are younger than the grace (an interrupted or running
/// commit's, or a crash's: deletable once the grace has passed).
pub struct GcReport {
    pub doomed: Vec<Listed>,
    /// Unreachable packs of the colder tier, as old (`store::tier`).
    pub doomed_cold: Vec<Listed>,
    pub young: Vec<Listed>,
    /// When the youngest of `young` is older than the grace.
    pub young_until: Option<SystemTime>,
}

/// Unreachable packs older than `grace`, and the records and tags of
/// datasets deleted longer ago than `grace` (`deletion.rs`); deleted
/// unless `dry_run`.
pub fn gc(
    repo: &Repo,
    grace: Duration,
    dry_run: bool,
    progress: &dyn Progress,
) -> Result<GcReport> {
    if grace < min_grace() {
        return Err(Error::InvalidInput(format!(
            "a grace of {} could delete objects of a commit still running; gc needs at least {}",
            humantime::format_duration(grace),
            humantime::format_duration(min_grace())
        )));
    }
    // Taken before the records are read: a pack older than this whose record
    // lands later cannot exist (its commit would have given up), however
    // long the walk below takes.
    let cutoff = SystemTime::now()
        .checked_sub(grace)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    // A deleted dataset keeps its data for the grace (it can be undeleted);
    // a tombstone whose time does not decode is never taken as expired.
    let (expired, kept): (Vec<_>, Vec<_>) = repo.all_datasets()?.into_iter().partition(|(_, d)| {
        d.as_ref()
            .and_then(|d| d.when())
            .is_some_and(|t| t < cutoff)
    });
    let kept: Vec<String> = kept.into_iter().map(|(name, _)| name).collect();
    // An erasure cut short after its record is finished first.
    if !dry_run {
        for ds in &kept {
            crate::erase::finish_sweeps(repo, ds)?;
        }
    }
    // Only packs of versions that landed can be known to an index (a
    // deleted dataset's, an expired version's): deleting those needs a
    // note first.
    let mut noted = !dry_run && !expired.is_empty();
    if noted {
        repo.leave_gc_note()?;
    }
    // Unreachable packs here (old enough, and young), and in the colder
    // tier (old enough: a pack moved there counts its age from the move;
    // with them what a killed move left half copied).
    let unreachable = || -> Result<(Vec<Listed>, Vec<Listed>, Vec<Listed>)> {
        let reachable = reachable_packs(repo, &kept, cutoff)?;
        let garbage = |l: &Listed| keys::pack_id(&l.key).is_some_and(|id| !reachable.contains(&id));
        let (doomed, young) = repo
            .store()
            .list(keys::PACKS, None)?
            .into_iter()
            .filter(garbage)
            .partition(|l| l.modified < cutoff);
        let cold = repo.store().list_cold(keys::PACKS)?;
        let cold = cold
            .into_iter()
            .filter(|l| (garbage(l) || keys::is_moving(&l.key)) && l.modified < cutoff);
        Ok((doomed, young, cold.collect()))
    };
    let (mut doomed, mut young, mut doomed_cold) = unreachable()?;
    if !dry_run && !noted && !doomed.is_empty() && forgotten(repo, &kept, cutoff)? {
        repo.leave_gc_note()?;
        noted = true;
        // A commit in flight may have reused what only expired versions
        // reached: its record has landed by now, and is read again.
        (doomed, young, doomed_cold) = unreachable()?;
    }
    let young_until = young.iter().map(|l| l.modified + grace).max();
    // Packs this young can only go with a grace below the real minimum
    // (test builds): a host may still offer them to a resumed commit
    // (`commit::scan`), so its index must forget them first.
    let resumable = SystemTime::now()
        .checked_sub(MAX_COMMIT_AGE)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    if !dry_run
        && !noted
        && doomed
            .iter()
            .chain(&doomed_cold)
            .any(|l| l.modified > resumable)
    {
        repo.leave_gc_note()?;
    }
    // Their history goes after the packs it reached: an interrupted gc
    // leaves a dataset that is still deleted, never one half there. The
    // tombstone and `dataset.json` stay (the name is never reused).
    for (name, _) in &expired {
        for prefix in [keys::records(name), keys::tags(name), keys::lifecycle(name)] {
            doomed.extend(repo.store().list(&prefix, None)?);
        }
    }
    if !dry_run {
        progress.set_total(doomed.iter().chain(&doomed_cold).map(|l| l.size).sum());
        for l in &doomed {
            repo.store().delete(&l.key)?;
            progress.advance(l.size);
        }
        for l in &doomed_cold {
            repo.store().delete_cold(&l.key)?;
            progress.advance(l.size);
        }
    }
    Ok(GcReport {
        doomed,
        doomed_cold,
        young,
        young_until,
    })
}
