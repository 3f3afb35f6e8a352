//! Encodes a commit's new chunks (compress, seal) on a thread of its own,
//! so that a commit reads, chunks and hashes on one core while the other
//! encodes: a sealed commit then costs about what a plaintext one does.
//!
//! Results come back in the order the chunks went in. At most `DEPTH`
//! chunks are in flight, which bounds memory to a few chunk sizes.

use crate::id::ObjectId;
use crate::store::codec::Codec;
use crate::store::pack::BlobKind;
use std::collections::HashSet;
use std::sync::mpsc;

const DEPTH: usize = 8;

/// A chunk encoded: its id, its bytes as stored, and its data size.
pub struct Encoded {
    pub id: ObjectId,
    pub bytes: Vec<u8>,
    pub size: usize,
}

pub struct Encoder {
    jobs: mpsc::Sender<(ObjectId, Vec<u8>)>,
    done: mpsc::Receiver<Encoded>,
    /// Ids sent and not yet received, so a chunk repeated within the
    /// window is encoded once.
    pending: HashSet<ObjectId>,
}

impl Encoder {
    /// Starts the thread. It inherits the caller's scheduling priority (a
    /// commit through the mount runs at nice 10), and ends when the
    /// encoder is dropped.
    pub fn start(codec: Codec) -> std::io::Result<Encoder> {
        let (jobs, inbox) = mpsc::channel::<(ObjectId, Vec<u8>)>();
        let (outbox, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("detafs-encode".into())
            .spawn(move || {
                for (id, data) in inbox {
                    let bytes = codec.encode_blob(BlobKind::Chunk, &id, &data);
                    let size = data.len();
                    if outbox.send(Encoded { id, bytes, size }).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Encoder {
            jobs,
            done,
            pending: HashSet::new(),
        })
    }

    pub fn busy(&self) -> bool {
        !self.pending.is_empty()
    }

    pub fn is_pending(&self, id: &ObjectId) -> bool {
        self.pending.contains(id)
    }

    /// Queues a chunk; returns what finished meanwhile (waiting for the
    /// oldest when `DEPTH` are in flight).
    pub fn submit(&mut self, id: ObjectId, data: Vec<u8>) -> Vec<Encoded> {
        let mut out = Vec::new();
        if self.pending.len() >= DEPTH {
            out.push(self.recv());
        }
        out.extend(std::iter::from_fn(|| self.try_recv()));
        self.pending.insert(id);
        // The thread only stops when this side hangs up or panics; then
        // `recv` below reports it.
        let _ = self.jobs.send((id, data));
        out
    }

    /// Waits for everything in flight.
    pub fn drain(&mut self) -> Vec<Encoded> {
        let mut out = Vec::new();
        while !self.pending.is_empty() {
            out.push(self.recv());
        }
        out
    }

    fn recv(&mut self) -> Encoded {
        let e = self
            .done
            .recv()
            .expect("the encoder thread panicked (a bug: encoding cannot fail)");
        self.pending.remove(&e.id);
        e
    }

    fn try_recv(&mut self) -> Option<Encoded> {
        let e = self.done.try_recv().ok()?;
        self.pending.remove(&e.id);
        Some(e)
    }
}
