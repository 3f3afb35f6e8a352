//! Encodes a commit's new chunks (compress, seal) on threads of their own:
//! zstd is slower than hashing, and a sealed commit should cost about what
//! a plaintext one does. Results come back in the order the chunks went in
//! (so a file's chunks lie in order in its pack). Small chunks travel in
//! batches: one hand-off per small file cost more than encoding it.

use super::ordered::Ordered;
use crate::id::BlobId;
use crate::store::codec::Codec;
use crate::store::pack::BlobKind;
use std::collections::HashSet;

const DEPTH: usize = 8;
const THREADS: usize = 2;
/// A batch is sent once it holds this many bytes or chunks.
const BATCH_BYTES: usize = 128 << 10;
const BATCH_CHUNKS: usize = 32;

/// A chunk encoded: its id, its bytes as stored, and its data size.
pub struct Encoded {
    pub id: BlobId,
    pub bytes: Vec<u8>,
    pub size: usize,
}

type Batch = Vec<(BlobId, Vec<u8>)>;

pub struct Encoder {
    pool: Ordered<Batch, Vec<Encoded>>,
    /// Ids submitted and not yet handed back, so a chunk repeated within
    /// the window is encoded once.
    pending: HashSet<BlobId>,
    /// Chunks submitted and not yet sent, and their bytes.
    batch: Batch,
    batch_bytes: usize,
}

impl Encoder {
    pub fn start(codec: Codec) -> std::io::Result<Encoder> {
        let pool = Ordered::start("detafs-encode", THREADS, DEPTH, move |batch: Batch| {
            let encode = |(id, data): (BlobId, Vec<u8>)| Encoded {
                id,
                bytes: codec.encode_blob(BlobKind::Chunk, &id, &data),
                size: data.len(),
            };
            batch.into_iter().map(encode).collect()
        })?;
        Ok(Encoder {
            pool,
            pending: HashSet::new(),
            batch: Vec::new(),
            batch_bytes: 0,
        })
    }

    pub fn busy(&self) -> bool {
        self.pool.in_flight() > 0 || !self.batch.is_empty()
    }

    pub fn is_pending(&self, id: &BlobId) -> bool {
        self.pending.contains(id)
    }

    /// Queues a chunk; returns what finished meanwhile, in order.
    pub fn submit(&mut self, id: BlobId, data: Vec<u8>) -> Vec<Encoded> {
        self.pending.insert(id);
        self.batch_bytes += data.len();
        self.batch.push((id, data));
        if self.batch_bytes < BATCH_BYTES && self.batch.len() < BATCH_CHUNKS {
            return Vec::new();
        }
        let done = self.send();
        self.handed_back(done)
    }

    /// Waits for everything submitted.
    pub fn drain(&mut self) -> Vec<Encoded> {
        let mut done = self.send();
        done.extend(self.pool.drain());
        self.handed_back(done)
    }

    fn send(&mut self) -> Vec<Vec<Encoded>> {
        if self.batch.is_empty() {
            return Vec::new();
        }
        self.batch_bytes = 0;
        self.pool.submit(std::mem::take(&mut self.batch))
    }

    fn handed_back(&mut self, done: Vec<Vec<Encoded>>) -> Vec<Encoded> {
        let done: Vec<Encoded> = done.into_iter().flatten().collect();
        for e in &done {
            self.pending.remove(&e.id);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_come_back_encoded_in_order() {
        let codec = Codec::Plain;
        let mut enc = Encoder::start(codec.clone()).unwrap();
        let mut back = Vec::new();
        let mut sent = Vec::new();
        for i in 0..200u32 {
            // Big and small alternate, so later jobs often finish first.
            let data = vec![i.to_le_bytes()[0]; if i % 2 == 0 { 256 << 10 } else { 10 }];
            let id = codec.blob_id(&[&i.to_le_bytes()[..], &data].concat());
            sent.push((id, data.len()));
            back.extend(enc.submit(id, data));
            assert!(enc.pending.len() <= (DEPTH + 1) * BATCH_CHUNKS);
        }
        back.extend(enc.drain());
        assert!(!enc.busy() && enc.pending.is_empty());
        let got: Vec<_> = back.iter().map(|e| (e.id, e.size)).collect();
        assert_eq!(got, sent);
        assert!(back.iter().all(|e| e.bytes.len() == e.size + 1));
    }
}
