//! Encodes a commit's new chunks (compress, seal) on threads of their own:
//! zstd is slower than hashing, and a sealed commit should cost about what
//! a plaintext one does. Results come back in the order the chunks went in
//! (so a file's chunks lie in order in its pack).

use super::ordered::Ordered;
use crate::id::ObjectId;
use crate::store::codec::Codec;
use crate::store::pack::BlobKind;
use std::collections::HashSet;

const DEPTH: usize = 8;
const THREADS: usize = 2;

/// A chunk encoded: its id, its bytes as stored, and its data size.
pub struct Encoded {
    pub id: ObjectId,
    pub bytes: Vec<u8>,
    pub size: usize,
}

pub struct Encoder {
    pool: Ordered<(ObjectId, Vec<u8>), Encoded>,
    /// Ids sent and not yet handed back, so a chunk repeated within the
    /// window is encoded once.
    pending: HashSet<ObjectId>,
}

impl Encoder {
    pub fn start(codec: Codec) -> std::io::Result<Encoder> {
        let pool = Ordered::start(
            "detafs-encode",
            THREADS,
            DEPTH,
            move |(id, data): (ObjectId, Vec<u8>)| {
                let bytes = codec.encode_blob(BlobKind::Chunk, &id, &data);
                Encoded {
                    id,
                    bytes,
                    size: data.len(),
                }
            },
        )?;
        Ok(Encoder {
            pool,
            pending: HashSet::new(),
        })
    }

    pub fn busy(&self) -> bool {
        self.pool.in_flight() > 0
    }

    pub fn is_pending(&self, id: &ObjectId) -> bool {
        self.pending.contains(id)
    }

    /// Queues a chunk; returns what finished meanwhile, in order.
    pub fn submit(&mut self, id: ObjectId, data: Vec<u8>) -> Vec<Encoded> {
        self.pending.insert(id);
        let done = self.pool.submit((id, data));
        self.handed_back(done)
    }

    /// Waits for everything in flight.
    pub fn drain(&mut self) -> Vec<Encoded> {
        let done = self.pool.drain();
        self.handed_back(done)
    }

    fn handed_back(&mut self, done: Vec<Encoded>) -> Vec<Encoded> {
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
            let data = vec![i as u8; if i % 2 == 0 { 256 << 10 } else { 10 }];
            let id = codec.blob_id(&[&i.to_le_bytes()[..], &data].concat());
            sent.push((id, data.len()));
            back.extend(enc.submit(id, data));
            assert!(enc.pending.len() <= DEPTH);
        }
        back.extend(enc.drain());
        assert!(!enc.busy() && enc.pending.is_empty());
        let got: Vec<_> = back.iter().map(|e| (e.id, e.size)).collect();
        assert_eq!(got, sent);
        assert!(back.iter().all(|e| e.bytes.len() == e.size + 1));
    }
}
