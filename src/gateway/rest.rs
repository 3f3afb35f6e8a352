//! The REST API: its own routes (datasets, versions, a version's files
//! and folders, health, metrics, OpenAPI), every request logged, over the
//! gateway's core (`core.rs`); the other endpoints' modules (`trees.rs`,
//! `commits.rs`, `tags.rs`, `lifecycle.rs`, `compare.rs`, `preview.rs`,
//! `audit.rs`) add theirs to its router.

use super::core::{
    Api, ApiError, Caller, Reply, View, WINDOW, err, read_body, resources, visible_entries,
};
use super::logline::{Asks, asking};
use crate::access::{self, Action};
use crate::read::chunks::ChunkCache;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::tree::etag;
use crate::snapshot::{Node, Record};
use crate::store::pack::BlobRef;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

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
