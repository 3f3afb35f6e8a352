//! Commits through the REST API (`POST /datasets/{id}/commit`, the edits
//! carried out by `edits.rs`, as S3's are) and uploads: a file's bytes
//! ahead of a commit, whole, or as the ranges that differ from a file of a
//! version the caller may read (a patch), so a host that changed a little
//! of a large file sends that little.

use super::core::{Api, ApiError, Reply, err, next_part, read_body};
use super::edits::{Base, commit_as, not_a_file, tempdir_in};
use super::logline::{Asks, asking};
use crate::access::{self, Action};
use crate::commit::edit::edit_path;
use crate::commit::upload;
use crate::error::Error;
use crate::relpath::RelPath;
use crate::snapshot::Node;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{post, put};
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;

/// What its routes ask of the policy (`logline::Asks`).
const COMMITS: Asks = Asks("dataset:commit", "datasets/{id}");
const UPLOADS: Asks = Asks("dataset:commit", "datasets/{id}/uploads/{path}");

pub(super) fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/datasets/{id}/commit", asking(COMMITS, post(commit)))
        .route(
            "/datasets/{id}/uploads/{*path}",
            asking(UPLOADS, put(put_upload)),
        )
        .route("/datasets/{id}/bundles", asking(COMMITS, put(put_bundle)))
}

async fn commit(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Reply {
    let caller = api.caller(&headers).await?;
    let body = read_body(body).await?;
    let if_match = headers
        .get(header::IF_MATCH)
        .and_then(|m| m.to_str().ok())
        .map(|m| m.trim_matches('"').to_string());
    let hides = caller.may_hide_paths(&id);
    let record = commit_as(&api, caller, id, body, if_match).await?;
    Ok((StatusCode::CREATED, Json(record.log_entry_seen(hides))).into_response())
}

/// Where an upload's bytes come from besides its body: the file `from` of
/// version `version`, `size` bytes long once the body's ranges are laid
/// on it (a patch; see `patched`).
#[derive(Default)]
struct PatchOf {
    version: Option<String>,
    from: Option<Vec<u8>>,
    size: Option<u64>,
}

/// An upload's dataset, path and what it patches, from the request's own
/// URL, each percent-decoded once: axum's path and query parameters must
/// be UTF-8, and names need not be.
fn upload_at(uri: &axum::http::Uri) -> Result<(String, RelPath, PatchOf), ApiError> {
    let bad = |what: String| err(StatusCode::BAD_REQUEST, "invalid", what);
    let decoded = |s: &str| -> Vec<u8> { percent_encoding::percent_decode_str(s).collect() };
    let text = |s: &str| {
        String::from_utf8(decoded(s)).map_err(|_| bad("a dataset or version not in UTF-8".into()))
    };
    let mut parts = uri.path().splitn(5, '/').skip(2);
    let id = text(parts.next().unwrap_or_default())?;
    let path = edit_path(decoded(parts.nth(1).unwrap_or_default()))?;
    let mut of = PatchOf::default();
    for pair in uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let taken = match key {
            "version" => of.version.replace(text(value)?).is_some(),
            "from" => of.from.replace(decoded(value)).is_some(),
            "size" => {
                let size = value
                    .parse()
                    .map_err(|_| bad(format!("size {value:?} is not a number of bytes")))?;
                of.size.replace(size).is_some()
            }
            other => return Err(bad(format!("unknown parameter {other:?}"))),
        };
        if taken {
            return Err(bad(format!("{key} given twice")));
        }
    }
    Ok((id, path, of))
}

/// `PUT /datasets/{id}/uploads/{path}[?version=V&from=PATH&size=N]`: the
/// body (any size) streamed to a local file, then stored as an upload a
/// commit can name: the file's bytes, or a patch of a version's file.
async fn put_upload(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    body: Body,
) -> Reply {
    let (id, path, of) = upload_at(&uri)?;
    let caller = api.caller(&headers).await?;
    caller.may(Action::Commit, &[access::dataset_resource(&id)])?;
    let patch = match of {
        PatchOf {
            version: Some(v),
            from: Some(from),
            size: Some(size),
        } => {
            let from = RelPath::parse(&from)?;
            let (_, record, names) = api.visible_version(&caller, &id, &v).await?;
            Some((Base { record, names }, from, size))
        }
        PatchOf {
            version: None,
            from: None,
            size: None,
        } => None,
        _ => {
            return Err(err(
                StatusCode::BAD_REQUEST,
                "invalid",
                "a patch names version, from and size, all three",
            ));
        }
    };
    let tmp = api.run(tempdir_in).await?;
    let file = tmp.path().join("upload");
    received(body, &file).await?;
    let owner = caller.owner().to_string();
    let up = api
        .run(move |repo| {
            let up = match patch {
                None => upload::store_upload(repo, &id, &path, &file, &owner)?,
                Some((base, from, size)) => {
                    let node = repo.lookup(&base.record.tree, &from)?;
                    let Node::File { chunks, .. } =
                        caller.readable(&base.record, &base.names, &from, node)?
                    else {
                        return Err(not_a_file(&from));
                    };
                    upload::store_patched(repo, (&id, &path, &owner), &chunks, &file, size)?
                }
            };
            drop(tmp);
            Ok(up)
        })
        .await?;
    let body = json!({ "upload": up.id, "path": up.path, "size": up.size });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `PUT /datasets/{id}/bundles`: many small files in one body
/// (`upload::store_bundle`), stored as one upload whose files a commit
/// names by their place.
async fn put_bundle(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Reply {
    let caller = api.caller(&headers).await?;
    caller.may(Action::Commit, &[access::dataset_resource(&id)])?;
    let tmp = api.run(tempdir_in).await?;
    let file = tmp.path().join("bundle");
    received(body, &file).await?;
    let owner = caller.owner().to_string();
    let up = api
        .run(move |repo| {
            let up = upload::store_bundle(repo, (&id, &owner), &file)?;
            drop(tmp);
            Ok(up)
        })
        .await?;
    let body = json!({ "upload": up.id, "size": up.size });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Streams `body` to local file `file`.
async fn received(body: Body, file: &std::path::Path) -> Result<(), ApiError> {
    use tokio::io::AsyncWriteExt;
    let shown = file.display().to_string();
    let io = |e: std::io::Error| ApiError::from(Error::io(&shown, e));
    let mut out = tokio::fs::File::create(file).await.map_err(io)?;
    let mut stream = body.into_data_stream();
    while let Some(part) = next_part(&mut stream).await? {
        out.write_all(&part).await.map_err(io)?;
    }
    out.flush().await.map_err(io)
}
