//! The store layer: every object detafs keeps, reached through `object_store`.
//!
//! This is the only module that imports `object_store`, and the one place where
//! synchronous callers cross into the tokio runtime (`block_on`, `spawn`).

#[cfg(feature = "cloud")]
mod classify;
pub mod codec;
pub mod grace;
pub mod health;
pub mod keys;
pub mod lock;
pub mod pack;
pub mod recycle;
#[cfg(feature = "cloud")]
mod remote;
pub mod retry;
pub mod seal;
pub mod sealed_file;
pub mod slots;
pub mod sse;
pub mod tier;

use crate::error::{Error, Result};
use crate::runtime::Runtime;
use bytes::Bytes;
use futures::TryStreamExt;
use health::{Health, HealthReport};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use parking_lot::Mutex;
use retry::{Policy, Retrying};
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The newest store format this build reads and writes: 2, sealed
/// (`codec.rs`); format 1 stores (in the clear) stay format 1.
pub const FORMAT: u32 = 2;
/// The store marker: format, id and sealing; what makes a folder a store.
pub const MARKER: &str = "detafs.json";

/// Contents of the marker object at the root of every store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreInfo {
    pub format: u32,
    /// Random id: names this store's local cache, so a store re-created at the
    /// same URL never inherits a stale cache.
    pub store_id: String,
    /// Format 2: how it is sealed (`SEALING`, the only one there is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealing: Option<String>,
}

/// Format 2's algorithms, named in its marker.
pub const SEALING: &str = "aes-256-gcm, hmac-sha256 ids, hkdf-sha256 subkeys, argon2id slots";

/// How `init` makes a new store.
pub enum NewStore<'a> {
    /// Format 1: in the clear, for public data.
    Plaintext,
    /// Format 2: a random master key in a key file (`key_file`, or the
    /// default for the new store's id), and a passphrase slot if given.
    Sealed {
        key_file: Option<&'a std::path::Path>,
        passphrase: Option<&'a str>,
        by: &'a str,
    },
}

/// What `init` did.
pub struct Created {
    pub info: StoreInfo,
    /// False if the store existed.
    pub created: bool,
    /// The key file written, which the user must back up.
    pub key_file: Option<std::path::PathBuf>,
}

impl StoreInfo {
    /// Parses and checks a marker read from the store at `url`.
    pub fn decode(bytes: &[u8], url: &str) -> Result<StoreInfo> {
        let what = || format!("{url} {MARKER}");
        let info: StoreInfo =
            serde_json::from_slice(bytes).map_err(|e| Error::malformed(what(), e))?;
        if info.format > FORMAT {
            return Err(Error::FormatTooNew {
                url: url.to_string(),
                found: info.format,
                supported: FORMAT,
            });
        }
        // The id names local folders: exactly as `init` makes it, so a
        // hostile marker can never name a path.
        let sealing_ok = match info.format {
            1 => info.sealing.is_none(),
            _ => info.sealing.as_deref() == Some(SEALING),
        };
        if info.format == 0 || !sealing_ok || !crate::id::is_lower_hex(&info.store_id, 32) {
            return Err(Error::malformed(
                what(),
                "format or store_id is not one detafs writes",
            ));
        }
        Ok(info)
    }
}

/// An object listed in the store.
#[derive(Debug, Clone)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    pub modified: SystemTime,
}

/// The library's error for a failed request of the object store about
/// `key` (object_store's errors go no further than this module).
pub(crate) fn failed(key: impl std::fmt::Display, source: object_store::Error) -> Error {
    Error::Store {
        key: key.to_string(),
        source: Box::new(source),
    }
}

/// Small objects (records) fetched at once by `get_many`.
const PARALLEL_GETS: usize = 64;

pub struct Store {
    inner: Arc<dyn ObjectStore>,
    url: String,
    /// Where the store really is (a local folder's canonical path), which
    /// with the marker's id names its local state.
    location: String,
    /// A local folder store's folder: ranges of its objects are read from
    /// their files straight away (`local_range`).
    local_root: Option<std::path::PathBuf>,
    rt: Arc<Runtime>,
    policy: Policy,
    health: Arc<Health>,
    /// How objects are encoded: known once the marker is read (format 1),
    /// or once the store is unlocked (format 2).
    codec: std::sync::OnceLock<codec::Codec>,
    /// Whether the marker is still there (`ensure_present`).
    presence: Arc<Presence>,
    /// Its colder tier, once named and needed (`tier.rs`).
    cold: tier::Cold,
    /// S3 Object Lock's span for what it writes (`lock.rs`).
    lock: Option<Duration>,
}

/// What every upload to a store is asked for: S3 server-side encryption,
/// S3 Object Lock (compliance mode, this long).
#[derive(Clone, Debug, Default)]
pub struct Asks {
    pub sse: Option<sse::Sse>,
    pub lock: Option<Duration>,
}

/// What a write knows of the store's marker: when it was last seen, and
/// whether it was found gone. `init` writes before the marker exists.
#[derive(Default)]
struct Presence {
    seen: Mutex<Option<std::time::Instant>>,
    gone: std::sync::atomic::AtomicBool,
    initialising: std::sync::atomic::AtomicBool,
}

/// How long a sighting of the marker stands for the writes after it.
const PRESENCE_TTL: Duration = Duration::from_secs(1);

impl Store {
    /// Opens the store at `url`: a path, `file://`, `s3://`, `gs://` or
    /// `az://`, without checking its contents. A local folder is created only
    /// when `create` is set (by `init`). Remote operations are retried through
    /// transient failures for up to `deadline` each. Its work runs on `rt`.
    pub fn open(
        url: &str,
        create: bool,
        deadline: Duration,
        asks: &Asks,
        rt: &Arc<Runtime>,
    ) -> Result<Store> {
        let (inner, policy, location) = open_location(url, create, deadline, asks)?;
        let mut store = Store::with_policy(inner, url, &location, policy, rt)?;
        store.local_root = location.strip_prefix("file://").map(Into::into);
        store.lock = asks.lock;
        Ok(store)
    }

    /// How long every version must be kept at least, if its objects are
    /// under S3 Object Lock (`--object-lock`): nothing younger is expired
    /// or erased.
    pub fn object_lock(&self) -> Option<Duration> {
        self.lock
    }

    /// `PutOptions` for `key`: locked where the store locks and the key
    /// is never rewritten (`lock.rs`).
    fn put_options(&self, key: &str, mode: PutMode) -> PutOptions {
        let mut opts = PutOptions {
            mode,
            ..Default::default()
        };
        if self.lock.is_some() && lock::lockable(key) {
            opts.extensions.insert(lock::Locked(key.to_string()));
        }
        opts
    }

    /// Wraps any object store (the seam for wrappers such as fault
    /// injection), treating it as remote: its failures are retried.
    pub fn from_object_store(
        inner: Arc<dyn ObjectStore>,
        url: &str,
        deadline: Duration,
        rt: &Arc<Runtime>,
    ) -> Result<Store> {
        let location = url.trim_end_matches('/');
        Store::with_policy(inner, url, location, Policy::remote(deadline), rt)
    }

    fn with_policy(
        inner: Arc<dyn ObjectStore>,
        url: &str,
        location: &str,
        policy: Policy,
        rt: &Arc<Runtime>,
    ) -> Result<Store> {
        let health = Arc::new(Health::default());
        Ok(Store {
            inner: Arc::new(Retrying::new(inner, policy, health.clone())),
            url: url.to_string(),
            location: location.to_string(),
            local_root: None,
            rt: rt.clone(),
            policy,
            health,
            codec: std::sync::OnceLock::new(),
            presence: Arc::default(),
            cold: tier::Cold::default(),
            lock: None,
        })
    }

    /// `inner` (its colder tier) retried under `policy`, its answers told
    /// to this store's health.
    fn retried(&self, inner: Arc<dyn ObjectStore>, policy: Policy) -> Arc<dyn ObjectStore> {
        Arc::new(Retrying::new(inner, policy, self.health.clone()))
    }

    /// Whether objects live elsewhere (so reads are worth caching locally).
    pub fn is_remote(&self) -> bool {
        self.policy.deadline.is_some()
    }

    /// How long one operation may retry (zero for local folders).
    pub fn deadline(&self) -> Duration {
        self.policy.deadline.unwrap_or_default()
    }

    /// How the store answered lately.
    pub fn health(&self) -> HealthReport {
        self.health.report()
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The store's place: its canonical path or its URL without a trailing `/`.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Creates the store marker; idempotent, refuses a location holding anything else.
    /// With `probe`, also checks conditional create (`probe`) before writing
    /// anything, so a refused location is left as it was. A sealed store's
    /// key slots are written before its marker, the commit point of `init`.
    pub fn init(&self, probe: bool, new: &NewStore) -> Result<Created> {
        let existing = self.try_info()?;
        // Its probe and key slots are written before the marker.
        self.presence
            .initialising
            .store(existing.is_none(), std::sync::atomic::Ordering::Relaxed);
        if existing.is_none()
            && let Some(first) = self.first_key()?
        {
            return Err(Error::InvalidInput(format!(
                "{} is not empty and not a detafs store (it holds {first}); refusing to init",
                self.url
            )));
        }
        if probe {
            self.probe()?;
        }
        if let Some(info) = existing {
            return Ok(Created {
                info,
                created: false,
                key_file: None,
            });
        }
        let store_id = hex::encode(rand::random::<[u8; 16]>());
        let (info, key_file) = match new {
            NewStore::Plaintext => (
                StoreInfo {
                    format: 1,
                    store_id,
                    sealing: None,
                },
                None,
            ),
            NewStore::Sealed {
                key_file,
                passphrase,
                by,
            } => {
                let master = seal::MasterKey::random();
                let path = key_file
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or_else(|| slots::default_key_file(&store_id));
                self.add_slot_to(&store_id, &master, Some(&path), None, by)?;
                if let Some(p) = passphrase {
                    self.add_slot_to(&store_id, &master, None, Some(p), by)?;
                }
                let _ = self
                    .codec
                    .set(codec::Codec::Sealed(Arc::new(seal::Keys::derive(
                        &master, &store_id,
                    ))));
                (
                    StoreInfo {
                        format: 2,
                        store_id,
                        sealing: Some(SEALING.to_string()),
                    },
                    Some(path),
                )
            }
        };
        let body = serde_json::to_vec_pretty(&info).expect("serializable");
        if !self.put_create(MARKER, body.into())? {
            // Another process initialised it first: use theirs (our slots
            // are bound to our store id and open nothing of it).
            if let Some(path) = &key_file {
                let _ = std::fs::remove_file(path);
            }
            return Ok(Created {
                info: self.info()?,
                created: false,
                key_file: None,
            });
        }
        Ok(Created {
            info,
            created: true,
            key_file,
        })
    }

    /// Checks that the store honours conditional create, which the commit
    /// protocol relies on: a key created twice must refuse the second create.
    /// Some S3 clones ignore If-None-Match and overwrite; they are refused.
    pub fn probe(&self) -> Result<()> {
        let key = keys::probe(&hex::encode(rand::random::<[u8; 16]>()));
        let first = Bytes::from(format!("{key} first\n"));
        let created = self.create_object(&key, first.clone())?;
        let overwrote = self.create_object(&key, Bytes::from(format!("{key} second\n")))?;
        let kept = self.get(&key)?;
        if let Err(e) = self.delete(&key) {
            tracing::warn!("could not delete probe object {key}: {e}");
        }
        if created && !overwrote && kept.as_ref() == Some(&first) {
            return Ok(());
        }
        Err(Error::UnsafeStore {
            url: self.url.clone(),
            detail: if !created {
                "a fresh probe key was reported as existing".into()
            } else {
                format!(
                    "a second create of the same key succeeded: it ignores {} and overwrites",
                    create_only_precondition(&self.url)
                )
            },
        })
    }

    /// Refuses to write into a store whose marker is gone: a folder or
    /// bucket deleted (or moved) under a running mount, gateway or Python
    /// process would otherwise be made again around the new object, and no
    /// command would open it. Asks the store at most once a second.
    pub fn ensure_present(&self) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.presence.initialising.load(Relaxed) {
            return Ok(());
        }
        // Held across the look: writers at once share one HEAD a second.
        let mut seen = self.presence.seen.lock();
        if seen.is_some_and(|t| t.elapsed() < PRESENCE_TTL) {
            return Ok(());
        }
        let path = Path::from(MARKER);
        match self.rt.block_on(self.inner.head(&path)) {
            Ok(_) => {
                *seen = Some(std::time::Instant::now());
                self.presence.gone.store(false, Relaxed);
                Ok(())
            }
            Err(object_store::Error::NotFound { .. }) => {
                self.presence.gone.store(true, Relaxed);
                Err(Error::StoreGone(self.url.clone()))
            }
            Err(e) => Err(failed(MARKER, e)),
        }
    }

    /// Whether the last look at the marker found it gone.
    pub fn is_gone(&self) -> bool {
        self.presence
            .gone
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads and checks the store marker.
    pub fn info(&self) -> Result<StoreInfo> {
        self.try_info()?
            .ok_or_else(|| Error::NotAStore(self.url.clone()))
    }

    fn try_info(&self) -> Result<Option<StoreInfo>> {
        let Some(bytes) = self.get(MARKER)? else {
            return Ok(None);
        };
        StoreInfo::decode(&bytes, &self.url).map(Some)
    }

    fn first_key(&self) -> Result<Option<String>> {
        let first = self
            .rt
            .block_on(self.inner.list(None).try_next())
            .map_err(|e| failed(&self.url, e))?;
        Ok(first.map(|m| m.location.to_string()))
    }

    /// How this store encodes objects; a format 2 store must be unlocked
    /// first (`unlock`).
    pub fn codec(&self) -> Result<codec::Codec> {
        if let Some(c) = self.codec.get() {
            return Ok(c.clone());
        }
        match self.info()?.format {
            1 => Ok(self.codec.get_or_init(|| codec::Codec::Plain).clone()),
            _ => Err(Error::Locked(self.url.clone())),
        }
    }

    /// Opens a format 2 store with its master key (`slots::unlock`).
    pub fn unlock(&self, master: &seal::MasterKey) -> Result<()> {
        let info = self.info()?;
        let keys = seal::Keys::derive(master, &info.store_id);
        let _ = self.codec.set(codec::Codec::Sealed(Arc::new(keys)));
        Ok(())
    }

    /// Whole small object, or `None` if it does not exist; in a sealed
    /// store, opened and checked.
    pub fn get(&self, key: &str) -> Result<Option<Bytes>> {
        crate::nowait::check()?;
        let raw = self.rt.block_on(self.fetch(key))?;
        raw.map(|b| self.open_object(key, b)).transpose()
    }

    /// Whole objects, fetched several at a time; `None` for missing ones.
    pub fn get_many(&self, keys: &[String]) -> Result<Vec<Option<Bytes>>> {
        self.get_each(keys)?.into_iter().collect()
    }

    /// `get_many`, where an object that does not open (changed, forged)
    /// fails alone: the store failing fails them all.
    pub fn get_each(&self, keys: &[String]) -> Result<Vec<Result<Option<Bytes>>>> {
        use futures::StreamExt;
        crate::nowait::check()?;
        let fetches = futures::stream::iter(keys.iter().map(|k| self.fetch(k)));
        let raw: Vec<Option<Bytes>> = self
            .rt
            .block_on(fetches.buffered(PARALLEL_GETS).try_collect())?;
        Ok(keys
            .iter()
            .zip(raw)
            .map(|(k, b)| b.map(|b| self.open_object(k, b)).transpose())
            .collect())
    }

    fn open_object(&self, key: &str, stored: Bytes) -> Result<Bytes> {
        if !keys::sealed(key) {
            return Ok(stored);
        }
        self.codec()?.open_object(key, stored)
    }

    /// A whole small object (marker, dataset, record): anything larger than
    /// `limits::MAX_SMALL_OBJECT` is refused before its body is read.
    async fn fetch(&self, key: &str) -> Result<Option<Bytes>> {
        self.fetch_at_most(&self.inner, key, crate::limits::MAX_SMALL_OBJECT)
            .await
    }

    /// A whole object of `inner` (the store's, or its colder tier's), if
    /// it is at most `max` bytes (refused before its body is read).
    async fn fetch_at_most(
        &self,
        inner: &Arc<dyn ObjectStore>,
        key: &str,
        max: u64,
    ) -> Result<Option<Bytes>> {
        let path = Path::from(key);
        let res = match inner.get(&path).await {
            Ok(got) if got.meta.size > max => return Err(too_large(key, got.meta.size)),
            Ok(got) => got.bytes().await,
            Err(e) => Err(e),
        };
        match res {
            Ok(b) if b.len() as u64 <= max => Ok(Some(b)),
            Ok(b) => Err(too_large(key, b.len() as u64)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(failed(key, e)),
        }
    }

    /// A byte range of an object. A missing object is `Ok(None)`.
    /// A pack not here is looked for in the colder tier (`tier.rs`).
    pub fn get_range(&self, key: &str, range: Range<u64>) -> Result<Option<Bytes>> {
        match self.get_range_here(key, range.clone())? {
            None if keys::pack_id(key).is_some() => self.cold_range(key, range),
            got => Ok(got),
        }
    }

    fn get_range_here(&self, key: &str, range: Range<u64>) -> Result<Option<Bytes>> {
        crate::nowait::check()?;
        if let Some(root) = &self.local_root {
            return local_range(&root.join(key), range);
        }
        let path = Path::from(key);
        let want = range.end - range.start;
        let res = self.rt.block_on(self.inner.get_range(&path, range));
        match res {
            Ok(b) if b.len() as u64 == want => Ok(Some(b)),
            Ok(b) => Err(Error::malformed(
                key,
                format!("short read: {} of {want} bytes", b.len()),
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(failed(key, e)),
        }
    }

    /// Creates `key` only if it does not exist. Returns false when it already did.
    /// This conditional create is the commit point of every version.
    ///
    /// Every body detafs creates is unique (a random id or pack id in it), so
    /// finding our own bytes under `key` means an earlier attempt whose answer
    /// was lost did create it.
    pub fn put_create(&self, key: &str, body: Bytes) -> Result<bool> {
        crate::nowait::check()?;
        injected("store-create", key)?;
        self.ensure_present()?;
        self.create_object(key, body)
    }

    /// `put_create` without asking whether the store is there: for the
    /// probe, which `init` runs before the marker exists and a mount after
    /// it was read.
    fn create_object(&self, key: &str, body: Bytes) -> Result<bool> {
        let body = match keys::sealed(key) {
            true => self.codec()?.seal_object(key, body),
            false => body,
        };
        crate::nowait::check()?;
        let path = Path::from(key);
        let opts = self.put_options(key, PutMode::Create);
        let payload = PutPayload::from(body.clone());
        let res = self.rt.block_on(self.inner.put_opts(&path, payload, opts));
        match res {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(self
                .rt
                .block_on(self.fetch(key))?
                .is_some_and(|found| found == body)),
            Err(e) => Err(failed(key, e)),
        }
    }

    /// Uploads an immutable object on the runtime; the caller awaits the handle.
    pub fn spawn_put(&self, key: String, body: PutPayload) -> tokio::task::JoinHandle<Result<()>> {
        if let Err(e) = self.ensure_present() {
            return self.rt.spawn(async move { Err(e) });
        }
        let inner = self.inner.clone();
        let opts = self.put_options(&key, PutMode::Overwrite);
        self.rt.spawn(async move {
            let path = Path::from(key.as_str());
            match inner.put_opts(&path, body, opts).await {
                Ok(_) => Ok(()),
                Err(e) => Err(failed(&key, e)),
            }
        })
    }

    /// Replaces an object whole: an erasure zeroing blobs in their pack
    /// (`erase.rs`), a staging area's lease. Readers see the old object or
    /// the new one, never a mix: stores replace objects atomically.
    pub fn replace(&self, key: &str, body: Bytes) -> Result<()> {
        crate::nowait::check()?;
        injected("store-replace", key)?;
        let body = match keys::sealed(key) {
            true => self.codec()?.seal_object(key, body),
            false => body,
        };
        self.wait(self.spawn_put(key.to_string(), body.into()))
    }

    /// The runtime its work runs on, which the program handed it.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// Runs a future to completion on the runtime (e.g. waiting for signals).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        // Only the fallible calls above may be asked where nothing waits.
        debug_assert!(
            !crate::nowait::refused(),
            "store: waiting where nothing may"
        );
        self.rt.block_on(f)
    }

    /// Waits for an upload started by `spawn_put`.
    pub fn wait(&self, handle: tokio::task::JoinHandle<Result<()>>) -> Result<()> {
        self.rt
            .block_on(handle)
            .map_err(|e| Error::io("upload task", std::io::Error::other(e)))?
    }

    /// Lists keys under `prefix` that sort after `offset`, sorted.
    pub fn list(&self, prefix: &str, offset: Option<&str>) -> Result<Vec<Listed>> {
        self.list_on(&self.inner, prefix, offset)
    }

    /// `list` of `inner` (the store's, or its colder tier's).
    fn list_on(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: &str,
        offset: Option<&str>,
    ) -> Result<Vec<Listed>> {
        crate::nowait::check()?;
        let prefix_path = Path::from(prefix);
        let offset_path = offset.map(Path::from);
        let metas: Vec<_> = self
            .rt
            .block_on(
                match &offset_path {
                    Some(o) => inner.list_with_offset(Some(&prefix_path), o),
                    None => inner.list(Some(&prefix_path)),
                }
                .try_collect::<Vec<_>>(),
            )
            .map_err(|e| failed(prefix, e))?;
        let mut out: Vec<Listed> = metas
            .into_iter()
            .map(|m| Listed {
                key: m.location.to_string(),
                size: m.size,
                modified: m.last_modified.into(),
            })
            .filter(|l| offset.is_none_or(|o| l.key.as_str() > o))
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Names directly under `prefix` (one level, like `ls`).
    pub fn list_dirs(&self, prefix: &str) -> Result<Vec<String>> {
        let path = Path::from(prefix);
        let res = self
            .rt
            .block_on(self.inner.list_with_delimiter(Some(&path)))
            .map_err(|e| failed(prefix, e))?;
        let mut names: Vec<String> = res
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    pub fn delete(&self, key: &str) -> Result<()> {
        self.check_local_folders(key)?;
        let path = Path::from(key);
        match self.rt.block_on(self.inner.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(failed(key, e)),
        }
    }
}

impl Store {
    /// In a local folder store, refuses a key whose folders include a
    /// symbolic link: whoever can write the folder could plant one, and a
    /// delete (gc's) would then act outside the store.
    fn check_local_folders(&self, key: &str) -> Result<()> {
        let Some(root) = self.location.strip_prefix("file://") else {
            return Ok(());
        };
        let mut at = std::path::PathBuf::from(root);
        let folders = key.rsplit_once('/').map_or("", |(dirs, _)| dirs);
        for part in folders.split('/').filter(|p| !p.is_empty()) {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(Error::InvalidInput(format!(
                        "{} is a symbolic link inside the local store; detafs never deletes through one (remove the link)",
                        at.display()
                    )));
                }
                Ok(_) => {}
                // Missing: there is nothing to delete.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }
}

/// How the service at `url` is asked to create an object only if none
/// exists (object_store's `PutMode::Create`).
fn create_only_precondition(url: &str) -> &'static str {
    match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("gs") => "the generation-match precondition (x-goog-if-generation-match: 0)",
        Some("az" | "azure" | "abfs" | "abfss") => "If-None-Match: * on Put Blob",
        _ => "If-None-Match: *",
    }
}

#[cfg(feature = "cloud")]
use remote::open as open_remote;

#[cfg(not(feature = "cloud"))]
fn open_remote(
    url: &str,
    _: &str,
    _: &str,
    _: &Policy,
    _: Option<&sse::Sse>,
    _: Option<Duration>,
) -> Result<Arc<dyn ObjectStore>> {
    Err(Error::InvalidInput(format!(
        "{url}: this detafs was built without remote stores (feature `cloud`)"
    )))
}

fn too_large(key: &str, size: u64) -> Error {
    Error::malformed(
        key,
        format!(
            "{size} bytes, more than the {} such an object may have",
            crate::limits::MAX_SMALL_OBJECT
        ),
    )
}

/// Bytes `range` of the local object at `path` (`None` if there is no
/// such object), read on the calling thread. object_store's local reads
/// hop to another thread, open the file and zero the buffer before reading
/// into it: a sequential reader of a version paid all three at every run.
pub(super) fn local_range(path: &std::path::Path, range: Range<u64>) -> Result<Option<Bytes>> {
    use std::io::{Read, Seek};
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path.display(), e)),
    };
    let want = range.end.saturating_sub(range.start);
    // Read into spare capacity: nothing zeroed first.
    let mut buf = recycle::take(crate::limits::to_usize(want));
    file.seek(std::io::SeekFrom::Start(range.start))
        .and_then(|_| file.take(want).read_to_end(&mut buf))
        .map_err(|e| Error::io(path.display(), e))?;
    if buf.len() as u64 != want {
        return Err(Error::malformed(
            path.display(),
            format!("short read: {} of {want} bytes", buf.len()),
        ));
    }
    Ok(Some(Bytes::from(buf)))
}

/// A store failing at `point` in a crash test (`hold::failing`).
fn injected(point: &str, key: &str) -> Result<()> {
    match crate::hold::failing(point) {
        true => Err(Error::io(
            key,
            std::io::Error::other(format!("the store failed ({point}, injected)")),
        )),
        false => Ok(()),
    }
}

/// The object store at `url` (a path, `file://`, `s3://`, `gs://`,
/// `az://`), how its failures are retried, and where it really is: for a
/// store, and for its colder tier (`tier.rs`).
fn open_location(
    url: &str,
    create: bool,
    deadline: Duration,
    asks: &Asks,
) -> Result<(Arc<dyn ObjectStore>, Policy, String)> {
    let sse = asks.sse.as_ref();
    if asks.lock.is_some() && !url.contains("://") {
        return Err(Error::InvalidInput(format!(
            "{url}: --object-lock is S3 Object Lock: it is asked of S3 stores only"
        )));
    }
    Ok(match url.split_once("://") {
        None | Some(("file", _)) if sse.is_some() => {
            return Err(Error::InvalidInput(format!(
                "{url}: server-side encryption (SSE) is asked of S3 stores only; a local folder is encrypted by detafs itself (format 2)"
            )));
        }
        None | Some(("file", _)) => {
            let path = url.strip_prefix("file://").unwrap_or(url);
            let (fs, canonical) = local(path, create)?;
            (Arc::new(fs), Policy::local(), format!("file://{canonical}"))
        }
        Some((scheme, rest)) => {
            let policy = Policy::remote(deadline);
            let location = url.trim_end_matches('/').to_string();
            (
                open_remote(url, scheme, rest, &policy, sse, asks.lock)?,
                policy,
                location,
            )
        }
    })
}

/// A local folder store and the folder's canonical path. Its folder is
/// private (0700): packs hold the data of files of every mode.
fn local(path: &str, create: bool) -> Result<(LocalFileSystem, String)> {
    if path.is_empty() {
        return Err(Error::InvalidInput("empty store path".into()));
    }
    let p = std::path::Path::new(path);
    if p.exists() && !p.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{path} is not a directory, so it cannot be a store"
        )));
    }
    if !p.exists() {
        if !create {
            return Err(Error::NotAStore(path.to_string()));
        }
        crate::private::create_dir(p)?;
    }
    // A store folder may be shared with other users (the policy decides
    // what they read through a daemon): only this user's own is tightened.
    if std::fs::metadata(p).is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == nix::unistd::geteuid().as_raw()
    }) {
        crate::private::tighten(p)?;
    }
    let canonical = std::fs::canonicalize(p).map_err(|e| Error::io(path, e))?;
    let fs = LocalFileSystem::new_with_prefix(&canonical)
        .map(|fs| fs.with_fsync(true).with_automatic_cleanup(true))
        .map_err(|e| failed(path, e))?;
    Ok((fs, canonical.to_string_lossy().into_owned()))
}

/// The location (`Store::location`) a local store at `path` has, or had
/// if its folder is gone: `file://` and its canonical path (through its
/// parent's when the folder itself is not there).
pub fn local_location(path: &str) -> Option<String> {
    let path = std::path::Path::new(path.strip_prefix("file://").unwrap_or(path));
    let canonical = match std::fs::canonicalize(path) {
        Ok(c) => c,
        Err(_) => {
            let path = std::path::absolute(path).ok()?;
            let (parent, name) = (path.parent()?, path.file_name()?);
            std::fs::canonicalize(parent).ok()?.join(name)
        }
    };
    Some(format!("file://{}", canonical.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_object_too_large_is_refused_by_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let rt = Runtime::new().unwrap();
        let url = dir.path().to_str().unwrap();
        let store = Store::open(url, true, Duration::ZERO, &Asks::default(), &rt).unwrap();
        let at = dir.path().join(MARKER);
        let max = usize::try_from(crate::limits::MAX_SMALL_OBJECT).unwrap();
        std::fs::write(&at, vec![b' '; max + 1]).unwrap();
        let err = store.get(MARKER).unwrap_err().to_string();
        assert!(err.contains("more than the"), "{err}");
        std::fs::write(&at, vec![b' '; max]).unwrap();
        assert_eq!(store.get(MARKER).unwrap().unwrap().len(), max);
    }
}
