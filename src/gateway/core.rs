//! The gateway's core, which its protocols (REST, `rest.rs` and the
//! modules of its endpoints; S3, `s3/`; the web page, `web/`, through
//! REST) share: who calls (an API key, a token, an S3 key) and what its
//! scopes and the policies let it see (`Caller`, the one read rule), each
//! dataset's view, the chunk cache and reads of a file's bytes, the
//! blocking pool, errors (`{"error": {"code", "message"}}`) and the
//! request log.

use crate::access::trail::Trail;
use crate::access::{self, Action, Policy, Who};
use crate::error::Error;
use crate::read::chunks::ChunkCache;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::repo::apikeys::{self, ApiKey};
use crate::repo::tag::{self, Tag};
use crate::snapshot::tree::Entry;
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Node, Record};
use crate::store::pack::BlobRef;
use axum::Json;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// Largest request body; larger files go through an upload session.
pub const MAX_BODY: usize = 10 * 1000 * 1000;
/// How long keys, the policy and a dataset's versions and tags read from
/// the store are trusted.
const FRESH: Duration = Duration::from_secs(2);
/// Datasets whose views are kept.
const VIEWS: usize = 256;

pub struct Api {
    pub(super) repo: Arc<Repo>,
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
    pub(super) from_memory: AtomicU64,
    pub(super) with_reads: AtomicU64,
    /// Each dataset's versions and tags as last read.
    views: Mutex<lru::LruCache<String, Arc<View>>>,
    /// Held while a view is read.
    /// Per dataset, held while its view is read (requests for one dataset
    /// share a read; one dataset's slow read or a flood of names that do
    /// not exist does not hold up the others).
    viewing: Mutex<std::collections::HashMap<String, std::sync::Weak<tokio::sync::Mutex<()>>>>,
    pub(super) started: Instant,
    /// Requests by (method and route, status): how many, seconds in all.
    pub(super) metrics: Mutex<std::collections::BTreeMap<(String, u16), (u64, f64)>>,
    /// The last consistency audit, if one ran.
    pub(super) audit: Mutex<Option<Audited>>,
    /// Expired versions served to their leases' holders, by dataset,
    /// owner and number, as last read (a host reading such a version asks
    /// for many ranges: the store's leases are read once per `FRESH`).
    leased: Mutex<std::collections::HashMap<Leased, (Instant, Option<Record>)>>,
}

/// An expired version a caller may hold a lease on: dataset, the caller's
/// owner, the version's number.
type Leased = (String, String, u64);

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
            leased: Mutex::default(),
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
            .runtime()
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
        let key = (id.to_string(), caller.owner().to_string(), n);
        let kept = self
            .leased
            .lock()
            .get(&key)
            .filter(|(at, _)| at.elapsed() < FRESH)
            .map(|(_, r)| r.clone());
        let record = match kept {
            Some(r) => r,
            None => {
                let (dataset, holder) = (key.0.clone(), key.1.clone());
                let r = self
                    .run(move |repo| Ok(repo.leased_record(&dataset, &holder, n)?))
                    .await?;
                let mut leased = self.leased.lock();
                if leased.len() >= VIEWS {
                    leased.retain(|_, (at, _)| at.elapsed() < FRESH);
                }
                leased.insert(key, (Instant::now(), r.clone()));
                r
            }
        };
        let Some(record) = record else {
            return Ok(None);
        };
        let names = resources(id, &record, &view.tags);
        Ok(caller
            .sees(Action::Versions, &names)
            .then_some((record, names)))
    }

    /// Forgets what was read of `owner`'s leases on dataset `id` (this
    /// gateway wrote one).
    pub(super) fn leases_changed(&self, id: &str, owner: &str) {
        self.leased
            .lock()
            .retain(|(d, o, _), _| !(d == id && o == owner));
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
    pub(super) fn stream_rest(
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

/// Bytes of a whole file sent in windows of this many (a large file never
/// lives in memory whole).
pub(super) const WINDOW: u64 = 4 << 20;

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

/// The slices sent on `rx`, one after another.
pub(super) fn tokio_stream_from(
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

/// Query parameter `key` as a number (`default` without it); 400 if it
/// is not one.
pub(super) fn query_number(
    q: &std::collections::HashMap<String, String>,
    key: &str,
    default: usize,
) -> Result<usize, ApiError> {
    match q.get(key) {
        None => Ok(default),
        Some(v) => v.parse::<usize>().map_err(|_| {
            err(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!("{key} is a number"),
            )
        }),
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
