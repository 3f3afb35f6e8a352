//! Uploads: a file's bytes stored ahead of a commit (the gateway's chunked
//! alternative to a body over its limit). The chunks go into packs as a
//! commit's do, and so does a one-entry tree naming them (a file of any
//! size has a chunk list of any length, which a tree holds as a version's
//! does); `uploads/ID.json` (sealed like records) names that tree, for
//! which dataset and path, and when. A commit names uploads; one older than
//! a commit may take (gc may since have collected its packs) is refused.

use super::scan::Scanner;
use crate::error::{Error, Result};
use crate::limits;
use crate::progress::Quiet;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::tree::{Entry, Node, Tree};
use crate::snapshot::tree::{TreeSink, TreeSource};
use crate::store::keys;
use crate::store::pack::BlobRef;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upload {
    pub id: String,
    pub dataset: String,
    pub path: String,
    pub size: u64,
    /// A tree of one entry, `file`, the upload's bytes.
    pub tree: BlobRef,
    /// RFC 3339, UTC.
    pub time: String,
    /// The newest gc note when it was stored (`Repo::gc_mark`): it may
    /// reuse blobs a later gc deleted, so a commit after one refuses it.
    #[serde(default)]
    pub gc_mark: Option<String>,
    /// Whose it is (`pending::owner` of the caller that stored it): only
    /// they commit or copy it. (None: stored before uploads had owners.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// An upload as a commit takes it.
pub struct Loaded {
    pub path: String,
    pub size: u64,
    pub chunks: Vec<BlobRef>,
}

/// The name of the one entry of an upload's tree.
const ENTRY: &[u8] = b"file";

/// Stores the bytes of local file `file` as an upload for `path` of `dataset`.
pub fn store_upload(
    repo: &Repo,
    dataset: &str,
    path: &RelPath,
    file: &Path,
    owner: &str,
) -> Result<Upload> {
    repo.check_dataset(dataset)?;
    let mut scanner = Scanner::new(repo, &Quiet)?;
    let (chunks, size) = scanner.chunk_prefix(file, u64::MAX)?;
    record(repo, scanner, (dataset, path, owner), chunks, size)
}

/// An upload for `path` of `dataset` of a file of a version (its `chunks`
/// and `size`): a copy that reads no bytes. Its chunks are a version's,
/// so it is as young as an upload stored now.
pub fn store_chunks(
    repo: &Repo,
    dataset: &str,
    path: &RelPath,
    chunks: Vec<BlobRef>,
    size: u64,
    owner: &str,
) -> Result<Upload> {
    repo.check_dataset(dataset)?;
    let scanner = Scanner::new(repo, &Quiet)?;
    record(repo, scanner, (dataset, path, owner), chunks, size)
}

/// Upload `id` of `dataset` again, for `path`: the same bytes, as old as
/// the upload copied (its chunks are only as safe from gc as it is).
pub fn copy_upload(
    repo: &Repo,
    dataset: &str,
    id: &str,
    path: &RelPath,
    owner: &str,
) -> Result<Upload> {
    let mut up = manifest(repo, id, owner)?;
    check(repo, dataset, &up)?;
    up.id = hex::encode(rand::random::<[u8; 16]>());
    up.path = path.to_string();
    create(repo, &up)?;
    Ok(up)
}

/// The upload of `chunks` for `path` of `dataset` by `owner`: their
/// one-entry tree, through `scanner`, and its manifest.
fn record(
    repo: &Repo,
    mut scanner: Scanner,
    (dataset, path, owner): (&str, &RelPath, &str),
    chunks: Vec<BlobRef>,
    size: u64,
) -> Result<Upload> {
    let now = std::time::SystemTime::now();
    let node = Node::File {
        mode: 0o644,
        mtime: Default::default(), // a commit gives the file its time
        size,
        chunks,
        atime: None,
        link: None,
    };
    let tree = scanner.put_tree(&Tree::new(vec![Entry {
        name: ENTRY.to_vec(),
        node,
    }]))?;
    let gc_mark = scanner.gc_mark.clone();
    scanner.finish()?;
    let up = Upload {
        id: hex::encode(rand::random::<[u8; 16]>()),
        dataset: dataset.to_string(),
        path: path.to_string(),
        size,
        tree,
        time: humantime::format_rfc3339_seconds(now).to_string(),
        gc_mark,
        owner: Some(owner.to_string()),
    };
    create(repo, &up)?;
    Ok(up)
}

/// Creates `up`'s manifest (its id is fresh: a taken one is refused).
fn create(repo: &Repo, up: &Upload) -> Result<()> {
    let body = serde_json::to_vec(up).expect("serializable");
    match repo
        .store()
        .put_create(&keys::upload(&up.id), body.into())?
    {
        true => Ok(()),
        false => Err(Error::InvalidInput("upload id taken; upload again".into())),
    }
}

/// The upload `id` of `dataset`, checked: it decodes, its tree holds one
/// file of its size, and it is young enough to commit.
pub fn load_upload(repo: &Repo, dataset: &str, id: &str, owner: &str) -> Result<Loaded> {
    let up = manifest(repo, id, owner)?;
    let chunks = check(repo, dataset, &up)?;
    Ok(Loaded {
        path: up.path,
        size: up.size,
        chunks,
    })
}

/// Upload `id`'s manifest, as stored, if `owner` stored it (another's
/// is as one that does not exist).
fn manifest(repo: &Repo, id: &str, owner: &str) -> Result<Upload> {
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidInput(format!("bad upload id {id:?}")));
    }
    let bytes = repo
        .store()
        .get(&keys::upload(id))?
        .ok_or_else(|| Error::InvalidInput(format!("no upload {id}")))?;
    let up: Upload = serde_json::from_slice(&bytes)
        .map_err(|e| Error::malformed(keys::upload(id), e.to_string()))?;
    if up.id != id {
        return Err(Error::malformed(
            keys::upload(id),
            "upload does not hold together",
        ));
    }
    if up.owner.as_deref().is_some_and(|o| o != owner) {
        return Err(Error::InvalidInput(format!("no upload {id}")));
    }
    Ok(up)
}

/// `up`'s chunks, if it is of `dataset`, young enough to commit and holds
/// together.
fn check(repo: &Repo, dataset: &str, up: &Upload) -> Result<Vec<BlobRef>> {
    let id = &up.id;
    if up.dataset != dataset {
        return Err(Error::InvalidInput(format!(
            "upload {id} is for dataset {}",
            up.dataset
        )));
    }
    let age = humantime::parse_rfc3339(&up.time)
        .ok()
        .and_then(|t| t.elapsed().ok())
        .ok_or_else(|| Error::malformed(keys::upload(id), "bad time"))?;
    if age + repo.store().deadline() > crate::store::grace::MAX_COMMIT_AGE {
        return Err(Error::InvalidInput(format!(
            "upload {id} is older than {} and may have been collected: upload it again",
            humantime::format_duration(crate::store::grace::MAX_COMMIT_AGE)
        )));
    }
    if up.gc_mark != repo.gc_mark()? {
        return Err(Error::InvalidInput(format!(
            "a gc ran since upload {id} was stored and may have deleted data it reuses: upload it again"
        )));
    }
    // The tree is read (and its references checked) as a version's is.
    let tree = repo.tree(&up.tree)?;
    let chunks = match &tree.entries[..] {
        [
            Entry {
                name,
                node: Node::File { size, chunks, .. },
            },
        ] if name == ENTRY && *size == up.size => chunks.clone(),
        _ => {
            return Err(Error::malformed(
                keys::upload(id),
                "upload does not hold together",
            ));
        }
    };
    let sum: u64 = chunks.iter().map(BlobRef::data_size).sum();
    if sum != up.size
        || chunks
            .iter()
            .any(|c| c.size == 0 || u64::from(c.size) > limits::MAX_CHUNK)
    {
        return Err(Error::malformed(
            keys::upload(id),
            "upload does not hold together",
        ));
    }
    Ok(chunks)
}
