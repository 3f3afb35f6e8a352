//! Tags: immutable names for versions (`2024-q1`), created like records
//! with a conditional create, so two hosts tagging at once cannot both win.
//! A tag carries the hash of the record it names: it cannot come to mean
//! another version. Version specs (`latest~1`, `v3`, `TAG~2`) resolve here.

use crate::error::{Error, Result};
use crate::id::RecordHash;
use crate::limits;
use crate::repo::Repo;
use crate::snapshot::Record;
use crate::store::keys;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tag {
    pub dataset: String,
    pub tag: String,
    pub version: u64,
    /// SHA-256 of the tagged record's stored bytes.
    pub record: RecordHash,
    /// RFC 3339, UTC.
    pub time: String,
    pub author: String,
    /// Random: makes each body unique, as a conditional create needs
    /// (`Store::put_create`).
    pub nonce: String,
}

/// A tag name: letters, digits, '-', '_', '.', up to 100 bytes; not
/// `latest`, not a version (`3`, `v3`: nothing that starts with `v`, so the
/// glob `versions/v*` matches versions only), not starting with '.' or '-'.
pub fn validate(tag: &str) -> Result<()> {
    let ok = crate::limits::plain_name(tag)
        && tag != "latest"
        && tag != "staging"
        && !tag.starts_with(['-', 'v'])
        && !tag.bytes().all(|b| b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "invalid tag {tag:?}: use letters, digits, '-', '_' and '.'; not starting with 'v', '.' or '-', not all digits, not \"latest\" or \"staging\""
        )))
    }
}

impl Tag {
    pub(crate) fn decode(bytes: &[u8], key: &str, dataset: &str) -> Result<Tag> {
        if bytes.len() as u64 > limits::MAX_SMALL_OBJECT {
            return Err(Error::malformed(key, "too large for a tag"));
        }
        let t: Tag =
            serde_json::from_slice(bytes).map_err(|e| Error::malformed(key, e.to_string()))?;
        if t.dataset != dataset
            || keys::tag(dataset, &t.tag) != key
            || validate(&t.tag).is_err()
            || humantime::parse_rfc3339(&t.time).is_err()
        {
            return Err(Error::malformed(key, "tag does not match its key"));
        }
        Ok(t)
    }
}

/// Tags read so far, by key (they never change); None for one that does
/// not decode or names another record than its version's.
#[derive(Default)]
pub(super) struct TagCache(Mutex<BTreeMap<String, Option<Tag>>>);

impl Repo {
    /// The dataset's tags of versions synced so far, by name. Bodies are
    /// read once per process: tags never change.
    pub fn tags(&self, dataset: &str) -> Result<Vec<Tag>> {
        if let Some(said) = self.said_tags(dataset) {
            return said;
        }
        let listed = self.store.list(&keys::tags(dataset), None)?;
        let mut known = self.tags.0.lock();
        let missing: Vec<String> = listed
            .into_iter()
            .map(|l| l.key)
            .filter(|k| keys::tag_name(dataset, k).is_some() && !known.contains_key(k))
            .collect();
        for (key, bytes) in missing.iter().zip(self.store.get_many(&missing)?) {
            if let Some(bytes) = bytes {
                // A damaged tag names nothing (`verify` reports it); said once.
                let tag = Tag::decode(&bytes, key, dataset)
                    .inspect_err(|e| tracing::warn!("ignoring a tag: {e}"))
                    .ok();
                known.insert(key.clone(), tag);
            }
        }
        // A tag names its record by hash: one that names another record
        // of that version is forged or damaged (dropped, said once); one of a
        // version not synced yet waits for it.
        let prefix = keys::tags(dataset);
        let mut tags = Vec::new();
        for (key, slot) in known.range_mut(prefix.clone()..) {
            if !key.starts_with(&prefix) {
                break;
            }
            let Some(t) = slot else { continue };
            match self.index.record_hash(dataset, t.version)? {
                Some(h) if h == t.record => tags.push(t.clone()),
                Some(_) => {
                    tracing::warn!(
                        "ignoring tag {key}: it does not name the record of v{}",
                        t.version
                    );
                    *slot = None;
                }
                None => {}
            }
        }
        drop(known);
        // A tag of an expired version names nothing served.
        let lc = self.lifecycle_known(dataset)?;
        tags.retain(|t| !lc.is_expired(t.version));
        Ok(tags)
    }

    /// Names version `spec` of `dataset` `tag`; refused if the tag exists.
    pub fn create_tag(&self, dataset: &str, spec: &str, tag: &str, author: &str) -> Result<Tag> {
        validate(tag)?;
        self.check_store(false)?;
        let record = self.version(dataset, spec)?;
        let hash = self
            .index
            .record_hash(dataset, record.version)?
            .ok_or_else(|| Error::InvalidInput(format!("v{} is not indexed", record.version)))?;
        let t = Tag {
            dataset: dataset.to_string(),
            tag: tag.to_string(),
            version: record.version,
            record: hash,
            time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            author: author.to_string(),
            nonce: hex::encode(rand::random::<[u8; 16]>()),
        };
        if !self.put_tag(&t)? {
            let existing = self.tags(dataset)?.into_iter().find(|x| x.tag == tag);
            return Err(Error::InvalidInput(match existing {
                Some(x) => format!("tag {tag} already names v{} (tags never move)", x.version),
                None => format!("tag {tag} already exists"),
            }));
        }
        crate::hold::hold("tag-made");
        Ok(t)
    }

    /// Creates tag `t`; false if one of that name exists.
    pub(crate) fn put_tag(&self, t: &Tag) -> Result<bool> {
        let mut body = serde_json::to_vec_pretty(t).expect("serializable");
        body.push(b'\n');
        self.store
            .put_create(&keys::tag(&t.dataset, &t.tag), body.into())
    }

    /// Resolves a version spec: `latest`, `v3`, `3` or a tag, each
    /// optionally followed by `~N` (N versions before it).
    /// The versions of `dataset`, oldest first, each as `detafs log --json`
    /// shows it (docs/cli.md names the fields): its record's log entry and
    /// its tags.
    pub fn log_entries(&self, dataset: &str) -> Result<Vec<serde_json::Value>> {
        self.check_dataset(dataset)?;
        let records = self.sync(dataset)?;
        self.log_entries_of(dataset, &records)
    }

    /// `log_entries` of `records` (some of `dataset`'s versions).
    pub fn log_entries_of(
        &self,
        dataset: &str,
        records: &[Record],
    ) -> Result<Vec<serde_json::Value>> {
        let mut tags: std::collections::HashMap<u64, Vec<String>> = Default::default();
        for t in self.tags(dataset)? {
            tags.entry(t.version).or_default().push(t.tag);
        }
        Ok(records
            .iter()
            .map(|r| {
                let mut e = r.log_entry_seen(self.figures_withheld(dataset));
                e["tags"] = serde_json::json!(tags.remove(&r.version).unwrap_or_default());
                e
            })
            .collect())
    }

    pub fn version(&self, dataset: &str, spec: &str) -> Result<Record> {
        self.check_dataset(dataset)?;
        let records = self.sync(dataset)?;
        resolve(dataset, spec, &records, || self.tags(dataset)).map_err(|e| {
            // A version at or after a damaged record is not served: why.
            let asked = spec.split('~').next().and_then(number_of);
            match (e, self.damage(dataset)) {
                (Error::NoVersion { .. }, Some(d)) if asked.is_some_and(|n| n >= d.version) => {
                    d.error(dataset)
                }
                (e @ Error::NoVersion { .. }, _) => self.expired_error(dataset, asked).unwrap_or(e),
                (e, _) => e,
            }
        })
    }
}

/// The record `spec` names among `records` (oldest first); `tags` is asked
/// only when the spec is a tag name.
pub fn resolve(
    dataset: &str,
    spec: &str,
    records: &[Record],
    tags: impl FnOnce() -> Result<Vec<Tag>>,
) -> Result<Record> {
    let no_version = || Error::NoVersion {
        dataset: dataset.to_string(),
        version: spec.to_string(),
    };
    let (base, back) = match spec.split_once('~') {
        Some((base, n)) => (
            base,
            digits(n.as_bytes()).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "bad version {spec:?}: after '~' comes a number of versions back"
                ))
            })?,
        ),
        None => (spec, 0),
    };
    let number = if base == "latest" {
        records.last().map(|r| r.version)
    } else if let Some(n) = number_of(base) {
        Some(n)
    } else if validate(base).is_ok() {
        match tags()?.into_iter().find(|t| t.tag == base) {
            Some(t) => Some(t.version),
            None => return Err(no_version()),
        }
    } else {
        return Err(Error::InvalidInput(format!(
            "bad version {spec:?}: use v3, 3, latest or a tag, optionally with ~N (latest~1)"
        )));
    };
    number
        .and_then(|n| n.checked_sub(back))
        .and_then(|n| records.iter().find(|r| r.version == n))
        .cloned()
        .ok_or_else(no_version)
}

/// `v3` or `3` (the CLI's, the gateway's and Python's spellings).
pub fn number_of(spec: &str) -> Option<u64> {
    match spec.strip_prefix('v') {
        Some(_) => version_name(spec.as_bytes()),
        None => digits(spec.as_bytes()),
    }
}

/// The one spelling of a version's name, `vN` (as `versions/` lists it):
/// `v` and N's digits, no sign, no leading zero. Every reader of a version
/// name (the mount's `versions/`, version specs) decides by this, so
/// `v01` or `v+1` is no version anywhere.
pub fn version_name(name: &[u8]) -> Option<u64> {
    digits(name.strip_prefix(b"v")?)
}

/// A number written as `Display` writes it: digits only, no leading zero.
fn digits(text: &[u8]) -> Option<u64> {
    let canonical = match text {
        [] => false,
        [b'0', _, ..] => false,
        _ => text.iter().all(u8::is_ascii_digit),
    };
    canonical
        .then(|| std::str::from_utf8(text).ok()?.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_names_cannot_pass_for_versions() {
        for ok in ["2024-q1", "release", "Q1.final", "x_1"] {
            assert!(validate(ok).is_ok(), "{ok}");
        }
        let too_long = "a".repeat(101);
        for bad in [
            "",
            "latest",
            "v3",
            "validated",
            "3",
            ".hidden",
            "-x",
            "a/b",
            "a~1",
            "a b",
            &too_long,
        ] {
            assert!(validate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn numbers_parse_as_versions() {
        assert_eq!(number_of("v3"), Some(3));
        assert_eq!(number_of("3"), Some(3));
        assert_eq!(number_of("v"), None);
        assert_eq!(number_of("v-1"), None);
        assert_eq!(number_of("v99999999999999999999999"), None);
    }
}
