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

/// `detafs log`: the versions served. Where the history is damaged, those
/// before the damage are listed, then the damage is the command's error
/// (exit 1).
pub fn log(repo: &Repo, name: &str, as_json: bool, path: Option<&str>) -> anyhow::Result<()> {
    repo.check_dataset(name)?;
    let records = repo.sync(name)?;
    list(repo, name, &records, as_json, path)?;
    match repo.damage(name) {
        Some(d) => Err(d.error(name).into()),
        None => Ok(()),
    }
}

fn list(
    repo: &Repo,
    name: &str,
    records: &[Record],
    as_json: bool,
    path: Option<&str>,
) -> anyhow::Result<()> {
    if let Some(path) = path {
        return path_log(repo, name, records, path, as_json);
    }
    let mut rows = repo.log_entries_of(name, records)?;
    rows.reverse();
    if as_json {
        return print_log(&rows, as_json);
    }
    // The gaps expired versions leave, each where it falls, newest first:
    // runs of versions expired together.
    let mut runs: Vec<(u64, u64, detafs::repo::lifecycle::Expiry)> = Vec::new();
    for (v, e) in repo.lifecycle(name)?.expired {
        match runs.last_mut() {
            Some((_, last, was)) if *last + 1 == v && *was == e => *last = v,
            _ => runs.push((v, v, e)),
        }
    }
    let gaps = runs.into_iter().rev().map(|(first, last, e)| {
        let span = match first == last {
            true => format!("v{first}"),
            false => format!("v{first}..v{last}"),
        };
        let text = format!(
            "{span}  expired {} by {}: {}",
            e.time,
            line(e.author.as_bytes()),
            line(e.rule.as_bytes())
        );
        (first, text)
    });
    let mut gaps = gaps.into_iter().peekable();
    for row in rows {
        let v = row["version"].as_u64().unwrap_or(0);
        while let Some((_, text)) = gaps.next_if(|(first, _)| *first > v) {
            println!("{text}");
        }
        print_log(std::slice::from_ref(&row), false)?;
    }
    for (_, text) in gaps {
        println!("{text}");
    }
    Ok(())
}

/// `detafs log`'s rows (`Record::log_entry`, with `tags`), newest first,
/// as text or JSON (docs/cli.md names the fields): from a store, or as a
/// gateway answered them.
pub fn print_log(rows: &[serde_json::Value], as_json: bool) -> anyhow::Result<()> {
    if as_json {
        println!("{}", serde_json::to_string_pretty(rows)?);
        return Ok(());
    }
    for e in rows {
        let figure = |k: &str| e[k].as_u64();
        // Withheld figures (a policy hides paths from the caller) are `?`.
        let shown = |k: &str| figure(k).map_or("?".to_string(), |n| n.to_string());
        // Time-only changes (`T`) are shown only where there are some.
        let touched = match figure("files_touched") {
            Some(0) | None => String::new(),
            Some(n) => format!(" T{n}"),
        };
        let counts = format!(
            "+{} ~{} -{}{touched}  {:>10}",
            shown("files_added"),
            shown("files_changed"),
            shown("files_removed"),
            figure("delta_size").map_or("?".to_string(), human),
        );
        let tags: Vec<String> = e["tags"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect();
        let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        print_line(
            (figure("version").unwrap_or(0), &text("timestamp")),
            (&text("author"), &text("message")),
            &counts,
            &tags,
        );
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
fn print_line(
    (version, time): (u64, &str),
    (author, message): (&str, &str),
    what: &str,
    tags: &[String],
) {
    let named = match tags {
        [] => String::new(),
        t => format!(" ({})", t.join(", ")),
    };
    println!(
        "v{version:<4} {time}  {:<12} {what}  {}{named}",
        line(author.as_bytes()),
        line(message.as_bytes())
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
            let mut change = path_change(repo, parent, r, path.as_bytes(), kind, &before, &now)?;
            // A folder whose tree is named anew with nothing changed in it
            // (through a gateway that hides paths, a folder's name is its
            // version's): changed only if its own mode or time did.
            if let (Some(a @ Node::Dir { .. }), Some(b @ Node::Dir { .. }), Some([0, 0, 0, 0])) =
                (&before, &now, change.inside)
            {
                change.kind = ChangeKind::TimeOnly;
                let same = |n: &Node| match n {
                    Node::Dir { mode, mtime, .. } => (*mode, *mtime),
                    _ => unreachable!("a folder"),
                };
                if same(a) == same(b) {
                    before = now;
                    parent = Some(r);
                    continue;
                }
            }
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
        let withheld = repo.figures_withheld(name);
        let mut rows = Vec::new();
        for (r, c) in changes.iter().rev() {
            let mut row = r.log_entry_seen(withheld);
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
        let named = tags.get(&r.version).map_or(&[][..], Vec::as_slice);
        print_line((r.version, &r.time), (&r.author, &r.message), &what, named);
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

/// An entry as `ls` shows it.
struct Listed {
    name: Vec<u8>,
    /// `-`, `d`, `l`, `p`, `s`, `c` or `b`, as `ls -l` shows it.
    kind: char,
    mode: u32,
    size: u64,
    /// Seconds since the epoch.
    mtime: i64,
    target: Option<Vec<u8>>,
    /// A device's (major, minor).
    rdev: Option<(u32, u32)>,
    /// Its bytes were erased (`detafs erase`).
    erased: bool,
}

impl Listed {
    fn of(node: &Node, name: &[u8]) -> Listed {
        let (kind, mode) = kind_and_mode(node);
        Listed {
            name: name.to_vec(),
            kind,
            mode,
            size: node.size(),
            mtime: node.mtime().0,
            target: match node {
                Node::Symlink { target, .. } => Some(target.clone()),
                _ => None,
            },
            rdev: match node {
                Node::Special { kind, rdev, .. } if kind.has_rdev() => {
                    Some((libc::major(*rdev), libc::minor(*rdev)))
                }
                _ => None,
            },
            erased: node.is_erased(),
        }
    }

    fn when(&self) -> String {
        when(Mtime(self.mtime, 0))
    }
}

fn entry(out: &mut impl Write, e: &Listed) -> std::io::Result<()> {
    write!(
        out,
        "{}{:04o} {:>12} {} {}",
        e.kind,
        e.mode,
        e.size,
        e.when(),
        line(&e.name)
    )?;
    if let Some(target) = &e.target {
        write!(out, " -> {}", line(target))?;
    }
    if let Some((major, minor)) = e.rdev {
        write!(out, " ({major}, {minor})")?;
    }
    if e.erased {
        write!(out, "  (erased)")?;
    }
    writeln!(out)
}

/// One entry of `ls --json`.
fn entry_json(e: &Listed) -> serde_json::Value {
    let kind = match e.kind {
        '-' => "file",
        'd' => "dir",
        'l' => "symlink",
        'p' => "fifo",
        's' => "socket",
        'c' => "char",
        _ => "block",
    };
    let mut row = serde_json::json!({
        "name": line(&e.name),
        "type": kind,
        "mode": format!("{:04o}", e.mode),
        "size": e.size,
        "mtime": e.when(),
    });
    if let Some(target) = &e.target {
        row["target"] = line(target).into();
    }
    if let Some((major, minor)) = e.rdev {
        row["rdev"] = serde_json::json!([major, minor]);
    }
    if e.erased {
        row["erased"] = true.into();
    }
    row
}

/// `ls`'s output of `listed`, as text or JSON.
fn print_ls(listed: &[Listed], as_json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if as_json {
        let rows: Vec<_> = listed.iter().map(entry_json).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    for e in listed {
        entry(&mut out, e)?;
    }
    Ok(())
}

pub fn ls(repo: &Repo, name: &str, version: &str, path: &str, as_json: bool) -> anyhow::Result<()> {
    let record = repo.version(name, version)?;
    let node = repo
        .lookup(&record.tree, &RelPath::parse(path)?)?
        .ok_or_else(|| no_path(record.version, path))?;
    let listed: Vec<Listed> = match &node {
        Node::Dir { tree, .. } => {
            use detafs::snapshot::tree::TreeSource;
            let tree = repo.tree(tree)?;
            tree.entries
                .iter()
                .map(|e| Listed::of(&e.node, &e.name))
                .collect()
        }
        other => vec![Listed::of(other, path.as_bytes())],
    };
    print_ls(&listed, as_json)
}

pub fn cat(repo: &Repo, name: &str, version: &str, path: &str) -> anyhow::Result<()> {
    let record = repo.version(name, version)?;
    let at = || (format!("v{}", record.version), path.to_string());
    match repo
        .lookup(&record.tree, &RelPath::parse(path)?)?
        .map(|n| n.readable(at))
        .transpose()?
    {
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
