//! Format 2's cryptography: the store's master key, the subkeys derived
//! from it, and sealing (AES-256-GCM, aws-lc-rs's: about twice the speed of
//! the portable one here) with each object's place as associated data. Object names stay meaningful (the commit protocol
//! needs them); what they hold is hidden and authenticated.
//!
//! Key hierarchy (docs/format.md): a random 256-bit master key; HKDF-SHA256
//! over it, salted with the store id, gives one subkey per use: `id` (the
//! HMAC-SHA256 key naming blobs), `blob` (sealing chunks and trees), `meta`
//! (sealing records, tags and dataset objects), `chunker` (the gear seed of
//! the content-defined chunker), `local` (names in the local index),
//! `files` (local files sealed block by block: `sealed_file.rs`).

use crate::id::BlobId;
use aws_lc_rs::aead::{AES_256_GCM, AES_256_GCM_SIV, Aad, LessSafeKey, Nonce, UnboundKey};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::ops::Range;
use std::sync::Arc;
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
    files: Arc<FileKey>,
    chunker_seed: u64,
}

/// The key of local files sealed block by block (`sealed_file.rs`):
/// AES-256-GCM-SIV, since a block is sealed again at each write under
/// random nonces, and a nonce met twice then gives away only whether two
/// blocks were equal. Names kept beside such files are sealed with it too,
/// each under a nonce keyed from the name itself (the SIV construction):
/// the same name seals the same way, so a database can look it up.
pub struct FileKey {
    cipher: LessSafeKey,
    names: Zeroizing<[u8; 32]>,
}

/// What a sealed name is bound to.
const NAME_AAD: &[u8] = b"detafs local name";

impl FileKey {
    /// Seals `block[NONCE..len - TAG]` where it lies, bound to its index:
    /// a fresh nonce first, the tag last.
    pub fn seal_block(&self, index: u64, block: &mut [u8]) {
        let nonce: [u8; NONCE] = rand::random();
        let (head, rest) = block.split_at_mut(NONCE);
        head.copy_from_slice(&nonce);
        let (body, tag_at) = rest.split_at_mut(rest.len() - TAG);
        let tag = self
            .cipher
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(index.to_le_bytes()),
                body,
            )
            .expect("AES-GCM-SIV seals any block");
        tag_at.copy_from_slice(tag.as_ref());
    }

    /// Opens what `seal_block` made of block `index`, where it lies:
    /// the plaintext is `block[NONCE..len - TAG]` then.
    pub fn open_block(&self, index: u64, block: &mut [u8]) -> Result<(), Forged> {
        open_in_place(&self.cipher, &index.to_le_bytes(), block).map(|_| ())
    }

    /// `name` sealed, the same way each time: nonce ‖ ciphertext ‖ tag.
    pub fn seal_name(&self, name: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(OVERHEAD + name.len());
        out.extend_from_slice(&self.name_nonce(name));
        out.extend_from_slice(name);
        let tag = self
            .cipher
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(self.name_nonce(name)),
                Aad::from(NAME_AAD),
                &mut out[NONCE..],
            )
            .expect("AES-GCM-SIV seals any name");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// What `seal_name` made, opened (its nonce checked against the name).
    pub fn open_name(&self, sealed: &[u8]) -> Result<Vec<u8>, Forged> {
        let name = open_with(&self.cipher, NAME_AAD, sealed)?;
        match sealed[..NONCE] == self.name_nonce(&name) {
            true => Ok(name),
            false => Err(Forged),
        }
    }

    fn name_nonce(&self, name: &[u8]) -> [u8; NONCE] {
        keyed(&self.names, name)[..NONCE]
            .try_into()
            .expect("a nonce's bytes")
    }
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
            files: Arc::new(FileKey {
                cipher: LessSafeKey::new(
                    UnboundKey::new(&AES_256_GCM_SIV, &derive(master, store_id, "files")[..])
                        .expect("32-byte key"),
                ),
                names: derive(master, store_id, "file names"),
            }),
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

    /// The key of local files sealed block by block.
    pub fn files(&self) -> Arc<FileKey> {
        self.files.clone()
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
