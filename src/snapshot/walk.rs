//! What a version expands to, measured without expanding it: trees are
//! shared, so a few small trees can name an astronomical number of paths.
//! Every tree is loaded once and walked without recursion, and a version
//! beyond `limits::MAX_PATHS` or `limits::MAX_DEPTH` is refused before any
//! walk that would visit each path (export, `ls -R` of a whole tree).

use super::tree::Node;
use super::tree::TreeSource;
use crate::error::{Error, Result};
use crate::id::BlobId;
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
    let mut done: HashMap<BlobId, Expansion> = HashMap::new();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Entry, Mtime, Tree};
    use std::sync::Arc;

    /// Trees in memory: tree `k` holds `names` directories, each tree `k-1`.
    struct Chain(Vec<(BlobRef, Arc<Tree>)>, std::sync::atomic::AtomicUsize);

    impl TreeSource for Chain {
        fn tree(&self, r: &BlobRef) -> Result<Arc<Tree>> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(self.0.iter().find(|(b, _)| b.id == r.id).unwrap().1.clone())
        }
    }

    fn chain(levels: usize, names: &[&str]) -> Chain {
        let mut out: Vec<(BlobRef, Arc<Tree>)> = Vec::new();
        let file = Entry {
            name: b"f".to_vec(),
            node: Node::File {
                mode: 0o644,
                mtime: Mtime(0, 0),
                size: 0,
                chunks: vec![],
                atime: None,
                link: None,
                erased: false,
            },
        };
        for k in 0..=levels {
            let mut entries = vec![file.clone()];
            if let Some((below, _)) = out.last() {
                entries.extend(names.iter().map(|n| Entry {
                    name: n.as_bytes().to_vec(),
                    node: Node::Dir {
                        mode: 0o755,
                        mtime: Mtime(0, 0),
                        tree: *below,
                        atime: None,
                        links: false,
                    },
                }));
            }
            let tree = Tree::new(entries);
            let r = BlobRef {
                id: BlobId::of(&tree.encode()),
                pack: crate::id::PackId::of(b"p"),
                offset: 8 + k as u64,
                len: 10,
                size: 9,
            };
            out.push((r, Arc::new(tree)));
        }
        Chain(out, Default::default())
    }

    #[test]
    fn shared_subtrees_are_counted_at_each_use_and_loaded_once() {
        let c = chain(20, &["a", "b"]);
        let root = c.0.last().unwrap().0;
        // Level k holds f plus two copies of level k-1: 2^(k+2) - 3 paths.
        let e = expansion(&c, &root).unwrap();
        assert_eq!(e.paths, (1 << 22) - 3);
        assert_eq!(e.height, 20);
        // Each tree is visited twice (before and after its subtrees), not once per path.
        assert_eq!(c.1.into_inner(), 2 * 21);
        let c = chain(30, &["a", "b"]);
        let err = expansion(&c, &c.0.last().unwrap().0).unwrap_err();
        assert!(
            err.to_string().contains("more than 10000000 paths"),
            "{err}"
        );
    }

    #[test]
    fn depth_is_limited() {
        let c = chain(limits::MAX_DEPTH, &["d"]);
        assert_eq!(
            expansion(&c, &c.0.last().unwrap().0).unwrap().height,
            limits::MAX_DEPTH
        );
        let c = chain(limits::MAX_DEPTH + 1, &["d"]);
        let err = expansion(&c, &c.0.last().unwrap().0).unwrap_err();
        assert!(err.to_string().contains("deeper than 1024"), "{err}");
    }
}
