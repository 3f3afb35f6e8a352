//! Identifiers of what a store holds: 32 bytes each, written as 64 hex
//! digits, one type per kind so that a pack id cannot stand where a blob
//! id belongs:
//!
//! ```compile_fail
//! use detafs::id::{BlobId, PackId};
//! use detafs::store::pack::BlobRef;
//! let (id, pack) = (BlobId::of(b"chunk"), PackId::random());
//! let swapped = BlobRef { id: pack, pack: id, offset: 0, len: 1, size: 0 };
//! ```
//!
//! ```
//! use detafs::id::{BlobId, PackId};
//! use detafs::store::pack::BlobRef;
//! let (id, pack) = (BlobId::of(b"chunk"), PackId::random());
//! let right = BlobRef { id, pack, offset: 0, len: 1, size: 0 };
//! ```

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::str::FromStr;

/// What an `Id` names.
pub trait Kind {
    /// For `Debug`.
    const NAME: &'static str;
}

/// A blob (a chunk of file data or a tree): in a plain store the SHA-256
/// of its decoded bytes; in a sealed store keyed, an HMAC-SHA256 of them
/// under the store's id key (`store::seal`), so ids tell nothing about
/// contents to whoever lacks the key.
pub enum Blob {}
/// A pack of blobs: random, never derived from its contents.
pub enum Pack {}
/// A version or policy record: the SHA-256 of its stored bytes, unkeyed
/// (the hash chain an audit checks).
pub enum Record {}

impl Kind for Blob {
    const NAME: &'static str = "BlobId";
}
impl Kind for Pack {
    const NAME: &'static str = "PackId";
}
impl Kind for Record {
    const NAME: &'static str = "RecordHash";
}

pub type BlobId = Id<Blob>;
pub type PackId = Id<Pack>;
pub type RecordHash = Id<Record>;

/// 32 bytes naming something of kind `K`.
pub struct Id<K: Kind>([u8; 32], PhantomData<fn() -> K>);

impl<K: Kind> Id<K> {
    /// The SHA-256 of `bytes` (a blob id of a plain store, a record hash).
    pub fn of(bytes: &[u8]) -> Self {
        Self::from_bytes(Sha256::digest(bytes).into())
    }

    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Id(bytes, PhantomData)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first 12 hex digits, for messages.
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }
}

impl PackId {
    /// A new pack's id.
    pub fn random() -> Self {
        Self::from_bytes(rand::random())
    }
}

// Written out, not derived: a derive would ask the same of `K`, which is
// only a marker.
impl<K: Kind> Clone for Id<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K: Kind> Copy for Id<K> {}
impl<K: Kind> PartialEq for Id<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl<K: Kind> Eq for Id<K> {}
impl<K: Kind> PartialOrd for Id<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K: Kind> Ord for Id<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}
impl<K: Kind> Hash for Id<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl<K: Kind> fmt::Display for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl<K: Kind> fmt::Debug for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", K::NAME, self.short())
    }
}

/// The SHA-256 of `bytes` in hex, for names of local state (a store's
/// location), which are no store objects.
pub fn digest_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether `s` is `len` lowercase hex digits, as detafs writes ids.
pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[derive(Debug, thiserror::Error)]
#[error("not a SHA-256 hex digest: {0:?}")]
pub struct BadId(String);

impl<K: Kind> FromStr for Id<K> {
    type Err = BadId;
    /// Exactly as detafs writes ids: 64 lowercase hex digits.
    fn from_str(s: &str) -> Result<Self, BadId> {
        if !is_lower_hex(s, 64) {
            return Err(BadId(s.to_string()));
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| BadId(s.to_string()))?;
        Ok(Self::from_bytes(out))
    }
}

impl<K: Kind> Serialize for Id<K> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de, K: Kind> Deserialize<'de> for Id<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Parsed from the string where it lies: a tree holds thousands.
        struct Hex<K>(PhantomData<fn() -> K>);
        impl<K: Kind> serde::de::Visitor<'_> for Hex<K> {
            type Value = Id<K>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("64 lowercase hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Id<K>, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(Hex(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let id = BlobId::of(b"hello");
        assert_eq!(
            id.to_hex(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(id.to_hex().parse::<BlobId>().unwrap(), id);
        assert!("zz".parse::<BlobId>().is_err());
        assert!(id.to_hex().to_uppercase().parse::<BlobId>().is_err());
        assert_eq!(
            format!("{:?}", PackId::from_bytes([0; 32])),
            "PackId(000000000000)"
        );
    }
}
