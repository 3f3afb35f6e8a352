//! Read-only commands: log, ls, cat (diff is `diff.rs`).

use detafs::escape::line;
use detafs::relpath::RelPath;
use detafs::repo::Repo;
use detafs::snapshot::diff::ChangeKind;
use detafs::snapshot::{Likeness, Mtime, Node, Record, Special};
use detafs::{Error, read};
use std::collections::HashMap;
use std::io::Write;

fn when(m: Mtime) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(m.0.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

fn human(bytes: u64) -> String {
    bytesize::ByteSize(bytes).display().iec().to_string()
}

pub fn log(repo: &Repo, name: &str, as_json: bool, path: Option<&str>) -> anyhow::Result<()> {
    repo.check_dataset(name)?;
    let records = repo.sync(name)?;
    if let Some(path) = path {
        return path_log(repo, name, &records, path, as_json);
    }
    // Newest first, as text and as JSON (docs/cli.md names the fields).
    if as_json {
        let mut rows = repo.log_entries_of(name, &records)?;
        rows.reverse();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let tags = tags_by_version(repo, name)?;
    for r in records.iter().rev() {
        // Time-only changes (`T`) are shown only where there are some.
        let touched = match r.stats.files_touched {
            0 => String::new(),
            n => format!(" T{n}"),
        };
        let counts = format!(
            "+{} ~{} -{}{touched}  {:>10}",
            r.stats.files_added,
            r.stats.files_changed,
            r.stats.files_removed,
            human(r.stats.bytes_added),
        );
        print_line(r, &counts, &tags);
    }
    Ok(())
}

fn tags_by_version(repo: &Repo, name: &str) -> anyhow::Result<HashMap<u64, Vec<String>>> {
    let mut tags: HashMap<u64, Vec<String>> = HashMap::new();
    for t in repo.tags(name)? {
        tags.entry(t.version).or_default().push(t.tag);
    }
    Ok(tags)
}

/// One line of `log`: version, time, author, `what`, message, tags.
fn print_line(r: &Record, what: &str, tags: &HashMap<u64, Vec<String>>) {
    let named = match tags.get(&r.version) {
        Some(t) => format!(" ({})", t.join(", ")),
        None => String::new(),
    };
    println!(
        "v{:<4} {}  {:<12} {what}  {}{named}",
        r.version,
        r.time,
        line(r.author.as_bytes()),
        line(r.message.as_bytes())
    );
}

/// What one version did to the path `log -- PATH` follows.
struct PathChange {
    kind: ChangeKind,
    old: Option<Node>,
    new: Option<Node>,
    /// For a folder: files added, changed, removed, time-only inside it.
    inside: Option<[u64; 4]>,
    renamed_from: Option<Vec<u8>>,
    renamed_to: Option<Vec<u8>>,
}

/// `log NAME -- PATH`: each version that changed what PATH names, with
/// what happened to it there.
fn path_log(
    repo: &Repo,
    name: &str,
    records: &[Record],
    path: &str,
    as_json: bool,
) -> anyhow::Result<()> {
    let rel = RelPath::parse(path)?;
    let mut changes: Vec<(&Record, PathChange)> = Vec::new();
    let mut before: Option<Node> = None;
    let mut parent: Option<&Record> = None;
    let mut ever = false;
    for r in records {
        let now = repo.lookup(&r.tree, &rel)?;
        ever |= now.is_some();
        let kind = match (&before, &now) {
            (None, None) => None,
            (None, Some(_)) => Some(ChangeKind::Added),
            (Some(_), None) => Some(ChangeKind::Removed),
            (Some(a), Some(b)) => match a.likeness(b) {
                Likeness::Same => None,
                Likeness::TimeOnly => Some(ChangeKind::TimeOnly),
                Likeness::Different => Some(ChangeKind::Modified),
            },
        };
        if let Some(kind) = kind {
            let change = path_change(repo, parent, r, path.as_bytes(), kind, &before, &now)?;
            changes.push((r, change));
        }
        before = now;
        parent = Some(r);
    }
    if !ever {
        return Err(Error::InvalidInput(format!(
            "{path} is in no version of {name} (`detafs ls {name} VERSION` lists what a version holds)"
        ))
        .into());
    }
    let tags = tags_by_version(repo, name)?;
    if as_json {
        let mut rows = Vec::new();
        for (r, c) in changes.iter().rev() {
            let mut row = r.log_entry();
            row["tags"] = serde_json::json!(tags.get(&r.version).cloned().unwrap_or_default());
            row["path"] = serde_json::json!({
                "change": c.kind.letter().to_string(),
                "old_size": c.old.as_ref().filter(|n| !n.is_dir()).map(Node::size),
                "new_size": c.new.as_ref().filter(|n| !n.is_dir()).map(Node::size),
                "inside": c.inside.map(|[a, m, d, t]| serde_json::json!({
                    "files_added": a, "files_changed": m, "files_removed": d, "files_touched": t,
                })),
                "renamed_from": c.renamed_from.as_deref().map(line),
                "renamed_to": c.renamed_to.as_deref().map(line),
            });
            rows.push(row);
        }
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    for (r, c) in changes.iter().rev() {
        let size = |n: &Option<Node>| match n {
            Some(n) => human(n.size()),
            None => "-".to_string(),
        };
        let mut what = match c.inside {
            Some([a, m, d, t]) => {
                let t = if t > 0 {
                    format!(" T{t}")
                } else {
                    String::new()
                };
                format!("{} folder +{a} ~{m} -{d}{t}", c.kind.letter())
            }
            None => format!("{} {} -> {}", c.kind.letter(), size(&c.old), size(&c.new)),
        };
        if let Some(from) = &c.renamed_from {
            what.push_str(&format!(" (renamed from {})", line(from)));
        }
        if let Some(to) = &c.renamed_to {
            what.push_str(&format!(" (renamed to {})", line(to)));
        }
        print_line(r, &what, &tags);
    }
    Ok(())
}

/// The details of `kind` at `path` in version `r` (after `parent`): a
/// folder's changes inside it, and where an added or removed file's bytes
/// went or came from in the same version (a rename).
fn path_change(
    repo: &Repo,
    parent: Option<&Record>,
    r: &Record,
    path: &[u8],
    kind: ChangeKind,
    old: &Option<Node>,
    new: &Option<Node>,
) -> anyhow::Result<PathChange> {
    let subtree = |n: &Option<Node>| match n {
        Some(Node::Dir { tree, .. }) => Some(*tree),
        _ => None,
    };
    let inside = match (subtree(old), subtree(new)) {
        (None, None) => None,
        (a, b) => {
            let mut counts = [0u64; 4];
            detafs::snapshot::diff::diff_each(repo, a.as_ref(), b.as_ref(), &mut |c| {
                counts[match c.kind {
                    ChangeKind::Added => 0,
                    ChangeKind::Modified => 1,
                    ChangeKind::Removed => 2,
                    ChangeKind::TimeOnly => 3,
                }] += 1
            })?;
            Some(counts)
        }
    };
    let mut change = PathChange {
        kind,
        old: old.clone(),
        new: new.clone(),
        inside,
        renamed_from: None,
        renamed_to: None,
    };
    // A file added or removed: the same bytes removed or added elsewhere
    // in the same version is a rename.
    let moved = match (kind, old, new) {
        (ChangeKind::Added, _, Some(n @ Node::File { .. })) => Some((n, ChangeKind::Removed)),
        (ChangeKind::Removed, Some(o @ Node::File { .. }), _) => Some((o, ChangeKind::Added)),
        _ => None,
    }
    // Empty files all have the same (no) bytes: none is a rename.
    .filter(|(file, _)| file.size() > 0);
    if let Some((file, other_side)) = moved {
        let mut found = None;
        let before = parent.map(|p| p.tree);
        detafs::snapshot::diff::diff_each(repo, before.as_ref(), Some(&r.tree), &mut |c| {
            let other = match other_side {
                ChangeKind::Removed => c.old.as_ref(),
                _ => c.new.as_ref(),
            };
            if found.is_none()
                && c.kind == other_side
                && c.path != path
                && other.is_some_and(|o| o.same_data(file))
            {
                found = Some(c.path.clone());
            }
        })?;
        match other_side {
            ChangeKind::Removed => change.renamed_from = found,
            _ => change.renamed_to = found,
        }
    }
    Ok(change)
}

/// `dataset list`: names, or with `json` what each holds.
pub fn datasets(repo: &Repo, as_json: bool) -> anyhow::Result<()> {
    let names = repo.datasets()?;
    if !as_json {
        for name in names {
            println!("{name}");
        }
        return Ok(());
    }
    let mut rows = Vec::new();
    for name in names {
        let records = repo.sync(&name)?;
        let latest = records.last();
        rows.push(serde_json::json!({
            "name": name,
            "versions": records.len(),
            "latest": latest.map(|r| format!("v{}", r.version)),
            "latest_timestamp": latest.map(|r| r.time.clone()),
            "tags": repo.tags(&name)?.len(),
            "stored_bytes": records.iter().map(|r| r.stats.bytes_added).sum::<u64>(),
        }));
    }
    println!("{}", serde_json::to_string_pretty(&rows)?);
    Ok(())
}

fn no_path(version: u64, path: &str) -> Error {
    Error::NoPath {
        version: format!("v{version}"),
        path: path.to_string(),
    }
}

/// The letter `ls -l` gives an entry, and its mode bits.
fn kind_and_mode(node: &Node) -> (char, u32) {
    match node {
        Node::File { mode, .. } => ('-', *mode),
        Node::Dir { mode, .. } => ('d', *mode),
        Node::Symlink { .. } => ('l', 0o777),
        Node::Special { kind, mode, .. } => (
            match kind {
                Special::Fifo => 'p',
                Special::Socket => 's',
                Special::Char => 'c',
                Special::Block => 'b',
            },
            *mode,
        ),
    }
}

fn entry(out: &mut impl Write, node: &Node, name: &[u8]) -> std::io::Result<()> {
    let (kind, mode) = kind_and_mode(node);
    write!(
        out,
        "{kind}{:04o} {:>12} {} ",
        mode,
        node.size(),
        when(node.mtime())
    )?;
    write!(out, "{}", line(name))?;
    match node {
        Node::Symlink { target, .. } => write!(out, " -> {}", line(target))?,
        Node::Special { kind, rdev, .. } if kind.has_rdev() => {
            write!(out, " ({}, {})", libc::major(*rdev), libc::minor(*rdev))?
        }
        _ => {}
    }
    writeln!(out)
}

/// One entry of `ls --json`.
fn entry_json(node: &Node, name: &[u8]) -> serde_json::Value {
    let (kind, mode) = kind_and_mode(node);
    let kind = match kind {
        '-' => "file",
        'd' => "dir",
        'l' => "symlink",
        'p' => "fifo",
        's' => "socket",
        'c' => "char",
        _ => "block",
    };
    let mut row = serde_json::json!({
        "name": line(name),
        "type": kind,
        "mode": format!("{mode:04o}"),
        "size": node.size(),
        "mtime": when(node.mtime()),
    });
    match node {
        Node::Symlink { target, .. } => row["target"] = line(target).into(),
        Node::Special { kind, rdev, .. } if kind.has_rdev() => {
            row["rdev"] = serde_json::json!([libc::major(*rdev), libc::minor(*rdev)])
        }
        _ => {}
    }
    row
}

pub fn ls(repo: &Repo, name: &str, version: &str, path: &str, as_json: bool) -> anyhow::Result<()> {
    let record = repo.version(name, version)?;
    let node = repo
        .lookup(&record.tree, &RelPath::parse(path)?)?
        .ok_or_else(|| no_path(record.version, path))?;
    let listed: Vec<(Node, Vec<u8>)> = match &node {
        Node::Dir { tree, .. } => {
            use detafs::snapshot::tree::TreeSource;
            let tree = repo.tree(tree)?;
            tree.entries
                .iter()
                .map(|e| (e.node.clone(), e.name.clone()))
                .collect()
        }
        other => vec![(other.clone(), path.as_bytes().to_vec())],
    };
    let mut out = std::io::stdout().lock();
    if as_json {
        let rows: Vec<_> = listed.iter().map(|(n, name)| entry_json(n, name)).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    for (n, name) in &listed {
        entry(&mut out, n, name)?;
    }
    Ok(())
}

pub fn cat(repo: &Repo, name: &str, version: &str, path: &str) -> anyhow::Result<()> {
    let record = repo.version(name, version)?;
    match repo.lookup(&record.tree, &RelPath::parse(path)?)? {
        Some(Node::File { chunks, .. }) => {
            let mut out = std::io::stdout().lock();
            match read::read_file(repo, &chunks, &mut out) {
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("cannot read {path} of {name} v{}", record.version)));
                }
                Ok(()) => {}
            }
            Ok(())
        }
        Some(_) => Err(Error::InvalidInput(format!("{path} is not a regular file")).into()),
        None => Err(no_path(record.version, path).into()),
    }
}
