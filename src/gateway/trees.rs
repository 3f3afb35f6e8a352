//! A version's folders as trees, for hosts that mount through the gateway
//! (`detafs::remote`): the entries the caller may see, in the store's own
//! tree form (names as bytes, every attribute a mount shows), with nothing
//! of the store's layout. Chunks keep their ids and sizes, not where they
//! lie (offsets would show the size of what lies hidden between them);
//! folders are named by their tree's id only to a caller from whom no
//! path is hidden (to others the id would change with what is hidden in
//! them), else not at all.
//!
//! A folder's small files (those of one chunk) are read together: as the
//! ranges of their bytes laid end to end in the folder's order
//! (`small-files/{path}`), so a host reads a folder of small files with a
//! request per few MiB, not one per file. The layout is what the tree
//! shows, and its ETag (the chunks' ids in that order) says it is the
//! same on both sides.

use super::core::{Api, Reply, visible_entries};
use super::logline::asking;
use super::rest::{InVersion, READS};
use crate::id::{BlobId, PackId};
use crate::relpath::RelPath;
use crate::snapshot::Node;
use crate::snapshot::tree::{Entry, Tree, etag, small_files};
use crate::store::pack::{self, BlobRef};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;

/// `GET /datasets/{id}/versions/{v}/tree[/{path}]`.
pub(super) fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route(
            "/datasets/{id}/versions/{v}/tree",
            asking(READS, get(serve_tree)),
        )
        .route(
            "/datasets/{id}/versions/{v}/tree/{*path}",
            asking(READS, get(serve_tree)),
        )
        .route(
            "/datasets/{id}/versions/{v}/small-files",
            asking(READS, get(serve_small)),
        )
        .route(
            "/datasets/{id}/versions/{v}/small-files/{*path}",
            asking(READS, get(serve_small)),
        )
}

/// Most bytes of small files one request may ask for.
const SMALL_SPAN: u64 = 16 << 20;

async fn serve_small(State(api): State<Arc<Api>>, headers: HeaderMap, at: InVersion) -> Reply {
    let caller = api.caller(&headers).await?;
    let (_, record, versions) = api.visible_version(&caller, &at.id, &at.v).await?;
    let cache = api.chunks.clone();
    let folder = at.path;
    let (tag, bytes) = api
        .run(move |repo| {
            let node = repo.lookup(&record.tree, &folder)?;
            let Node::Dir { tree, .. } = caller.readable(&record, &versions, &folder, node)? else {
                return Err(not_a_folder(&folder));
            };
            let entries = visible_entries(repo, &caller, &versions, &folder, &tree)?;
            let small = small_files(&entries);
            let layout: Vec<BlobRef> = small.iter().map(|(_, c)| *c).collect();
            let tag = etag(&layout);
            if headers
                .get(header::IF_NONE_MATCH)
                .is_some_and(|v| v.as_bytes() == tag.as_bytes())
            {
                return Ok((tag, None));
            }
            let size = layout.iter().map(BlobRef::data_size).sum();
            let (start, end) = match super::rest::range(&headers, size) {
                Some(Ok((a, b))) if b - a <= SMALL_SPAN => (a, b),
                _ => {
                    return Err(super::core::err(
                        StatusCode::RANGE_NOT_SATISFIABLE,
                        "bad_range",
                        format!("ask for one range of at most {SMALL_SPAN} of the {size} bytes"),
                    ));
                }
            };
            // Each file whose bytes are sent must be readable by the caller.
            let mut at = 0;
            for (e, c) in &small {
                if at < end && start < at + c.data_size() {
                    caller.may_read(&versions, &folder.join(&e.name)?, false)?;
                }
                at += c.data_size();
            }
            if super::rest::fresh(&headers) {
                cache.forget_span(&layout, start, end);
            }
            let slices = cache
                .slices(&layout, start, end, false)?
                .expect("read when not memory-only");
            Ok((tag, Some(slices.concat())))
        })
        .await?;
    let mut res = match bytes {
        None => StatusCode::NOT_MODIFIED.into_response(),
        Some(b) => (StatusCode::PARTIAL_CONTENT, b).into_response(),
    };
    res.headers_mut()
        .insert(header::ETAG, HeaderValue::from_str(&tag).expect("ascii"));
    Ok(res)
}

fn not_a_folder(path: &RelPath) -> super::core::ApiError {
    super::core::err(
        StatusCode::BAD_REQUEST,
        "not_a_folder",
        format!("{path} is not a folder"),
    )
}

async fn serve_tree(State(api): State<Arc<Api>>, headers: HeaderMap, at: InVersion) -> Reply {
    let caller = api.caller(&headers).await?;
    let (_, record, versions) = api.visible_version(&caller, &at.id, &at.v).await?;
    let path = at.path.clone();
    let encoded = api
        .run(move |repo| {
            let node = repo.lookup(&record.tree, &path)?;
            let Node::Dir { tree, .. } = caller.readable(&record, &versions, &path, node)? else {
                return Err(not_a_folder(&path));
            };
            let whole = !caller.may_hide_paths(&at.id);
            let entries = visible_entries(repo, &caller, &versions, &path, &tree)?;
            Ok(bare(entries, whole).encode())
        })
        .await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], encoded).into_response())
}

/// `entries` as a tree without the store's layout (see the module's
/// note), for a caller who sees the `whole` dataset (no policy may hide a
/// path from it) or not. A file's further names may lie in folders hidden
/// from the second: to it each name is a file of its own (as `export`
/// through a gateway writes them), so its count of names tells nothing of
/// what is hidden. To the first, a folder is named by its tree's id, so a
/// folder no version changed is one folder across versions.
fn bare(mut entries: Vec<Entry>, whole: bool) -> Tree {
    for e in &mut entries {
        match &mut e.node {
            Node::File { chunks, link, .. } => {
                for c in chunks.iter_mut() {
                    *c = bare_ref(c.id, c.size);
                }
                link.take_if(|_| !whole);
            }
            Node::Dir { tree, links, .. } => {
                let id = match whole {
                    true => tree.id,
                    false => BlobId::from_bytes([0; 32]),
                };
                *tree = bare_ref(id, 1);
                *links &= whole;
            }
            Node::Symlink { link, .. } | Node::Special { link, .. } => {
                link.take_if(|_| !whole);
            }
        }
    }
    Tree::new(entries)
}

/// A reference that says what a blob is (its id, its size) and nothing of
/// where it lies; shaped as a raw blob, so it decodes as any reference.
fn bare_ref(id: BlobId, size: u32) -> BlobRef {
    BlobRef {
        id,
        pack: PackId::from_bytes([0; 32]),
        offset: pack::MAGIC.len() as u64,
        len: size.saturating_add(1),
        size,
    }
}
