//! Uploads: a file's bytes stored ahead of a commit (the gateway's chunked
//! alternative to a body over its limit). The chunks go into packs as a
//! commit's do; `uploads/ID.json` (sealed like records) says which, for
//! which dataset and path, and when. A commit names uploads; one older than
//! a commit may take (gc may since have collected its packs) is refused.

use super::scan::Scanner;
use crate::error::{Error, Result};
use crate::gc;
use crate::limits;
use crate::progress::Quiet;
use crate::repo::Repo;
use crate::store::pack::BlobRef;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const PREFIX: &str = "uploads/";

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upload {
    pub id: String,
    pub dataset: String,
    pub path: String,
    pub size: u64,
    pub chunks: Vec<BlobRef>,
    /// RFC 3339, UTC.
    pub time: String,
}

fn key(id: &str) -> String {
    format!("{PREFIX}{id}.json")
}

/// Stores the bytes of local file `file` as an upload for `path` of `dataset`.
pub fn store_upload(repo: &Repo, dataset: &str, path: &str, file: &Path) -> Result<Upload> {
    super::edit::split_path(path)?;
    repo.check_dataset(dataset)?;
    let mut scanner = Scanner::new(repo, &Quiet);
    let (chunks, size) = scanner.chunk_prefix(file, u64::MAX)?;
    scanner.finish()?;
    let up = Upload {
        id: hex::encode(rand::random::<[u8; 16]>()),
        dataset: dataset.to_string(),
        path: path.to_string(),
        size,
        chunks,
        time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    };
    let body = serde_json::to_vec(&up).expect("serializable");
    if !repo.store.put_create(&key(&up.id), body.into())? {
        return Err(Error::InvalidInput("upload id taken; upload again".into()));
    }
    Ok(up)
}

/// The upload `id` of `dataset`, checked: it decodes, its chunks hold its
/// size, and it is young enough to commit.
pub fn load_upload(repo: &Repo, dataset: &str, id: &str) -> Result<Upload> {
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidInput(format!("bad upload id {id:?}")));
    }
    let bytes = repo
        .store
        .get(&key(id))?
        .ok_or_else(|| Error::InvalidInput(format!("no upload {id}")))?;
    let up: Upload =
        serde_json::from_slice(&bytes).map_err(|e| Error::malformed(key(id), e.to_string()))?;
    let sum: u64 = up.chunks.iter().map(BlobRef::data_size).sum();
    if up.id != id
        || sum != up.size
        || up
            .chunks
            .iter()
            .any(|c| c.size == 0 || u64::from(c.size) > limits::MAX_CHUNK)
    {
        return Err(Error::malformed(key(id), "upload does not hold together"));
    }
    if up.dataset != dataset {
        return Err(Error::InvalidInput(format!(
            "upload {id} is for dataset {}",
            up.dataset
        )));
    }
    let age = humantime::parse_rfc3339(&up.time)
        .ok()
        .and_then(|t| t.elapsed().ok())
        .ok_or_else(|| Error::malformed(key(id), "bad time"))?;
    if age + repo.store.deadline() > gc::MAX_COMMIT_AGE {
        return Err(Error::InvalidInput(format!(
            "upload {id} is older than {} and may have been collected: upload it again",
            humantime::format_duration(gc::MAX_COMMIT_AGE)
        )));
    }
    Ok(up)
}
