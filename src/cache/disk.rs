//! On-disk cache of store blobs as their packs hold them (so a sealed
//! store's cache holds only ciphertext), bounded in bytes, least recently
//! used evicted first. Entries are decoded, and so verified, on every read.

use super::index::Index;
use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::store::codec::Codec;
use crate::store::pack::{BlobKind, BlobRef};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    index: Arc<Index>,
    total: AtomicU64,
    /// Entries this process has used: recency is recorded once per process
    /// run, not per read, and in batches, so a hit costs no database write.
    touched: Mutex<Touched>,
}

#[derive(Default)]
struct Touched {
    seen: HashSet<BlobId>,
    pending: Vec<(BlobId, u64, i64)>,
}

/// Cache hits recorded per database transaction.
const TOUCH_BATCH: usize = 256;

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl DiskCache {
    pub fn open(dir: PathBuf, max_bytes: u64, index: Arc<Index>) -> Result<DiskCache> {
        crate::private::ensure_dir(&dir)?;
        let total = AtomicU64::new(index.cache_total()?);
        Ok(DiskCache {
            dir,
            max_bytes,
            index,
            total,
            touched: Mutex::new(Touched::default()),
        })
    }

    /// The folder holding the entries.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Deletes a cache folder made by `open` (entries are named by their ids).
    pub fn remove(dir: &std::path::Path) -> Result<()> {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(dir.display(), e)),
            _ => Ok(()),
        }
    }

    fn path(&self, id: &BlobId) -> PathBuf {
        let hex = id.to_hex();
        self.dir.join(&hex[..2]).join(hex)
    }

    pub fn used_bytes(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Whether a blob is cached (unverified: `decoded` checks it). Where
    /// nothing may wait (`crate::nowait`), nothing is: the caller goes on
    /// to the store, which refuses.
    pub fn contains(&self, id: &BlobId) -> bool {
        !crate::nowait::refused() && self.path(id).exists()
    }

    /// A cached blob, decoded and verified against its reference; a
    /// damaged entry is dropped and reported as a miss (so is every blob
    /// where nothing may wait).
    pub fn decoded(&self, r: &BlobRef, kind: BlobKind, codec: &Codec) -> Option<Bytes> {
        self.checked(&r.id, |stored| codec.decode_blob(r, kind, stored))
    }

    /// A blob a host that reads through a gateway cached with
    /// `Codec::seal_object` under `key` (its own key: the gateway's ids
    /// are keyed with the store's), opened and checked; as `decoded`.
    pub fn opened(&self, id: &BlobId, key: &str, codec: &Codec) -> Option<Bytes> {
        self.checked(id, |stored| codec.open_object(key, stored))
    }

    /// The entry of `id` as `check` reads it; a damaged one is dropped.
    fn checked(&self, id: &BlobId, check: impl FnOnce(Bytes) -> Result<Bytes>) -> Option<Bytes> {
        if crate::nowait::refused() {
            return None;
        }
        let path = self.path(id);
        let stored = std::fs::read(&path).ok()?;
        let size = stored.len() as u64;
        match check(stored.into()) {
            Ok(data) => {
                self.record_use(id, size, false);
                Some(data)
            }
            Err(e) => {
                tracing::warn!(
                    "cache entry {} is damaged ({e}); dropping it",
                    path.display()
                );
                self.drop_entry(id, size);
                None
            }
        }
    }

    /// Adds a blob as its pack holds it (verified by whoever read it).
    /// Cache failures are logged, never fatal.
    pub fn put(&self, id: &BlobId, data: &[u8]) {
        if data.len() as u64 > self.max_bytes / 4 {
            return;
        }
        let path = self.path(id);
        if path.exists() {
            return; // content-addressed: already there
        }
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(path.parent().expect("has parent"))?;
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?
                .write_all(data)?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            tracing::warn!("cannot write cache entry {}: {e}", path.display());
            return;
        }
        self.total.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.record_use(id, data.len() as u64, true);
        if self.used_bytes() > self.max_bytes
            && let Err(e) = self.evict()
        {
            tracing::warn!("cache eviction failed: {e}");
        }
    }

    /// Notes a use of an entry (a new one, or the first hit on one in this
    /// process); writes the notes in batches.
    fn record_use(&self, id: &BlobId, size: u64, new: bool) {
        let full = {
            let mut t = self.touched.lock();
            if !new && !t.seen.insert(*id) {
                return;
            }
            t.pending.push((*id, size, now_ns()));
            t.pending.len() >= TOUCH_BATCH
        };
        if full {
            self.flush_uses();
        }
    }

    fn flush_uses(&self) {
        let batch = std::mem::take(&mut self.touched.lock().pending);
        // Bookkeeping only: a failure here must not fail the caller.
        if !batch.is_empty()
            && let Err(e) = self.index.cache_touch(&batch)
        {
            tracing::warn!("cannot record cache use: {e}");
        }
    }

    /// Removes `id`'s entry, if any (its bytes were erased from the store).
    pub fn discard(&self, id: &BlobId) {
        if let Ok(meta) = std::fs::metadata(self.path(id)) {
            self.drop_entry(id, meta.len());
        }
    }

    fn drop_entry(&self, id: &BlobId, size: u64) {
        let _ = std::fs::remove_file(self.path(id));
        let _ = self.index.cache_forget(id);
        let _ = self
            .total
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(size))
            });
    }

    /// Evicts least recently used entries down to 90% of the bound.
    fn evict(&self) -> Result<()> {
        self.flush_uses();
        let goal = self.max_bytes / 10 * 9;
        while self.used_bytes() > goal {
            let oldest = self.index.cache_oldest(256)?;
            if oldest.is_empty() {
                self.total.store(0, Ordering::Relaxed);
                break;
            }
            for (id, size) in oldest {
                self.drop_entry(&id, size);
                if self.used_bytes() <= goal {
                    break;
                }
            }
        }
        Ok(())
    }
}

impl Drop for DiskCache {
    fn drop(&mut self) {
        self.flush_uses();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_least_recently_used_goes_first() {
        let tmp = tempfile::tempdir().unwrap();
        let index = Arc::new(Index::open(&tmp.path().join("index.sqlite")).unwrap());
        let cache = DiskCache::open(tmp.path().join("blobs"), 10_000, index).unwrap();
        let codec = Codec::Plain;
        let blobs: Vec<(BlobRef, Vec<u8>)> = (0..12u8)
            .map(|i| {
                let data = vec![i; 999];
                let id = codec.blob_id(&data);
                let encoded = codec.encode_blob(BlobKind::Chunk, &id, &data);
                let r = BlobRef {
                    id,
                    pack: crate::id::PackId::from_bytes(*id.as_bytes()),
                    offset: 8,
                    len: u32::try_from(encoded.len()).unwrap(),
                    size: 999,
                };
                (r, encoded)
            })
            .collect();
        let get = |i: usize| cache.decoded(&blobs[i].0, BlobKind::Chunk, &codec);
        for (r, b) in blobs.iter().take(9) {
            cache.put(&r.id, b);
        }
        assert!(get(0).is_some()); // now recently used
        for (r, b) in &blobs[9..] {
            cache.put(&r.id, b);
        }
        assert!(cache.used_bytes() <= 10_000);
        assert!(get(0).is_some(), "recently used entry kept");
        assert!(get(1).is_none(), "least recently used entry evicted");
        assert_eq!(get(11).unwrap(), vec![11u8; 999]);
        // A damaged entry is never served.
        std::fs::write(cache.path(&blobs[11].0.id), b"garbage").unwrap();
        assert!(get(11).is_none());
    }
}
