//! Packs: many small blobs (chunks or trees) in one store object, so a commit of
//! 20,000 small files costs a few PUTs, not 20,000.
//!
//! A pack is `MAGIC` followed by blobs; each blob is one encoding byte and the
//! payload. Blobs are found through `BlobRef`s held by trees and records; a pack
//! needs no index of its own. Pack ids are random: a blob's content address is
//! its own id, and the pack is just where it lives.

use super::{Store, keys};
use crate::error::{Error, Result};
use crate::id::{BlobId, PackId};
use bytes::Bytes;
use std::collections::VecDeque;
use tokio::task::JoinHandle;

pub const MAGIC: &[u8; 8] = b"DTFSPAK1";

/// Where a blob lives: `len` bytes at `offset` of pack `pack`, decoding to
/// `size` bytes of data whose id is `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "WireBlobRef", into = "WireBlobRef")]
pub struct BlobRef {
    pub id: BlobId,
    pub pack: PackId,
    pub offset: u64,
    pub len: u32,
    /// Bytes of data it decodes to. Written only where it is not `len - 1`
    /// (a raw blob, as every format 1 chunk is), so format 1 references
    /// stay as they were; for format 1 trees it means nothing.
    pub size: u32,
}

impl BlobRef {
    pub fn end(&self) -> u64 {
        self.offset + self.len as u64
    }

    /// Bytes of data in a file chunk: a reader seeks by these without fetching.
    pub fn data_size(&self) -> u64 {
        u64::from(self.size)
    }

    /// The size a reference that does not say has: that of a raw blob.
    pub fn raw_size(len: u32) -> u32 {
        len.saturating_sub(1)
    }
}

/// `BlobRef` as JSON (records, local state): `size` only when it is not
/// that of a raw blob.
#[derive(serde::Serialize, serde::Deserialize)]
struct WireBlobRef {
    id: BlobId,
    pack: PackId,
    offset: u64,
    len: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    size: Option<u32>,
}

impl From<WireBlobRef> for BlobRef {
    fn from(w: WireBlobRef) -> BlobRef {
        BlobRef {
            id: w.id,
            pack: w.pack,
            offset: w.offset,
            len: w.len,
            size: w.size.unwrap_or(BlobRef::raw_size(w.len)),
        }
    }
}

impl From<BlobRef> for WireBlobRef {
    fn from(r: BlobRef) -> WireBlobRef {
        WireBlobRef {
            id: r.id,
            pack: r.pack,
            offset: r.offset,
            len: r.len,
            size: (r.size != BlobRef::raw_size(r.len)).then_some(r.size),
        }
    }
}

/// What a blob holds, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    Chunk,
    Tree,
}

impl BlobKind {
    pub fn name(self) -> &'static str {
        match self {
            BlobKind::Chunk => "chunk",
            BlobKind::Tree => "tree",
        }
    }
}

/// Checks the first bytes of a pack (`verify` reads them of every pack).
pub fn check_header(pack: &PackId, head: &[u8]) -> Result<()> {
    if head == MAGIC {
        return Ok(());
    }
    Err(Error::malformed(
        keys::pack(pack),
        "does not start with the pack magic DTFSPAK1",
    ))
}

/// Fetches and verifies one blob.
pub fn read_blob(store: &Store, r: &BlobRef, kind: BlobKind) -> Result<Bytes> {
    let mut out = read_run(store, std::slice::from_ref(r), kind)?;
    Ok(out.pop().expect("one blob"))
}

/// Fetches blobs that lie back to back in one pack with a single range read.
pub fn read_run(store: &Store, run: &[BlobRef], kind: BlobKind) -> Result<Vec<Bytes>> {
    read_run_each(store, run, kind)?.into_iter().collect()
}

/// Like `read_run`, with each blob verified on its own: a corrupt blob
/// fails only itself, not its neighbours in the run. The blobs share one
/// buffer (`Codec::decode_run`).
pub fn read_run_each(store: &Store, run: &[BlobRef], kind: BlobKind) -> Result<Vec<Result<Bytes>>> {
    let codec = store.codec()?;
    Ok(codec.decode_run(run, kind, read_run_bytes(store, run, kind)?))
}

/// The blobs of a run as their pack holds them, not yet decoded.
pub fn read_run_stored(store: &Store, run: &[BlobRef], kind: BlobKind) -> Result<Vec<Bytes>> {
    let bytes = read_run_bytes(store, run, kind)?;
    Ok(run.iter().map(|r| bytes.slice(span(&run[0], r))).collect())
}

/// A run's bytes as its pack holds them: one read from its first blob to
/// the end of its last.
pub fn read_run_bytes(store: &Store, run: &[BlobRef], kind: BlobKind) -> Result<Bytes> {
    let (first, last) = (run[0], run[run.len() - 1]);
    store
        .get_range(&keys::pack(&first.pack), first.offset..last.end())?
        .ok_or(Error::Missing {
            kind: kind.name(),
            id: first.id,
            pack: first.pack,
        })
}

/// Where blob `r` lies in the bytes of a run that starts with `first`.
pub fn span(first: &BlobRef, r: &BlobRef) -> std::ops::Range<usize> {
    let start = crate::limits::to_usize(r.offset - first.offset);
    start..start + r.len as usize
}

/// Splits refs into runs that `read_run` can fetch at once, each at most `max_bytes`.
pub fn runs(refs: &[BlobRef], max_bytes: u64) -> Vec<&[BlobRef]> {
    let mut out = Vec::new();
    let mut start = 0;
    // What the run decodes to is bounded too: well-compressed chunks would
    // otherwise decode to many times `max_bytes`.
    let mut size = 0;
    for (i, next) in refs.iter().enumerate() {
        let split = i > start && {
            let prev = refs[i - 1];
            next.pack != prev.pack
                || next.offset != prev.end()
                || next.end() - refs[start].offset > max_bytes
                || size + next.data_size() > max_bytes
        };
        if split {
            out.push(&refs[start..i]);
            start = i;
            size = 0;
        }
        size += next.data_size();
    }
    if start < refs.len() {
        out.push(&refs[start..]);
    }
    out
}

/// Appends blobs to packs and uploads each full pack in the background.
/// A pack is kept as the list of its blobs, uploaded as they are: no blob
/// is copied into a pack buffer (on this machine kind fresh memory costs
/// more than the copy).
pub struct PackWriter<'s> {
    store: &'s Store,
    target: usize,
    id: PackId,
    blobs: Vec<Bytes>,
    len: usize,
    /// Where the blobs of the pack being filled will live.
    refs: Vec<BlobRef>,
    inflight: VecDeque<(JoinHandle<Result<()>>, Vec<BlobRef>)>,
    max_inflight: usize,
    written: Vec<(PackId, u64)>,
    /// Told the blobs of each pack once it is durable (`on_durable`).
    durable: Option<OnDurable<'s>>,
}

/// What a `PackWriter` tells of each pack once it is durable: its blobs.
pub type OnDurable<'s> = Box<dyn FnMut(&[BlobRef]) -> Result<()> + Send + 's>;

impl<'s> PackWriter<'s> {
    pub fn new(store: &'s Store, target: usize) -> Self {
        PackWriter {
            store,
            target,
            id: random_id(),
            blobs: vec![Bytes::from_static(MAGIC)],
            len: MAGIC.len(),
            refs: Vec::new(),
            inflight: VecDeque::new(),
            max_inflight: 3,
            written: Vec::new(),
            durable: None,
        }
    }

    /// Calls `f` with the blobs of each pack as soon as it is durable.
    pub fn on_durable(mut self, f: OnDurable<'s>) -> Self {
        self.durable = Some(f);
        self
    }

    /// Adds a blob of `size` bytes of data, encoded, and returns where it
    /// will live.
    pub fn add(&mut self, id: BlobId, encoded: Bytes, size: usize) -> Result<BlobRef> {
        // A blob is at most a chunk or a tree (`limits`), far below 4 GiB.
        let too_big =
            || Error::InvalidInput(format!("a blob of {size} bytes is too large to store"));
        let r = BlobRef {
            id,
            pack: self.id,
            offset: self.len as u64,
            len: u32::try_from(encoded.len()).map_err(|_| too_big())?,
            size: u32::try_from(size).map_err(|_| too_big())?,
        };
        self.len += encoded.len();
        self.blobs.push(encoded);
        self.refs.push(r);
        if self.len >= self.target {
            self.seal()?;
        }
        // Uploads that ended meanwhile are told at once.
        while self.inflight.front().is_some_and(|(h, _)| h.is_finished()) {
            self.wait_oldest()?;
        }
        Ok(r)
    }

    fn seal(&mut self) -> Result<()> {
        if self.len == MAGIC.len() {
            return Ok(());
        }
        let blobs = std::mem::replace(&mut self.blobs, vec![Bytes::from_static(MAGIC)]);
        self.written.push((self.id, self.len as u64));
        self.len = MAGIC.len();
        let key = keys::pack(&self.id);
        let refs = std::mem::take(&mut self.refs);
        self.inflight
            .push_back((self.store.spawn_put(key, blobs.into_iter().collect()), refs));
        self.id = random_id();
        // Bound memory: at most `max_inflight` packs are buffered for upload.
        while self.inflight.len() > self.max_inflight {
            self.wait_oldest()?;
        }
        Ok(())
    }

    fn wait_oldest(&mut self) -> Result<()> {
        if let Some((h, refs)) = self.inflight.pop_front() {
            self.store.wait(h)?;
            if let Some(tell) = &mut self.durable {
                tell(&refs)?;
            }
            crate::hold::hold("pack-uploaded");
        }
        Ok(())
    }

    /// Uploads what is left and waits until every pack is durable.
    /// Returns the packs written, with their sizes.
    pub fn finish(mut self) -> Result<Vec<(PackId, u64)>> {
        self.seal()?;
        while !self.inflight.is_empty() {
            self.wait_oldest()?;
        }
        Ok(std::mem::take(&mut self.written))
    }
}

fn random_id() -> PackId {
    PackId::random()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pack: u8, offset: u64, len: u32) -> BlobRef {
        BlobRef {
            id: BlobId::of(&[pack]),
            pack: PackId::from_bytes([pack; 32]),
            offset,
            len,
            size: BlobRef::raw_size(len),
        }
    }

    #[test]
    fn runs_split_on_pack_gap_and_size() {
        let refs = [
            r(1, 8, 10),
            r(1, 18, 10),
            r(1, 40, 5),
            r(2, 8, 3),
            r(2, 11, 3),
        ];
        let lens: Vec<usize> = runs(&refs, 1000).iter().map(|x| x.len()).collect();
        assert_eq!(lens, vec![2, 1, 2]);
        let lens: Vec<usize> = runs(&refs, 15).iter().map(|x| x.len()).collect();
        assert_eq!(lens, vec![1, 1, 1, 2]);
    }

    #[test]
    fn runs_bound_what_they_decode_to() {
        // Back to back, 10 stored bytes each, each decoding to 400.
        let refs: Vec<BlobRef> = (0..6)
            .map(|i| BlobRef {
                size: 400,
                ..r(1, 10 * i, 10)
            })
            .collect();
        let lens: Vec<usize> = runs(&refs, 1000).iter().map(|x| x.len()).collect();
        assert_eq!(lens, vec![2, 2, 2]);
        // A blob larger than the bound is a run of its own.
        let lens: Vec<usize> = runs(&refs, 100).iter().map(|x| x.len()).collect();
        assert_eq!(lens, vec![1; 6]);
    }
}
