//! A staging row: one staged file, directory or symlink, and its strict codec.

use crate::error::Error;
use crate::snapshot::{Mtime, Node, Special};
use crate::store::pack::BlobRef;

/// A row's kind is an entry's (a special file's row holds no data).
pub use crate::snapshot::Kind;

/// One staged file, directory, symlink or special entry, under one of its
/// names: `row` is that name's row, `id` the inode's (the row of its first
/// name, which holds its content; further hard links are rows that point
/// to it and hold only a name).
#[derive(Clone, Debug)]
pub struct SNode {
    pub id: u64,
    pub row: u64,
    pub parent: u64,
    pub name: Vec<u8>,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: Mtime,
    /// Access time, where it is set apart from the mtime (by `utimensat`,
    /// or a version's); else it follows the mtime. Reads leave it, as
    /// with `noatime`.
    pub atime: Option<Mtime>,
    /// Status change time, where it is not the mtime (an upper file's is
    /// also its local file's, whichever is later).
    pub ctime: Option<Mtime>,
    /// Size of a lower file or symlink; upper files are sized by their local file.
    pub size: u64,
    /// File: its chunks in the store, unless copied up.
    pub chunks: Option<Vec<BlobRef>>,
    /// Directory not expanded yet: the version subtree it stands for.
    pub tree: Option<BlobRef>,
    /// Directory expanded (listed) but not changed since: the version
    /// subtree it still equals, so commit and status need not walk it.
    pub was: Option<BlobRef>,
    pub upper: bool,
    pub target: Vec<u8>,
    /// A device's number (0 for everything else).
    pub rdev: u64,
    /// A hard link's row: the inode (row) whose name this is besides.
    pub link: Option<u64>,
    /// A file's link group, kept from the version it came from or given by
    /// its first `link`: the id its names share in versions.
    pub group: Option<u64>,
    /// A folder from a version: a link group has a name below it.
    pub links_below: bool,
}

impl Kind {
    /// The kind of row a version's node becomes.
    pub fn of(node: &Node) -> Kind {
        match node {
            Node::File { .. } => Kind::File,
            Node::Dir { .. } => Kind::Dir,
            Node::Symlink { .. } => Kind::Symlink,
            Node::Special { kind, .. } => Kind::Special(*kind),
        }
    }
}

impl SNode {
    /// A file not copied up: its chunks in the store. A row without them
    /// (NULL: a file whose bytes are its local copy, made in staging or
    /// copied up) has no stored bytes: read from the store, it is empty.
    pub fn stored_chunks(&self) -> &[BlobRef] {
        self.chunks.as_deref().unwrap_or_default()
    }

    /// The node as it would appear in a version, if it can be said without
    /// reading local data (upper files and expanded directories cannot);
    /// its link group is the commit's to tell.
    pub(crate) fn as_version_node(&self) -> Option<Node> {
        let atime = Node::atime_apart(self.atime, self.mtime);
        match self.kind {
            Kind::File if !self.upper => Some(Node::File {
                mode: self.mode,
                mtime: self.mtime,
                size: self.size,
                chunks: self.stored_chunks().to_vec(),
                atime,
                link: None,
                erased: false,
            }),
            Kind::Dir => self.tree.or(self.was).map(|tree| Node::Dir {
                mode: self.mode,
                mtime: self.mtime,
                tree,
                atime,
                links: self.links_below,
            }),
            Kind::Symlink => Some(Node::Symlink {
                mtime: self.mtime,
                target: self.target.clone(),
                atime,
                link: None,
            }),
            Kind::Special(kind) => Some(Node::Special {
                kind,
                mode: self.mode,
                mtime: self.mtime,
                rdev: self.rdev,
                atime,
                link: None,
            }),
            Kind::File => None,
        }
    }
}

/// The version of `SCHEMA` with `ADDED_COLUMNS` (`crate::schema`).
pub const SCHEMA_VERSION: u32 = 1;

pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS nodes(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    parent INTEGER NOT NULL, name BLOB NOT NULL,
    kind INTEGER NOT NULL, mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
    mtime_s INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
    chunks BLOB, tree BLOB, upper INTEGER NOT NULL DEFAULT 0, target BLOB, was BLOB,
    rdev INTEGER NOT NULL DEFAULT 0,
    atime_s INTEGER, atime_ns INTEGER, ctime_s INTEGER, ctime_ns INTEGER,
    link INTEGER, grp INTEGER, links_below INTEGER NOT NULL DEFAULT 0,
    UNIQUE(parent, name));
CREATE TABLE IF NOT EXISTS conflicts(
    path BLOB PRIMARY KEY, theirs INTEGER NOT NULL, mark TEXT) WITHOUT ROWID;
";

pub const COLUMNS: &str = "id, parent, opened(name), kind, mode, uid, gid, mtime_s, mtime_ns, size, chunks, tree, upper, opened(target), was, rdev, atime_s, atime_ns, ctime_s, ctime_ns, link, grp, links_below";

/// Columns added after the first staging areas were made, with their
/// definitions: `Staging::open` adds those a database lacks.
pub const ADDED_COLUMNS: [(&str, &str); 9] = [
    ("was", "BLOB"),
    ("rdev", "INTEGER NOT NULL DEFAULT 0"),
    ("atime_s", "INTEGER"),
    ("atime_ns", "INTEGER"),
    ("ctime_s", "INTEGER"),
    ("ctime_ns", "INTEGER"),
    ("link", "INTEGER"),
    ("grp", "INTEGER"),
    ("links_below", "INTEGER NOT NULL DEFAULT 0"),
];

pub(super) fn kind_code(k: Kind) -> i64 {
    match k {
        Kind::File => 0,
        Kind::Dir => 1,
        Kind::Symlink => 2,
        Kind::Special(Special::Fifo) => 3,
        Kind::Special(Special::Socket) => 4,
        Kind::Special(Special::Char) => 5,
        Kind::Special(Special::Block) => 6,
    }
}

/// Decodes a row, strictly: a row that does not decode is an error naming
/// its column, never read as an empty file or a symlink.
pub fn row(r: &rusqlite::Row) -> rusqlite::Result<SNode> {
    let bad = |i: usize, why: String| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Blob, why.into())
    };
    fn json<T: serde::de::DeserializeOwned>(
        r: &rusqlite::Row,
        i: usize,
    ) -> rusqlite::Result<Option<T>> {
        r.get::<_, Option<Vec<u8>>>(i)?
            .map(|b| {
                serde_json::from_slice(&b).map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        i,
                        rusqlite::types::Type::Blob,
                        Box::new(e),
                    )
                })
            })
            .transpose()
    }
    let kind = match r.get::<_, i64>(3)? {
        0 => Kind::File,
        1 => Kind::Dir,
        2 => Kind::Symlink,
        3 => Kind::Special(Special::Fifo),
        4 => Kind::Special(Special::Socket),
        5 => Kind::Special(Special::Char),
        6 => Kind::Special(Special::Block),
        k => return Err(bad(3, format!("unknown node kind {k}"))),
    };
    let mode: u32 = r.get(4)?;
    if mode > 0o7777 {
        return Err(bad(4, format!("mode {mode:#o}")));
    }
    let time = |s: usize| -> rusqlite::Result<Option<Mtime>> {
        let t = match (r.get::<_, Option<i64>>(s)?, r.get::<_, Option<u32>>(s + 1)?) {
            (Some(secs), Some(ns)) => Mtime(secs, ns),
            (None, None) => return Ok(None),
            _ => return Err(bad(s, "half a time".into())),
        };
        if !t.storable() {
            return Err(bad(s, "time out of range".into()));
        }
        Ok(Some(t))
    };
    let mtime = time(7)?.ok_or_else(|| bad(7, "no mtime".into()))?;
    Ok(SNode {
        id: r.get(0)?,
        row: r.get(0)?,
        parent: r.get(1)?,
        name: r.get(2)?,
        kind,
        mode,
        uid: r.get(5)?,
        gid: r.get(6)?,
        mtime,
        size: r.get(9)?,
        chunks: json(r, 10)?,
        tree: json(r, 11)?,
        was: json(r, 14)?,
        upper: r.get(12)?,
        target: r.get::<_, Option<Vec<u8>>>(13)?.unwrap_or_default(),
        rdev: r.get::<_, i64>(15)? as u64,
        atime: time(16)?,
        ctime: time(18)?,
        link: r.get(20)?,
        group: r.get::<_, Option<i64>>(21)?.map(|g| g as u64),
        links_below: r.get(22)?,
    })
}

/// A row that does not decode is named, not passed on as a bare SQLite error.
pub(super) fn bad_row(which: &str, e: rusqlite::Error) -> Error {
    match e {
        rusqlite::Error::FromSqlConversionFailure(col, _, why) => Error::malformed(
            format!("staging row ({which})"),
            format!("column {col}: {why}"),
        ),
        other => Error::Index(other),
    }
}
