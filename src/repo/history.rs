//! A dataset's versions as this host serves them: records fetched from the
//! store in order, each checked against its key, its number (no gap) and
//! the hash of the one before it, then indexed. The first that fails the
//! check stops the fetch: the versions before it are served, it is kept
//! as the dataset's damage (told by `log`, health and `verify`), and no
//! later one is served as if the chain were whole; a commit onto such a
//! history is refused (`sync_whole`). A host that indexed the versions
//! before the damage keeps serving them from its index.

use super::Repo;
use crate::error::{Error, Result};
use crate::id::{BlobId, RecordHash};
use crate::snapshot::Record;
use crate::store::keys;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;

/// The first version record of a dataset that did not check out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub version: u64,
    pub why: String,
}

pub(super) type Damages = Mutex<HashMap<String, Damage>>;

impl Repo {
    /// Reads records newer than the newest one indexed (records are
    /// immutable, so nothing older is re-read) and returns the versions
    /// served, oldest first: those before any damage (`damage`).
    /// Expired versions are not served (`lifecycle.rs`): every reader
    /// (mount, CLI, gateway, S3, Python) comes through here.
    pub fn sync(&self, name: &str) -> Result<Vec<Record>> {
        if let Some(said) = self.ask_upstream(name) {
            return said;
        }
        self.fetch_new_records(name)?;
        self.served(name, self.index.records(name)?)
    }

    /// `records` without the expired versions, each with the root its
    /// erasures gave it.
    fn served(&self, name: &str, records: Vec<Record>) -> Result<Vec<Record>> {
        let lc = self.lifecycle(name)?;
        let mut records = lc.rooted(records);
        if !lc.expired.is_empty() {
            records.retain(|r| !lc.is_expired(r.version));
        }
        Ok(records)
    }

    /// Every version record of the chain, expired ones too (what gc,
    /// rename and retention decide on); a damaged history is an error.
    pub fn chain_records(&self, name: &str) -> Result<Vec<Record>> {
        if let Some(said) = self.ask_upstream(name) {
            return said;
        }
        self.fetch_new_records(name)?;
        match self.damage(name) {
            Some(d) => Err(d.error(name)),
            None => Ok(self.lifecycle(name)?.rooted(self.index.records(name)?)),
        }
    }

    /// The versions known here without asking again: those indexed (an
    /// expired one too: staging may stand on it), or those upstream gave
    /// last (staging's base is among them).
    pub fn known_records(&self, name: &str) -> Result<Vec<Record>> {
        if let Some(said) = self.said_records(name) {
            return said;
        }
        // Without asking the store: the log as the last sync left it.
        Ok(self
            .lifecycle_known(name)?
            .rooted(self.index.records(name)?))
    }

    /// `sync` for what builds on the newest version (a commit, a copy of
    /// the history, gc): a damaged history is an error.
    pub fn sync_whole(&self, name: &str) -> Result<Vec<Record>> {
        let records = self.sync(name)?;
        match self.damage(name) {
            Some(d) => Err(d.error(name)),
            None => Ok(records),
        }
    }

    /// The damage the last fetch of dataset `name` met, if any.
    pub fn damage(&self, name: &str) -> Option<Damage> {
        self.damage.lock().get(name).cloned()
    }

    /// The dataset's records if they are not those `known` any more (a
    /// version added; through a gateway, one hidden, or all shown under
    /// another policy), else None: most polls find nothing new, and read
    /// nothing more. `known` is read only between the reads, never held
    /// across them.
    pub fn changed_records(
        &self,
        name: &str,
        known: &RwLock<Vec<Record>>,
    ) -> Result<Option<Changed>> {
        if let Some(said) = self.ask_upstream(name) {
            let said = said?;
            let known = known.read();
            let roots: HashMap<u64, BlobId> =
                known.iter().map(|r| (r.version, r.tree.id)).collect();
            // A version's root shown under another policy is another tree.
            let reshown = said
                .iter()
                .any(|r| roots.get(&r.version).is_some_and(|t| *t != r.tree.id))
                || gone(&known, &said);
            let same = !reshown
                && said.len() == known.len()
                && said.iter().all(|r| roots.contains_key(&r.version));
            return Ok((!same).then_some(Changed {
                records: said,
                reshown,
            }));
        }
        let newest = self.fetch_new_records(name)?;
        let lc = self.lifecycle(name)?;
        let (expired, rerooted) = {
            let known = known.read();
            let rerooted = known.iter().any(|r| {
                lc.roots
                    .get(&r.version)
                    .is_some_and(|root| root.id != r.tree.id)
            });
            (known.iter().any(|r| lc.is_expired(r.version)), rerooted)
        };
        if !expired && !rerooted && newest <= known.read().last().map_or(0, |r| r.version) {
            return Ok(None);
        }
        let records = self.served(name, self.index.records(name)?)?;
        Ok(Some(Changed {
            reshown: rerooted || gone(&known.read(), &records),
            records,
        }))
    }

    /// Indexes records newer than the newest one indexed, up to the first
    /// that does not check out; returns the newest version now known.
    pub fn fetch_new_records(&self, name: &str) -> Result<u64> {
        let known = self.index.latest_version(name)?;
        let offset = (known > 0).then(|| keys::record(name, known));
        let listed = self.store.list(&keys::records(name), offset.as_deref())?;
        if known == 0 && listed.is_empty() {
            // No records: is there a dataset at all? (A poll that finds
            // nothing new costs one LIST, nothing more.) A deleted one still
            // has its records, for gc and undelete.
            crate::limits::validate_name(name)?;
            if self.store.get(&keys::dataset(name))?.is_none() {
                return Err(Error::NoDataset(name.to_string()));
            }
        }
        // Only keys a record can have: anything else under records/ (a
        // stray upload, say) is not a version; `verify` reports it.
        let keys: Vec<String> = listed
            .into_iter()
            .map(|l| l.key)
            .filter(|k| keys::record_number(name, k).is_some())
            .collect();
        let mut parent = match known {
            0 => None,
            v => self.index.record_hash(name, v)?,
        };
        let mut damage = None;
        for (i, (key, bytes)) in keys.iter().zip(self.store.get_each(&keys)?).enumerate() {
            let expected = known + 1 + i as u64;
            let checked = match bytes {
                Ok(Some(bytes)) => self.check(name, key, expected, parent, bytes),
                // Listed, then gone: a gap like any other.
                Ok(None) => Err(Error::malformed(key, "listed, but not in the store")),
                Err(e) => Err(e),
            };
            match checked {
                Ok((record, bytes)) => {
                    let hash = RecordHash::of(&bytes);
                    self.index
                        .insert_record(name, record.version, hash, &bytes)?;
                    parent = Some(hash);
                }
                Err(Error::Malformed { what, detail }) => {
                    damage = Some(Damage {
                        version: expected,
                        why: format!("{what}: {detail}"),
                    });
                    break;
                }
                // The store could not be read: nothing is known of the rest.
                Err(e) => return Err(e),
            }
        }
        match damage {
            Some(d) => {
                self.damage.lock().insert(name.to_string(), d);
            }
            None => {
                self.damage.lock().remove(name);
            }
        }
        self.index.latest_version(name)
    }

    /// Record `key` (`bytes`), which must be version `expected` of `name`
    /// and carry `parent`, the hash of the record before it.
    fn check(
        &self,
        name: &str,
        key: &str,
        expected: u64,
        parent: Option<RecordHash>,
        bytes: bytes::Bytes,
    ) -> Result<(Record, bytes::Bytes)> {
        if keys::record(name, expected) != key {
            return Err(Error::malformed(
                key,
                format!("v{expected} is missing from the store"),
            ));
        }
        let record = Record::decode(&bytes, key)?;
        if record.version != expected || record.dataset != name {
            return Err(Error::malformed(key, "record does not match its key"));
        }
        if record.format != self.codec.format() {
            return Err(Error::malformed(
                key,
                format!(
                    "record format {} in a store of format {}",
                    record.format,
                    self.codec.format()
                ),
            ));
        }
        if record.parent != parent {
            return Err(Error::malformed(
                key,
                format!(
                    "its parent hash is not that of v{}: the chain is broken",
                    expected - 1
                ),
            ));
        }
        Ok((record, bytes))
    }
}

impl Damage {
    /// The error a command that needs the whole history meets.
    pub fn error(&self, dataset: &str) -> Error {
        Error::DamagedHistory {
            dataset: dataset.to_string(),
            version: self.version,
            why: self.why.clone(),
        }
    }
}

/// What a poll found new (`Repo::changed_records`).
pub struct Changed {
    pub records: Vec<Record>,
    /// A version known before has another root now (through a gateway,
    /// shown under another policy), or is gone (expired, or hidden): what
    /// was shown of it is another folder, or none.
    pub reshown: bool,
}

/// Whether a version of `known` is not among `now`.
fn gone(known: &[Record], now: &[Record]) -> bool {
    let now: std::collections::HashSet<u64> = now.iter().map(|r| r.version).collect();
    known.iter().any(|r| !now.contains(&r.version))
}
