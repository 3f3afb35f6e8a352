//! A store's colder tier: a second location (a folder or bucket that costs
//! less to keep, `detafs tier --cold-store URL`) holding packs that only
//! old versions reach. The store names it in `tiers.json`, so every host
//! finds it; its credentials come from the environment as the store's do.
//! A pack read that finds nothing at the store's own location looks there
//! (`Store::get_range`), so readers never need to know where a pack lives.
//! A pack moves by copy, check, then delete: at every moment it is whole in
//! one place at least.

use super::{Store, keys, open_location};
use crate::error::{Error, Result};
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::Arc;

/// Where a store keeps an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    /// The store's own location.
    Hot,
    /// Its colder tier.
    Cold,
}

/// The colder tier, once the store named one and a reader needed it.
pub(super) struct Backend {
    inner: Arc<dyn ObjectStore>,
    url: String,
    /// A local folder's path: ranges read straight from the file, packs
    /// copied by the kernel (as the store's own, `local_range`).
    local_root: Option<std::path::PathBuf>,
}

/// What the store names its colder tier: another location, or (S3) a
/// storage class its packs are rewritten in, in place.
enum Tier {
    Elsewhere(Arc<Backend>),
    Class(String),
}

#[derive(Default)]
pub(super) struct Cold(Mutex<Option<Arc<Tier>>>);

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Tiers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cold: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    class: Option<String>,
}

impl Tier {
    fn describe(&self) -> String {
        match self {
            Tier::Elsewhere(b) => b.url.clone(),
            Tier::Class(class) => format!("storage class {class}"),
        }
    }
}

impl Store {
    /// The colder tier the store names, opened on first need. A store that
    /// named none is asked again at each need (a tier made meanwhile by
    /// another process is found): only a pack missing here asks.
    fn tier(&self) -> Result<Option<Arc<Tier>>> {
        if let Some(t) = self.cold.0.lock().clone() {
            return Ok(Some(t));
        }
        let Some(bytes) = self.get(keys::TIERS)? else {
            return Ok(None);
        };
        let malformed = |e: String| Error::malformed(keys::TIERS, e);
        let tiers: Tiers = serde_json::from_slice(&bytes).map_err(|e| malformed(e.to_string()))?;
        let tier = match (tiers.cold, tiers.class) {
            (Some(url), None) => {
                let (inner, policy, location) =
                    open_location(&url, false, self.deadline(), &super::Asks::default())?;
                Tier::Elsewhere(Arc::new(Backend {
                    inner: self.retried(inner, policy),
                    url,
                    local_root: location.strip_prefix("file://").map(Into::into),
                }))
            }
            (None, Some(class)) => Tier::Class(class),
            _ => return Err(malformed("names a location or a storage class".into())),
        };
        let tier = Arc::new(tier);
        *self.cold.0.lock() = Some(tier.clone());
        Ok(Some(tier))
    }

    /// The colder tier when it is another location.
    fn cold(&self) -> Result<Option<Arc<Backend>>> {
        Ok(self.tier()?.and_then(|t| match &*t {
            Tier::Elsewhere(b) => Some(b.clone()),
            Tier::Class(_) => None,
        }))
    }

    /// The colder tier, as said to people: its location, or its class.
    pub fn cold_url(&self) -> Result<Option<String>> {
        Ok(self.tier()?.map(|t| t.describe()))
    }

    /// `cold_url` if this process has needed the tier, without asking the
    /// store (for health, which never waits).
    pub fn cold_known(&self) -> Option<String> {
        self.cold.0.lock().as_ref().map(|t| t.describe())
    }

    /// Names storage class `class` (S3: `STANDARD_IA`, `GLACIER_IR`, ...)
    /// the store's colder tier: its packs are rewritten in that class, in
    /// place. Refused if the store names another tier.
    pub fn set_cold_class(&self, class: &str) -> Result<()> {
        if !self.url().starts_with("s3://") && !self.url().starts_with("s3a://") {
            return Err(Error::InvalidInput(
                "a storage class is a colder tier of S3 stores; give --cold-store for others"
                    .into(),
            ));
        }
        if class.is_empty() || !class.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
            return Err(Error::InvalidInput(format!(
                "{class:?} is no S3 storage class (STANDARD_IA, GLACIER_IR, ...)"
            )));
        }
        self.name_tier(Tiers {
            cold: None,
            class: Some(class.to_string()),
        })
    }

    /// Records `tiers`, unless the store names another.
    fn name_tier(&self, tiers: Tiers) -> Result<()> {
        let body = serde_json::to_vec(&tiers).expect("serializable");
        if !self.put_create(keys::TIERS, body.into())? {
            let asked = match (&tiers.cold, &tiers.class) {
                (Some(url), _) => url.clone(),
                (_, Some(class)) => format!("storage class {class}"),
                _ => String::new(),
            };
            match self.cold_url()? {
                Some(named) if named == asked => {}
                named => {
                    return Err(Error::InvalidInput(format!(
                        "this store's colder tier is {} already; it is not moved",
                        named.unwrap_or_default()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Names `url` the store's colder tier; refused if it names another.
    pub fn set_cold(&self, url: &str) -> Result<()> {
        if url.trim_end_matches('/') == self.url().trim_end_matches('/') {
            return Err(Error::InvalidInput(
                "the colder tier must be another location than the store".into(),
            ));
        }
        // Opened and listed first: a location that does not answer is not
        // recorded (every read would look there).
        let (inner, policy, location) =
            open_location(url, true, self.deadline(), &super::Asks::default())?;
        if location == self.location() {
            return Err(Error::InvalidInput(
                "the colder tier must be another location than the store".into(),
            ));
        }
        let packs = Path::from(keys::PACKS);
        let inner = self.retried(inner, policy);
        if let Some(Err(e)) = self.rt.block_on(inner.list(Some(&packs)).next()) {
            return Err(super::failed(url, e));
        }
        self.name_tier(Tiers {
            cold: Some(url.to_string()),
            class: None,
        })
    }

    /// Bytes `range` of pack `key` in the colder tier (None: not there,
    /// or no tier).
    pub(super) fn cold_range(&self, key: &str, range: Range<u64>) -> Result<Option<Bytes>> {
        let Some(cold) = self.cold()? else {
            return Ok(None);
        };
        if let Some(root) = &cold.local_root {
            return super::local_range(&root.join(key), range);
        }
        let path = Path::from(key);
        let want = range.end - range.start;
        let res = self.rt.block_on(cold.inner.get_range(&path, range));
        match res {
            Ok(b) if b.len() as u64 == want => Ok(Some(b)),
            Ok(b) => Err(Error::malformed(
                key,
                format!(
                    "short read from the colder tier: {} of {want} bytes",
                    b.len()
                ),
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(super::failed(key, e)),
        }
    }

    /// Moves pack `key` to the colder tier: copied, its size checked
    /// there, then deleted here. Returns its bytes (0: it was not here).
    pub fn move_to_cold(&self, key: &str) -> Result<u64> {
        let tier = self
            .tier()?
            .ok_or_else(|| Error::InvalidInput("this store names no colder tier".into()))?;
        let cold = match &*tier {
            Tier::Elsewhere(b) => b.clone(),
            Tier::Class(class) => return self.rewrite_in_class(key, class),
        };
        if let (Some(here), Some(there)) = (&self.local_root, &cold.local_root) {
            return self.move_between_folders(key, &here.join(key), there);
        }
        let Some(body) = self.get_pack_in(Where::Hot, key)? else {
            return Ok(0);
        };
        let size = body.len() as u64;
        let path = Path::from(key);
        self.rt
            .block_on(cold.inner.put(&path, body.into()))
            .map_err(|e| super::failed(key, e))?;
        let there = self
            .rt
            .block_on(cold.inner.head(&path))
            .map_err(|e| super::failed(key, e))?;
        if there.size != size {
            return Err(Error::malformed(
                key,
                format!("the colder tier holds {} of its {size} bytes", there.size),
            ));
        }
        crate::hold::hold("tier-copied");
        self.delete(key)?;
        Ok(size)
    }

    /// `move_to_cold` to a storage class: the pack rewritten in place in
    /// that class (a whole object replaced at once).
    fn rewrite_in_class(&self, key: &str, class: &str) -> Result<u64> {
        let Some(body) = self.get_pack_in(Where::Hot, key)? else {
            return Ok(0);
        };
        let size = body.len() as u64;
        let path = Path::from(key);
        let mut opts = self.put_options(key, object_store::PutMode::Overwrite);
        opts.attributes.insert(
            object_store::Attribute::StorageClass,
            object_store::AttributeValue::from(class.to_string()),
        );
        self.rt
            .block_on(self.inner.put_opts(&path, body.into(), opts))
            .map_err(|e| super::failed(key, e))?;
        Ok(size)
    }

    /// `move_to_cold` between two local folders: the kernel copies the
    /// file (`copy_file_range`) to a temporary name, synced, then renamed.
    fn move_between_folders(
        &self,
        key: &str,
        here: &std::path::Path,
        cold_root: &std::path::Path,
    ) -> Result<u64> {
        let there = cold_root.join(key);
        let size = match std::fs::metadata(here) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(Error::io(here.display(), e)),
        };
        let dir = there.parent().expect("a pack key has folders");
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let tmp = cold_root.join(keys::moving(key, std::process::id()));
        let copied = std::fs::copy(here, &tmp)
            .and_then(|n| std::fs::File::open(&tmp)?.sync_all().map(|()| n))
            .and_then(|n| std::fs::rename(&tmp, &there).map(|()| n))
            .map_err(|e| Error::io(there.display(), e));
        if copied.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        if copied? != size {
            return Err(Error::malformed(key, "the colder tier holds another size"));
        }
        crate::hold::hold("tier-copied");
        self.delete(key)?;
        Ok(size)
    }

    /// The objects under `prefix` in the colder tier (none without one).
    pub fn list_cold(&self, prefix: &str) -> Result<Vec<super::Listed>> {
        let Some(cold) = self.cold()? else {
            return Ok(Vec::new());
        };
        self.list_on(&cold.inner, prefix, None)
    }

    /// Deletes `key` from the colder tier (gc).
    pub fn delete_cold(&self, key: &str) -> Result<()> {
        let Some(cold) = self.cold()? else {
            return Ok(());
        };
        let path = Path::from(key);
        match self.rt.block_on(cold.inner.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(super::failed(key, e)),
        }
    }

    /// A whole pack where it lies, and where that is (an erasure rewrites
    /// it there).
    pub fn find_pack(&self, key: &str) -> Result<Option<(Bytes, Where)>> {
        if let Some(b) = self.get_pack_in(Where::Hot, key)? {
            return Ok(Some((b, Where::Hot)));
        }
        Ok(self
            .get_pack_in(Where::Cold, key)?
            .map(|b| (b, Where::Cold)))
    }

    fn get_pack_in(&self, at: Where, key: &str) -> Result<Option<Bytes>> {
        crate::nowait::check()?;
        let max = crate::limits::MAX_PACK;
        match at {
            Where::Hot => self.rt.block_on(self.fetch_at_most(&self.inner, key, max)),
            Where::Cold => match self.cold()? {
                Some(cold) => self.rt.block_on(self.fetch_at_most(&cold.inner, key, max)),
                None => Ok(None),
            },
        }
    }

    /// Replaces pack `key` whole where it lies (`find_pack`).
    pub fn replace_pack(&self, at: Where, key: &str, body: Bytes) -> Result<()> {
        match at {
            Where::Hot => self.replace(key, body),
            Where::Cold => {
                let cold = self
                    .cold()?
                    .ok_or_else(|| Error::InvalidInput("this store names no colder tier".into()))?;
                let path = Path::from(key);
                self.rt
                    .block_on(cold.inner.put(&path, body.into()))
                    .map(|_| ())
                    .map_err(|e| super::failed(key, e))
            }
        }
    }
}
