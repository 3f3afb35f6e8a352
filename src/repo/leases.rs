//! Leases: a staging area's note in the store of the versions it stands
//! on (`datasets/NAME/leases/ID.json`). gc keeps an expired version's data
//! while a lease names it, so staging built on a version expired meanwhile
//! keeps working until it moves on. A host behind a gateway has its lease
//! written by the gateway, under the caller it stands for (its holder):
//! the gateway then serves that expired version to that caller alone, and
//! a lease only ever names versions the caller could read when it took
//! them, so a lease never opens what was expired before.

use super::Repo;
use crate::error::{Error, Result};
use crate::snapshot::Record;
use crate::store::keys;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::time::SystemTime;

/// The most versions one lease names (staging's base before and after a
/// move needs two; a mount's open files, one per version they are in).
const MAX_VERSIONS: usize = 64;

#[derive(Serialize, Deserialize)]
struct Lease {
    versions: Vec<u64>,
    #[serde(default)]
    time: String,
    /// Whom a gateway wrote it for (none: a host with the store's key):
    /// the caller's owner (`key:NAME` made again owns none of it) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    holder: Option<String>,
    /// ... and its name, as its commits' author (for the report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    by: Option<String>,
}

/// A lease's holder as a gateway names the caller.
pub struct Holder<'a> {
    /// What its staging belongs to (the gateway's `Caller::owner`).
    pub owner: &'a str,
    /// Its name (`key:NAME`, `token:SUBJECT`).
    pub name: &'a str,
}

/// The store's name of `holder`'s staging area `staging`: its own, so no
/// caller can replace another's lease.
fn held_id(holder: &str, staging: &str) -> String {
    let digest = Sha256::new()
        .chain_update(holder.as_bytes())
        .chain_update([0])
        .chain_update(staging.as_bytes())
        .finalize();
    hex::encode(&digest[..16])
}

/// A staging area's name as a host sends it: 1 to 64 hex digits.
fn check_staging(staging: &str) -> Result<()> {
    let ok = (1..=64).contains(&staging.len()) && staging.bytes().all(|b| b.is_ascii_hexdigit());
    match ok {
        true => Ok(()),
        false => Err(Error::InvalidInput(format!(
            "a staging area's lease name is 1 to 64 hex digits, not {staging:?}"
        ))),
    }
}

impl Repo {
    /// Notes that staging area `staging` stands on `versions` of `dataset`
    /// (its base, before and after a move): in the store, or through the
    /// gateway this host's datasets come from.
    pub fn lease_base(&self, dataset: &str, staging: &str, versions: &[u64]) -> Result<()> {
        if let Some(up) = self.upstream() {
            return up.lease(dataset, staging, versions);
        }
        self.write_lease(&keys::lease(dataset, staging), versions, None)
    }

    /// A gateway's `lease_base` for `holder`: each version is one the
    /// caller is served now (`served`, as the gateway shows them), or one
    /// this lease named already (staging moving off a version expired
    /// meanwhile).
    pub fn lease_for(
        &self,
        dataset: &str,
        holder: &Holder,
        staging: &str,
        versions: &[u64],
        served: &BTreeSet<u64>,
    ) -> Result<()> {
        check_staging(staging)?;
        if versions.len() > MAX_VERSIONS {
            return Err(Error::InvalidInput(format!(
                "a lease names at most {MAX_VERSIONS} versions"
            )));
        }
        let key = keys::lease(dataset, &held_id(holder.owner, staging));
        let had: BTreeSet<u64> = self
            .read_lease(&key)?
            .filter(|l| l.holder.as_deref() == Some(holder.owner))
            .map(|l| l.versions.into_iter().collect())
            .unwrap_or_default();
        if let Some(v) = versions
            .iter()
            .find(|v| !served.contains(v) && !had.contains(v))
        {
            return Err(Error::NoVersion {
                dataset: dataset.to_string(),
                version: format!("v{v}"),
            });
        }
        self.write_lease(&key, versions, Some(holder))
    }

    fn write_lease(&self, key: &str, versions: &[u64], holder: Option<&Holder>) -> Result<()> {
        let lease = Lease {
            versions: versions.to_vec(),
            time: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            holder: holder.map(|h| h.owner.to_string()),
            by: holder.map(|h| h.name.to_string()),
        };
        let body = serde_json::to_vec(&lease).expect("serializable");
        self.store.replace(key, body.into())
    }

    fn read_lease(&self, key: &str) -> Result<Option<Lease>> {
        let Some(bytes) = self.store.get(key)? else {
            return Ok(None);
        };
        // A lease that does not decode protects nothing, and is said.
        match serde_json::from_slice::<Lease>(&bytes) {
            Ok(l) => Ok(Some(l)),
            Err(e) => {
                tracing::warn!("ignoring lease {key}: {e}");
                Ok(None)
            }
        }
    }

    fn leases(&self, dataset: &str) -> Result<Vec<Lease>> {
        let listed = self.store.list(&keys::leases(dataset), None)?;
        let keys: Vec<String> = listed.into_iter().map(|l| l.key).collect();
        let mut out = Vec::new();
        for (key, got) in keys.iter().zip(self.store.get_many(&keys)?) {
            let Some(bytes) = got else { continue };
            match serde_json::from_slice::<Lease>(&bytes) {
                Ok(l) => out.push(l),
                Err(e) => tracing::warn!("ignoring lease {key}: {e}"),
            }
        }
        Ok(out)
    }

    /// The versions of `dataset` staging areas stand on (their leases).
    pub fn leased(&self, dataset: &str) -> Result<BTreeSet<u64>> {
        Ok(self
            .leases(dataset)?
            .into_iter()
            .flat_map(|l| l.versions)
            .collect())
    }

    /// By version, who holds a lease naming it: a gateway's caller by
    /// name, or a host with the store's key (the compliance report).
    pub fn lease_holders(
        &self,
        dataset: &str,
    ) -> Result<std::collections::BTreeMap<u64, BTreeSet<String>>> {
        let mut out = std::collections::BTreeMap::<u64, BTreeSet<String>>::new();
        for l in self.leases(dataset)? {
            let by = l.by.as_deref().unwrap_or("a host with the store's key");
            for v in l.versions {
                out.entry(v).or_default().insert(by.to_string());
            }
        }
        Ok(out)
    }

    /// Version `version` of `dataset` if it was expired and a lease of
    /// `owner`'s (`Holder::owner`) names it: what a gateway serves that
    /// caller beside the versions it serves everyone (with its erasures'
    /// root, as all are).
    pub fn leased_record(
        &self,
        dataset: &str,
        owner: &str,
        version: u64,
    ) -> Result<Option<Record>> {
        if !self.lifecycle_known(dataset)?.is_expired(version) {
            return Ok(None);
        }
        let held = self
            .leases(dataset)?
            .into_iter()
            .any(|l| l.holder.as_deref() == Some(owner) && l.versions.contains(&version));
        if !held {
            return Ok(None);
        }
        Ok(self
            .chain_records(dataset)?
            .into_iter()
            .find(|r| r.version == version))
    }

    /// The record of the version staging stands on when the versions
    /// served no longer hold it (expired meanwhile): through a gateway,
    /// asked of it (it answers the lease's holder); beside the store,
    /// every version's record is known already (`known_records`).
    pub fn kept_record(&self, dataset: &str, version: u64) -> Result<Option<Record>> {
        match self.upstream() {
            Some(up) => up.kept_record(dataset, version),
            None => Ok(None),
        }
    }
}
