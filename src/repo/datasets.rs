//! A store's datasets: create, list, check, delete, undelete, rename.
//!
//! Deleting puts a tombstone (`datasets/NAME/deleted.json`) that hides the
//! dataset at once and keeps its data, so `undelete` can bring it back; gc
//! removes its records and tags once the tombstone is older than its grace
//! (then its packs are garbage). The tombstone and `dataset.json` stay, so
//! the name is never reused: every host's local index of that name stays
//! true, and the deletion stays on record. Renaming copies the records
//! (the same trees, so no data moves) into the new name, chained anew, and
//! then deletes the old name.

use crate::error::{Error, Result};
use crate::id::RecordHash;
use crate::limits;
use crate::limits::validate_name;
use crate::repo::Repo;
use crate::snapshot::Record;
use crate::store::keys;
use serde::{Deserialize, Serialize};
use std::time::SystemTime;

/// How long a rename waits, once the old name is deleted, for a commit
/// that checked before (more than a record create takes on a healthy store).
const RECORD_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Deletion {
    /// RFC 3339.
    pub time: String,
    pub author: String,
    /// Makes the body unique (see `Store::put_create`).
    pub nonce: String,
    /// Set when the dataset was renamed: its new name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_to: Option<String>,
}

impl Deletion {
    /// When it was deleted; `None` for a tombstone that does not decode,
    /// which still hides the dataset but is never taken as expired.
    pub fn when(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339(&self.time).ok()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Deletion {
        serde_json::from_slice::<Deletion>(bytes)
            .ok()
            .filter(|_| bytes.len() as u64 <= limits::MAX_SMALL_OBJECT)
            .unwrap_or_else(|| Deletion {
                time: "unknown time".into(),
                author: String::new(),
                nonce: String::new(),
                renamed_to: None,
            })
    }
}

impl Repo {
    pub fn create_dataset(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        self.check_store(false)?;
        // The random id makes the body unique (see `Store::put_create`).
        let body = serde_json::to_vec_pretty(&serde_json::json!({
            "name": name,
            "id": hex::encode(rand::random::<[u8; 16]>()),
        }))
        .expect("serializable");
        if !self.store.put_create(&keys::dataset(name), body.into())? {
            // A deleted dataset's name stays taken (`deletion.rs`).
            self.check_dataset(name)?;
            return Err(Error::DatasetExists(name.to_string()));
        }
        Ok(())
    }

    /// Datasets, not counting deleted ones.
    pub fn datasets(&self) -> Result<Vec<String>> {
        Ok(self
            .all_datasets()?
            .into_iter()
            .filter_map(|(name, deleted)| deleted.is_none().then_some(name))
            .collect())
    }

    /// Every dataset the store names, with its tombstone if deleted.
    pub fn all_datasets(&self) -> Result<Vec<(String, Option<Deletion>)>> {
        let names = self.store.list_dirs("datasets/")?;
        let deletions = self.deletions(&names)?;
        Ok(names.into_iter().zip(deletions).collect())
    }

    /// Refuses a dataset that does not exist or was deleted.
    pub fn check_dataset(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        if let Some(said) = self.ask_upstream(name) {
            return said.map(drop);
        }
        let keys = [keys::dataset(name), keys::deleted(name)];
        match &self.store.get_many(&keys)?[..] {
            [None, _] => Err(Error::NoDataset(name.to_string())),
            [Some(_), Some(d)] => Err(Repo::deleted_error(name, &Deletion::decode(d))),
            _ => Ok(()),
        }
    }

    /// The tombstone of each of `names`, if it has one.
    pub fn deletions(&self, names: &[String]) -> Result<Vec<Option<Deletion>>> {
        let keys: Vec<String> = names.iter().map(|n| keys::deleted(n)).collect();
        Ok(self
            .store
            .get_many(&keys)?
            .into_iter()
            .map(|b| b.map(|b| Deletion::decode(&b)))
            .collect())
    }

    pub(crate) fn deleted_error(name: &str, d: &Deletion) -> Error {
        let renamed = match &d.renamed_to {
            Some(to) => format!(", renamed to {}", crate::escape::line(to.as_bytes())),
            None => String::new(),
        };
        Error::DatasetDeleted {
            name: name.to_string(),
            when: format!(
                "{} by {}{renamed}",
                d.time,
                crate::escape::line(d.author.as_bytes())
            ),
        }
    }

    /// Marks dataset `name` deleted (it must exist and not be deleted).
    pub fn delete_dataset(&self, name: &str, author: &str) -> Result<Deletion> {
        self.check_dataset(name)?;
        self.tombstone(name, author, None)
    }

    fn tombstone(&self, name: &str, author: &str, renamed_to: Option<&str>) -> Result<Deletion> {
        let d = Deletion {
            time: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            author: author.to_string(),
            nonce: hex::encode(rand::random::<[u8; 16]>()),
            renamed_to: renamed_to.map(str::to_string),
        };
        let body = serde_json::to_vec_pretty(&d).expect("serializable");
        if !self.store.put_create(&keys::deleted(name), body.into())? {
            // Another host deleted it first: say so, with its tombstone.
            self.check_dataset(name)?;
        }
        Ok(d)
    }

    /// Renames dataset `old` to `new`, which must not exist: `new` gets
    /// every version of `old` (same number, time, author, message and
    /// tree; records chained anew) and its tags, then `old` is deleted
    /// (`renamed_to` in its tombstone), so `undelete` brings the old name
    /// back too. A commit to `old` that lands while this runs is copied
    /// as well, or refused once the tombstone exists.
    pub fn rename_dataset(&self, old: &str, new: &str, author: &str) -> Result<()> {
        self.check_dataset(old)?;
        validate_name(new)?;
        self.check_store(false)?;
        let body = serde_json::to_vec_pretty(&serde_json::json!({
            "name": new,
            "id": hex::encode(rand::random::<[u8; 16]>()),
            "renamed_from": old,
        }))
        .expect("serializable");
        if !self.store.put_create(&keys::dataset(new), body.into())? {
            self.check_dataset(new)?;
            return Err(Error::DatasetExists(new.to_string()));
        }
        let mut copied = Vec::new();
        self.copy_records(old, new, &mut copied)?;
        self.tombstone(old, author, Some(new))?;
        // A commit that passed its last check (`commit::publish`) before the
        // tombstone creates its record within a round trip: copied too. One
        // later still (a create retried that long) stays in `old`, which
        // `undelete` brings back.
        std::thread::sleep(RECORD_SETTLE);
        self.copy_records(old, new, &mut copied)?;
        self.copy_lifecycle(old, new)?;
        for t in self.tags(old)? {
            let Some((_, hash)) = copied.iter().find(|(v, _)| *v == t.version) else {
                continue;
            };
            self.put_tag(&crate::repo::tag::Tag {
                dataset: new.to_string(),
                record: *hash,
                ..t
            })?;
        }
        Ok(())
    }

    /// Copies the records of `old` after those in `copied` to `new`
    /// (version, new record hash), chaining each onto the one before.
    fn copy_records(
        &self,
        old: &str,
        new: &str,
        copied: &mut Vec<(u64, RecordHash)>,
    ) -> Result<()> {
        for r in self.chain_records(old)? {
            if copied.iter().any(|(v, _)| *v == r.version) {
                continue;
            }
            let record = Record {
                dataset: new.to_string(),
                parent: copied.last().map(|(_, h)| *h),
                ..r
            };
            let bytes = record.encode();
            let key = keys::record(new, record.version);
            if !self.store.put_create(&key, bytes.clone().into())? {
                return Err(Error::InvalidInput(format!(
                    "dataset {new} got a version v{} from elsewhere while {old} was being renamed to it; {old} is unchanged",
                    record.version
                )));
            }
            copied.push((record.version, RecordHash::of(&bytes)));
        }
        Ok(())
    }

    /// Brings back a deleted dataset whose records gc has not removed:
    /// refused once its tombstone is older than gc's minimum grace.
    pub fn undelete_dataset(&self, name: &str) -> Result<()> {
        crate::limits::validate_name(name)?;
        if self.store.get(&keys::dataset(name))?.is_none() {
            return Err(Error::NoDataset(name.to_string()));
        }
        let Some(d) = self.deletions(&[name.to_string()])?.remove(0) else {
            return Err(Error::InvalidInput(format!(
                "dataset {name:?} is not deleted"
            )));
        };
        let age = d
            .when()
            .and_then(|t| SystemTime::now().duration_since(t).ok());
        if age.is_none_or(|a| a >= crate::store::grace::min_grace()) {
            return Err(Error::InvalidInput(format!(
                "dataset {name:?} was deleted at {}, longer ago than gc's grace: gc may have removed its versions, so it stays deleted",
                d.time
            )));
        }
        self.store.delete(&keys::deleted(name))
    }
}
