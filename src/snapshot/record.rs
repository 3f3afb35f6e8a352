//! Version records: the commit point. Record N+1 names its tree and carries the
//! SHA-256 of record N's bytes, so the history is a hash chain.

use crate::error::{Error, Result};
use crate::id::RecordHash;
use crate::limits;
use crate::snapshot::Mtime;
use crate::store::FORMAT;
use crate::store::pack::{self, BlobRef};
use serde::{Deserialize, Serialize};

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub files_added: u64,
    pub files_changed: u64,
    pub files_removed: u64,
    /// Files whose content and mode stayed, with other times (absent in
    /// records made before detafs counted them, and when zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub files_touched: u64,
    /// Bytes of new objects this version added to the store (the seed's `delta_size`).
    pub bytes_added: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub format: u32,
    pub dataset: String,
    pub version: u64,
    /// SHA-256 of the previous record's stored bytes; `None` only for v1.
    pub parent: Option<RecordHash>,
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

    /// When it was committed (its time is checked when it is decoded).
    pub fn mtime(&self) -> Mtime {
        Mtime::of_rfc3339(&self.time)
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
            "files_touched": self.stats.files_touched,
            "delta_size": self.stats.bytes_added,
        })
    }

    /// `log_entry` for a caller from whom a policy may hide paths of the
    /// dataset (`Policy::may_hide_paths`): its figures are withheld
    /// (null), since they count what is hidden too.
    pub fn log_entry_seen(&self, hides_paths: bool) -> serde_json::Value {
        let mut e = self.log_entry();
        if hides_paths {
            for figure in [
                "files_added",
                "files_changed",
                "files_removed",
                "files_touched",
                "delta_size",
            ] {
                e[figure] = serde_json::Value::Null;
            }
        }
        e
    }

    /// `log_entry_seen` as one JSON line (`.detafs/log`,
    /// `.detafs/last-commit`).
    pub fn log_line(&self, hides_paths: bool) -> Vec<u8> {
        let mut line = serde_json::to_vec(&self.log_entry_seen(hides_paths)).expect("serializable");
        line.push(b'\n');
        line
    }

    /// Parses and validates a record read from a store or the local index.
    pub fn decode(bytes: &[u8], what: &str) -> Result<Record> {
        let bad = |detail: String| Error::malformed(what, detail);
        if bytes.len() as u64 > limits::MAX_SMALL_OBJECT {
            return Err(bad(format!(
                "{} bytes is too large for a record",
                bytes.len()
            )));
        }
        let r: Record = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if !(1..=FORMAT).contains(&r.format) {
            return Err(Error::malformed(
                what,
                format!(
                    "record format {} is not one this detafs reads (1 to {FORMAT})",
                    r.format
                ),
            ));
        }
        crate::limits::validate_name(&r.dataset).map_err(|e| bad(e.to_string()))?;
        if r.version > crate::limits::MAX_VERSION {
            return Err(bad(format!("version {} is beyond the highest", r.version)));
        }
        if r.version == 0 || (r.version == 1) != r.parent.is_none() {
            return Err(bad(format!(
                "version {} with {} parent",
                r.version,
                if r.parent.is_some() { "a" } else { "no" }
            )));
        }
        let t = &r.tree;
        if t.offset < pack::MAGIC.len() as u64
            || !(2..=limits::MAX_TREE_LEN).contains(&(t.len as u64))
        {
            return Err(bad("root tree reference out of bounds".into()));
        }
        if humantime::parse_rfc3339(&r.time).is_err() {
            return Err(bad(format!("time {:?} is not RFC 3339", r.time)));
        }
        if r.author.len() > limits::MAX_AUTHOR || r.message.len() > limits::MAX_MESSAGE {
            return Err(bad("author or message too long".into()));
        }
        Ok(r)
    }
}
