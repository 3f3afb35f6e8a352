//! The dataset layer's entry point: a store plus its local index and caches.
//! Knows datasets, their version records, and how to load trees.

pub mod apikeys;
pub mod changes;
pub mod datasets;
mod history;
pub mod leases;
pub mod lifecycle;
pub mod policies;
pub mod tag;
mod upstream;

pub use history::Damage;
pub use upstream::{History, Upstream};

use crate::cache::budget::{Budget, Part};
use crate::cache::disk::DiskCache;
use crate::cache::index::Index;
use crate::cache::weighed::WeighedLru;
use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::relpath::RelPath;
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Node, Tree};
use crate::store::codec::Codec;
use crate::store::pack::{self, BlobKind, BlobRef};
use crate::store::{NewStore, Store, keys};
use bytes::Bytes;
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone)]
pub struct Options {
    /// A path or URL; `None` is the embedded default store.
    pub store: Option<String>,
    pub cache_dir: Option<PathBuf>,
    pub cache_size: u64,
    /// Bound on verified chunks kept in memory for readers that are not
    /// the mount (the gateway, S3, Python); None: sized to the machine
    /// (`limits::cache_memory`).
    pub cache_memory: Option<u64>,
    /// How long a remote store operation may retry before giving up.
    pub store_timeout: std::time::Duration,
    /// A format 2 store's key file (default: `slots::default_key_file`).
    pub key_file: Option<PathBuf>,
    /// Asked for a passphrase when no key file opens a format 2 store.
    pub passphrase: Option<Passphrase>,
    /// S3 server-side encryption to ask of every upload and check.
    pub sse: Option<crate::store::sse::Sse>,
    /// S3 Object Lock for every object never rewritten (`store::lock`).
    pub object_lock: Option<std::time::Duration>,
    /// The program's runtime, which the store's work runs on.
    pub runtime: Arc<crate::runtime::Runtime>,
}

impl Options {
    /// What every upload is asked for.
    pub fn asks(&self) -> crate::store::Asks {
        crate::store::Asks {
            sse: self.sse.clone(),
            lock: self.object_lock,
        }
    }
}

/// Gives a passphrase, if there is one (the CLI: a variable, a file, or
/// the terminal).
pub type Passphrase = Arc<dyn Fn() -> Option<zeroize::Zeroizing<String>> + Send + Sync>;

pub struct Repo {
    store: Arc<Store>,
    /// How the store encodes what it holds (`store::codec`).
    codec: Codec,
    index: Arc<Index>,
    disk: DiskCache,
    /// This store's local index and cache (deleting it loses nothing).
    state_dir: PathBuf,
    /// Names this store's local state (cache and staging folders).
    state_key: String,
    /// Trees in memory, bounded by their bytes and the memory budget.
    trees: Mutex<WeighedLru<BlobId, Arc<Tree>>>,
    /// What this process may keep in memory to answer without the store
    /// (`--cache-memory`): trees, a mount's inodes and listings, chunks.
    budget: Arc<Budget>,
    /// Tags read so far, by key (`tag.rs`; they never change); None for
    /// one that does not decode.
    tags: tag::TagCache,
    /// Policy records read so far, oldest first (`policies.rs`).
    policy: policies::PolicyCache,
    /// Lifecycle logs read so far, by dataset (`lifecycle.rs`).
    lifecycle: lifecycle::LifecycleCache,
    /// The key file written when this open created the embedded store.
    created_key_file: Option<PathBuf>,
    /// By dataset: the first record that did not check out (`history.rs`).
    damage: history::Damages,
    /// Where datasets come from when not from the store (`upstream.rs`).
    upstream: Option<upstream::Upstreamed>,
    /// Bytes of verified chunks its in-memory readers keep.
    cache_memory: usize,
}

/// Local state belongs to one store: its id (from the marker, checked to be
/// 32 hex digits) and its location, so a copy of a store made with `cp -a`,
/// which keeps the id, never shares the original's index or staging.
fn state_key(store: &Store) -> Result<String> {
    let info = store.info()?;
    Ok(format!("{}-{}", info.store_id, place(store.location())))
}

/// The part of a local state folder's name that says where its store is.
fn place(location: &str) -> String {
    crate::id::digest_hex(location.as_bytes())[..16].to_string()
}

/// Whether this host keeps local state of a store in the local folder
/// `path`, which holds no store now: one deleted or moved away, which
/// nothing may make again as a new, empty store without being asked
/// (`detafs init`).
pub fn had_store_at(opts: &Options, path: &str) -> bool {
    let Some(location) = crate::store::local_location(path) else {
        return false;
    };
    let suffix = format!("-{}", place(&location));
    let root = opts.cache_dir.clone().unwrap_or_else(default_cache);
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(&suffix))
}

/// The master key of a format 2 store, from the key file given (or the
/// default one for its id, if there is one), else a passphrase.
pub fn open_master(store: &Store, opts: &Options) -> Result<crate::store::seal::MasterKey> {
    use crate::store::slots::{KeyFile, Secret, default_key_file};
    let mut secrets = Vec::new();
    let given = opts.key_file.clone();
    let path = match &given {
        Some(p) => p.clone(),
        None => default_key_file(&store.info()?.store_id),
    };
    if path.exists() {
        secrets.push(Secret::KeyFile(KeyFile::read(&path)?));
    }
    if let Ok(master) = store.open_master(&secrets)
        && !secrets.is_empty()
    {
        return Ok(master);
    }
    match opts.passphrase.as_ref().and_then(|p| p()) {
        Some(p) => store.open_master(&[Secret::Passphrase(p)]),
        None if secrets.is_empty() => Err(Error::Locked(store.url().to_string())),
        None => Err(Error::WrongKey(store.url().to_string())),
    }
}

/// Where this host notes that it opened a store sealed.
const SEEN_SEALED: &str = "sealed";

/// A store's format only goes up: a marker that says format 1 (in the
/// clear) is believed only when nothing says the store was sealed: no key
/// slot in the store, no key file for it given or on this host, and this
/// host never opened it sealed. Anyone who can write the store can change
/// its marker, and a key holder must never be led to write in the clear.
fn check_format(store: &Store, codec: &Codec, opts: &Options, dir: &std::path::Path) -> Result<()> {
    let seen = dir.join(SEEN_SEALED);
    if codec.is_sealed() {
        if !seen.exists() {
            use std::io::Write;
            crate::private::create_file(&seen)
                .and_then(|mut f| f.write_all(b"format 2\n"))
                .map_err(|e| Error::io(seen.display(), e))?;
        }
        return Ok(());
    }
    let store_id = store.info()?.store_id;
    let key_file = opts
        .key_file
        .clone()
        .unwrap_or_else(|| crate::store::slots::default_key_file(&store_id));
    let why = if seen.exists() {
        Some("this host opened it encrypted before".to_string())
    } else if crate::store::slots::KeyFile::read(&key_file).is_ok_and(|k| k.store_id == store_id) {
        Some(format!(
            "key file {} is one of its keys",
            key_file.display()
        ))
    } else if !store.slots()?.is_empty() {
        Some("it holds key slots".to_string())
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::Downgraded {
            url: store.url().to_string(),
            why,
        }),
        None => Ok(()),
    }
}

/// Files of a store's local state that `reindex` rebuilds: nothing else in
/// that folder is ever deleted.
/// Bytes of decoded trees kept in memory at most (about 100,000 entries of
/// files of one chunk): a version's whole namespace need not fit.
const TREE_BYTES: usize = 24 << 20;

/// Blob references inserted into the index at once by `index_tree`.
const INDEX_BATCH: usize = 65_536;

const INDEX_FILES: [&str; 4] = [
    "index.sqlite",
    "index.sqlite-wal",
    "index.sqlite-shm",
    "probed",
];

/// Deletes a store's local index and blob cache (what `Repo::with_store`
/// creates), so the next open rebuilds them from the store.
pub fn reset_local_state(repo: Repo) -> Result<()> {
    let dir = repo.state_dir.clone();
    let blobs = repo.disk.dir().to_path_buf();
    drop(repo);
    for name in INDEX_FILES {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(path.display(), e));
            }
            _ => {}
        }
    }
    crate::cache::disk::DiskCache::remove(&blobs)
}

/// The embedded default store, under the user's data directory.
pub fn default_store() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("detafs/store")
}

/// Where local indexes and caches go unless `--cache-dir` says otherwise.
pub fn default_cache() -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("detafs")
}

impl Repo {
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// How the store encodes what it holds (`store::codec`).
    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    pub fn index(&self) -> &Arc<Index> {
        &self.index
    }

    /// Bytes of verified chunks a reader that keeps them in memory (the
    /// gateway, S3, Python: `read::chunks::ChunkCache`) may keep.
    pub fn cache_memory(&self) -> usize {
        self.cache_memory
    }

    pub fn disk(&self) -> &DiskCache {
        &self.disk
    }

    /// This store's local index and cache (deleting it loses nothing).
    pub fn state_dir(&self) -> &std::path::Path {
        &self.state_dir
    }

    /// Names this store's local state (cache and staging folders).
    pub fn state_key(&self) -> &str {
        &self.state_key
    }
}

impl Repo {
    /// Opens an initialised store. The embedded default store is created on
    /// first use, so a new user needs no configuration.
    pub fn open(opts: &Options) -> Result<Repo> {
        let store = match &opts.store {
            Some(url) => Store::open(url, false, opts.store_timeout, &opts.asks(), &opts.runtime)?,
            None => {
                let default = default_store();
                // Made on first use only: not again once deleted.
                let at = default.to_string_lossy();
                if !default.join(crate::store::MARKER).exists() && had_store_at(opts, &at) {
                    return Err(Error::StoreGone(at.into_owned()));
                }
                return Repo::open_own(&default, opts.key_file.as_deref(), opts);
            }
        };
        Repo::with_store(store, opts)
    }

    /// Opens the store in local folder `dir`, made if absent, sealed with
    /// a key file (`key_file`, or the default one): the embedded store, or
    /// the cache of a host that reads through a gateway.
    pub fn open_own(
        dir: &std::path::Path,
        key_file: Option<&std::path::Path>,
        opts: &Options,
    ) -> Result<Repo> {
        let at = dir.to_string_lossy().into_owned();
        let store = Store::open(
            &at,
            true,
            opts.store_timeout,
            &Default::default(),
            &opts.runtime,
        )?;
        // A local folder: its create is atomic, nothing to probe.
        let created = store.init(
            false,
            &NewStore::Sealed {
                key_file,
                passphrase: None,
                by: &crate::access::caller::current_user(),
            },
        )?;
        let mut repo = Repo::with_store(store, opts)?;
        repo.created_key_file = created.key_file.filter(|_| created.created);
        Ok(repo)
    }

    /// The key file this open wrote when it created the embedded store
    /// (the caller tells the user to back it up, once).
    pub fn created_key_file(&self) -> Option<&std::path::Path> {
        self.created_key_file.as_deref()
    }

    /// A repo over an already opened store (`opts.store` is not used).
    pub fn with_store(store: Store, opts: &Options) -> Result<Repo> {
        let cache_memory = opts
            .cache_memory
            .unwrap_or_else(crate::limits::cache_memory);
        if cache_memory < crate::limits::MIN_CACHE_MEMORY {
            return Err(Error::InvalidInput(format!(
                "a memory cache of {cache_memory} bytes: give at least {} (16 MiB)",
                crate::limits::MIN_CACHE_MEMORY
            )));
        }
        let state_key = state_key(&store)?;
        let root = opts.cache_dir.clone().unwrap_or_else(default_cache);
        crate::private::ensure_dir(&root)?;
        let dir = root.join(&state_key);
        crate::private::ensure_dir(&dir)?;
        let codec = match store.codec() {
            Err(Error::Locked(_)) => {
                store.unlock(&open_master(&store, opts)?)?;
                store.codec()?
            }
            other => other?,
        };
        check_format(&store, &codec, opts, &dir)?;
        let index = Arc::new(Index::open(&dir.join("index.sqlite"))?);
        let disk = DiskCache::open(dir.join("blobs"), opts.cache_size, index.clone())?;
        let budget = Arc::new(Budget::new(crate::limits::to_usize(cache_memory)));
        Ok(Repo {
            store: Arc::new(store),
            codec,
            index,
            disk,
            state_dir: dir,
            state_key,
            trees: Mutex::new(WeighedLru::new(TREE_BYTES, budget.clone(), Part::Trees)),
            budget,
            tags: tag::TagCache::default(),
            policy: policies::PolicyCache::default(),
            lifecycle: lifecycle::LifecycleCache::default(),
            created_key_file: None,
            damage: Default::default(),
            upstream: None,
            cache_memory: crate::limits::to_usize(cache_memory),
        })
    }

    /// Probes the store for conditional create (`Store::probe`) unless this
    /// host already has; `force` probes again (at mount).
    pub fn check_store(&self, force: bool) -> Result<()> {
        let marker = self.state_dir.join("probed");
        if !force && marker.exists() {
            return Ok(());
        }
        self.store.probe()?;
        std::fs::write(&marker, b"conditional create honoured\n")
            .map_err(|e| Error::io(marker.display(), e))
    }

    /// Leaves the note of a gc (or an erasure) about to delete versions'
    /// data: every host's next commit forgets where blobs were before it
    /// reuses any (`gc_mark`). Then waits long enough that a commit that
    /// checked for notes just before the note appeared has landed its
    /// record (its create retries for the store's deadline at most), so
    /// what the caller reads next includes what that commit reuses. (Most
    /// tests run with nothing in flight: `DETAFS_TEST_GC_NOTE_WAIT`.)
    pub fn leave_gc_note(&self) -> Result<()> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let key = keys::gc_note(nanos, rand::random());
        self.store.put_create(&key, Bytes::from_static(b"gc\n"))?;
        let wait = self.store.deadline() + std::time::Duration::from_secs(5);
        std::thread::sleep(crate::hold::test_duration("DETAFS_TEST_GC_NOTE_WAIT", wait));
        Ok(())
    }

    /// The newest gc note in the store. One this host had not seen makes
    /// the index forget every blob location first: the packs it names may
    /// be gone, and a commit must not reuse them (the next commit of a
    /// dataset re-learns its latest version's, `index_tree`).
    pub fn gc_mark(&self) -> Result<Option<String>> {
        let seen = self.index.gc_seen()?;
        let newer = self.store.list(keys::GC_NOTES, seen.as_deref())?;
        match newer.into_iter().map(|l| l.key).max() {
            Some(note) => {
                self.index.forget_locations(&note)?;
                Ok(Some(note))
            }
            None => Ok(seen),
        }
    }

    /// The node at `path` in a version's tree.
    pub fn lookup(&self, root: &BlobRef, path: &RelPath) -> Result<Option<Node>> {
        Ok(self.walk(root, path, |r| self.tree(r).map(Some))?.flatten())
    }

    /// `lookup` without I/O: `None` when a tree on the way is not in memory.
    pub fn lookup_cached(&self, root: &BlobRef, path: &RelPath) -> Option<Option<Node>> {
        self.walk(root, path, |r| Ok(self.cached_tree(r))).ok()?
    }

    /// The node at `path` under `root`, loading trees with `tree`; `None`
    /// when `tree` had none to give.
    fn walk(
        &self,
        root: &BlobRef,
        path: &RelPath,
        tree: impl Fn(&BlobRef) -> Result<Option<Arc<Tree>>>,
    ) -> Result<Option<Option<Node>>> {
        let mut node = Node::Dir {
            mode: 0o755,
            mtime: Default::default(),
            tree: *root,
            atime: None,
            links: false,
        };
        for part in path.names() {
            let Node::Dir { tree: t, .. } = &node else {
                return Ok(Some(None));
            };
            let Some(t) = tree(t)? else {
                return Ok(None);
            };
            match t.get(part) {
                Some(n) => node = n.clone(),
                None => return Ok(Some(None)),
            }
        }
        Ok(Some(Some(node)))
    }

    /// A tree, if it is in memory.
    pub fn cached_tree(&self, r: &BlobRef) -> Option<Arc<Tree>> {
        self.trees.lock().get(&r.id).cloned()
    }

    /// Loads many trees into memory with one range read per run of trees that
    /// lie back to back in a pack (a commit writes a folder's subtrees
    /// together), instead of one read each.
    pub fn load_trees(&self, refs: &[BlobRef]) -> Result<()> {
        if self.upstream.is_some() {
            return refs.iter().try_for_each(|r| self.tree(r).map(drop));
        }
        let mut todo = Vec::new();
        for r in refs.iter().filter(|r| !self.tree_in_memory(r)) {
            // Trees this host has seen come from its disk cache, not the store.
            if self.disk.contains(&r.id) {
                self.tree(r)?;
            } else {
                todo.push(*r);
            }
        }
        todo.sort_by_key(|r| (r.pack, r.offset));
        todo.dedup_by_key(|r| (r.pack, r.offset));
        for run in pack::runs(&todo, 8 << 20) {
            if run.len() == 1 {
                self.tree(&run[0])?;
                continue;
            }
            for (r, stored) in
                run.iter()
                    .zip(pack::read_run_stored(&self.store, run, BlobKind::Tree)?)
            {
                let bytes = self.codec.decode_blob(r, BlobKind::Tree, stored.clone())?;
                let tree = Tree::decode(&bytes).map_err(|e| corrupt_tree(r, e))?;
                self.remember_tree(r, tree, &stored);
            }
        }
        Ok(())
    }

    /// How many bytes of trees may be kept in memory now.
    pub fn tree_room(&self) -> usize {
        TREE_BYTES.min(self.budget.room(Part::Trees))
    }

    /// The memory budget this process keeps within (`--cache-memory`).
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// Whether a tree is in memory, so loading it costs no I/O.
    pub fn tree_in_memory(&self, r: &BlobRef) -> bool {
        self.trees.lock().contains(&r.id)
    }

    /// Remembers a tree just written (`stored`: as its pack holds it), so
    /// it is not fetched back.
    pub fn remember_tree(&self, r: &BlobRef, tree: Tree, stored: &[u8]) {
        self.keep_tree(r, Arc::new(tree));
        self.disk.put(&r.id, stored);
    }

    fn keep_tree(&self, r: &BlobRef, tree: Arc<Tree>) {
        let weight = tree.bytes();
        self.trees.lock().put(r.id, tree, weight);
    }

    /// The chunks of one run, verified. Remote stores read through the disk
    /// cache, so a host re-reads what it read before without the network, and
    /// keeps serving it while the store is unreachable.
    pub fn read_chunks(&self, run: &[BlobRef]) -> Result<Vec<Bytes>> {
        self.read_chunks_each(run)?.into_iter().collect()
    }

    /// Like `read_chunks`, each chunk verified on its own (see
    /// `pack::read_run_each`): the mount reads a folder's small files as one
    /// run, and a bad one must not fail its neighbours. The chunks of a run
    /// share one buffer (`Codec::decode_run`).
    pub fn read_chunks_each(&self, run: &[BlobRef]) -> Result<Vec<Result<Bytes>>> {
        if let Some(chunks) = self.upstream_chunks(run) {
            return Ok(chunks?.into_iter().map(Ok).collect());
        }
        if !self.store.is_remote() {
            return pack::read_run_each(&self.store, run, BlobKind::Chunk);
        }
        let cached: Option<Vec<Bytes>> = run
            .iter()
            .map(|r| self.disk.decoded(r, BlobKind::Chunk, &self.codec))
            .collect();
        if let Some(chunks) = cached {
            return Ok(one_buffer(chunks));
        }
        let stored = pack::read_run_bytes(&self.store, run, BlobKind::Chunk)?;
        let decoded = self.codec.decode_run(run, BlobKind::Chunk, stored.clone());
        for (r, d) in run.iter().zip(&decoded) {
            if d.is_ok() {
                self.disk.put(&r.id, &stored[pack::span(&run[0], r)]);
            }
        }
        Ok(decoded)
    }

    /// Records where every blob under `root` lives, for dedup by later commits.
    /// Trees already indexed are skipped, so this costs only what is new.
    pub fn index_tree(&self, root: &BlobRef) -> Result<()> {
        let mut blobs = Vec::new();
        let mut trees = std::collections::HashSet::new();
        let mut todo = vec![*root];
        while let Some(r) = todo.pop() {
            if trees.contains(&r.id) || self.index.tree_indexed(&r.id)? {
                continue;
            }
            blobs.push(r);
            trees.insert(r.id);
            for e in &self.tree(&r)?.entries {
                match &e.node {
                    Node::Dir { tree, .. } => todo.push(*tree),
                    Node::File { chunks, .. } => blobs.extend_from_slice(chunks),
                    Node::Symlink { .. } | Node::Special { .. } => {}
                }
            }
            // In batches: a version of millions of files is not held.
            if blobs.len() >= INDEX_BATCH {
                self.index.insert_blobs(&blobs)?;
                blobs.clear();
            }
        }
        self.index.insert_blobs(&blobs)?;
        self.index.mark_trees_indexed(&trees)
    }
}

impl TreeSource for Repo {
    fn tree(&self, r: &BlobRef) -> Result<Arc<Tree>> {
        if let Some(t) = self.cached_tree(r) {
            return Ok(t);
        }
        if let Some(tree) = self.upstream_tree(r) {
            let tree = Arc::new(tree?);
            self.keep_tree(r, tree.clone());
            return Ok(tree);
        }
        let bytes = match self.disk.decoded(r, BlobKind::Tree, &self.codec) {
            Some(b) => b,
            None => {
                let stored =
                    pack::read_run_stored(&self.store, std::slice::from_ref(r), BlobKind::Tree)?
                        .remove(0);
                let b = self.codec.decode_blob(r, BlobKind::Tree, stored.clone())?;
                self.disk.put(&r.id, &stored);
                b
            }
        };
        let tree = Arc::new(Tree::decode(&bytes).map_err(|e| corrupt_tree(r, e))?);
        self.keep_tree(r, tree.clone());
        Ok(tree)
    }
}

/// A tree whose bytes match its id but do not parse is corrupt at the source.
fn corrupt_tree(r: &BlobRef, e: Error) -> Error {
    match e {
        Error::Malformed { detail, .. } => Error::Corrupt {
            kind: "tree",
            id: r.id,
            pack: r.pack,
            detail,
        },
        other => other,
    }
}

/// Chunks copied into one buffer, as a run read from the store comes.
fn one_buffer(chunks: Vec<Bytes>) -> Vec<Result<Bytes>> {
    let all = Bytes::from(chunks.concat());
    let mut at = 0;
    chunks
        .iter()
        .map(|c| {
            at += c.len();
            Ok(all.slice(at - c.len()..at))
        })
        .collect()
}
