//! What changed, over REST (the web page shows these; so may any client):
//!
//! - `GET /datasets/{id}/diff/{A..B}?offset&limit`: the paths that differ
//!   between two versions, as `detafs diff --json` lists them (A/M/D/T),
//!   each side as the caller sees it: a path hidden in one version is
//!   absent there, so it is added or removed, never shown.
//! - `GET /datasets/{id}/diff/{A..B}/files/{path}`: one file's change: a
//!   unified diff of text, the rows added and removed of a table (CSV,
//!   TSV, JSON lines: what a commit's `delta` says), or the sizes.
//! - `GET /datasets/{id}/history?path=P`: each version that changed what
//!   `P` names (`detafs log NAME -- P`), among those the caller sees.
//!
//! Every side is read through `Api::visible_version` and the one read
//! rule (`Caller::readable`, `Caller::sees_path`): nothing here decides
//! what a caller may see.

use super::core::{Api, ApiError, Caller, Reply, err, query_number, resources};
use super::logline::{Asks, asking};
use super::rest::InVersion;
use crate::access::Action;
use crate::error::Error;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::diff::{self as tree_diff, ChangeKind};
use crate::snapshot::{Node, Record};
use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

const DIFFS: Asks = Asks("dataset:read", "datasets/{id}/diff/{range}");
const HISTORY: Asks = Asks("dataset:versions", "datasets/{id}/history");

/// Changed paths per page, by default and at most.
const PAGE: usize = 500;
const MAX_PAGE: usize = 5_000;
/// Files larger than this are compared by size alone.
const MAX_TEXT: u64 = 2 << 20;
/// Rows of a table's change shown, each way.
const MAX_ROWS: usize = 1_000;

pub(super) fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/datasets/{id}/diff/{range}", asking(DIFFS, get(diff)))
        .route(
            "/datasets/{id}/diff/{range}/files/{*path}",
            asking(DIFFS, get(diff_file)),
        )
        .route("/datasets/{id}/history", asking(HISTORY, get(history)))
}

fn bad(what: impl Into<String>) -> ApiError {
    err(StatusCode::BAD_REQUEST, "invalid", what)
}

/// A version as the caller may see it: its record and its names.
struct Side {
    record: Record,
    names: Vec<String>,
}

/// Versions `A` and `B` of `A..B`, each one the caller may see.
async fn sides(
    api: &Arc<Api>,
    caller: &Caller,
    id: &str,
    range: &str,
) -> Result<(Side, Side), ApiError> {
    let (a, b) = range
        .split_once("..")
        .ok_or_else(|| bad("a diff names two versions: A..B (v1..v3, v2..latest)"))?;
    let (_, record, names) = api.visible_version(caller, id, a).await?;
    let old = Side { record, names };
    let (_, record, names) = api.visible_version(caller, id, b).await?;
    Ok((old, Side { record, names }))
}

fn page(q: &HashMap<String, String>) -> Result<(usize, usize), ApiError> {
    Ok((
        query_number(q, "offset", 0)?,
        query_number(q, "limit", PAGE)?.clamp(1, MAX_PAGE),
    ))
}

async fn diff(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    at: InVersion,
) -> Reply {
    let caller = api.caller(&headers).await?;
    let (old, new) = sides(&api, &caller, &at.id, &at.v).await?;
    let (offset, limit) = page(&q)?;
    let (from, to) = (old.record.version, new.record.version);
    let rows = api
        .run(move |repo| {
            let mut rows = Vec::new();
            tree_diff::diff_each(
                repo,
                Some(&old.record.tree),
                Some(&new.record.tree),
                &mut |c| {
                    let Ok(path) = RelPath::parse(&c.path) else {
                        return;
                    };
                    let seen = |side: &Side, n: Option<Node>| {
                        n.filter(|n| caller.sees_path(&side.names, &path, n.is_dir()))
                    };
                    let (a, b) = (seen(&old, c.old), seen(&new, c.new));
                    let kind = match (&a, &b) {
                        (None, None) => return,
                        (None, Some(_)) => ChangeKind::Added,
                        (Some(_), None) => ChangeKind::Removed,
                        (Some(_), Some(_)) => c.kind,
                    };
                    rows.push(json!({
                        "change": kind.letter().to_string(),
                        "path": path.to_string(),
                        "old_size": a.as_ref().map(Node::size),
                        "new_size": b.as_ref().map(Node::size),
                    }));
                },
            )?;
            Ok(rows)
        })
        .await?;
    let total = rows.len();
    let shown: Vec<Value> = rows.into_iter().skip(offset).take(limit).collect();
    Ok(Json(json!({
        "from": from, "to": to, "total": total, "offset": offset, "changes": shown,
    }))
    .into_response())
}

/// A file of one side: its size, and its bytes unless larger than
/// `MAX_TEXT`.
type Read = (u64, Option<Vec<u8>>);

/// A file's bytes in one version as the caller may read them (None: not
/// there for it).
fn read_side(
    api: &Arc<Api>,
    repo: &Repo,
    caller: &Caller,
    side: &Side,
    path: &RelPath,
) -> Result<Option<Read>, ApiError> {
    let node = repo.lookup(&side.record.tree, path)?;
    let node = match caller.readable(&side.record, &side.names, path, node) {
        Ok(n) => n,
        Err(e) if e.status() == StatusCode::NOT_FOUND => return Ok(None),
        Err(e) => return Err(e),
    };
    let Node::File { chunks, size, .. } = node else {
        return Err(bad(format!("{path} is not a file")));
    };
    if size > MAX_TEXT {
        return Ok(Some((size, None)));
    }
    let bytes = api
        .chunks
        .slices(&chunks, 0, size, false)?
        .expect("all is read when not memory-only")
        .concat();
    Ok(Some((size, Some(bytes))))
}

async fn diff_file(State(api): State<Arc<Api>>, headers: HeaderMap, at: InVersion) -> Reply {
    let caller = api.caller(&headers).await?;
    let (old, new) = sides(&api, &caller, &at.id, &at.v).await?;
    let path = at.path;
    let reader = api.clone();
    let out = api
        .run(move |repo| {
            let a = read_side(&reader, repo, &caller, &old, &path)?;
            let b = read_side(&reader, repo, &caller, &new, &path)?;
            if a.is_none() && b.is_none() {
                return Err(Error::NoPath {
                    version: format!("v{} or v{}", old.record.version, new.record.version),
                    path: path.to_string(),
                }
                .into());
            }
            Ok(file_change(&path, a, b))
        })
        .await?;
    Ok(Json(out).into_response())
}

/// What changed in one file: a table's rows, text's lines, or sizes.
fn file_change(path: &RelPath, old: Option<Read>, new: Option<Read>) -> Value {
    let sizes = json!({
        "old_size": old.as_ref().map(|s| s.0),
        "new_size": new.as_ref().map(|s| s.0),
    });
    let text = |s: &Option<Read>| -> Option<String> {
        match s {
            None => Some(String::new()),
            Some((_, Some(b))) if !b.contains(&0) => String::from_utf8(b.clone()).ok(),
            Some(_) => None,
        }
    };
    let (Some(a), Some(b)) = (text(&old), text(&new)) else {
        let mut out = sizes;
        out["kind"] = json!("binary");
        return out;
    };
    let name = path.to_string();
    if let Some(format) = super::table::Format::of(&name) {
        let (added, removed, columns) = format.row_change(&a, &b, MAX_ROWS);
        let mut out = sizes;
        out["kind"] = json!("table");
        out["columns"] = json!(columns);
        out["added"] = json!(added);
        out["removed"] = json!(removed);
        return out;
    }
    let patch = similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{name}"), &format!("b/{name}"))
        .to_string();
    let mut out = sizes;
    out["kind"] = json!("text");
    out["patch"] = json!(patch);
    out
}

/// `log -- PATH` over REST: the versions (those the caller sees, in which
/// it sees the path) that changed what `path` names, newest first.
async fn history(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let caller = api.caller(&headers).await?;
    let path = RelPath::parse(q.get("path").map(String::as_str).unwrap_or_default())?;
    let view = api.view(&id, std::time::Instant::now()).await?;
    caller.finds_dataset(&id, &view)?;
    let hides = caller.may_hide_paths(&id);
    let rows = api
        .run(move |repo| {
            let mut rows = Vec::new();
            let mut before: Option<Node> = None;
            for r in &view.records {
                let names = resources(&id, r, &view.tags);
                if !caller.sees(Action::Versions, &names) {
                    continue;
                }
                let now = repo
                    .lookup(&r.tree, &path)?
                    .filter(|n| caller.sees_path(&names, &path, n.is_dir()));
                let kind = match (&before, &now) {
                    (None, None) => None,
                    (None, Some(_)) => Some(ChangeKind::Added),
                    (Some(_), None) => Some(ChangeKind::Removed),
                    (Some(a), Some(b)) => match a.likeness(b) {
                        crate::snapshot::tree::Likeness::Same => None,
                        crate::snapshot::tree::Likeness::TimeOnly => Some(ChangeKind::TimeOnly),
                        crate::snapshot::tree::Likeness::Different => Some(ChangeKind::Modified),
                    },
                };
                if let Some(kind) = kind {
                    let mut row = r.log_entry_seen(hides);
                    row["tags"] = json!(
                        view.tags
                            .iter()
                            .filter(|t| t.version == r.version)
                            .map(|t| t.tag.as_str())
                            .collect::<Vec<_>>()
                    );
                    row["change"] = json!(kind.letter().to_string());
                    row["size"] = json!(now.as_ref().filter(|n| !n.is_dir()).map(Node::size));
                    rows.push(row);
                }
                before = now;
            }
            rows.reverse();
            Ok(rows)
        })
        .await?;
    Ok(Json(rows).into_response())
}
