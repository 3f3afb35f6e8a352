//! Deleting a dataset: a tombstone (`datasets/NAME/deleted.json`) hides
//! it at once and keeps its data, so `undelete` can bring it back; gc
//! removes its records and tags once the tombstone is older than its grace
//! (then its packs are garbage). The tombstone and `dataset.json` stay, so
//! the name is never reused: every host's local index of that name stays
//! true, and the deletion stays on record.

use crate::error::{Error, Result};
use crate::limits;
use crate::repo::Repo;
use crate::store::keys;
use serde::{Deserialize, Serialize};
use std::time::SystemTime;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Deletion {
    /// RFC 3339.
    pub time: String,
    pub author: String,
    /// Makes the body unique (see `Store::put_create`).
    pub nonce: String,
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
            })
    }
}

impl Repo {
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
        Error::DatasetDeleted {
            name: name.to_string(),
            when: format!("{} by {}", d.time, crate::escape::line(d.author.as_bytes())),
        }
    }

    /// Marks dataset `name` deleted (it must exist and not be deleted).
    pub fn delete_dataset(&self, name: &str, author: &str) -> Result<Deletion> {
        self.check_dataset(name)?;
        let d = Deletion {
            time: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            author: author.to_string(),
            nonce: hex::encode(rand::random::<[u8; 16]>()),
        };
        let body = serde_json::to_vec_pretty(&d).expect("serializable");
        if !self.store.put_create(&keys::deleted(name), body.into())? {
            // Another host deleted it first: say so, with its tombstone.
            self.check_dataset(name)?;
        }
        Ok(d)
    }

    /// Brings back a deleted dataset whose records gc has not removed:
    /// refused once its tombstone is older than gc's minimum grace.
    pub fn undelete_dataset(&self, name: &str) -> Result<()> {
        crate::repo::validate_name(name)?;
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
        if age.is_none_or(|a| a >= crate::gc::min_grace()) {
            return Err(Error::InvalidInput(format!(
                "dataset {name:?} was deleted at {}, longer ago than gc's grace: gc may have removed its versions, so it stays deleted",
                d.time
            )));
        }
        self.store.delete(&keys::deleted(name))
    }
}
