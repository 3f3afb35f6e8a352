//! Read-only commands: log, ls, cat (diff is `diff.rs`).

use detafs::escape::line;
use detafs::relpath::RelPath;
use detafs::repo::Repo;
use detafs::snapshot::{Mtime, Node, Special};
use detafs::{Error, read};
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
    let mut records = repo.sync(name)?;
    if let Some(path) = path {
        records = changed_at(repo, records, path)?;
    }
    // Newest first, as text and as JSON (docs/cli.md names the fields).
    if as_json {
        let mut rows = repo.log_entries_of(name, &records)?;
        rows.reverse();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let mut tags: std::collections::HashMap<u64, Vec<String>> = Default::default();
    for t in repo.tags(name)? {
        tags.entry(t.version).or_default().push(t.tag);
    }
    for r in records.iter().rev() {
        let named = match tags.get(&r.version) {
            Some(t) => format!(" ({})", t.join(", ")),
            None => String::new(),
        };
        // Time-only changes (`T`) are shown only where there are some.
        let touched = match r.stats.files_touched {
            0 => String::new(),
            n => format!(" T{n}"),
        };
        println!(
            "v{:<4} {}  {:<12} +{} ~{} -{}{touched}  {:>10}  {}{named}",
            r.version,
            r.time,
            line(r.author.as_bytes()),
            r.stats.files_added,
            r.stats.files_changed,
            r.stats.files_removed,
            human(r.stats.bytes_added),
            line(r.message.as_bytes())
        );
    }
    Ok(())
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

/// The versions in which what `path` names differs from the version before
/// (added, changed or removed there).
fn changed_at(
    repo: &Repo,
    records: Vec<detafs::snapshot::Record>,
    path: &str,
) -> anyhow::Result<Vec<detafs::snapshot::Record>> {
    let path = RelPath::parse(path)?;
    let mut before: Option<Node> = None;
    let mut out = Vec::new();
    for r in records {
        let now = repo.lookup(&r.tree, &path)?;
        let same = match (&before, &now) {
            (Some(a), Some(b)) => a.same(b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            out.push(r);
        }
        before = now;
    }
    Ok(out)
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
            use detafs::snapshot::diff::TreeSource;
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
