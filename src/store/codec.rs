//! How a store encodes what it holds: format 1 in the clear (chunks raw,
//! trees zstd, ids SHA-256), format 2 sealed (`seal.rs`: blobs compressed
//! when that saves space, then AES-256-GCM; ids keyed; small objects under
//! `datasets/` sealed with their key as associated data).

use super::pack::{self, BlobKind, BlobRef};
use super::seal::{Keys, Use};
use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::limits;
use bytes::Bytes;
use std::ops::Range;
use std::sync::Arc;

/// Encoding bytes of a blob in a pack.
const RAW: u8 = 0;
const ZSTD: u8 = 1;
const SEALED: u8 = 2;

#[derive(Clone)]
pub enum Codec {
    Plain,
    Sealed(Arc<Keys>),
}

impl Codec {
    pub fn is_sealed(&self) -> bool {
        matches!(self, Codec::Sealed(_))
    }

    /// The store format it is.
    pub fn format(&self) -> u32 {
        match self {
            Codec::Plain => 1,
            Codec::Sealed(_) => 2,
        }
    }

    /// A blob's id: SHA-256 of its data, or its keyed hash.
    pub fn blob_id(&self, data: &[u8]) -> BlobId {
        match self {
            Codec::Plain => BlobId::of(data),
            Codec::Sealed(k) => k.blob_id(data),
        }
    }

    /// The content-defined chunker's gear seed (0: the published table).
    pub fn chunker_seed(&self) -> u64 {
        match self {
            Codec::Plain => 0,
            Codec::Sealed(k) => k.chunker_seed(),
        }
    }

    /// A path kept in local state (the index's stat cache): itself, or its
    /// keyed hash, so no file name of a sealed store is at rest in the clear.
    pub fn local_name(&self, path: &[u8]) -> Vec<u8> {
        match self {
            Codec::Plain => path.to_vec(),
            Codec::Sealed(k) => k.local_name(path).to_vec(),
        }
    }

    /// A blob as stored in a pack.
    pub fn encode_blob(&self, kind: BlobKind, id: &BlobId, data: &[u8]) -> Vec<u8> {
        match self {
            // Format 1 chunks are raw, always: a chunk's data size is its
            // length minus one, which format 1 readers rely on.
            Codec::Plain => {
                let mut out = Vec::with_capacity(data.len() + 1);
                push_compressed(&mut out, data, kind == BlobKind::Tree);
                // Every reader must accept what is written: a tree that
                // compresses beyond what a reader inflates is stored raw.
                if kind == BlobKind::Tree
                    && data.len() as u64 > self.tree_bound(out.len(), data.len())
                {
                    out.clear();
                    push_compressed(&mut out, data, false);
                }
                out
            }
            Codec::Sealed(k) => {
                let mut out = Vec::with_capacity(2 + super::seal::OVERHEAD + data.len());
                out.push(SEALED);
                out.extend_from_slice(&[0; super::seal::NONCE]);
                push_compressed(&mut out, data, true);
                k.seal_in_place(Use::Blob, &blob_aad(kind, id), &mut out, 1);
                out
            }
        }
    }

    /// How many bytes a tree stored in `len` bytes whose reference says it
    /// holds `size` may inflate to: the one bound the writer
    /// (`encode_blob`) and every reader (`decode_blob`) apply. A sealed
    /// store's references are authenticated, so the size they record is
    /// the bound; a plaintext store's may be forged, so its trees inflate
    /// at most `limits::MAX_TREE_RATIO` times.
    fn tree_bound(&self, len: usize, size: usize) -> u64 {
        let ratio = limits::tree_ratio_bound(len.try_into().unwrap_or(u32::MAX));
        match self {
            Codec::Plain => ratio,
            Codec::Sealed(_) => ratio.max((size as u64).min(limits::MAX_TREE_BYTES)),
        }
    }

    /// Decodes a stored blob and checks it against its reference: its
    /// length, its size, its id. Never hands out unverified bytes.
    pub fn decode_blob(&self, r: &BlobRef, kind: BlobKind, encoded: Bytes) -> Result<Bytes> {
        if kind == BlobKind::Chunk && self.is_sealed() {
            let mut one = self.decode_run(std::slice::from_ref(r), kind, encoded);
            return one.pop().expect("one blob, one result");
        }
        let corrupt = |detail: String| corrupt(kind, r, detail);
        if encoded.len() != r.len as usize {
            return Err(corrupt(format!(
                "{} bytes where its reference says {}",
                encoded.len(),
                r.len
            )));
        }
        let max = match kind {
            BlobKind::Chunk => u64::from(r.size),
            BlobKind::Tree => self.tree_bound(r.len as usize, r.size as usize),
        };
        let data = match (self, encoded.split_first()) {
            (Codec::Plain, Some((&RAW, _)))
                if kind == BlobKind::Tree || u64::from(r.size) + 1 == u64::from(r.len) =>
            {
                encoded.slice(1..)
            }
            (Codec::Plain, Some((&ZSTD, rest))) if kind == BlobKind::Tree => inflate(rest, max)
                .map_err(|e| corrupt(format!("cannot decompress: {e}")))?
                .into(),
            (Codec::Sealed(k), Some((&SEALED, rest))) => {
                let inner = k
                    .open(Use::Blob, &blob_aad(kind, &r.id), rest)
                    .map_err(|_| corrupt(FORGED.into()))?;
                match inner.first() {
                    Some(&RAW) => Bytes::from(inner).slice(1..),
                    Some(&ZSTD) => inflate(&inner[1..], max)
                        .map_err(|e| corrupt(format!("cannot decompress: {e}")))?
                        .into(),
                    _ => return Err(corrupt(UNKNOWN_INNER.into())),
                }
            }
            (_, Some((&other, _))) => return Err(corrupt(unexpected(other, kind))),
            (_, None) => return Err(corrupt("empty blob".into())),
        };
        self.verify(r, kind, &data)?;
        Ok(data)
    }

    /// Decodes the blobs of a run read at once (`stored`: its pack's bytes
    /// from the first blob to the end of the last), each checked on its own
    /// as `decode_blob` does. No chunk costs an allocation or a copy of its
    /// own: in format 1 the chunks are where the read put them; in format 2
    /// each is opened where it was read, and those compressed are inflated
    /// into one second buffer. So whoever keeps a run's chunks (`ChunkCache`)
    /// frees its memory whole.
    pub fn decode_run(&self, run: &[BlobRef], kind: BlobKind, stored: Bytes) -> Vec<Result<Bytes>> {
        let first = run[0];
        let whole = run[run.len() - 1].end() - first.offset;
        if stored.len() as u64 != whole {
            let detail = format!("{} bytes where its reference says {whole}", stored.len());
            return run
                .iter()
                .map(|r| Err(corrupt(kind, r, detail.clone())))
                .collect();
        }
        let (Codec::Sealed(k), BlobKind::Chunk) = (self, kind) else {
            return run
                .iter()
                .map(|r| self.decode_blob(r, kind, stored.slice(pack::span(&first, r))))
                .collect();
        };
        let mut sealed = Vec::from(stored);
        let opened: Vec<Result<(u8, Range<usize>)>> = run
            .iter()
            .map(|r| {
                let span = pack::span(&first, r);
                let inner = open_chunk(k, r, &mut sealed[span.clone()])?;
                Ok((
                    inner.0,
                    span.start + inner.1.start..span.start + inner.1.end,
                ))
            })
            .collect();
        // Runs are bounded by what they decode to (`pack::runs`).
        let to_inflate = run
            .iter()
            .zip(&opened)
            .filter(|(_, o)| matches!(o, Ok((ZSTD, _))))
            .map(|(r, _)| r.size as usize)
            .sum();
        let mut inflated = super::recycle::take(to_inflate);
        inflated.resize(to_inflate, 0);
        let mut at = 0;
        let placed: Vec<Result<(bool, Range<usize>)>> = run
            .iter()
            .zip(opened)
            .map(|(r, opened)| {
                let (encoding, data) = opened?;
                let placed = match encoding {
                    ZSTD => {
                        let span = at..at + r.size as usize;
                        at = span.end;
                        let len = inflate_into(&sealed[data], &mut inflated[span.clone()])
                            .map_err(|e| corrupt(kind, r, format!("cannot decompress: {e}")))?;
                        (true, span.start..span.start + len)
                    }
                    _ => (false, data),
                };
                let bytes = match placed.0 {
                    true => &inflated[placed.1.clone()],
                    false => &sealed[placed.1.clone()],
                };
                self.verify(r, kind, bytes)?;
                Ok(placed)
            })
            .collect();
        let (sealed, inflated) = (
            super::recycle::shared(sealed),
            super::recycle::shared(inflated),
        );
        placed
            .into_iter()
            .map(|p| {
                p.map(|(z, range)| match z {
                    true => inflated.slice(range),
                    false => sealed.slice(range),
                })
            })
            .collect()
    }

    /// Checks decoded `data` against its reference: a chunk's size, any
    /// blob's id.
    fn verify(&self, r: &BlobRef, kind: BlobKind, data: &[u8]) -> Result<()> {
        if kind == BlobKind::Chunk && data.len() as u64 != u64::from(r.size) {
            return Err(corrupt(kind, r, size_differs(data.len(), r)));
        }
        if self.blob_id(data) != r.id {
            return Err(corrupt(kind, r, "content does not match its id".into()));
        }
        Ok(())
    }

    /// A small object (`datasets/…`: `keys::sealed`) as stored at `key`.
    pub fn seal_object(&self, key: &str, plain: Bytes) -> Bytes {
        match self {
            Codec::Sealed(k) => {
                let mut out = OBJECT_MAGIC.to_vec();
                out.extend(k.seal(Use::Meta, key.as_bytes(), &plain));
                out.into()
            }
            Codec::Plain => plain,
        }
    }

    /// What `seal_object` made of the object at `key`, opened and checked.
    pub fn open_object(&self, key: &str, stored: Bytes) -> Result<Bytes> {
        match self {
            Codec::Sealed(k) => {
                let forged = || {
                    Error::malformed(
                        key,
                        "does not open with this store's key: changed, forged or moved",
                    )
                };
                let body = stored.strip_prefix(OBJECT_MAGIC).ok_or_else(forged)?;
                Ok(k.open(Use::Meta, key.as_bytes(), body)
                    .map_err(|_| forged())?
                    .into())
            }
            Codec::Plain => Ok(stored),
        }
    }
}

/// Starts every sealed small object.
const OBJECT_MAGIC: &[u8] = b"DTFSOBJ2";

/// Opens a sealed chunk where it lies: its inner encoding (raw or zstd)
/// and where in `sealed` its bytes after that are.
fn open_chunk(k: &Keys, r: &BlobRef, sealed: &mut [u8]) -> Result<(u8, Range<usize>)> {
    let kind = BlobKind::Chunk;
    let corrupt = |detail: String| corrupt(kind, r, detail);
    let inner = match sealed.split_first_mut() {
        Some((&mut SEALED, rest)) => k
            .open_in_place(Use::Blob, &blob_aad(kind, &r.id), rest)
            .map_err(|_| corrupt(FORGED.into()))?,
        Some((&mut other, _)) => return Err(corrupt(unexpected(other, kind))),
        None => return Err(corrupt("empty blob".into())),
    };
    // After the outer encoding byte.
    match sealed.get(1 + inner.start) {
        Some(&e @ (RAW | ZSTD)) => Ok((e, 2 + inner.start..1 + inner.end)),
        _ => Err(corrupt(UNKNOWN_INNER.into())),
    }
}

/// Decompresses a zstd frame into `out`; a frame that would not fit is
/// refused before it is written out.
fn inflate_into(frame: &[u8], out: &mut [u8]) -> std::io::Result<usize> {
    DECOMPRESSOR.with_borrow_mut(|d| {
        let d = match d {
            Some(d) => d,
            None => d.insert(zstd::bulk::Decompressor::new()?),
        };
        d.decompress_to_buffer(frame, out)
    })
}

const FORGED: &str = "does not open with this store's key: changed or forged";
const UNKNOWN_INNER: &str = "unknown inner encoding";

fn corrupt(kind: BlobKind, r: &BlobRef, detail: String) -> Error {
    Error::Corrupt {
        kind: kind.name(),
        id: r.id,
        pack: r.pack,
        detail,
    }
}

fn unexpected(byte: u8, kind: BlobKind) -> String {
    format!(
        "encoding byte {byte} is not one a {} of this store may have",
        kind.name()
    )
}

fn size_differs(len: usize, r: &BlobRef) -> String {
    format!("{len} bytes of data where its reference says {}", r.size)
}

fn blob_aad(kind: BlobKind, id: &BlobId) -> Vec<u8> {
    let mut aad = format!("detafs 2 {}", kind.name()).into_bytes();
    aad.extend_from_slice(id.as_bytes());
    aad
}

/// zstd's fastest standard level: on this project's benchmark data it also
/// compresses best at 64 KiB chunks (41% vs 43% for level 3, at 1.7x the
/// speed), and a commit hashes at ~1.5 GB/s, so compression must keep up.
const ZSTD_LEVEL: i32 = 1;

thread_local! {
    /// One compression context per thread: making one per chunk cost more
    /// than compressing a random chunk.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// One decompression context per thread, likewise.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Appends `data` with its encoding byte to `out`: zstd when asked and
/// smaller, else raw.
fn push_compressed(out: &mut Vec<u8>, data: &[u8], compress: bool) {
    if compress && !data.is_empty() {
        let shrunk = COMPRESSOR.with_borrow_mut(|c| {
            SCRATCH.with_borrow_mut(|scratch| {
                let c = c.get_or_insert_with(|| {
                    zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("zstd context")
                });
                let shrunk = worth_trying(c, scratch, data) && {
                    scratch.clear();
                    // Room for less than the data: a frame that would not
                    // save a byte fails to fit, and zstd stops early.
                    scratch.reserve(data.len() - 1);
                    c.compress_to_buffer(data, &mut *scratch).is_ok() && scratch.len() < data.len()
                };
                if shrunk {
                    out.push(ZSTD);
                    out.extend_from_slice(scratch);
                }
                // A huge tree's scratch is not kept for the thread's life.
                if scratch.capacity() > 4 << 20 {
                    *scratch = Vec::new();
                }
                shrunk
            })
        });
        if shrunk {
            return;
        }
    }
    out.push(RAW);
    out.extend_from_slice(data);
}

/// Pieces of a large blob compressed first to tell whether the whole is
/// worth compressing: `SAMPLE_PIECES` of `SAMPLE_PIECE` bytes spread over it.
const SAMPLE_PIECE: usize = 512;
const SAMPLE_PIECES: usize = 16;

/// Whether `data` may compress: a blob of at least four times the sample
/// whose sample does not shrink by 1/32 (random bytes, or bytes compressed
/// already: images, Parquet pages, archives) is not tried as a whole, which
/// costs as much as compressing it. Deterministic: the same blob is always
/// encoded alike.
fn worth_trying(
    c: &mut zstd::bulk::Compressor<'static>,
    scratch: &mut Vec<u8>,
    data: &[u8],
) -> bool {
    let sample_len = SAMPLE_PIECE * SAMPLE_PIECES;
    if data.len() < 4 * sample_len {
        return true;
    }
    let step = data.len() / SAMPLE_PIECES;
    let mut sample = Vec::with_capacity(sample_len);
    for i in 0..SAMPLE_PIECES {
        sample.extend_from_slice(&data[i * step..i * step + SAMPLE_PIECE]);
    }
    scratch.clear();
    scratch.reserve(sample_len - sample_len / 32);
    c.compress_to_buffer(&sample, &mut *scratch).is_ok()
        && scratch.len() < sample_len - sample_len / 32
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::seal::MasterKey;

    fn codecs() -> [Codec; 2] {
        [
            Codec::Plain,
            Codec::Sealed(Arc::new(Keys::derive(&MasterKey::random(), "store"))),
        ]
    }

    fn reference(codec: &Codec, kind: BlobKind, data: &[u8]) -> (BlobRef, Vec<u8>) {
        let id = codec.blob_id(data);
        let enc = codec.encode_blob(kind, &id, data);
        let r = BlobRef {
            id,
            pack: crate::id::PackId::from_bytes([1; 32]),
            offset: 8,
            len: u32::try_from(enc.len()).unwrap(),
            size: u32::try_from(data.len()).unwrap(),
        };
        (r, enc)
    }

    #[test]
    fn blobs_round_trip_and_every_changed_byte_is_detected() {
        for codec in codecs() {
            for data in [&b"hello"[..], &[7u8; 10_000], &rand::random::<[u8; 300]>()] {
                for kind in [BlobKind::Chunk, BlobKind::Tree] {
                    let (r, enc) = reference(&codec, kind, data);
                    assert_eq!(
                        codec.decode_blob(&r, kind, enc.clone().into()).unwrap(),
                        data
                    );
                    for i in 0..enc.len() {
                        let mut bad = enc.clone();
                        bad[i] ^= 0x40;
                        assert!(codec.decode_blob(&r, kind, bad.into()).is_err(), "byte {i}");
                    }
                    // Under another id or kind it is not the same blob.
                    let other = BlobRef {
                        id: BlobId::from_bytes([9; 32]),
                        ..r
                    };
                    assert!(codec.decode_blob(&other, kind, enc.clone().into()).is_err());
                }
            }
        }
    }

    #[test]
    fn format_1_chunks_are_raw_and_sealed_ones_compressed_when_that_saves() {
        let text = b"date,city,mm\n".repeat(2000);
        let (plain, enc) = reference(&Codec::Plain, BlobKind::Chunk, &text);
        assert_eq!(enc.len(), text.len() + 1);
        assert_eq!(plain.size, plain.len - 1);
        let sealed = &codecs()[1];
        let (r, enc) = reference(sealed, BlobKind::Chunk, &text);
        assert!(enc.len() < text.len() / 10, "{}", enc.len());
        assert_eq!(
            sealed.decode_blob(&r, BlobKind::Chunk, enc.into()).unwrap(),
            &text[..]
        );
        // Random data is stored as it is (plus the seal).
        for len in [4096, 256 << 10] {
            let noise: Vec<u8> = (0..len).map(|_| rand::random::<u8>()).collect();
            let (_, enc) = reference(sealed, BlobKind::Chunk, &noise);
            assert_eq!(enc.len(), noise.len() + 2 + crate::store::seal::OVERHEAD);
        }
        // A large chunk is compressed when its sample says it may shrink:
        // text, and text with noise between (the sample sees both).
        let mut mixed = text.clone();
        mixed.extend((0..text.len()).map(|_| rand::random::<u8>()));
        for data in [&text.repeat(8), &mixed] {
            let (r, enc) = reference(sealed, BlobKind::Chunk, data);
            assert!(enc.len() < data.len() * 3 / 4, "{}", enc.len());
            assert_eq!(
                sealed.decode_blob(&r, BlobKind::Chunk, enc.into()).unwrap(),
                data[..]
            );
        }
        // A compressed chunk in a format 1 store is refused, not served.
        let id = BlobId::of(&text);
        let mut zstd = Vec::new();
        push_compressed(&mut zstd, &text, true);
        assert_eq!(zstd[0], ZSTD);
        let r = BlobRef {
            id,
            len: u32::try_from(zstd.len()).unwrap(),
            size: u32::try_from(text.len()).unwrap(),
            ..plain
        };
        assert!(
            Codec::Plain
                .decode_blob(&r, BlobKind::Chunk, zstd.into())
                .is_err()
        );
        // A size no reference can hold (a hostile local row) is refused, not overflowed.
        let (r, enc) = reference(&Codec::Plain, BlobKind::Chunk, &text);
        let huge = BlobRef {
            size: u32::MAX,
            ..r
        };
        assert!(
            Codec::Plain
                .decode_blob(&huge, BlobKind::Chunk, enc.into())
                .is_err()
        );
    }

    #[test]
    fn a_decompression_bomb_is_refused_within_its_bound() {
        let huge = vec![b' '; 64 << 20];
        // A plaintext store's writer stores such a tree raw; a forger
        // compresses it by hand.
        let mut enc = vec![ZSTD];
        enc.extend(zstd::bulk::compress(&huge, 1).unwrap());
        let r = BlobRef {
            id: BlobId::of(&huge),
            pack: crate::id::PackId::from_bytes([1; 32]),
            offset: 8,
            len: u32::try_from(enc.len()).unwrap(),
            size: u32::try_from(huge.len()).unwrap(),
        };
        let err = Codec::Plain
            .decode_blob(&r, BlobKind::Tree, enc.into())
            .unwrap_err();
        assert!(err.to_string().contains("inflates beyond"), "{err}");
        // A sealed reference that says less than the tree holds.
        let sealed = &codecs()[1];
        let (r, enc) = reference(sealed, BlobKind::Tree, &huge);
        let lying = BlobRef { size: 1000, ..r };
        let err = sealed
            .decode_blob(&lying, BlobKind::Tree, enc.into())
            .unwrap_err();
        assert!(err.to_string().contains("inflates beyond"), "{err}");
        for codec in codecs() {
            // A chunk inflates to no more than its reference's size.
            let small = vec![b' '; 200_000];
            let (r, enc) = reference(&codec, BlobKind::Chunk, &small);
            let lying = BlobRef { size: 1000, ..r };
            assert!(
                codec
                    .decode_blob(&lying, BlobKind::Chunk, enc.into())
                    .is_err()
            );
        }
    }

    #[test]
    fn sealed_objects_are_bound_to_their_key() {
        let sealed = &codecs()[1];
        let stored = sealed.seal_object("datasets/a/records/1.json", Bytes::from_static(b"{}"));
        assert!(!stored.windows(2).any(|w| w == b"{}"));
        assert_eq!(
            sealed
                .open_object("datasets/a/records/1.json", stored.clone())
                .unwrap(),
            &b"{}"[..]
        );
        assert!(
            sealed
                .open_object("datasets/a/records/2.json", stored)
                .is_err()
        );
    }

    /// A run of chunks back to back as a pack holds them.
    fn run_of(codec: &Codec, chunks: &[Vec<u8>]) -> (Vec<BlobRef>, Vec<u8>) {
        let (mut refs, mut stored) = (Vec::new(), Vec::new());
        for data in chunks {
            let (r, enc) = reference(codec, BlobKind::Chunk, data);
            refs.push(BlobRef {
                offset: 8 + stored.len() as u64,
                ..r
            });
            stored.extend(enc);
        }
        (refs, stored)
    }

    #[test]
    fn a_run_decodes_into_one_buffer_and_a_bad_chunk_fails_alone() {
        let chunks = vec![
            b"date,city,mm\n".repeat(500),
            (0..5000).map(|_| rand::random::<u8>()).collect(),
            b"x".to_vec(),
            vec![0; 70_000],
        ];
        for codec in codecs() {
            let (refs, stored) = run_of(&codec, &chunks);
            let stored = Bytes::from(stored);
            let out = codec.decode_run(&refs, BlobKind::Chunk, stored.clone());
            let out: Vec<Bytes> = out.into_iter().map(Result::unwrap).collect();
            assert_eq!(out, chunks);
            // No chunk has a buffer of its own (`ChunkCache` frees a run's
            // memory whole): raw ones are where the read put them, after
            // their encoding byte (and seal), ...
            let ptr = |b: &Bytes| b.as_ptr() as usize;
            let gap = match codec.is_sealed() {
                true => 2 + crate::store::seal::OVERHEAD,
                false => 1,
            };
            assert_eq!(ptr(&out[2]), ptr(&out[1]) + out[1].len() + gap);
            // ... and sealed ones that were compressed are inflated back to
            // back into one buffer.
            if codec.is_sealed() {
                assert_eq!(ptr(&out[3]), ptr(&out[0]) + out[0].len());
            }
            // A changed byte fails its chunk only.
            let mut bad = stored.to_vec();
            bad[pack::span(&refs[0], &refs[1]).start + 20] ^= 1;
            let out = codec.decode_run(&refs, BlobKind::Chunk, bad.into());
            let failed: Vec<bool> = out.iter().map(Result::is_err).collect();
            assert_eq!(failed, [false, true, false, false]);
            // Bytes missing at the end: refused, nothing sliced out of bounds.
            let short = stored[..stored.len() - 1].to_vec();
            let out = codec.decode_run(&refs, BlobKind::Chunk, short.into());
            assert!(out.iter().all(Result::is_err));
        }
    }

    #[test]
    fn a_sealed_chunk_whose_size_is_wrong_is_refused() {
        let sealed = &codecs()[1];
        for data in [
            b"date,city,mm\n".repeat(500),
            vec![5; 3000],
            b"raw?".to_vec(),
        ] {
            let (r, enc) = reference(sealed, BlobKind::Chunk, &data);
            for size in [r.size - 1, r.size + 1, 1, 256 << 10] {
                let wrong = BlobRef { size, ..r };
                let err = sealed
                    .decode_blob(&wrong, BlobKind::Chunk, enc.clone().into())
                    .unwrap_err();
                assert!(matches!(err, Error::Corrupt { .. }), "{err}");
            }
        }
    }
}
