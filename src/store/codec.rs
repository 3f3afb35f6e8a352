//! How a store encodes what it holds: format 1 in the clear (chunks raw,
//! trees zstd, ids SHA-256), format 2 sealed (`seal.rs`: blobs compressed
//! when that saves space, then AES-256-GCM; ids keyed; small objects under
//! `datasets/` sealed with their key as associated data).

use super::pack::{BlobKind, BlobRef};
use super::seal::{Keys, Use};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::limits;
use bytes::Bytes;
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

    /// Whether `decode_blob` hands out chunks in buffers of their own
    /// (sealed ones are opened into one) rather than slices of the run it
    /// was given, so a cache may keep them without copying.
    pub fn decodes_into_own_buffers(&self) -> bool {
        self.is_sealed()
    }

    /// The store format it is.
    pub fn format(&self) -> u32 {
        match self {
            Codec::Plain => 1,
            Codec::Sealed(_) => 2,
        }
    }

    /// A blob's id: SHA-256 of its data, or its keyed hash.
    pub fn blob_id(&self, data: &[u8]) -> ObjectId {
        match self {
            Codec::Plain => ObjectId::of(data),
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
    pub fn encode_blob(&self, kind: BlobKind, id: &ObjectId, data: &[u8]) -> Vec<u8> {
        match self {
            // Format 1 chunks are raw, always: a chunk's data size is its
            // length minus one, which format 1 readers rely on.
            Codec::Plain => {
                let mut out = Vec::with_capacity(data.len() + 1);
                push_compressed(&mut out, data, kind == BlobKind::Tree);
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

    /// Decodes a stored blob and checks it against its reference: its
    /// length, its size, its id. Never hands out unverified bytes.
    pub fn decode_blob(&self, r: &BlobRef, kind: BlobKind, encoded: Bytes) -> Result<Bytes> {
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
        let max = match kind {
            BlobKind::Chunk => u64::from(r.size),
            BlobKind::Tree => limits::tree_bound(r.len),
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
                    .map_err(|_| {
                        corrupt("does not open with this store's key: changed or forged".into())
                    })?;
                match inner.first() {
                    Some(&RAW) => Bytes::from(inner).slice(1..),
                    Some(&ZSTD) => inflate(&inner[1..], max)
                        .map_err(|e| corrupt(format!("cannot decompress: {e}")))?
                        .into(),
                    _ => return Err(corrupt("unknown inner encoding".into())),
                }
            }
            (_, Some((other, _))) => {
                return Err(corrupt(format!(
                    "encoding byte {other} is not one a {} of this store may have",
                    kind.name()
                )));
            }
            (_, None) => return Err(corrupt("empty blob".into())),
        };
        if kind == BlobKind::Chunk && data.len() as u64 != u64::from(r.size) {
            return Err(corrupt(format!(
                "{} bytes of data where its reference says {}",
                data.len(),
                r.size
            )));
        }
        if self.blob_id(&data) != r.id {
            return Err(corrupt("content does not match its id".into()));
        }
        Ok(data)
    }

    /// A small object (`datasets/…`: `sealed_key`) as stored at `key`.
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

/// Small objects a sealed store seals: everything of its datasets, its
/// policy records, API keys and uploads.
pub fn sealed_key(key: &str) -> bool {
    key.starts_with("datasets/")
        || key.starts_with(super::keys::POLICY_RECORDS)
        || key.starts_with(crate::access::apikeys::PREFIX)
        || key.starts_with(crate::commit::upload::PREFIX)
}

fn blob_aad(kind: BlobKind, id: &ObjectId) -> Vec<u8> {
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
            pack: ObjectId::from_bytes([1; 32]),
            offset: 8,
            len: enc.len() as u32,
            size: data.len() as u32,
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
                        id: ObjectId::from_bytes([9; 32]),
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
        let id = ObjectId::of(&text);
        let mut zstd = Vec::new();
        push_compressed(&mut zstd, &text, true);
        assert_eq!(zstd[0], ZSTD);
        let r = BlobRef {
            id,
            len: zstd.len() as u32,
            size: text.len() as u32,
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
        for codec in codecs() {
            let (r, enc) = reference(&codec, BlobKind::Tree, &huge);
            assert!(enc.len() < 10_000, "{}", enc.len());
            let err = codec
                .decode_blob(&r, BlobKind::Tree, enc.into())
                .unwrap_err();
            assert!(err.to_string().contains("inflates beyond"), "{err}");
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
}
