//! The policy's history in the store: `policy/records/N.json`, each made
//! by a conditional create (two admins setting at once: one wins) and
//! carrying the SHA-256 of the one before, like a dataset's records. Every
//! host, mount and gateway reads the same chain; a break in it, or a
//! newest policy that does not parse, is an error (readers fail closed).

use super::Repo;
use crate::access::policy::{ALL_DATASETS, Action, Policy, Who};
use crate::error::{Error, Result};
use crate::id::RecordHash;
use crate::limits;
use crate::store::keys;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRecord {
    pub version: u64,
    /// SHA-256 of the previous record's bytes; None only for the first.
    pub parent: Option<RecordHash>,
    /// RFC 3339, UTC.
    pub time: String,
    pub author: String,
    pub message: String,
    /// The policy text as set (YAML).
    pub policy: String,
    /// Makes each body unique (see `Store::put_create`).
    pub nonce: String,
}

/// A record as read, with the hash its successor must carry.
#[derive(Clone, Debug)]
pub struct Stored {
    pub record: PolicyRecord,
    pub hash: RecordHash,
}

fn decode(bytes: &[u8], key: &str) -> Result<PolicyRecord> {
    if bytes.len() as u64 > limits::MAX_SMALL_OBJECT {
        return Err(Error::malformed(key, "too large for a policy record"));
    }
    let r: PolicyRecord =
        serde_json::from_slice(bytes).map_err(|e| Error::malformed(key, e.to_string()))?;
    if keys::policy_record(r.version) != key
        || humantime::parse_rfc3339(&r.time).is_err()
        || (r.version == 1) != r.parent.is_none()
    {
        return Err(Error::malformed(
            key,
            "policy record does not match its key",
        ));
    }
    Ok(r)
}

/// Whether `r` is the record after `prev` (version, hash), or the first.
fn follows(prev: Option<(u64, RecordHash)>, r: &PolicyRecord) -> bool {
    match prev {
        Some((v, h)) => r.version == v + 1 && r.parent == Some(h),
        None => r.version == 1 && r.parent.is_none(),
    }
}

fn broken(n: u64, prev: Option<(u64, RecordHash)>) -> Error {
    Error::malformed(
        keys::policy_record(n),
        format!(
            "the policy history is broken: v{n} does not follow v{} (its parent hash or number differs)",
            prev.map_or(0, |p| p.0)
        ),
    )
}

/// The newest record's policy, parsed.
fn in_force(history: &[Stored]) -> Result<Option<(u64, Policy)>> {
    let Some(last) = history.last() else {
        return Ok(None);
    };
    let policy = Policy::parse(&last.record.policy)
        .map_err(|e| Error::malformed(keys::policy_record(last.record.version), e.to_string()))?;
    Ok(Some((last.record.version, policy)))
}

/// Policy records read so far, oldest first, their chain checked.
#[derive(Default)]
pub(super) struct PolicyCache(Mutex<Vec<Stored>>);

impl Repo {
    /// Policy records listed after `offset`: each with the hash of its
    /// bytes, or what is wrong with it.
    fn fetch_policy(
        &self,
        offset: Option<&str>,
    ) -> Result<Vec<(u64, RecordHash, Result<PolicyRecord>)>> {
        let listed: Vec<(u64, String)> = self
            .store
            .list(keys::POLICY_RECORDS, offset)?
            .into_iter()
            .filter_map(|l| keys::policy_record_number(&l.key).map(|n| (n, l.key)))
            .collect();
        let keys: Vec<String> = listed.iter().map(|(_, k)| k.clone()).collect();
        let mut out = Vec::with_capacity(keys.len());
        for ((n, key), got) in listed.iter().zip(self.store.get_many(&keys)?) {
            let Some(bytes) = got else { continue };
            out.push((*n, RecordHash::of(&bytes), decode(&bytes, key)));
        }
        Ok(out)
    }

    /// Every policy record, oldest first, with the chain checked: a break
    /// is an error (the policy in force cannot be told).
    pub fn policy_history(&self) -> Result<Vec<Stored>> {
        let lock = || self.policy.0.lock();
        // Not held across the store's answers: a second caller may fetch
        // the same records, which the merge below skips.
        let offset = lock().last().map(|s| keys::policy_record(s.record.version));
        let fetched = self.fetch_policy(offset.as_deref())?;
        let mut known = lock();
        let mut all = known.clone();
        let have = all.last().map_or(0, |s| s.record.version);
        for (n, hash, record) in fetched.into_iter().filter(|f| f.0 > have) {
            let record = record?;
            let prev = all.last().map(|p: &Stored| (p.record.version, p.hash));
            if !follows(prev, &record) {
                return Err(broken(n, prev));
            }
            all.push(Stored { record, hash });
        }
        *known = all.clone();
        Ok(all)
    }

    /// The whole policy history read anew, each record with what breaks
    /// the chain at it (for `audit`).
    pub fn policy_audit(&self) -> Result<Vec<(u64, RecordHash, Result<PolicyRecord>)>> {
        let mut out = self.fetch_policy(None)?;
        let mut prev = None;
        for (n, hash, record) in &mut out {
            if let Ok(r) = record
                && !follows(prev, r)
            {
                *record = Err(broken(*n, prev));
            }
            prev = Some((*n, *hash));
        }
        Ok(out)
    }

    /// Whether `who` may do `action` on `resource` under the policy in
    /// force (anything, if none was ever set): the one check every caller
    /// of a dataset's lifecycle (CLI, Python) goes through.
    pub fn require(&self, who: &Who, action: Action, resource: &str) -> Result<()> {
        let Some((version, policy)) = self.current_policy()? else {
            return Ok(());
        };
        let d = policy.decide(who, action, &[resource.to_string()]);
        if d.allowed {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "{} on {resource}: {} (policy v{version})",
            action.name(),
            d.explain()
        )))
    }

    /// The policy in force: the newest record's, parsed; None if no policy
    /// was ever set (then nothing is checked).
    pub fn current_policy(&self) -> Result<Option<(u64, Policy)>> {
        in_force(&self.policy_history()?)
    }

    /// Sets a new policy: checked first (it must parse and leave an admin),
    /// and `who` must be an admin under the policy in force, if any.
    /// Returns the new policy version.
    pub fn set_policy(&self, text: &str, who: &Who, author: &str, message: &str) -> Result<u64> {
        Policy::parse(text)?;
        self.check_store(false)?;
        let history = self.policy_history()?;
        if let Some((_, current)) = in_force(&history)? {
            let d = current.decide(who, Action::Admin, &[ALL_DATASETS.to_string()]);
            if !d.allowed {
                return Err(Error::Forbidden(format!(
                    "setting the policy needs dataset:admin on {ALL_DATASETS} ({})",
                    d.explain()
                )));
            }
        }
        let last = history.last();
        let record = PolicyRecord {
            version: last.map_or(1, |s| s.record.version + 1),
            parent: last.map(|s| s.hash),
            time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            author: author.to_string(),
            message: message.to_string(),
            policy: text.to_string(),
            nonce: hex::encode(rand::random::<[u8; 16]>()),
        };
        let mut body = serde_json::to_vec_pretty(&record).expect("serializable");
        body.push(b'\n');
        if body.len() as u64 > limits::MAX_SMALL_OBJECT {
            return Err(Error::InvalidInput(
                "policy and message are too long".into(),
            ));
        }
        if !self
            .store
            .put_create(&keys::policy_record(record.version), body.into())?
        {
            return Err(Error::InvalidInput(format!(
                "the policy was changed meanwhile (v{} exists now): look at it (detafs policy show) and set yours again",
                record.version
            )));
        }
        Ok(record.version)
    }
}
