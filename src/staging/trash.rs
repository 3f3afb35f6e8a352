//! What a restore or checkout replaced, kept so that it can be brought back
//! (`detafs restore NAME --undo`, `.detafs/undo`, `detafs trash NAME`), as
//! git's reflog keeps what a reset left: staged work, files never committed
//! included, is never discarded beyond recall.
//!
//! An entry holds the staged rows under each path an operation replaced,
//! copied into `trash_nodes` in the same transaction as the change, and
//! their staged copies, linked (a file with other names: copied) into
//! `trash/<entry>/`. An undo puts an entry's rows back where they were
//! taken from and keeps what it replaces as a new entry, so an undo is
//! undone the same way. Entries go once older than the age set, and the
//! oldest go while the trash is over its size; the newest stays whatever
//! its size until its age (it takes no more room than staging did).
//! Commits never make entries: a version is history already.

use super::row::{COLUMNS, bad_row, kind_code, row};
use super::{Kind, ROOT, SNode, Staging, Stale};
use crate::error::{Error, Result};
use crate::repo::Repo;
use crate::store::pack::BlobRef;
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS trash(
    entry INTEGER PRIMARY KEY AUTOINCREMENT, at_s INTEGER NOT NULL, what TEXT NOT NULL,
    tops BLOB NOT NULL, files INTEGER NOT NULL, bytes INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS trash_nodes(
    entry INTEGER NOT NULL, id INTEGER NOT NULL, parent INTEGER NOT NULL, name BLOB NOT NULL,
    kind INTEGER NOT NULL, mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
    mtime_s INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
    chunks BLOB, tree BLOB, upper INTEGER NOT NULL, target BLOB, was BLOB,
    rdev INTEGER NOT NULL, atime_s INTEGER, atime_ns INTEGER, ctime_s INTEGER, ctime_ns INTEGER,
    link INTEGER, grp INTEGER, links_below INTEGER NOT NULL,
    PRIMARY KEY(entry, id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS trash_nodes_parent ON trash_nodes(entry, parent);
";

/// The columns a row is written with, `id` aside (`values`).
const WRITTEN: &str = "parent, name, kind, mode, uid, gid, mtime_s, mtime_ns, size, chunks, tree, upper, target, was, rdev, atime_s, atime_ns, ctime_s, ctime_ns, link, grp, links_below";

/// The bounds the trash is kept within, set per dataset and host
/// (`detafs trash NAME --keep ... --max-size ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub keep_secs: u64,
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            keep_secs: 7 * 24 * 3600,
            max_bytes: 1 << 30,
        }
    }
}

/// One thing that can be brought back.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    pub entry: u64,
    /// When it was kept (seconds since the epoch).
    pub at: i64,
    /// What replaced it: `restore`, `checkout v3`, `undo of 4`.
    pub what: String,
    /// The paths it holds, `.` for the whole dataset.
    pub paths: Vec<String>,
    pub files: u64,
    /// Bytes of the staged copies it keeps (read-through files cost none).
    pub bytes: u64,
}

/// A path an entry was taken from, and its top row there (none: the path
/// held nothing, and an undo removes what is there).
#[derive(Serialize, Deserialize)]
struct Top {
    path: Vec<Vec<u8>>,
    row: Option<u64>,
}

const LIMITS_FILE: &str = "trash.json";

/// The bounds set for the staging area at `dir` (the defaults if none).
pub fn limits(dir: &Path) -> Result<Limits> {
    let path = dir.join(LIMITS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map_err(|e| Error::malformed(path.display(), e))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Limits::default()),
        Err(e) => Err(Error::io(path.display(), e)),
    }
}

/// Sets the bounds of the staging area at `dir`; its owner applies them at
/// its next change or poll.
pub fn set_limits(dir: &Path, limits: Limits) -> Result<()> {
    let path = dir.join(LIMITS_FILE);
    let tmp = dir.join(format!("{LIMITS_FILE}.new"));
    crate::private::create_file(&tmp)
        .and_then(|mut f| {
            use std::io::Write;
            f.write_all(&serde_json::to_vec(&limits).expect("serializable"))
        })
        .map_err(|e| Error::io(tmp.display(), e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(path.display(), e))
}

/// The trash of the staging area at `dir` (its names kept as `sealing`
/// says), newest first, read beside its owner (a mount) as status is.
pub fn list(dir: &Path, sealing: &crate::store::sealed_file::Sealing) -> Result<Vec<Entry>> {
    let db_path = dir.join("staging.sqlite");
    if !db_path.exists() {
        return Ok(Vec::new());
    }
    let db = Connection::open_with_flags(
        &db_path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    super::sealed_names::register(&db, sealing)?;
    entries(&db)
}

fn entries(db: &Connection) -> Result<Vec<Entry>> {
    let exists: bool = db.query_row(
        "SELECT COUNT(*) > 0 FROM sqlite_master WHERE name = 'trash'",
        [],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt = db.prepare(
        "SELECT entry, at_s, what, opened(tops), files, bytes FROM trash ORDER BY entry DESC",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, u64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Vec<u8>>(3)?,
                r.get::<_, u64>(4)?,
                r.get::<_, u64>(5)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(entry, at, what, tops, files, bytes)| {
            Ok(Entry {
                entry,
                at,
                what,
                paths: decode_tops(entry, &tops)?
                    .iter()
                    .map(|t| shown(&t.path))
                    .collect(),
                files,
                bytes,
            })
        })
        .collect()
}

fn decode_tops(entry: u64, tops: &[u8]) -> Result<Vec<Top>> {
    serde_json::from_slice(tops).map_err(|e| Error::malformed(format!("trash entry {entry}"), e))
}

/// A path as the user writes it (`.` for the whole dataset).
fn shown(path: &[Vec<u8>]) -> String {
    match path {
        [] => ".".into(),
        names => crate::escape::line(&names.join(&b'/')).to_string(),
    }
}

/// The insert of a row's `values` into `table_and_first` (a table and its
/// opening parenthesis, with `leading` columns before `WRITTEN`'s).
fn insert_sql(table_and_first: &str, leading: usize) -> String {
    let written = WRITTEN.split(", ").map(|c| match c {
        "name" | "target" => "sealed(?)",
        _ => "?",
    });
    let marks = std::iter::repeat_n("?", leading)
        .chain(written)
        .collect::<Vec<_>>()
        .join(", ");
    format!("INSERT INTO {table_and_first}{WRITTEN}) VALUES ({marks})")
}

/// A row's values in `WRITTEN`'s order, under folder `parent`; a further
/// name of a file (`link`) holds only its name.
fn values(n: &SNode, parent: u64, link: Option<u64>) -> Vec<Value> {
    let json =
        |v: Option<&BlobRef>| v.map(|b| Value::Blob(serde_json::to_vec(b).expect("serializable")));
    let opt = |v: Option<Value>| v.unwrap_or(Value::Null);
    let time = |t: Option<crate::snapshot::Mtime>| match t {
        Some(t) => (Value::Integer(t.0), Value::Integer(t.1.into())),
        None => (Value::Null, Value::Null),
    };
    let (a_s, a_ns) = time(n.atime);
    let (c_s, c_ns) = time(n.ctime);
    let content = link.is_none();
    vec![
        Value::Integer(parent as i64),
        Value::Blob(n.name.clone()),
        Value::Integer(kind_code(n.kind)),
        Value::Integer(if content { n.mode.into() } else { 0 }),
        Value::Integer(n.uid.into()),
        Value::Integer(n.gid.into()),
        Value::Integer(n.mtime.0),
        Value::Integer(n.mtime.1.into()),
        Value::Integer(if content { n.size as i64 } else { 0 }),
        opt(n
            .chunks
            .as_ref()
            .filter(|_| content)
            .map(|c| Value::Blob(serde_json::to_vec(c).expect("serializable")))),
        opt(json(n.tree.as_ref().filter(|_| content))),
        Value::Integer((content && n.upper).into()),
        opt((content && n.kind == Kind::Symlink).then(|| Value::Blob(n.target.clone()))),
        Value::Null,
        Value::Integer(n.rdev as i64),
        a_s,
        a_ns,
        c_s,
        c_ns,
        opt(link.map(|l| Value::Integer(l as i64))),
        opt(n.group.map(|g| Value::Integer(g as i64))),
        Value::Integer(n.links_below.into()),
    ]
}

impl Staging {
    fn trash_dir(&self, entry: u64) -> PathBuf {
        self.dir.join("trash").join(entry.to_string())
    }

    /// Keeps what staging holds at each of `tops` (a path and its row
    /// there, if any) as a new entry, made by `what`; within the caller's
    /// transaction. Nothing is kept when `tops` is empty.
    pub(super) fn keep(&self, what: &str, tops: &[(Vec<Vec<u8>>, Option<SNode>)]) -> Result<()> {
        // A path below another kept one is kept with it.
        let tops: Vec<_> = tops
            .iter()
            .enumerate()
            .filter(|(i, (path, _))| {
                !tops.iter().enumerate().any(|(j, (other, _))| {
                    path.starts_with(other) && (other.len() < path.len() || j < *i)
                })
            })
            .map(|(_, t)| t)
            .collect();
        if tops.is_empty() {
            return Ok(());
        }
        let listed: Vec<Top> = tops
            .iter()
            .map(|(path, n)| Top {
                path: path.clone(),
                row: n.as_ref().map(|n| n.row),
            })
            .collect();
        self.db.execute(
            "INSERT INTO trash(at_s, what, tops, files, bytes) VALUES (?1, ?2, sealed(?3), 0, 0)",
            params![
                crate::snapshot::Mtime::now().0,
                what,
                serde_json::to_vec(&listed).expect("serializable")
            ],
        )?;
        let entry = self.db.last_insert_rowid() as u64;
        let dir = self.trash_dir(entry);
        // A number a failed change took is given again: its files went.
        let _ = std::fs::remove_dir_all(&dir);
        crate::private::create_dir(&dir)?;
        let insert = insert_sql("trash_nodes(entry, id, ", 2);
        // A file's first name kept holds its content; the others, its row.
        let mut first: HashMap<u64, u64> = HashMap::new();
        let (mut files, mut bytes) = (0u64, 0u64);
        let mut todo: Vec<(SNode, u64)> = tops
            .iter()
            .filter_map(|(_, n)| n.clone().map(|n| (n, 0)))
            .collect();
        while let Some((mut n, parent)) = todo.pop() {
            let link = match n.kind {
                Kind::Dir => None,
                _ => first.get(&n.id).copied(),
            };
            if link.is_none() && n.kind != Kind::Dir {
                first.insert(n.id, n.row);
            }
            if n.kind == Kind::Dir && n.tree.is_none() {
                match n.was.take() {
                    // Unchanged since expanded: kept as the subtree it is.
                    Some(was) => n.tree = Some(was),
                    None => todo.extend(self.rows_under(n.id)?.into_iter().map(|c| (c, n.row))),
                }
            }
            if link.is_none() && n.upper {
                let (from, to) = (self.upper_path(n.id), dir.join(n.row.to_string()));
                // The copy stays as it was only if nothing else names it.
                let kept = match self.names(&n)? {
                    1 => std::fs::hard_link(&from, &to),
                    _ => std::fs::copy(&from, &to).map(|_| ()),
                };
                kept.map_err(|e| Error::io(from.display(), e))?;
                files += 1;
                bytes += std::fs::metadata(&to).map_or(0, |m| self.sealing.plain_len(m.len()));
            } else if link.is_none() && n.kind == Kind::File {
                files += 1;
            }
            let mut vals = vec![Value::Integer(entry as i64), Value::Integer(n.row as i64)];
            vals.extend(values(&n, parent, link));
            self.db
                .prepare_cached(&insert)?
                .execute(params_from_iter(vals))?;
        }
        // The kept copies' names are durable before the change is.
        super::sync_dir(&dir)?;
        self.db.execute(
            "UPDATE trash SET files = ?2, bytes = ?3 WHERE entry = ?1",
            params![entry, files, bytes],
        )?;
        Ok(())
    }

    /// What staging holds at `path` that a change there replaces: its
    /// node, or a file (or other non-folder) in the way of its folders,
    /// which making them removes.
    pub(super) fn at_or_in_the_way(
        &self,
        repo: &Repo,
        path: &[Vec<u8>],
    ) -> Result<(Vec<Vec<u8>>, Option<SNode>)> {
        for end in 1..path.len() {
            if let Some(n) = self.find(repo, &path[..end])?
                && n.kind != Kind::Dir
            {
                return Ok((path[..end].to_vec(), Some(n)));
            }
        }
        Ok((path.to_vec(), self.find(repo, path)?))
    }

    /// Brings back trash entry `entry` (None: the newest): each of its
    /// paths holds again what it held when kept; what they hold now is
    /// kept in turn. `base` is the tree of staging's version (the modes of
    /// folders made on the way). Returns what the kernel may keep that this
    /// made stale.
    pub fn undo(
        &self,
        repo: &Repo,
        base: Option<&BlobRef>,
        entry: Option<u64>,
    ) -> Result<Vec<Stale>> {
        let found: Option<(u64, Vec<u8>)> = match entry {
            Some(e) => self
                .db
                .query_row(
                    "SELECT entry, opened(tops) FROM trash WHERE entry = ?1",
                    [e],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?,
            None => self
                .db
                .query_row(
                    "SELECT entry, opened(tops) FROM trash ORDER BY entry DESC LIMIT 1",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?,
        };
        let (entry, tops) = found.ok_or_else(|| {
            Error::InvalidInput(match entry {
                Some(e) => format!("the trash has no entry {e} (detafs trash NAME lists them)"),
                None => "nothing to undo: the trash is empty".into(),
            })
        })?;
        let tops = decode_tops(entry, &tops)?;
        *self.stale.borrow_mut() = Some(Vec::new());
        let done = self.atomically(|| {
            let mut now = Vec::new();
            for t in &tops {
                now.push(self.at_or_in_the_way(repo, &t.path)?);
            }
            self.keep(&format!("undo of {entry}"), &now)?;
            for t in &tops {
                self.put_back(repo, base, entry, t)?;
            }
            self.db
                .execute("DELETE FROM trash_nodes WHERE entry = ?1", [entry])?;
            self.db
                .execute("DELETE FROM trash WHERE entry = ?1", [entry])?;
            Ok(())
        });
        let stale = self.stale.borrow_mut().take().unwrap_or_default();
        done?;
        let _ = std::fs::remove_dir_all(self.trash_dir(entry));
        self.tidy_trash();
        Ok(stale)
    }

    /// Path `top.path` holds what entry `entry` kept of it.
    fn put_back(&self, repo: &Repo, base: Option<&BlobRef>, entry: u64, top: &Top) -> Result<()> {
        let kept = |id: u64| -> Result<SNode> {
            self.db
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM trash_nodes WHERE entry = ?1 AND id = ?2"
                ))?
                .query_row(params![entry, id], row)
                .map_err(|e| bad_row(&format!("trash entry {entry}"), e))
        };
        let (parent, top_row) = match top.path.split_last() {
            None => {
                // The whole dataset: the root row stays (its inode), its
                // content is replaced.
                for child in self.rows_under(ROOT)? {
                    self.delete_subtree(&child)?;
                }
                self.made_stale(Stale::Inode(ROOT));
                let Some(id) = top.row else {
                    return Ok(());
                };
                let old = kept(id)?;
                self.db.execute(
                    "UPDATE nodes SET tree = ?2, was = NULL, mode = ?3, mtime_s = ?4, mtime_ns = ?5, links_below = ?6 WHERE id = ?1",
                    params![ROOT, old.tree.map(|t| serde_json::to_vec(&t).expect("serializable")), old.mode, old.mtime.0, old.mtime.1, old.links_below],
                )?;
                (ROOT, old)
            }
            Some((name, dirs)) => {
                let parent = self.make_dirs(repo, base, dirs)?;
                if let Some(old) = self.lookup(repo, parent, name)? {
                    self.delete_subtree(&old)?;
                }
                self.made_stale(Stale::Name(parent, name.clone()));
                self.changed(parent)?;
                let Some(id) = top.row else {
                    return Ok(());
                };
                let n = kept(id)?;
                let new = self.insert_kept(entry, &n, parent, None)?;
                (new, n)
            }
        };
        if top_row.kind != Kind::Dir || top_row.tree.is_some() {
            return self.expand_links(repo, parent, &top_row);
        }
        // Each kept folder's rows, in the order they were kept; further
        // names of a file once its first is back.
        let mut ids: HashMap<u64, u64> = HashMap::from([(top_row.row, parent)]);
        let mut names = Vec::new();
        let mut todo = vec![top_row.row];
        while let Some(old_dir) = todo.pop() {
            let children = self
                .db
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM trash_nodes WHERE entry = ?1 AND parent = ?2"
                ))?
                .query_map(params![entry, old_dir], row)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(|e| bad_row(&format!("trash entry {entry}"), e))?;
            for c in children {
                if c.link.is_some() {
                    names.push(c);
                    continue;
                }
                let new = self.insert_kept(entry, &c, ids[&old_dir], None)?;
                ids.insert(c.row, new);
                if c.kind == Kind::Dir && c.tree.is_none() {
                    todo.push(c.row);
                } else {
                    self.expand_links(repo, new, &c)?;
                }
            }
        }
        for n in names {
            let (Some(inode), Some(parent)) =
                (n.link.and_then(|l| ids.get(&l)), ids.get(&n.parent))
            else {
                return Err(Error::malformed(
                    format!("trash entry {entry}"),
                    format!("row {} names a file the entry does not hold", n.row),
                ));
            };
            self.insert_kept(entry, &n, *parent, Some(*inode))?;
        }
        Ok(())
    }

    /// A kept row back in staging under folder `parent`, with its staged
    /// copy; returns its new id.
    fn insert_kept(&self, entry: u64, n: &SNode, parent: u64, link: Option<u64>) -> Result<u64> {
        let sql = insert_sql("nodes(", 0);
        self.db
            .prepare_cached(&sql)?
            .execute(params_from_iter(values(n, parent, link)))?;
        let id = self.db.last_insert_rowid() as u64;
        if link.is_none() && n.upper {
            let (from, to) = (
                self.trash_dir(entry).join(n.row.to_string()),
                self.upper_path(id),
            );
            std::fs::hard_link(&from, &to).map_err(|e| Error::io(from.display(), e))?;
        }
        Ok(id)
    }

    /// A folder put back unexpanded with names of a link group below it
    /// is expanded at once, as a version's is (`insert_version_node`).
    fn expand_links(&self, repo: &Repo, id: u64, kept: &SNode) -> Result<()> {
        if kept.kind == Kind::Dir && kept.tree.is_some() && kept.links_below {
            self.expand(repo, &self.node(id)?)?;
        }
        Ok(())
    }

    /// The trash of this staging area, newest first.
    pub fn trash(&self) -> Result<Vec<Entry>> {
        entries(&self.db)
    }

    /// The bounds its trash is kept within.
    pub fn trash_limits(&self) -> Result<Limits> {
        limits(&self.dir)
    }

    /// The file the bounds are set in (`set_limits`).
    pub fn trash_limits_file(&self) -> PathBuf {
        self.dir.join(LIMITS_FILE)
    }

    /// `prune_trash` after a change that already happened, or at open: a
    /// failure to tidy (a limits file that does not decode, say) is told
    /// in the log, never taken for the change's own.
    pub(super) fn tidy_trash(&self) {
        if let Err(e) = self.prune_trash() {
            tracing::warn!("trash of {} not tidied: {e}", self.dataset);
        }
    }

    /// Drops entries beyond the bounds set (`Limits`), and the files of
    /// entries no row holds (a change that failed after keeping them).
    pub fn prune_trash(&self) -> Result<()> {
        let limits = limits(&self.dir)?;
        let now = crate::snapshot::Mtime::now().0;
        let all = self.trash()?;
        let mut total: u64 = all.iter().map(|e| e.bytes).sum();
        let mut doomed = Vec::new();
        // Oldest first; the newest is kept whatever its size.
        for (i, e) in all.iter().enumerate().rev() {
            let old = now.saturating_sub(e.at) as u64 > limits.keep_secs;
            if old || (i > 0 && total > limits.max_bytes) {
                total -= e.bytes;
                doomed.push(e.entry);
            }
        }
        if !doomed.is_empty() {
            self.atomically(|| {
                for e in &doomed {
                    self.db
                        .execute("DELETE FROM trash_nodes WHERE entry = ?1", [e])?;
                    self.db.execute("DELETE FROM trash WHERE entry = ?1", [e])?;
                }
                Ok(())
            })?;
        }
        let kept: std::collections::HashSet<String> =
            self.trash()?.iter().map(|e| e.entry.to_string()).collect();
        let root = self.dir.join("trash");
        if let Ok(dirs) = std::fs::read_dir(&root) {
            for d in dirs.flatten() {
                if !kept.contains(d.file_name().to_string_lossy().as_ref()) {
                    let _ = std::fs::remove_dir_all(d.path());
                }
            }
        }
        Ok(())
    }
}
