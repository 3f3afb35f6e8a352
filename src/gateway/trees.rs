//! A version's folders as trees, for hosts that mount through the gateway
//! (`detafs::remote`): the entries the caller may see, in the store's own
//! tree form (names as bytes, every attribute a mount shows), with nothing
//! of the store's layout. Chunks keep their ids and sizes, not where they
//! lie (offsets would show the size of what lies hidden between them);
//! folders are named by their path, not by their tree's id (which changes
//! with what is hidden in them); a hard link counts only the names shown.

use super::api::{Api, Reply, visible_entries};
use crate::id::{BlobId, PackId};
use crate::relpath::RelPath;
use crate::snapshot::tree::{Entry, Tree};
use crate::snapshot::{Link, Node};
use crate::store::pack::{self, BlobRef};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::collections::HashMap;
use std::sync::Arc;

/// `GET /datasets/{id}/versions/{v}/tree[/{path}]`.
pub(super) fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/datasets/{id}/versions/{v}/tree", get(get_root))
        .route("/datasets/{id}/versions/{v}/tree/{*path}", get(get_folder))
}

async fn get_root(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path((id, v)): Path<(String, String)>,
) -> Reply {
    serve_tree(api, headers, id, v, String::new()).await
}

async fn get_folder(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path((id, v, path)): Path<(String, String, String)>,
) -> Reply {
    serve_tree(api, headers, id, v, path).await
}

async fn serve_tree(
    api: Arc<Api>,
    headers: HeaderMap,
    id: String,
    v: String,
    path: String,
) -> Reply {
    let caller = api.caller(&headers).await?;
    let (_, record, versions) = api.visible_version(&caller, &id, &v).await?;
    let path = RelPath::parse(&path)?;
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
            Ok(bare(visible_entries(repo, &caller, &versions, &path, &tree)?).encode())
        })
        .await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], encoded).into_response())
}

/// `entries` as a tree without the store's layout (see the module's note).
fn bare(mut entries: Vec<Entry>) -> Tree {
    let mut names: HashMap<u64, u32> = HashMap::new();
    for l in entries.iter().filter_map(|e| e.node.link()) {
        *names.entry(l.group).or_default() += 1;
    }
    // One name left shown is a plain file.
    let shown = |link: &mut Option<Link>| {
        *link = link
            .map(|l| Link {
                names: names[&l.group],
                ..l
            })
            .filter(|l| l.names > 1);
    };
    for e in &mut entries {
        match &mut e.node {
            Node::File { chunks, link, .. } => {
                for c in chunks.iter_mut() {
                    *c = bare_ref(c.id, c.size);
                }
                shown(link);
            }
            Node::Dir { tree, .. } => *tree = bare_ref(BlobId::from_bytes([0; 32]), 1),
            Node::Symlink { link, .. } | Node::Special { link, .. } => shown(link),
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
