//! The layering rule of docs/architecture.md, checked from the sources'
//! paths (`use crate::…`, `super::…`, `crate::…` in code, and a parent's
//! paths through its children without `self::`): every module imports
//! only its own layer or those below, and no files import one another in
//! a cycle (a file may use the module it belongs to, whose type it
//! extends, as `repo/tag.rs` does `repo/mod.rs`; but a name that module
//! re-exports is followed to the file it comes from, so a loop through a
//! `mod.rs` re-export is seen). Inside a layer the modules are not
//! ordered: they are peers that call one another's functions (the cycle
//! check keeps any two from depending on each other). Made-up graphs show
//! each check finds what it is for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level modules, bottom layer first. A module may import its own
/// layer and those listed before it.
const LAYERS: &[&[&str]] = &[
    &[
        "error", "escape", "id", "limits", "relpath", "private", "nowait", "hold", "progress",
        "schema", "sys", "procs", "runtime",
    ],
    &["store"],
    &["snapshot"],
    &["cache"],
    &["access"],
    &["repo", "remote"],
    &[
        "commit",
        "staging",
        "read",
        "audit",
        "verify",
        "gc",
        "retention",
        "erase",
        "report",
        "tiering",
    ],
    &["fs"],
    &["fuse", "gateway", "cli"],
];

type Module = Vec<String>;

/// Every source file of the library and the binary, by module path.
fn sources() -> BTreeMap<Module, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<Module, String>, root: &Path) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out, root);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).unwrap().with_extension("");
                let mut m: Module = rel.iter().map(|c| c.to_string_lossy().into()).collect();
                if matches!(m.last().map(String::as_str), Some("mod" | "lib")) {
                    m.pop();
                }
                out.insert(m, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    walk(&root, &mut out, &root);
    out
}

/// The code of a file without comments and unit tests (a test module may
/// reach anywhere it needs).
fn code(text: &str) -> String {
    let mut text: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    while let Some(at) = text.find("#[cfg(test)]") {
        // The item it marks, to its closing brace (or `;`).
        let mut depth = 0;
        let mut end = text.len();
        for (i, c) in text[at..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 1 => {
                    end = at + i + 1;
                    break;
                }
                '}' => depth -= 1,
                ';' if depth == 0 => {
                    end = at + i + 1;
                    break;
                }
                _ => {}
            }
        }
        text.replace_range(at..end, "");
    }
    text
}

/// Expands a use tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(tree: &str, prefix: &[String], out: &mut Vec<Module>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().to_string())
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap()];
        let mut depth = 0;
        let mut start = 0;
        let mut parts = vec![];
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        let prefix: Vec<String> = prefix.iter().cloned().chain(head).collect();
        for p in parts {
            expand(p, &prefix, out);
        }
    } else {
        let path = tree.split(" as ").next().unwrap();
        out.push(
            prefix
                .iter()
                .cloned()
                .chain(path.split("::").map(|s| s.trim().to_string()))
                .collect(),
        );
    }
}

/// The paths a file names: its use trees and the paths in its code.
fn paths(code: &str) -> Vec<Module> {
    let mut out = vec![];
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before_ok = rest[..i]
            .chars()
            .last()
            .is_none_or(|c| !c.is_alphanumeric() && c != '_');
        let after = &rest[i + 4..];
        let end = after.find(';').unwrap_or(after.len());
        let tree = after[..end].trim();
        if before_ok
            && ["crate::", "super::", "self::"]
                .iter()
                .any(|p| tree.starts_with(p))
        {
            expand(tree, &[], &mut out);
        }
        rest = &after[end.min(after.len())..];
    }
    for start in ["crate::", "super::"] {
        for (i, _) in code.match_indices(start) {
            if code[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let path: String = code[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(
                path.split("::")
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
            );
        }
    }
    out
}

/// The file a path names: the longest prefix that is a module of ours,
/// and what the path names after it.
fn resolve(
    files: &BTreeMap<Module, String>,
    me: &Module,
    path: &Module,
) -> Option<(Module, Module)> {
    let mut at: Module = match path.first()?.as_str() {
        "crate" => vec![],
        "self" => me.clone(),
        // The parent of `a/b.rs` and of `a/b/mod.rs` alike is `a`.
        "super" => me[..me.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    let mut rest = path[1..].iter().peekable();
    while rest.peek().is_some_and(|s| *s == "super") {
        at.pop();
        rest.next();
    }
    let full: Module = at.into_iter().chain(rest.cloned()).collect();
    (1..=full.len())
        .rev()
        .find(|n| files.contains_key(&full[..*n]))
        .map(|n| (full[..n].to_vec(), full[n..].to_vec()))
}

/// What each module re-exports (`pub use …`, `pub(super) use …`), by
/// module and the name it is known by there: the module it comes from.
fn reexports(files: &BTreeMap<Module, String>) -> BTreeMap<(Module, String), Module> {
    let mut out = BTreeMap::new();
    for (me, text) in files {
        let code = code(text);
        for (i, _) in code.match_indices("use ") {
            let head = code[..i].trim_end();
            if !(head.ends_with("pub") || head.ends_with(')') && head.contains("pub(")) {
                continue;
            }
            let after = &code[i + 4..];
            let tree = after[..after.find(';').unwrap_or(after.len())].trim();
            let mut paths = vec![];
            expand(tree, &[], &mut paths);
            for mut p in paths {
                if p.first()
                    .is_some_and(|f| !["crate", "super", "self"].contains(&f.as_str()))
                {
                    p.insert(0, "self".into());
                }
                let name = p.last().cloned().unwrap_or_default();
                if let Some((from, _)) = resolve(files, me, &p)
                    && &from != me
                {
                    out.insert((me.clone(), name), from);
                }
            }
        }
    }
    out
}

/// The paths a file names through its own child modules without `self::`
/// (`gate::Judge` in `fs/mod.rs`), as `self::` paths.
fn child_paths(files: &BTreeMap<Module, String>, me: &Module, code: &str) -> Vec<Module> {
    let children: Vec<&String> = files
        .keys()
        .filter(|m| m.len() == me.len() + 1 && m.starts_with(me))
        .map(|m| m.last().unwrap())
        .collect();
    let mut out = vec![];
    for child in children {
        let at = format!("{child}::");
        for (i, _) in code.match_indices(&at) {
            if code[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let path: String = code[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut p: Module = vec!["self".into()];
            p.extend(path.split("::").filter(|s| !s.is_empty()).map(String::from));
            out.push(p);
        }
        // And in use trees: `use gate::{…}`, `pub use gate::X`.
        for (i, _) in code.match_indices("use ") {
            let after = &code[i + 4..];
            let tree = after[..after.find(';').unwrap_or(after.len())].trim();
            if tree.starts_with(&at) {
                expand(tree, &["self".to_string()], &mut out);
            }
        }
    }
    out
}

/// Where a path leads: its file, or, where that file re-exports the name
/// the path goes on with, the file it comes from (followed as far as
/// re-exports go).
fn target(
    files: &BTreeMap<Module, String>,
    again: &BTreeMap<(Module, String), Module>,
    me: &Module,
    path: &Module,
) -> Option<Module> {
    let (mut at, rest) = resolve(files, me, path)?;
    if let Some(name) = rest.first() {
        let mut seen = BTreeSet::new();
        while let Some(from) = again.get(&(at.clone(), name.clone())) {
            if !seen.insert(from.clone()) {
                break;
            }
            at = from.clone();
        }
    }
    Some(at)
}

fn edges() -> BTreeMap<Module, BTreeSet<Module>> {
    edges_of(&sources())
}

/// Each file's arrows to the files it imports from, re-exports followed.
fn edges_of(files: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let files = files.clone();
    let again = reexports(&files);
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (me, text) in &files {
        if me.is_empty() || me == &["main"] {
            continue; // lib.rs declares, main.rs starts: both above every layer
        }
        let code = code(text);
        let targets = out.entry(me.clone()).or_default();
        for p in paths(&code)
            .into_iter()
            .chain(child_paths(&files, me, &code))
        {
            if let Some(t) = target(&files, &again, me, &p)
                && &t != me
                && !t.is_empty()
            {
                targets.insert(t);
            }
        }
    }
    out
}

fn layer(m: &Module) -> usize {
    let top = m.first().map(String::as_str).unwrap_or("");
    LAYERS
        .iter()
        .position(|l| l.contains(&top))
        .unwrap_or_else(|| {
            panic!("module {top} is in no layer of tests/layering.rs (docs/architecture.md)")
        })
}

/// The imports up the layers.
fn upward(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    let mut wrong = vec![];
    for (from, to) in edges {
        for t in to {
            if layer(t) > layer(from) {
                wrong.push(format!("{} -> {}", from.join("/"), t.join("/")));
            }
        }
    }
    wrong
}

#[test]
fn no_module_imports_a_layer_above_its_own() {
    let wrong = upward(&edges());
    assert!(
        wrong.is_empty(),
        "imports up the layers:\n{}",
        wrong.join("\n")
    );
}

/// The files that import one another in a cycle, a line per cycle.
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    // A file's use of a module it is inside (its parent's type) is not an
    // arrow of the graph: the parent's folder is one unit.
    let graph: BTreeMap<Module, Vec<Module>> = edges
        .clone()
        .into_iter()
        .map(|(from, to)| {
            let to = to.into_iter().filter(|t| !from.starts_with(t)).collect();
            (from, to)
        })
        .collect();
    // Tarjan's strongly connected components, without recursion.
    let mut index: BTreeMap<&Module, (usize, usize)> = BTreeMap::new();
    let mut stack: Vec<&Module> = vec![];
    let mut on_stack: BTreeSet<&Module> = BTreeSet::new();
    let mut cycles = vec![];
    let mut next = 0;
    for root in graph.keys() {
        if index.contains_key(root) {
            continue;
        }
        let mut work: Vec<(&Module, usize)> = vec![(root, 0)];
        while let Some((v, i)) = work.pop() {
            if i == 0 {
                index.insert(v, (next, next));
                next += 1;
                stack.push(v);
                on_stack.insert(v);
            }
            let succ = graph.get(v).map(Vec::as_slice).unwrap_or(&[]);
            if let Some(w) = succ.get(i) {
                work.push((v, i + 1));
                if !index.contains_key(w) {
                    work.push((w, 0));
                } else if on_stack.contains(w) {
                    let wi = index[w].0;
                    let e = index.get_mut(v).unwrap();
                    e.1 = e.1.min(wi);
                }
                continue;
            }
            let (vi, vl) = index[v];
            if let Some(&(parent, _)) = work.last() {
                let p = index.get_mut(parent).unwrap();
                p.1 = p.1.min(vl);
            }
            if vi == vl {
                let mut comp = vec![];
                while let Some(w) = stack.pop() {
                    on_stack.remove(w);
                    comp.push(w.join("/"));
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    cycles.push(comp.join(", "));
                }
            }
        }
    }
    cycles
}

#[test]
fn no_files_import_one_another_in_a_cycle() {
    let cycles = cycles(&edges());
    assert!(
        cycles.is_empty(),
        "files importing one another in a cycle:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn only_the_store_module_speaks_to_object_store() {
    let outside: Vec<String> = sources()
        .into_iter()
        .filter(|(m, text)| {
            m.first().is_none_or(|t| t != "store") && code(text).contains("object_store")
        })
        .map(|(m, _)| m.join("/"))
        .collect();
    assert!(
        outside.is_empty(),
        "object_store used outside store/: {outside:?}"
    );
}

#[test]
fn the_check_sees_arrows() {
    // The parser finds what the rule is about: a known downward import and
    // a use tree with nested braces.
    let e = edges();
    let repo = vec!["repo".to_string()];
    assert!(e[&repo].contains(&vec!["store".to_string(), "keys".to_string()]));
    let mut out = vec![];
    expand("crate::{a::{b, c as d}, e}", &[], &mut out);
    assert_eq!(
        out,
        [
            vec!["crate", "a", "b"],
            vec!["crate", "a", "c"],
            vec!["crate", "e"]
        ]
    );
}

/// The gateway's protocols: REST (its router and the modules of its
/// endpoints), S3 and the web page. Each imports the gateway's core
/// (`core.rs`, `edits.rs`, `table.rs`, `sniff.rs`, `logline.rs`, …),
/// never another protocol; `gateway/mod.rs` wires them together.
fn protocol(m: &Module) -> Option<&'static str> {
    if m.first().map(String::as_str) != Some("gateway") {
        return None;
    }
    match m.get(1).map(String::as_str)? {
        "rest" | "trees" | "commits" | "tags" | "lifecycle" | "compare" | "preview" | "audit" => {
            Some("REST")
        }
        "s3" => Some("S3"),
        "web" => Some("the web page"),
        _ => None,
    }
}

/// The imports from one protocol's module into another protocol's.
fn crossings(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    let mut wrong = vec![];
    for (from, to) in edges {
        for t in to {
            if let (Some(a), Some(b)) = (protocol(from), protocol(t))
                && a != b
            {
                wrong.push(format!("{} ({a}) -> {} ({b})", from.join("/"), t.join("/")));
            }
        }
    }
    wrong
}

#[test]
fn the_gateways_protocols_import_its_core_never_each_other() {
    let wrong = crossings(&edges());
    assert!(
        wrong.is_empty(),
        "protocols import one another:\n{}",
        wrong.join("\n")
    );
    // The check itself: a made-up import from S3 into REST, and from the
    // web page into S3, are found; into the core they are not.
    let m = |p: &str| -> Module { p.split('/').map(String::from).collect() };
    let made_up: BTreeMap<Module, BTreeSet<Module>> = [
        (
            m("gateway/s3/writes"),
            [m("gateway/commits"), m("gateway/edits")].into(),
        ),
        (
            m("gateway/web"),
            [m("gateway/s3"), m("gateway/core")].into(),
        ),
    ]
    .into();
    assert_eq!(crossings(&made_up).len(), 2, "{:?}", crossings(&made_up));
}

#[test]
fn the_checks_find_what_they_are_for() {
    let m = |p: &str| -> Module { p.split('/').map(String::from).collect() };
    // A made-up upward import: the store importing the mount.
    let made_up: BTreeMap<Module, BTreeSet<Module>> =
        [(m("store/keys"), [m("fs/gate"), m("error")].into())].into();
    assert_eq!(upward(&made_up), ["store/keys -> fs/gate"]);
    // A loop through a `mod.rs` re-export: `x/control` takes `J` from `x`,
    // which re-exports it from `x/gate`, which uses `x/control` by its name
    // (no `self::`, no `super::` in `x/mod.rs`'s way of saying it).
    let files: BTreeMap<Module, String> = [
        (
            m("x"),
            "mod control;\nmod gate;\npub use gate::J;\n".to_string(),
        ),
        (
            m("x/gate"),
            "use super::control;\npub struct J;\nfn f() { control::g() }\n".to_string(),
        ),
        (m("x/control"), "use super::J;\npub fn g() {}\n".to_string()),
    ]
    .into();
    let e = edges_of(&files);
    assert!(e[&m("x/control")].contains(&m("x/gate")), "{e:?}");
    assert_eq!(cycles(&e), ["x/control, x/gate"]);
    // Without the loop, none is found.
    let mut files = files;
    files.insert(m("x/gate"), "pub struct J;\n".to_string());
    assert!(cycles(&edges_of(&files)).is_empty());
}
