//! A dataset's life under compliance: its retention rules, the versions
//! expired, its legal holds. One hash-chained log per dataset in the store
//! (`datasets/NAME/lifecycle/N.json`), each entry made by a conditional
//! create and carrying the SHA-256 of the one before, as version and policy
//! records do; entries are never removed, so who expired what, when and
//! under which rule stays on record. Folding the log gives the dataset's
//! `Lifecycle`, which every reader goes through: `Repo::sync` serves no
//! expired version, so the mount, the CLI, the gateway, S3 and Python
//! agree that it is missing.

use super::Repo;
use crate::error::{Error, Result};
use crate::id::{PackId, RecordHash};
use crate::limits;
use crate::store::keys;
use crate::store::pack::BlobRef;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

/// The retention rules of a dataset: restic's `forget` vocabulary, plus a
/// minimum age below which nothing expires (`lock`ed: never shortened).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rules {
    pub keep_last: u32,
    pub keep_hourly: u32,
    pub keep_daily: u32,
    pub keep_weekly: u32,
    pub keep_monthly: u32,
    pub keep_yearly: u32,
    /// Seconds before the newest version's time: every version within is kept.
    pub keep_within: u64,
    pub keep_tagged: bool,
    /// Seconds: a version younger than this is never expired or erased.
    pub min_age: u64,
    /// The minimum age may only grow, and the lock never goes.
    pub locked: bool,
}

impl Rules {
    /// Whether these rules keep nothing beyond the newest version (then
    /// `forget` without versions named would expire all the rest).
    pub fn keep_nothing(&self) -> bool {
        let Rules {
            keep_last,
            keep_hourly,
            keep_daily,
            keep_weekly,
            keep_monthly,
            keep_yearly,
            keep_within,
            keep_tagged,
            min_age: _,
            locked: _,
        } = self;
        [
            *keep_last,
            *keep_hourly,
            *keep_daily,
            *keep_weekly,
            *keep_monthly,
            *keep_yearly,
        ]
        .iter()
        .all(|n| *n == 0)
            && *keep_within == 0
            && !keep_tagged
    }

    /// One line, in the flags' words (`--keep-last 3 --keep-daily 7`).
    pub fn describe(&self) -> String {
        let mut words = Vec::new();
        for (flag, n) in [
            ("--keep-last", self.keep_last),
            ("--keep-hourly", self.keep_hourly),
            ("--keep-daily", self.keep_daily),
            ("--keep-weekly", self.keep_weekly),
            ("--keep-monthly", self.keep_monthly),
            ("--keep-yearly", self.keep_yearly),
        ] {
            if n > 0 {
                words.push(format!("{flag} {n}"));
            }
        }
        let dur = |s: u64| humantime::format_duration(Duration::from_secs(s)).to_string();
        if self.keep_within > 0 {
            words.push(format!("--keep-within {}", dur(self.keep_within)));
        }
        if self.keep_tagged {
            words.push("--keep-tagged".into());
        }
        if self.min_age > 0 {
            words.push(format!("--min-age {}", dur(self.min_age)));
        }
        if self.locked {
            words.push("--lock".into());
        }
        if words.is_empty() {
            return "(none: only the newest version is kept by rule)".into();
        }
        words.join(" ")
    }
}

/// What an entry of the log records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// New rules in force.
    Retention {
        rules: Rules,
    },
    /// Versions expired, and why: `named` (by `forget NAME VERSION`) or
    /// the rules that did not keep them.
    Expire {
        versions: Vec<u64>,
        rule: String,
    },
    /// A legal hold: the version is never expired or erased until released.
    Hold {
        version: u64,
        reason: String,
    },
    Release {
        version: u64,
        reason: String,
    },
    /// An attempt to shorten a locked minimum age, refused (kept on record).
    Refused {
        asked: String,
    },
    /// The bytes of `path` erased from `versions`: each now has the root
    /// in `roots` (the path's files marked erased), and the blobs only the
    /// old trees reached lay at `sweep`, zeroed in their packs. Nothing
    /// here is of the erased content: places and sizes only.
    Erase {
        path: String,
        versions: Vec<u64>,
        reason: String,
        roots: Vec<(u64, BlobRef)>,
        sweep: Vec<Span>,
    },
}

/// Where an erased blob lay in its pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Span {
    pub pack: PackId,
    pub offset: u64,
    pub len: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub seq: u64,
    /// SHA-256 of the previous entry's bytes; None only for the first.
    pub parent: Option<RecordHash>,
    /// RFC 3339, UTC.
    pub time: String,
    pub author: String,
    pub event: Event,
    /// Makes each body unique (see `Store::put_create`).
    pub nonce: String,
}

/// An entry as read, with the hash its successor must carry.
#[derive(Clone, Debug)]
pub struct Stored {
    pub entry: Entry,
    pub hash: RecordHash,
}

/// When, by whom and why a version expired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expiry {
    pub time: String,
    pub author: String,
    pub rule: String,
}

impl Expiry {
    pub fn when(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339(&self.time).ok()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub reason: String,
    pub author: String,
    pub time: String,
}

/// A dataset's state under its log.
#[derive(Clone, Debug, Default)]
pub struct Lifecycle {
    pub rules: Rules,
    pub expired: BTreeMap<u64, Expiry>,
    pub holds: BTreeMap<u64, Hold>,
    /// Versions with erased paths: the root each is served with.
    pub roots: BTreeMap<u64, BlobRef>,
    /// Every erasure's spans, to be zeroed (again, after a crash).
    pub sweeps: Vec<Span>,
}

impl Lifecycle {
    pub fn of(entries: &[Stored]) -> Lifecycle {
        let mut lc = Lifecycle::default();
        for s in entries {
            let e = &s.entry;
            match &e.event {
                Event::Retention { rules } => lc.rules = rules.clone(),
                Event::Expire { versions, rule } => {
                    for v in versions {
                        lc.expired.insert(
                            *v,
                            Expiry {
                                time: e.time.clone(),
                                author: e.author.clone(),
                                rule: rule.clone(),
                            },
                        );
                    }
                }
                Event::Hold { version, reason } => {
                    lc.holds.insert(
                        *version,
                        Hold {
                            reason: reason.clone(),
                            author: e.author.clone(),
                            time: e.time.clone(),
                        },
                    );
                }
                Event::Release { version, .. } => {
                    lc.holds.remove(version);
                }
                Event::Refused { .. } => {}
                Event::Erase { roots, sweep, .. } => {
                    lc.roots.extend(roots.iter().copied());
                    lc.sweeps.extend(sweep.iter().copied());
                }
            }
        }
        lc
    }

    pub fn is_expired(&self, version: u64) -> bool {
        self.expired.contains_key(&version)
    }

    /// `records` with the roots erasures gave them.
    pub fn rooted(
        &self,
        mut records: Vec<crate::snapshot::Record>,
    ) -> Vec<crate::snapshot::Record> {
        if !self.roots.is_empty() {
            for r in &mut records {
                if let Some(root) = self.roots.get(&r.version) {
                    r.tree = *root;
                }
            }
        }
        records
    }
}

fn decode(bytes: &[u8], key: &str, seq: u64) -> Result<Entry> {
    if bytes.len() as u64 > limits::MAX_SMALL_OBJECT {
        return Err(Error::malformed(key, "too large for a lifecycle entry"));
    }
    let e: Entry =
        serde_json::from_slice(bytes).map_err(|e| Error::malformed(key, e.to_string()))?;
    if e.seq != seq
        || humantime::parse_rfc3339(&e.time).is_err()
        || (seq == 1) != e.parent.is_none()
    {
        return Err(Error::malformed(
            key,
            "lifecycle entry does not match its key",
        ));
    }
    Ok(e)
}

fn follows(prev: Option<(u64, RecordHash)>, e: &Entry) -> bool {
    match prev {
        Some((n, h)) => e.seq == n + 1 && e.parent == Some(h),
        None => e.seq == 1 && e.parent.is_none(),
    }
}

fn broken(dataset: &str, n: u64, prev: Option<(u64, RecordHash)>) -> Error {
    Error::malformed(
        keys::lifecycle_entry(dataset, n),
        format!(
            "the lifecycle log of {dataset} is broken: entry {n} does not follow entry {} (its parent hash or number differs)",
            prev.map_or(0, |p| p.0)
        ),
    )
}

/// Entries read so far, by dataset, oldest first, their chain checked.
#[derive(Default)]
pub(super) struct LifecycleCache(Mutex<HashMap<String, Vec<Stored>>>);

/// An entry read back, with its hash, or what is wrong with it.
pub type Audited = (u64, RecordHash, Result<Entry>);

impl Repo {
    /// Entries of `dataset`'s log listed after `offset`.
    fn fetch_lifecycle(&self, dataset: &str, offset: Option<&str>) -> Result<Vec<Audited>> {
        let listed: Vec<(u64, String)> = self
            .store
            .list(&keys::lifecycle(dataset), offset)?
            .into_iter()
            .filter_map(|l| keys::lifecycle_seq(dataset, &l.key).map(|n| (n, l.key)))
            .collect();
        let keys: Vec<String> = listed.iter().map(|(_, k)| k.clone()).collect();
        let mut out = Vec::with_capacity(keys.len());
        for ((n, key), got) in listed.iter().zip(self.store.get_many(&keys)?) {
            let Some(bytes) = got else { continue };
            out.push((*n, RecordHash::of(&bytes), decode(&bytes, key, *n)));
        }
        Ok(out)
    }

    /// `dataset`'s log, oldest first, its chain checked: a break is an
    /// error (which versions expired cannot be told, so none is served).
    /// Through a gateway there is none here: the gateway serves no expired
    /// version.
    pub fn lifecycle_log(&self, dataset: &str) -> Result<Vec<Stored>> {
        if self.upstream.is_some() {
            return Ok(Vec::new());
        }
        let lock = || self.lifecycle.0.lock();
        // Not held across the store's answers (as `policy_history`).
        let offset = lock()
            .get(dataset)
            .and_then(|l| l.last())
            .map(|s| keys::lifecycle_entry(dataset, s.entry.seq));
        let fetched = self.fetch_lifecycle(dataset, offset.as_deref())?;
        let mut known = lock();
        let all = known.entry(dataset.to_string()).or_default();
        let have = all.last().map_or(0, |s| s.entry.seq);
        for (n, hash, entry) in fetched.into_iter().filter(|f| f.0 > have) {
            let entry = entry?;
            let prev = all.last().map(|p| (p.entry.seq, p.hash));
            if !follows(prev, &entry) {
                return Err(broken(dataset, n, prev));
            }
            all.push(Stored { entry, hash });
        }
        Ok(all.clone())
    }

    /// `dataset`'s state under its log.
    pub fn lifecycle(&self, dataset: &str) -> Result<Lifecycle> {
        Ok(Lifecycle::of(&self.lifecycle_log(dataset)?))
    }

    /// `lifecycle` as this process last read it (read now if never): for
    /// what follows a `sync`, which read it just before.
    pub(super) fn lifecycle_known(&self, dataset: &str) -> Result<Lifecycle> {
        if let Some(log) = self.lifecycle.0.lock().get(dataset) {
            return Ok(Lifecycle::of(log));
        }
        self.lifecycle(dataset)
    }

    /// The error for version `asked` of `dataset` if it was expired: what
    /// `version` answers instead of "no such version".
    pub(super) fn expired_error(&self, dataset: &str, asked: Option<u64>) -> Option<Error> {
        let lc = self.lifecycle(dataset).ok()?;
        let e = lc.expired.get(&asked?)?;
        Some(Error::NoVersion {
            dataset: dataset.to_string(),
            version: format!(
                "v{} (expired {} by {}: {})",
                asked?, e.time, e.author, e.rule
            ),
        })
    }

    /// The whole log read anew, each entry with what breaks the chain at
    /// it (for `audit`).
    pub fn lifecycle_audit(&self, dataset: &str) -> Result<Vec<Audited>> {
        let mut out = self.fetch_lifecycle(dataset, None)?;
        let mut prev = None;
        for (n, hash, entry) in &mut out {
            if let Ok(e) = entry
                && !follows(prev, e)
            {
                *entry = Err(broken(dataset, *n, prev));
            }
            prev = Some((*n, *hash));
        }
        Ok(out)
    }

    /// Appends `event` to `dataset`'s log, onto the entries `after` (those
    /// the caller decided on): refused if another entry landed meanwhile,
    /// so no decision stands on a state it did not see.
    pub fn append_lifecycle(
        &self,
        dataset: &str,
        after: &[Stored],
        event: Event,
        author: &str,
    ) -> Result<Entry> {
        if self.upstream.is_some() {
            return Err(Error::InvalidInput(
                "retention, holds and forget are not offered through a gateway yet: run them on a host with the store's key".into(),
            ));
        }
        self.check_store(false)?;
        let last = after.last();
        let entry = Entry {
            seq: last.map_or(1, |s| s.entry.seq + 1),
            parent: last.map(|s| s.hash),
            time: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            author: author.to_string(),
            event,
            nonce: hex::encode(rand::random::<[u8; 16]>()),
        };
        let mut body = serde_json::to_vec(&entry).expect("serializable");
        body.push(b'\n');
        if body.len() as u64 > limits::MAX_SMALL_OBJECT {
            return Err(Error::InvalidInput(
                "too much for one lifecycle entry (name fewer versions, or a shorter reason)"
                    .into(),
            ));
        }
        let key = keys::lifecycle_entry(dataset, entry.seq);
        if !self.store.put_create(&key, body.into())? {
            return Err(Error::InvalidInput(format!(
                "the retention, holds or expiries of {dataset} changed meanwhile: look again and retry"
            )));
        }
        Ok(entry)
    }

    /// Copies `old`'s log to `new` as it is (a rename: the entries name no
    /// dataset, so their chain holds under the new name).
    pub(super) fn copy_lifecycle(&self, old: &str, new: &str) -> Result<()> {
        for listed in self.store.list(&keys::lifecycle(old), None)? {
            let Some(n) = keys::lifecycle_seq(old, &listed.key) else {
                continue;
            };
            if let Some(bytes) = self.store.get(&listed.key)? {
                self.store
                    .put_create(&keys::lifecycle_entry(new, n), bytes)?;
            }
        }
        Ok(())
    }
}
