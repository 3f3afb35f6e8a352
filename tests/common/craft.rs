//! Writing store objects by hand, as a hostile store writer would: packs of
//! arbitrary blobs, trees of arbitrary JSON, and version records that chain
//! correctly onto the dataset's history (so the damage is in what they
//! point at, not in the chain).

use super::objects::Objects;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Where a crafted blob lives: `[id, pack, offset, len]`, as trees refer to it.
#[derive(Clone, Debug)]
pub struct Ref {
    pub id: String,
    pub pack: String,
    pub offset: u64,
    pub len: u64,
}

impl Ref {
    /// The reference as a tree entry writes it, with its pack at `index`.
    pub fn wire(&self, index: usize) -> Value {
        json!([self.id, index, self.offset, self.len])
    }

    pub fn record_json(&self) -> Value {
        json!({"id": self.id, "pack": self.pack, "offset": self.offset, "len": self.len})
    }
}

/// Builds one pack of blobs, then writes it.
pub struct Pack {
    id: String,
    body: Vec<u8>,
}

impl Default for Pack {
    fn default() -> Self {
        Pack {
            id: hex::encode(rand::random::<[u8; 32]>()),
            body: b"DTFSPAK1".to_vec(),
        }
    }
}

impl Pack {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Adds an encoded blob (encoding byte, payload) whose id is `id`.
    pub fn add_encoded(&mut self, id: String, encoded: &[u8]) -> Ref {
        let r = Ref {
            id,
            pack: self.id.clone(),
            offset: self.body.len() as u64,
            len: encoded.len() as u64,
        };
        self.body.extend_from_slice(encoded);
        r
    }

    /// A raw chunk, as detafs writes them.
    pub fn chunk(&mut self, data: &[u8]) -> Ref {
        let mut enc = vec![0u8];
        enc.extend_from_slice(data);
        self.add_encoded(sha(data), &enc)
    }

    /// A tree of the given JSON, zstd-encoded, as detafs writes them.
    pub fn tree(&mut self, tree: &Value) -> Ref {
        let json = serde_json::to_vec(tree).unwrap();
        let mut enc = vec![1u8];
        enc.extend(zstd::bulk::compress(&json, 3).unwrap());
        self.add_encoded(sha(&json), &enc)
    }

    pub fn write(self, objects: &Objects) -> String {
        objects.write(&format!("packs/{}/{}", &self.id[..2], self.id), self.body);
        self.id
    }
}

/// A tree's JSON from `(name, entry fields)`: `packs` is filled from the
/// references given as `Ref`s in `"chunks"` / `"tree"` placeholders.
pub fn tree_json(entries: Vec<Value>, packs: &[&str]) -> Value {
    json!({"packs": packs, "entries": entries})
}

pub fn file_entry(name: &str, size: u64, chunks: &[&Ref], pack_index: usize) -> Value {
    json!({"type": "file", "name": name, "mode": 0o644, "mtime": [1_700_000_000, 0],
           "size": size, "chunks": chunks.iter().map(|c| c.wire(pack_index)).collect::<Vec<_>>()})
}

pub fn dir_entry(name: &str, tree: &Ref, pack_index: usize) -> Value {
    json!({"type": "dir", "name": name, "mode": 0o755, "mtime": [1_700_000_000, 0],
           "tree": tree.wire(pack_index)})
}

/// Writes record `version` of `dataset` pointing at `tree`, chained onto the
/// record before it. `edit` may change the record's JSON before it is written.
pub fn record(
    objects: &Objects,
    dataset: &str,
    version: u64,
    tree: &Ref,
    edit: impl FnOnce(&mut Value),
) {
    let key = |v: u64| format!("datasets/{dataset}/records/{v:020}.json");
    let parent = (version > 1).then(|| sha(&objects.read(&key(version - 1))));
    let mut rec = json!({
        "format": 1, "dataset": dataset, "version": version, "parent": parent,
        "tree": tree.record_json(), "time": "2026-12-01T08:00:00Z",
        "author": "mallory", "message": "crafted",
        "stats": {"files_added": 0, "files_changed": 0, "files_removed": 0, "bytes_added": 0},
    });
    edit(&mut rec);
    objects.write(&key(version), serde_json::to_vec_pretty(&rec).unwrap());
}
