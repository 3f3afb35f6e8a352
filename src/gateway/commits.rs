//! Commits through the REST API (and the S3 endpoint's, which sends the
//! same body): a body's edits applied to a version the caller may see.
//! What an edit reads of a version (a delta's file, a file copied or kept)
//! passes the one read rule (`Caller::readable`); what it deletes must be
//! shown to the caller (`Caller::policies_show`), and a folder deleted
//! loses only what the caller sees in it. Uploads carry a file's bytes
//! ahead of a commit: whole, or as the ranges that differ from a file of
//! a version the caller may read (a patch), so a host that changed a
//! little of a large file sends that little.

use super::api::{Api, ApiError, Caller, Reply, err, next_part, read_body, resources};
use super::logline::{Asks, asking};
use super::table;
use crate::access::{self, Action};
use crate::commit::CommitMeta;
use crate::commit::edit::{Change, Content, Edit, commit_edits, edit_path};
use crate::commit::upload;
use crate::error::Error;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::repo::changes::{Change as Wire, Source};
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Mtime, Node, Record};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{post, put};
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

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

/// A commit of `body` (the REST API's: commit_message, parent, delta,
/// files, uploads, delete, changes) to dataset `id` by `caller`;
/// `if_match` is the parent when the body names none.
pub(super) async fn commit_as(
    api: &Arc<Api>,
    caller: Caller,
    id: String,
    body: Value,
    if_match: Option<String>,
) -> Result<Record, ApiError> {
    caller.may(Action::Commit, &[access::dataset_resource(&id)])?;
    let message = body
        .get("commit_message")
        .or_else(|| body.get("message"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            err(
                StatusCode::BAD_REQUEST,
                "invalid",
                "commit_message is missing",
            )
        })?
        .to_string();
    let author = caller.name().to_string();
    let parent = body
        .get("parent")
        .and_then(Value::as_str)
        .map(String::from)
        .or(if_match);
    // The base is a version the caller may see (a hidden one answers as
    // a missing one), named by its number from here on.
    let base = match parent {
        Some(p) => Some(api.visible_version(&caller, &id, &p).await?),
        None => {
            let view = api.view(&id, Instant::now()).await?;
            let newest = view.records.last().cloned();
            newest.map(|r| {
                let names = resources(&id, &r, &view.tags);
                (view, r, names)
            })
        }
    };
    let base = base.map(|(_, record, names)| Base { record, names });
    // Versions that files are copied from, each one the caller may see.
    let mut sources = HashMap::new();
    for v in copied_from(&body) {
        let (_, record, names) = api.visible_version(&caller, &id, &v).await?;
        sources.insert(v, Base { record, names });
    }
    let record = api
        .run(move |repo| {
            let tmp = tempdir_in(repo)?;
            let ask = Asked {
                repo,
                dataset: &id,
                caller: &caller,
                base: base.as_ref(),
                sources: &sources,
            };
            let edits = ask.edits(&body, tmp.path())?;
            let meta = CommitMeta {
                content_only: false,
                dataset: &id,
                message: &message,
                author: &author,
            };
            let parent = base.map(|b| format!("v{}", b.record.version));
            Ok(commit_edits(repo, &meta, parent.as_deref(), edits)?)
        })
        .await?;
    api.changed(&record.dataset);
    Ok(record)
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

fn not_a_file(path: &RelPath) -> ApiError {
    err(
        StatusCode::BAD_REQUEST,
        "invalid",
        format!("{path} is not a file"),
    )
}

fn bad(message: String) -> ApiError {
    err(StatusCode::BAD_REQUEST, "invalid", message)
}

/// A private scratch folder under the store's local state, gone on drop.
pub(super) fn tempdir_in(repo: &Repo) -> Result<tempfile::TempDir, ApiError> {
    let dir = repo.state_dir().join("gateway-tmp");
    crate::private::ensure_dir(&dir)?;
    tempfile::tempdir_in(&dir).map_err(|e| Error::io(dir.display(), e).into())
}

/// A version a commit reads, and its names for the policy.
struct Base {
    record: Record,
    names: Vec<String>,
}

/// The versions a body's `changes` copy files from.
fn copied_from(body: &Value) -> Vec<String> {
    let mut out: Vec<String> = body
        .get("changes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("from")?.get("version")?.as_str())
        .map(String::from)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What a commit body is read against.
struct Asked<'a> {
    repo: &'a Repo,
    dataset: &'a str,
    caller: &'a Caller,
    base: Option<&'a Base>,
    sources: &'a HashMap<String, Base>,
}

impl Asked<'_> {
    /// The edits a commit body asks for, their contents written under
    /// `tmp`: `files` (path → base64), `delete` (paths), `delta` (rows of
    /// a table), `uploads` (ids), `changes` (`Wire`). A commit may write
    /// any path; what it reads of a version takes `dataset:read` there,
    /// and a path hidden from the caller is not there to delete, so no
    /// answer tells what the caller may not see.
    fn edits(&self, body: &Value, tmp: &std::path::Path) -> Result<Vec<Edit>, ApiError> {
        let mut edits = Vec::new();
        let mut put = |path: RelPath, bytes: &[u8]| -> Result<(), ApiError> {
            let file = tmp.join(edits.len().to_string());
            std::fs::write(&file, bytes).map_err(|e| Error::io(file.display(), e))?;
            edits.push(Edit::file(path, Content::File(file)));
            Ok(())
        };
        if let Some(files) = body.get("files") {
            let files = files
                .as_object()
                .ok_or_else(|| bad("files must be an object of path: base64".into()))?;
            for (path, data) in files {
                let data = data
                    .as_str()
                    .and_then(|d| {
                        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, d).ok()
                    })
                    .ok_or_else(|| bad(format!("files.{path}: not base64")))?;
                put(edit_path(path)?, &data)?;
            }
        }
        if let Some(delta) = body.get("delta") {
            let d = table::parse(delta)?;
            let path = edit_path(&d.path)?;
            // Decided on the path before it is looked up: whether the file
            // is there shows only to who may read it.
            if let Some(b) = self.base {
                self.caller.may_read(&b.names, &path, false).map_err(|e| {
                    err(
                        StatusCode::FORBIDDEN,
                        "forbidden",
                        format!(
                            "a delta reads {path} of v{}: {}",
                            b.record.version,
                            e.message()
                        ),
                    )
                })?;
            }
            let old = match self.base {
                Some(b) => self.repo.lookup(&b.record.tree, &path)?,
                None => None,
            };
            let old = match old {
                Some(Node::File { chunks, .. }) => {
                    let mut buf = Vec::new();
                    crate::read::read_file(self.repo, &chunks, &mut buf)?;
                    Some(buf)
                }
                Some(_) => return Err(bad(format!("{} is not a file", d.path))),
                None => None,
            };
            put(path, &table::apply(old.as_deref(), &d)?)?;
        }
        if let Some(ups) = body.get("uploads") {
            let ups = ups
                .as_array()
                .ok_or_else(|| bad("uploads must be a list of upload ids".into()))?;
            for u in ups {
                let id = u
                    .as_str()
                    .or_else(|| u.get("upload").and_then(Value::as_str))
                    .ok_or_else(|| bad("uploads: ids, or {\"upload\": id}".into()))?;
                let up = upload::load_upload(self.repo, self.dataset, id, self.caller.owner())?;
                let content = Content::Stored(up.chunks, up.size);
                edits.push(Edit::file(edit_path(&up.path)?, content));
            }
        }
        if let Some(delete) = body.get("delete") {
            let delete = delete
                .as_array()
                .ok_or_else(|| bad("delete must be a list of paths".into()))?;
            for p in delete {
                let p = p
                    .as_str()
                    .ok_or_else(|| bad("delete: paths are strings".into()))?;
                self.delete(&edit_path(p)?, &mut edits)?;
            }
        }
        if let Some(changes) = body.get("changes") {
            let changes: Vec<Wire> = serde_json::from_value(changes.clone())
                .map_err(|e| bad(format!("changes: {e}")))?;
            for c in changes {
                self.change(c, &mut edits)?;
            }
        }
        if edits.is_empty() {
            return Err(bad(
                "nothing to commit: send delta, files, uploads, delete or changes".into(),
            ));
        }
        Ok(edits)
    }

    fn change(&self, c: Wire, edits: &mut Vec<Edit>) -> Result<(), ApiError> {
        let time = |(s, ns): (i64, u32)| {
            let years = crate::limits::MIN_TIME..=crate::limits::MAX_TIME;
            match ns < 1_000_000_000 && years.contains(&s) {
                true => Ok(Mtime(s, ns)),
                false => Err(bad(format!("no such time: {s} s and {ns} ns"))),
            }
        };
        let mode = |m: u32| match m <= 0o7777 {
            true => Ok(m),
            false => Err(bad(format!("a mode is at most 0o7777, not {m:#o}"))),
        };
        let (path, change) = match c {
            Wire::Delete { path } => return self.delete(&edit_path(&path)?, edits),
            Wire::Dir {
                path,
                mode: m,
                mtime,
            } => (
                path,
                Change::Dir {
                    mode: mode(m)?,
                    mtime: time(mtime)?,
                },
            ),
            Wire::Symlink {
                path,
                target,
                mtime,
            } => {
                if target.0.is_empty() || target.0.len() > crate::limits::MAX_TARGET {
                    return Err(bad(format!(
                        "{path}: a symlink's target is 1 to {} bytes",
                        crate::limits::MAX_TARGET
                    )));
                }
                let target = target.0;
                let mtime = time(mtime)?;
                (path, Change::Symlink { target, mtime })
            }
            Wire::File {
                path,
                mode: m,
                mtime,
                upload,
                part,
                from,
            } => {
                let content = match (upload, from) {
                    (Some(id), None) if part.is_some() => {
                        let part = part.expect("matched");
                        let up = upload::load_part(
                            self.repo,
                            self.dataset,
                            &id,
                            part,
                            self.caller.owner(),
                        )?;
                        Content::Stored(up.chunks, up.size)
                    }
                    (Some(id), None) => {
                        let up =
                            upload::load_upload(self.repo, self.dataset, &id, self.caller.owner())?;
                        Content::Stored(up.chunks, up.size)
                    }
                    (None, Some(Source { version, path: at })) => {
                        let b = self.sources.get(&version).expect("resolved before");
                        self.read(b, &RelPath::parse(&at)?)?
                    }
                    (None, None) => match self.base {
                        Some(b) => self.read(b, &edit_path(&path)?)?,
                        None => {
                            return Err(Error::NoPath {
                                version: "the parent version".into(),
                                path: path.to_string(),
                            }
                            .into());
                        }
                    },
                    (Some(_), Some(_)) => {
                        return Err(bad(format!(
                            "{path}: an upload or a file to copy, not both"
                        )));
                    }
                };
                let change = Change::File {
                    content,
                    mode: m.map(mode).transpose()?,
                    mtime: mtime.map(time).transpose()?,
                };
                (path, change)
            }
        };
        edits.push(Edit {
            path: edit_path(&path)?,
            change,
        });
        Ok(())
    }

    /// The content of file `path` of `version`, under the read rule.
    fn read(&self, version: &Base, path: &RelPath) -> Result<Content, ApiError> {
        let node = self.repo.lookup(&version.record.tree, path)?;
        match self
            .caller
            .readable(&version.record, &version.names, path, node)?
        {
            Node::File { chunks, size, .. } => Ok(Content::Stored(chunks, size)),
            _ => Err(not_a_file(path)),
        }
    }

    /// A deletion of `path` of the base: a file or symlink, or a folder
    /// with each thing in it the caller sees. What it does not see is not
    /// there to delete (a missing path), nor deleted with its folder.
    fn delete(&self, path: &RelPath, edits: &mut Vec<Edit>) -> Result<(), ApiError> {
        let missing = || Error::NoPath {
            version: self.base.map_or("the parent version".into(), |b| {
                format!("v{}", b.record.version)
            }),
            path: path.to_string(),
        };
        let Some(b) = self.base else {
            return Err(missing().into());
        };
        let shown = |p: &RelPath, dir| self.caller.policies_show(&b.names, p, dir);
        if !shown(path, false) {
            self.caller.hidden();
            return Err(missing().into());
        }
        let tree = match self.repo.lookup(&b.record.tree, path)? {
            None => return Err(missing().into()),
            Some(Node::Dir { tree, .. }) if shown(path, true) => tree,
            Some(Node::Dir { .. }) => {
                self.caller.hidden();
                return Err(missing().into());
            }
            Some(_) => {
                edits.push(Edit::delete(path.clone()));
                return Ok(());
            }
        };
        // Depth first on an explicit stack: a folder as deep as a version may be.
        let mut stack = vec![(path.clone(), tree)];
        while let Some((dir, tree)) = stack.pop() {
            edits.push(Edit {
                path: dir.clone(),
                change: Change::RemoveDir,
            });
            for e in &self.repo.tree(&tree)?.entries {
                let at = dir.join(&e.name)?;
                match &e.node {
                    Node::Dir { tree, .. } if shown(&at, true) => stack.push((at, *tree)),
                    Node::Dir { .. } => {}
                    _ if shown(&at, false) => edits.push(Edit::delete(at)),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}
