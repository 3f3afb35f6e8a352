//! In-memory cache of verified file chunks for readers (the mount, the
//! gateway), bounded in bytes.
//! A miss fetches a whole run of neighbouring chunks with one range read;
//! concurrent readers of a run being fetched wait for it instead of fetching
//! it again, and the next run can be fetched ahead in the background.

use crate::cache::budget::Part;
use crate::error::Result;
use crate::id::BlobId;
use crate::repo::Repo;
use crate::store::pack::BlobRef;
use bytes::Bytes;
use lru::LruCache;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The chunks one read brought, kept and dropped together: their bytes are
/// one allocation, which eviction gives back whole. (Chunks in buffers of
/// their own left the allocator's heaps full of holes: the daemon's memory
/// rose to several times the cache's bound; docs/benchmarks.md.)
type Run = Vec<(BlobId, Bytes)>;

struct State {
    /// Runs by a serial, least recently used first.
    runs: LruCache<u64, Run>,
    /// Where each cached chunk is: its run and its place there.
    at: HashMap<BlobId, (u64, usize)>,
    next_run: u64,
    bytes: usize,
    inflight: HashSet<BlobId>,
}

impl Default for State {
    fn default() -> State {
        State {
            runs: LruCache::unbounded(),
            at: HashMap::new(),
            next_run: 0,
            bytes: 0,
            inflight: HashSet::new(),
        }
    }
}

impl State {
    fn chunk(&mut self, id: &BlobId) -> Option<Bytes> {
        let (run, i) = *self.at.get(id)?;
        self.runs.get(&run).map(|r| r[i].1.clone())
    }

    fn has(&self, id: &BlobId) -> bool {
        self.at.contains_key(id)
    }

    fn insert(&mut self, run: Run) {
        // A read none of whose chunks verified keeps nothing (an empty run
        // weighs nothing, so eviction would never reach it).
        if run.is_empty() {
            return;
        }
        let serial = self.next_run;
        self.next_run += 1;
        for (i, (id, data)) in run.iter().enumerate() {
            self.at.insert(*id, (serial, i));
            self.bytes += data.len();
        }
        self.runs.put(serial, run);
    }

    fn evict_to(&mut self, max_bytes: usize) {
        while self.bytes > max_bytes {
            let Some((serial, run)) = self.runs.pop_lru() else {
                break;
            };
            for (id, data) in run {
                self.bytes -= data.len();
                // A chunk read again since lives in a newer run.
                if self.at.get(&id).is_some_and(|&(r, _)| r == serial) {
                    self.at.remove(&id);
                }
            }
        }
    }
}

/// The chunks of a file of `chunks` that hold bytes `[start, end)`, and
/// where the first of them starts.
fn covering(chunks: &[BlobRef], start: u64, end: u64) -> (u64, Vec<BlobRef>) {
    let mut at = 0u64;
    let mut wanted = Vec::new();
    let mut first_at = 0;
    for c in chunks {
        let len = c.data_size();
        if at + len > start && at < end {
            if wanted.is_empty() {
                first_at = at;
            }
            wanted.push(*c);
        }
        at += len;
    }
    (first_at, wanted)
}

/// The bytes of `pieces` from `skip` on, `len` of them at most, as slices
/// in order (what `pieces` gave holds at least that much).
pub fn spans(mut skip: usize, pieces: &[Bytes], mut len: usize) -> impl Iterator<Item = &[u8]> {
    pieces.iter().map(move |p| {
        let take = &p[skip.min(p.len())..];
        skip = skip.saturating_sub(p.len());
        let take = &take[..len.min(take.len())];
        len -= take.len();
        take
    })
}

/// Largest run of chunks one miss reads.
const RUN_BYTES: u64 = 4 << 20;

pub struct ChunkCache {
    repo: Arc<Repo>,
    max_bytes: usize,
    /// Runs a long read keeps in flight ahead of the one it takes: one
    /// per core, more where each answer comes after a round trip (known
    /// once: the core count is read from the system's files).
    ahead: usize,
    state: Mutex<State>,
    fetched: Condvar,
}

impl ChunkCache {
    pub fn new(repo: Arc<Repo>, max_bytes: usize) -> Arc<ChunkCache> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let ahead = match repo.is_remote() {
            true => cores.max(8),
            false => cores,
        };
        Arc::new(ChunkCache {
            repo,
            max_bytes,
            ahead,
            state: Mutex::new(State::default()),
            fetched: Condvar::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The chunk `run[at]`, fetching `run` (back-to-back blobs of one pack) if needed.
    pub fn get(&self, run: &[BlobRef], at: usize) -> Result<Bytes> {
        let id = run[at].id;
        let mut st = self.state();
        loop {
            if let Some(d) = st.chunk(&id) {
                return Ok(d);
            }
            // Not in memory: waiting for it, or reading it, may take a while.
            crate::nowait::check()?;
            if st.inflight.contains(&id) {
                self.fetched.wait(&mut st);
                continue;
            }
            drop(st);
            self.fetch(run, Some(at))?;
            st = self.state();
        }
    }

    /// The chunks holding bytes `[start, end)` of a file of `chunks`, each
    /// verified, and where `start` lies in the first of them. Only those
    /// chunks are read (a miss reads the whole run of them lying back to
    /// back in a pack, up to `RUN_BYTES`); the runs after the first are
    /// fetched in the background beside it, so a long range is read on
    /// every core. With `memory_only`, `None` unless every one is in
    /// memory. Readers of ranges (the gateway, Python) go through here.
    pub fn pieces(
        self: &Arc<Self>,
        chunks: &[BlobRef],
        start: u64,
        end: u64,
        memory_only: bool,
    ) -> Result<Option<(usize, Vec<Bytes>)>> {
        if start >= end {
            return Ok(Some((0, Vec::new())));
        }
        let (first_at, wanted) = covering(chunks, start, end);
        let runs = crate::store::pack::runs(&wanted, RUN_BYTES);
        // The runs after the one read are fetched and verified ahead, a
        // window of them at a time: every core busy, none of them spent
        // on runs far ahead while the next one waits.
        let mut out = Vec::with_capacity(wanted.len());
        for (k, run) in runs.iter().enumerate() {
            if !memory_only {
                for next in runs.iter().skip(k + 1).take(self.ahead) {
                    self.prefetch(next.to_vec());
                }
            }
            for i in 0..run.len() {
                out.push(match memory_only {
                    true => match self.cached(&run[i].id) {
                        Some(d) => d,
                        None => return Ok(None),
                    },
                    false => self.get(run, i)?,
                });
            }
        }
        // The chunks' sizes say where the bytes are; a store whose chunks
        // disagree with them is refused, never sliced out of bounds.
        let held: u64 = out.iter().map(|b| b.len() as u64).sum();
        if held < end - first_at {
            return Err(crate::Error::malformed(
                "file",
                "its chunks hold fewer bytes than its size",
            ));
        }
        Ok(Some((crate::limits::to_usize(start - first_at), out)))
    }

    /// `pieces`, cut to the bytes `[start, end)`: slices of the cache's
    /// own buffers, nothing copied.
    pub fn slices(
        self: &Arc<Self>,
        chunks: &[BlobRef],
        start: u64,
        end: u64,
        memory_only: bool,
    ) -> Result<Option<Vec<Bytes>>> {
        let Some((mut skip, pieces)) = self.pieces(chunks, start, end, memory_only)? else {
            return Ok(None);
        };
        let mut left = crate::limits::to_usize(end.saturating_sub(start));
        let mut out = Vec::with_capacity(pieces.len());
        for p in pieces {
            let from = skip.min(p.len());
            let to = (from + left).min(p.len());
            if to > from {
                out.push(p.slice(from..to));
                left -= to - from;
            }
            skip = skip.saturating_sub(p.len());
        }
        Ok(Some(out))
    }

    /// `slices`, as one buffer.
    pub fn span(
        self: &Arc<Self>,
        chunks: &[BlobRef],
        start: u64,
        end: u64,
        memory_only: bool,
    ) -> Result<Option<Vec<u8>>> {
        let slices = self.slices(chunks, start, end, memory_only)?;
        Ok(slices.map(|s| s.concat()))
    }

    /// Starts fetching, in the background, the chunks holding bytes
    /// `[start, end)` of a file of `chunks`: what a sequential reader reads
    /// next, decrypted and verified beside its reads.
    pub fn prefetch_span(self: &Arc<Self>, chunks: &[BlobRef], start: u64, end: u64) {
        let (_, wanted) = covering(chunks, start, end);
        for run in crate::store::pack::runs(&wanted, RUN_BYTES) {
            self.prefetch(run.to_vec());
        }
    }

    /// Forgets every chunk in memory (a caller refused by upstream must
    /// not be served what was fetched for it before). Fetches under way
    /// finish; their chunks are kept only if asked for again.
    pub fn clear(&self) {
        let mut st = self.state();
        let inflight = std::mem::take(&mut st.inflight);
        *st = State {
            inflight,
            ..State::default()
        };
        self.repo.budget().holds(Part::Chunks, 0);
    }

    /// Forgets the chunks holding bytes `[start, end)` of a file of
    /// `chunks`, so the next read of them goes to the store again (a
    /// reader asking for what the store holds now: `verify` through a
    /// gateway).
    pub fn forget_span(&self, chunks: &[BlobRef], start: u64, end: u64) {
        let (_, wanted) = covering(chunks, start, end);
        let mut st = self.state();
        for c in wanted {
            st.at.remove(&c.id);
        }
    }

    /// Chunk `id` if it is in memory (no I/O).
    pub fn cached(&self, id: &BlobId) -> Option<Bytes> {
        self.state().chunk(id)
    }

    /// Starts fetching `run` in the background unless it is cached or under way.
    pub fn prefetch(self: &Arc<Self>, run: Vec<BlobRef>) {
        {
            let st = self.state();
            if run.is_empty() || st.has(&run[0].id) || st.inflight.contains(&run[0].id) {
                return;
            }
        }
        let me = self.clone();
        // Queued behind reads when the pool is busy; a reader never waits for
        // a queued read-ahead (chunks count as in flight only once it runs).
        self.repo.store().runtime().spawn_work(move || {
            if let Err(e) = me.fetch(&run, None) {
                tracing::debug!("read-ahead failed: {e}");
            }
        });
    }

    /// Reads `run` into the cache. Fails if the read fails, or if chunk
    /// `want` does not verify (its neighbours are cached all the same).
    fn fetch(&self, run: &[BlobRef], want: Option<usize>) -> Result<()> {
        {
            let mut st = self.state();
            if run
                .iter()
                .all(|r| st.inflight.contains(&r.id) || st.has(&r.id))
            {
                return Ok(());
            }
            for r in run {
                st.inflight.insert(r.id);
            }
        }
        let read = self
            .repo
            .read_chunks_each(run)
            .map(|blobs| verified(run, blobs, want));
        let mut st = self.state();
        for r in run {
            st.inflight.remove(&r.id);
        }
        let res = read.and_then(|(kept, wanted)| {
            st.insert(kept);
            // Within its own bound and what the rest of the memory budget
            // (trees, a mount's inodes and listings) leaves it.
            let budget = self.repo.budget();
            st.evict_to(self.max_bytes.min(budget.room(Part::Chunks)));
            budget.holds(Part::Chunks, st.bytes);
            wanted
        });
        drop(st);
        self.fetched.notify_all();
        res
    }
}

/// The chunks of a read that verified (sharing its one buffer), and the
/// error of chunk `want` if it did not.
fn verified(run: &[BlobRef], blobs: Vec<Result<Bytes>>, want: Option<usize>) -> (Run, Result<()>) {
    let mut kept = Vec::with_capacity(run.len());
    let mut wanted = Ok(());
    for (i, (r, data)) in run.iter().zip(blobs).enumerate() {
        match data {
            Ok(d) => kept.push((r.id, d)),
            Err(e) if want == Some(i) => wanted = Err(e),
            Err(_) => {}
        }
    }
    (kept, wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ids: &[u8], each: usize) -> Run {
        let buf = Bytes::from(vec![7u8; ids.len() * each]);
        ids.iter()
            .enumerate()
            .map(|(i, &id)| (BlobId::of(&[id]), buf.slice(i * each..(i + 1) * each)))
            .collect()
    }

    #[test]
    fn spans_start_at_skip_and_stop_at_len() {
        let pieces = [Bytes::from_static(b"abcd"), Bytes::from_static(b"efgh")];
        let joined = |skip, len| spans(skip, &pieces, len).collect::<Vec<_>>().concat();
        assert_eq!(joined(0, 8), b"abcdefgh");
        assert_eq!(joined(2, 4), b"cdef");
        assert_eq!(joined(5, 2), b"fg");
        assert_eq!(joined(1, 0), b"");
        // More asked than the pieces hold: what they hold.
        assert_eq!(joined(6, 10), b"gh");
    }

    #[test]
    fn whole_runs_are_kept_and_evicted_within_the_bound() {
        let mut st = State::default();
        st.insert(run(&[1, 2], 10));
        st.insert(run(&[3, 4], 10));
        // A read where nothing verified keeps nothing.
        st.insert(Vec::new());
        assert_eq!((st.runs.len(), st.bytes), (2, 40));
        // Chunk 1 used: its run is the last to go.
        assert!(st.chunk(&BlobId::of(&[1])).is_some());
        // Chunk 2 read again in another run: it lives there now.
        st.insert(run(&[2, 5], 10));
        st.evict_to(40);
        assert_eq!((st.runs.len(), st.bytes), (2, 40));
        assert!(!st.has(&BlobId::of(&[3])) && !st.has(&BlobId::of(&[4])));
        for id in [1, 2, 5] {
            assert_eq!(st.chunk(&BlobId::of(&[id])).unwrap().len(), 10, "{id}");
        }
        // The first run goes; chunk 2 stays with the run it lives in.
        st.evict_to(20);
        assert!(!st.has(&BlobId::of(&[1])));
        assert!(st.chunk(&BlobId::of(&[2])).is_some());
        st.evict_to(10);
        assert_eq!((st.runs.len(), st.bytes, st.at.len()), (0, 0, 0));
    }
}
