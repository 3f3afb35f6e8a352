//! Format 2's cryptography: the store's master key, the subkeys derived
//! from it, and sealing (AES-256-GCM, aws-lc-rs's: about twice the speed of
//! the portable one here) with each object's place as associated data. Object names stay meaningful (the commit protocol
//! needs them); what they hold is hidden and authenticated.
//!
//! Key hierarchy (docs/format.md): a random 256-bit master key; HKDF-SHA256
//! over it, salted with the store id, gives one subkey per use: `id` (the
//! HMAC-SHA256 key naming blobs), `blob` (sealing chunks and trees), `meta`
//! (sealing records, tags and dataset objects), `chunker` (the gear seed of
//! the content-defined chunker), `local` (names in the local index).

use crate::id::BlobId;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::ops::Range;
use zeroize::Zeroizing;

/// Bytes of a nonce and of a tag: what sealing adds to a message.
pub const NONCE: usize = 12;
pub const TAG: usize = 16;
pub const OVERHEAD: usize = NONCE + TAG;
// The bound readers check (`limits`) is what sealing adds, and no less.
const _: () = assert!(crate::limits::BLOB_OVERHEAD == 2 + OVERHEAD as u64);

/// A sealed object failed to open: wrong key, or changed by someone
/// without it.
#[derive(Debug)]
pub struct Forged;

/// The master key: never stored in the clear, wrapped once per key slot.
pub struct MasterKey(Zeroizing<[u8; 32]>);

impl MasterKey {
    pub fn random() -> MasterKey {
        MasterKey(Zeroizing::new(rand::random()))
    }

    pub fn from_bytes(bytes: [u8; 32]) -> MasterKey {
        MasterKey(Zeroizing::new(bytes))
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// What the subkeys are for; each names its HKDF info string.
#[derive(Clone, Copy)]
pub enum Use {
    Blob,
    Meta,
}

/// The subkeys of an open format 2 store.
pub struct Keys {
    id: Zeroizing<[u8; 32]>,
    local: Zeroizing<[u8; 32]>,
    blob: LessSafeKey,
    meta: LessSafeKey,
    chunker_seed: u64,
}

fn derive(master: &MasterKey, store_id: &str, purpose: &str) -> Zeroizing<[u8; 32]> {
    let hk = hkdf::Hkdf::<Sha256>::new(Some(store_id.as_bytes()), master.as_bytes());
    let mut out = Zeroizing::new([0u8; 32]);
    hk.expand(format!("detafs 2 {purpose}").as_bytes(), &mut out[..])
        .expect("32 bytes is a valid HKDF-SHA256 length");
    out
}

fn cipher(key: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).expect("32-byte key"))
}

/// Seals `buf[at + NONCE..]` in place: a fresh random nonce into
/// `buf[at..at + NONCE]`, the tag appended.
fn seal_tail(key: &LessSafeKey, aad: &[u8], buf: &mut Vec<u8>, at: usize) {
    let nonce: [u8; NONCE] = rand::random();
    buf[at..at + NONCE].copy_from_slice(&nonce);
    let tag = key
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut buf[at + NONCE..],
        )
        .expect("AES-GCM seals any message detafs makes");
    buf.extend_from_slice(tag.as_ref());
}

/// Opens `nonce ‖ ciphertext ‖ tag` into a new buffer.
fn open_with(key: &LessSafeKey, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Forged> {
    let mut buf = sealed.to_vec();
    let plain = open_in_place(key, aad, &mut buf)?;
    buf.truncate(plain.end);
    buf.drain(..plain.start);
    Ok(buf)
}

/// Opens `nonce ‖ ciphertext ‖ tag` where it lies; returns where in
/// `sealed` the plaintext now is.
fn open_in_place(key: &LessSafeKey, aad: &[u8], sealed: &mut [u8]) -> Result<Range<usize>, Forged> {
    if sealed.len() < OVERHEAD {
        return Err(Forged);
    }
    let (nonce, body) = sealed.split_at_mut(NONCE);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Forged)?;
    let plain = key
        .open_in_place(nonce, Aad::from(aad), body)
        .map_err(|_| Forged)?;
    Ok(NONCE..NONCE + plain.len())
}

impl Keys {
    pub fn derive(master: &MasterKey, store_id: &str) -> Keys {
        let seed = derive(master, store_id, "chunker");
        Keys {
            id: derive(master, store_id, "id"),
            local: derive(master, store_id, "local"),
            blob: cipher(&derive(master, store_id, "blob")),
            meta: cipher(&derive(master, store_id, "meta")),
            chunker_seed: u64::from_le_bytes(seed[..8].try_into().expect("8 bytes")),
        }
    }

    /// A blob's id: HMAC-SHA256 of its plaintext, so two stores holding the
    /// same data share no name, and nobody without the key can test
    /// whether a known file is stored.
    pub fn blob_id(&self, data: &[u8]) -> BlobId {
        BlobId::from_bytes(keyed(&self.id, data))
    }

    /// A name kept in local state (paths in the index), hidden likewise.
    pub fn local_name(&self, data: &[u8]) -> [u8; 32] {
        keyed(&self.local, data)
    }

    pub fn chunker_seed(&self) -> u64 {
        self.chunker_seed
    }

    /// `nonce ‖ ciphertext ‖ tag`, with a fresh random nonce.
    pub fn seal(&self, what: Use, aad: &[u8], plain: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(OVERHEAD + plain.len());
        out.extend_from_slice(&[0; NONCE]);
        out.extend_from_slice(plain);
        seal_tail(self.cipher(what), aad, &mut out, 0);
        out
    }

    /// Like `seal`, in place: `buf[at..at + NONCE]` is room for the nonce,
    /// what follows is sealed, and the tag is appended (no copy of a chunk).
    pub fn seal_in_place(&self, what: Use, aad: &[u8], buf: &mut Vec<u8>, at: usize) {
        seal_tail(self.cipher(what), aad, buf, at);
    }

    /// Opens what `seal` made with the same `aad`.
    pub fn open(&self, what: Use, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Forged> {
        open_with(self.cipher(what), aad, sealed)
    }

    /// Like `open`, where `sealed` lies (no copy of a chunk); returns where
    /// in `sealed` the plaintext is.
    pub fn open_in_place(
        &self,
        what: Use,
        aad: &[u8],
        sealed: &mut [u8],
    ) -> Result<Range<usize>, Forged> {
        open_in_place(self.cipher(what), aad, sealed)
    }

    fn cipher(&self, what: Use) -> &LessSafeKey {
        match what {
            Use::Blob => &self.blob,
            Use::Meta => &self.meta,
        }
    }
}

fn keyed(key: &[u8; 32], data: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Wraps the master key under a slot's key (AES-256-GCM), bound to the
/// store and the slot.
pub fn wrap(master: &MasterKey, slot_key: &[u8; 32], aad: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(NONCE + 32 + TAG);
    out.extend_from_slice(&[0; NONCE]);
    out.extend_from_slice(master.as_bytes());
    seal_tail(&cipher(slot_key), aad, &mut out, 0);
    out
}

pub fn unwrap(wrapped: &[u8], slot_key: &[u8; 32], aad: &[u8]) -> Result<MasterKey, Forged> {
    if wrapped.len() != NONCE + 32 + TAG {
        return Err(Forged);
    }
    let plain = Zeroizing::new(open_with(&cipher(slot_key), aad, wrapped)?);
    Ok(MasterKey::from_bytes(
        plain[..].try_into().map_err(|_| Forged)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_objects_open_only_with_their_key_and_place() {
        let keys = Keys::derive(&MasterKey::random(), "store");
        let sealed = keys.seal(Use::Meta, b"datasets/a/records/1", b"record");
        assert_eq!(
            keys.open(Use::Meta, b"datasets/a/records/1", &sealed)
                .unwrap(),
            b"record"
        );
        // Another place, another use, another key, a flipped byte: refused.
        assert!(
            keys.open(Use::Meta, b"datasets/a/records/2", &sealed)
                .is_err()
        );
        assert!(
            keys.open(Use::Blob, b"datasets/a/records/1", &sealed)
                .is_err()
        );
        let other = Keys::derive(&MasterKey::random(), "store");
        assert!(
            other
                .open(Use::Meta, b"datasets/a/records/1", &sealed)
                .is_err()
        );
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert!(keys.open(Use::Meta, b"datasets/a/records/1", &bad).is_err());
        }
        // Fresh nonces: sealing twice never gives the same bytes.
        assert_ne!(
            sealed,
            keys.seal(Use::Meta, b"datasets/a/records/1", b"record")
        );
    }

    #[test]
    fn ids_are_keyed_per_store() {
        let master = MasterKey::random();
        let a = Keys::derive(&master, "store-a");
        let b = Keys::derive(&master, "store-b");
        assert_eq!(a.blob_id(b"x"), a.blob_id(b"x"));
        assert_ne!(a.blob_id(b"x"), b.blob_id(b"x"));
        assert_ne!(a.blob_id(b"x"), BlobId::of(b"x"));
        assert_ne!(a.chunker_seed(), b.chunker_seed());
    }

    #[test]
    fn a_wrapped_master_key_unwraps_with_its_slot_key_only() {
        let master = MasterKey::random();
        let wrapped = wrap(&master, &[7; 32], b"slot 1");
        assert_eq!(
            unwrap(&wrapped, &[7; 32], b"slot 1").unwrap().as_bytes(),
            master.as_bytes()
        );
        assert!(unwrap(&wrapped, &[8; 32], b"slot 1").is_err());
        assert!(unwrap(&wrapped, &[7; 32], b"slot 2").is_err());
    }
}
