//! What a host that holds no store key sends to commit through a gateway
//! (`remote`, `commit::through`), and what the gateway reads
//! (`gateway::commits`): one form for both sides. A change names a path
//! and what it becomes; a file's bytes come in an upload sent before,
//! whole or as a patch of a file of a version the caller may read.

use crate::relpath::RelPath;
use serde::{Deserialize, Serialize};

/// One change of a commit, with every attribute a version holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Change {
    /// Content from an upload, a file of a version (`from`), or else the
    /// base's own file at `path` (a new mode or time only).
    File {
        path: WireName,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mtime: Option<(i64, u32)>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upload: Option<String>,
        /// The file's place in `upload`, a bundle of many.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        part: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<Source>,
    },
    Symlink {
        path: WireName,
        target: WireName,
        mtime: (i64, u32),
    },
    Dir {
        path: WireName,
        mode: u32,
        mtime: (i64, u32),
    },
    /// A file, a symlink or a folder (what of it the caller sees).
    Delete { path: WireName },
}

/// A file of a version, by the version's name and the file's path.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub version: String,
    pub path: WireName,
}

/// A path or a link's target on the wire: a JSON string when it is UTF-8
/// (most are), else `{"base64": …}` of its bytes, since names are bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireName(pub Vec<u8>);

impl AsRef<[u8]> for WireName {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Display for WireName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Spelled {
    Text(String),
    Bytes { base64: String },
}

impl Serialize for WireName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        match std::str::from_utf8(&self.0) {
            Ok(t) => Spelled::Text(t.to_string()),
            Err(_) => Spelled::Bytes {
                base64: base64::engine::general_purpose::STANDARD.encode(&self.0),
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for WireName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<WireName, D::Error> {
        use base64::Engine;
        match Spelled::deserialize(d)? {
            Spelled::Text(t) => Ok(WireName(t.into_bytes())),
            Spelled::Bytes { base64 } => base64::engine::general_purpose::STANDARD
                .decode(base64)
                .map(WireName)
                .map_err(|_| serde::de::Error::custom("a name's base64 does not decode")),
        }
    }
}

/// A patch of file `from` of version `version`: the file, `size` bytes
/// long, with `ranges` (offset, length) of a local file laid on it. On the
/// wire each range is its offset and length (8 bytes each, big-endian)
/// and its bytes, in order, none overlapping; whatever lies beyond the
/// file's end comes from the patch.
pub struct Patch {
    pub version: u64,
    pub from: RelPath,
    pub size: u64,
    pub ranges: Vec<(u64, u64)>,
}

/// An upload to send: local file `file` (its first `size` bytes, or as
/// `patch` says) for `path` of `dataset`. `resume` names what is sent (the
/// file as it is now): an upload of the same sent not long ago (by a
/// commit that did not finish) is taken again, not sent again.
pub struct Sending<'a> {
    pub dataset: &'a str,
    pub path: &'a RelPath,
    pub file: &'a std::path::Path,
    /// How its bytes are kept there.
    pub sealing: &'a crate::store::sealed_file::Sealing,
    pub size: u64,
    pub patch: Option<&'a Patch>,
    pub resume: Option<[u8; 32]>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Any name crosses the wire as its bytes: a string when UTF-8.
        #[test]
        fn a_name_crosses_the_wire_as_its_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let change = Change::Delete { path: WireName(bytes.clone()) };
            let json = serde_json::to_value(&change).unwrap();
            prop_assert_eq!(json["path"].is_string(), std::str::from_utf8(&bytes).is_ok());
            let Change::Delete { path } = serde_json::from_value(json).unwrap() else {
                panic!("a deletion");
            };
            prop_assert_eq!(path.0, bytes);
        }
    }

    #[test]
    fn a_name_whose_base64_does_not_decode_is_refused() {
        let bad = serde_json::json!({"kind": "delete", "path": {"base64": "%%"}});
        assert!(serde_json::from_value::<Change>(bad).is_err());
        let other = serde_json::json!({"kind": "delete", "path": {"hex": "00"}});
        assert!(serde_json::from_value::<Change>(other).is_err());
    }
}
