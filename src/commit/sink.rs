//! Where a commit's new content goes: files cut into chunks and hashed
//! on every core, chunks and trees encoded and packed, packs uploaded;
//! content the store (or a commit this host was interrupted in) holds
//! already is referred to, not stored again. Walks (`scan.rs`), staged
//! commits, uploads and edits all put their content through one `Sink`.

use super::encoder::{Encoded, Encoder};
use super::ordered::Ordered;
use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::limits;
use crate::progress::Progress;
use crate::repo::Repo;
use crate::snapshot::chunker;
use crate::snapshot::rechunk::{Checks, Chunk, Rechunker};
use crate::snapshot::tree::TreeSink;
use crate::snapshot::tree::{check_name, check_node};
use crate::snapshot::{Node, Tree};
use crate::store::codec::Codec;
use crate::store::pack::{BlobKind, BlobRef, PackWriter};
use crate::store::sealed_file::Sealing;
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

/// Blobs a commit remembers having written (about 150 bytes each).
const WRITTEN: usize = 1 << 17;

/// Target pack size: large enough that a commit of many small files costs few
/// PUTs, small enough to bound memory (a few packs are in flight at once).
pub const PACK_SIZE: usize = 16 << 20;

/// How long the chunks an interrupted commit uploaded are offered to the
/// next commit on this host: well within `crate::store::grace::MAX_COMMIT_AGE`, which the
/// resumed commit must still land in, counted from those uploads.
const RESUME_WINDOW: std::time::Duration =
    std::time::Duration::from_secs(crate::store::grace::MAX_COMMIT_AGE.as_secs() / 2);

/// Now, in unix seconds.
pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub struct Sink<'r> {
    repo: &'r Repo,
    data: PackWriter<'r>,
    trees: PackWriter<'r>,
    /// Blobs this commit wrote last, so content repeated nearby is
    /// stored once (bounded: what fell out may be stored again, which
    /// costs space, never correctness).
    written: lru::LruCache<BlobId, BlobRef>,
    /// Where the chunks encoded since the last `settle` were placed.
    placed: HashMap<BlobId, BlobRef>,
    progress: &'r dyn Progress,
    codec: Codec,
    /// When this commit began uploading (see `crate::store::grace::MAX_COMMIT_AGE`).
    pub started: std::time::Instant,
    /// When the oldest chunk it reuses from an interrupted commit was
    /// uploaded (unix seconds): the commit's age counts from there.
    pub resumed_since: Option<i64>,
    /// Started at the first new chunk, on the commit's own thread.
    encoder: Option<Encoder>,
    /// Started at the first chunk that can share the hashing; idle
    /// between files.
    hasher: Option<Hasher>,
    /// The newest gc note when this commit began (`Repo::gc_mark`): the
    /// blobs it reuses were in the store then.
    pub gc_mark: Option<String>,
}

/// A chunk of a file being read: where it lives, or its id while it is
/// being encoded.
pub(super) enum Slot {
    Ready(BlobRef),
    Encoding(BlobId),
}

impl<'r> Sink<'r> {
    /// Whether whoever watches asked the commit to stop (`Progress`).
    pub fn cancelled(&self) -> bool {
        self.progress.cancelled()
    }

    /// Counts `bytes` a commit read without cutting them here (a staged
    /// copy sent through a gateway, which cuts it).
    pub fn count_read(&self, bytes: u64) {
        self.progress.advance(bytes);
    }

    /// A sink for one commit; first makes the index forget what a gc
    /// it has not seen may have deleted.
    pub fn new(repo: &'r Repo, progress: &'r dyn Progress) -> Result<Self> {
        let gc_mark = repo.gc_mark()?;
        repo.index()
            .forget_uploaded(unix_now() - RESUME_WINDOW.as_secs() as i64)?;
        Ok(Sink {
            repo,
            // Each durable pack's chunks are noted in the index, for a
            // commit that resumes this one if it is interrupted.
            data: PackWriter::new(repo.store(), PACK_SIZE).on_durable(Box::new(|blobs| {
                repo.index().insert_uploaded(blobs, unix_now())?;
                crate::hold::hold("commit-uploads-noted");
                Ok(())
            })),
            trees: PackWriter::new(repo.store(), PACK_SIZE),
            written: lru::LruCache::new(WRITTEN.try_into().expect("not zero")),
            placed: HashMap::new(),
            progress,
            codec: repo.codec().clone(),
            started: std::time::Instant::now(),
            resumed_since: None,
            encoder: None,
            hasher: None,
            gc_mark,
        })
    }

    /// Waits until every pack written so far is durable; returns bytes written.
    pub fn finish(self) -> Result<u64> {
        let data = self.data.finish()?;
        let trees = self.trees.finish()?;
        Ok(data.iter().chain(&trees).map(|(_, size)| size).sum())
    }

    /// Where a blob with this id already lives, in this commit or the store.
    fn known(&mut self, id: &BlobId) -> Result<Option<BlobRef>> {
        if let Some(r) = self.written.get(id) {
            return Ok(Some(*r));
        }
        if let Some(r) = self.repo.index().blob(id)? {
            return Ok(Some(r));
        }
        // Uploaded by a commit of this host that was interrupted.
        let since = unix_now() - RESUME_WINDOW.as_secs() as i64;
        Ok(match self.repo.index().uploaded_blob(id, since)? {
            Some((r, at)) => {
                self.resumed_since = Some(self.resumed_since.map_or(at, |s| s.min(at)));
                Some(r)
            }
            None => None,
        })
    }

    /// Adds a chunk to the data packs.
    fn place(&mut self, id: BlobId, bytes: bytes::Bytes, size: usize) -> Result<BlobRef> {
        let r = self.data.add(id, bytes, size)?;
        self.written.put(id, r);
        Ok(r)
    }

    /// Places a chunk, or queues it to be encoded. A small one may be
    /// encoded `inline` when the encoders are idle: a file of one small
    /// chunk read by this thread has nothing to overlap with.
    pub(super) fn put_chunk(&mut self, id: BlobId, data: Vec<u8>, inline: bool) -> Result<Slot> {
        if let Some(r) = self.known(&id)? {
            return Ok(Slot::Ready(r));
        }
        let idle = self.encoder.as_ref().is_none_or(|e| !e.busy());
        if inline && idle && data.len() < chunker::MIN_SIZE {
            let bytes = self.codec.encode_blob(BlobKind::Chunk, &id, &data);
            let r = self.place(id, bytes.into(), data.len())?;
            return Ok(Slot::Ready(r));
        }
        if self.encoder.is_none() {
            let started = Encoder::start(self.codec.clone())
                .map_err(|e| Error::io("a thread to encode chunks", e))?;
            self.encoder = Some(started);
        }
        let encoder = self.encoder.as_mut().expect("started above");
        if !encoder.is_pending(&id) {
            let done = encoder.submit(id, data);
            self.pack(done)?;
        }
        Ok(Slot::Encoding(id))
    }

    /// Puts encoded chunks into the data packs, in the order they came.
    fn pack(&mut self, done: Vec<Encoded>) -> Result<()> {
        for e in done {
            let r = self.place(e.id, e.bytes.into(), e.size)?;
            self.placed.insert(e.id, r);
        }
        Ok(())
    }

    /// Packs every chunk being encoded.
    fn flush(&mut self) -> Result<()> {
        if let Some(encoder) = self.encoder.as_mut() {
            let done = encoder.drain();
            self.pack(done)?;
        }
        Ok(())
    }

    /// Where each chunk lives (after `flush`).
    pub(super) fn refs(&self, slots: Vec<Slot>) -> Vec<BlobRef> {
        slots
            .into_iter()
            .map(|s| match s {
                Slot::Ready(r) => r,
                Slot::Encoding(id) => self.placed[&id],
            })
            .collect()
    }

    /// Places every chunk being encoded and turns `slots` into locations,
    /// so `placed` starts empty again: it never holds more than a
    /// folder's worth.
    pub(super) fn settle<'s>(&mut self, slots: impl Iterator<Item = &'s mut Slot>) -> Result<()> {
        self.flush()?;
        for slot in slots {
            if let Slot::Encoding(id) = slot {
                *slot = Slot::Ready(self.placed[id]);
            }
        }
        self.placed.clear();
        Ok(())
    }

    /// Chunks a file's first `len` bytes (fewer if it is shorter) into
    /// the data packs.
    /// A local file's bytes are read as `sealing` keeps them.
    pub fn chunk_prefix(
        &mut self,
        path: &Path,
        sealing: &Sealing,
        len: u64,
    ) -> Result<(Vec<BlobRef>, u64)> {
        let file = sealing
            .open(path)
            .map_err(|e| Error::io(path.display(), e))?;
        let (slots, size) = self.chunk_slots(file.reader(), path, len)?;
        self.flush()?;
        let refs = self.refs(slots);
        self.placed.clear();
        Ok((refs, size))
    }

    /// Cuts `source`, read from a chunk's start in a file (`len` bytes of
    /// it at most), into the data packs until `stop` says a cut (its
    /// offset in `source`) meets what is known from there on, or `source`
    /// ends: the chunks, and the bytes they hold. For a few chunks around
    /// an edit: each is hashed here.
    pub fn chunk_until(
        &mut self,
        source: impl std::io::Read,
        len: u64,
        mut stop: impl FnMut(u64) -> bool,
    ) -> Result<(Vec<BlobRef>, u64)> {
        let (mut slots, mut at) = (Vec::new(), 0);
        for chunk in chunker::chunks(source, len, self.codec.chunker_seed()) {
            let chunk = chunk.map_err(|e| Error::io("a patched file", e))?;
            at += chunk.len() as u64;
            self.progress.advance(chunk.len() as u64);
            let id = self.codec.blob_id(&chunk);
            slots.push(self.put_chunk(id, chunk, true)?);
            if stop(at) {
                break;
            }
        }
        self.flush()?;
        let refs = self.refs(slots);
        self.placed.clear();
        Ok((refs, at))
    }

    /// Like `chunk_prefix`, leaving chunks being encoded as they are.
    pub(super) fn chunk_slots(
        &mut self,
        file: impl std::io::Read,
        path: &Path,
        len: u64,
    ) -> Result<(Vec<Slot>, u64)> {
        let (mut slots, mut size) = (Vec::new(), 0);
        // Taken out while this file is read; put back only once drained, so
        // no result of this file can reach another.
        let mut hasher = self.hasher.take();
        for chunk in chunker::chunks(file, len, self.codec.chunker_seed()) {
            let chunk = chunk.map_err(|e| Error::io(path.display(), e))?;
            size += chunk.len() as u64;
            self.progress.advance(chunk.len() as u64);
            let idle = hasher.as_ref().is_none_or(|h| h.in_flight() == 0);
            if idle && chunk.len() < chunker::MIN_SIZE {
                // A small file (most files of a dataset) is hashed here: a
                // hand-off would cost more than its hash.
                let id = self.codec.blob_id(&chunk);
                slots.push(self.put_chunk(id, chunk, true)?);
                continue;
            }
            if hasher.is_none() {
                hasher = Some(start_hasher(&self.codec)?);
            }
            let h = hasher.as_mut().expect("started above");
            for (id, data) in h.submit(chunk) {
                slots.push(self.put_chunk(id, data, true)?);
            }
        }
        if let Some(mut h) = hasher {
            for (id, data) in h.drain() {
                slots.push(self.put_chunk(id, data, true)?);
            }
            self.hasher = Some(h);
        }
        Ok((slots, size))
    }

    /// Like `chunk_slots` for a whole file, cut again along its `previous`
    /// chunks: the guesses are hashed on the hashing threads and checked in
    /// order (`rechunk::Checks`); after a wrong one, guesses already given
    /// out are dropped and the chunker cuts from where the checks say
    /// (`snapshot::rechunk`). The chunks are those `chunk_slots` finds,
    /// without its boundary search where the bytes did not change.
    pub(super) fn chunk_along(
        &mut self,
        file: File,
        path: &Path,
        previous: &[BlobRef],
    ) -> Result<(Vec<Slot>, u64)> {
        let io = |e| Error::io(path.display(), e);
        let len = file.metadata().map_err(io)?.len();
        let old = previous.iter().map(|r| (r.data_size(), r.id));
        let mut pieces = Rechunker::new(&file, len, old, self.codec.chunker_seed());
        let mut hasher = match self.hasher.take() {
            Some(h) => h,
            None => start_hasher(&self.codec)?,
        };
        let mut checks = Checks::default();
        let (mut slots, mut size, mut guessed) = (Vec::new(), 0, 0);
        let mut keep = |this: &mut Self, (id, data, guess): Chunk| -> Result<()> {
            guessed += usize::from(guess);
            size += data.len() as u64;
            this.progress.advance(data.len() as u64);
            slots.push(this.put_chunk(id, data, true)?);
            Ok(())
        };
        loop {
            let done = match pieces.next() {
                Some(piece) => {
                    let (start, data, want) = piece.map_err(io)?.into_parts();
                    checks.given(start, want);
                    hasher.submit(data)
                }
                None if checks.all_hashed() => break,
                None => hasher.drain(),
            };
            for (id, data) in done {
                match checks.hashed(id, data, len) {
                    Ok(right) => right.into_iter().try_for_each(|c| keep(self, c))?,
                    Err(at) => {
                        hasher.drain();
                        pieces.wrong_guess(at);
                        break;
                    }
                }
            }
        }
        self.hasher = Some(hasher);
        if let Some(c) = checks.finish() {
            keep(self, c)?;
        }
        tracing::debug!(
            "{}: cut again along {} previous chunks; {guessed} of {} chunks found in place",
            path.display(),
            previous.len(),
            slots.len()
        );
        Ok((slots, size))
    }
}

/// Hashes chunks on all the cores while the commit's thread reads and
/// chunks (SHA-256 or the keyed hash costs more than finding boundaries).
type Hasher = Ordered<Vec<u8>, (BlobId, Vec<u8>)>;

/// Chunks hashed at once: a few MiB at most (`chunker::MAX_SIZE` each).
const HASH_DEPTH: usize = 8;

fn start_hasher(codec: &Codec) -> Result<Hasher> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let codec = codec.clone();
    Ordered::start("detafs-hash", threads, HASH_DEPTH, move |data: Vec<u8>| {
        (codec.blob_id(&data), data)
    })
    .map_err(|e| Error::io("a thread to hash chunks", e))
}

impl TreeSink for Sink<'_> {
    fn put_tree(&mut self, tree: &Tree) -> Result<BlobRef> {
        // Only what every reader accepts is written (e.g. a file dated after
        // year 9999 is refused here, not stored for readers to trip on).
        let format = self.codec.format();
        for e in &tree.entries {
            check_name(&e.name)
                .and_then(|_| check_node(&e.node))
                .and_then(|_| match e.node {
                    Node::Special { .. } if format < 2 => {
                        Err("a format 1 store cannot hold FIFOs, sockets or devices".into())
                    }
                    _ if format < 2 && e.node.atime() != e.node.mtime() => {
                        Err("a format 1 store cannot hold an atime apart from the mtime".into())
                    }
                    _ if format < 2 && e.node.link().is_some() => {
                        Err("a format 1 store cannot hold hard links".into())
                    }
                    _ => Ok(()),
                })
                .map_err(|why| {
                    Error::InvalidInput(format!(
                        "cannot commit {:?}: {why}",
                        String::from_utf8_lossy(&e.name)
                    ))
                })?;
        }
        let json = tree.encode();
        if json.len() as u64 > limits::MAX_TREE_BYTES {
            return Err(Error::InvalidInput(format!(
                "a directory of {} entries is larger than the {} MiB a tree may hold",
                tree.entries.len(),
                limits::MAX_TREE_BYTES >> 20
            )));
        }
        let id = self.codec.blob_id(&json);
        if let Some(r) = self.known(&id)? {
            return Ok(r);
        }
        let encoded = self.codec.encode_blob(BlobKind::Tree, &id, &json);
        let encoded = bytes::Bytes::from(encoded);
        let r = self.trees.add(id, encoded.clone(), json.len())?;
        self.written.put(id, r);
        self.repo.remember_tree(&r, tree.clone(), &encoded);
        Ok(r)
    }
}
