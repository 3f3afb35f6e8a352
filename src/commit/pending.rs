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
    let name = name_at(nanos, rand::random());
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

/// The name of a change staged `nanos` after the epoch: the time first
/// (names sort as changes were staged), then a nonce. `staged_at` reads it.
fn name_at(nanos: u128, nonce: [u8; 8]) -> String {
    format!("{nanos:024}-{}", hex::encode(nonce))
}

/// When the change at `key` was staged, in seconds since the epoch (its
/// name says, as `name_at` wrote it), if it is such a key.
pub fn staged_at(key: &str) -> Option<i64> {
    let name = key.rsplit('/').next()?.strip_suffix(".json")?;
    let (digits, nonce) = name.split_once('-')?;
    if digits.len() != 24 || nonce.len() != 16 {
        return None;
    }
    let nanos: u128 = digits.parse().ok()?;
    i64::try_from(nanos / 1_000_000_000).ok()
}

/// Clears the staged changes at `keys` (once committed).
pub fn clear(repo: &Repo, keys: &[String]) -> Result<()> {
    keys.iter().try_for_each(|k| repo.store().delete(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// What `stage` names, `staged_at` reads back; names sort by time.
        #[test]
        fn a_staged_name_says_when(a in 0u128..10u128.pow(24), b in 0u128..10u128.pow(24), nonce: [u8; 8]) {
            let key = keys::staged("ds", "owner", &name_at(a, nonce));
            prop_assert_eq!(staged_at(&key), i64::try_from(a / 1_000_000_000).ok());
            let other = keys::staged("ds", "owner", &name_at(b, nonce));
            prop_assert_eq!(a.cmp(&b), key.cmp(&other));
        }

        /// Anything else under `staged/` says no time, never a wrong one.
        #[test]
        fn a_foreign_name_says_no_time(name in "[0-9a-z./-]{0,48}") {
            let key = format!("staged/ds/owner/{name}");
            if let Some(secs) = staged_at(&key) {
                let digits = &name[..24];
                prop_assert_eq!(Some(secs), i64::try_from(digits.parse::<u128>().unwrap() / 1_000_000_000).ok());
            }
        }
    }
}
