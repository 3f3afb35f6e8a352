//! A commit body's edits applied to a version the caller may see: what
//! REST's commits (`commits.rs`) and S3's (`s3/writes.rs`) both carry
//! out. What an edit reads of a version (a delta's file, a file copied or
//! kept) passes the one read rule (`Caller::readable`); what it deletes
//! must be shown to the caller (`Caller::policies_show`), and a folder
//! deleted loses only what the caller sees in it.

use super::core::{Api, ApiError, Caller, err, resources};
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
use axum::http::StatusCode;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

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

pub(super) fn not_a_file(path: &RelPath) -> ApiError {
    bad(format!("{path} is not a file"))
}

pub(super) fn bad(message: String) -> ApiError {
    err(StatusCode::BAD_REQUEST, "invalid", message)
}

/// A private scratch folder under the store's local state, gone on drop.
pub(super) fn tempdir_in(repo: &Repo) -> Result<tempfile::TempDir, ApiError> {
    let dir = repo.state_dir().join("gateway-tmp");
    crate::private::ensure_dir(&dir)?;
    tempfile::tempdir_in(&dir).map_err(|e| Error::io(dir.display(), e).into())
}

/// A version a commit reads, and its names for the policy.
pub(super) struct Base {
    pub(super) record: Record,
    pub(super) names: Vec<String>,
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
