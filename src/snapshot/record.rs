//! Version records: the commit point. Record N+1 names its tree and carries the
//! SHA-256 of record N's bytes, so the history is a hash chain.

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::pack::BlobRef;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub files_added: u64,
    pub files_changed: u64,
    pub files_removed: u64,
    /// Bytes of new objects this version added to the store (the seed's `delta_size`).
    pub bytes_added: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub format: u32,
    pub dataset: String,
    pub version: u64,
    /// SHA-256 of the previous record's stored bytes; `None` only for v1.
    pub parent: Option<ObjectId>,
    pub tree: BlobRef,
    /// RFC 3339, UTC.
    pub time: String,
    pub author: String,
    pub message: String,
    pub stats: Stats,
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("serializable");
        v.push(b'\n');
        v
    }

    /// The row `detafs log --json` and `.detafs/log` show (the seed's
    /// `version_id`, `timestamp`, `author`, `delta_size`, and more).
    pub fn log_entry(&self) -> serde_json::Value {
        serde_json::json!({
            "version_id": format!("v{}", self.version),
            "version": self.version,
            "timestamp": self.time,
            "author": self.author,
            "message": self.message,
            "files_added": self.stats.files_added,
            "files_changed": self.stats.files_changed,
            "files_removed": self.stats.files_removed,
            "delta_size": self.stats.bytes_added,
        })
    }

    pub fn decode(bytes: &[u8], what: &str) -> Result<Record> {
        serde_json::from_slice(bytes).map_err(|e| Error::malformed(what, e))
    }
}
