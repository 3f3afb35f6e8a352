//! Changes staged in the store for a dataset's next commit: what the S3
//! endpoint's `staging/` prefix holds. Each `PutObject` or `DeleteObject`
//! adds one object, `staged/DATASET/OWNER/TIME-NONCE.json` (sealed like
//! records), naming the path and the upload that holds its bytes, or none
//! for a deletion; the newest per path wins. A staging area is its
//! stager's (OWNER is a digest of the caller's name): another caller
//! neither lists nor commits it. Objects are only ever created and
//! deleted, never rewritten, so every gateway of a store sees the same
//! staging areas, a restart loses nothing staged, and a commit clears
//! exactly the objects it read: what was staged meanwhile stays staged.

use crate::error::{Error, Result};
use crate::repo::Repo;
use crate::store::keys;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One staged change of a path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pending {
    pub path: String,
    /// The upload (`commit/upload.rs`) holding the bytes; none for a
    /// deletion.
    pub upload: Option<String>,
    pub size: u64,
    /// The S3 ETag its `PutObject` answered.
    pub etag: String,
}

/// Whose staging area: a caller's name (`key:NAME`, `token:SUBJECT`) as
/// a store key's element.
pub fn owner(caller: &str) -> String {
    crate::id::digest_hex(caller.as_bytes())[..32].to_string()
}

/// Stages `change` for the next commit of `dataset` by `owner`.
pub fn stage(repo: &Repo, dataset: &str, owner: &str, change: &Pending) -> Result<()> {
    repo.check_dataset(dataset)?;
    // Names sort in the order they were staged (within a clock's
    // agreement between hosts; the same path staged on two hosts in the
    // same instant is a race either could win).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let name = format!("{nanos:024}-{}", hex::encode(rand::random::<[u8; 8]>()));
    let body = serde_json::to_vec(change).expect("serializable");
    match repo
        .store()
        .put_create(&keys::staged(dataset, owner, &name), body.into())?
    {
        true => Ok(()),
        false => Err(Error::InvalidInput("staged name taken; try again".into())),
    }
}

/// The keys of what `owner` staged for `dataset`, oldest first.
pub fn keys(repo: &Repo, dataset: &str, owner: &str) -> Result<Vec<String>> {
    let listed = repo.store().list(&keys::staged_all(dataset, owner), None)?;
    Ok(listed.into_iter().map(|l| l.key).collect())
}

/// The newest change of each path among `staged` (oldest first).
pub fn newest(staged: &[(String, Pending)]) -> BTreeMap<String, Pending> {
    let mut out = BTreeMap::new();
    for (_, change) in staged {
        out.insert(change.path.clone(), change.clone());
    }
    out
}

/// When the change at `key` was staged, in seconds since the epoch (its
/// name says), if it is such a key.
pub fn staged_at(key: &str) -> Option<i64> {
    let name = key.rsplit('/').next()?;
    let nanos: u128 = name.split('-').next()?.parse().ok()?;
    i64::try_from(nanos / 1_000_000_000).ok()
}

/// Clears the staged changes at `keys` (once committed).
pub fn clear(repo: &Repo, keys: &[String]) -> Result<()> {
    keys.iter().try_for_each(|k| repo.store().delete(k))
}
