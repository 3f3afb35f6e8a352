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
        path: String,
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
        path: String,
        target: String,
        mtime: (i64, u32),
    },
    Dir {
        path: String,
        mode: u32,
        mtime: (i64, u32),
    },
    /// A file, a symlink or a folder (what of it the caller sees).
    Delete { path: String },
}

/// A file of a version, by the version's name and the file's path.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub version: String,
    pub path: String,
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
