//! Content identifiers: the SHA-256 of an object's decoded bytes.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// A SHA-256 digest naming a chunk, a tree, a pack or a record.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId([u8; 32]);

impl ObjectId {
    pub fn of(bytes: &[u8]) -> Self {
        ObjectId(Sha256::digest(bytes).into())
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        ObjectId(bytes)
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

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.short())
    }
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

impl FromStr for ObjectId {
    type Err = BadId;
    /// Exactly as detafs writes ids: 64 lowercase hex digits.
    fn from_str(s: &str) -> Result<Self, BadId> {
        if !is_lower_hex(s, 64) {
            return Err(BadId(s.to_string()));
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| BadId(s.to_string()))?;
        Ok(ObjectId(out))
    }
}

impl Serialize for ObjectId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for ObjectId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Parsed from the string where it lies: a tree holds thousands.
        struct Hex;
        impl serde::de::Visitor<'_> for Hex {
            type Value = ObjectId;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("64 lowercase hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ObjectId, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(Hex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let id = ObjectId::of(b"hello");
        assert_eq!(
            id.to_hex(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(id.to_hex().parse::<ObjectId>().unwrap(), id);
        assert!("zz".parse::<ObjectId>().is_err());
        assert!(id.to_hex().to_uppercase().parse::<ObjectId>().is_err());
    }
}
