//! `detafs diff`: what changed between two versions, or between a version
//! and staging; as a list, with sizes (`--stat`), or as a unified diff of
//! text files (`-u`, which `patch -p1` applies).

use super::mount::{self, Owner};
use anyhow::{Context, bail};
use detafs::escape::line;
use detafs::repo::Repo;
use detafs::snapshot::diff::{self as tree_diff, ChangeKind};
use detafs::snapshot::{Mtime, Node};
use detafs::staging::compare::{Delta, Side, StagedFile, StagedView, against_staging};
use detafs::store::pack::BlobRef;
use detafs::{Error, read};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Names staging wherever a version is accepted in `diff`.
pub const STAGING: &str = "staging";

/// Text files larger than this are not diffed line by line.
const MAX_TEXT: u64 = 16 << 20;

/// How `diff` prints.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Names,
    Stat,
    Patch,
    Json,
}

/// The format flags of `diff`.
#[derive(clap::Args)]
pub struct Asked {
    /// Summary with sizes.
    #[arg(long, conflicts_with = "patch")]
    stat: bool,
    /// Text files line by line, as `diff -u` (binary files as one line).
    #[arg(short = 'u', long = "patch")]
    patch: bool,
    /// One JSON array: change, path, old_size, new_size.
    #[arg(long, conflicts_with_all = ["stat", "patch"])]
    json: bool,
}

impl Asked {
    pub fn format(&self) -> Format {
        match (self.stat, self.patch, self.json) {
            (true, _, _) => Format::Stat,
            (_, true, _) => Format::Patch,
            (_, _, true) => Format::Json,
            _ => Format::Names,
        }
    }
}

pub fn diff(
    repo: &Repo,
    staging_base: &Path,
    name: &str,
    from: &str,
    to: &str,
    format: Format,
    content_only: bool,
) -> anyhow::Result<()> {
    let mut deltas: Vec<Delta> = match (from == STAGING, to == STAGING) {
        (true, true) => bail!("diff compares staging with a version: name one, e.g. `latest`"),
        (false, false) => {
            let (a, b) = (repo.version(name, from)?, repo.version(name, to)?);
            tree_diff::diff(repo, Some(&a.tree), Some(&b.tree))?
                .into_iter()
                .map(|c| Delta {
                    path: c.path,
                    kind: c.kind,
                    old: c.old.map(Side::Node),
                    new: c.new.map(Side::Node),
                })
                .collect()
        }
        (false, true) => with_staging(repo, staging_base, name, from)?,
        (true, false) => with_staging(repo, staging_base, name, to)?
            .into_iter()
            .map(reversed)
            .collect(),
    };
    if content_only {
        deltas.retain(|d| d.kind != ChangeKind::TimeOnly);
    }
    let mut out = std::io::stdout().lock();
    match format {
        Format::Names => {
            for d in &deltas {
                writeln!(out, "{} {}", d.kind.letter(), line(&d.path))?;
            }
        }
        Format::Stat => stat(&mut out, &deltas)?,
        Format::Json => {
            let rows: Vec<_> = deltas
                .iter()
                .map(|d| {
                    serde_json::json!({
                        "change": d.kind.letter().to_string(),
                        "path": line(&d.path),
                        "old_size": d.old.as_ref().map(Side::size),
                        "new_size": d.new.as_ref().map(Side::size),
                    })
                })
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        }
        Format::Patch => {
            for d in &deltas {
                patch(repo, &mut out, d)?;
            }
        }
    }
    Ok(())
}

fn reversed(d: Delta) -> Delta {
    Delta {
        kind: match d.kind {
            ChangeKind::Added => ChangeKind::Removed,
            ChangeKind::Removed => ChangeKind::Added,
            same => same,
        },
        old: d.new,
        new: d.old,
        path: d.path,
    }
}

fn with_staging(
    repo: &Repo,
    staging_base: &Path,
    name: &str,
    version: &str,
) -> anyhow::Result<Vec<Delta>> {
    repo.check_dataset(name)?;
    let record = repo.version(name, version)?;
    match mount::open_staging(repo, staging_base, name)? {
        Owner::Here(st) => Ok(against_staging(repo, &record.tree, &(&*st, repo))?),
        Owner::Mount(mp) => {
            // Staging may move on while it is read: the version it is built
            // on must be the same before and after.
            for _ in 0..5 {
                let view = Mounted::new(repo, name, &mp)?;
                let deltas = against_staging(repo, &record.tree, &view)?;
                if Mounted::new(repo, name, &mp)?.base == view.base {
                    return Ok(deltas);
                }
            }
            bail!(
                "staging at {} kept moving to newer versions; try again",
                mp.display()
            )
        }
    }
}

/// Staging served by the mount at `mp`, read through its files.
struct Mounted {
    mp: PathBuf,
    base: Option<BlobRef>,
}

impl Mounted {
    fn new(repo: &Repo, name: &str, mp: &Path) -> anyhow::Result<Mounted> {
        let file = mp.join(".detafs/base");
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let version = match text.trim() {
            "none" => 0,
            v => detafs::repo::tag::version_name(v.as_bytes())
                .with_context(|| format!("{} holds {text:?}, not a version", file.display()))?,
        };
        let base = repo
            .sync(name)?
            .into_iter()
            .find(|r| r.version == version)
            .map(|r| r.tree);
        Ok(Mounted {
            mp: mp.to_path_buf(),
            base,
        })
    }
}

impl StagedView for Mounted {
    fn base(&self) -> detafs::Result<Option<BlobRef>> {
        Ok(self.base)
    }

    fn changed(&self) -> detafs::Result<Vec<(char, Vec<u8>)>> {
        mount::mount_status(&self.mp).map_err(|e| Error::InvalidInput(format!("{e:#}")))
    }

    fn at(&self, path: &[u8]) -> detafs::Result<Option<Side>> {
        let full = self
            .mp
            .join("staging")
            .join(std::ffi::OsStr::from_bytes(path));
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(full.display(), e)),
        };
        // Read through the mount: staging's times (reads move no atime).
        let mtime = Mtime::of_stat(meta.mtime(), meta.mtime_nsec());
        let atime = Mtime::of_stat(meta.atime(), meta.atime_nsec());
        Ok(if meta.is_symlink() {
            let target = std::fs::read_link(&full).map_err(|e| Error::io(full.display(), e))?;
            Some(Side::Node(Node::Symlink {
                mtime,
                target: target.into_os_string().into_encoded_bytes(),
                atime: Node::atime_apart(Some(atime), mtime),
                link: None,
            }))
        } else if meta.is_file() {
            Some(Side::File(StagedFile {
                path: full,
                sealing: Default::default(),
                mode: meta.mode() & 0o7777,
                size: meta.len(),
                mtime,
                atime,
            }))
        } else {
            Node::special_of(&meta, mtime, Some(atime)).map(Side::Node)
        })
    }
}

fn stat(out: &mut impl Write, deltas: &[Delta]) -> std::io::Result<()> {
    let (mut plus, mut minus) = (0u64, 0u64);
    for d in deltas {
        let old = d.old.as_ref().map_or(0, Side::size);
        let new = d.new.as_ref().map_or(0, Side::size);
        plus += new.saturating_sub(old);
        minus += old.saturating_sub(new);
        writeln!(
            out,
            "{} {:>12} -> {:<12} {}",
            d.kind.letter(),
            old,
            new,
            line(&d.path)
        )?;
    }
    let count = |k| deltas.iter().filter(|d| d.kind == k).count();
    writeln!(
        out,
        "{} files changed: {} added, {} modified, {} removed, {} in time only; +{} -{} bytes",
        deltas.len(),
        count(ChangeKind::Added),
        count(ChangeKind::Modified),
        count(ChangeKind::Removed),
        count(ChangeKind::TimeOnly),
        plus,
        minus
    )
}

/// One path as `diff -u` shows it; binary or very large files, and
/// changes of mode or time only, as one line.
fn patch(repo: &Repo, out: &mut impl Write, d: &Delta) -> anyhow::Result<()> {
    let old = d.old.as_ref().map(|s| text(repo, s)).transpose()?;
    let new = d.new.as_ref().map(|s| text(repo, s)).transpose()?;
    let old_name = header_name("a/", &d.path, d.old.as_ref());
    let new_name = header_name("b/", &d.path, d.new.as_ref());
    let (old_text, new_text) = match (&old, &new) {
        (Some(None), _) | (_, Some(None)) => {
            let name = |side: &Option<Side>, prefix| match side {
                Some(_) => quoted(prefix, &d.path),
                None => "/dev/null".to_string(),
            };
            writeln!(
                out,
                "Binary files {} and {} differ",
                name(&d.old, "a/"),
                name(&d.new, "b/")
            )?;
            return Ok(());
        }
        (o, n) => (o.clone().flatten(), n.clone().flatten()),
    };
    if old.is_some() && new.is_some() && old_text == new_text {
        writeln!(
            out,
            "Files {} and {} differ in mode or time only",
            quoted("a/", &d.path),
            quoted("b/", &d.path)
        )?;
        return Ok(());
    }
    let (old_text, new_text) = (old_text.unwrap_or_default(), new_text.unwrap_or_default());
    if old_text.is_empty() && new_text.is_empty() {
        // An empty file added or removed: no line to show.
        writeln!(out, "--- {old_name}\n+++ {new_name}")?;
        return Ok(());
    }
    similar::TextDiff::configure()
        .timeout(std::time::Duration::from_secs(10))
        .diff_lines(old_text.as_str(), new_text.as_str())
        .unified_diff()
        .context_radius(3)
        .header(&old_name, &new_name)
        .to_writer(&mut *out)?;
    Ok(())
}

/// A file header as `diff -u` writes it: name, tab, time (what tells
/// `patch` where a name with spaces ends).
fn header_name(prefix: &str, path: &[u8], side: Option<&Side>) -> String {
    let (name, mtime) = match side {
        Some(s) => (quoted(prefix, path), s.mtime()),
        None => ("/dev/null".to_string(), Mtime(0, 0)),
    };
    let t = std::time::UNIX_EPOCH
        + std::time::Duration::new(mtime.0.max(0) as u64, mtime.1.min(999_999_999));
    let t = humantime::format_rfc3339_nanos(t).to_string();
    format!(
        "{name}\t{} +0000",
        t.replace('T', " ").trim_end_matches('Z')
    )
}

/// `prefix` and `path`, in double quotes with C escapes when the path
/// needs escaping (as `patch` reads them).
fn quoted(prefix: &str, path: &[u8]) -> String {
    let name = line(path);
    if matches!(name, std::borrow::Cow::Borrowed(_)) && !name.contains('"') {
        return format!("{prefix}{name}");
    }
    format!("\"{prefix}{}\"", name.replace('"', "\\\""))
}

/// A side's content as text: `None` when it is binary (a NUL byte or not
/// UTF-8) or larger than `MAX_TEXT`; a symlink is its target.
fn text(repo: &Repo, side: &Side) -> anyhow::Result<Option<String>> {
    if side.size() > MAX_TEXT {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    match side {
        Side::Node(Node::File { chunks, .. }) => read::read_file(repo, chunks, &mut bytes)?,
        Side::Node(Node::Symlink { target, .. }) => bytes.extend_from_slice(target),
        Side::Node(Node::Dir { .. } | Node::Special { .. }) => {}
        Side::File(f) => {
            f.sealing
                .open(&f.path)
                .and_then(|file| file.reader().take(MAX_TEXT + 1).read_to_end(&mut bytes))
                .with_context(|| format!("cannot read {}", f.path.display()))?;
        }
    }
    if bytes.len() as u64 > MAX_TEXT || bytes.contains(&0) {
        return Ok(None);
    }
    Ok(String::from_utf8(bytes).ok())
}
