//! The gateway's REST API: who calls (an API key), whether the store's
//! policy and the key's scopes allow it, then the dataset operation, on the
//! blocking pool. Errors are `{"error": {"code", "message"}}`; every request
//! is one line of the request log.

use super::logline::{Asks, asking};
use crate::access::trail::Trail;
use crate::access::{self, Action, Policy, Who};
use crate::error::Error;
use crate::read::chunks::ChunkCache;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::repo::apikeys::{self, ApiKey};
use crate::repo::tag::{self, Tag};
use crate::snapshot::tree::TreeSource;
use crate::snapshot::tree::{Entry, etag};
use crate::snapshot::{Node, Record};
use crate::store::pack::BlobRef;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Largest request body; larger files go through an upload session.
pub const MAX_BODY: usize = 10 * 1000 * 1000;
/// How long keys, the policy and a dataset's versions and tags read from
/// the store are trusted.
const FRESH: Duration = Duration::from_secs(2);
/// Datasets whose views are kept.
const VIEWS: usize = 256;

pub struct Api {
    repo: Arc<Repo>,
    trail: Trail,
    /// Bearer JWTs, if the gateway was given a JWKS.
    tokens: Option<super::tokens::Tokens>,
    /// `--policy`, applied on top of the store's.
    narrowing: Option<Arc<Policy>>,
    /// API keys and the policy as last read, with when.
    known: Mutex<Option<(Instant, Arc<Known>)>>,
    /// TLS connections open now (`mod.rs` counts them; /metrics says).
    pub(super) connections: AtomicU64,
    /// How long keys and the policy are trusted: `FRESH` (tests: none,
    /// through `DETAFS_TEST_KEYS_FRESH`, so a revocation or a policy applies
    /// at the next request and no test waits for it).
    keys_fresh: Duration,
    /// Held while they are read again.
    reading: tokio::sync::Mutex<()>,
    /// Chunks of files served, verified, bounded in bytes.
    pub(super) chunks: Arc<ChunkCache>,
    /// GETs of a path answered from memory, and with a read.
    from_memory: AtomicU64,
    with_reads: AtomicU64,
    /// Each dataset's versions and tags as last read.
    views: Mutex<lru::LruCache<String, Arc<View>>>,
    /// Held while a view is read.
    /// Per dataset, held while its view is read (requests for one dataset
    /// share a read; one dataset's slow read or a flood of names that do
    /// not exist does not hold up the others).
    viewing: Mutex<std::collections::HashMap<String, std::sync::Weak<tokio::sync::Mutex<()>>>>,
    started: Instant,
    /// Requests by (method and route, status): how many, seconds in all.
    metrics: Mutex<std::collections::BTreeMap<(String, u16), (u64, f64)>>,
    /// The last consistency audit, if one ran.
    audit: Mutex<Option<Audited>>,
}

/// A consistency audit's result (the `verify` engine).
#[derive(Clone)]
pub struct Audited {
    pub at: std::time::SystemTime,
    pub seconds: f64,
    pub versions: usize,
    pub problems: Vec<String>,
    pub error: Option<String>,
    /// Packs and bytes at the store and in its colder tier (`verify`).
    pub tiers: Option<((usize, u64), (usize, u64))>,
}

pub(super) struct Known {
    keys: Vec<ApiKey>,
    policy: Option<Policy>,
    /// The store's policy version in force (0: none).
    policy_version: u64,
    /// The gateway's own `--policy`, which narrows the store's.
    narrowing: Option<Arc<Policy>>,
}

impl Known {
    pub(super) fn keys(&self) -> &[ApiKey] {
        &self.keys
    }
}

/// A dataset as read from the store at `at`: its records (oldest first)
/// and tags. Versions are immutable, so a view is only ever short of the
/// newest versions and tag moves.
pub(super) struct View {
    at: Instant,
    pub(super) records: Vec<Record>,
    pub(super) tags: Vec<Tag>,
}

/// An error as the client sees it.
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    extra: Option<Value>,
}

pub(super) fn err(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        code,
        message: message.into(),
        extra: None,
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let message = e.to_string();
        let (status, code) = match &e {
            Error::NoDataset(_) | Error::DatasetDeleted { .. } => {
                (StatusCode::NOT_FOUND, "no_dataset")
            }
            Error::NoVersion { .. } => (StatusCode::NOT_FOUND, "no_version"),
            Error::NoPath { .. } => (StatusCode::NOT_FOUND, "no_path"),
            Error::Erased { .. } => (StatusCode::GONE, "erased"),
            // The seed's checklist: an object deleted from the store by hand.
            Error::Missing { .. } => (StatusCode::NOT_FOUND, "missing_object"),
            Error::Conflict { paths, winner, .. } => {
                let paths: Vec<String> = paths
                    .iter()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect();
                return ApiError {
                    status: StatusCode::CONFLICT,
                    code: "conflict",
                    message,
                    extra: Some(json!({ "paths": paths, "winner": winner })),
                };
            }
            Error::NothingToCommit(v) => {
                return ApiError {
                    status: StatusCode::CONFLICT,
                    code: "nothing_to_commit",
                    message,
                    extra: Some(json!({ "version": v })),
                };
            }
            Error::DatasetExists(_) => (StatusCode::CONFLICT, "exists"),
            Error::InvalidInput(_) | Error::Policy { .. } => (StatusCode::BAD_REQUEST, "invalid"),
            Error::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Error::Store { .. }
            | Error::TooManyRetries(_)
            | Error::CommitTooLong(_)
            | Error::CollectedMeanwhile => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        err(status, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": { "code": self.code, "message": self.message } });
        if let Some(extra) = self.extra {
            body["error"]["details"] = extra;
        }
        (self.status, Json(body)).into_response()
    }
}

impl ApiError {
    pub(super) fn status(&self) -> StatusCode {
        self.status
    }

    pub(super) fn code(&self) -> &'static str {
        self.code
    }

    pub(super) fn message(&self) -> &str {
        &self.message
    }
}

pub(super) type Reply = Result<Response, ApiError>;

/// Who called, as the policy names them.
#[derive(Clone)]
pub(super) struct Caller {
    /// `key:NAME` or `token:SUBJECT`: the author of its commits.
    name: String,
    /// What its staged changes and uploads belong to (`pending::owner`
    /// of the key's id, so that a key revoked and made again under its
    /// name owns none of them, or of `token:SUBJECT`).
    owner: String,
    /// Its request's decision, which a hidden answer marks refused
    /// (`logline.rs`).
    refused: Option<Arc<std::sync::atomic::AtomicBool>>,
    scopes: Vec<String>,
    who: Who,
    known: Arc<Known>,
}

impl Caller {
    /// What the caller is shown may change when this does: the policy
    /// in force (a host mounting through the gateway forgets what it was
    /// shown under another).
    pub(super) fn view(&self) -> String {
        format!("policy {}", self.known.policy_version)
    }

    /// `key:NAME` or `token:SUBJECT`: the author of what it makes.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Its principals, for the policy.
    pub(super) fn who(&self) -> &Who {
        &self.who
    }

    /// Whose staged changes and uploads are the caller's.
    pub(super) fn owner(&self) -> &str {
        &self.owner
    }

    /// Something the request asked for is there but hidden from the
    /// caller: answered as missing, logged as refused.
    pub(super) fn hidden(&self) {
        super::logline::refuse(self.refused.as_ref());
    }

    /// Allowed if the caller's scopes hold the action and the policy (if
    /// one is set) allows it to the caller's principals on any of `resources`.
    pub(super) fn may(&self, action: Action, resources: &[String]) -> Result<(), ApiError> {
        if !apikeys::scopes_allow(&self.scopes, action) {
            return Err(err(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("{} has no {} scope", self.name, action.name()),
            ));
        }
        let (store, narrowing) = (&self.known.policy, &self.known.narrowing);
        for (p, whose) in [
            (store.as_ref(), "the store's"),
            (narrowing.as_deref(), "this gateway's"),
        ] {
            let Some(p) = p else { continue };
            let d = p.decide(&self.who, action, resources);
            if !d.allowed {
                return Err(err(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    format!(
                        "{} on {}: {whose} policy: {}",
                        action.name(),
                        resources[0],
                        d.explain()
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn sees(&self, action: Action, resources: &[String]) -> bool {
        self.may(action, resources).is_ok()
    }

    /// Whether `path` of a version named `versions` exists for the caller:
    /// its scopes let it see versions and every policy in force shows the
    /// path (`Policy::sees_path`, the mount's rule). What it hides is
    /// neither listed nor found.
    pub(super) fn sees_path(&self, versions: &[String], path: &RelPath, dir: bool) -> bool {
        apikeys::scopes_allow(&self.scopes, Action::Versions)
            && self.policies_show(versions, path, dir)
    }

    /// The one read rule of the REST API and the S3 endpoint: `node`, as
    /// looked up at `path` of version `record` (named `versions`), if the
    /// caller may read it. What it may not see answers as a missing path
    /// does; what it sees but may not read is denied.
    pub(super) fn readable(
        &self,
        record: &Record,
        versions: &[String],
        path: &RelPath,
        node: Option<Node>,
    ) -> Result<Node, ApiError> {
        let hidden = || Error::NoPath {
            version: format!("v{}", record.version),
            path: path.to_string(),
        };
        let node = node.ok_or_else(hidden)?;
        if !path.is_root() && !self.sees_path(versions, path, node.is_dir()) {
            self.hidden();
            return Err(hidden().into());
        }
        self.may_read(versions, path, node.is_dir())?;
        Ok(node.readable(|| (format!("v{}", record.version), path.to_string()))?)
    }

    /// Whether the caller may read `path` (a folder if `dir`) of a version
    /// named `versions`, decided on the path alone.
    pub(super) fn may_read(
        &self,
        versions: &[String],
        path: &RelPath,
        dir: bool,
    ) -> Result<(), ApiError> {
        let mut names = access::path_resources(versions, path, dir);
        names.extend(versions.iter().cloned());
        self.may(Action::Read, &names)
    }

    /// Dataset `id` (as `view` holds it) exists for the caller if it may
    /// list it or see one of its versions; else it answers as a missing
    /// dataset does, through REST and S3 alike.
    pub(super) fn finds_dataset(&self, id: &str, view: &View) -> Result<(), ApiError> {
        let found = self.sees(Action::Versions, &[access::dataset_resource(id)])
            || view
                .records
                .iter()
                .any(|r| self.sees(Action::Versions, &resources(id, r, &view.tags)));
        match found {
            true => Ok(()),
            false => {
                self.hidden();
                Err(Error::NoDataset(id.to_string()).into())
            }
        }
    }

    /// Whether a policy in force may hide paths of `dataset` from the
    /// caller (`Policy::may_hide_paths`): a version's figures are then
    /// withheld from it.
    pub(super) fn may_hide_paths(&self, dataset: &str) -> bool {
        [self.known.policy.as_ref(), self.known.narrowing.as_deref()]
            .into_iter()
            .flatten()
            .any(|p| p.may_hide_paths(&self.who, dataset))
    }

    /// Whether no policy in force hides `path` from the caller: what one
    /// hides is not there for it to change either (a deletion of it is as
    /// of a missing path, through REST and S3 alike).
    pub(super) fn policies_show(&self, versions: &[String], path: &RelPath, dir: bool) -> bool {
        [self.known.policy.as_ref(), self.known.narrowing.as_deref()]
            .into_iter()
            .flatten()
            .all(|p| p.sees_path(&self.who, versions, path, dir))
    }
}

/// The caller an API key (or an S3 key) stands for.
fn key_caller(key: &ApiKey, known: Arc<Known>) -> Caller {
    let name = format!("key:{}", key.name);
    Caller {
        who: Who {
            principals: vec![name.clone()],
        },
        name,
        owner: crate::commit::pending::owner(&format!("key-id:{}", key.id)),
        refused: super::logline::current(),
        scopes: key.scopes.clone(),
        known,
    }
}

impl Api {
    pub fn new(
        repo: Arc<Repo>,
        trail: Trail,
        tokens: Option<super::tokens::Tokens>,
        narrowing: Option<Policy>,
    ) -> Api {
        Api {
            narrowing: narrowing.map(Arc::new),
            chunks: ChunkCache::new(repo.clone(), repo.cache_memory()),
            from_memory: AtomicU64::new(0),
            with_reads: AtomicU64::new(0),
            repo,
            trail,
            tokens,
            known: Mutex::default(),
            connections: AtomicU64::new(0),
            keys_fresh: crate::hold::test_duration("DETAFS_TEST_KEYS_FRESH", FRESH),
            reading: tokio::sync::Mutex::const_new(()),
            views: Mutex::new(lru::LruCache::new(VIEWS.try_into().expect("not 0"))),
            viewing: Mutex::default(),
            started: Instant::now(),
            metrics: Mutex::default(),
            audit: Mutex::default(),
        }
    }

    /// Runs the consistency audit (records against objects, hash chains)
    /// and keeps its result for `/health` and `/metrics`.
    pub fn audit_now(&self) {
        let t = Instant::now();
        let report = crate::verify::verify(&self.repo, None, &crate::progress::Quiet);
        let done = match report {
            Ok(r) => Audited {
                at: std::time::SystemTime::now(),
                seconds: t.elapsed().as_secs_f64(),
                versions: r.versions,
                problems: r.problems.iter().map(|p| p.to_string()).collect(),
                error: None,
                tiers: Some((r.hot, r.cold)),
            },
            Err(e) => Audited {
                at: std::time::SystemTime::now(),
                seconds: t.elapsed().as_secs_f64(),
                versions: 0,
                problems: Vec::new(),
                error: Some(e.to_string()),
                tiers: None,
            },
        };
        *self.audit.lock() = Some(done);
    }

    pub fn flush(&self) {
        self.trail.flush();
    }

    /// Runs `f` on the blocking pool (the store's calls block), within the
    /// store's bound on such work (`Store::work`).
    pub(super) async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Repo) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let repo = self.repo.clone();
        let store = repo.store().clone();
        store
            .work(move || f(&repo))
            .await
            .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
    }

    pub(super) async fn known(self: &Arc<Self>) -> Result<Arc<Known>, ApiError> {
        let fresh = || {
            let k = self.known.lock();
            k.as_ref()
                .filter(|(at, _)| at.elapsed() < self.keys_fresh)
                .map(|(_, k)| k.clone())
        };
        if let Some(k) = fresh() {
            return Ok(k);
        }
        // One request reads them again; the others wait for its answer.
        let _reading = self.reading.lock().await;
        if let Some(k) = fresh() {
            return Ok(k);
        }
        let narrowing = self.narrowing.clone();
        let known = self
            .run(|repo| {
                let keys = repo.api_keys()?;
                let (policy_version, policy) = match repo.current_policy()? {
                    Some((v, p)) => (v, Some(p)),
                    None => (0, None),
                };
                Ok(Arc::new(Known {
                    keys,
                    policy,
                    policy_version,
                    narrowing,
                }))
            })
            .await?;
        *self.known.lock() = Some((Instant::now(), known.clone()));
        Ok(known)
    }

    /// Dataset `id`'s view, read again unless it was read at `not_before`
    /// or later. A dataset that does not exist (or is deleted) is an error,
    /// never kept.
    pub(super) async fn view(
        self: &Arc<Self>,
        id: &str,
        not_before: Instant,
    ) -> Result<Arc<View>, ApiError> {
        let fresh = || {
            let mut views = self.views.lock();
            views.get(id).filter(|v| v.at >= not_before).cloned()
        };
        if let Some(v) = fresh() {
            return Ok(v);
        }
        let lock = self.view_lock(id);
        let _reading = lock.lock().await;
        if let Some(v) = fresh() {
            return Ok(v);
        }
        let name = id.to_string();
        let view = self
            .run(move |repo| {
                let at = Instant::now();
                repo.check_dataset(&name)?;
                let records = repo.sync(&name)?;
                let tags = repo.tags(&name)?;
                Ok(Arc::new(View { at, records, tags }))
            })
            .await?;
        let mut views = self.views.lock();
        views.put(id.to_string(), view.clone());
        Ok(view)
    }

    /// The lock held while dataset `id`'s view is read.
    fn view_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.viewing.lock();
        if let Some(lock) = locks.get(id).and_then(std::sync::Weak::upgrade) {
            return lock;
        }
        // Locks no request holds are dropped, so the map stays as small as
        // the requests under way.
        if locks.len() >= VIEWS {
            locks.retain(|_, l| l.strong_count() > 0);
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(id.to_string(), Arc::downgrade(&lock));
        lock
    }

    /// Forgets dataset `id`'s view (this gateway changed it).
    pub(super) fn changed(&self, id: &str) {
        self.views.lock().pop(id);
    }

    /// The version `v` of dataset `id` names, if the caller may see it
    /// (else as if there were none), with its names for the policy. A
    /// version number or tag is looked for in a view up to `FRESH` old;
    /// `latest`, and a version not found there or not shown to the caller,
    /// in one read after the request came: so a commit through any gateway
    /// is seen by the next request to any other, and a hidden version
    /// costs what a missing one does.
    pub(super) async fn visible_version(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        v: &str,
    ) -> Result<(Arc<View>, Record, Vec<String>), ApiError> {
        let asked = Instant::now();
        // Not found, or (true) found and hidden.
        let shown = |view: &View| -> Result<(Record, Vec<String>), (Error, bool)> {
            let record = tag::resolve(id, v, &view.records, || Ok(view.tags.clone()))
                .map_err(|e| (e, false))?;
            let names = resources(id, &record, &view.tags);
            match caller.sees(Action::Versions, &names) {
                true => Ok((record, names)),
                false => Err((
                    Error::NoVersion {
                        dataset: id.to_string(),
                        version: v.to_string(),
                    },
                    true,
                )),
            }
        };
        let newest = v.split('~').next() == Some("latest");
        let recent = asked.checked_sub(FRESH).unwrap_or(self.started);
        let view = self.view(id, if newest { asked } else { recent }).await?;
        if let Ok((record, names)) = shown(&view) {
            return Ok((view, record, names));
        }
        let view = match newest {
            true => view,
            false => self.view(id, asked).await?,
        };
        caller.finds_dataset(id, &view)?;
        let (record, names) = match shown(&view) {
            Ok(found) => found,
            Err((e, hidden)) => match self.leased_version(caller, id, v, &view).await? {
                Some(found) => found,
                None => {
                    if hidden {
                        caller.hidden();
                    }
                    return Err(e.into());
                }
            },
        };
        Ok((view, record, names))
    }

    /// Version `v` (by number) expired meanwhile, if a lease of the
    /// caller's staging names it (`Repo::leased_record`) and the caller
    /// may see it: served to it alone, as to a host with the store's key.
    async fn leased_version(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        v: &str,
        view: &View,
    ) -> Result<Option<(Record, Vec<String>)>, ApiError> {
        let Some(n) = tag::number_of(v) else {
            return Ok(None);
        };
        if view.records.iter().any(|r| r.version == n) {
            return Ok(None);
        }
        let (dataset, holder) = (id.to_string(), caller.owner().to_string());
        let Some(record) = self
            .run(move |repo| Ok(repo.leased_record(&dataset, &holder, n)?))
            .await?
        else {
            return Ok(None);
        };
        let names = resources(id, &record, &view.tags);
        Ok(caller
            .sees(Action::Versions, &names)
            .then_some((record, names)))
    }

    /// The caller of a request: its API key (`Authorization: Bearer KEY` or
    /// `X-API-Key: KEY`), else 401.
    pub(super) async fn caller(self: &Arc<Self>, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
            .ok_or_else(|| {
                err(
                    StatusCode::UNAUTHORIZED,
                    "unauthenticated",
                    "no credentials: send Authorization: Bearer <API key>",
                )
            })?;
        let presented = presented.trim();
        let known = self.known().await?;
        let unauthenticated = |m: String| err(StatusCode::UNAUTHORIZED, "unauthenticated", m);
        if let (false, Some(tokens)) = (presented.starts_with("dtfs_"), &self.tokens) {
            let bearer = tokens.verify(presented).await.map_err(unauthenticated)?;
            let name = format!("token:{}", bearer.subject);
            let mut principals = vec![name.clone()];
            principals.extend(bearer.claims);
            let scopes = bearer
                .scopes
                .iter()
                .filter_map(|w| apikeys::scope_actions(w))
                .flatten()
                .map(String::from)
                .collect();
            return Ok(Caller {
                owner: crate::commit::pending::owner(&name),
                refused: super::logline::current(),
                name,
                scopes,
                who: Who { principals },
                known,
            });
        }
        let key = apikeys::check(&known.keys, presented)
            .ok_or_else(|| unauthenticated("unknown or revoked API key".into()))?;
        Ok(key_caller(&key, known))
    }

    /// The caller of an S3 request signed with access key id `access`.
    pub(super) async fn s3_caller(self: &Arc<Self>, access: &str) -> Result<Caller, ApiError> {
        let known = self.known().await?;
        let key = apikeys::find_s3(&known.keys, access)
            .cloned()
            .ok_or_else(|| {
                err(
                    StatusCode::UNAUTHORIZED,
                    "unauthenticated",
                    "unknown or revoked S3 key",
                )
            })?;
        Ok(key_caller(&key, known))
    }

    /// Every dataset's name (what the caller sees of them is its own).
    pub(super) async fn datasets(self: &Arc<Self>) -> Result<Vec<String>, ApiError> {
        self.run(|repo| Ok(repo.datasets()?)).await
    }

    /// Fails unless dataset `id` exists (as of a view up to `FRESH` old).
    /// Dataset `id`, if it exists for `caller` (`Caller::finds_dataset`).
    pub(super) async fn dataset_for(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
    ) -> Result<(), ApiError> {
        let asked = Instant::now();
        let recent = asked.checked_sub(FRESH).unwrap_or(self.started);
        let view = self.view(id, recent).await?;
        caller.finds_dataset(id, &view)
    }

    /// Dataset `id`'s version numbers and tag names, as of its view.
    pub(super) async fn version_names(
        self: &Arc<Self>,
        id: &str,
    ) -> Result<(Vec<u64>, Vec<String>), ApiError> {
        let view = self.view(id, Instant::now()).await?;
        Ok((
            view.records.iter().map(|r| r.version).collect(),
            view.tags.iter().map(|t| t.tag.clone()).collect(),
        ))
    }

    /// Bytes `[start, end)` of a file of `chunks`: the first window read
    /// before this returns (a missing or damaged object is an error, not a
    /// cut-off body), the rest streamed.
    pub(super) async fn read_span(
        self: &Arc<Self>,
        chunks: Vec<BlobRef>,
        start: u64,
        end: u64,
    ) -> Result<impl futures::Stream<Item = Result<Bytes, std::io::Error>> + use<>, ApiError> {
        let first_end = (start + WINDOW).min(end);
        // Read where the request is when it is all in memory.
        let first = match self.chunks.slices(&chunks, start, first_end, true)? {
            Some(first) => first,
            None => {
                let (window, cache) = (chunks.clone(), self.chunks.clone());
                self.run(move |_| {
                    Ok(cache
                        .slices(&window, start, first_end, false)?
                        .expect("all is read when not memory-only"))
                })
                .await?
            }
        };
        Ok(self.stream_rest(chunks, first, first_end, end))
    }

    /// `f` of the node at `path` under `tree`: looked up where the request
    /// is when the trees on the way are in memory, else on the blocking
    /// pool.
    pub(super) async fn with_node<T: Send + 'static>(
        self: &Arc<Self>,
        tree: BlobRef,
        path: RelPath,
        f: impl FnOnce(Option<Node>) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        match self.repo.lookup_cached(&tree, &path) {
            Some(node) => f(node),
            None => self.run(move |repo| f(repo.lookup(&tree, &path)?)).await,
        }
    }

    /// `first`, then the bytes `[at, end)` of a file of `chunks`, read one
    /// window after another, each taking a worker only while it reads (a
    /// slow client holds none): slices of the chunk cache's buffers, sent
    /// as they are.
    fn stream_rest(
        self: &Arc<Self>,
        chunks: Vec<BlobRef>,
        first: Vec<Bytes>,
        mut at: u64,
        end: u64,
    ) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + use<> {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<Bytes>, std::io::Error>>(2);
        if at >= end {
            // All of it is in `first`: no task to read the rest.
            let _ = tx.try_send(Ok(first));
            return tokio_stream_from(rx);
        }
        let reader = self.clone();
        let cache = self.chunks.clone();
        let chunks = Arc::new(chunks);
        tokio::spawn(async move {
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            while at < end {
                let to = (at + WINDOW).min(end);
                let (window, cache) = (chunks.clone(), cache.clone());
                let read = reader
                    .run(move |_| {
                        Ok(cache
                            .slices(&window, at, to, false)?
                            .expect("all is read when not memory-only"))
                    })
                    .await
                    .map_err(|e| std::io::Error::other(e.message));
                let failed = read.is_err();
                if tx.send(read).await.is_err() || failed {
                    return; // the client went away, or the read failed
                }
                at = to;
            }
        });
        tokio_stream_from(rx)
    }

    /// Writes a request's line (`logline.rs`).
    pub(super) fn log(&self, line: super::logline::Line, status: u16, refused: bool, bytes: u64) {
        self.trail.record(line.json(status, refused, bytes));
    }
}

/// What the REST API's routes ask of the policy (`logline::Asks`).
const LISTS: Asks = Asks("dataset:versions", "datasets/*");
const CREATES: Asks = Asks("dataset:create", "datasets/*");
const VERSIONS: Asks = Asks("dataset:versions", "datasets/{id}");
const VERSION: Asks = Asks("dataset:versions", "datasets/{id}/versions/{v}");
/// A version's file or folder (`{path}`), however it is read.
pub(super) const READS: Asks = Asks("dataset:read", "datasets/{id}/versions/{v}/files/{path}");

/// The REST API's routes and `more` (endpoints of other modules over
/// the same core), every request logged.
pub fn router(api: Arc<Api>, more: Router<Arc<Api>>) -> Router {
    Router::new()
        .merge(more)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/datasets", asking(LISTS, get(list_datasets)))
        .route("/datasets", asking(CREATES, post(create_dataset)))
        .route(
            "/datasets/{id}/versions",
            asking(VERSIONS, get(list_versions)),
        )
        .route(
            "/datasets/{id}/versions/{v}",
            asking(VERSION, get(get_version)),
        )
        .route(
            "/datasets/{id}/versions/{v}/files",
            asking(READS, get(get_path)),
        )
        .route(
            "/datasets/{id}/versions/{v}/files/{*path}",
            asking(READS, get(get_path)),
        )
        .fallback(|| async { err(StatusCode::NOT_FOUND, "no_route", "no such endpoint") })
        .layer(axum::middleware::from_fn_with_state(api.clone(), logged))
        .with_state(api)
}

/// Writes each request's line: who, what, the status and the bytes sent.
async fn logged(
    State(api): State<Arc<Api>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // Metrics by route, not by path (paths name datasets and files).
    let template = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched".to_string(), |m| m.as_str().to_string());
    let template = format!("{} {template}", req.method());
    let t = Instant::now();
    let key = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer dtfs_"))
        .and_then(|v| v.split('_').next())
        .map(|id| format!("key id {id}"));
    let (method, path, matched) = (
        req.method().clone(),
        req.uri().path().to_string(),
        req.extensions()
            .get::<axum::extract::MatchedPath>()
            .cloned(),
    );
    let (res, refused) = super::logline::judged(next.run(req)).await;
    let asks = res.extensions().get::<super::logline::Asks>().copied();
    let line = super::logline::Line::rest(
        (&method, &path, t),
        (matched.as_ref().map(|m| m.as_str()), asks),
        key,
    );
    let bytes = res
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    api.log(line, res.status().as_u16(), refused, bytes);
    let mut m = api.metrics.lock();
    let e = m.entry((template, res.status().as_u16())).or_default();
    e.0 += 1;
    e.1 += t.elapsed().as_secs_f64();
    res
}

/// Prometheus text: requests by route and status, their seconds, the
/// store's health, cache use, the last audit.
async fn metrics(State(api): State<Arc<Api>>) -> Response {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "# TYPE detafs_requests_total counter");
    let _ = writeln!(out, "# TYPE detafs_request_seconds_total counter");
    for ((route, status), (n, secs)) in api.metrics.lock().iter() {
        let labels = format!("route=\"{route}\",status=\"{status}\"");
        let _ = writeln!(out, "detafs_requests_total{{{labels}}} {n}");
        let _ = writeln!(out, "detafs_request_seconds_total{{{labels}}} {secs:.6}");
    }
    let _ = writeln!(out, "# TYPE detafs_connections gauge");
    let open = api.connections.load(Ordering::Relaxed);
    let _ = writeln!(out, "detafs_connections {open}");
    let store = api.repo.store().health();
    let _ = writeln!(out, "# TYPE detafs_store_reachable gauge");
    let _ = writeln!(out, "detafs_store_reachable {}", u8::from(store.reachable));
    let _ = writeln!(out, "detafs_store_latency_ms {:.3}", store.latency_ms);
    let _ = writeln!(out, "# TYPE detafs_store_requests_total counter");
    let _ = writeln!(
        out,
        "detafs_store_requests_total{{result=\"answered\"}} {}",
        store.requests_answered
    );
    let _ = writeln!(
        out,
        "detafs_store_requests_total{{result=\"failed\"}} {}",
        store.requests_failed
    );
    let _ = writeln!(out, "detafs_cache_bytes {}", api.repo.disk().used_bytes());
    let _ = writeln!(out, "# TYPE detafs_file_gets_total counter");
    for (answer, n) in [("memory", &api.from_memory), ("read", &api.with_reads)] {
        let n = n.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "detafs_file_gets_total{{answered_from=\"{answer}\"}} {n}"
        );
    }
    if let Some(a) = &*api.audit.lock() {
        let ok = a.error.is_none() && a.problems.is_empty();
        let _ = writeln!(out, "# TYPE detafs_audit_ok gauge");
        let _ = writeln!(out, "detafs_audit_ok {}", u8::from(ok));
        let _ = writeln!(out, "detafs_audit_problems {}", a.problems.len());
        let _ = writeln!(out, "detafs_audit_seconds {:.3}", a.seconds);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// What the API offers, as OpenAPI 3.
async fn openapi() -> Response {
    let op =
        |summary: &str| json!({"summary": summary, "responses": {"200": {"description": "ok"}}});
    let secured = json!([{"bearer": []}]);
    let doc = json!({
        "openapi": "3.0.3",
        "info": {"title": "detafs gateway", "version": env!("CARGO_PKG_VERSION")},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": secured,
        "paths": {
            "/health": {"get": op("gateway, store and index status; no authentication")},
            "/metrics": {"get": op("Prometheus metrics")},
            "/datasets": {"get": op("datasets the caller may list"), "post": op("create a dataset: {\"name\"}")},
            "/datasets/{id}/commit": {"post": op("commit: commit_message, parent, delta, files, uploads, delete")},
            "/datasets/{id}/uploads/{path}": {"put": op("stream a file of any size for a later commit")},
            "/datasets/{id}/versions": {"get": op("versions: version_id, timestamp, author, delta_size, ...")},
            "/datasets/{id}/versions/{v}": {"get": op("one version, its tags and parent")},
            "/datasets/{id}/versions/{v}/files/{path}": {"get": op("a file (Range, ETag) or a folder's listing")},
            "/datasets/{id}/versions/{v}/tree/{path}": {"get": op("a folder as a tree, for mounts through the gateway")},
            "/datasets/{id}/tags": {"post": op("names a version: {tag, version}")},
            "/datasets/{id}/retention": {"get": op("rules, holds, expired versions"), "put": op("sets the retention rules")},
            "/datasets/{id}/forget": {"post": op("expires versions: {versions, dry_run}; the plan")},
            "/datasets/{id}/holds": {"post": op("a legal hold: {version, reason}")},
            "/datasets/{id}/releases": {"post": op("ends a legal hold: {version, reason}")},
            "/datasets/{id}/leases/{staging}": {"put": op("a staging area of the caller's stands on these versions (gc keeps them, expired or not): {versions}")},
            "/datasets/{id}/erase": {"post": op("erases a path from history: {path, reason, from, dry_run}")},
            "/datasets/{id}/report": {"get": op("the compliance report")},
        },
    });
    Json(doc).into_response()
}

async fn health(State(api): State<Arc<Api>>) -> Response {
    let store = api.repo.store().health();
    let index_started = Instant::now();
    let index_ok = api.repo.index().latest_version("-").is_ok();
    let index_ms = index_started.elapsed().as_secs_f64() * 1000.0;
    let ok = store.reachable && index_ok;
    let consistent = api
        .audit
        .lock()
        .as_ref()
        .is_none_or(|a| a.error.is_none() && a.problems.is_empty());
    // Unreachable is 503; an audit that found problems is said, not 503.
    let body = json!({
        "status": match (ok, consistent) {
            (false, _) => "degraded",
            (true, false) => "inconsistent",
            (true, true) => "ok",
        },
        "uptime_secs": api.started.elapsed().as_secs(),
        "store": {
            "reachable": store.reachable,
            "latency_ms": store.latency_ms,
            "error": store.error,
        },
        "index": { "ok": index_ok, "latency_ms": index_ms },
        // What the gateway keeps in memory, within one budget (`--cache-memory`).
        "memory": api.repo.budget().report(),
        // The store's colder tier, once a read needed it.
        "cold_tier": api.repo.store().cold_known(),
        "audit": api.audit.lock().as_ref().map(|a| json!({
            "time": humantime::format_rfc3339_seconds(a.at).to_string(),
            "seconds": a.seconds,
            "versions": a.versions,
            "ok": a.error.is_none() && a.problems.is_empty(),
            "problems": a.problems,
            "error": a.error,
            // How much lives where, as the audit counted it.
            "tiers": a.tiers.map(|(hot, cold)| json!({
                "store": {"packs": hot.0, "bytes": hot.1},
                "cold": {"packs": cold.0, "bytes": cold.1},
            })),
        })),
    });
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

async fn list_datasets(State(api): State<Arc<Api>>, headers: HeaderMap) -> Reply {
    let caller = api.caller(&headers).await?;
    let names = api.run(|repo| Ok(repo.datasets()?)).await?;
    let shown: Vec<Value> = names
        .into_iter()
        .filter(|n| caller.sees(Action::Versions, &[access::dataset_resource(n)]))
        .map(|n| json!({ "id": n, "name": n }))
        .collect();
    Ok(Json(shown).into_response())
}

async fn create_dataset(State(api): State<Arc<Api>>, headers: HeaderMap, body: Body) -> Reply {
    let caller = api.caller(&headers).await?;
    let body = read_body(body).await?;
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| err(StatusCode::BAD_REQUEST, "invalid", "send {\"name\": NAME}"))?
        .to_string();
    crate::limits::validate_name(&name)?;
    caller.may(Action::Create, &[access::dataset_resource(&name)])?;
    let made = name.clone();
    api.run(move |repo| Ok(repo.create_dataset(&made)?)).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "id": name, "name": name })),
    )
        .into_response())
}

/// The version names of a record, for the policy, given the dataset's
/// tags (read with its view: a tag a deny names must never be missed, so a
/// failed read is the request's error).
pub(super) fn resources(dataset: &str, record: &Record, tags: &[Tag]) -> Vec<String> {
    let tags: Vec<String> = tags
        .iter()
        .filter(|t| t.version == record.version)
        .map(|t| t.tag.clone())
        .collect();
    access::version_resources(dataset, record.version, &tags)
}

async fn list_versions(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Reply {
    let caller = api.caller(&headers).await?;
    // The whole list, as of the request (as `latest` is).
    let view = api.view(&id, Instant::now()).await?;
    caller.finds_dataset(&id, &view)?;
    let rows: Vec<Value> = view
        .records
        .iter()
        .filter(|r| caller.sees(Action::Versions, &resources(&id, r, &view.tags)))
        .map(|r| {
            let mut e = r.log_entry_seen(caller.may_hide_paths(&id));
            e["tags"] = json!(tags_of(&view, r.version));
            e
        })
        .collect();
    let shown = HeaderValue::from_str(&caller.view()).expect("ascii");
    Ok(([(crate::remote::VIEW, shown)], Json(rows)).into_response())
}

/// The tags naming `version` in `view`.
fn tags_of(view: &View, version: u64) -> Vec<&str> {
    view.tags
        .iter()
        .filter(|t| t.version == version)
        .map(|t| t.tag.as_str())
        .collect()
}

async fn get_version(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path((id, v)): Path<(String, String)>,
) -> Reply {
    let caller = api.caller(&headers).await?;
    let (view, record, _) = api.visible_version(&caller, &id, &v).await?;
    let mut e = record.log_entry_seen(caller.may_hide_paths(&id));
    e["tags"] = json!(tags_of(&view, record.version));
    e["parent"] = json!(record.parent.map(|p| p.to_hex()));
    let shown = HeaderValue::from_str(&caller.view()).expect("ascii");
    Ok(([(crate::remote::VIEW, shown)], Json(e)).into_response())
}

/// Where a request in a version points: `{id}`, `{v}` and `{*path}` (the
/// version's root without one), each percent-decoded once here. A path is
/// bytes, as names are (it need not be UTF-8), parsed by `RelPath::parse`
/// like every path in detafs.
pub(super) struct InVersion {
    pub(super) id: String,
    pub(super) v: String,
    pub(super) path: RelPath,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for InVersion {
    type Rejection = ApiError;

    /// From the request's own path (`/datasets/ID/versions/V/KIND[/PATH]`):
    /// axum's path parameters must be UTF-8, names need not be.
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<InVersion, ApiError> {
        let bad = |what: &str| {
            err(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!("{what} in the URL"),
            )
        };
        let decoded = |s: &str| -> Vec<u8> { percent_encoding::percent_decode_str(s).collect() };
        let mut parts_of = parts.uri.path().splitn(7, '/').skip(1);
        let mut next = || parts_of.next().unwrap_or_default();
        let (_, id, _, v, _) = (next(), next(), next(), next(), next());
        let path = decoded(next());
        let text = |s: &str| String::from_utf8(decoded(s)).map_err(|_| bad("a name not in UTF-8"));
        Ok(InVersion {
            id: text(id)?,
            v: text(v)?,
            path: RelPath::parse(path)?,
        })
    }
}

async fn get_path(State(api): State<Arc<Api>>, headers: HeaderMap, at: InVersion) -> Reply {
    serve_path(api, headers, at).await
}

/// A single `bytes=A-B`, `bytes=A-` or `bytes=-N` range within `size`.
pub(super) fn range(headers: &HeaderMap, size: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = headers
        .get(header::RANGE)?
        .to_str()
        .ok()?
        .strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None; // several ranges: the whole file
    }
    let (a, b) = spec.split_once('-')?;
    let parsed = match (a.trim(), b.trim()) {
        ("", n) => n
            .parse::<u64>()
            .ok()
            .map(|n| (size.saturating_sub(n), size)),
        (a, "") => a.parse().ok().map(|a| (a, size)),
        (a, b) => match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(a), Ok(b)) if b >= a => Some((a, b.saturating_add(1).min(size))),
            _ => None,
        },
    };
    Some(match parsed {
        Some((a, b)) if a < b && a < size => Ok((a, b)),
        _ => Err(()),
    })
}

/// Bytes of a whole file sent in windows of this many (a large file never
/// lives in memory whole).
const WINDOW: u64 = 4 << 20;

/// A GET of a path in a version the caller may see.
struct Asked {
    caller: Caller,
    record: Record,
    /// The version's names for the policy.
    versions: Vec<String>,
    path: RelPath,
    headers: HeaderMap,
}

impl Asked {
    /// What the GET comes to; with `memory_only`, `None` if that needs a
    /// read (a tree or chunk not in memory, a folder's listing).
    fn served(
        &self,
        repo: &Repo,
        cache: &Arc<ChunkCache>,
        memory_only: bool,
    ) -> Result<Option<Served>, ApiError> {
        let (clean, versions, caller) = (&self.path, &self.versions, &self.caller);
        let node = match memory_only {
            true => match repo.lookup_cached(&self.record.tree, clean) {
                Some(node) => node,
                None => return Ok(None),
            },
            false => repo.lookup(&self.record.tree, clean)?,
        };
        let node = caller.readable(&self.record, versions, clean, node)?;
        match node {
            Node::Dir { .. } if memory_only => Ok(None),
            Node::Dir { tree, .. } => Ok(Some(Served::Listing(listing(
                repo, caller, versions, clean, &tree,
            )?))),
            Node::File { chunks, size, .. } => {
                file_part(cache, &self.headers, chunks, size, memory_only)
            }
            _ => Err(err(StatusCode::NOT_FOUND, "no_path", "not a regular file")),
        }
    }
}

/// What a GET of a path in a version comes to.
enum Served {
    Listing(Vec<Value>),
    NotModified(String),
    BadRange(u64),
    File(Part),
}

/// The bytes `[start, end)` of a file of `size`, the first window read.
struct Part {
    chunks: Vec<BlobRef>,
    tag: String,
    size: u64,
    status: StatusCode,
    start: u64,
    end: u64,
    first: Vec<Bytes>,
}

async fn serve_path(api: Arc<Api>, headers: HeaderMap, at: InVersion) -> Reply {
    let caller = api.caller(&headers).await?;
    let (_, record, versions) = api.visible_version(&caller, &at.id, &at.v).await?;
    let asked = Arc::new(Asked {
        caller,
        record,
        versions,
        path: at.path,
        headers,
    });
    // Answered where the request is when all it needs is in memory (a hop
    // to the blocking pool costs more than the rest of a small GET).
    let served = match asked.served(&api.repo, &api.chunks, true)? {
        Some(served) => {
            api.from_memory.fetch_add(1, Ordering::Relaxed);
            served
        }
        None => {
            api.with_reads.fetch_add(1, Ordering::Relaxed);
            let (cache, asked) = (api.chunks.clone(), asked.clone());
            api.run(move |repo| {
                Ok(asked
                    .served(repo, &cache, false)?
                    .expect("all is read when not memory-only"))
            })
            .await?
        }
    };
    let part = match served {
        Served::Listing(l) => return Ok(Json(l).into_response()),
        Served::NotModified(tag) => {
            return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, tag)]).into_response());
        }
        Served::BadRange(size) => {
            let mut res = err(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "bad_range",
                format!("the file has {size} bytes"),
            )
            .into_response();
            res.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{size}")).expect("ascii"),
            );
            return Ok(res);
        }
        Served::File(part) => part,
    };
    let (start, end, size) = (part.start, part.end, part.size);
    let first_end = start + part.first.iter().map(|b| b.len() as u64).sum::<u64>();
    let body = if first_end == end {
        Body::from(part.first.concat())
    } else {
        Body::from_stream(api.stream_rest(part.chunks, part.first, first_end, end))
    };
    let mut res = Response::new(body);
    *res.status_mut() = part.status;
    let h = res.headers_mut();
    h.insert(
        header::ETAG,
        HeaderValue::from_str(&part.tag).expect("ascii"),
    );
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if part.status == StatusCode::PARTIAL_CONTENT {
        h.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {start}-{}/{size}", end - 1)).expect("ascii"),
        );
    }
    Ok(res)
}

/// The entries of folder `clean` (its tree `tree`) the caller may see.
pub(super) fn visible_entries(
    repo: &Repo,
    caller: &Caller,
    versions: &[String],
    clean: &RelPath,
    tree: &BlobRef,
) -> Result<Vec<Entry>, ApiError> {
    Ok(repo
        .tree(tree)?
        .entries
        .iter()
        .filter(|e| {
            clean
                .join(&e.name)
                .is_ok_and(|child| caller.sees_path(versions, &child, e.node.is_dir()))
        })
        .cloned()
        .collect())
}

/// A folder's entries the caller may see, as JSON.
fn listing(
    repo: &Repo,
    caller: &Caller,
    versions: &[String],
    clean: &RelPath,
    tree: &BlobRef,
) -> Result<Vec<Value>, ApiError> {
    Ok(visible_entries(repo, caller, versions, clean, tree)?
        .iter()
        .map(|e| {
            let mut row = json!({
                "name": String::from_utf8_lossy(&e.name),
                "type": match &e.node {
                    Node::Dir { .. } => "dir",
                    Node::File { .. } => "file",
                    Node::Symlink { .. } => "symlink",
                    Node::Special { .. } => "special",
                },
                "size": e.node.size(),
                "mtime": e.node.mtime().0,
                "mtime_ns": e.node.mtime().1,
            });
            if e.node.is_erased() {
                row["erased"] = json!(true);
            }
            match &e.node {
                Node::File { mode, .. } | Node::Dir { mode, .. } => row["mode"] = json!(mode),
                Node::Symlink { target, .. } => {
                    row["mode"] = json!(0o777);
                    row["target"] = json!(String::from_utf8_lossy(target));
                }
                Node::Special {
                    kind, mode, rdev, ..
                } => {
                    row["mode"] = json!(mode);
                    row["kind"] = json!(kind);
                    if kind.has_rdev() {
                        row["rdev"] = json!([libc::major(*rdev), libc::minor(*rdev)]);
                    }
                }
            }
            row
        })
        .collect())
}

/// A file's answer to a GET with these headers: 304, 416, or its status,
/// span and first window. The first window is read before anything is
/// sent, so a missing or damaged object is an error status, not a cut-off
/// body.
fn file_part(
    cache: &Arc<ChunkCache>,
    headers: &HeaderMap,
    chunks: Vec<BlobRef>,
    size: u64,
    memory_only: bool,
) -> Result<Option<Served>, ApiError> {
    let tag = etag(&chunks);
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"))
    {
        return Ok(Some(Served::NotModified(tag)));
    }
    let (status, start, end) = match range(headers, size) {
        None => (StatusCode::OK, 0, size),
        Some(Ok((a, b))) => (StatusCode::PARTIAL_CONTENT, a, b),
        Some(Err(())) => return Ok(Some(Served::BadRange(size))),
    };
    if fresh(headers) {
        if memory_only {
            return Ok(None);
        }
        cache.forget_span(&chunks, start, end);
    }
    let first = cache.slices(&chunks, start, (start + WINDOW).min(end), memory_only)?;
    let Some(first) = first else {
        return Ok(None);
    };
    Ok(Some(Served::File(Part {
        chunks,
        tag,
        size,
        status,
        start,
        end,
        first,
    })))
}

/// Whether a request asks for what the store holds now (`Cache-Control:
/// no-cache`), not what this gateway read of it before.
pub(super) fn fresh(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|d| d.trim().eq_ignore_ascii_case("no-cache"))
        })
}

/// The slices sent on `rx`, one after another.
fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Vec<Bytes>, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    use futures::StreamExt;
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).flat_map(|window| {
        let items: Vec<Result<Bytes, std::io::Error>> = match window {
            Ok(slices) => slices.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(items)
    })
}

/// How long a client may send nothing in the middle of a body, or read
/// nothing of an answer.
pub const IDLE: Duration = Duration::from_secs(30);

/// The next part of a body, or None at its end; 408 for a client that
/// stops sending.
pub(super) async fn next_part(
    stream: &mut axum::body::BodyDataStream,
) -> Result<Option<axum::body::Bytes>, ApiError> {
    use futures::StreamExt;
    match tokio::time::timeout(IDLE, stream.next()).await {
        Err(_) => Err(err(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!("nothing received for {} s", IDLE.as_secs()),
        )),
        Ok(None) => Ok(None),
        Ok(Some(Ok(b))) => Ok(Some(b)),
        Ok(Some(Err(e))) => Err(err(StatusCode::BAD_REQUEST, "invalid", e.to_string())),
    }
}

/// A JSON body of at most `MAX_BODY` bytes; 413 beyond, naming the limit.
pub(super) async fn read_body(body: Body) -> Result<Value, ApiError> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(part) = next_part(&mut stream).await? {
        if bytes.len() + part.len() > MAX_BODY {
            return Err(err(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "the request body is larger than {MAX_BODY} bytes; send large files with PUT /datasets/ID/uploads/PATH and commit them with \"uploads\""
                ),
            ));
        }
        bytes.extend_from_slice(&part);
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        err(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("body is not JSON: {e}"),
        )
    })
}
