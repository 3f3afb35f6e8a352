//! Files whose bytes come from the store (a version's file, or a file of
//! staging not written yet): chunk offsets, runs fetched with one range
//! read, and the read path through the chunk cache.

use crate::error::Result;
use crate::snapshot::{Node, Tree};
use crate::store::pack::{self, BlobRef};

/// An open file whose bytes come from the store (a version file, or an
/// unchanged file in staging).
pub(in crate::fs) struct StoredFile {
    pub(in crate::fs) chunks: Vec<BlobRef>,
    /// Offset of each chunk, plus the file size at the end.
    pub(in crate::fs) starts: Vec<u64>,
    /// Index of the first chunk of each run fetched with one range read.
    pub(in crate::fs) run_starts: Vec<usize>,
    /// For a one-chunk file: the run of its directory's small files that
    /// holds it, so reading a folder of small files costs one read per run.
    pub(in crate::fs) sibling_run: Option<Vec<BlobRef>>,
    /// What it is, for messages.
    pub(in crate::fs) origin: Origin,
}

/// What a stored file is, told in messages only (so its path is worked out
/// only when a message needs it, not on every open).
pub(in crate::fs) enum Origin {
    /// A version inode: `versions/v3/a/b.csv`.
    Version(u64),
    /// Already said (a file of staging not written yet).
    Said(String),
}

impl StoredFile {
    /// A file of `chunks`, read in runs of about `run_bytes` per request.
    pub(in crate::fs) fn new(
        chunks: Vec<BlobRef>,
        siblings: Option<&Tree>,
        origin: Origin,
        run_bytes: u64,
    ) -> StoredFile {
        let mut starts = Vec::with_capacity(chunks.len() + 1);
        let mut at = 0;
        starts.push(0);
        for c in &chunks {
            at += c.data_size();
            starts.push(at);
        }
        let mut run_starts = Vec::new();
        let mut i = 0;
        for run in pack::runs(&chunks, run_bytes) {
            run_starts.push(i);
            i += run.len();
        }
        let sibling_run = match (&chunks[..], siblings) {
            ([only], Some(tree)) => {
                let mut all: Vec<BlobRef> = tree
                    .entries
                    .iter()
                    .filter_map(|e| match &e.node {
                        Node::File { chunks, .. } if chunks.len() == 1 => Some(chunks[0]),
                        _ => None,
                    })
                    .collect();
                all.sort_by_key(|r| (r.pack, r.offset));
                all.dedup_by_key(|r| (r.pack, r.offset));
                pack::runs(&all, run_bytes)
                    .into_iter()
                    .find(|run| run.iter().any(|r| r == only))
                    .map(<[BlobRef]>::to_vec)
            }
            _ => None,
        };
        StoredFile {
            chunks,
            starts,
            run_starts,
            sibling_run,
            origin,
        }
    }

    pub(in crate::fs) fn run(&self, r: usize) -> &[BlobRef] {
        let end = self
            .run_starts
            .get(r + 1)
            .copied()
            .unwrap_or(self.chunks.len());
        &self.chunks[self.run_starts[r]..end]
    }
}

impl super::Versions {
    /// Appends bytes `[offset, offset+size)` of a stored file to `out`,
    /// every chunk verified. While one run of chunks is read, the next
    /// ones are fetched ahead.
    pub(in crate::fs) fn read_stored(
        &self,
        f: &StoredFile,
        offset: u64,
        size: u64,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let total = f.starts.last().copied().unwrap_or(0);
        let end = (offset + size).min(total);
        if offset >= end {
            return Ok(());
        }
        out.reserve(crate::limits::to_usize(end - offset));
        let mut i = f.starts.partition_point(|&s| s <= offset) - 1;
        while i < f.chunks.len() && f.starts[i] < end {
            let data = match &f.sibling_run {
                Some(run) => {
                    let at = run
                        .iter()
                        .position(|r| r.id == f.chunks[i].id)
                        .expect("run holds the chunk");
                    self.chunks.get(run, at)?
                }
                None => {
                    let r = f.run_starts.partition_point(|&s| s <= i) - 1;
                    for ahead in r + 1..(r + 1 + self.read_ahead.runs).min(f.run_starts.len()) {
                        self.chunks.prefetch(f.run(ahead).to_vec());
                    }
                    self.chunks.get(f.run(r), i - f.run_starts[r])?
                }
            };
            let from = offset.max(f.starts[i]) - f.starts[i];
            let to = end.min(f.starts[i + 1]) - f.starts[i];
            out.extend_from_slice(
                &data[crate::limits::to_usize(from)..crate::limits::to_usize(to)],
            );
            i += 1;
        }
        Ok(())
    }
}
