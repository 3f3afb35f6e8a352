//! `detafs._detafs`: the store as Python sees it, on detafs's own library
//! (no second implementation of the format or the crypto). Every call
//! that may wait on the store or the disk lets go of the GIL; a `Store` is
//! shared between threads as it is. `detafs/__init__.py` wraps it.

mod errors;
mod sys;

use detafs::access::caller::{Actor, current_user};
use detafs::access::{Action, dataset_resource};
use detafs::commit::edit::{Content, Edit, commit_edits, edit_path};
use detafs::commit::{CommitMeta, commit_dir};
use detafs::read::chunks::{ChunkCache, spans};
use detafs::relpath::RelPath;
use detafs::repo::{Options, Passphrase, Repo};
use detafs::retention;
use detafs::snapshot::diff::diff;
use detafs::snapshot::tree::TreeSource;
use detafs::snapshot::{Node, Record, walk};
use detafs::store::pack::BlobRef;
use detafs::{Error, Result};
use errors::to_py;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What `ls`, `info` and `find` tell of an entry: its path (relative to
/// the folder asked), kind, size, mode, mtime (seconds, nanoseconds) and a
/// symlink's target.
type EntryInfo = (String, &'static str, u64, u32, (i64, u32), Option<String>);

/// A detafs store, opened as the CLI opens it.
#[pyclass(frozen, module = "detafs._detafs")]
struct Store {
    repo: Arc<Repo>,
    chunks: Arc<ChunkCache>,
}

fn kind(node: &Node) -> &'static str {
    match node {
        Node::File { .. } => "file",
        Node::Dir { .. } => "directory",
        Node::Symlink { .. } => "link",
        Node::Special { .. } => "other",
    }
}

fn info(path: String, node: &Node) -> EntryInfo {
    let (mode, target) = match node {
        Node::File { mode, .. } | Node::Dir { mode, .. } | Node::Special { mode, .. } => {
            (*mode, None)
        }
        Node::Symlink { target, .. } => (0o777, Some(String::from_utf8_lossy(target).into())),
    };
    let m = node.mtime();
    (path, kind(node), node.size(), mode, (m.0, m.1), target)
}

fn name(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).map(PathBuf::from)
}

impl Store {
    /// The record `spec` names (`v3`, `3`, `latest`, a tag, `latest~1`).
    fn record(&self, dataset: &str, spec: &str) -> Result<Record> {
        // Through the library's one rule (`Repo::version`): a version's
        // spelling, and what is served of it (an expired one is missing,
        // an erased one has its new root).
        self.repo.version(dataset, spec)
    }

    /// The node at `path` of version `spec`, and the version's name.
    fn node(&self, dataset: &str, spec: &str, path: &str) -> Result<(Node, RelPath, u64)> {
        let record = self.record(dataset, spec)?;
        let rel = RelPath::parse(path)?;
        let root = || Node::Dir {
            mode: 0o755,
            mtime: record.mtime(),
            tree: record.tree,
            atime: None,
            links: false,
        };
        let node = match rel.is_root() {
            true => Some(root()),
            false => self.repo.lookup(&record.tree, &rel)?,
        };
        let node = node.ok_or_else(|| Error::NoPath {
            version: format!("v{}", record.version),
            path: rel.to_string(),
        })?;
        Ok((node, rel, record.version))
    }

    fn dir_tree(&self, dataset: &str, spec: &str, path: &str) -> Result<BlobRef> {
        match self.node(dataset, spec, path)? {
            (Node::Dir { tree, .. }, _, _) => Ok(tree),
            (_, rel, _) => Err(Error::fs(
                detafs::error::FsError::NotDir,
                format!("{rel} is not a folder"),
            )),
        }
    }
}

#[pymethods]
impl Store {
    /// Opens the store at `url` (a folder, `s3://…`, `gs://…`, `az://…`;
    /// default `$DETAFS_STORE`, else the embedded store), with the key file
    /// `key_file` (default `$DETAFS_KEY_FILE`, else the one `detafs init`
    /// wrote) or `passphrase` (default `$DETAFS_PASSWORD`, or the first
    /// line of `$DETAFS_PASSWORD_FILE`).
    #[new]
    #[pyo3(signature = (url=None, *, key_file=None, passphrase=None, cache_dir=None, timeout=None, cache_memory=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: Option<String>,
        key_file: Option<PathBuf>,
        passphrase: Option<String>,
        cache_dir: Option<PathBuf>,
        timeout: Option<f64>,
        cache_memory: Option<u64>,
    ) -> PyResult<Store> {
        let passphrase: Passphrase = Arc::new(move || {
            let given = passphrase
                .clone()
                .or_else(|| std::env::var("DETAFS_PASSWORD").ok())
                .or_else(|| {
                    let f = std::fs::read_to_string(env_path("DETAFS_PASSWORD_FILE")?).ok()?;
                    Some(f.lines().next()?.to_string())
                });
            given.map(zeroize::Zeroizing::new)
        });
        let timeout = match timeout {
            Some(t) if !(t > 0.0 && t <= 3600.0) => {
                return Err(to_py(Error::InvalidInput(format!(
                    "timeout {t} s: between 0 and 3600 s"
                ))));
            }
            Some(t) => Duration::from_secs_f64(t),
            None => Duration::from_secs(60),
        };
        let sse = match std::env::var("DETAFS_SSE") {
            Ok(s) => Some(detafs::store::sse::Sse::parse(&s).map_err(to_py)?),
            Err(_) => None,
        };
        let object_lock = match std::env::var("DETAFS_OBJECT_LOCK") {
            Ok(s) => Some(humantime::parse_duration(&s).map_err(|e| {
                to_py(Error::InvalidInput(format!(
                    "DETAFS_OBJECT_LOCK {s:?}: {e}"
                )))
            })?),
            Err(_) => None,
        };
        let opts = Options {
            store: url.or_else(|| std::env::var("DETAFS_STORE").ok()),
            cache_dir: cache_dir.or_else(|| env_path("DETAFS_CACHE")),
            cache_size: 1 << 30,
            cache_memory: match cache_memory {
                Some(bytes) => Some(bytes),
                None => detafs::limits::env_size("DETAFS_CACHE_MEMORY").map_err(to_py)?,
            },
            store_timeout: timeout,
            key_file: key_file.or_else(|| env_path("DETAFS_KEY_FILE")),
            passphrase: Some(passphrase),
            sse,
            object_lock,
            runtime: runtime()?,
        };
        let repo = Arc::new(py.detach(|| Repo::open(&opts)).map_err(to_py)?);
        let chunks = ChunkCache::new(repo.clone(), repo.cache_memory());
        Ok(Store { repo, chunks })
    }

    /// The store's URL.
    #[getter]
    fn url(&self) -> String {
        self.repo.store().url().to_string()
    }

    /// The datasets, by name.
    fn datasets(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        py.detach(|| self.repo.datasets()).map_err(to_py)
    }

    fn create_dataset(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        py.detach(|| self.repo.create_dataset(name)).map_err(to_py)
    }

    /// The versions of `dataset`, oldest first, each as `detafs log
    /// --json` shows it (JSON text).
    fn versions_json(&self, py: Python<'_>, dataset: &str) -> PyResult<String> {
        py.detach(|| {
            let rows = self.repo.log_entries(dataset)?;
            Ok(serde_json::to_string(&rows).expect("serializable"))
        })
        .map_err(to_py)
    }

    /// The version number `spec` names now.
    fn resolve(&self, py: Python<'_>, dataset: &str, spec: &str) -> PyResult<u64> {
        py.detach(|| self.record(dataset, spec).map(|r| r.version))
            .map_err(to_py)
    }

    /// What `path` of version `spec` is (see `EntryInfo`).
    fn info(&self, py: Python<'_>, dataset: &str, spec: &str, path: &str) -> PyResult<EntryInfo> {
        py.detach(|| {
            let (node, rel, _) = self.node(dataset, spec, path)?;
            Ok(info(rel.to_string(), &node))
        })
        .map_err(to_py)
    }

    /// The entries of folder `path` of version `spec`, in name order.
    fn ls(
        &self,
        py: Python<'_>,
        dataset: &str,
        spec: &str,
        path: &str,
    ) -> PyResult<Vec<EntryInfo>> {
        py.detach(|| {
            let tree = self.repo.tree(&self.dir_tree(dataset, spec, path)?)?;
            Ok(tree
                .entries
                .iter()
                .map(|e| info(name(&e.name), &e.node))
                .collect())
        })
        .map_err(to_py)
    }

    /// Every entry below folder `path` of version `spec`, paths relative
    /// to it, folders before what they hold. A version whose walk would
    /// visit more than detafs's limit of paths is refused.
    fn walk(
        &self,
        py: Python<'_>,
        dataset: &str,
        spec: &str,
        path: &str,
    ) -> PyResult<Vec<EntryInfo>> {
        py.detach(|| {
            let top = self.dir_tree(dataset, spec, path)?;
            walk::expansion(&*self.repo, &top)?;
            let mut out = Vec::new();
            let mut stack = vec![(top, String::new())];
            while let Some((tree, prefix)) = stack.pop() {
                let tree = self.repo.tree(&tree)?;
                for e in &tree.entries {
                    let p = format!("{prefix}{}", name(&e.name));
                    if let Node::Dir { tree, .. } = &e.node {
                        stack.push((*tree, format!("{p}/")));
                    }
                    out.push(info(p, &e.node));
                }
            }
            Ok(out)
        })
        .map_err(to_py)
    }

    /// A reader of file `path` of version `spec`.
    fn open(&self, py: Python<'_>, dataset: &str, spec: &str, path: &str) -> PyResult<Reader> {
        py.detach(|| {
            let (node, rel, v) = self.node(dataset, spec, path)?;
            match node.readable(|| (format!("v{v}"), rel.to_string()))? {
                Node::File { chunks, size, .. } => Ok(Reader {
                    cache: self.chunks.clone(),
                    chunks,
                    size,
                    last_end: AtomicU64::new(0),
                }),
                node => Err(Error::fs(
                    detafs::error::FsError::IsDir,
                    format!("{rel} is a {}, not a file", kind(&node)),
                )),
            }
        })
        .map_err(to_py)
    }

    /// What changed from version `from` to version `to`: (`A`, `M` or `D`,
    /// path) in path order.
    fn diff(
        &self,
        py: Python<'_>,
        dataset: &str,
        from: &str,
        to: &str,
    ) -> PyResult<Vec<(char, String)>> {
        py.detach(|| {
            let (a, b) = (self.record(dataset, from)?, self.record(dataset, to)?);
            Ok(diff(&*self.repo, Some(&a.tree), Some(&b.tree))?
                .into_iter()
                .map(|c| {
                    let tag = c.kind.letter();
                    (tag, name(&c.path))
                })
                .collect())
        })
        .map_err(to_py)
    }

    /// The tags of `dataset`: (tag, version number).
    fn tags(&self, py: Python<'_>, dataset: &str) -> PyResult<Vec<(String, u64)>> {
        py.detach(|| {
            Ok(self
                .repo
                .tags(dataset)?
                .into_iter()
                .map(|t| (t.tag, t.version))
                .collect())
        })
        .map_err(to_py)
    }

    /// Names version `spec` `tag` (tags never move).
    fn tag(&self, py: Python<'_>, dataset: &str, spec: &str, tag: &str) -> PyResult<u64> {
        py.detach(|| {
            let t = self.repo.create_tag(dataset, spec, tag, &current_user())?;
            Ok(t.version)
        })
        .map_err(to_py)
    }

    /// Expires `versions` of `dataset` (or, none named, what its retention
    /// rules do not keep); JSON text of the plan (`forget --json`).
    #[pyo3(signature = (dataset, versions, dry_run=false))]
    fn forget(
        &self,
        py: Python<'_>,
        dataset: &str,
        versions: Vec<String>,
        dry_run: bool,
    ) -> PyResult<String> {
        py.detach(|| {
            let plan =
                retention::forget(&self.repo, dataset, &versions, dry_run, &Actor::current())?;
            Ok(plan.to_json(dry_run).to_string())
        })
        .map_err(to_py)
    }

    /// Puts (or, `release`, ends) a legal hold on version `spec`.
    #[pyo3(signature = (dataset, spec, reason, release=false))]
    fn hold(
        &self,
        py: Python<'_>,
        dataset: &str,
        spec: &str,
        reason: &str,
        release: bool,
    ) -> PyResult<u64> {
        py.detach(|| {
            let by = Actor::current();
            match release {
                true => retention::release(&self.repo, dataset, spec, reason, &by),
                false => retention::hold(&self.repo, dataset, spec, reason, &by),
            }
        })
        .map_err(to_py)
    }

    /// JSON text of the rules, holds and expired versions of `dataset`
    /// (`retention show --json`).
    fn retention(&self, py: Python<'_>, dataset: &str) -> PyResult<String> {
        py.detach(|| {
            let who = Actor::current().who;
            self.repo
                .require(&who, Action::Versions, &dataset_resource(dataset))?;
            self.repo.check_dataset(dataset)?;
            let lc = self.repo.lifecycle(dataset)?;
            Ok(retention::state_json(dataset, &lc).to_string())
        })
        .map_err(to_py)
    }

    /// Sets `dataset`'s retention rules from JSON text (the fields of
    /// `retention show --json`'s `rules`; durations in seconds).
    fn set_retention(&self, py: Python<'_>, dataset: &str, rules: &str) -> PyResult<()> {
        py.detach(|| {
            let rules = serde_json::from_str(rules)
                .map_err(|e| Error::InvalidInput(format!("retention rules: {e}")))?;
            retention::set_rules(&self.repo, dataset, rules, &Actor::current())
        })
        .map_err(to_py)
    }

    /// Erases `path` from every version of `dataset` that holds it (from
    /// `from_version` on); JSON text: versions, files, blobs, bytes.
    #[pyo3(signature = (dataset, path, reason, from_version=None, dry_run=false))]
    fn erase(
        &self,
        py: Python<'_>,
        dataset: &str,
        path: &str,
        reason: &str,
        from_version: Option<String>,
        dry_run: bool,
    ) -> PyResult<String> {
        py.detach(|| {
            let path = RelPath::parse(path.as_bytes())?;
            let req = detafs::erase::Request {
                dataset,
                path: &path,
                from: from_version.as_deref(),
                reason,
                dry_run,
            };
            let done = detafs::erase::erase(&self.repo, &req, &Actor::current())?;
            Ok(done.to_json().to_string())
        })
        .map_err(to_py)
    }

    /// Commits local folder `folder` as the next version of `dataset`
    /// (JSON text of its log entry).
    #[pyo3(signature = (dataset, folder, message, author=None))]
    fn commit(
        &self,
        py: Python<'_>,
        dataset: &str,
        folder: PathBuf,
        message: &str,
        author: Option<String>,
    ) -> PyResult<String> {
        py.detach(|| {
            let author = author.unwrap_or_else(current_user);
            let meta = CommitMeta {
                content_only: false,
                dataset,
                message,
                author: &author,
            };
            let record = commit_dir(&self.repo, &meta, &folder, &detafs::progress::Quiet)?;
            Ok(record.log_entry().to_string())
        })
        .map_err(to_py)
    }

    /// Commits changes to version `parent` (None: the newest; a dataset
    /// without versions gets its first): `puts` are (path in the dataset,
    /// local file to take its bytes from), `deletes` paths to remove. A
    /// version committed meanwhile that changed none of them is built
    /// upon; one that changed any is a conflict naming them. JSON text of
    /// the new version's log entry.
    #[pyo3(signature = (dataset, parent, puts, deletes, message, author=None))]
    #[allow(clippy::too_many_arguments)]
    fn commit_changes(
        &self,
        py: Python<'_>,
        dataset: &str,
        parent: Option<String>,
        puts: Vec<(String, PathBuf)>,
        deletes: Vec<String>,
        message: &str,
        author: Option<String>,
    ) -> PyResult<String> {
        py.detach(|| {
            let mut edits = Vec::with_capacity(puts.len() + deletes.len());
            for (path, file) in puts {
                edits.push(Edit::file(edit_path(&path)?, Content::File(file)));
            }
            for path in deletes {
                edits.push(Edit::delete(edit_path(&path)?));
            }
            let author = author.unwrap_or_else(current_user);
            let meta = CommitMeta {
                content_only: false,
                dataset,
                message,
                author: &author,
            };
            let record = commit_edits(&self.repo, &meta, parent.as_deref(), edits)?;
            Ok(record.log_entry().to_string())
        })
        .map_err(to_py)
    }
}

/// One file of a version: its bytes read in ranges, each chunk fetched
/// only when a read needs it and verified before it is returned. A read
/// that starts where the last one ended has the next `READ_AHEAD` bytes
/// fetched beside it.
#[pyclass(frozen, module = "detafs._detafs")]
struct Reader {
    cache: Arc<ChunkCache>,
    chunks: Vec<BlobRef>,
    size: u64,
    /// Where the last read ended.
    last_end: AtomicU64,
}

/// The process's one runtime, made by the first `Store` it opens. A child
/// made by `fork` (multiprocessing) has none of its parent's threads: it
/// makes its own.
fn runtime() -> PyResult<Arc<detafs::runtime::Runtime>> {
    static MADE: std::sync::Mutex<Option<(u32, Arc<detafs::runtime::Runtime>)>> =
        std::sync::Mutex::new(None);
    let mut made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let me = std::process::id();
    match &*made {
        Some((pid, rt)) if *pid == me => Ok(rt.clone()),
        _ => {
            let rt = detafs::runtime::Runtime::new().map_err(to_py)?;
            // A parent's runtime is never dropped here: its drop would
            // wait for threads this process does not have.
            std::mem::forget(made.replace((me, rt.clone())));
            Ok(rt)
        }
    }
}

/// Bytes fetched ahead of a sequential reader.
const READ_AHEAD: u64 = 16 << 20;

#[pymethods]
impl Reader {
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// Bytes `[start, end)` (clipped to the file).
    fn read_range<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        end: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let end = end.min(self.size);
        let sequential = self.last_end.swap(end, Ordering::Relaxed) == start && start > 0;
        if sequential {
            self.cache
                .prefetch_span(&self.chunks, end, (end + READ_AHEAD).min(self.size));
        }
        let start = start.min(end);
        // Fetched and verified without the GIL; then copied once, into
        // the bytes object itself.
        let (skip, pieces) = py
            .detach(|| self.cache.pieces(&self.chunks, start, end, false))
            .map_err(to_py)?
            .unwrap_or_default();
        let len = detafs::limits::to_usize(end - start);
        sys::bytes_of(py, len, spans(skip, &pieces, len))
    }
}

#[pymodule]
fn _detafs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Store>()?;
    m.add_class::<Reader>()?;
    errors::register(m)?;
    Ok(())
}
