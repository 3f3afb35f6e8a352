//! Encodes a commit's new chunks (compress, seal) on threads of their own,
//! so that a commit reads, chunks and hashes on one core while the others
//! encode: zstd is slower than hashing, and a sealed commit should cost
//! about what a plaintext one does.
//!
//! Results come back in the order the chunks went in (so a file's chunks
//! lie in order in its pack). At most `DEPTH` chunks are in flight, which
//! bounds memory to a few chunk sizes.

use crate::id::ObjectId;
use crate::store::codec::Codec;
use crate::store::pack::BlobKind;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, mpsc};

const DEPTH: usize = 8;
const THREADS: usize = 2;

/// A chunk encoded: its id, its bytes as stored, and its data size.
pub struct Encoded {
    pub id: ObjectId,
    pub bytes: Vec<u8>,
    pub size: usize,
}

type Job = (u64, ObjectId, Vec<u8>);

pub struct Encoder {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<(u64, Encoded)>,
    /// Ids sent and not yet handed back, so a chunk repeated within the
    /// window is encoded once.
    pending: HashSet<ObjectId>,
    /// Sequence numbers: of the next job, and of the next result due.
    sent: u64,
    due: u64,
    /// Results that finished ahead of an older one.
    early: BTreeMap<u64, Encoded>,
}

impl Encoder {
    /// Starts the threads. They inherit the caller's scheduling priority
    /// (a commit through the mount runs at nice 10), and end when the
    /// encoder is dropped.
    pub fn start(codec: Codec) -> std::io::Result<Encoder> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (outbox, done) = mpsc::channel();
        let inbox = Arc::new(Mutex::new(inbox));
        for _ in 0..THREADS {
            let (inbox, outbox, codec) = (inbox.clone(), outbox.clone(), codec.clone());
            std::thread::Builder::new()
                .name("detafs-encode".into())
                .spawn(move || {
                    loop {
                        let job = inbox.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        let Ok((seq, id, data)) = job else { break };
                        let bytes = codec.encode_blob(BlobKind::Chunk, &id, &data);
                        let size = data.len();
                        if outbox.send((seq, Encoded { id, bytes, size })).is_err() {
                            break;
                        }
                    }
                })?;
        }
        Ok(Encoder {
            jobs,
            done,
            pending: HashSet::new(),
            sent: 0,
            due: 0,
            early: BTreeMap::new(),
        })
    }

    pub fn busy(&self) -> bool {
        !self.pending.is_empty()
    }

    pub fn is_pending(&self, id: &ObjectId) -> bool {
        self.pending.contains(id)
    }

    /// Queues a chunk; returns what finished meanwhile, in order (waiting
    /// for the oldest when `DEPTH` are in flight).
    pub fn submit(&mut self, id: ObjectId, data: Vec<u8>) -> Vec<Encoded> {
        let mut out = Vec::new();
        if self.pending.len() >= DEPTH {
            out.push(self.next(true).expect("a job is in flight"));
        }
        out.extend(std::iter::from_fn(|| self.next(false)));
        self.pending.insert(id);
        // The threads only stop when this side hangs up or one panics;
        // then `next` reports it.
        let _ = self.jobs.send((self.sent, id, data));
        self.sent += 1;
        out
    }

    /// Waits for everything in flight.
    pub fn drain(&mut self) -> Vec<Encoded> {
        std::iter::from_fn(|| (self.due < self.sent).then(|| self.next(true)).flatten()).collect()
    }

    /// The result due next: waited for if `wait`, else only if it is done.
    fn next(&mut self, wait: bool) -> Option<Encoded> {
        while !self.early.contains_key(&self.due) {
            let (seq, e) = if wait {
                self.done
                    .recv()
                    .expect("an encoder thread panicked (a bug: encoding cannot fail)")
            } else {
                self.done.try_recv().ok()?
            };
            self.early.insert(seq, e);
        }
        let e = self.early.remove(&self.due).expect("checked above");
        self.due += 1;
        self.pending.remove(&e.id);
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_whatever_finishes_first() {
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
        assert!(!enc.busy());
        let got: Vec<_> = back.iter().map(|e| (e.id, e.size)).collect();
        assert_eq!(got, sent);
        assert!(back.iter().all(|e| e.bytes.len() == e.size + 1));
    }
}
