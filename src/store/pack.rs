//! Packs: many small blobs (chunks or trees) in one store object, so a commit of
//! 20,000 small files costs a few PUTs, not 20,000.
//!
//! A pack is `MAGIC` followed by blobs; each blob is one encoding byte and the
//! payload. Blobs are found through `BlobRef`s held by trees and records; a pack
//! needs no index of its own. Pack ids are random: a blob's content address is
//! its own id, and the pack is just where it lives.

use super::{Store, keys};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::limits;
use bytes::Bytes;
use std::collections::VecDeque;
use tokio::task::JoinHandle;

pub const MAGIC: &[u8; 8] = b"DTFSPAK1";

/// Encoding byte of a blob. Room for later ones (encryption) without a format break.
const RAW: u8 = 0;
const ZSTD: u8 = 1;

/// Where a blob lives: `len` bytes at `offset` of pack `pack`, decoding to bytes
/// whose SHA-256 is `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlobRef {
    pub id: ObjectId,
    pub pack: ObjectId,
    pub offset: u64,
    pub len: u32,
}

impl BlobRef {
    pub fn end(&self) -> u64 {
        self.offset + self.len as u64
    }

    /// Bytes of data in a file chunk. Format 1 stores chunks raw (one encoding
    /// byte, then the data), so readers can seek without fetching.
    pub fn data_size(&self) -> u64 {
        self.len.saturating_sub(1) as u64
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

pub fn encode(data: &[u8], compress: bool) -> Vec<u8> {
    if compress {
        let mut out = vec![ZSTD];
        out.extend(zstd::bulk::compress(data, 3).expect("zstd compress into memory"));
        if out.len() < data.len() + 1 {
            return out;
        }
    }
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(RAW);
    out.extend_from_slice(data);
    out
}

/// Checks the first bytes of a pack (`verify` reads them of every pack).
pub fn check_header(pack: &ObjectId, head: &[u8]) -> Result<()> {
    if head == MAGIC {
        return Ok(());
    }
    Err(Error::malformed(
        keys::pack(pack),
        "does not start with the pack magic DTFSPAK1",
    ))
}

/// Decodes a stored blob and checks it against its id: never hand out
/// unverified bytes. Raw blobs are returned without copying.
pub fn decode(r: &BlobRef, kind: BlobKind, encoded: Bytes) -> Result<Bytes> {
    let corrupt = |detail: String| Error::Corrupt {
        kind: kind.name(),
        id: r.id,
        pack: r.pack,
        detail,
    };
    if encoded.len() != r.len as usize {
        return Err(corrupt(format!(
            "{} bytes where its reference says {}",
            encoded.len(),
            r.len
        )));
    }
    // Chunks are raw, always: their offsets in a file follow from their
    // lengths, so every reader (cat, export, the mount) reads them alike.
    let data = match (kind, encoded.split_first()) {
        (_, Some((&RAW, _))) => encoded.slice(1..),
        (BlobKind::Tree, Some((&ZSTD, rest))) => inflate(rest, limits::tree_bound(r.len))
            .map_err(|e| corrupt(format!("cannot decompress: {e}")))?
            .into(),
        (_, Some((other, _))) => {
            return Err(corrupt(format!(
                "encoding byte {other} is not one a {} may have",
                kind.name()
            )));
        }
        (_, None) => return Err(corrupt("empty blob".into())),
    };
    if ObjectId::of(&data) != r.id {
        return Err(corrupt("content does not match its SHA-256".into()));
    }
    Ok(data)
}

/// Decompresses a zstd frame into at most `max` bytes: a small object that
/// inflates without end is refused before it takes the memory.
fn inflate(frame: &[u8], max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(frame)?
        .take(max + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "inflates beyond {max} bytes"
        )));
    }
    Ok(out)
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
/// fails only itself, not its neighbours in the run.
pub fn read_run_each(store: &Store, run: &[BlobRef], kind: BlobKind) -> Result<Vec<Result<Bytes>>> {
    let (first, last) = (run[0], run[run.len() - 1]);
    let bytes = store
        .get_range(&keys::pack(&first.pack), first.offset..last.end())?
        .ok_or(Error::Missing {
            kind: kind.name(),
            id: first.id,
            pack: first.pack,
        })?;
    Ok(run
        .iter()
        .map(|r| {
            let start = (r.offset - first.offset) as usize;
            decode(r, kind, bytes.slice(start..start + r.len as usize))
        })
        .collect())
}

/// Splits refs into runs that `read_run` can fetch at once, each at most `max_bytes`.
pub fn runs(refs: &[BlobRef], max_bytes: u64) -> Vec<&[BlobRef]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=refs.len() {
        let split = i == refs.len() || {
            let (prev, next) = (refs[i - 1], refs[i]);
            next.pack != prev.pack
                || next.offset != prev.end()
                || next.end() - refs[start].offset > max_bytes
        };
        if split {
            out.push(&refs[start..i]);
            start = i;
        }
    }
    out
}

/// Appends blobs to packs and uploads each full pack in the background.
pub struct PackWriter<'s> {
    store: &'s Store,
    target: usize,
    id: ObjectId,
    buf: Vec<u8>,
    inflight: VecDeque<JoinHandle<Result<()>>>,
    max_inflight: usize,
    written: Vec<(ObjectId, u64)>,
}

impl<'s> PackWriter<'s> {
    pub fn new(store: &'s Store, target: usize) -> Self {
        PackWriter {
            store,
            target,
            id: random_id(),
            buf: MAGIC.to_vec(),
            inflight: VecDeque::new(),
            max_inflight: 3,
            written: Vec::new(),
        }
    }

    /// Adds an encoded blob and returns where it will live.
    pub fn add(&mut self, id: ObjectId, encoded: &[u8]) -> Result<BlobRef> {
        let r = BlobRef {
            id,
            pack: self.id,
            offset: self.buf.len() as u64,
            len: encoded.len() as u32,
        };
        self.buf.extend_from_slice(encoded);
        if self.buf.len() >= self.target {
            self.seal()?;
        }
        Ok(r)
    }

    fn seal(&mut self) -> Result<()> {
        if self.buf.len() == MAGIC.len() {
            return Ok(());
        }
        let body = std::mem::replace(&mut self.buf, MAGIC.to_vec());
        self.written.push((self.id, body.len() as u64));
        let key = keys::pack(&self.id);
        self.inflight
            .push_back(self.store.spawn_put(key, Bytes::from(body)));
        self.id = random_id();
        // Bound memory: at most `max_inflight` packs are buffered for upload.
        while self.inflight.len() > self.max_inflight {
            self.wait_oldest()?;
        }
        Ok(())
    }

    fn wait_oldest(&mut self) -> Result<()> {
        if let Some(h) = self.inflight.pop_front() {
            self.store.wait(h)?;
            fail::fail_point!("pack-uploaded");
        }
        Ok(())
    }

    /// Uploads what is left and waits until every pack is durable.
    /// Returns the packs written, with their sizes.
    pub fn finish(mut self) -> Result<Vec<(ObjectId, u64)>> {
        self.seal()?;
        while !self.inflight.is_empty() {
            self.wait_oldest()?;
        }
        Ok(std::mem::take(&mut self.written))
    }
}

fn random_id() -> ObjectId {
    ObjectId::from_bytes(rand::random())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pack: u8, offset: u64, len: u32) -> BlobRef {
        BlobRef {
            id: ObjectId::of(&[pack]),
            pack: ObjectId::from_bytes([pack; 32]),
            offset,
            len,
        }
    }

    #[test]
    fn encode_decode_round_trip_and_detect_corruption() {
        for data in [&b""[..], b"hello", &[7u8; 10_000]] {
            for compress in [false, true] {
                let enc = encode(data, compress);
                let br = BlobRef {
                    id: ObjectId::of(data),
                    ..r(1, 8, enc.len() as u32)
                };
                assert_eq!(
                    decode(&br, BlobKind::Tree, enc.clone().into()).unwrap(),
                    data
                );
                // Chunks are raw only: a compressed one is refused, not served.
                assert_eq!(
                    decode(&br, BlobKind::Chunk, enc.clone().into()).is_ok(),
                    enc[0] == RAW
                );
                let mut bad = enc.clone();
                let last = bad.len() - 1;
                if last > 0 {
                    bad[last] ^= 1;
                    assert!(decode(&br, BlobKind::Tree, bad.into()).is_err());
                }
            }
        }
    }

    #[test]
    fn a_decompression_bomb_is_refused_within_its_bound() {
        let huge = vec![b' '; 64 << 20];
        let enc = encode(&huge, true);
        assert!(enc.len() < 10_000, "{}", enc.len());
        let br = BlobRef {
            id: ObjectId::of(&huge),
            ..r(1, 8, enc.len() as u32)
        };
        let err = decode(&br, BlobKind::Tree, enc.into()).unwrap_err();
        assert!(err.to_string().contains("inflates beyond"), "{err}");
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
}
