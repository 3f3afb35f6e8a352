//! Comparing trees: a two-way diff (for `log`, `diff` and commit stats) and a
//! three-way merge (to rebase a commit that lost the race for its number).

use super::tree::{Entry, Likeness, Node, Tree};
use super::tree::{TreeSink, TreeSource};
use super::walk;
use crate::error::{Error, Result};
use crate::limits;
use crate::store::pack::BlobRef;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Removed,
    Modified,
    /// The same content and mode, other times (a file regenerated with
    /// the same bytes).
    TimeOnly,
}

impl ChangeKind {
    /// As status, diff and the log print it.
    pub fn letter(self) -> char {
        match self {
            ChangeKind::Added => 'A',
            ChangeKind::Modified => 'M',
            ChangeKind::Removed => 'D',
            ChangeKind::TimeOnly => 'T',
        }
    }
}

/// A file or symlink that differs. Directories are expanded into their contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub kind: ChangeKind,
    pub old: Option<Node>,
    pub new: Option<Node>,
}

/// Changes that turn tree `a` (or nothing) into tree `b`, in path order.
/// Refuses a walk of more than `limits::MAX_PATHS` entries or deeper than
/// `limits::MAX_DEPTH`, so shared subtrees cannot make a diff or a merge
/// run for ever or overflow the stack.
pub fn diff(src: &dyn TreeSource, a: Option<&BlobRef>, b: Option<&BlobRef>) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    diff_each(src, a, b, &mut |c| out.push(c))?;
    Ok(out)
}

/// Like `diff`, handing each change to `each` as it is found: a caller
/// that only counts holds none of them.
pub fn diff_each(
    src: &dyn TreeSource,
    a: Option<&BlobRef>,
    b: Option<&BlobRef>,
    each: &mut dyn FnMut(Change),
) -> Result<()> {
    let mut budget = Budget::default();
    diff_dirs(src, a, b, &[], each, &mut budget, false)
}

/// What a walk may still visit.
#[derive(Default)]
struct Budget {
    paths: u64,
}

impl Budget {
    /// Counts `entries` more paths at `depth`.
    fn spend(&mut self, entries: u64, depth: usize) -> Result<()> {
        self.paths = self.paths.saturating_add(entries);
        if depth > limits::MAX_DEPTH {
            return Err(Error::malformed(
                "version",
                format!("trees nest deeper than {} levels", limits::MAX_DEPTH),
            ));
        }
        if self.paths > limits::MAX_PATHS {
            return Err(Error::malformed(
                "version",
                format!(
                    "a comparison would visit more than {} paths",
                    limits::MAX_PATHS
                ),
            ));
        }
        Ok(())
    }
}

fn depth_of(prefix: &[u8]) -> usize {
    if prefix.is_empty() {
        0
    } else {
        1 + prefix.iter().filter(|&&b| b == b'/').count()
    }
}

fn load(src: &dyn TreeSource, r: Option<&BlobRef>) -> Result<Arc<Tree>> {
    match r {
        Some(r) => src.tree(r),
        None => Ok(Arc::new(Tree::default())),
    }
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        return name.to_vec();
    }
    let mut p = prefix.to_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

fn diff_dirs(
    src: &dyn TreeSource,
    a: Option<&BlobRef>,
    b: Option<&BlobRef>,
    prefix: &[u8],
    out: &mut dyn FnMut(Change),
    budget: &mut Budget,
    counted: bool,
) -> Result<()> {
    if let (Some(x), Some(y)) = (a, b)
        && x.id == y.id
    {
        return Ok(());
    }
    // A subtree only one side has is walked whole: measure it first
    // (cheaply, each shared tree once) instead of finding out path by path.
    let one_sided = match (a, b) {
        (Some(t), None) | (None, Some(t)) if !counted => Some(walk::expansion(src, t)?),
        _ => None,
    };
    let (ta, tb) = (load(src, a)?, load(src, b)?);
    let depth = depth_of(prefix);
    match one_sided {
        Some(e) => budget.spend(e.paths, depth + e.height)?,
        None if !counted => budget.spend((ta.entries.len() + tb.entries.len()) as u64, depth)?,
        None => {}
    }
    let counted = counted || one_sided.is_some();
    for (name, old, new) in union(&ta.entries, &tb.entries) {
        let path = join(prefix, name);
        let subtree = |n: Option<&Node>| match n {
            Some(Node::Dir { tree, .. }) => Some(*tree),
            _ => None,
        };
        // Directories on either side are walked; what is not a directory is compared.
        let (dir_old, dir_new) = (subtree(old), subtree(new));
        if dir_old.is_some() || dir_new.is_some() {
            diff_dirs(
                src,
                dir_old.as_ref(),
                dir_new.as_ref(),
                &path,
                out,
                budget,
                counted,
            )?;
        }
        let leaf = |n: Option<&Node>| n.filter(|n| !n.is_dir()).cloned();
        let (old, new) = (leaf(old), leaf(new));
        let kind = match (&old, &new) {
            (None, None) => continue,
            (None, Some(_)) => ChangeKind::Added,
            (Some(_), None) => ChangeKind::Removed,
            (Some(o), Some(n)) => match o.likeness(n) {
                Likeness::Same => continue,
                Likeness::TimeOnly => ChangeKind::TimeOnly,
                Likeness::Different => ChangeKind::Modified,
            },
        };
        out(Change {
            path,
            kind,
            old,
            new,
        });
    }
    Ok(())
}

/// `ours` with every entry that differs from `base` only in its times
/// (files, links, folders whose contents are otherwise the same) as `base`
/// has it: what `--content-only` commits.
pub fn keep_times(
    src: &dyn TreeSource,
    sink: &mut dyn TreeSink,
    base: &BlobRef,
    ours: &BlobRef,
) -> Result<BlobRef> {
    let mut budget = Budget::default();
    keep_times_in(src, sink, base, ours, 0, &mut budget)
}

fn keep_times_in(
    src: &dyn TreeSource,
    sink: &mut dyn TreeSink,
    base: &BlobRef,
    ours: &BlobRef,
    depth: usize,
    budget: &mut Budget,
) -> Result<BlobRef> {
    if base.id == ours.id {
        return Ok(*ours);
    }
    let (tb, to) = (src.tree(base)?, src.tree(ours)?);
    budget.spend(to.entries.len() as u64, depth)?;
    let mut entries = Vec::with_capacity(to.entries.len());
    let mut changed = false;
    for e in &to.entries {
        let old = tb.get(&e.name);
        let node = match (old, &e.node) {
            (
                Some(Node::Dir { tree: was, .. }),
                Node::Dir {
                    tree,
                    mode,
                    mtime,
                    atime,
                    links,
                },
            ) => {
                let inner = keep_times_in(src, sink, was, tree, depth + 1, budget)?;
                let node = Node::Dir {
                    mode: *mode,
                    mtime: *mtime,
                    tree: inner,
                    atime: *atime,
                    links: *links,
                };
                match old.map(|o| o.likeness(&node)) {
                    Some(Likeness::TimeOnly) => old.cloned().expect("compared"),
                    _ => node,
                }
            }
            (Some(o), n) if o.likeness(n) == Likeness::TimeOnly && o.link() == n.link() => {
                o.clone()
            }
            (_, n) => n.clone(),
        };
        changed |= node != e.node;
        entries.push(Entry {
            name: e.name.clone(),
            node,
        });
    }
    match changed {
        true => sink.put_tree(&Tree::new(entries)),
        false => Ok(*ours),
    }
}

/// Entries of two sorted lists side by side, by name.
fn union<'a>(
    a: &'a [Entry],
    b: &'a [Entry],
) -> impl Iterator<Item = (&'a [u8], Option<&'a Node>, Option<&'a Node>)> {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || {
        let next = match (a.get(i), b.get(j)) {
            (None, None) => return None,
            (Some(x), None) => (x, true, false),
            (None, Some(y)) => (y, false, true),
            (Some(x), Some(y)) => match x.name.cmp(&y.name) {
                std::cmp::Ordering::Less => (x, true, false),
                std::cmp::Ordering::Greater => (y, false, true),
                std::cmp::Ordering::Equal => (x, true, true),
            },
        };
        let (e, in_a, in_b) = next;
        let item = (
            e.name.as_slice(),
            in_a.then(|| &a[i].node),
            in_b.then(|| &b[j].node),
        );
        i += in_a as usize;
        j += in_b as usize;
        Some(item)
    })
}

fn same(a: Option<&Node>, b: Option<&Node>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => x.same(y),
        _ => false,
    }
}

/// `same`, and in the same link group with as many names.
fn same_linked(a: Option<&Node>, b: Option<&Node>) -> bool {
    same(a, b) && a.and_then(Node::link) == b.and_then(Node::link)
}

/// Three-way merge: applies the changes `base → ours` onto `theirs`. Returns the
/// merged root, or the paths both sides changed differently.
pub fn merge(
    src: &dyn TreeSource,
    sink: &mut dyn TreeSink,
    base: Option<&BlobRef>,
    ours: &BlobRef,
    theirs: &BlobRef,
) -> Result<Result<BlobRef, Vec<Vec<u8>>>> {
    let mut m = Merger {
        src,
        sink,
        conflicts: Vec::new(),
        budget: Budget::default(),
    };
    let tree = m.merge_dirs(base, ours, theirs, &[])?;
    if !m.conflicts.is_empty() {
        return Ok(Err(m.conflicts));
    }
    Ok(Ok(m.sink.put_tree(&tree)?))
}

struct Merger<'a> {
    src: &'a dyn TreeSource,
    sink: &'a mut dyn TreeSink,
    conflicts: Vec<Vec<u8>>,
    budget: Budget,
}

impl Merger<'_> {
    fn merge_dirs(
        &mut self,
        base: Option<&BlobRef>,
        ours: &BlobRef,
        theirs: &BlobRef,
        prefix: &[u8],
    ) -> Result<Tree> {
        let src = self.src;
        let (tb, to, tt) = (load(src, base)?, src.tree(ours)?, src.tree(theirs)?);
        self.budget.spend(
            (tb.entries.len() + to.entries.len() + tt.entries.len()) as u64,
            depth_of(prefix),
        )?;
        let mut names: Vec<&[u8]> = tb
            .entries
            .iter()
            .chain(&to.entries)
            .chain(&tt.entries)
            .map(|e| e.name.as_slice())
            .collect();
        names.sort();
        names.dedup();
        let mut entries = Vec::new();
        for name in names {
            let (b, o, t) = (tb.get(name), to.get(name), tt.get(name));
            // A name of a file with several, changed on both sides (its
            // content or its names): merging could leave its names naming
            // different content.
            let linked = [b, o, t].into_iter().flatten().any(|n| n.link().is_some());
            let picked = if linked && !same_linked(o, b) && !same_linked(t, b) && !same_linked(o, t)
            {
                self.conflicts.push(join(prefix, name));
                o.cloned()
            } else if same(o, b) {
                t.cloned()
            } else if same(t, b) || same(o, t) {
                o.cloned()
            } else if let (
                Some(Node::Dir {
                    mode,
                    mtime,
                    tree: o_tree,
                    atime,
                    ..
                }),
                Some(Node::Dir { tree: t_tree, .. }),
            ) = (o, t)
            {
                let b_tree = match b {
                    Some(Node::Dir { tree, .. }) => Some(tree),
                    _ => None,
                };
                let path = join(prefix, name);
                let merged = self.merge_dirs(b_tree, o_tree, t_tree, &path)?;
                Some(Node::Dir {
                    mode: *mode,
                    mtime: *mtime,
                    tree: self.sink.put_tree(&merged)?,
                    atime: *atime,
                    links: merged.has_links(),
                })
            } else {
                self.conflicts.push(join(prefix, name));
                o.cloned()
            };
            if let Some(node) = picked {
                entries.push(Entry {
                    name: name.to_vec(),
                    node,
                });
            }
        }
        Ok(Tree::new(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::BlobId;
    use crate::snapshot::Mtime;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, HashMap};

    /// Trees in memory, keyed by id.
    #[derive(Default)]
    struct Mem(HashMap<BlobId, Arc<Tree>>);

    impl TreeSource for Mem {
        fn tree(&self, r: &BlobRef) -> Result<Arc<Tree>> {
            Ok(self.0[&r.id].clone())
        }
    }

    impl TreeSink for Mem {
        fn put_tree(&mut self, tree: &Tree) -> Result<BlobRef> {
            let id = BlobId::of(&tree.encode());
            self.0.insert(id, Arc::new(tree.clone()));
            Ok(BlobRef {
                id,
                pack: crate::id::PackId::from_bytes(*id.as_bytes()),
                offset: 8,
                len: 1,
                size: 0,
            })
        }
    }

    fn file(content: &str) -> Node {
        Node::File {
            mode: 0o644,
            mtime: Mtime(1, 0),
            size: content.len() as u64,
            chunks: vec![BlobRef {
                id: BlobId::of(content.as_bytes()),
                pack: crate::id::PackId::from_bytes([0; 32]),
                offset: 8,
                len: u32::try_from(content.len() + 1).unwrap(),
                size: u32::try_from(content.len()).unwrap(),
            }],
            atime: None,
            link: None,
            erased: false,
        }
    }

    /// Builds nested trees from `path -> content` (paths with '/').
    fn build(mem: &mut Mem, files: &BTreeMap<String, String>) -> BlobRef {
        let mut here: BTreeMap<String, Node> = BTreeMap::new();
        let mut subdirs: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (path, content) in files {
            match path.split_once('/') {
                Some((dir, rest)) => {
                    subdirs
                        .entry(dir.to_string())
                        .or_default()
                        .insert(rest.to_string(), content.clone());
                }
                None => {
                    here.insert(path.clone(), file(content));
                }
            }
        }
        for (dir, sub) in subdirs {
            let tree = build(mem, &sub);
            here.insert(
                dir,
                Node::Dir {
                    mode: 0o755,
                    mtime: Mtime(2, 0),
                    tree,
                    atime: None,
                    links: false,
                },
            );
        }
        let entries = here
            .into_iter()
            .map(|(name, node)| Entry {
                name: name.into_bytes(),
                node,
            })
            .collect();
        mem.put_tree(&Tree::new(entries)).unwrap()
    }

    /// Flattens a tree back to `path -> content id`.
    fn flatten(mem: &Mem, r: &BlobRef) -> BTreeMap<String, BlobId> {
        diff(mem, None, Some(r))
            .unwrap()
            .into_iter()
            .map(|c| {
                let Some(Node::File { chunks, .. }) = c.new else {
                    panic!("not a file")
                };
                (String::from_utf8(c.path).unwrap(), chunks[0].id)
            })
            .collect()
    }

    fn map(items: &[(&str, &str)]) -> BTreeMap<String, String> {
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn diff_reports_files_in_subdirectories() {
        let mut mem = Mem::default();
        let a = build(&mut mem, &map(&[("x", "1"), ("d/y", "2"), ("d/z", "3")]));
        let b = build(
            &mut mem,
            &map(&[("x", "1"), ("d/y", "changed"), ("e/w", "4")]),
        );
        let got: Vec<(String, ChangeKind)> = diff(&mem, Some(&a), Some(&b))
            .unwrap()
            .into_iter()
            .map(|c| (String::from_utf8(c.path).unwrap(), c.kind))
            .collect();
        assert_eq!(
            got,
            vec![
                ("d/y".into(), ChangeKind::Modified),
                ("d/z".into(), ChangeKind::Removed),
                ("e/w".into(), ChangeKind::Added),
            ]
        );
        assert!(diff(&mem, Some(&a), Some(&a)).unwrap().is_empty());
    }

    #[test]
    fn merge_of_disjoint_changes_keeps_both_and_overlap_conflicts() {
        let mut mem = Mem::default();
        let base = build(&mut mem, &map(&[("a", "1"), ("d/b", "2"), ("d/c", "3")]));
        let ours = build(
            &mut mem,
            &map(&[("a", "1"), ("d/b", "ours"), ("d/c", "3"), ("n", "new")]),
        );
        let theirs = build(&mut mem, &map(&[("d/b", "2"), ("d/c", "theirs")]));
        let merged = merge(&mem.clone_mem(), &mut mem, Some(&base), &ours, &theirs)
            .unwrap()
            .unwrap_or_else(|c| panic!("conflict {c:?}"));
        let expected = build(
            &mut mem,
            &map(&[("d/b", "ours"), ("d/c", "theirs"), ("n", "new")]),
        );
        assert_eq!(flatten(&mem, &merged), flatten(&mem, &expected));

        let clash = build(
            &mut mem,
            &map(&[("a", "1"), ("d/b", "clash"), ("d/c", "3")]),
        );
        let res = merge(&mem.clone_mem(), &mut mem, Some(&base), &ours, &clash).unwrap();
        assert_eq!(res, Err(vec![b"d/b".to_vec()]));
    }

    /// A root tree of files, each `(name, content, names in its link group)`.
    fn linked(mem: &mut Mem, files: &[(&str, &str, u32)]) -> BlobRef {
        let entries = files
            .iter()
            .map(|(name, content, names)| Entry {
                name: name.as_bytes().to_vec(),
                node: file(content).with_link((*names > 1).then_some(crate::snapshot::Link {
                    group: 7,
                    names: *names,
                })),
            })
            .collect();
        mem.put_tree(&Tree::new(entries)).unwrap()
    }

    #[test]
    fn a_file_with_several_names_changed_on_both_sides_conflicts() {
        let mut mem = Mem::default();
        let base = linked(&mut mem, &[("a", "x", 2), ("b", "x", 2), ("z", "z", 1)]);
        // Ours writes the file (both names change); theirs gives it a third
        // name: merged, the names would name different content.
        let ours = linked(&mut mem, &[("a", "y", 2), ("b", "y", 2), ("z", "z", 1)]);
        let theirs = linked(
            &mut mem,
            &[("a", "x", 3), ("b", "x", 3), ("c", "x", 3), ("z", "z", 1)],
        );
        let res = merge(&mem.clone_mem(), &mut mem, Some(&base), &ours, &theirs).unwrap();
        assert_eq!(res, Err(vec![b"a".to_vec(), b"b".to_vec()]));
        // A change elsewhere merges as usual.
        let other = linked(&mut mem, &[("a", "x", 2), ("b", "x", 2), ("z", "new", 1)]);
        let merged = merge(&mem.clone_mem(), &mut mem, Some(&base), &ours, &other)
            .unwrap()
            .unwrap_or_else(|c| panic!("conflict {c:?}"));
        let expected = linked(&mut mem, &[("a", "y", 2), ("b", "y", 2), ("z", "new", 1)]);
        assert_eq!(flatten(&mem, &merged), flatten(&mem, &expected));
    }

    impl Mem {
        fn clone_mem(&self) -> Mem {
            Mem(self.0.clone())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Merging disjoint edits equals applying both edits to the base.
        #[test]
        fn merge_equals_applying_both_edit_sets(
            base in prop::collection::btree_map("[a-c](/[a-c]){0,2}", "[0-9]", 0..10),
            ours_edits in prop::collection::btree_map("[a-c](/[a-c]){0,2}", prop::option::of("[0-9]"), 0..5),
            theirs_edits in prop::collection::btree_map("[d-f](/[a-c]){0,2}", prop::option::of("[0-9]"), 0..5),
        ) {
            // A path can't be both a file and a directory.
            let all: Vec<&String> = base.keys().chain(ours_edits.keys()).chain(theirs_edits.keys()).collect();
            prop_assume!(!all.iter().any(|a| all.iter().any(|b| b.starts_with(&format!("{a}/")))));
            let apply = |m: &BTreeMap<String, String>, edits: &BTreeMap<String, Option<String>>| {
                let mut m = m.clone();
                for (k, v) in edits {
                    match v { Some(v) => { m.insert(k.clone(), v.clone()); } None => { m.remove(k); } }
                }
                m
            };
            let mut mem = Mem::default();
            let b = build(&mut mem, &base);
            let o = build(&mut mem, &apply(&base, &ours_edits));
            let t = build(&mut mem, &apply(&base, &theirs_edits));
            let both = build(&mut mem, &apply(&apply(&base, &ours_edits), &theirs_edits));
            let merged = merge(&mem.clone_mem(), &mut mem, Some(&b), &o, &t).unwrap().unwrap();
            prop_assert_eq!(flatten(&mem, &merged), flatten(&mem, &both));
        }
    }
}
