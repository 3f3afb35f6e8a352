//! A version's folders as trees, for hosts that mount through the gateway
//! (`detafs::remote`): the entries the caller may see, in the store's own
//! tree form (names as bytes, every attribute a mount shows), with nothing
//! of the store's layout. Chunks keep their ids and sizes, not where they
//! lie (offsets would show the size of what lies hidden between them);
//! folders are named by their path, not by their tree's id (which changes
//! with what is hidden in them).

use super::api::{Api, InVersion, Reply, visible_entries};
use crate::id::{BlobId, PackId};
use crate::snapshot::Node;
use crate::snapshot::tree::{Entry, Tree};
use crate::store::pack::{self, BlobRef};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;

/// `GET /datasets/{id}/versions/{v}/tree[/{path}]`.
pub(super) fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/datasets/{id}/versions/{v}/tree", get(serve_tree))
        .route("/datasets/{id}/versions/{v}/tree/{*path}", get(serve_tree))
}

async fn serve_tree(State(api): State<Arc<Api>>, headers: HeaderMap, at: InVersion) -> Reply {
    let caller = api.caller(&headers).await?;
    let (_, record, versions) = api.visible_version(&caller, &at.id, &at.v).await?;
    let path = at.path.clone();
    let encoded = api
        .run(move |repo| {
            let node = repo.lookup(&record.tree, &path)?;
            let Node::Dir { tree, .. } = caller.readable(&record, &versions, &path, node)? else {
                return Err(super::api::err(
                    StatusCode::BAD_REQUEST,
                    "not_a_folder",
                    format!("{path} is not a folder"),
                ));
            };
            let keep_links = !caller.may_hide_paths(&at.id);
            let entries = visible_entries(repo, &caller, &versions, &path, &tree)?;
            Ok(bare(entries, keep_links).encode())
        })
        .await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], encoded).into_response())
}

/// `entries` as a tree without the store's layout (see the module's
/// note). A file's further names may lie in folders hidden from a caller
/// a policy may hide paths from: to such a caller each name is a file of
/// its own (as `export` through a gateway writes them), so its count of
/// names tells nothing of what is hidden.
fn bare(mut entries: Vec<Entry>, keep_links: bool) -> Tree {
    for e in &mut entries {
        match &mut e.node {
            Node::File { chunks, link, .. } => {
                for c in chunks.iter_mut() {
                    *c = bare_ref(c.id, c.size);
                }
                link.take_if(|_| !keep_links);
            }
            Node::Dir { tree, links, .. } => {
                *tree = bare_ref(BlobId::from_bytes([0; 32]), 1);
                *links &= keep_links;
            }
            Node::Symlink { link, .. } | Node::Special { link, .. } => {
                link.take_if(|_| !keep_links);
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
