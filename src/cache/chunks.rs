//! In-memory cache of verified file chunks for the mount, bounded in bytes.
//! A miss fetches a whole run of neighbouring chunks with one range read;
//! concurrent readers of a run being fetched wait for it instead of fetching
//! it again, and the next run can be fetched ahead in the background.

use crate::error::Result;
use crate::id::ObjectId;
use crate::repo::Repo;
use crate::store::pack::BlobRef;
use bytes::Bytes;
use lru::LruCache;
use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

struct State {
    lru: LruCache<ObjectId, Bytes>,
    bytes: usize,
    inflight: HashSet<ObjectId>,
}

pub struct ChunkCache {
    repo: Arc<Repo>,
    max_bytes: usize,
    state: Mutex<State>,
    fetched: Condvar,
}

impl ChunkCache {
    pub fn new(repo: Arc<Repo>, max_bytes: usize) -> Arc<ChunkCache> {
        Arc::new(ChunkCache {
            repo,
            max_bytes,
            state: Mutex::new(State {
                lru: LruCache::unbounded(),
                bytes: 0,
                inflight: HashSet::new(),
            }),
            fetched: Condvar::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The chunk `run[at]`, fetching `run` (back-to-back blobs of one pack) if needed.
    pub fn get(&self, run: &[BlobRef], at: usize) -> Result<Bytes> {
        let id = run[at].id;
        let mut st = self.state();
        loop {
            if let Some(d) = st.lru.get(&id) {
                return Ok(d.clone());
            }
            if st.inflight.contains(&id) {
                st = self.fetched.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            drop(st);
            self.fetch(run, Some(at))?;
            st = self.state();
        }
    }

    /// Chunk `id` if it is in memory (no I/O).
    pub fn cached(&self, id: &ObjectId) -> Option<Bytes> {
        self.state().lru.get(id).cloned()
    }

    /// Starts fetching `run` in the background unless it is cached or under way.
    pub fn prefetch(self: &Arc<Self>, run: Vec<BlobRef>) {
        {
            let st = self.state();
            if run.is_empty() || st.lru.contains(&run[0].id) || st.inflight.contains(&run[0].id) {
                return;
            }
        }
        let me = self.clone();
        // Queued behind reads when the pool is busy; a reader never waits for
        // a queued read-ahead (chunks count as in flight only once it runs).
        self.repo.store.spawn_work(move || {
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
                .all(|r| st.inflight.contains(&r.id) || st.lru.contains(&r.id))
            {
                return Ok(());
            }
            for r in run {
                st.inflight.insert(r.id);
            }
        }
        let res = self.repo.read_chunks_each(run);
        let mut st = self.state();
        for r in run {
            st.inflight.remove(&r.id);
        }
        let res = res.and_then(|blobs| {
            let mut wanted = Ok(());
            for (i, (r, data)) in run.iter().zip(blobs).enumerate() {
                let data = match data {
                    Ok(d) => d,
                    Err(e) => {
                        if want == Some(i) {
                            wanted = Err(e);
                        }
                        continue;
                    }
                };
                // Own copy: a slice would keep the whole run's buffer alive
                // and the byte bound would not bound memory.
                let data = if self.repo.codec.decodes_into_own_buffers() {
                    data
                } else {
                    Bytes::copy_from_slice(&data)
                };
                st.bytes += data.len();
                if let Some(old) = st.lru.put(r.id, data) {
                    st.bytes -= old.len();
                }
            }
            while st.bytes > self.max_bytes {
                match st.lru.pop_lru() {
                    Some((_, d)) => st.bytes -= d.len(),
                    None => break,
                }
            }
            wanted
        });
        drop(st);
        self.fetched.notify_all();
        res
    }
}
