//! What a version expands to, measured without expanding it: trees are
//! shared, so a few small trees can name an astronomical number of paths.
//! Every tree is loaded once and walked without recursion, and a version
//! beyond `limits::MAX_PATHS` or `limits::MAX_DEPTH` is refused before any
//! walk that would visit each path (export, `ls -R` of a whole tree).

use super::diff::TreeSource;
use super::tree::Node;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::limits;
use crate::store::pack::BlobRef;
use std::collections::HashMap;

/// The size of a tree as a walk of every path sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expansion {
    /// Entries under the tree, each use of a shared subtree counted.
    pub paths: u64,
    /// Bytes of regular files, likewise.
    pub bytes: u64,
    /// Directory levels below the tree.
    pub height: usize,
}

fn subtree(node: &Node) -> Option<&BlobRef> {
    match node {
        Node::Dir { tree, .. } => Some(tree),
        _ => None,
    }
}

fn limit(root: &BlobRef, detail: String) -> Error {
    Error::malformed(format!("version tree {}", root.id.short()), detail)
}

/// Measures the tree at `root`, refusing one beyond the limits.
pub fn expansion(src: &dyn TreeSource, root: &BlobRef) -> Result<Expansion> {
    let mut done: HashMap<ObjectId, Expansion> = HashMap::new();
    // (tree, depth, children already pushed)
    let mut stack = vec![(*root, 0usize, false)];
    while let Some((r, depth, children_done)) = stack.pop() {
        if done.contains_key(&r.id) {
            continue;
        }
        if depth > limits::MAX_DEPTH {
            return Err(limit(
                root,
                format!("nests deeper than {} levels", limits::MAX_DEPTH),
            ));
        }
        let tree = src.tree(&r)?;
        if !children_done {
            stack.push((r, depth, true));
            for sub in tree.entries.iter().filter_map(|e| subtree(&e.node)) {
                if !done.contains_key(&sub.id) {
                    stack.push((*sub, depth + 1, false));
                }
            }
            continue;
        }
        let mut total = Expansion::default();
        for e in &tree.entries {
            let sub = subtree(&e.node).map(|s| done[&s.id]).unwrap_or_default();
            total.paths = total.paths.saturating_add(1).saturating_add(sub.paths);
            total.bytes = total
                .bytes
                .saturating_add(e.node.size())
                .saturating_add(sub.bytes);
            if subtree(&e.node).is_some() {
                total.height = total.height.max(sub.height + 1);
            }
        }
        if total.paths > limits::MAX_PATHS {
            return Err(limit(
                root,
                format!(
                    "expands to more than {} paths (shared subtrees counted at each use)",
                    limits::MAX_PATHS
                ),
            ));
        }
        done.insert(r.id, total);
    }
    let total = done[&root.id];
    if total.height > limits::MAX_DEPTH {
        return Err(limit(
            root,
            format!("nests deeper than {} levels", limits::MAX_DEPTH),
        ));
    }
    Ok(total)
}
