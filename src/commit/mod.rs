//! Commit: snapshot a directory, then publish it as the next version.
//!
//! Data and trees are uploaded first; creating the version record with a
//! conditional create is the commit point. Losing the race for a number means
//! re-reading the winner: disjoint changes are rebased (three-way merge) and
//! the next number is tried; overlapping changes are a conflict.

pub mod edit;
mod encoder;
mod listed;
mod lister;
mod ordered;
pub mod pending;
pub mod scan;
pub mod sink;
mod small;
pub mod staged;
pub mod stat_rows;
pub mod through;
pub mod upload;

use crate::error::{Error, Result};
use crate::id::RecordHash;
use crate::limits;
use crate::progress::{Progress, Quiet};
use crate::repo::Repo;
use crate::snapshot::diff::{self, ChangeKind};
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Record, Stats};
use crate::store::keys;
use crate::store::pack::BlobRef;
use scan::Scanner;
use sink::Sink;
use stat_rows::PendingStats;
use std::path::Path;

const MAX_ATTEMPTS: u32 = 100;

/// What a commit records besides the tree.
pub struct CommitMeta<'a> {
    pub dataset: &'a str,
    pub message: &'a str,
    pub author: &'a str,
    /// Files whose content and mode did not change keep the times the
    /// parent has (`--content-only`): time-only changes are not recorded.
    pub content_only: bool,
}

impl CommitMeta<'_> {
    pub fn check(&self) -> Result<()> {
        if self.message.trim().is_empty() {
            return Err(Error::InvalidInput("empty commit message".into()));
        }
        if self.author.trim().is_empty() {
            return Err(Error::InvalidInput("empty author".into()));
        }
        if self.message.len() > limits::MAX_MESSAGE || self.author.len() > limits::MAX_AUTHOR {
            return Err(Error::InvalidInput(format!(
                "commit message or author too long (at most {} and {} bytes)",
                limits::MAX_MESSAGE,
                limits::MAX_AUTHOR
            )));
        }
        Ok(())
    }
}

/// Records the contents of directory `from` as the next version.
pub fn commit_dir(
    repo: &Repo,
    meta: &CommitMeta,
    from: &Path,
    progress: &dyn Progress,
) -> Result<Record> {
    meta.check()?;
    repo.check_dataset(meta.dataset)?;
    let stat = std::fs::metadata(from).map_err(|e| Error::io(from.display(), e))?;
    if !stat.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{} is not a directory",
            from.display()
        )));
    }
    let base = repo.sync_whole(meta.dataset)?.pop();
    let mut scanner = Scanner::new(repo, progress)?;
    if let Some(b) = &base {
        repo.index_tree(&b.tree)?;
    }
    let root = scanner.scan_dir(from)?;
    publish(
        repo,
        meta,
        scanner.sink,
        Some(scanner.stat_rows),
        base,
        root,
    )
}

/// Claims the next version number for `ours` (built on `base` into
/// `sink`), rebasing onto versions that landed meanwhile; `stat_rows` are
/// kept once it lands. Fails without side effects visible to readers.
pub fn publish<'r>(
    repo: &'r Repo,
    req: &CommitMeta,
    mut sink: Sink<'r>,
    stat_rows: Option<PendingStats<'r>>,
    base: Option<Record>,
    ours: BlobRef,
) -> Result<Record> {
    let ours = match &base {
        Some(b) if req.content_only => diff::keep_times(repo, &mut sink, &b.tree, &ours)?,
        _ => ours,
    };
    if let Some(b) = &base
        && b.tree.id == ours.id
    {
        // Before anything is uploaded.
        return Err(Error::NothingToCommit(b.version));
    }
    repo.check_store(false)?;
    let started = sink.started;
    let resumed_since = sink.resumed_since;
    let gc_mark = sink.gc_mark.clone();
    // Everything a record reaches must be durable before the record exists.
    let mut bytes_added = sink.finish()?;
    let base_version = base.as_ref().map_or(0, |b| b.version);
    let mut parent = base.clone();
    for _ in 0..MAX_ATTEMPTS {
        let root = match &parent {
            Some(p) if p.version != base_version => {
                // Lost a race: replay our changes (base → ours) onto the winner.
                let mut sink = Sink::new(repo, &Quiet)?;
                let merged = diff::merge(
                    repo,
                    &mut sink,
                    base.as_ref().map(|b| &b.tree),
                    &ours,
                    &p.tree,
                )?;
                bytes_added += sink.finish()?;
                merged.map_err(|paths| Error::Conflict {
                    winner: p.version,
                    paths,
                    staged: false,
                })?
            }
            _ => ours,
        };
        // Whatever the path here (a folder, staging, the gateway, Python),
        // a version equal to its parent is not recorded.
        if let Some(p) = &parent
            && p.tree.id == root.id
        {
            return Err(Error::NothingToCommit(p.version));
        }
        let version = parent.as_ref().map_or(1, |p| p.version + 1);
        let parent_hash = match &parent {
            Some(p) => Some(record_hash(repo, req.dataset, p.version)?),
            None => None,
        };
        let record = Record {
            format: repo.codec().format(),
            dataset: req.dataset.to_string(),
            version,
            parent: parent_hash,
            tree: root,
            time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            author: req.author.to_string(),
            message: req.message.to_string(),
            stats: Stats {
                bytes_added,
                ..stats(repo, parent.as_ref().map(|p| &p.tree), &root)?
            },
        };
        let body = record.encode();
        // The create below may retry for the store's deadline: it must land
        // within MAX_COMMIT_AGE of the first upload, or gc may have run.
        // Counted from the oldest upload it reuses, if it resumed another.
        let resumed_age = resumed_since.map_or(std::time::Duration::ZERO, |at| {
            std::time::Duration::from_secs((sink::unix_now() - at).max(0) as u64)
        });
        if started.elapsed().max(resumed_age) + repo.store().deadline()
            > crate::store::grace::MAX_COMMIT_AGE
        {
            // gc elsewhere may have collected this commit's first packs.
            return Err(Error::CommitTooLong(crate::store::grace::MAX_COMMIT_AGE));
        }
        // A dataset deleted or renamed meanwhile (on any host) gets no new
        // version: checked last, so only a record created within a round
        // trip of the tombstone can land after it (a rename waits for it).
        repo.check_dataset(req.dataset)?;
        crate::hold::hold("before-record");
        // A gc that ran since this commit began may have deleted what it
        // reuses. One that starts later waits out this create (`gc.rs`).
        if repo.gc_mark()? != gc_mark {
            return Err(Error::CollectedMeanwhile);
        }
        if repo
            .store()
            .put_create(&keys::record(req.dataset, version), body.clone().into())?
        {
            crate::hold::hold("after-record");
            repo.index()
                .insert_record(req.dataset, version, RecordHash::of(&body), &body)?;
            repo.index_tree(&root)?;
            if let Some(rows) = stat_rows {
                rows.land()?;
            }
            return Ok(record);
        }
        parent = repo.sync_whole(req.dataset)?.pop();
    }
    Err(Error::TooManyRetries(MAX_ATTEMPTS))
}

fn record_hash(repo: &Repo, dataset: &str, version: u64) -> Result<RecordHash> {
    repo.index()
        .record_hash(dataset, version)?
        .ok_or_else(|| Error::NoVersion {
            dataset: dataset.to_string(),
            version: format!("v{version}"),
        })
}

fn stats(repo: &dyn TreeSource, parent: Option<&BlobRef>, root: &BlobRef) -> Result<Stats> {
    let mut s = Stats::default();
    diff::diff_each(repo, parent, Some(root), &mut |c| match c.kind {
        ChangeKind::Added => s.files_added += 1,
        ChangeKind::Modified => s.files_changed += 1,
        ChangeKind::Removed => s.files_removed += 1,
        ChangeKind::TimeOnly => s.files_touched += 1,
    })?;
    Ok(s)
}
